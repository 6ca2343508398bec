"""The small public-domain corpus shipped inside bertjax, and the WordPiece vocab learned from it.

Shakespeare's 38 plays (a scene is a document) and the King James Bible (a chapter is a
document) in create_pretraining_data's input format: one sentence per line, a blank line
between documents, gzip-compressed. Every 50th document is held out as the eval split. The
lower-case vocab (8192 entries) was learned from the train split. All of it is made by
launch/build_corpus.py, whose docstring gives the figures; manifest.json holds the counts.
"""

import dataclasses
import json
import pathlib  # local: the package's own corpus

from absl import logging

from bertjax import files
from bertjax.text import corpus_lines

NAME = 'shakespeare_kjv'
SPLITS = ('train', 'eval')
VOCAB_SIZE = 8192
DO_LOWER_CASE = True


def corpus_dir() -> pathlib.Path:  # local: package data
  """The folder of the embedded corpus inside the installed package (always local)."""
  return pathlib.Path(__file__).resolve().parent / 'corpus'  # local: package data


def file_name(split: str = 'train') -> str:
  """The file name of one split ('train' or 'eval')."""
  if split not in SPLITS:
    raise ValueError(f'split={split!r} is unknown; valid: {", ".join(SPLITS)}')
  return f'{NAME}.txt.gz' if split == 'train' else f'{NAME}_{split}.txt.gz'


def corpus_path(split: str = 'train') -> pathlib.Path:  # local: package data
  """The gzip-compressed text of one split ('train' or 'eval')."""
  path = corpus_dir() / file_name(split)
  if not path.is_file():
    raise FileNotFoundError(f'{path} is missing: the package was installed without its data '
                            '(package-data in pyproject.toml), or run launch/build_corpus.py')
  return path


def vocab_path() -> pathlib.Path:  # local: package data
  """The lower-case WordPiece vocab.txt learned from the train split."""
  return corpus_dir() / 'vocab.txt'


def manifest() -> dict:
  """The counts recorded by launch/build_corpus.py (documents, sentences, words, bytes)."""
  path = corpus_dir() / 'manifest.json'
  return json.loads(path.read_text(encoding='utf-8'))  # local: package data


def read_documents(path):
  """Yields the documents (lists of sentences) of a file in create_pretraining_data's format."""
  sentences = []
  for line in corpus_lines.read_lines(path):
    if line:
      sentences.append(line)
    elif sentences:
      yield sentences
      sentences = []
  if sentences:
    yield sentences


def documents(split: str = 'train'):
  """Yields the documents of one split of the embedded corpus."""
  return read_documents(corpus_path(split))


# Settings a report written before they existed lacks, as the files were made then: NSP pairs
# and one instance per row (before 2026-11-24); its masking is file_set.masking_made's. A
# report without shard sizes (output_bytes, before 2026-11-23) is kept for a resumed run too.
_BEFORE_RECORDED = {'nsp': True, 'max_instances_per_row': 1}


def _complete(report, pattern, settings, resumed: bool = False) -> bool:
  """True when the report exists with these settings and its shards agree with it. A resumed
  run (`resumed`) keeps the files an older bertjax made for it, read with the settings they
  were made with (_BEFORE_RECORDED): remade, it would read on in other examples."""
  from bertjax.records import file_set  # pylint: disable=g-import-not-at-top
  try:
    recorded = json.loads(files.read_text(report))
  except (OSError, ValueError):
    return False
  wanted = dataclasses.asdict(settings)
  made = dict(recorded.get('settings', {}))
  if resumed:
    made = {**_BEFORE_RECORDED, **made, 'masking': file_set.masking_made(made)}
  if {k: made.get(k) for k in wanted} != wanted:
    return False
  if 'output_bytes' not in recorded and not resumed:  # Shard sizes unchecked: remade for a
    return False  # new run; a resumed one (begun before 2026-11-23) reads on in its own.
  try:
    return bool(file_set.resolve(pattern).reports)
  except (ValueError, FileNotFoundError):
    return False


def pretraining_files(directory, *, max_seq_length: int, max_predictions_per_seq: int,
                      dupe_factor: int, static_masking: bool = True,
                      nsp: bool = True, max_instances_per_row: int = 1,
                      masking: str = 'wordpiece',
                      masked_lm_prob: float = 0.15, resumed: bool = False) -> tuple[str, str]:
  """(train, eval) TFRecord globs of the embedded corpus under `directory`, made if absent.

  Files are reused when their JSON report records the same settings and the shards agree with
  it, and remade otherwise (after a killed creation, too). `masking` and `masked_lm_prob` are
  the static masks' (unmasked files for dynamic masking ignore them). A resumed run (`resumed`)
  keeps files an older bertjax made with these settings (_complete).
  Process 0 writes (multi-host needs a shared directory); the caller makes the others wait for
  it (pretrain.phases' caller: hosts.fail_together, which stops them all if the writing fails).
  """
  import jax  # pylint: disable=g-import-not-at-top

  from bertjax.pretraining_data import instances  # pylint: disable=g-import-not-at-top
  from bertjax.pretraining_data import writer  # pylint: disable=g-import-not-at-top

  directory = str(directory)
  settings = instances.Settings(
      max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions_per_seq,
      dupe_factor=dupe_factor, static_masking=static_masking, nsp=nsp,
      max_instances_per_row=max_instances_per_row,
      **({'masking': masking, 'masked_lm_prob': masked_lm_prob} if static_masking else {}))
  masks = ('static' + ('' if settings.masking == 'wordpiece' else f'-{settings.masking}')
           + ('' if settings.masked_lm_prob == 0.15 else f'-p{settings.masked_lm_prob:g}')
           if static_masking else 'dynamic')
  tag = (f'{NAME}-{max_seq_length}-{max_predictions_per_seq}-{masks}' + ('' if nsp else '-mlm')
         + (f'-pack{max_instances_per_row}' if max_instances_per_row > 1 else ''))
  # The eval split is small (39 documents): two passes give ~1k instances for steadier figures.
  plans = {'train': (settings, 4), 'eval': (dataclasses.replace(settings, dupe_factor=2), 1)}
  globs = {}
  for split, (split_settings, shards) in plans.items():
    prefix = files.join(directory, f'{tag}-{split}')
    report_path = f'{prefix}.json'
    if jax.process_index() == 0 and not _complete(report_path, f'{prefix}-*-of-*',
                                                  split_settings, resumed):
      files.makedirs(directory)
      report = writer.create(str(corpus_path(split)), prefix, split_settings,
                             vocab_file=str(vocab_path()), do_lower_case=DO_LOWER_CASE,
                             num_output_shards=shards, num_workers=min(shards, 2),
                             report_file=report_path, overwrite=True)  # Its own cache.
      logging.info('made the embedded corpus\'s %s TFRecords: %d instances in %.1f s (%s)',
                   split, report['counts']['instances'], report['seconds'], directory)
    globs[split] = f'{prefix}-*-of-*'
  return globs['train'], globs['eval']
