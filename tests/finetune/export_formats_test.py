"""A fine-tuning run says at its start which export formats will hold its head, and refuses an
export_format that cannot, before any data is read or anything compiled."""

import json
import shutil

import config_fields
import log_records
import pytest

from bertjax.finetune import export_formats
from bertjax.finetune import job
from bertjax.finetune import job_setup
from bertjax.finetune import run_config
from bertjax.finetune.tasks import registry
from bertjax.interop import bundle
from configs import finetune as finetune_config


def _config(task='classification', **fields):
  return config_fields.configured(finetune_config.get_config(f'task={task},size=tiny'), **fields)


@pytest.mark.parametrize('kind, pooling', [('classification', 'mean'), ('classification', 'cls'),
                                           ('tagging', 'cls'), ('multiple_choice', 'mean')])
def test_the_start_line_names_the_formats_the_table_gives(kind, pooling):
  line = export_formats.statement(kind, pooling)
  holding = bundle.formats_for(kind, pooling)
  assert '\n' not in line
  if holding:
    assert f'exports to {", ".join(holding)}' in line, line
  else:
    assert 'no export format holds it' in line, line
  refused = [f for f in bundle.FORMAT_KINDS if f not in holding]
  for fmt in refused:  # Each refused one is said, with why.
    assert fmt in line.split(':', 1)[1].split('(', 1)[1], (fmt, line)
  assert ('fine-tune with pooling=cls' in line) == any(
      f in bundle.formats_for(kind, 'cls') for f in refused), line


def test_a_mean_pooled_classifier_is_told_which_formats_need_cls_pooling():
  line = export_formats.statement('classification', 'mean')
  assert line.startswith('classification head on mean-pooled outputs: exports to '), line
  assert ('hf, tf1 and onnx read only [CLS]-pooled heads: fine-tune with pooling=cls for them'
          in line)
  tagging = export_formats.statement('tagging', 'cls')
  assert tagging.endswith(' cannot hold a tagging head)') and 'tf1' in tagging.split('(')[1]
  assert 'pooling' not in tagging  # A token-level head: no pooling to change.


def test_export_format_that_cannot_hold_the_head_stops_before_any_data_is_read(
    minilm_dir, tmp_path):
  # The training file does not exist: reading it would fail with another error, and the task's
  # reader is never reached. MiniLM's own pooling (pooling=auto) is mean.
  config = _config(init_from=str(minilm_dir), data__train_file=str(tmp_path / 'missing.csv'),
                   export_format='saved_model,hf')
  with pytest.raises(ValueError) as error:
    job.train_and_evaluate(config, str(tmp_path / 'run'))
  message = str(error.value)
  assert message.startswith("config.export_format='saved_model,hf': hf reads only [CLS]-pooled "
                            "heads and this run's classification head is on mean-pooled outputs "
                            "(pooling=auto: init_from's sentence-transformers pooling); fine-tune "
                            'with --config.pooling=cls for hf, or export as saved_model'), message
  assert '\n' not in message
  assert not (tmp_path / 'run').exists()  # Not even the workdir's lock.
  config.mode = 'eval'  # The readers refuse it alike.
  with pytest.raises(ValueError, match='fine-tune with --config.pooling=cls'):
    job.run_predict(config, str(tmp_path / 'run'))
  # With [CLS] pooling every format asked holds it: the run goes on (to the missing file).
  config.mode, config.pooling = 'train_eval', 'cls'
  with pytest.raises(FileNotFoundError):
    job.train_and_evaluate(config, str(tmp_path / 'run'))


def test_a_cls_pooled_sentence_transformers_model_is_told_its_head_reads_the_pooler(
    minilm_dir, tmp_path, monkeypatch):
  model = tmp_path / 'cls_model'
  shutil.copytree(minilm_dir, model)
  (model / '1_Pooling' / 'config.json').write_text(json.dumps(
      {'word_embedding_dimension': 384, 'pooling_mode_cls_token': True,
       'pooling_mode_mean_tokens': False, 'pooling_mode_max_tokens': False}))
  told = (f'init_from {model} is a sentence-transformers model whose embedding is the raw [CLS] '
          "state; the classification head reads BERT's pooler (dense + tanh over [CLS])")
  said = log_records.recorded_warnings(monkeypatch, job_setup, 'info')
  assert job_setup.check_head(_config(init_from=str(model)), '') == ('classification', 'cls')
  assert [line for line in said if line.startswith(told)], said
  said.clear()  # A token-level head pools nothing; mean pooling (MiniLM's own) is its own.
  job_setup.check_head(_config('tagging', init_from=str(model)), '')
  assert job_setup.check_head(_config(init_from=str(minilm_dir)), '')[1] == 'mean'
  assert not [line for line in said if 'raw [CLS]' in line], said


def test_a_format_that_cannot_hold_the_kind_names_those_that_can(tmp_path):
  config = _config('tagging', data__train_file=str(tmp_path / 'missing.jsonl'),
                   export_format='tf1')
  with pytest.raises(ValueError) as error:
    job.train_and_evaluate(config, str(tmp_path / 'run'))
  assert str(error.value).startswith("config.export_format='tf1': tf1 cannot hold a tagging head "
                                     f'(tf1 holds: {", ".join(bundle.FORMAT_KINDS["tf1"])}); '
                                     f'export as {", ".join(bundle.formats_for("tagging"))}.')
  assert job_setup.check_head(_config('tagging', export_format='hf'), '') == ('tagging', 'cls')


def test_a_resumed_run_is_checked_with_the_pooling_it_was_trained_with(tmp_path, monkeypatch):
  monkeypatch.setattr(run_config, 'trained_run',
                      lambda workdir: {'pooling': 'mean', 'kind': 'regression'})
  with pytest.raises(ValueError, match=r"head is on mean-pooled outputs \(pooling=auto: the run "
                                       r'in this workdir was trained so\); fine-tune with '
                                       r'--config.pooling=cls in a new --workdir for hf'):
    job_setup.check_head(_config('regression', export_format='hf'), str(tmp_path))
  # An explicit pooling is the one checked (a different one is refused later, with the run's).
  assert job_setup.check_head(_config('regression', export_format='hf', pooling='cls'),
                              str(tmp_path)) == ('regression', 'cls')


def test_the_kind_known_before_reading_is_the_task_s(tmp_path):
  (tmp_path / 'c.csv').write_text('text,label\na b,x\nc d,y\n')
  (tmp_path / 'r.csv').write_text('text,label\na b,1.5\nc d,2\n')
  (tmp_path / 't.jsonl').write_text(json.dumps({'tokens': ['a', 'b'], 'tags': ['B-X', 'O']})
                                    + '\n' + json.dumps({'tokens': ['c'], 'tags': ['O']}) + '\n')
  (tmp_path / 'm.jsonl').write_text(''.join(
      json.dumps({'context': 'a', 'choices': ['b', 'c'], 'label': i}) + '\n' for i in (0, 1)))
  (tmp_path / 's.csv').write_text(
      'video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,'
      'label\n' + ''.join(f'v{i},{i},a b,a,b,gold,c,d,e,f,{i}\n' for i in (0, 1)))
  question = {'id': '1', 'question': 'b?', 'answers': [{'text': 'b', 'answer_start': 2}]}
  (tmp_path / 'q.json').write_text(json.dumps({'version': '1.1', 'data': [
      {'title': 't', 'paragraphs': [{'context': 'a b c', 'qas': [question]}]}]}))
  files = {'classification': 'c.csv', 'regression': 'r.csv', 'tagging': 't.jsonl',
           'multiple_choice': 'm.jsonl', 'swag': 's.csv', 'span': 'q.json'}
  assert set(files) == set(registry.USER_TASKS)
  for name in finetune_config.TASKS:
    config = _config(name)
    if name in files:  # Its own file as eval file too: two examples cannot be split.
      config.data.train_file = config.data.eval_file = str(tmp_path / files[name])
    assert export_formats.task_kind(config) == registry.get_task(name, config.data).kind, name
