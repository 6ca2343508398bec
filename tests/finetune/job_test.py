"""The fine-tuning loop: sharded equals one device, exact resume, init from checkpoints, modes.

A tiny encoder with the embedded corpus's vocab learns an SST-2-layout task made of
Shakespeare words (a sentence with "love" or "sweet" is positive), so runs take seconds.
"""

import json
import pathlib
import re
import shutil
import threading
import zipfile

import finetune_runs
import flax
import glue_files
import jax
import log_records
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
from safetensors import numpy as st_numpy

from bertjax import console
from bertjax import predict
from bertjax import pretrain as pretrain_job
from bertjax.finetune import batches
from bertjax.finetune import job as finetune
from bertjax.finetune import job_setup
from bertjax.finetune import kinds
from bertjax.finetune.tasks import conll
from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import glue_readers
from bertjax.finetune.tasks import registry
from bertjax.interop import init_from
from bertjax.interop import sources
from bertjax.model import encoder
from bertjax.model import heads
from bertjax.training import checkpoint
from bertjax.training import loop
from bertjax.training import preemption
from configs import finetune as finetune_config
from configs import pretrain

write_sst2 = finetune_runs.write_sst2
tiny_config = finetune_runs.tiny_config
final_params = finetune_runs.final_params
# Runs whose subject is neither sharding nor evaluation take the first device only
# (tests/conftest.py): the 8 simulated devices only slow them down. Sharding, resume, packing
# and the end-to-end runs of every task keep all 8: their last eval batch is part padding, whole
# shards of it, which each kind's metrics and predictions must leave out.
ONE_DEVICE = pytest.mark.usefixtures('one_device')


@pytest.fixture(scope='module')
def sst2_dir(tmp_path_factory):
  return write_sst2(tmp_path_factory.mktemp('sst2'))


def test_learns_and_eight_devices_equal_one(sst2_dir, tmp_path, request):
  # One eval and one save, at the end: what the test reads (resume tests save every 3 steps).
  config = tiny_config(sst2_dir, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3,
                                    'eval_every_steps': 32, 'checkpoint.every_steps': 1000})
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
  sharded = finetune.train_and_evaluate(config, str(tmp_path / 'eight'))

  request.getfixturevalue('one_device')  # From here on, one device (tests/conftest.py).
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = -1, 1, 1
  single = finetune.train_and_evaluate(config, str(tmp_path / 'one'))

  # 64 examples / 16 = 4 steps per epoch, 8 epochs.
  (a, step_a), (b, step_b) = final_params(tmp_path / 'eight'), final_params(tmp_path / 'one')
  assert step_a == step_b == 32
  for key in a:
    np.testing.assert_allclose(a[key], b[key], atol=2e-5, rtol=1e-4, err_msg=key)
  assert sharded['accuracy'] == pytest.approx(single['accuracy'], abs=1e-6)
  assert sharded['loss'] == pytest.approx(single['loss'], rel=1e-4)
  # The task is learnable from one word: a random-init tiny model gets well past chance.
  assert sharded['accuracy'] >= 0.9, sharded
  results = json.loads((tmp_path / 'eight' / 'eval_results.json').read_text())
  assert results['accuracy'] == pytest.approx(sharded['accuracy'])
  predictions = (tmp_path / 'eight' / 'predictions' / 'step_32' / 'sst2-validation.tsv').read_text()
  assert predictions.splitlines()[0] == 'index\tprediction'
  assert len(predictions.splitlines()) == 1 + 24


PACKED = {'data.max_seq_length': 48, 'data.max_instances_per_row': 3}


@pytest.mark.parametrize('fields', [{}, PACKED], ids=['one_per_row', 'packed'])
def test_resume_after_a_crash_is_exact(sst2_dir, tmp_path, monkeypatch, fields):
  config = tiny_config(sst2_dir, **fields)  # 8 steps; saves at 3, 4 (epoch end), 6, 8.
  finetune.train_and_evaluate(config, str(tmp_path / 'straight'))

  example_indices = finetune_runs.crash_at_step(monkeypatch, 7)
  with pytest.raises(KeyboardInterrupt):
    finetune.train_and_evaluate(config, str(tmp_path / 'crashed'))
  assert final_params(tmp_path / 'crashed')[1] == 6
  monkeypatch.setattr(batches, 'example_indices', example_indices)
  finetune.train_and_evaluate(config, str(tmp_path / 'crashed'))

  (a, step_a), (b, step_b) = final_params(tmp_path / 'straight'), final_params(tmp_path / 'crashed')
  assert step_a == step_b == 8
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)


# The sst2 runs of a few steps keep the schedule of tiny_config's 8 steps (2 epochs): their
# learning rates are no subject of theirs, and the rates are constants of the compiled step, so
# each shares the step of the 8-step runs on its mesh (the session's compilation cache,
# tests/conftest.py) instead of compiling its own.
EIGHT_STEP_SCHEDULE = {'optimizer.total_steps': 8}


@ONE_DEVICE
def test_a_resume_with_another_batch_size_continues_from_the_examples_consumed(
    sst2_dir, tmp_path, monkeypatch):
  # Batch 16: 48 examples consumed.
  config = tiny_config(sst2_dir, num_train_steps=3, **EIGHT_STEP_SCHEDULE)
  finetune.train_and_evaluate(config, str(tmp_path))
  example_indices, firsts = batches.example_indices, []

  def recording(first, batch_size, *args, **kwargs):
    firsts.append((first, batch_size))
    return example_indices(first, batch_size, *args, **kwargs)

  monkeypatch.setattr(batches, 'example_indices', recording)
  said = log_records.recorded_warnings(monkeypatch, checkpoint)
  finetune.train_and_evaluate(tiny_config(sst2_dir, num_train_steps=5, global_batch_size=8,
                                          **EIGHT_STEP_SCHEDULE), str(tmp_path))
  # Steps 3 and 4 at batch 8 read examples 48..63 (step x batch would restart at 24).
  assert {(48, 8), (56, 8)} <= set(firsts) and not {f for f, _ in firsts} & {24, 32}, firsts
  assert final_params(tmp_path)[1] == 5
  assert [line for line in said if 'batch size' in line] == [
      'the global batch size changed from 16 to 8: data continues from example 48, where the '
      'checkpoint stopped']
  # Pass 33, item 14: every later resume at the new batch repeated the change (step x batch
  # differs from the examples consumed for the rest of the run).
  said.clear()
  finetune.train_and_evaluate(tiny_config(sst2_dir, num_train_steps=6, global_batch_size=8,
                                          **EIGHT_STEP_SCHEDULE), str(tmp_path))
  assert final_params(tmp_path)[1] == 6
  assert not [line for line in said if 'batch size' in line], said


@ONE_DEVICE
def test_a_preset_tasks_training_files_changed_under_a_run_are_refused_on_resume(
    sst2_dir, tmp_path):
  # A GLUE folder (data_dir) edited between a run and its resume: the run went on over other
  # examples in another order, silently (only a user's train_file was digested).
  data = tmp_path / 'sst2'
  shutil.copytree(sst2_dir, data)
  for steps in (2, 3):
    finetune.train_and_evaluate(tiny_config(data, num_train_steps=steps, **EIGHT_STEP_SCHEDULE),
                                str(tmp_path / 'run'))
  train = next(data.rglob('train.tsv'))
  rows = train.read_text().splitlines(keepends=True)
  train.write_text(''.join(rows[:1] + rows[2:]))  # One row gone.
  with pytest.raises(ValueError, match=r'fine-tuned on other training examples: task sst2 reads '
                     r'other features from .*sst2 now .*Restore the data'):
    finetune.train_and_evaluate(tiny_config(data, num_train_steps=4, **EIGHT_STEP_SCHEDULE),
                                str(tmp_path / 'run'))
  assert final_params(tmp_path / 'run')[1] == 3  # Nothing of the run was touched.


# job_lines.duration's forms: '3.2 s', or '1m50s' on a loaded machine.
TOOK = r'(\d+\.\d s|\d+m\d\ds)'


def _last_line(capsys) -> str:
  return capsys.readouterr().out.strip().splitlines()[-1]


def test_predict_mode_writes_test_predictions(sst2_dir, tmp_path, capsys, monkeypatch):
  config = tiny_config(sst2_dir, num_train_steps=2, **EIGHT_STEP_SCHEDULE)
  result = finetune.train_and_evaluate(config, str(tmp_path))
  # Every mode ends with its summary line: how it ended, the task's metrics, where outputs are.
  assert re.fullmatch(
      rf'finetune finished in {TOOK}: step 2/2, train loss [\d.]+, eval accuracy '
      rf'{result["accuracy"]:.4g}, loss [\d.]+; eval results {tmp_path}/eval_results.json, '
      rf'predictions {tmp_path}/predictions/step_2, checkpoints {tmp_path}/checkpoints \(step 2\), '
      rf'TensorBoard {tmp_path}', _last_line(capsys))
  config.mode = 'eval'
  finetune.run(config, str(tmp_path))
  # The training run's eval again, its loss too (what a best_metric=loss run ranked by).
  assert re.fullmatch(rf'finetune eval finished in {TOOK}: step 2, validation accuracy '
                      rf'{result["accuracy"]:.4g}, validation loss {result["loss"]:.4g}; results '
                      rf'and predictions {tmp_path}/predictions/eval_step_2', _last_line(capsys))
  evaluated = json.loads((tmp_path / 'predictions' / 'eval_step_2' /
                          'validation_results.json').read_text())
  assert [evaluated[k] for k in ('accuracy', 'loss')] == pytest.approx(
      [result['accuracy'], result['loss']], rel=1e-5)
  config.mode = 'predict'
  (path,) = finetune.run(config, str(tmp_path))
  assert re.fullmatch(rf'finetune predict finished in {TOOK}: step 2, test examples 10; '
                      rf'predictions {tmp_path}/predictions/predict_step_2', _last_line(capsys))
  lines = pathlib.Path(path).read_text().splitlines()
  assert lines[0] == 'index\tprediction'
  assert [line.split('\t')[0] for line in lines[1:]] == [str(i) for i in range(10)]
  assert {line.split('\t')[1] for line in lines[1:]} <= {'0', '1'}
  # Run again, the finished run says so and trains nothing; the same config names no change.
  config.mode = 'train_eval'
  warned = log_records.recorded_warnings(monkeypatch, loop)
  finetune.train_and_evaluate(config, str(tmp_path))
  assert not [w for w in warned if 'trains nothing' in w], warned
  assert re.fullmatch(
      rf'finetune finished in {TOOK}: step 2/2 \(reached before: nothing to do\), eval '
      rf'accuracy {result["accuracy"]:.4g}, loss [\d.]+; eval results .*', _last_line(capsys))

  config.mode = 'predict'
  with pytest.raises(FileNotFoundError, match='fine-tune first'):
    finetune.run(config, str(tmp_path / 'empty'))


@ONE_DEVICE
def test_a_run_resumed_with_fewer_steps_than_it_took_names_its_last_eval(
    sst2_dir, tmp_path, monkeypatch, capsys):
  # Preempted at step 5 (saved there) after its eval at step 4 (the first epoch's end), then
  # rerun with 4 steps: it said 'finetune finished ...: step 5/4' and named predictions/step_5,
  # which does not exist, beside step 4's figures.
  monkeypatch.setattr(console, '_PREEMPTED', threading.Event())  # Process-wide otherwise.
  monkeypatch.setattr(preemption.Preemption, 'reached', lambda self, step: step == 5)
  finetune.train_and_evaluate(tiny_config(sst2_dir), str(tmp_path))
  history = json.loads((tmp_path / 'eval_history.json').read_text())
  assert list(history) == ['4'] and final_params(tmp_path)[1] == 5
  assert [p.name for p in (tmp_path / 'predictions').iterdir()] == ['step_4']
  capsys.readouterr()
  monkeypatch.setattr(console, '_PREEMPTED', threading.Event())  # The rerun is no preemption.

  result = finetune.train_and_evaluate(tiny_config(sst2_dir, num_train_steps=4), str(tmp_path))
  assert result == history['4'] | {'skipped': 0}
  assert re.fullmatch(
      rf"finetune stopped \(already at step 5, past this config's 4 steps: nothing to do\) "
      rf'in {TOOK}: step 5/4, eval at step 4: '
      rf'accuracy {history["4"]["accuracy"]:.4g}, loss {history["4"]["loss"]:.4g}; eval results '
      rf'{tmp_path}/eval_results.json, predictions {tmp_path}/predictions/step_4, checkpoints '
      rf'{tmp_path}/checkpoints \(step 5\), TensorBoard {tmp_path}', _last_line(capsys))
  assert final_params(tmp_path)[1] == 5 and not console.preempted()


@ONE_DEVICE
def test_init_from_transformers_loads_the_encoder_and_reports_the_head(
    minilm_dir, sst2_dir, tmp_path, monkeypatch):
  config = tiny_config(sst2_dir, num_train_steps=1, **{'optimizer.learning_rate': 0.0,
                                                       'optimizer.weight_decay': 0.0})
  config.init_from = str(minilm_dir)
  config.model_from_init = True
  config.model.dropout_rate = 0.0
  config.model.attention_dropout_rate = 0.0
  reports, said = [], log_records.recorded_warnings(monkeypatch, finetune, 'info')
  load_encoder = init_from.load_encoder
  monkeypatch.setattr(init_from, 'load_encoder',
                      lambda *a, **k: reports.append(load_encoder(*a, **k)) or reports[-1])
  finetune.train_and_evaluate(config, str(tmp_path))
  params, _ = final_params(tmp_path)
  (_, report), = reports
  assert report['fresh'] == ['classifier/bias', 'classifier/kernel']
  assert len(report['loaded']) == len([k for k in params if k.startswith('bert/')])
  # lr 0: the saved encoder is exactly the imported one.
  hf = st_numpy.load_file(str(minilm_dir / 'model.safetensors'))
  np.testing.assert_array_equal(params['bert/embeddings/word_embeddings/embedding'],
                                hf['embeddings.word_embeddings.weight'])
  np.testing.assert_array_equal(params['bert/layers_5/mlp/output/kernel'],
                                hf['encoder.layer.5.output.dense.weight'].T)
  # MiniLM's tokenizer reads a word of over 100 characters as [UNK] (the original BERT's: 200):
  # the run tokenizes so, records it, and its readers and exports tokenize so too.
  assert json.loads((tmp_path / 'config.json').read_text())['data']['max_chars_per_word'] == 100
  assert sources.load(str(tmp_path)).max_chars_per_word == 100
  assert predict.Predictor.from_workdir(tmp_path).tokenizer.max_input_chars_per_word == 100
  config.init_from = ''  # A resume (or its eval or predict) reads the run's record.
  assert job_setup.setup(config, str(tmp_path)).tokenizer.max_input_chars_per_word == 100
  # The source's heads are said as not read, never as "unused: none" beside its own report.
  loaded, = [line for line in said if 'encoder tensors' in line]
  assert 'its tensors not read: none (a head it has is not' in loaded
  assert report['lacked'] == []  # MiniLM has its pooler.


def test_size_that_does_not_fit_the_checkpoint(minilm_dir, sst2_dir, tmp_path):
  config = tiny_config(sst2_dir)
  config.init_from = str(minilm_dir)  # tiny: hidden 128, the checkpoint 384.
  with pytest.raises(ValueError, match='hidden_size 384 in the checkpoint vs 128'):
    finetune.train_and_evaluate(config, str(tmp_path))
  assert not (tmp_path / 'config.json').exists()


def test_unknown_task_lists_the_valid_ones():
  with pytest.raises(ValueError, match='valid tasks: cola, sst2, mrpc'):
    finetune_config.get_config('task=glue')
  config = finetune_config.get_config('task=sst2')
  with pytest.raises(ValueError, match='squad_v2, conll2003, bbc, wordnet'):
    registry.get_task('sst-2', config.data)


def test_every_task_has_a_preset_and_a_reader():
  for name in finetune_config.TASKS:
    config = finetune_config.get_config(f'task={name}')
    if name in registry.USER_TASKS:  # Read from the user's files: user_tasks_test runs each kind.
      with pytest.raises(ValueError, match='config.data.(train|eval)_file'):
        registry.get_task(name, config.data)
      continue
    task = registry.get_task(name, config.data)
    assert task.kind in kinds.KINDS, name
  assert set(finetune_config.TASKS) == set(registry.NAMES)


def _minilm_tiny(task, data_dir, minilm_dir, seq, **overrides):
  """A tiny random encoder over the real uncased BERT vocab (MiniLM's), for pipeline tests."""
  config = tiny_config(data_dir, num_train_steps=2, **overrides)
  config.task = task
  config.model.vocab_size = 30522
  config.data.vocab_file = str(minilm_dir / 'vocab.txt')
  config.data.max_seq_length = seq
  return config


def _squad_dir(allennlp_wheel, tmp_path):
  """(a SQuAD v1.1 folder, its JSON): allennlp's real fixture as both train and dev."""
  with zipfile.ZipFile(allennlp_wheel) as wheel:
    squad_json = wheel.read('allennlp/tests/fixtures/data/squad.json')
  data_dir = tmp_path / 'squad'
  data_dir.mkdir()
  for name in ('train-v1.1.json', 'dev-v1.1.json'):
    (data_dir / name).write_bytes(squad_json)
  return data_dir, squad_json


def test_squad_end_to_end_writes_every_answer(allennlp_wheel, minilm_dir, tmp_path):
  data_dir, squad_json = _squad_dir(allennlp_wheel, tmp_path)
  config = _minilm_tiny('squad_v1', data_dir, minilm_dir, 64, **{'data.doc_stride': 32,
                                                                  'data.max_query_length': 16})
  results = finetune.train_and_evaluate(config, str(tmp_path / 'run'))
  assert 0 <= results['exact_match'] <= results['f1'] <= 100
  written = json.loads((tmp_path / 'run/predictions/step_2/predictions.json').read_text())
  qids = {qa['id'] for article in json.loads(squad_json)['data']
          for paragraph in article['paragraphs'] for qa in paragraph['qas']}
  assert set(written) == qids


def test_conll_end_to_end_tags_every_word(allennlp_wheel, minilm_dir, tmp_path):
  with zipfile.ZipFile(allennlp_wheel) as wheel:
    text = wheel.read('allennlp/tests/fixtures/data/conll2003.txt')
  data_dir = tmp_path / 'conll'
  data_dir.mkdir()
  for name in ('train.txt', 'valid.txt', 'test.txt'):
    (data_dir / name).write_bytes(text)
  config = _minilm_tiny('conll2003', data_dir, minilm_dir, 16)  # Forces split sentences.
  results = finetune.train_and_evaluate(config, str(tmp_path / 'run'))
  assert set(results) >= {'f1', 'precision', 'recall', 'accuracy', 'loss'}
  config.mode = 'predict'
  (path,) = finetune.run(config, str(tmp_path / 'run'))
  sentences = conll.read_conll(data_dir / 'test.txt')
  lines = [line for line in pathlib.Path(path).read_text().splitlines() if line.strip()]
  assert len(lines) == sum(len(s.words) for s in sentences)
  assert all(line.split()[-1] in conll.LABELS for line in lines)


@pytest.mark.parametrize('task', sorted(glue.TASKS))
def test_every_glue_preset_trains_evaluates_and_predicts(task, minilm_dir, tmp_path):
  """Each GLUE task's preset on its hand-made files in the real layout (tests/glue_files.py)."""
  glue_files.write_glue(tmp_path / 'glue', [task])
  spec = glue.get_task(task)
  config = _minilm_tiny(task, tmp_path / 'glue', minilm_dir, 32, global_batch_size=8,
                        eval_batch_size=8)
  results = finetune.train_and_evaluate(config, str(tmp_path / 'run'))
  assert set(spec.metrics) | {'loss'} <= set(results), results
  if task == 'mnli':  # Matched first (bare names), then mismatched.
    assert {'validation_mismatched/accuracy'} <= set(results)
  config.mode = 'predict'
  paths = finetune.run(config, str(tmp_path / 'run'))
  assert sorted(pathlib.Path(p).name for p in paths) == sorted(spec.submission_files.values())
  for path, split in zip(paths, spec.test_splits, strict=True):
    test_examples, _ = glue_readers.read_examples(task, tmp_path / 'glue', split)
    rows = pathlib.Path(path).read_text().splitlines()[1:]
    assert [r.split('\t')[0] for r in rows] == [e.guid for e in test_examples]
    values = [r.split('\t')[1] for r in rows]
    if spec.kind == 'regression':
      assert all(0 <= float(v) <= 5 for v in values)
    else:
      assert set(values) <= set(spec.labels)


@ONE_DEVICE  # The pre-training run too: its mesh comes from sharding.make_mesh.
def test_init_from_our_pretraining_checkpoint_into_scanned_layers(sst2_dir, tmp_path):
  """Pre-train 2 steps, then fine-tune from that workdir: shape from its meta, layers stacked."""
  pre = pretrain.get_config('size=tiny,steps=2,batch=8,seq=32')
  pre.model.update(dict(num_layers=2, hidden_size=64, num_heads=2, mlp_dim=128))
  pre.data.update(dict(dupe_factor=1, shuffle_window=100, num_lanes=2))
  pre.eval_batch_size, pre.max_eval_batches = 8, 1
  pretrain_job.train_and_evaluate(pre, str(tmp_path / 'pre'))

  config = tiny_config(sst2_dir, num_train_steps=1, **{'optimizer.learning_rate': 0.0,
                                                       'optimizer.weight_decay': 0.0})
  config.init_from = str(tmp_path / 'pre')
  config.model_from_init = True
  config.model.scan_layers = True
  finetune.train_and_evaluate(config, str(tmp_path / 'fine'))
  pretrained, _ = final_params(tmp_path / 'pre')
  tuned, _ = final_params(tmp_path / 'fine')
  assert tuned['bert/layers/mlp/output/kernel'].shape == (2, 128, 64)
  for i in range(2):
    np.testing.assert_array_equal(tuned['bert/layers/attention/query/kernel'][i],
                                  pretrained[f'bert/layers_{i}/attention/query/kernel'])
  np.testing.assert_array_equal(tuned['bert/pooler/kernel'],
                                pretrained['bert/pooler/kernel'])
  assert not any(k.startswith(('mlm/', 'nsp/')) for k in tuned)
  # The step read is recorded (init_from_step 'latest', by default: it moves as the run goes).
  recorded = json.loads((tmp_path / 'fine' / 'config.json').read_text())
  assert recorded['init_from_read'] == str(tmp_path / 'pre' / 'checkpoints' / '2'), recorded


def test_mean_pooling_head_and_its_detection(minilm_dir):
  assert init_from.pooling(str(minilm_dir)) == 'mean'  # sentence-transformers' 1_Pooling.
  assert init_from.pooling('') is None
  cfg = finetune_config.get_config('task=sst2,size=tiny').model
  module = heads.BertForSequenceClassification(cfg, 3, 'mean')
  ids = np.array([[1, 5, 6, 7, 2, 0, 0], [1, 8, 2, 0, 0, 0, 0]], np.int32)
  mask = (ids > 0).astype(np.int32)
  segments = np.zeros_like(ids)
  # Jitted, as the steps run them: op by op, each primitive compiled on its own (~20 s).
  params = flax.linen.unbox(jax.jit(module.init)(jax.random.key(0), ids, mask, segments))
  params = jax.device_get(params['params'])
  apply = jax.jit(module.apply)
  logits = apply({'params': params}, ids, mask, segments)
  x, _ = jax.jit(encoder.BertEncoder(cfg).apply)({'params': params['bert']}, ids, mask, segments)
  pooled = np.stack([np.asarray(x)[i, mask[i] > 0].mean(0) for i in range(2)])
  expected = pooled @ params['classifier']['kernel'] + params['classifier']['bias']
  np.testing.assert_allclose(logits, expected, atol=1e-5)
  ids_other_padding = np.where(mask > 0, ids, 9)
  np.testing.assert_allclose(apply({'params': params}, ids_other_padding, mask, segments),
                             logits, atol=1e-6)


def test_a_fraction_of_a_step_is_said_to_run_one(monkeypatch):
  config = finetune_config.get_config('task=sst2')
  config.num_train_steps, config.global_batch_size, config.num_epochs = 0, 32, 0.001
  warned = log_records.recorded_warnings(monkeypatch, job_setup)
  assert job_setup.num_steps(config, 3_200) == 1
  assert warned == ['num_epochs=0.001 is 0.1 of a step (3200 train features, batch 32): running '
                    '1 step; set --config.num_train_steps to choose the steps instead'], warned
  warned.clear()
  config.num_epochs = 0.01
  assert job_setup.num_steps(config, 3_200) == 1
  assert not warned


def test_read_counters_are_not_counted_as_skips(monkeypatch):
  """A reader's counters of what it read or repaired are not skips; what it dropped is."""
  from bertjax.finetune.tasks import labelled_split  # pylint: disable=g-import-not-at-top
  from bertjax.finetune.tasks import wordnet_glosses  # pylint: disable=g-import-not-at-top

  def read_wordnet(directory, *, stats):
    del directory
    stats.update({'synsets_read': 2225, 'cp1252_decoded': 1, 'duplicate_dropped': 98,
                  'no_definition_dropped': 0})
    return [labelled_split.Example(f'g{i}', f'text {i}', None,
                                   wordnet_glosses.SUPERSENSES[i % 3])
            for i in range(30)]

  monkeypatch.setattr(wordnet_glosses, 'read_wordnet', read_wordnet)
  config = finetune_config.get_config('task=wordnet')
  config.data.data_dir = '/nowhere'
  task = registry.get_task('wordnet', config.data, seed=0)
  examples, dropped = task.read('train')
  assert dict(dropped) == {'duplicate_dropped': 98} and len(examples) == 24


def _sst2_long(sst2_dir, tmp_path):
  del tmp_path  # The conll config's files; the sst2 ones are the module's.
  # 'cls' is what 'auto' gives without init_from: named, for the packing test's [cls] case.
  return tiny_config(sst2_dir, **{'data.max_seq_length': 48, 'pooling': 'cls'})


def _conll_long(allennlp_wheel, minilm_dir, tmp_path):
  with zipfile.ZipFile(allennlp_wheel) as wheel:
    text = wheel.read('allennlp/tests/fixtures/data/conll2003.txt')
  data_dir = tmp_path / 'conll'
  data_dir.mkdir(parents=True)
  for name in ('train.txt', 'valid.txt', 'test.txt'):
    (data_dir / name).write_bytes(text)
  config = _minilm_tiny('conll2003', data_dir, minilm_dir, 96)
  config.num_train_steps = 4
  return config


def _no_dropout(config):
  """Dropout off: its masks are drawn for the batch's shape, so with it on, runs whose rows
  are cut or packed otherwise differ as two seeds do."""
  config.model.dropout_rate = config.model.attention_dropout_rate = 0.0
  return config


def _full_rows_run(config, workdir) -> dict:
  """`config` run with one example per row at its full length (data.pad_to_multiple_of 0),
  dropout off: {'workdir', 'results' (eval), 'lengths' (the batches were cut to, sorted)}."""
  _no_dropout(config).data.pad_to_multiple_of = 0
  lengths, trim = [], kinds.trim
  # float32_matmuls is function-scoped: not yet on when a module-scoped fixture runs this.
  with pytest.MonkeyPatch.context() as patch, jax.default_matmul_precision('float32'):
    patch.setattr(kinds, 'trim', lambda kind, host, length: (
        lengths.append(length), trim(kind, host, length))[1])
    results = finetune.train_and_evaluate(config, str(workdir))
  return {'workdir': workdir, 'results': results, 'lengths': sorted(set(lengths))}


# The reference runs of the dynamic padding test and the packing tests (the same examples one per
# row at full length, on 8 devices), made once for both.
@pytest.fixture(scope='module')
def sst2_full_rows(sst2_dir, tmp_path_factory):
  return _full_rows_run(_sst2_long(sst2_dir, None), tmp_path_factory.mktemp('sst2_full_rows'))


@pytest.fixture(scope='module')
def conll_full_rows(allennlp_wheel, minilm_dir, tmp_path_factory):
  root = tmp_path_factory.mktemp('conll_full_rows')
  return _full_rows_run(_conll_long(allennlp_wheel, minilm_dir, root), root / 'run')


@pytest.mark.parametrize('make_config, full_rows', [(_sst2_long, 'sst2_full_rows'),
                                                     (_conll_long, 'conll_full_rows')],
                         ids=['sst2', 'conll2003'])
def test_dynamic_padding_trains_and_predicts_like_full_rows(make_config, full_rows, request,
                                                            tmp_path, monkeypatch):
  """Batches cut to their longest row (data.pad_to_multiple_of) give the parameters, eval
  metrics and predictions of full-length batches: sequence classification and tagging. Dropout
  is off (_no_dropout). The full-length run is the module's (shared with the packing tests)."""
  full_rows = request.getfixturevalue(full_rows)
  fixtures = [request.getfixturevalue(name) for name in
              (('sst2_dir',) if make_config is _sst2_long else ('allennlp_wheel', 'minilm_dir'))]
  lengths = []
  trim = kinds.trim
  monkeypatch.setattr(kinds, 'trim', lambda kind, host, length: (
      lengths.append(length), trim(kind, host, length))[1])
  config = _no_dropout(make_config(*fixtures, tmp_path))
  config.data.pad_to_multiple_of = 8
  cut = finetune.train_and_evaluate(config, str(tmp_path / 'run8'))
  full, seen = config.data.max_seq_length, sorted(set(lengths))
  assert full_rows['lengths'] == [full]
  assert max(seen) < full and not any(n % 8 for n in seen)
  workdirs = (full_rows['workdir'], tmp_path / 'run8')
  (a, step_a), (b, step_b) = (final_params(w) for w in workdirs)
  assert step_a == step_b
  for key in a:
    np.testing.assert_allclose(a[key], b[key], atol=2e-6, err_msg=key)
  for key, value in full_rows['results'].items():
    assert cut[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
  predictions = [sorted((w / 'predictions').rglob('*.*')) for w in workdirs]
  assert predictions[0]
  for full_file, cut_file in zip(*predictions, strict=True):
    assert full_file.read_text() == cut_file.read_text()


@pytest.mark.parametrize('pooling', ['cls', 'mean'])
def test_packed_rows_train_and_predict_like_one_per_row(sst2_dir, tmp_path, monkeypatch,
                                                        pooling, request):
  """A step's examples packed 3 to a row (data.max_instances_per_row) give the parameters, eval
  metrics and predictions of the same examples one per row: each attends to itself, is pooled
  on its own ([CLS] or mean) and weighs one in the loss. The packed run is also sharded (data 2,
  fsdp 2, tensor 2: rows rounded up to 4). Dropout off (_no_dropout). One per row is the
  full-length run: for [CLS], the dynamic padding test's (sst2_full_rows)."""
  if pooling == 'cls':
    one = request.getfixturevalue('sst2_full_rows')
  else:
    config = _sst2_long(sst2_dir, tmp_path)
    config.pooling = pooling
    one = _full_rows_run(config, tmp_path / 'pack1')
  rows_seen = []
  pack_rows = batches.pack_rows
  monkeypatch.setattr(batches, 'pack_rows', lambda *a: (
      rows_seen.append(len((out := pack_rows(*a))[0]['input_ids'])), out)[1])
  config = _no_dropout(_sst2_long(sst2_dir, tmp_path))
  config.data.max_instances_per_row = 3
  config.pooling = pooling
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
  packed = finetune.train_and_evaluate(config, str(tmp_path / 'pack3'))
  # 16 examples of ~10 tokens per step: 6 rows of 3, rounded up to 8; eval's 24 take 2 batches.
  assert rows_seen and max(rows_seen) <= 8 and all(n % 4 == 0 for n in rows_seen), rows_seen
  workdirs = (one['workdir'], tmp_path / 'pack3')
  (a, step_a), (b, step_b) = (final_params(w) for w in workdirs)
  assert step_a == step_b == 8
  for key in a:
    np.testing.assert_allclose(b[key], a[key], atol=2e-5, rtol=1e-4, err_msg=key)
  for key, value in one['results'].items():
    assert packed[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
  predictions = [sorted((w / 'predictions').rglob('*.*')) for w in workdirs]
  assert len(predictions[0]) == 2  # Two epochs' evals.
  for one_file, packed_file in zip(*predictions, strict=True):
    assert packed_file.read_text() == one_file.read_text()


def test_packed_tagging_trains_and_predicts_like_one_per_row(allennlp_wheel, minilm_dir,
                                                             conll_full_rows, tmp_path,
                                                             monkeypatch):
  """CoNLL sentences packed 3 to a row give the parameters, entity scores and tag files of the
  same sentences one per row: each token's tag moves with it and is read back from its own
  place in its row. The packed run is sharded (data 2, fsdp 2, tensor 2). Dropout off. One per
  row is the dynamic padding test's full-length run (conll_full_rows)."""
  rows_seen = []
  pack_rows = batches.pack_rows
  monkeypatch.setattr(batches, 'pack_rows', lambda *a: (
      rows_seen.append((len(a[1]), len((out := pack_rows(*a))[0]['input_ids']))), out)[1])
  config = _no_dropout(_conll_long(allennlp_wheel, minilm_dir, tmp_path))
  config.data.max_instances_per_row = 3
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
  packed = finetune.train_and_evaluate(config, str(tmp_path / 'pack3'))
  # A step's 16 sentences of ~10-40 pieces: at most 8 rows of 96 (rounded up to 4).
  train_rows = [rows for examples, rows in rows_seen if examples == 16]
  assert train_rows and max(train_rows) <= 8, rows_seen
  workdirs = (conll_full_rows['workdir'], tmp_path / 'pack3')
  (a, step_a), (b, step_b) = (final_params(w) for w in workdirs)
  assert step_a == step_b == 4
  for key in a:
    np.testing.assert_allclose(b[key], a[key], atol=2e-5, rtol=1e-4, err_msg=key)
  for key, value in conll_full_rows['results'].items():
    assert packed[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
  predictions = [sorted((w / 'predictions').rglob('*.*')) for w in workdirs]
  assert predictions[0]
  for one_file, packed_file in zip(*predictions, strict=True):
    assert packed_file.read_text() == one_file.read_text()


def test_packing_a_span_task_is_refused(allennlp_wheel, minilm_dir, tmp_path):
  data_dir, _ = _squad_dir(allennlp_wheel, tmp_path)
  config = _minilm_tiny('squad_v1', data_dir, minilm_dir, 64)
  config.data.max_instances_per_row = 2
  with pytest.raises(ValueError, match=r'^config.data.max_instances_per_row=2: packs examples, '
                     r'which a span task \(squad_v1\) cannot \(classification, regression and '
                     r'tagging can\); set it to 1'):
    finetune.train_and_evaluate(config, str(tmp_path / 'run'))


def test_a_job_leaves_the_callers_config_as_it_was(tmp_path, monkeypatch):
  """Pass U: a job made the caller's paths absolute in place, so a notebook that reused its
  config after os.chdir trained on the first folder's files, saying nothing."""
  monkeypatch.chdir(tmp_path)
  config = finetune_config.get_config('task=classification,size=tiny')
  config.data.train_file = 'train.csv'
  with pytest.raises(FileNotFoundError):
    finetune.train_and_evaluate(config, 'w')
  assert config.data.train_file == 'train.csv'
  config.mode = 'eval'
  with pytest.raises((FileNotFoundError, ValueError)):
    finetune.run_predict(config, 'w')
  assert config.data.train_file == 'train.csv'
  config = pretrain.get_config('size=tiny')
  config.data.train_files = 'records/train-*'
  with pytest.raises((FileNotFoundError, ValueError)):
    pretrain_job.train_and_evaluate(config, 'w')
  assert config.data.train_files == 'records/train-*'


def test_a_rerun_of_a_run_stopped_right_after_its_last_save_writes_what_it_lacks(
    fine_tuned_sst2, tmp_path):
  """Notebook pass (session 34), 6: interrupted right after its final save, a run had no
  eval_results.json nor checkpoints_saved.json; the rerun ('nothing to do') wrote neither, yet
  its summary named eval_results.json."""
  workdir, data = fine_tuned_sst2
  run = tmp_path / 'run'
  shutil.copytree(workdir, run, ignore=shutil.ignore_patterns('.lock'))
  want = json.loads((run / 'eval_results.json').read_text())
  (run / 'eval_results.json').unlink()
  (run / 'checkpoints_saved.json').unlink()
  config = finetune_runs.tiny_config(data, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3,
                                              'checkpoint.every_steps': 1000})
  result = finetune.train_and_evaluate(config, str(run))
  assert json.loads((run / 'eval_results.json').read_text()) == want
  assert result['accuracy'] == want['accuracy']
  newest = max(int(p.name) for p in (run / 'checkpoints').iterdir() if p.name.isdigit())
  assert json.loads((run / 'checkpoints_saved.json').read_text()) == {'newest_step': newest}
