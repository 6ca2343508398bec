"""GLUE: the nine tasks read from the TSV files GLUE distributes (or TFDS), features, scores.

The TSV files are what most people hold (the GLUE download script writes them) and what the
leaderboard's test splits come as, so they are the primary source; their layouts differ per
task and split (CoLA's train/dev have no header, test files have no labels, MNLI's gold label
is its last column), and each is described once in `_LAYOUTS`. Columns are found by header
name and the header is checked, so a file from another task fails at line 1 instead of
training on the wrong column. Like the reference readers (google-research/bert's
run_classifier.py) the files are read with quoting off: GLUE's text holds bare `"` characters.

Bad rows: a row with fewer columns than its header (QQP's train.tsv has a few) is skipped
and counted in the training split, where dropping a handful out of 364k changes nothing; in
dev and test splits it is an error, because a dropped row would change a reported score or
leave a leaderboard submission short (pass `skip_malformed=True` to skip there too). Blank
lines are skipped and counted everywhere. An unknown label or an unparsable STS-B score is
always an error: it means a wrong file or task.

Features are features.py's, which follows run_classifier.py exactly.
"""

import collections
import csv
import dataclasses
import io
import os
import types

from absl import logging
import numpy as np

from bertjax import files
from bertjax.finetune import metrics
from bertjax.finetune.tasks import features
from bertjax.training import kinds

_CLASSIFICATION = 'classification'
_REGRESSION = 'regression'


@dataclasses.dataclass(frozen=True)
class GlueTask:
  """One GLUE task: labels, metrics (the first is the task's main score), files per split."""

  name: str
  kind: str  # 'classification' or 'regression'.
  labels: tuple[str, ...]  # As written in the TSV; index = class id. () for regression.
  metrics: tuple[str, ...]  # Of 'mcc' 'accuracy' 'f1' 'pearson' 'spearman'; first = main.
  files: types.MappingProxyType = dataclasses.field(hash=False)  # split -> file name.
  eval_splits: tuple[str, ...]
  test_splits: tuple[str, ...]
  submission_files: types.MappingProxyType = dataclasses.field(hash=False)  # test split -> name.
  glue_dir: str  # The task's folder in the GLUE download (e.g. 'SST-2').

  @property
  def is_pair(self) -> bool:
    """Whether examples are sentence pairs (segment B is used)."""
    return self.name not in ('cola', 'sst2')

  @property
  def num_classes(self) -> int:
    """Output width of the head: the label count, or 1 for regression."""
    return kinds.get(self.kind).outputs(len(self.labels))

  @property
  def scored(self) -> bool:
    """Whether the labels are scores (STS-B's regression), not class names."""
    return kinds.get(self.kind).scored


def _task(name, kind, labels, task_metrics, glue_dir, submission, mnli=False):
  if mnli:
    files = {'train': 'train.tsv', 'validation_matched': 'dev_matched.tsv',
             'validation_mismatched': 'dev_mismatched.tsv', 'test_matched': 'test_matched.tsv',
             'test_mismatched': 'test_mismatched.tsv'}
    eval_splits = ('validation_matched', 'validation_mismatched')
    test_splits = ('test_matched', 'test_mismatched')
    submissions = {'test_matched': 'MNLI-m.tsv', 'test_mismatched': 'MNLI-mm.tsv'}
  else:
    files = {'train': 'train.tsv', 'validation': 'dev.tsv', 'test': 'test.tsv'}
    eval_splits, test_splits = ('validation',), ('test',)
    submissions = {'test': submission}
  return GlueTask(name=name, kind=kind, labels=tuple(labels), metrics=tuple(task_metrics),
                  files=types.MappingProxyType(files), eval_splits=eval_splits,
                  test_splits=test_splits,
                  submission_files=types.MappingProxyType(submissions), glue_dir=glue_dir)


_BINARY = ('0', '1')
_NLI = ('entailment', 'not_entailment')
TASKS: dict[str, GlueTask] = {
    'cola': _task('cola', _CLASSIFICATION, _BINARY, ('mcc',), 'CoLA', 'CoLA.tsv'),
    'sst2': _task('sst2', _CLASSIFICATION, _BINARY, ('accuracy',), 'SST-2', 'SST-2.tsv'),
    'mrpc': _task('mrpc', _CLASSIFICATION, _BINARY, ('f1', 'accuracy'), 'MRPC', 'MRPC.tsv'),
    'stsb': _task('stsb', _REGRESSION, (), ('pearson', 'spearman'), 'STS-B', 'STS-B.tsv'),
    'qqp': _task('qqp', _CLASSIFICATION, _BINARY, ('f1', 'accuracy'), 'QQP', 'QQP.tsv'),
    # run_classifier.py's label order, so its MNLI checkpoints' heads line up.
    'mnli': _task('mnli', _CLASSIFICATION, ('contradiction', 'entailment', 'neutral'),
                  ('accuracy',), 'MNLI', None, mnli=True),
    'qnli': _task('qnli', _CLASSIFICATION, _NLI, ('accuracy',), 'QNLI', 'QNLI.tsv'),
    'rte': _task('rte', _CLASSIFICATION, _NLI, ('accuracy',), 'RTE', 'RTE.tsv'),
    'wnli': _task('wnli', _CLASSIFICATION, _BINARY, ('accuracy',), 'WNLI', 'WNLI.tsv'),
}

_METRICS = {'accuracy': metrics.accuracy, 'f1': metrics.f1, 'mcc': metrics.matthews_corrcoef,
            'pearson': metrics.pearson, 'spearman': metrics.spearman}


def get_task(name: str) -> GlueTask:
  """The task called `name` (case-insensitive); ValueError listing the valid names."""
  task = TASKS.get(str(name).lower().replace('-', ''))
  if task is None:
    raise ValueError(f'unknown GLUE task {name!r}: valid tasks are {", ".join(TASKS)}')
  return task


def _as_task(task) -> GlueTask:
  return task if isinstance(task, GlueTask) else get_task(task)


@dataclasses.dataclass(frozen=True)
class Example:
  """One GLUE example; label is a TSV label string, a float (STS-B), or None (test splits)."""

  guid: str  # The file's id column (what submissions are keyed by), else the data row number.
  text_a: str
  text_b: str | None
  label: str | float | None


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


def _check_split(task, split):
  if split not in task.files:
    raise ValueError(f'GLUE {task.name} has no split {split!r}: valid splits are '
                     f'{", ".join(task.files)}')


def _inside(folder, name) -> str:
  """`name` in `folder` (either a local path or a URL); an absolute path or URL as it is."""
  name = os.fspath(name)
  if files.is_remote(name) or os.path.isabs(name):
    return name
  return files.join(os.fspath(folder), name)


def task_file(task, data_dir, split) -> str:
  """Path of a split's TSV: data_dir is the task's folder, or the GLUE root holding it (a local
  folder or a URL)."""
  task = _as_task(task)
  _check_split(task, split)
  path = _inside(data_dir, task.files[split])
  nested = _inside(files.join(os.fspath(data_dir), task.glue_dir), task.files[split])
  if not files.isfile(path) and files.isfile(nested):
    return nested
  missing = (f'GLUE {task.name} {split} file {path} does not exist: pass the folder holding '
             f'{task.glue_dir}/{task.files[split]} from the GLUE download '
             '(download_glue_data.py), or use read_tfds() with a prepared TFDS glue dataset')
  files.require_file(path, missing)
  return path


def _column_index(header, field):
  """Index of a named field in a row; a header's last column is read as row[-1]."""
  if field is None:
    return None
  position = header.index(field)
  # MNLI and STS-B take their label from the end, as run_classifier.py does (line[-1]).
  return -1 if position == len(header) - 1 else position


def read_examples(task_name, data_dir, split, skip_malformed=None):
  """(examples, skip counts by reason) of one split of a GLUE task's TSV files.

  skip_malformed: skip rows with too few columns (counted) instead of raising; defaults to
  True for 'train' only (see the module docstring).
  """
  task = _as_task(task_name)
  path = task_file(task, data_dir, split)
  is_test = split in task.test_splits
  layout = _LAYOUTS[task.name][1 if is_test else 0]
  if skip_malformed is None:
    skip_malformed = split == 'train'
  skips = collections.Counter()
  skipped_lines = []
  examples = []
  # utf-8-sig: a byte-order mark (MRPC's files are copied from Microsoft's, which may carry
  # one) would otherwise stick to the first header name.
  try:
    text = files.read_bytes(path).decode('utf-8-sig')
  except UnicodeDecodeError as e:
    raise ValueError(f'{path}: not UTF-8 text ({e.reason} at byte {e.start}): GLUE files '
                     'are UTF-8; re-download or re-encode the file') from None
  reader = csv.reader(io.StringIO(text, newline=''), delimiter='\t', quoting=csv.QUOTE_NONE)
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
      missing = [name for name in layout.header if name not in header]
      if missing:
        raise ValueError(
            f'{path}:{line}: header has columns {header} but GLUE {task.name} {split} '
            f'needs {list(layout.header)} (missing {missing}): is this the {split} file '
            f'of {task.glue_dir}?')
      num_columns = len(header)
      columns = tuple(_column_index(header, field) for field in columns)
      continue
    if len(row) < num_columns:
      if not skip_malformed:
        raise ValueError(
            f'{path}:{line}: {len(row)} columns where GLUE {task.name} {split} rows have '
            f'{num_columns}: fix the line, or pass skip_malformed=True to skip such rows')
      skips['too few columns'] += 1
      skipped_lines.append(line)
      continue
    examples.append(_example(task, path, line, row, columns, len(examples)))
  if not examples:
    raise ValueError(f'{path}: no examples in the file: it is empty or holds only a header; '
                     f're-download the GLUE data for {task.glue_dir}')
  if skips:
    logging.warning('GLUE %s %s: read %d examples from %s, skipped %s (malformed lines: %s)',
                    task.name, split, len(examples), path, dict(skips),
                    skipped_lines[:10] or 'none')
  return examples, skips


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
  return Example(guid=guid, text_a=row[a_col],
                 text_b=row[b_col] if b_col is not None else None, label=label)


# TFDS glue/<name> features: (text_a, text_b), and TFDS class names -> the TSV label strings.
_TFDS_TEXT = {'cola': ('sentence', None), 'sst2': ('sentence', None),
              'mrpc': ('sentence1', 'sentence2'), 'qqp': ('question1', 'question2'),
              'stsb': ('sentence1', 'sentence2'), 'mnli': ('premise', 'hypothesis'),
              'qnli': ('question', 'sentence'), 'rte': ('sentence1', 'sentence2'),
              'wnli': ('sentence1', 'sentence2')}
_TFDS_LABELS = {  # The binary tasks' TFDS names in class-id order are TSV labels '0', '1'.
    **{task: dict(zip(names, _BINARY, strict=True)) for task, names in (
        ('cola', ('unacceptable', 'acceptable')), ('sst2', ('negative', 'positive')),
        ('mrpc', ('not_equivalent', 'equivalent')), ('qqp', ('not_duplicate', 'duplicate')),
        ('wnli', ('not_entailment', 'entailment')))},
    **{task: {name: name for name in TASKS[task].labels} for task in ('mnli', 'qnli', 'rte')},
}


def read_tfds(task_name, split, data_dir=None) -> list[Example]:
  """Examples of a split from an already prepared TFDS `glue/<task>` dataset (never downloads).

  Labels come back as the TSV strings (TFDS numbers MNLI's classes in another order), so
  features and scores are the same whichever source was read.
  """
  task = get_task(task_name)
  _check_split(task, split)
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  # Slow; optional.

  name = f'glue/{task.name}'
  builder = tfds.builder(name, data_dir=data_dir)
  if not builder.is_prepared():
    raise FileNotFoundError(
        f'TFDS dataset {name} is not prepared in {builder.data_dir}: prepare it on a machine '
        f'with internet access (`tfds build {name} --data_dir DIR`), copy DIR here and pass '
        'data_dir=DIR; or read the GLUE TSV files with read_examples()')
  if split not in builder.info.splits:
    raise ValueError(f'TFDS dataset {name} in {builder.data_dir} has no split {split!r}; it '
                     f'has {", ".join(builder.info.splits)}: prepare it again in full')
  a_key, b_key = _TFDS_TEXT[task.name]
  label_feature = builder.info.features['label']
  is_test = split in task.test_splits
  examples = []
  for record in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
    label = None
    if not is_test:  # TFDS marks missing test labels with -1.
      if task.scored:
        label = float(record['label'])
      else:
        label = _TFDS_LABELS[task.name][label_feature.int2str(int(record['label']))]
    examples.append(Example(
        guid=str(int(record['idx'])), text_a=record[a_key].decode('utf-8'),
        text_b=record[b_key].decode('utf-8') if b_key else None, label=label))
  # TFDS shards need not come back in file order; submissions and guids rely on it.
  examples.sort(key=lambda example: int(example.guid))
  return examples


def convert_examples(examples, tokenizer, max_seq_length, task) -> dict[str, np.ndarray]:
  """Model inputs for GLUE examples, one row each: [CLS] a [SEP] (b [SEP]), padded with 0."""
  task = _as_task(task)
  return features.encode(examples, tokenizer, max_seq_length, f'GLUE {task.name}', task.labels,
                         regression=task.scored)


def _predictions(task, outputs, num_rows):
  """Class indices [N] (argmax of logits [N, C]) or scores [N] (regression), shape-checked."""
  outputs = np.asarray(outputs)
  if task.scored:
    if outputs.ndim == 2 and outputs.shape[1] == 1:
      outputs = outputs[:, 0]
    expected = f'[{num_rows}]'
    ok = outputs.shape == (num_rows,)
  else:
    expected = f'[{num_rows}, {len(task.labels)}] logits'
    ok = outputs.shape == (num_rows, len(task.labels))
  if not ok:
    raise ValueError(f'GLUE {task.name} outputs have shape {outputs.shape}, expected {expected} '
                     '(one row per feature, in feature order)')
  return outputs.astype(np.float64) if task.scored else outputs.argmax(axis=-1)


def evaluate(task, outputs, features, examples) -> dict[str, float]:
  """The task's GLUE metrics of model outputs (logits [N, C] or scores [N]) against gold."""
  task = _as_task(task)
  example_index_N = np.asarray(features['example_index'])
  pred_N = _predictions(task, outputs, example_index_N.shape[0])
  gold = [examples[i].label for i in example_index_N]
  if any(label is None for label in gold):
    raise ValueError(f'GLUE {task.name}: the examples have no gold labels (a test split): '
                     'use write_predictions() and submit the file to the GLUE leaderboard')
  if task.scored:
    gold_N = np.asarray(gold, np.float64)
  else:
    gold_N = np.asarray([task.labels.index(label) for label in gold])
  return {name: _METRICS[name](pred_N, gold_N) for name in task.metrics}


def write_predictions(task, split, outputs, examples, output_dir) -> str:
  """Writes `index<TAB>prediction` for the GLUE leaderboard; returns the file's path.

  outputs has one row per example, in order (convert_examples gives one feature per example).
  Test splits get the leaderboard's file name (e.g. MNLI-m.tsv), others <task>-<split>.tsv.
  STS-B scores are clipped to the gold range [0, 5].
  """
  task = _as_task(task)
  _check_split(task, split)
  pred_N = _predictions(task, outputs, len(examples))
  name = task.submission_files.get(split, f'{task.name}-{split}.tsv')
  lines = ['index\tprediction\n']
  for example, pred in zip(examples, pred_N, strict=True):
    if task.scored:
      value = f'{min(max(float(pred), 0.0), 5.0):.3f}'
    else:
      value = task.labels[int(pred)]
    lines.append(f'{example.guid}\t{value}\n')
  path = files.join(output_dir, name)
  files.write_atomically(path, ''.join(lines))  # Whole or not at all, locally or in a bucket.
  return path
