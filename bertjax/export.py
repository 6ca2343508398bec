"""Export a model to the formats other tools load.

  python -m bertjax.export --from=<bertjax workdir | workdir/checkpoints/N | transformers dir |
      TF1 checkpoint> --format=hf|tf1|saved_model --output=DIR

  hf           a transformers directory (config.json, model.safetensors, vocab and tokenizer files):
               BertModel, BertForPreTraining, BertForSequenceClassification (classification and
               regression), BertForQuestionAnswering, BertForTokenClassification or
               BertForMultipleChoice, as the model is for. A vocab padded for tensor
               parallelism is cut back to the vocab file.
  tf1          google-research/bert's layout: bert_config.json, bert_model.ckpt.*, vocab.txt
               (encoders, pre-training heads, run_classifier.py and run_squad.py heads).
  saved_model  a TensorFlow SavedModel with the WordPiece tokenizer inside: serving_default
               takes raw strings (and pairs for pair tasks) and returns what the model is for.

The output is written into a hidden folder beside DIR and renamed into place when complete, so a
crash or a full disk never leaves a half-written DIR; an existing non-empty DIR is replaced only
with --overwrite.
"""

import json
import os
import pathlib
import shutil
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

from bertjax import console  # noqa: E402
from bertjax import paths  # noqa: E402
from bertjax.interop import bundle as bundle_lib  # noqa: E402
from bertjax.interop import hf_checkpoint  # noqa: E402
from bertjax.interop import sources  # noqa: E402
from bertjax.interop import tf1_checkpoint  # noqa: E402
from bertjax.text import tokenizer  # noqa: E402

FORMATS = tuple(bundle_lib.FORMAT_KINDS)
# Written last into every export: the files it wrote. --overwrite replaces a folder only when it
# holds this manifest and nothing else than the files it lists (never a model downloaded by
# hand, a run, or a user's notes added to an export).
MANIFEST = '.bertjax_export_manifest.json'


def _check_kind(result: bundle_lib.Bundle, fmt: str):
  why = bundle_lib.cannot_hold(fmt, result.kind, result.pooling)
  if why is not None:
    can = bundle_lib.formats_for(result.kind, result.pooling)
    fix = f'use --format={" or --format=".join(can)}' if can else 'no format holds it'
    if result.kind in bundle_lib.POOLED_HEADS and result.pooling != 'cls':
      fix += ', or fine-tune with --config.pooling=cls for every format'
    raise ValueError(f'{result.source} is a {result.kind} model; {why}: {fix}.')
  if fmt == 'tf1' and result.pooling != 'cls':
    logging.warning('%s is %s-pooled: in google-research/bert, %s-pool get_sequence_output() '
                    'over the input mask (get_pooled_output() is the [CLS] pooler)',
                    result.source, result.pooling, result.pooling)


def _check_casing(result: bundle_lib.Bundle):
  if result.vocab_file:
    tokenizer.validate_case_matches_vocab(
        tokenizer.load_vocab(result.vocab_file), result.do_lower_case,
        f'vocab file {result.vocab_file}')


def _writer(fmt: str):
  if fmt == 'hf':
    return hf_checkpoint.save
  if fmt == 'tf1':
    return _save_tf1
  from bertjax.interop import saved_model  # pylint: disable=g-import-not-at-top
  return saved_model.save


def _save_tf1(result: bundle_lib.Bundle, output: pathlib.Path):
  tf1_checkpoint.save(result, output)
  if result.vocab_file:
    shutil.copyfile(result.vocab_file, output / 'vocab.txt')
  # What google-research/bert's scripts are told by flags, kept for bertjax's importer.
  (output / 'bertjax_export.json').write_text(json.dumps(
      {'kind': result.kind, 'labels': list(result.labels), 'pooling': result.pooling,
       'do_lower_case': result.do_lower_case, 'max_seq_length': result.max_seq_length},
      indent=2) + '\n')


def _run_around(path: pathlib.Path) -> pathlib.Path | None:
  """The bertjax run folder `path` is or is inside, if any."""
  for folder in (path, *path.parents):
    if (folder / 'checkpoints').is_dir() and (folder / 'config.json').is_file():
      return folder
  return None


def _files(folder: pathlib.Path) -> set:
  return {str(p.relative_to(folder)) for p in folder.rglob('*') if not p.is_dir()}


def check_output(output: pathlib.Path, overwrite: bool, source: str = ''):
  """Refuses, before anything is read or written, an --output that would lose something: the
  source itself, a folder inside or around it, a bertjax run or a folder inside one, or (without
  --overwrite) any non-empty folder; --overwrite replaces only what an earlier export wrote."""
  if output.exists() and not output.is_dir():
    raise FileExistsError(f'--output={output} is a file: pass a directory.')
  if source and '://' not in source:
    src = pathlib.Path(source)
    src = src.parent if not src.exists() else src  # A TF1 prefix: its folder.
    src, out = src.resolve(), output.resolve()
    if out == src or src in out.parents or out in src.parents:
      where = 'is' if out == src else 'is inside' if src in out.parents else 'holds'
      raise FileExistsError(f'--output={output} {where} the source {source}: an export is '
                            f'written beside its source, never over or around it; pass e.g. '
                            f'--output={src.parent / (src.name + "_export")}.')
  if (run := _run_around(output.resolve())) is not None:
    raise FileExistsError(f'--output={output} is {"" if run == output.resolve() else "inside "}'
                          f'the bertjax run {run}: an export is never written into a run; '
                          'choose a directory outside it.')
  if not output.is_dir() or not any(output.iterdir()):
    return
  if not overwrite:
    raise FileExistsError(f'--output={output} exists and is not empty: pass --overwrite to '
                          'replace it, or choose another directory.')
  try:
    listed = set(json.loads((output / MANIFEST).read_text())['files'])
  except (OSError, ValueError, KeyError, TypeError):
    raise FileExistsError(f'--output={output} was not written by bertjax.export (no {MANIFEST}): '
                          '--overwrite replaces only an earlier export; choose another '
                          'directory, or empty it yourself.') from None
  extra = sorted(_files(output) - listed - {MANIFEST})
  if extra:
    raise FileExistsError(f'--output={output} holds files the earlier export did not write '
                          f'({", ".join(extra[:5])}): --overwrite would delete them; move them '
                          'out, or choose another directory.')


def _write_manifest(folder: pathlib.Path, fmt: str, source: str):
  files = sorted(_files(folder))
  (folder / MANIFEST).write_text(json.dumps({'format': fmt, 'source': source, 'files': files},
                                            indent=1) + '\n')
  for name in files:  # Some writers (safetensors) create 0600 files: as readable as the rest.
    path = folder / name
    path.chmod(path.stat().st_mode | (0o644 & ~_umask()))


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def export(source, fmt: str, output, *, overwrite: bool = False, vocab_file: str = '',
           do_lower_case: bool | None = None, max_seq_length: int = 0,
           labels: tuple = ()) -> pathlib.Path:
  """Writes the model at `source` to `output` in format `fmt`; returns the output directory."""
  if fmt not in FORMATS:
    raise ValueError(f'--format={fmt!r} is unknown; valid: {", ".join(FORMATS)}.')
  output = pathlib.Path(paths.absolute(str(output)))
  sources.format_of(paths.absolute(str(source)))  # A source that does not exist, named first.
  check_output(output, overwrite, paths.absolute(str(source)))
  result = sources.load(paths.absolute(str(source)), vocab_file=vocab_file,
                        do_lower_case=do_lower_case)
  _check_kind(result, fmt)
  _check_casing(result)
  if labels:
    if len(labels) != len(result.labels):
      raise ValueError(f'--labels names {len(labels)} classes but the model has '
                       f'{len(result.labels)}.')
    if tuple(labels) != tuple(result.labels) and result.labels_named:
      raise ValueError(f'{result.source} records its labels {list(result.labels)} (class 0 '
                       f'first): --labels={",".join(labels)} would rename or reorder them; drop '
                       '--labels.')
    result.labels = tuple(labels)
  if max_seq_length and fmt != 'saved_model':
    raise ValueError('--max_seq_length is the SavedModel\'s padded length: hf and tf1 keep no '
                     'length; drop it.')
  if max_seq_length:
    result.max_seq_length = max_seq_length
  output.parent.mkdir(parents=True, exist_ok=True)
  temp = output.parent / f'.{output.name}.export-{os.getpid()}-{time.time_ns()}'
  temp.mkdir()
  try:
    with console.temporary(temp):  # Ctrl-C removes it: nothing half-written is left.
      _writer(fmt)(result, temp)
      _write_manifest(temp, fmt, result.source)
    if output.exists():
      old = output.parent / f'.{output.name}.replaced-{os.getpid()}'
      output.rename(old)
      temp.rename(output)
      shutil.rmtree(old)
    else:
      temp.rename(output)
  finally:
    if temp.exists():
      shutil.rmtree(temp, ignore_errors=True)
  logging.info('exported %s (%s, %d layers) to %s as %s', result.source, result.kind,
               result.config['num_layers'], output, fmt)
  return output


FLAGS = flags.FLAGS


def _define_flags():
  """Flags exist only when this module is the program (tests import the library part)."""
  flags.DEFINE_string('from', None, 'The model: a bertjax workdir or checkpoint, a '
                              'transformers BERT directory or an original TF checkpoint.')
  flags.DEFINE_enum('format', None, FORMATS, 'What to write.')
  flags.DEFINE_string('output', None, 'The directory to write.')
  flags.DEFINE_bool('overwrite', False, 'Replace a non-empty --output.')
  flags.DEFINE_string('vocab_file', '', 'The vocab, where the source has none beside it.')
  # A bool flag as the original's (--do_lower_case=False, --nodo_lower_case, ...); unset = the
  # casing the source records.
  flags.DEFINE_bool('do_lower_case', None, 'Override the casing the source records.')
  flags.DEFINE_integer('max_seq_length', 0, 'saved_model: the padded length (0 = the '
                              'length the model was fine-tuned with, else 128).', lower_bound=0)
  flags.DEFINE_list('labels', [], 'Class names, for a classifier whose source has none '
                              '(a TF1 run_classifier.py checkpoint).')


def main(argv):
  if len(argv) > 1:  # `predict --workdir=RUN in.txt` would otherwise read stdin and wait.
    raise app.UsageError(f'unexpected arguments {argv[1:]}: every input is a --flag '
                         '(--input_file=..., --output_file=...).')
  console.install()
  console.exit_on_interrupt(console.nothing_written(
      'nothing was written (an export is renamed into place only when complete)'))
  try:
    out = export(FLAGS['from'].value, FLAGS.format, FLAGS.output,
                 overwrite=FLAGS.overwrite, vocab_file=FLAGS.vocab_file,
                 do_lower_case=FLAGS.do_lower_case,
                 max_seq_length=FLAGS.max_seq_length, labels=tuple(FLAGS.labels))
  except (ValueError, FileNotFoundError, FileExistsError, OSError) as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(1)
  print(f'wrote {out}')


if __name__ == '__main__':
  _define_flags()
  flags.mark_flags_as_required(['from', 'format', 'output'])
  app.run(main)
