"""GLUE's files read into examples: the TSV files GLUE distributes, or a prepared TFDS dataset.

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
"""

import collections
import csv
import dataclasses
import io
import os

from absl import logging

from bertjax import files
from bertjax.finetune.tasks import glue


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


def _inside(folder, name) -> str:
  """`name` in `folder` (either a local path or a URL); an absolute path or URL as it is."""
  name = os.fspath(name)
  if files.is_remote(name) or os.path.isabs(name):
    return name
  return files.join(os.fspath(folder), name)


def task_file(task, data_dir, split) -> str:
  """Path of a split's TSV: data_dir is the task's folder, or the GLUE root holding it (a local
  folder or a URL)."""
  task = glue.as_task(task)
  glue.check_split(task, split)
  path = _inside(data_dir, task.files[split])
  nested = _inside(files.join(os.fspath(data_dir), task.glue_dir), task.files[split])
  if not files.isfile(path) and files.isfile(nested):
    return nested
  missing = (f'GLUE {task.name} {split} file {path} does not exist: pass the folder holding '
             f'{task.glue_dir}/{task.files[split]} from the GLUE download '
             '(download_glue_data.py) as --config.data.data_dir, or use read_tfds() with a '
             'prepared TFDS glue dataset')
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
  task = glue.as_task(task_name)
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


def read_tfds(task_name, split, data_dir=None) -> list[glue.Example]:
  """Examples of a split from an already prepared TFDS `glue/<task>` dataset (never downloads).

  Labels come back as the TSV strings (TFDS numbers MNLI's classes in another order), so
  features and scores are the same whichever source was read.
  """
  task = glue.get_task(task_name)
  glue.check_split(task, split)
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
    examples.append(glue.Example(
        guid=str(int(record['idx'])), text_a=record[a_key].decode('utf-8'),
        text_b=record[b_key].decode('utf-8') if b_key else None, label=label))
  # TFDS shards need not come back in file order; submissions and guids rely on it.
  examples.sort(key=lambda example: int(example.guid))
  return examples
