"""Config pass 33, item 6: a config.data key set for a task that never reads it was ignored
without a word (`task=bbc --config.data.train_file=mine.csv` trained on BBC News; text_fields
beside a GLUE task, use_tfds beside SQuAD): refused, naming the tasks that read it."""

import ml_collections
import pytest

from bertjax.finetune.tasks import data_reads
from configs import finetune as finetune_config


@pytest.mark.parametrize('task', list(finetune_config.TASKS))
def test_the_unset_values_are_the_configs_defaults_and_the_defaults_pass(task):
  data = finetune_config.get_config(f'task={task}').data
  unread = set(data_reads.UNSET) - set(data_reads.READS[task])
  assert {key: data[key] for key in unread} == {key: data_reads.UNSET[key] for key in unread}
  assert set(data_reads.READS) == set(finetune_config.TASKS)
  data_reads.check_reads(task, data)


SET = {'data_dir': '/data/x', 'use_tfds': True, 'train_file': 'mine.csv', 'eval_file': 'e.csv',
       'test_file': 't.csv', 'format': 'tsv', 'text_fields': 'a,b', 'label_field': 'y',
       'token_column': 1, 'tag_column': 2, 'tag_scheme': 'bio', 'eval_fraction': 0.1,
       'max_query_length': 32, 'max_answer_length': 10, 'n_best_size': 5,
       'null_score_diff_threshold': 1.5, 'doc_stride': 64, 'max_windows': 2,
       'predict_file': 'p.csv'}


@pytest.mark.parametrize('task,reads', [
    ('mrpc', {'data_dir', 'use_tfds', 'predict_file'}),
    ('squad_v1', {'data_dir', 'max_query_length', 'max_answer_length', 'n_best_size',
                  'doc_stride', 'predict_file'}),
    ('squad_v2', {'data_dir', 'max_query_length', 'max_answer_length', 'n_best_size',
                  'null_score_diff_threshold', 'doc_stride', 'predict_file'}),
    ('conll2003', {'data_dir', 'predict_file'}),
    # No test split: a predict_file was ignored (mode=predict then asked for one).
    ('bbc', {'data_dir', 'eval_fraction', 'max_windows', 'doc_stride'}),
    ('classification', {'train_file', 'eval_file', 'test_file', 'predict_file', 'format',
                        'text_fields', 'label_field', 'eval_fraction'}),
    ('tagging', {'train_file', 'eval_file', 'test_file', 'predict_file', 'format',
                 'token_column', 'tag_column', 'tag_scheme', 'eval_fraction'}),
    ('span', {'train_file', 'eval_file', 'test_file', 'predict_file', 'max_query_length',
              'max_answer_length', 'n_best_size', 'null_score_diff_threshold', 'doc_stride'}),
    ('swag', {'train_file', 'eval_file', 'test_file', 'predict_file', 'format',
              'eval_fraction'}),
])
def test_a_key_the_task_never_reads_is_refused_one_it_reads_is_taken(task, reads):
  assert SET.keys() == data_reads.UNSET.keys()
  for key, value in SET.items():
    data = finetune_config.get_config(f'task={task}').data
    data[key] = value
    if key in reads:
      data_reads.check_reads(task, data)
      continue
    if key == 'test_file' and 'predict_file' in reads:  # Told the task's predict_file.
      otherwise = 'dev file' if task.startswith('squad') else 'test split'
      with pytest.raises(ValueError, match=rf"^config.data.test_file='t.csv' is not read by "
                         rf'task={task}, which would ignore it: to predict on your file, pass '
                         rf'--config.data.predict_file=t.csv \(task={task} reads it in '
                         rf'mode=predict; its {otherwise} otherwise\)\.$'):
        data_reads.check_reads(task, data)
      with pytest.raises(ValueError, match=r'which would ignore it: mode=eval scores the eval '
                         r'split; drop it \(mode=predict with --config.data.predict_file=t.csv '
                         r'predicts on your file\)\.$'):
        data_reads.check_reads(task, data, 'eval')
      continue
    with pytest.raises(ValueError, match=rf'^config.data.{key}={value!r} is not read by '
                       rf'task={task}, which would ignore it; the tasks that read it: .*\. Drop '
                       rf'it, or pick the task that reads it \(task={task} reads '):
      data_reads.check_reads(task, data)


def test_the_message_names_the_readers_and_where_the_task_reads_from():
  data = ml_collections.ConfigDict({**data_reads.UNSET, 'train_file': 'mine.csv'})
  with pytest.raises(ValueError, match=r"train_file='mine.csv' is not read by task=bbc.*: "
                     r'classification, regression, tagging, span, multiple_choice, swag\. .*'
                     r'task=bbc reads its published files from config.data.data_dir \(or its '
                     r'default\)\)\.$'):
    data_reads.check_reads('bbc', data)
  data = ml_collections.ConfigDict({**data_reads.UNSET, 'data_dir': '/glue/MRPC'})
  with pytest.raises(ValueError, match=r'read it: squad_v1, squad_v2, conll2003, bbc, wordnet, '
                     r'the GLUE tasks\. .*task=classification reads config.data.train_file, '
                     r'eval_file and test_file\)\.$'):
    data_reads.check_reads('classification', data)
  # More than six readers, none of them GLUE's: named all (they were said to include GLUE's).
  data = ml_collections.ConfigDict({**data_reads.UNSET, 'eval_fraction': 0.1})
  with pytest.raises(ValueError, match=r'read it: bbc, wordnet, classification, regression, '
                     r'tagging, multiple_choice, swag\. Drop it'):
    data_reads.check_reads('mrpc', data)
  # Beside a trained run (eval, predict) the task is the run's: no other task is offered.
  with pytest.raises(ValueError, match=r"swag\. Drop it \(mode=predict keeps the run's task\)\.$"):
    data_reads.check_reads('mrpc', data, 'predict')


def test_a_share_to_hold_out_beside_an_eval_file_is_refused():
  """The eval file is the eval set: eval_fraction was ignored without a word."""
  data = finetune_config.get_config('task=classification').data
  data.train_file, data.eval_file, data.eval_fraction = 't.csv', 'e.csv', 0.1
  with pytest.raises(ValueError, match=r"^config.data.eval_fraction=0.1 is not read beside "
                     r'config.data.eval_file=e.csv, which is the eval set .*: drop one of them.$'):
    data_reads.check_reads('classification', data)
  data.eval_file = ''
  data_reads.check_reads('classification', data)


def test_a_new_run_is_refused_before_its_data_is_read(tmp_path, monkeypatch):
  from bertjax.finetune import job  # noqa: PLC0415  (the job's modules)
  from bertjax.finetune.tasks import bbc_news  # noqa: PLC0415
  monkeypatch.setattr(bbc_news, 'read_bbc', lambda *a, **k: pytest.fail('the data was read'))
  config = finetune_config.get_config('task=bbc,size=tiny')
  config.data.train_file = str(tmp_path / 'mine.csv')
  with pytest.raises(ValueError, match=r"^config.data.train_file='.*mine.csv' is not read by "
                     'task=bbc'):
    job.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run' / 'config.json').exists()

