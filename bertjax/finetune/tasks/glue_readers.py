"""GLUE's files read into examples: the TSV files GLUE distributes, or a prepared TFDS dataset.

The TSV files are what most people hold (the GLUE download script writes them) and what the
leaderboard's test splits come as, so they are the primary source; their layouts differ per
task and split (CoLA's train/dev have no header, test files have no labels, MNLI's gold label
is its last column), and each is described once in `_LAYOUTS`. Columns are found by header
name and the header is checked, so a file from another task fails at line 1 instead of
training on the wrong column. Like the reference readers (google-research/bert's
run_classifier.py) the files are read with quoting off: GLUE's text holds bare `"` characters.
MNLI's AX split is GLUE's diagnostic/diagnostic.tsv, found beside MNLI's folder.

Bad rows: a row with fewer columns than its header (QQP's train.tsv has a few), or more that
are not empty (trailing tabs are dropped; a tab inside a text: which part is which cannot be
told, and the reference's fixed indices misread it too; GLUE's own rows match their header,
MNLI's too: its train has one annotator label and its dev five, each header saying so), is
skipped and counted in the training split, where dropping a handful out of 364k changes
nothing; in dev and test splits it is an error, because a dropped row would change a reported
score or leave a leaderboard submission short (read_examples(skip_malformed=True) skips there
too). Blank lines are skipped and counted everywhere. An unknown label or an unparsable STS-B
score is always an error: it means a wrong file or task.
"""

import collections
import collections.abc
import csv
import dataclasses
import io
import os

from absl import logging

from bertjax import files
from bertjax import paths
from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import user_formats


@dataclasses.dataclass(frozen=True)
class _Layout:
  """Where one kind of TSV file keeps an example's fields.

  With a header, fields are header names; without one (CoLA train/dev), 0-based indices.
  guid None: the file has no id column and the data row number is used.
  """

  header: tuple[str, ...] | None
  text_a: str | int
  text_b: str | int | None = None
  label: str | int | None = None
  guid: str | None = None
  num_columns: int = 0  # Headerless files only: columns a row must have.


def _pair_layouts(id_col, a_col, b_col, label_col, header_train, header_test):
  return (_Layout(header_train, a_col, b_col, label_col, id_col),
          _Layout(header_test, a_col, b_col, None, id_col))


_MNLI_HEAD = ('index', 'promptID', 'pairID', 'genre', 'sentence1_binary_parse',
              'sentence2_binary_parse', 'sentence1_parse', 'sentence2_parse', 'sentence1',
              'sentence2')
_STSB_HEAD = ('index', 'genre', 'filename', 'year', 'old_index', 'source1', 'source2',
              'sentence1', 'sentence2')
_MRPC_HEAD = ('#1 ID', '#2 ID', '#1 String', '#2 String')
# (labelled layout for train/dev, layout for test). Headers list the columns a file must have
# (MNLI's train has label1 only and its dev label1..label5 before gold_label: not required).
_LAYOUTS = {
    'cola': (_Layout(None, 3, None, 1, None, num_columns=4),
             _Layout(('index', 'sentence'), 'sentence', guid='index')),
    'sst2': (_Layout(('sentence', 'label'), 'sentence', None, 'label'),
             _Layout(('index', 'sentence'), 'sentence', guid='index')),
    'mrpc': (_Layout(('Quality',) + _MRPC_HEAD, '#1 String', '#2 String', 'Quality'),
             _Layout(('index',) + _MRPC_HEAD, '#1 String', '#2 String', guid='index')),
    'stsb': _pair_layouts('index', 'sentence1', 'sentence2', 'score', _STSB_HEAD + ('score',),
                          _STSB_HEAD),
    'qqp': _pair_layouts('id', 'question1', 'question2', 'is_duplicate',
                         ('id', 'qid1', 'qid2', 'question1', 'question2', 'is_duplicate'),
                         ('id', 'question1', 'question2')),
    'mnli': _pair_layouts('index', 'sentence1', 'sentence2', 'gold_label',
                          _MNLI_HEAD + ('gold_label',), _MNLI_HEAD),
    'qnli': _pair_layouts('index', 'question', 'sentence', 'label',
                          ('index', 'question', 'sentence', 'label'),
                          ('index', 'question', 'sentence')),
    'rte': _pair_layouts('index', 'sentence1', 'sentence2', 'label',
                         ('index', 'sentence1', 'sentence2', 'label'),
                         ('index', 'sentence1', 'sentence2')),
    'wnli': _pair_layouts('index', 'sentence1', 'sentence2', 'label',
                          ('index', 'sentence1', 'sentence2', 'label'),
                          ('index', 'sentence1', 'sentence2')),
}
# GLUE's diagnostic set (MNLI's AX split): unlabelled, whichever split it is read as.
_AX_LAYOUT = _Layout(('index', 'sentence1', 'sentence2'), 'sentence1', 'sentence2',
                     guid='index')


def _layout(task, split) -> _Layout:
  if split == glue.AX_SPLIT:
    return _AX_LAYOUT
  return _LAYOUTS[task.name][1 if split in task.test_splits else 0]


def _candidates(task, data_dir, split) -> list[str]:
  """Where a split's file may lie, the first found is read: in data_dir (the task's folder) or
  data_dir/<task folder> (the GLUE root); AX's in data_dir, in its diagnostic/ folder (the GLUE
  root), then in the one beside it (data_dir = MNLI's folder of the GLUE download). A file
  given by an absolute path or URL (predict_file) is itself."""
  name = os.fspath(task.files[split])
  if files.is_remote(name) or os.path.isabs(name):
    return [name]
  folder = os.fspath(data_dir)
  if split == glue.AX_SPLIT:
    folder = paths.absolute(folder)  # Its parent is looked in: 'MNLI' has one too.
    return [files.join(folder, name), files.join(folder, 'diagnostic', name),
            files.join(files.parent(folder), 'diagnostic', name)]
  return [files.join(folder, name), files.join(folder, task.glue_dir, name)]


def task_file(task, data_dir, split) -> str:
  """Path of a split's TSV: data_dir is the task's folder, or the GLUE root holding it (a local
  folder or a URL)."""
  task = glue.as_task(task)
  glue.check_split(task, split)
  candidates = _candidates(task, data_dir, split)
  found = next((path for path in candidates if files.isfile(path)), None)
  if found is not None:
    return found
  path = candidates[0]
  if split == glue.AX_SPLIT and len(candidates) > 1:
    missing = (f'GLUE {task.name} {split}: no diagnostic.tsv at {" or ".join(candidates)}: '
               'put diagnostic/diagnostic.tsv of the GLUE download (download_glue_data.py) '
               'beside the MNLI folder, or read a prepared TFDS glue/ax '
               '(--config.data.use_tfds=true)')
  elif len(candidates) == 1:  # A file given by its path (config.data.predict_file).
    missing = (f'GLUE {task.name} {split} file {path} does not exist: check '
               'config.data.predict_file')
  else:
    missing = (f'GLUE {task.name} {split} file {path} does not exist: pass the folder holding '
               f'{task.glue_dir}/{task.files[split]} from the GLUE download '
               '(download_glue_data.py) as --config.data.data_dir, or read a prepared TFDS '
               'glue dataset (--config.data.use_tfds=true)')
  files.require_file(path, missing)
  return path


def predict_file_split(task_name, predict_file) -> str:
  """The test split that predict_file is read as: the task's one, or (MNLI's three) the one
  whose GLUE file name it has, each written as its own leaderboard file; another name is
  refused before anything is read (read as every split, it was written as each)."""
  task = glue.as_task(task_name)
  if len(task.test_splits) == 1:
    return task.test_splits[0]
  name = files.name(os.fspath(predict_file))
  for split in task.test_splits:
    if task.files[split] == name:
      return split
  named = ', '.join(f'{task.files[split]} (written as {task.submission_files[split]})'
                    for split in task.test_splits)
  raise ValueError(f'config.data.predict_file={predict_file}: GLUE {task.name} has '
                   f'{len(task.test_splits)} test files, told apart by their GLUE names: '
                   f'{named}; name the file so, or leave predict_file out to predict them all '
                   'from config.data.data_dir')


class _WhenAsked(collections.abc.Sequence):
  """A task's test splits, decided when first asked for (only mode=predict asks): building the
  task for training, eval or export neither looks for the AX file nor warns of it."""

  def __init__(self, decide):
    self._decide, self._splits = decide, None

  def _get(self) -> tuple:
    if self._splits is None:
      self._splits = tuple(self._decide())
    return self._splits

  def __getitem__(self, index):
    return self._get()[index]

  def __len__(self):
    return len(self._get())

  def __eq__(self, other):
    return tuple(self) == tuple(other) if isinstance(other, collections.abc.Sequence) else (
        NotImplemented)

  __hash__ = None  # Decided late: no hash.

  def __repr__(self):  # A log line or a test's failure must not decide (look for files, warn).
    return repr(self._splits) if self._splits is not None else '<test splits, when asked>'


def predict_splits(task_name, data_dir, use_tfds=False, predict_file=None):
  """The test splits mode=predict writes, decided when it asks (the task is built for every
  mode: training, eval or export neither look for files nor refuse a predict_file): with
  `predict_file` (a function giving the one file config.data.predict_file names), its one
  (predict_file_split); else all of the task's, but MNLI's AX only where
  GLUE's diagnostic set is found (its file; with use_tfds a prepared glue/ax), on every host
  alike. Without it one warning says AX.tsv is not written and where the file goes: most copies
  of GLUE lack it, and MNLI's own test files are predicted all the same."""
  task = glue.as_task(task_name)
  if predict_file:
    return _WhenAsked(lambda: (predict_file_split(task, predict_file()),))
  if glue.AX_SPLIT not in task.test_splits:
    return task.test_splits

  def decide():
    if use_tfds:
      builder = _tfds_builder(task, glue.AX_SPLIT, data_dir or None)
      found = builder.data_dir if builder.is_prepared() else ''
      where = (f'prepare TFDS glue/ax in {builder.data_dir} (`tfds build glue/ax --data_dir '
               'DIR`) to write it')
    else:
      candidates = _candidates(task, data_dir, glue.AX_SPLIT)
      found = next((path for path in candidates if files.isfile(path)), '')
      where = (f"put GLUE's diagnostic/diagnostic.tsv (download_glue_data.py) at "
               f'{candidates[1]} (data_dir: the GLUE root) or {candidates[2]} (data_dir: its '
               'MNLI folder) to write it')
    from bertjax.training import hosts  # pylint: disable=g-import-not-at-top  # JAX, late.
    hosts.check_same_view(data_dir, f'diagnostic set: {found or "none"}', what=(
        f'GLUE {task.name}\'s diagnostic set (AX) under config.data.data_dir={data_dir}'), fix=(
            'give every host the same GLUE copy (a bucket, or a shared folder)'))
    if found:
      return task.test_splits
    logging.warning('GLUE %s: no diagnostic set, so %s (the leaderboard\'s AX, predicted by '
                    'the MNLI model) is not written; %s', task.name,
                    task.submission_files[glue.AX_SPLIT], where)
    return tuple(split for split in task.test_splits if split != glue.AX_SPLIT)

  return _WhenAsked(decide)


def _column_index(header, field):
  """Index of a named field in a row; a header's last column is read as row[-1]."""
  if field is None:
    return None
  position = header.index(field)
  # MNLI and STS-B take their label from the end, as run_classifier.py does (line[-1]).
  return -1 if position == len(header) - 1 else position


def read_examples(task_name, data_dir, split, skip_malformed=None):
  """(examples, skip counts by reason) of one split of a GLUE task's TSV files.

  skip_malformed: skip rows with another number of columns than their header's (counted)
  instead of raising; defaults to True for 'train' only (see the module docstring).
  """
  task = glue.as_task(task_name)
  path = task_file(task, data_dir, split)
  layout = _layout(task, split)
  if skip_malformed is None:
    skip_malformed = split == 'train'
  skips = collections.Counter()
  skipped_lines = []
  examples = []
  # utf-8-sig: a byte-order mark (MRPC's files are copied from Microsoft's, which may carry one)
  # would otherwise stick to the first header name; gzip and other encodings said as such.
  reader = csv.reader(io.StringIO(user_formats.file_text(path), newline=''), delimiter='\t',
                      quoting=csv.QUOTE_NONE)
  header = None
  num_columns = layout.num_columns
  columns = (layout.text_a, layout.text_b, layout.label, layout.guid)
  for row in reader:
    line = reader.line_num
    if not any(field.strip() for field in row):
      skips['blank line'] += 1
      continue
    if layout.header is not None and header is None:
      header = [field.strip() for field in row]
      # The columns read (a file of one's own to predict may hold only those), in GLUE's order.
      needed = [name for name in layout.header if name in columns]
      if missing := [name for name in needed if name not in header]:
        raise ValueError(
            f'{path}:{line}: header has columns {header} but GLUE {task.name} {split} '
            f'needs {needed} (missing {missing}): is this the {split} file of '
            f'{task.glue_dir}?')
      num_columns = len(header)
      columns = tuple(_column_index(header, field) for field in columns)
      continue
    while len(row) > num_columns and not row[-1].strip():  # Trailing tabs: nothing dropped.
      row = row[:-1]
    if len(row) != num_columns:
      fewer = len(row) < num_columns
      if not skip_malformed:
        raise ValueError(
            f'{path}:{line}: {len(row)} columns where GLUE {task.name} {split} rows have '
            f'{num_columns}' + ('' if fewer else ' (a tab inside a text?)') + ': fix or '
            'remove the line (only the training split skips such rows, counting them)')
      skips['too few columns' if fewer else 'too many columns'] += 1
      skipped_lines.append(line)
      continue
    examples.append(_example(task, path, line, row, columns, len(examples)))
  if not examples:
    raise ValueError(_no_examples(task, split, path, skips, num_columns, layout.header))
  if skips:
    logging.warning('GLUE %s %s: read %d examples from %s, skipped %s (malformed lines: %s)',
                    task.name, split, len(examples), path, dict(skips),
                    skipped_lines[:10] or 'none')
  return examples, skips


def _no_examples(task, split, path, skips, num_columns, header) -> str:
  """Why a file gave no example: empty, or every row skipped for its number of columns (an
  export of GLUE, e.g. HF's or TFDS's `sentence label idx`, laid out otherwise)."""
  few, many = skips['too few columns'], skips['too many columns']
  if not few + many:
    return (f'{path}: no examples in the file: it is empty or holds only a header; '
            + (f're-download the GLUE data for {task.glue_dir}' if files.name(path) ==
               task.files[split] else 'give it the rows to read'))
  than = 'its header\'s' if header is not None else f'GLUE {task.name} {split}\'s'
  other = 'fewer or more' if few and many else 'fewer' if few else 'more'
  return (f'{path}: all {few + many} rows have {other} columns than {than} {num_columns}: is '
          f'this GLUE\'s own {task.glue_dir} file (the GLUE download), not an export?')


def _example(task, path, line, row, columns, row_number):
  a_col, b_col, label_col, guid_col = columns
  guid = row[guid_col].strip() if guid_col is not None else str(row_number)
  label = None
  if label_col is not None:
    text = row[label_col].strip()
    if task.scored:
      try:
        label = float(text)
      except ValueError:
        raise ValueError(f'{path}:{line}: STS-B score {text!r} is not a number: the file is '
                         'damaged or not STS-B') from None
    elif text in task.labels:
      label = text
    else:
      raise ValueError(f'{path}:{line}: label {text!r} is not a GLUE {task.name} label '
                       f'{task.labels}: is this a {task.glue_dir} file?')
  return glue.Example(guid=guid, text_a=row[a_col],
                      text_b=row[b_col] if b_col is not None else None, label=label)


# TFDS glue/<name> features: (text_a, text_b), and TFDS class names -> the TSV label strings.
_TFDS_TEXT = {'cola': ('sentence', None), 'sst2': ('sentence', None),
              'mrpc': ('sentence1', 'sentence2'), 'qqp': ('question1', 'question2'),
              'stsb': ('sentence1', 'sentence2'), 'mnli': ('premise', 'hypothesis'),
              'qnli': ('question', 'sentence'), 'rte': ('sentence1', 'sentence2'),
              'wnli': ('sentence1', 'sentence2')}
_TFDS_LABELS = {  # The binary tasks' TFDS names in class-id order are TSV labels '0', '1'.
    **{task: dict(zip(names, glue.TASKS[task].labels, strict=True)) for task, names in (
        ('cola', ('unacceptable', 'acceptable')), ('sst2', ('negative', 'positive')),
        ('mrpc', ('not_equivalent', 'equivalent')), ('qqp', ('not_duplicate', 'duplicate')),
        ('wnli', ('not_entailment', 'entailment')))},
    **{task: {name: name for name in glue.TASKS[task].labels} for task in ('mnli', 'qnli', 'rte')},
}


def _tfds_source(task, split) -> tuple[str, str]:
  """(TFDS dataset, its split) of a split: glue/<task>, or glue/ax's test split for MNLI's AX."""
  return ('glue/ax', 'test') if split == glue.AX_SPLIT else (f'glue/{task.name}', split)


def _tfds_builder(task, split, data_dir):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  # Slow; optional.

  return tfds.builder(_tfds_source(task, split)[0], data_dir=data_dir)


def read_tfds(task_name, split, data_dir=None) -> list[glue.Example]:
  """Examples of a split from an already prepared TFDS `glue/<task>` dataset (never downloads);
  MNLI's AX from glue/ax's test split (its premise, hypothesis and idx are MNLI's features).

  Labels come back as the TSV strings (TFDS numbers MNLI's classes in another order), so
  features and scores are the same whichever source was read.
  """
  task = glue.as_task(task_name)
  glue.check_split(task, split)
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  # Slow; optional.

  name, tfds_split = _tfds_source(task, split)
  builder = _tfds_builder(task, split, data_dir)
  if not builder.is_prepared():
    raise FileNotFoundError(
        f'TFDS dataset {name} is not prepared in {builder.data_dir}: prepare it on a machine '
        f'with internet access (`tfds build {name} --data_dir DIR`), copy DIR here and pass '
        '--config.data.data_dir=DIR; or read the GLUE TSV files (--config.data.use_tfds=false, '
        '--config.data.data_dir: the GLUE download)')
  if tfds_split not in builder.info.splits:
    raise ValueError(f'TFDS dataset {name} in {builder.data_dir} has no split {tfds_split!r}; it '
                     f'has {", ".join(builder.info.splits)}: prepare it again in full')
  a_key, b_key = _TFDS_TEXT[task.name]
  label_feature = builder.info.features['label']
  is_test = split in task.test_splits
  examples = []
  for record in tfds.as_numpy(builder.as_dataset(split=tfds_split, shuffle_files=False)):
    label = None
    if not is_test:  # TFDS marks missing test labels with -1.
      if task.scored:
        label = float(record['label'])
      else:
        label = _TFDS_LABELS[task.name][label_feature.int2str(int(record['label']))]
    examples.append(glue.Example(
        guid=str(int(record['idx'])), text_a=record[a_key].decode('utf-8'),
        text_b=record[b_key].decode('utf-8') if b_key else None, label=label))
  # TFDS shards need not come back in file order; submissions and guids rely on it.
  examples.sort(key=lambda example: int(example.guid))
  return examples
