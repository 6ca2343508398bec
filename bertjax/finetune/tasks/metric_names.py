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
def _squad(version_2: bool) -> tuple[str, ...]:
  from bertjax.finetune.tasks import squad_metrics  # pylint: disable=g-import-not-at-top
  answered = {'id': 'a', 'answers': [{'text': 'x'}]}
  if not version_2:
    return tuple(squad_metrics.evaluate_v1([{'paragraphs': [{'qas': [answered]}]}], {'a': 'x'}))
  # An answerable and an unanswerable question, with null odds: every name v2.0 reports
  # (HasAns_, NoAns_, best_*).
  dataset = [{'paragraphs': [{'qas': [answered, {'id': 'b', 'answers': []}]}]}]
  return tuple(squad_metrics.evaluate_v2(dataset, {'a': 'x', 'b': ''}, {'a': 0.0, 'b': 1.0}))


@functools.cache
def _tagging() -> tuple[str, ...]:
  from bertjax.finetune import metrics  # pylint: disable=g-import-not-at-top
  tags = [['B-X', 'O']]
  # Chunk schemes score entities; a plain tag set (POS, supersenses) scores tokens.
  return tuple(dict.fromkeys([*metrics.entity_scores(tags, tags),
                              *metrics.token_scores(tags, tags, ('B-X', 'O'))]))


def _glue(name: str) -> tuple[str, ...]:
  from bertjax.finetune.tasks import glue  # pylint: disable=g-import-not-at-top
  spec = glue.TASKS[name]
  names = list(spec.metrics)
  for split in spec.eval_splits[1:]:
    names += [f'{split}/{n}' for n in (LOSS, *spec.metrics)]
  return tuple(names)


def of_task(task: str) -> tuple[str, ...] | None:
  """The metric names an eval of `task` can report (its loss first); None for a task not
  known here (an unknown task is refused by the config itself)."""
  if task in ('classification', 'bbc', 'wordnet'):
    names = _CLASSIFICATION
  elif task == 'regression':
    names = _REGRESSION
  elif task in ('multiple_choice', 'swag'):
    names = ('accuracy',)  # multiple_choice.evaluate.
  elif task in ('tagging', 'conll2003'):
    names = _tagging()
  elif task == 'squad_v1':
    names = _squad(False)
  elif task == 'squad_v2':
    names = _squad(True)
  elif task == 'span':  # v1.1 or v2.0 scoring, by the user's file.
    names = tuple(dict.fromkeys(_squad(False) + _squad(True)))
  else:
    # Only now GLUE's module (it imports JAX): every other task is known without it.
    from bertjax.finetune.tasks import glue  # pylint: disable=g-import-not-at-top
    if task not in glue.TASKS:
      return None
    names = _glue(task)
  return (LOSS, *names)
