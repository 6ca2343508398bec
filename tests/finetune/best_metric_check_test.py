"""A fine-tuning checkpoint.best_metric that the task's eval never reports is refused by the
config check, before data or compilation, naming the valid metrics; the names listed are the
ones the tasks' evals report."""

import config_fields
import numpy as np
import pytest

from bertjax import config_check
from bertjax.finetune import job
from bertjax.finetune.tasks import metric_names
from bertjax.finetune.tasks import registry
from configs import finetune as finetune_config

configured = config_fields.configured


def _config(task, **fields):
  return configured(finetune_config.get_config(f'task={task}'), **fields)


def test_a_mistyped_best_metric_is_refused_listing_the_task_s_metrics(tmp_path):
  with pytest.raises(ValueError) as e:
    config_check.check(_config('mrpc', checkpoint__best_metric='f1_score'))
  assert str(e.value) == ("config.checkpoint.best_metric='f1_score': is not an eval metric of "
                          "task mrpc; valid: loss, f1, accuracy ('' = the task's main metric).")
  with pytest.raises(ValueError, match=r"best_metric='f1': is not an eval metric of task "
                     r'classification; valid: loss, accuracy, macro_f1 '):
    config_check.check(_config('classification', checkpoint__best_metric='f1'))
  # The job itself refuses it before it reads the (missing) data or makes the workdir.
  with pytest.raises(ValueError, match="best_metric='acuracy'"):
    job.train_and_evaluate(_config('classification', checkpoint__best_metric='acuracy',
                                   data__train_file=str(tmp_path / 'none.csv')),
                           str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('task, metric', [
    ('mnli', 'validation_mismatched/accuracy'), ('squad_v2', 'HasAns_f1'),
    ('span', 'best_f1'), ('span', 'exact_match'), ('tagging', 'macro_f1'), ('conll2003', 'f1'),
    ('regression', 'mse'), ('swag', 'loss'), ('cola', 'mcc')])
def test_every_metric_an_eval_reports_is_accepted(task, metric):
  config_check.check(_config(task, checkpoint__best_metric=metric))


def test_every_task_knows_its_names_and_its_main_metric_is_among_them():
  for task in finetune_config.TASKS:
    names = metric_names.of_task(task)
    assert names and names[0] == 'loss', task
  assert metric_names.of_task('no_such_task') is None


@pytest.mark.parametrize('task', ['classification', 'regression'])
def test_the_listed_names_are_what_the_user_task_evals_report(task, tmp_path):
  # The dicts written inline in user_tasks: an eval on a real file gives exactly those names.
  rng = np.random.default_rng(0)
  labels = ['a', 'b'] if task == 'classification' else ['0.5', '1.5']
  rows = ''.join(f'text {i}\t{labels[i % 2]}\n' for i in range(20))
  (tmp_path / 'train.tsv').write_text('text\tlabel\n' + rows)
  config = _config(task, data__train_file=str(tmp_path / 'train.tsv'),
                   data__eval_file=str(tmp_path / 'train.tsv'))
  found = registry.get_task(task, config.data)
  examples, _ = found.read('validation')
  outputs = rng.normal(size=(len(examples), len(found.labels) or 1))
  reported = found.evaluate(outputs, {'example_index': np.arange(len(examples))}, None,
                            examples)
  assert ('loss', *reported) == metric_names.of_task(task)
  assert found.main_metric in reported


def test_a_best_metric_its_tag_set_never_reports_is_refused_before_training(tmp_path):
  """Tagging's names depend on the data (entities for chunk tags, tokens for plain ones), so
  the config check accepts both; once the files are read the job knows which, and refuses the
  other before any step (not at the first eval, with the training before it lost)."""
  rows = ''.join(f'{{"tokens": ["w{i}", "runs"], "tags": ["NOUN", "VERB"]}}\n' for i in range(12))
  (tmp_path / 'train.jsonl').write_text(rows)
  config = _config('tagging', checkpoint__best_metric='f1',
                   data__train_file=str(tmp_path / 'train.jsonl'))
  config_check.check(config)  # Either scheme's name passes here.
  with pytest.raises(ValueError, match=r"best_metric='f1' is not an eval metric of this job; "
                     r'valid: loss, accuracy, macro_f1'):
    job.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not list((tmp_path / 'run').rglob('checkpoints/*'))
