"""The metric names a fine-tuning task's eval can report, known from its name alone.

config_check refuses a `checkpoint.best_metric` that no eval of the task reports before any
data is read or anything compiled (the loop would only find out at the first eval). Where a
task's names depend on its data (a tagging set with chunks or not, a span file with
unanswerable questions or not), every name it may report is valid. The names come from the
scorers themselves, run on a toy input, so they cannot drift from what an eval reports; the
few dicts written inline in the tasks are listed here with the module they come from.
"""

import functools

# Every eval adds its loss (finetune/job.Evaluator); a second eval split's names carry its
# split as a prefix ('validation_mismatched/accuracy').
LOSS = 'loss'
# user_tasks.text_task's and registry._topic_task's classification dicts.
_CLASSIFICATION = ('accuracy', 'macro_f1')
# user_tasks.text_task's regression dict.
_REGRESSION = ('pearson', 'spearman', 'mse')


@functools.cache
def squad(version_2: bool) -> tuple[str, ...]:
  """What a SQuAD eval reports: v1.1's exact match and F1, v2.0's with HasAns_, NoAns_, best_*."""
  from bertjax.finetune.tasks import squad_metrics  # pylint: disable=g-import-not-at-top
  answered = {'id': 'a', 'answers': [{'text': 'x'}]}
  if not version_2:
    return tuple(squad_metrics.evaluate_v1([{'paragraphs': [{'qas': [answered]}]}], {'a': 'x'}))
  # An answerable and an unanswerable question, with null odds: every name v2.0 reports
  # (HasAns_, NoAns_, best_*).
  dataset = [{'paragraphs': [{'qas': [answered, {'id': 'b', 'answers': []}]}]}]
  return tuple(squad_metrics.evaluate_v2(dataset, {'a': 'x', 'b': ''}, {'a': 0.0, 'b': 1.0}))


@functools.cache
def tagging(scheme: str) -> tuple[str, ...]:
  """What a tagging eval reports: a chunk scheme ('chunks') scores entities, a plain tag set
  ('plain': POS, supersenses) scores tokens."""
  from bertjax.finetune import metrics  # pylint: disable=g-import-not-at-top
  tags = [['B-X', 'O']]
  if scheme == 'plain':
    return tuple(metrics.token_scores(tags, tags, ('B-X', 'O')))
  return tuple(metrics.entity_scores(tags, tags))


def _tagging() -> tuple[str, ...]:
  """Either scheme's names: which one a tagging set has is known from its data."""
  return tuple(dict.fromkeys(tagging('chunks') + tagging('plain')))


def _glue(name: str) -> tuple[str, ...]:
  from bertjax.finetune.tasks import glue  # pylint: disable=g-import-not-at-top
  spec = glue.TASKS[name]
  names = list(spec.metrics)
  for split in spec.eval_splits[1:]:
    names += [f'{split}/{n}' for n in (LOSS, *spec.metrics)]
  return tuple(names)


# Task name -> its eval's metric names (GLUE's tasks are read from glue.TASKS instead).
_BY_TASK = {
    'classification': lambda: _CLASSIFICATION,
    'bbc': lambda: _CLASSIFICATION,
    'wordnet': lambda: _CLASSIFICATION,
    'regression': lambda: _REGRESSION,
    'multiple_choice': lambda: ('accuracy',),  # multiple_choice.evaluate.
    'swag': lambda: ('accuracy',),
    'tagging': _tagging,
    'conll2003': _tagging,
    'squad_v1': lambda: squad(False),
    'squad_v2': lambda: squad(True),
    # v1.1 or v2.0 scoring, by the user's file.
    'span': lambda: tuple(dict.fromkeys(squad(False) + squad(True))),
}


def of_task(task: str) -> tuple[str, ...] | None:
  """The metric names an eval of `task` can report (its loss first); None for a task not
  known here (an unknown task is refused by the config itself)."""
  if task in _BY_TASK:
    return (LOSS, *_BY_TASK[task]())
  # Only now GLUE's module (it imports JAX): every other task is known without it.
  from bertjax.finetune.tasks import glue  # pylint: disable=g-import-not-at-top
  if task not in glue.TASKS:
    return None
  return (LOSS, *_glue(task))
