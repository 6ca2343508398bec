"""The small public-domain corpus shipped inside bertjax, and the WordPiece vocab learned from it.

Shakespeare's 38 plays (a scene is a document) and the King James Bible (a chapter is a
document) in create_pretraining_data's input format: one sentence per line, a blank line
between documents, gzip-compressed. Every 50th document is held out as the eval split. The
lower-case vocab (8192 entries) was learned from the train split. All of it is made by
launch/build_corpus.py, whose docstring gives the figures; manifest.json holds the counts.
"""

import json
import pathlib

from bertjax.data import vocab_learner

NAME = 'shakespeare_kjv'
SPLITS = ('train', 'eval')
VOCAB_SIZE = 8192
DO_LOWER_CASE = True


def corpus_dir() -> pathlib.Path:
  """The folder of the embedded corpus inside the installed package."""
  return pathlib.Path(__file__).resolve().parent / 'corpus'


def file_name(split: str = 'train') -> str:
  """The file name of one split ('train' or 'eval')."""
  if split not in SPLITS:
    raise ValueError(f'split={split!r} is unknown; valid: {", ".join(SPLITS)}')
  return f'{NAME}.txt.gz' if split == 'train' else f'{NAME}_{split}.txt.gz'


def corpus_path(split: str = 'train') -> pathlib.Path:
  """The gzip-compressed text of one split ('train' or 'eval')."""
  path = corpus_dir() / file_name(split)
  if not path.is_file():
    raise FileNotFoundError(f'{path} is missing: the package was installed without its data '
                            '(package-data in pyproject.toml), or run launch/build_corpus.py')
  return path


def vocab_path() -> pathlib.Path:
  """The lower-case WordPiece vocab.txt learned from the train split."""
  return corpus_dir() / 'vocab.txt'


def manifest() -> dict:
  """The counts recorded by launch/build_corpus.py (documents, sentences, words, bytes)."""
  return json.loads((corpus_dir() / 'manifest.json').read_text(encoding='utf-8'))


def read_documents(path):
  """Yields the documents (lists of sentences) of a file in create_pretraining_data's format."""
  sentences = []
  for line in vocab_learner.read_lines(path):
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
