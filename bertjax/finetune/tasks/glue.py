"""GLUE: the nine tasks (labels, metrics, files per split), their features, scores, predictions.

The files are read into `Example`s by glue_readers.py (TSV files or TFDS); features are
features.py's, which follows run_classifier.py exactly. MNLI has a third test split, AX: the
leaderboard scores the MNLI model's predictions on GLUE's diagnostic/diagnostic.tsv (AX.tsv).
"""

import dataclasses
import types

import numpy as np

from bertjax import files
from bertjax.finetune import metrics
from bertjax.finetune.tasks import features
from bertjax.training import kinds

_CLASSIFICATION = 'classification'
_REGRESSION = 'regression'
# MNLI's split of GLUE's diagnostic set: no task of its own, the MNLI model predicts it.
AX_SPLIT = 'test_ax'


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
             'test_mismatched': 'test_mismatched.tsv', AX_SPLIT: 'diagnostic.tsv'}
    eval_splits = ('validation_matched', 'validation_mismatched')
    test_splits = ('test_matched', 'test_mismatched', AX_SPLIT)
    submissions = {'test_matched': 'MNLI-m.tsv', 'test_mismatched': 'MNLI-mm.tsv',
                   AX_SPLIT: 'AX.tsv'}
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


def as_task(task) -> GlueTask:
  """`task` itself if a GlueTask, else the task of that name (get_task)."""
  return task if isinstance(task, GlueTask) else get_task(task)


@dataclasses.dataclass(frozen=True)
class Example:
  """One GLUE example; label is a TSV label string, a float (STS-B), or None (test splits)."""

  guid: str  # The file's id column (what submissions are keyed by), else the data row number.
  text_a: str
  text_b: str | None
  label: str | float | None


def check_split(task, split):
  """Raises ValueError naming the valid splits when `task` has no split `split`."""
  if split not in task.files:
    raise ValueError(f'GLUE {task.name} has no split {split!r}: valid splits are '
                     f'{", ".join(task.files)}')


def convert_examples(examples, tokenizer, max_seq_length, task) -> dict[str, np.ndarray]:
  """Model inputs for GLUE examples, one row each: [CLS] a [SEP] (b [SEP]), padded with 0."""
  task = as_task(task)
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
  task = as_task(task)
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
  task = as_task(task)
  check_split(task, split)
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
