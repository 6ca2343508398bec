"""The run config: what a fine-tuning run resolves before any run or checkpoint exists."""

import json
import re
import types

import log_records
import numpy as np
import pytest

from bertjax.finetune import job_setup
from bertjax.finetune import run_config
from bertjax.finetune import run_data
from bertjax.interop import init_from
from bertjax.pretraining_data import embedded
from configs import finetune as finetune_config


def test_no_init_from_and_no_vocab_is_a_random_encoder_with_the_embedded_vocab():
  config = finetune_config.get_config('task=sst2,size=tiny')
  config.data.vocab_file = ''
  model_cfg, vocab_file = run_config.resolve_model(config, '')
  assert vocab_file == str(embedded.vocab_path())
  assert model_cfg.vocab_size == embedded.VOCAB_SIZE


def test_the_schedule_follows_the_run_unless_set():
  config = finetune_config.get_config('task=sst2,size=tiny')
  job_setup.set_steps(config, 200)  # The defaults: BERT's 10% warmup, decay over the run.
  assert (config.num_train_steps, config.optimizer.total_steps,
          config.optimizer.warmup_steps) == (200, 200, 20)
  # A user's own warmup and schedule length are kept (they were overwritten, silently).
  config = finetune_config.get_config('task=sst2,size=tiny')
  config.optimizer.warmup_steps, config.optimizer.total_steps = 7, 1000
  job_setup.set_steps(config, 200)
  assert (config.num_train_steps, config.optimizer.total_steps,
          config.optimizer.warmup_steps) == (200, 1000, 7)


def test_a_run_without_its_config_json_is_named_as_such(tmp_path, monkeypatch):
  # Its checkpoints are there, its record of the vocab is not: "has no vocab.txt" was false
  # (its vocab.txt copy may well be there).
  run = tmp_path / 'run'
  (run / 'checkpoints' / '3').mkdir(parents=True)
  (run / 'vocab.txt').write_text('[PAD]\n')
  config = finetune_config.get_config('task=sst2,size=tiny')
  monkeypatch.setattr(run_config.init_from, 'model_config', lambda path: {})
  for path in (run, run / 'checkpoints' / '3'):
    with pytest.raises(ValueError, match=rf'^init_from={path}: the run {run} has checkpoints '
                       'but no config.json .*: copy it back'):
      run_config.resolve_model(config, str(path))
  (run / 'checkpoints').rename(tmp_path / 'elsewhere')  # Not a run at all: the plain message.
  with pytest.raises(ValueError, match='has no vocab.txt'):
    run_config.resolve_model(config, str(run))


def test_pairs_for_a_model_without_a_second_segment_are_refused_before_training():
  # A pair task (MRPC) from a type_vocab_size=1 model: sentence B was read as sentence A.
  pairs = {'segment_ids': np.array([[0, 0, 1, 1, 0]])}
  task = types.SimpleNamespace(name='mrpc', read=lambda split: ([], {}),
                               featurize=lambda examples, tok, is_training: (pairs, None))
  config = finetune_config.get_config('task=mrpc,size=tiny')
  setup = types.SimpleNamespace(task=task, tokenizer=None, config=config)
  config.model.type_vocab_size = 1
  with pytest.raises(ValueError, match=r"^task mrpc's train examples hold text pairs \(segment "
                     r'id 1\), but the model has type_vocab_size=1'):
    job_setup.featurized(setup, 'train', True)
  config.model.type_vocab_size = 2
  assert job_setup.featurized(setup, 'train', True)[1] is pairs


@pytest.mark.parametrize('recorded, lower', [({'do_lower_case': False}, False),
                                             ({'do_lower_case': True}, True)])
def test_fine_tuning_from_a_transformers_folder_takes_no_other_casing(tmp_path, recorded, lower):
  (tmp_path / 'config.json').write_text('{}')
  (tmp_path / 'tokenizer_config.json').write_text(json.dumps(recorded))
  config = finetune_config.get_config('task=sst2,size=tiny')
  config.data.do_lower_case = not lower
  with pytest.raises(ValueError, match=rf'^init_from={tmp_path} was trained on .* '
                     rf'--config.data.do_lower_case={lower}\.$'):
    run_config.check_casing(config, str(tmp_path))
  config.data.do_lower_case = lower
  run_config.check_casing(config, str(tmp_path))


def test_fine_tuning_from_a_folder_that_records_no_casing_takes_the_users(tmp_path):
  """Pass T: lower case is only a default where the folder says nothing; an explicit choice
  was refused as contradicting what 'the folder' said (a dead end with a cased vocab)."""
  (tmp_path / 'config.json').write_text('{}')
  config = finetune_config.get_config('task=sst2,size=tiny')
  for lower in (True, False):
    config.data.do_lower_case = lower
    run_config.check_casing(config, str(tmp_path))


def _user_run(**data):
  """A user-file classification run's config (as config.json holds it) and a copy to change."""
  config = finetune_config.get_config('task=classification,size=tiny,batch=8')
  config.data.train_file = '/data/reviews.csv'
  for key, value in data.items():
    config.data[key] = value
  return config.to_dict(), config


@pytest.mark.parametrize('mode, change, named', [
    # Its eval examples are held out of reviews.csv by the seed and the fraction.
    ('eval', {'seed': 1}, 'seed 0 (the run) vs 1: it draws the eval examples held out'),
    ('eval', {'data.eval_fraction': 0.3}, 'data.eval_fraction 0.2 (the run) vs 0.3: it draws'),
    ('train_eval', {'data.eval_file': '/data/ev.csv'},
     "its eval examples, held out of the training file, would be trained on"),
    ('train_eval', {'global_batch_size': 16},
     'global_batch_size 8 (the run) vs 16: its steps are counted in epochs of its batch'),
    ('train_eval', {'data.max_train_examples': 10}, 'data.max_train_examples -1 (the run) vs 10'),
])
def test_a_config_that_would_train_on_or_score_other_examples_is_refused(mode, change, named):
  run, config = _user_run()
  config.mode = mode
  for key, value in change.items():
    parent, _, leaf = key.rpartition('.')
    (config[parent] if parent else config)[leaf] = value
  with pytest.raises(ValueError, match=re.escape(named)):
    run_config.check_against_run(config, run, '/runs/r')


def test_a_setting_the_run_was_trained_with_is_named_with_what_to_pass():
  """Finding 7: a run fine-tuned with seq=64 (an argument of get_config), evaluated with the
  config's default 128, was told to 'drop those overrides', though none was given: the line names
  what to pass to match the run, wherever the config's value came from."""
  trained = finetune_config.get_config('task=classification,size=tiny,batch=8,seq=64')
  trained.data.train_file = '/data/reviews.csv'
  run, config = trained.to_dict(), _user_run()[1]
  config.mode = 'eval'
  with pytest.raises(ValueError) as e:
    run_config.check_against_run(config, run, '/runs/r')
  assert str(e.value) == (
      '/runs/r was fine-tuned with other settings: data.max_seq_length 64 (the run) vs 128: pass '
      '--config.data.max_seq_length=64 (or add seq=64 to the argument string of '
      '--config=configs/finetune.py:...). Match the run (/runs/r/config.json) to resume, evaluate '
      'or predict with it as trained, or use another --workdir.')
  config.data.max_seq_length = 64  # As said: evaluates.
  run_config.check_against_run(config, run, '/runs/r')
  config.data.text_fields, config.data.do_lower_case = 'a,b', False
  with pytest.raises(ValueError, match=r'data.do_lower_case True \(the run\) vs False: pass '
                     r"--config.data.do_lower_case=True; data.text_fields 'text' \(the run\) vs "
                     r"'a,b': pass --config.data.text_fields=text\. Match the run"):
    run_config.check_against_run(config, run, '/runs/r')


def test_an_eval_file_dropped_is_refused_and_another_named_for_eval_is_not():
  run, config = _user_run(eval_file='/data/ev.csv')
  config.mode = 'eval'
  config.data.eval_file = ''  # Eval would score examples held out of the training ones.
  with pytest.raises(ValueError, match="without it, eval examples would be held out of the "
                     "ones it trained on"):
    run_config.check_against_run(config, run, '/runs/r')
  run, config = _user_run()
  config.mode = 'eval'
  config.data.eval_file = '/data/new_test.csv'  # A file of one's own to score: the user's call.
  config.seed = 1  # Irrelevant then.
  run_config.check_against_run(config, run, '/runs/r')
  config.mode, config.seed, config.data.eval_file = 'train_eval', 0, ''
  config.data.max_eval_examples = 5  # Scores fewer: refused nowhere.
  run_config.check_against_run(config, run, '/runs/r')
  config.global_batch_size, config.num_train_steps = 16, 40  # Steps asked for: from the examples
  run_config.check_against_run(config, run, '/runs/r')  # consumed, at the new batch.


def test_a_training_file_changed_under_a_run_is_refused(tmp_path):
  """Rows added, edited or reordered between a kill and the resume: the example order and the
  held-out eval examples would change, silently (the path is the same)."""
  train = tmp_path / 'reviews.csv'
  train.write_text('review,sentiment\ngood,1\nbad,0\n')
  run, config = _user_run()
  config.unlock()  # As job_setup's copy of the config is.
  run['data']['train_file'] = config.data.train_file = str(train)
  run['data']['train_sha256'] = run_data.data_digest(str(train))
  assert run_data.records_training_data(config)
  config.data.train_sha256 = run_data.data_digest(str(train))
  run_config.check_against_run(config, run, '/runs/r')  # Unchanged: resumes.
  for rows in ('good,1\nbad,0\nfine,1\n', 'bad,0\ngood,1\n', 'good,1\nbad,1\n'):
    train.write_text('review,sentiment\n' + rows)
    config.data.train_sha256 = run_data.data_digest(str(train))
    with pytest.raises(ValueError, match=f"data.train_file '{train}' holds other rows than it "
                       r'did \(sha256 [0-9a-f]{12}\.\.\. vs [0-9a-f]{12}\.\.\.\): rows added'):
      run_config.check_against_run(config, run, '/runs/r')
  config.mode = 'predict'  # Predictions read no training rows: not computed, not compared.
  assert not run_data.records_training_data(config)



def test_a_resume_reading_its_files_moved_since_is_not_refused_as_another_eval_set(tmp_path):
  """Helper-180's pass (moved runs and data): train.csv and dev.csv moved, the resume naming
  their new place was refused as another eval set, told to pass the old path (gone); the same
  rows (sha256) at another path are the run's eval set, other rows there are still refused."""
  moved = tmp_path / 'moved'
  moved.mkdir()
  (moved / 'dev.csv').write_text('review,sentiment\nnew,positive\nold,negative\n')
  run, config = _user_run(eval_file=str(tmp_path / 'dev.csv'))
  config.unlock()
  run['data']['eval_sha256'] = run_data.data_digest(str(moved / 'dev.csv'), 'eval_file')
  config.data.eval_file = str(moved / 'dev.csv')
  config.data.eval_sha256 = run_data.data_digest(config.data.eval_file, 'eval_file')
  run_config.check_against_run(config, run, '/runs/r')  # Moved: resumes.
  (moved / 'dev.csv').write_text('review,sentiment\nnew,negative\n')
  config.data.eval_sha256 = run_data.data_digest(config.data.eval_file, 'eval_file')
  with pytest.raises(ValueError, match=re.escape(
      f"data.eval_file '{tmp_path}/dev.csv' (the run) vs '{moved}/dev.csv': its eval history")):
    run_config.check_against_run(config, run, '/runs/r')

def test_another_init_from_on_a_resume_is_said_not_to_be_loaded(caplog):
  run, config = _user_run()
  config.init_from = '/models/minilm'
  with caplog.at_level('WARNING'):
    run_config.check_against_run(config, run, '/runs/r')
  assert ("init_from=/models/minilm is not loaded: /runs/r resumes from its own checkpoint (the "
          "run began from random weights)") in caplog.text
  # An eval or predict reads the run's checkpoint: another init_from given was read nowhere,
  # without a word (hostile pass of 2026-12-01); none given says nothing.
  for mode in ('eval', 'predict'):
    config.mode = mode
    caplog.clear()
    with caplog.at_level('WARNING'):
      run_config.check_against_run(config, run, '/runs/r')
    assert caplog.messages == [
        f"init_from=/models/minilm is not read: --config.mode={mode} reads /runs/r's own "
        'checkpoint (the run began from random weights); to score that model, fine-tune from it '
        'in another --workdir'], caplog.messages
  config.init_from = ''
  caplog.clear()
  with caplog.at_level('WARNING'):
    run_config.check_against_run(config, run, '/runs/r')
  assert not caplog.messages


def test_the_step_a_run_began_from_named_by_its_number_is_the_same_init_from(caplog):
  """A run began from /pre's 'best', which was step 8 (config.json records the folder read):
  resumed with init_from_step=8 it was warned that this other init_from is not loaded."""
  run, config = _user_run()
  run.update(init_from='/pre', init_from_step='best', init_from_read='/pre/checkpoints/8')
  config.init_from = '/pre'
  for step, same in (('8', True), ('9', False), ('latest', False), ('best', True)):
    config.init_from_step = step
    assert init_from.began_from(config, run) == same, step
  config.init_from, config.init_from_step = '/pre/checkpoints/8', 'latest'
  assert init_from.began_from(config, run)
  config.init_from, config.init_from_step = '/pre', '8'
  with caplog.at_level('WARNING'):
    run_config.check_against_run(config, run, '/runs/r')
  assert 'is not loaded' not in caplog.text
  config.init_from_step = '9'
  with caplog.at_level('WARNING'):
    run_config.check_against_run(config, run, '/runs/r')
  assert ("init_from=/pre (step 9) is not loaded: /runs/r resumes from its own checkpoint (the "
          "run began from /pre (step best))") in caplog.text


def test_a_resume_with_another_model_function_is_refused_and_another_shape_said(tmp_path,
                                                                                caplog):
  """Pass S: with size= given, a --config.model.* override on a resume was replaced by the
  run's value without a word: hidden_act or layer_norm_eps (weights under another function)
  is refused; a shape field is said, and the run's shape (its checkpoints') is used."""
  config = finetune_config.get_config('task=sst2,size=tiny')
  run = {'model': {**config.model.to_dict()}, 'data': {'vocab_file': ''}}
  for field, value in (('hidden_act', 'relu'), ('layer_norm_eps', 1e-5)):
    changed = finetune_config.get_config('task=sst2,size=tiny')
    changed.model[field] = value
    with pytest.raises(ValueError, match=rf'{tmp_path} holds another model than config.model '
                       rf"\(model.{field} .* in the run vs {value!r}\): drop the override"):
      run_config.resolve_model(changed, '', run, str(tmp_path))
  changed = finetune_config.get_config('task=sst2,size=tiny')
  changed.model.num_layers = 1
  with caplog.at_level('WARNING'), pytest.raises(FileNotFoundError, match='keeps no copy of its '
                                                 'vocab'):
    run_config.resolve_model(changed, '', run, str(tmp_path))
  assert (f"{tmp_path} holds another model shape than config.model (model.num_layers 2 in the "
          "run vs 1): the run's is used") in caplog.text


def test_a_resume_of_a_run_on_the_embedded_vocab_says_no_shape_changed(tmp_path, monkeypatch):
  """Pass AC: a run with neither init_from nor data.vocab_file takes the embedded corpus's
  vocab; its resume compared that with the config's default 30522 and warned of a change the
  user never made."""
  config = finetune_config.get_config('task=sst2,size=tiny')
  config.data.vocab_file = ''
  first, vocab = run_config.resolve_model(config, '')
  (tmp_path / 'vocab.txt').write_bytes(embedded.vocab_path().read_bytes())
  run = {'model': first.to_dict(), 'data': {'vocab_file': vocab}, 'job': 'finetune'}
  (tmp_path / 'config.json').write_text(json.dumps(run))
  (tmp_path / 'checkpoints').mkdir()
  said = log_records.recorded_warnings(monkeypatch, run_config)
  again, _ = run_config.resolve_model(config, '', run, str(tmp_path))
  assert again.vocab_size == embedded.VOCAB_SIZE and not said, said
  config.model.num_layers = 1  # A change the user made is still said.
  run_config.resolve_model(config, '', run, str(tmp_path))
  assert said == [f"{tmp_path} holds another model shape than config.model (model.num_layers 2 "
                  "in the run vs 1): the run's is used, as its checkpoints hold it"], said
