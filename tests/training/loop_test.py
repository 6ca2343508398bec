"""The pre-training loop: sharded equals unsharded, gradient accumulation, the
NaN stop, init_from, and short end-to-end runs on the embedded corpus (8 simulated devices).

Step-level tests jit train_step exactly as the loop does (same shardings, same mesh and rules
context) on random batches; loop-level tests run train_and_evaluate on a one-layer model.
"""

import functools
import json
import pathlib
import re

import flax
import flax.linen as nn
import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import pytest
import safetensors
from safetensors import numpy as st_numpy

from bertjax import pretrain as pretrain_job
from bertjax import pretrain_eval
from bertjax.input import global_batch
from bertjax.interop import hf_checkpoint
from bertjax.interop import hf_names
from bertjax.interop import init_from
from bertjax.model import heads
from bertjax.pretraining_data import embedded
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader
from bertjax.training import loop
from bertjax.training import losses
from bertjax.training import optimizer as optimizer_lib
from bertjax.training import sharding
from bertjax.training import summaries
from bertjax.training import train_state
from configs import pretrain

VOCAB = 512
SEQ = 32
PREDICTIONS = 5


def mesh_config(data=1, fsdp=1, tensor=1):
  return ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor))


def flat(tree) -> dict:
  return flax.traverse_util.flatten_dict(jax.device_get(tree), sep='/')


@pytest.fixture(scope='module', autouse=True)
def fast_compiling():
  """LLVM at -O0 halves XLA:CPU's compile time, which is most of these tests' time. It changes
  only how each device's code is generated, not the partitioning into per-device programs."""
  jax.config.update('jax_disable_most_optimizations', True)
  yield
  jax.config.update('jax_disable_most_optimizations', False)


# ---------------------------------------------------------------------------------------------
# train_step on random batches.


def small_config(*, batch=16, steps=4, dropout=0.1, grad_accum_steps=1):
  """2 layers, hidden 64, 4 heads, mlp 128, vocab 512: divisible by tensor=4 and fsdp=8."""
  config = pretrain.get_config(f'size=tiny,steps={steps},batch={batch},seq={SEQ}')
  config.model.update(dict(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128,
                           vocab_size=VOCAB, dropout_rate=dropout,
                           attention_dropout_rate=dropout))
  config.data.max_predictions_per_seq = PREDICTIONS
  config.grad_accum_steps = grad_accum_steps
  # No warmup: every step moves every parameter by ~lr = 1e-3 (Adam), far above the
  # tolerances below, so a wrong gradient shows in the parameters after one step.
  config.optimizer.learning_rate = 1e-3
  config.optimizer.warmup_steps = 0
  return config


def random_batch(rng, batch_size):
  """A pre-training batch with padding, unused prediction slots and both NSP labels."""
  lengths = rng.integers(SEQ // 2, SEQ + 1, batch_size)
  input_mask = (np.arange(SEQ)[None] < lengths[:, None]).astype(np.int32)
  segment_ids = (np.arange(SEQ)[None] >= lengths[:, None] // 2).astype(np.int32) * input_mask
  weights = (rng.random((batch_size, PREDICTIONS)) < 0.8).astype(np.float32)
  positions = np.stack([np.sort(rng.choice(np.arange(1, n), PREDICTIONS, replace=False))
                        for n in lengths])
  return dict(
      input_ids=rng.integers(1, VOCAB, (batch_size, SEQ)).astype(np.int32) * input_mask,
      input_mask=input_mask, segment_ids=segment_ids,
      masked_lm_positions=(positions * weights).astype(np.int32),
      masked_lm_ids=(rng.integers(1, VOCAB, (batch_size, PREDICTIONS)) * weights).astype(np.int32),
      masked_lm_weights=weights,
      next_sentence_labels=rng.integers(0, 2, batch_size).astype(np.int32))


def traced_train_state(config, mesh):
  """(abstract state, shardings) of create_train_state on `mesh`: traced, nothing compiled."""
  tx = optimizer_lib.make(config.optimizer)
  out = {}

  def trace():
    state, out['shardings'] = train_state.create_train_state(
        config, pretrain_job.objective(config), tx, mesh)
    return state
  abstract = jax.eval_shape(trace)
  return abstract, out['shardings']


def run_steps(config, mesh, batches, initial_state):
  """(per-step losses, final params as a flat numpy dict) of train_step jitted as the loop does,
  from `initial_state` (host arrays) placed into the shardings the loop gives it on `mesh`."""
  tx = optimizer_lib.make(config.optimizer)
  _, shardings = traced_train_state(config, mesh)
  state = jax.device_put(initial_state, shardings)
  step_fn = jax.jit(
      functools.partial(train_state.train_step, objective=pretrain_job.objective(config), tx=tx,
                        schedule=optimizer_lib.learning_rate_schedule(config.optimizer),
                        grad_accum_steps=config.grad_accum_steps),
      in_shardings=(shardings, sharding.batch_sharding(mesh)), out_shardings=(shardings, None))
  losses = []
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    for host_batch in batches:
      batch = global_batch.make_global_batch(host_batch, mesh, sharding.batch_axes())
      state, metrics = step_fn(state, batch)
      assert float(metrics['nonfinite'][0]) == 0
      losses.append(float(metrics['loss'][0]))
  assert int(state.step) == len(batches)
  return np.array(losses), flat(state.params)


def assert_params_close(got, want, *, atol):
  """Absolute only: relative noise is meaningless for parameters that are ~0."""
  assert got.keys() == want.keys()
  for path in want:
    np.testing.assert_allclose(got[path], want[path], rtol=0, atol=atol, err_msg=path)


def one_device_mesh():
  return sharding.make_mesh(mesh_config(), devices=jax.devices()[:1])


@pytest.fixture(scope='module')
def initial_state():
  """The small model's TrainState at step 0 as host arrays: the same for every test below
  (batch size, dropout and accumulation do not change it), so it is compiled once."""
  config = small_config()
  state, _ = train_state.create_train_state(config, pretrain_job.objective(config),
                                            optimizer_lib.make(config.optimizer),
                                            one_device_mesh())
  return jax.device_get(state)


def test_loaded_parameters_go_in_as_they_are_and_only_the_rest_is_drawn(initial_state):
  """init_from's path: the encoder comes loaded (here the fresh one + 1, so it cannot pass for a
  draw; its pooler as numpy), the heads stay abstract. The state holds the loaded values, draws
  the heads exactly as a full init does (same key) and builds Adam's state from the final
  parameters, all in the full init's shardings."""
  config = small_config()
  mesh = sharding.make_mesh(mesh_config(data=2, fsdp=2, tensor=2))
  objective, tx = pretrain_job.objective(config), optimizer_lib.make(config.optimizer)
  abstract, shardings = train_state.train_state_shapes(config, objective, tx, mesh)
  encoder = jax.tree.map(lambda x, s: jax.device_put(x + 1, s), initial_state.params['bert'],
                         shardings.params['bert'])
  # A loader may hand host arrays too: loaded all the same, never redrawn.
  encoder['pooler'] = jax.tree.map(lambda x: np.asarray(x + 1),
                                   initial_state.params['bert']['pooler'])
  state, _ = train_state.create_train_state(config, objective, tx, mesh,
                                            loaded={**abstract.params, 'bert': encoder})
  got, want = flat(state.params), flat(initial_state.params)
  assert got.keys() == want.keys()
  for path in want:
    np.testing.assert_array_equal(got[path], want[path] + (path.startswith('bert/')),
                                  err_msg=path)
  np.testing.assert_array_equal(state.rng, initial_state.rng)
  assert int(state.step) == 0
  for moment in jax.tree.leaves(state.opt_state):  # Adam's counts and moments: all zero.
    assert not np.any(np.asarray(moment))
  assert jax.tree.structure(state.opt_state) == jax.tree.structure(initial_state.opt_state)
  for leaf, s in zip(jax.tree.leaves(state), jax.tree.leaves(shardings), strict=True):
    assert leaf.sharding.is_equivalent_to(s, leaf.ndim)


@pytest.fixture(scope='module')
def unsharded_run(initial_state):
  config = small_config()
  rng = np.random.default_rng(0)
  batches = [random_batch(rng, config.global_batch_size) for _ in range(config.num_train_steps)]
  return config, batches, run_steps(config, one_device_mesh(), batches, initial_state)


# data x fsdp x tensor: each splits the batch, the parameters or both, over the 8 devices.
MESHES = [dict(data=2, fsdp=2, tensor=2), dict(fsdp=8), dict(data=2, tensor=4)]


@pytest.mark.parametrize('shape', MESHES, ids=lambda s: ','.join(f'{k}{v}' for k, v in s.items()))
def test_sharded_equals_unsharded(initial_state, unsharded_run, shape):
  config, batches, (want_losses, want_params) = unsharded_run
  losses, params = run_steps(config, sharding.make_mesh(mesh_config(**shape)), batches,
                             initial_state)
  # Dropout stays on: with jax_threefry_partitionable (the default) each device draws its slice
  # of the very bits one device draws, so only the order of float sums differs. Measured:
  # losses within 7e-8 relative, params within 3e-7 absolute. Every parameter tensor moves by
  # >= 1.5e-3 over these steps, and a wrong gradient by ~lr = 1e-3 (Adam): atol 5e-6 catches
  # it. (On data2,fsdp2,tensor2 an XLA partitioning bug gave 5e-3; see heads.MaskedLmHead.)
  np.testing.assert_allclose(losses, want_losses, rtol=2e-6)
  assert_params_close(params, want_params, atol=5e-6)


@pytest.fixture(scope='module')
def unaccumulated_run(initial_state):
  """Batch 32 in one piece on one device, dropout off (its keys differ per micro-batch)."""
  config = small_config(batch=32, steps=3, dropout=0.0)
  rng = np.random.default_rng(1)
  batches = [random_batch(rng, 32) for _ in range(config.num_train_steps)]
  return batches, run_steps(config, one_device_mesh(), batches, initial_state)


def test_grad_accumulation_equals_whole_batch(initial_state, unaccumulated_run):
  batches, (want_losses, want_params) = unaccumulated_run
  config = small_config(batch=32, steps=3, dropout=0.0, grad_accum_steps=4)
  # On all three axes at once: each of the 4 micro-batches of 8 rows is split over data x fsdp.
  mesh = sharding.make_mesh(mesh_config(data=2, fsdp=2, tensor=2))
  losses, params = run_steps(config, mesh, batches, initial_state)
  # Each micro-batch's loss is divided by the whole batch's weights: the same sums in another
  # order. Measured: losses within 3e-7 relative, params within 5e-7 absolute (every tensor
  # moves by >= 1e-3).
  np.testing.assert_allclose(losses, want_losses, rtol=2e-6)
  assert_params_close(params, want_params, atol=5e-6)


# ---------------------------------------------------------------------------------------------
# train_and_evaluate on the embedded corpus.

E2E_SEQ, E2E_PREDICTIONS = 64, 10


@pytest.fixture(scope='module')
def corpus_files(tmp_path_factory):
  """(train glob, eval glob) of the embedded corpus at 64 tokens, one pass (~5 s to make).

  In the session's shared folder: pretraining_files reuses files made with the same settings,
  so the other loop tests (tests/pretrain_runs.py) and these make them once.
  """
  return embedded.pretraining_files(
      tmp_path_factory.getbasetemp() / 'embedded-corpus', max_seq_length=E2E_SEQ,
      max_predictions_per_seq=E2E_PREDICTIONS, dupe_factor=1)


def e2e_config(corpus_files, *, steps):
  """A one-layer tiny model (hidden 64) on the embedded corpus, 16 x 64 tokens per step."""
  config = pretrain.get_config(f'size=tiny,steps={steps},batch=16,seq={E2E_SEQ}')
  config.model.update(dict(num_layers=1, hidden_size=64, num_heads=2, mlp_dim=128))
  train_files, eval_files = corpus_files
  config.data.update(dict(train_files=train_files, eval_files=eval_files,
                          vocab_file=str(embedded.vocab_path()),
                          max_predictions_per_seq=E2E_PREDICTIONS, shuffle_window=1000,
                          num_lanes=4))
  config.optimizer.warmup_steps = 5
  config.eval_batch_size = 16
  config.max_eval_batches = 4
  config.log_every_steps = 5
  config.eval_every_steps = 0
  config.checkpoint.every_steps = 10
  return config


def read_state(step_dir):
  """The saved TrainState of one checkpoint step, as host numpy."""
  return jax.device_get(ocp.StandardCheckpointer().restore(pathlib.Path(step_dir) / 'state'))


def checkpoint_steps(workdir):
  return sorted(int(p.name) for p in (pathlib.Path(workdir) / 'checkpoints').iterdir()
                if p.name.isdigit())


def event_tags(workdir):
  return set(summaries.read_scalars(str(workdir)))


@pytest.fixture(scope='module')
def pretrained(corpus_files, tmp_path_factory):
  """(config, workdir, eval metrics) of a 20-step run, its updates 13 and 14 traced by the
  profiler: workdir A for init_from."""
  config = e2e_config(corpus_files, steps=20)
  config.profile_steps, config.profile_start_step = 2, 12
  workdir = tmp_path_factory.mktemp('pretrained')
  return config, workdir, pretrain_job.train_and_evaluate(config, str(workdir))


def test_end_to_end(pretrained):
  config, workdir, metrics = pretrained
  assert set(metrics) == {'mlm_accuracy', 'mlm_loss', 'nsp_accuracy', 'nsp_loss',
                          'unigram_baseline'}
  assert all(np.isfinite(v) for v in metrics.values())
  assert 0 < metrics['mlm_accuracy'] <= 1 and 0 <= metrics['nsp_accuracy'] <= 1
  assert 0 < metrics['unigram_baseline'] < 0.2
  # 20 steps learn the token frequencies at least: well below uniform guessing (ln 8192 = 9.0).
  assert metrics['mlm_loss'] < np.log(config.model.vocab_size) - 0.5
  assert metrics['nsp_loss'] < 1.0
  assert {'train/loss', 'train/mlm_accuracy', 'train/learning_rate', 'train/grad_norm',
          'train/sequences_per_sec', 'eval/mlm_accuracy', 'eval/unigram_baseline'} <= (
              event_tags(workdir))
  assert checkpoint_steps(workdir) == [10, 20]
  meta = json.loads((workdir / 'checkpoints/20/meta/metadata').read_text())
  assert meta['step'] == 20 and meta['examples_consumed'] == 20 * config.global_batch_size
  state = read_state(workdir / 'checkpoints/20')
  assert int(state['step']) == 20
  assert json.loads((workdir / 'config.json').read_text())['num_train_steps'] == 20


def test_the_profiled_steps_are_traced_for_tensorboard(pretrained):
  (path,) = (pretrained[1] / 'plugins/profile').glob('*/*.xplane.pb')
  data = jax.profiler.ProfileData.from_file(str(path))
  events = [(e.name, dict(e.stats)) for plane in data.planes for line in plane.lines
            for e in line.events]
  assert sorted(stats['step_num'] for name, stats in events if name == 'train') == [12, 13]
  assert any(stats.get('hlo_module') == 'jit_train_step' for _, stats in events)


@pytest.fixture(scope='module')
def continued(pretrained, corpus_files, tmp_path_factory):
  """Workdir B: init_from A, dynamic masking, learning rate 0 (params stay A's), 2 steps."""
  config = e2e_config(corpus_files, steps=2)
  # Empty data files: the loop makes the embedded corpus's unmasked TFRecords in B/data.
  config.data.update(dict(train_files='', eval_files='', vocab_file='', dynamic_masking=True))
  config.init_from = str(pretrained[1])
  config.optimizer.learning_rate = 0.0
  workdir = tmp_path_factory.mktemp('continued')
  return config, workdir, pretrain_job.train_and_evaluate(config, str(workdir))


def test_init_from_own_checkpoint(pretrained, continued):
  _, workdir_a, _ = pretrained
  config, workdir_b, _ = continued
  a = read_state(workdir_a / 'checkpoints/20')
  b = read_state(workdir_b / f'checkpoints/{config.num_train_steps}')
  # At learning rate 0 Adam adds exactly 0: B's params are bit-for-bit those it started from.
  want, got = flat(a['params']), flat(b['params'])
  assert got.keys() == want.keys()
  for path in want:
    np.testing.assert_array_equal(got[path], want[path], err_msg=path)
  # Fresh optimizer and data position: B counts its own 2 steps, not A's 20 + 2.
  assert int(b['step']) == 2
  counts = {int(x) for x in jax.tree.leaves(b['opt_state']) if np.ndim(x) == 0}
  assert counts == {2}, counts
  meta = json.loads((workdir_b / 'checkpoints/2/meta/metadata').read_text())
  assert meta['examples_consumed'] == 2 * config.global_batch_size


def test_dynamic_masking_run(continued):
  config, workdir, metrics = continued
  assert sorted(p.name for p in (workdir / 'data').glob('*.json')) == [
      f'shakespeare_kjv-{E2E_SEQ}-{E2E_PREDICTIONS}-dynamic-{split}.json'
      for split in ('eval', 'train')]
  assert set(metrics) == {'mlm_accuracy', 'mlm_loss', 'nsp_accuracy', 'nsp_loss',
                          'unigram_baseline'}
  assert all(np.isfinite(v) for v in metrics.values())
  # A's params on freshly masked eval data: as far below uniform as A's static eval.
  assert metrics['mlm_loss'] < np.log(config.model.vocab_size) - 0.5
  assert 0 < metrics['unigram_baseline'] < 0.2


def test_a_resumed_run_draws_no_initial_values(pretrained):
  """Resume restores into the abstract state: initialising first (a full init compile and run
  of the model, minutes for BERT-Large) would be thrown away."""
  config, workdir, _ = pretrained
  objective, tx = pretrain_job.objective(config), optimizer_lib.make(config.optimizer)
  abstract, _ = train_state.train_state_shapes(config, objective, tx, one_device_mesh())

  def initialize():
    raise AssertionError('a resumed run drew initial values')
  mngr = checkpoint.manager(str(workdir), config, best_metric=pretrain_job.BEST_METRIC)
  try:
    state, consumed, resumed = checkpoint.restore_or_initialize(
        mngr, abstract, config.global_batch_size, initialize)
  finally:
    mngr.close()
  assert resumed and int(state.step) == 20 and consumed == 20 * config.global_batch_size
  got, want = flat(state.params), flat(read_state(workdir / 'checkpoints/20')['params'])
  for path in want:
    np.testing.assert_array_equal(got[path], want[path], err_msg=path)


def test_the_model_line_names_its_shape_beside_its_size(pretrained, monkeypatch):
  # model.size is a label: --config.model.num_layers=2 on size=base logged 'model: base'.
  # The loop's INFO lines recorded as it makes them, whatever handlers, filters and verbosity
  # earlier tests of this process left on absl's logger.
  config, workdir, _ = pretrained
  lines, absl_logging = [], loop.logging

  class Recorded:  # loop's own `logging`: its INFO lines kept, every call passed on.
    def __getattr__(self, name):
      return getattr(absl_logging, name)

    def info(self, message, *args):
      lines.append(message % args)
      absl_logging.info(message, *args)

    def warning(self, message, *args):
      lines.append(message % args)
      absl_logging.warning(message, *args)

  monkeypatch.setattr(loop, 'logging', Recorded())
  pretrain_job.train_and_evaluate(ml_collections.ConfigDict(config.to_dict()), str(workdir))
  m = config.model
  assert (f'model: {m.size} ({m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} '
          f'heads, mlp {m.mlp_dim}), ') in '\n'.join(lines)
  assert 'already at step 20 of 20: nothing to do' in '\n'.join(lines)
  assert 'trains nothing' not in '\n'.join(lines)  # The run's own config.
  # Pass U: a notebook's edited cell rerun on a finished run returned its old metrics, saying
  # only 'nothing to do': the changes are named.
  lines.clear()
  changed = ml_collections.ConfigDict(config.to_dict())
  changed.optimizer.learning_rate *= 10
  pretrain_job.train_and_evaluate(changed, str(workdir))
  lr = config.optimizer.learning_rate
  assert ('this run has ended, so this config trains nothing: its changes (optimizer.'
          f'learning_rate {lr!r} -> {lr * 10!r}) take effect in another --workdir') in (
              '\n'.join(lines)), lines


def test_a_run_resumed_past_its_steps_reports_the_eval_its_history_holds(tmp_path):
  # Evals at 4, 8 and 12, checkpoint 12 lost: resumed from 9 with 6 steps. eval_results.json is
  # step 12's; it said 'step 9/6' beside step 12's figures as the eval at step 9.
  evals = {4: {'accuracy': 0.5}, 8: {'accuracy': 0.75}, 12: {'accuracy': 0.9}}
  (tmp_path / 'eval_history.json').write_text(json.dumps({str(k): v for k, v in evals.items()}))
  (tmp_path / 'eval_results.json').write_text(json.dumps(evals[12]))
  outcome = loop._nothing_to_do(str(tmp_path), 9, 6, '', {})  # pylint: disable=protected-access
  assert (outcome.step, outcome.total_steps, outcome.eval_step) == (9, 6, 8)
  assert outcome.eval_metrics == evals[8] and not outcome.early_stopped
  assert outcome.stopped == "already at step 9, past this config's 6 steps: nothing to do"
  # At its end, as before; a workdir without a history reads its eval_results.json there only.
  outcome = loop._nothing_to_do(str(tmp_path), 12, 12, '', {})  # pylint: disable=protected-access
  assert (outcome.eval_step, outcome.eval_metrics, outcome.stopped) == (12, evals[12], '')
  (tmp_path / 'eval_history.json').unlink()
  outcome = loop._nothing_to_do(str(tmp_path), 12, 12, '', {})  # pylint: disable=protected-access
  assert (outcome.eval_step, outcome.eval_metrics) == (12, evals[12])
  outcome = loop._nothing_to_do(str(tmp_path), 9, 6, '', {})  # pylint: disable=protected-access
  assert (outcome.eval_step, outcome.eval_metrics) == (None, {})
  assert outcome.stopped.endswith('nothing to do; no eval was recorded')


def test_init_from_shape_mismatch(pretrained):
  config = ml_collections.ConfigDict(pretrained[0].to_dict())
  config.model.update(dict(hidden_size=32, num_heads=2))
  abstract, shardings = abstract_params(config.model, E2E_SEQ, one_device_mesh())
  with pytest.raises(ValueError, match=r'does not fit the config .* shapes differ.*'
                     r'position_embeddings/embedding: checkpoint \(512, 64\) vs model '
                     r'\(512, 32\)'):
    init_from.load_params(str(pretrained[1]), abstract, shardings)


def test_resume_with_another_model_is_refused_not_moved_aside(pretrained):
  """A changed model config is not corruption: its checkpoints must stay where they are."""
  config = ml_collections.ConfigDict(pretrained[0].to_dict())
  config.model.update(dict(hidden_size=32, num_heads=2))
  before = checkpoint_steps(pretrained[1])
  config_json = (pathlib.Path(pretrained[1]) / 'config.json').read_text()
  with pytest.raises(ValueError, match=r'holds a different model than the config .*'
                     r'checkpoint \(64,\) vs config \(32,\)'):
    pretrain_job.train_and_evaluate(config, str(pretrained[1]))
  assert checkpoint_steps(pretrained[1]) == before
  assert (pathlib.Path(pretrained[1]) / 'config.json').read_text() == config_json
  assert not list((pathlib.Path(pretrained[1]) / 'checkpoints').glob('*.unreadable-*'))


def abstract_params(model_config, seq, mesh):
  """(ShapeDtypeStructs, shardings) of BertForPreTraining's params: nothing is initialised."""
  boxed = jax.eval_shape(lambda: heads.BertForPreTraining(model_config).init(
      jax.random.key(0), **heads.dummy_batch(1, seq, 2))['params'])
  return nn.unbox(boxed), sharding.logical_to_sharding(boxed, mesh)


def test_init_from_transformers_dir(minilm_dir, monkeypatch):
  # What hf_checkpoint.load returns inside load_params is the reference: one import, not two
  # (each compiles the 6-layer model's init, ~10 s).
  imported = []

  def load(*args, **kwargs):
    imported.append(hf_load(*args, **kwargs))
    return imported[-1]
  hf_load = hf_checkpoint.load
  monkeypatch.setattr(hf_checkpoint, 'load', load)
  hf_config = hf_names.config_from_hf(json.loads((minilm_dir / 'config.json').read_text()))
  assert (hf_config.num_layers, hf_config.hidden_size, hf_config.num_heads, hf_config.mlp_dim,
          hf_config.vocab_size) == (6, 384, 12, 1536, 30522)
  mesh = sharding.make_mesh(mesh_config(data=2, fsdp=2, tensor=2))
  abstract, shardings = abstract_params(hf_config, 16, mesh)
  params, unused, _ = init_from.load_params(str(minilm_dir), abstract, shardings)
  assert len(imported) == 1 and unused == []
  got, want = flat(params), flat(imported[0][1])
  assert got.keys() == want.keys()
  for path in want:
    np.testing.assert_array_equal(got[path], want[path], err_msg=path)
  # Anchored to the file itself, and placed in the mesh's shardings.
  with safetensors.safe_open(str(minilm_dir / 'model.safetensors'), 'np') as f:
    np.testing.assert_array_equal(got['bert/embeddings/word_embeddings/embedding'],
                                  f.get_tensor('embeddings.word_embeddings.weight'))
  kernel = params['bert']['layers_0']['mlp']['intermediate']['kernel']
  assert kernel.sharding.spec == jax.sharding.PartitionSpec('fsdp', 'tensor')


def test_an_eval_of_nan_stops_the_run_before_its_step_is_saved_or_ranked(corpus_files, tmp_path,
                                                                        monkeypatch):
  """Hostile pass of session 35, 1: weights finite but past what float32 computes with gave a
  NaN eval; its step was saved and ranked best (the real best deleted), and the loss check
  stopped the run a step later, pointing the user at that NaN checkpoint to resume from."""
  config = e2e_config(corpus_files, steps=6)
  config.eval_every_steps = config.checkpoint.every_steps = 2
  config.checkpoint.keep, config.checkpoint.keep_best = 1, 1
  config.checkpoint.best_metric = 'mlm_loss'
  _eval_losses(monkeypatch, {2: 3.0, 4: float('nan')})
  with pytest.raises(FloatingPointError, match=re.escape(
      'the eval at step 4 gave mlm_loss nan: the weights after it give NaN/Inf (step 4 is not '
      'saved); the newest checkpoint is step 2: lower the learning rate, or resume from it with '
      'more warmup.')):
    pretrain_job.train_and_evaluate(config, str(tmp_path))
  assert checkpoint_steps(tmp_path) == [2]
  assert sorted(json.loads((tmp_path / 'eval_history.json').read_text())) == ['2']


def _eval_losses(monkeypatch, losses: dict):
  """Pre-training's evals give mlm_loss losses[step] (the rest as computed)."""
  run = pretrain_eval.Evaluator.run
  monkeypatch.setattr(pretrain_eval.Evaluator, 'run', lambda self, params, step: run(
      self, params, step) | {'mlm_loss': losses[step]})


def test_a_resume_without_keep_best_keeps_the_best_the_run_kept(corpus_files, tmp_path,
                                                               monkeypatch, caplog):
  """Hostile pass of session 35, 2: rerun without checkpoint.keep_best (or without the early
  stopping that kept it), the resumed manager's first save deleted the run's best."""
  _eval_losses(monkeypatch, {2: 0.1, 4: 0.5, 6: 0.6})
  config = e2e_config(corpus_files, steps=4)
  config.eval_every_steps = config.checkpoint.every_steps = 2
  config.checkpoint.keep, config.checkpoint.keep_best = 1, 1
  config.checkpoint.best_metric = 'mlm_loss'
  pretrain_job.train_and_evaluate(config, str(tmp_path))
  assert checkpoint_steps(tmp_path) == [2, 4]
  config.num_train_steps, config.checkpoint.keep_best = 6, 0
  pretrain_job.train_and_evaluate(config, str(tmp_path))
  assert checkpoint_steps(tmp_path) == [2, 6]
  assert 'checkpoint.keep_best=0 would delete the best checkpoint(s) this run kept' in caplog.text
  assert checkpoint_reader.resolve_step(tmp_path, 'best') == 2


def test_patience_given_to_a_resumed_run_that_never_stopped_trains_on(corpus_files, tmp_path,
                                                                      monkeypatch):
  """Hostile pass of session 35, 3: patience added on the rerun of a run that had none was
  counted over its past evals, and ended it at once as 'stopped early' (its checkpoints of a
  best step gone: it kept none)."""
  _eval_losses(monkeypatch, {2: 0.1, 4: 0.5, 6: 0.6, 8: 0.7})
  config = e2e_config(corpus_files, steps=4)
  config.eval_every_steps = config.checkpoint.every_steps = 2
  config.checkpoint.best_metric = 'mlm_loss'
  pretrain_job.train_and_evaluate(config, str(tmp_path))
  config.num_train_steps, config.early_stopping_patience = 8, 1  # Step 4 did not improve.
  pretrain_job.train_and_evaluate(config, str(tmp_path))  # Trains on; stops at its next eval.
  assert max(checkpoint_steps(tmp_path)) == 6
  assert sorted(json.loads((tmp_path / 'eval_history.json').read_text())) == ['2', '4', '6']


def test_a_reader_of_a_run_that_stopped_early_is_told_where_its_best_is(corpus_files, tmp_path,
                                                                        monkeypatch, caplog):
  """Hostile pass of session 35, 4: predict, export and eval read the newest step of a run that
  stopped early (the model after its patience ran out), not its result, without a word."""
  _eval_losses(monkeypatch, {2: 0.1, 4: 0.5})
  config = e2e_config(corpus_files, steps=8)
  config.eval_every_steps = config.checkpoint.every_steps = 2
  config.checkpoint.best_metric, config.early_stopping_patience = 'mlm_loss', 1
  pretrain_job.train_and_evaluate(config, str(tmp_path))
  caplog.clear()
  assert checkpoint_reader.step_path(tmp_path, None) == str(tmp_path)
  assert (f'{tmp_path} stopped early: mlm_loss did not improve for 1 evaluation after step 2, '
          'its best (0.1): --step=latest reads its last step, 4; --step=best reads step 2'
          ) in caplog.text
  caplog.clear()
  checkpoint_reader.step_path(tmp_path, 'best')
  assert 'stopped early' not in caplog.text


def test_the_rerun_of_an_ended_run_names_the_best_it_ranked(corpus_files, tmp_path,
                                                           monkeypatch, capsys):
  """Hostile pass of session 35, 3: rerun with another best_metric, a finished run's summary
  named the best by the new metric, while --step=best reads the one the run ranked."""
  run = pretrain_eval.Evaluator.run
  evals = {2: {'mlm_loss': 0.1, 'mlm_accuracy': 0.2}, 4: {'mlm_loss': 0.5, 'mlm_accuracy': 0.9}}
  monkeypatch.setattr(pretrain_eval.Evaluator, 'run',
                      lambda self, params, step: run(self, params, step) | evals[step])
  config = e2e_config(corpus_files, steps=4)
  config.eval_every_steps = config.checkpoint.every_steps = 2
  config.checkpoint.keep_best, config.checkpoint.best_metric = 1, 'mlm_loss'
  pretrain_job.train_and_evaluate(config, str(tmp_path))
  capsys.readouterr()
  config.checkpoint.best_metric = 'mlm_accuracy'
  pretrain_job.train_and_evaluate(config, str(tmp_path))
  assert 'best step 2 (mlm_loss 0.1' in capsys.readouterr().out.splitlines()[-1]
  assert checkpoint_reader.resolve_step(tmp_path, 'best') == 2


def test_nonfinite_loss_stops_before_saving(corpus_files, tmp_path):
  config = e2e_config(corpus_files, steps=8)
  # Adam moves every parameter by ~lr per step: 1e30 makes the activations overflow float32
  # on the step after the first real update. Checked and saved every step from step 1. (The
  # last good checkpoint already holds that update's finite but huge params: the check sees a
  # blow-up one step late, so resuming needs a lower learning rate, as the error says.)
  config.optimizer.learning_rate = 1e30
  config.optimizer.warmup_steps = 2
  config.log_every_steps = 1
  config.checkpoint.every_steps = 1
  with pytest.raises(FloatingPointError, match=r'became NaN/Inf between steps (\d+) and \1 ') as e:
    pretrain_job.train_and_evaluate(config, str(tmp_path))
  failed = int(str(e.value).split('between steps ')[1].split()[0])
  assert 2 <= failed < config.num_train_steps, e.value
  steps = checkpoint_steps(tmp_path)
  assert steps and max(steps) == failed - 1, (steps, e.value)
  assert f'the newest checkpoint is step {failed - 1}: lower the learning rate' in str(e.value)
  for step in steps:
    params = flat(read_state(tmp_path / f'checkpoints/{step}')['params'])
    assert all(np.isfinite(p).all() for p in params.values()), step
  # Resuming (as the loop does) restores the last good step.
  abstract = checkpoint.abstract_state(*traced_train_state(config, sharding.make_mesh(config.mesh)))
  mngr = checkpoint.manager(str(tmp_path), config, best_metric=pretrain_job.BEST_METRIC)
  state, meta = checkpoint.restore_latest(mngr, abstract)
  assert meta['step'] == int(state.step) == failed - 1
  assert all(np.isfinite(p).all() for p in flat(state.params).values())


# ---------------------------------------------------------------------------------------------
# The loop's ordering, the rules table as a config field, the start-from field's old names.


def test_log_steps_read_metrics_after_the_next_step_is_dispatched(corpus_files, tmp_path,
                                                                   monkeypatch):
  """With log_every_steps=1 the host never waits for the step it just dispatched: step N's
  metrics are read after step N+1 is queued, except before a save (which needs step N)."""
  events = []
  jit_train_step = train_state.jit_train_step

  def recording_jit(*args, **kwargs):
    step_fn = jit_train_step(*args, **kwargs)

    def dispatch(state, batch):
      out = step_fn(state, batch)
      events.append(('dispatch', 1))
      return out
    dispatch.lower = step_fn.lower  # A new shape's compile, timed apart from its run.
    return dispatch

  host_means = losses.host_means

  def recording_means(metrics_list):
    metrics_list = list(metrics_list)
    events.append(('read', len(metrics_list)))
    return host_means(metrics_list)
  monkeypatch.setattr(train_state, 'jit_train_step', recording_jit)
  monkeypatch.setattr(losses, 'host_means', recording_means)
  config = e2e_config(corpus_files, steps=6)
  config.log_every_steps = 1
  config.data.eval_files = ''  # No eval: reads come from logging only.
  pretrain_job.train_and_evaluate(config, str(tmp_path))
  # Step N's metrics (one step per read) are read once step N+1 is queued; the last step's at
  # once, before its save.
  assert [kind for kind, _ in events] == ['dispatch', 'dispatch', 'read', 'dispatch', 'read',
                                          'dispatch', 'read', 'dispatch', 'read', 'dispatch',
                                          'read', 'read'], events
  assert all(n == 1 for kind, n in events if kind == 'read')


def test_rules_table_is_a_config_field(corpus_files, tmp_path, monkeypatch):
  """Another layout is a flag: with `embed` left out of config.mesh.rules the pre-training job
  replicates what the default table shards over fsdp."""
  made = []
  create_train_state = train_state.create_train_state

  class Made(Exception):
    """Raised once the state is made: its layout is settled, no step needs to run."""

  def recording(*args, **kwargs):
    made.append(create_train_state(*args, **kwargs))
    raise Made()
  monkeypatch.setattr(train_state, 'create_train_state', recording)
  kernel = ('bert', 'layers_0', 'mlp', 'intermediate', 'kernel')

  def kernel_spec(config, workdir):
    config.mesh.update(dict(data=1, fsdp=8))
    with pytest.raises(Made):
      pretrain_job.train_and_evaluate(config, str(workdir))
    tree = made[-1][1].params
    for key in kernel:
      tree = tree[key]
    return tree.spec
  config = e2e_config(corpus_files, steps=1)
  config.data.eval_files = ''
  assert kernel_spec(config, tmp_path / 'default') == jax.sharding.PartitionSpec('fsdp', 'tensor')
  config.mesh.rules = 'batch=data+fsdp,vocab=tensor,heads=tensor,mlp=tensor'
  assert kernel_spec(config, tmp_path / 'replicated') == jax.sharding.PartitionSpec(None, 'tensor')


def test_several_processes_compile_the_first_step_then_meet_before_it_runs(monkeypatch, request):
  """gloo gives a step's first collectives 30 s to find every process: each process compiles
  the step first, then all wait at one barrier (unique keys), and the step's first call then
  compiles nothing. One process neither compiles ahead nor waits."""
  compiles, barriers = [], []
  monitoring = jax._src.monitoring  # pylint: disable=protected-access

  def listener(name, _, **kw):
    if name.endswith('backend_compile_duration'):
      compiles.append(name)

  monitoring.register_event_duration_secs_listener(listener)
  request.addfinalizer(lambda: monitoring.unregister_event_duration_listener(listener))

  def barrier_fn():
    return lambda key, timeout_ms: barriers.append((key, timeout_ms, len(compiles)))

  monkeypatch.setattr(loop.multihost, 'get_barrier_sync_fn', barrier_fn)
  step_fn = jax.jit(lambda state, batch: (state + batch.sum(), batch.mean()))
  state, batch = np.float32(1.0), np.arange(6, dtype=np.float32)
  loop._compile_together(step_fn, state, batch)  # pylint: disable=protected-access
  assert not barriers  # One process.
  monkeypatch.setattr(loop.jax, 'process_count', lambda: 2)
  before = len(compiles)
  loop._compile_together(step_fn, state, batch)  # pylint: disable=protected-access
  loop._compile_together(step_fn, state, batch)  # pylint: disable=protected-access
  (key1, timeout_ms, compiled_at), (key2, _, _) = barriers
  assert compiled_at == before + 1, compiles  # The step was compiled before the barrier.
  assert key1 != key2 and timeout_ms == loop.FIRST_STEP_BARRIER_S * 1000
  monkeypatch.undo()
  step_fn(state, batch)
  assert len(compiles) == before + 1, compiles  # The step's first call reused that compile.


def say_init_from(path: str, workdir: str, config):
  """pretrain's init_from check or warning, at the step the run in `workdir` resumes from."""
  pretrain_job._say_init_from_on_a_resume(  # pylint: disable=protected-access
      path, workdir, config, pretrain_job._resumed_at(workdir))  # pylint: disable=protected-access


def test_init_from_weights_of_another_function_are_refused(tmp_path):
  """Pass T: continued pre-training from a transformers model with hidden_act relu (or another
  layer_norm_eps) loaded (the shapes fit) and trained on under gelu / 1e-12, without a word."""
  config = pretrain.get_config('size=tiny')
  model = config.model
  source = tmp_path / 'hf'
  source.mkdir()
  hf = {'model_type': 'bert', 'vocab_size': model.vocab_size, 'hidden_size': model.hidden_size,
        'num_hidden_layers': model.num_layers, 'num_attention_heads': model.num_heads,
        'intermediate_size': model.mlp_dim, 'hidden_act': 'relu', 'layer_norm_eps': 1e-7,
        'max_position_embeddings': model.max_position_embeddings, 'type_vocab_size': 2}
  (source / 'config.json').write_text(json.dumps(hf))
  st_numpy.save_file({'unread': np.zeros(1, np.float32)}, str(source / 'model.safetensors'))
  with pytest.raises(ValueError, match=re.escape(
      f"init_from={source} was trained with model.hidden_act='relu' (this run: 'gelu'), "
      "model.layer_norm_eps=1e-07 (this run: 1e-12): set --config.model.hidden_act=relu "
      '--config.model.layer_norm_eps=1e-07 so that')):
    say_init_from(str(source), str(tmp_path / 'run'), config)
  hf.update(hidden_act='gelu', layer_norm_eps=1e-12)
  (source / 'config.json').write_text(json.dumps(hf))
  say_init_from(str(source), str(tmp_path / 'run'), config)


def test_init_from_on_a_resume_is_said_not_to_be_loaded(tmp_path, caplog):
  """Pass S: a pre-training resumed with init_from= (even one that does not exist) said nothing
  of it; fine-tuning says it is not loaded, and now pre-training does too."""
  run = tmp_path / 'run'
  (run / 'checkpoints').mkdir(parents=True)
  (run / 'config.json').write_text(json.dumps({'job': 'pretrain', 'init_from': ''}))
  config = pretrain.get_config('size=tiny')
  say_init_from('', str(run), config)
  assert caplog.messages == []  # No checkpoint yet: init_from is what the run starts from.
  (run / 'checkpoints' / '4').mkdir()
  say_init_from('', str(run), config)
  assert caplog.messages == []  # As the run began.
  config.init_from = '/models/other'
  say_init_from('/models/other', str(run), config)
  assert caplog.messages == [f'init_from=/models/other is not loaded: {run} resumes from its own '
                             'checkpoint (the run began from random weights); to start from '
                             'those weights, pre-train in another --workdir']
  caplog.clear()  # Another step of the run it began from is not loaded either.
  (run / 'config.json').write_text(json.dumps({'job': 'pretrain', 'init_from': '/models/other'}))
  say_init_from('/models/other', str(run), config)
  assert caplog.messages == []
  config.init_from_step = 'best'
  say_init_from('/models/other/checkpoints/8', str(run), config)
  assert caplog.messages == [f'init_from=/models/other (step best) is not loaded: {run} resumes '
                             'from its own checkpoint (the run began from /models/other); to '
                             'start from those weights, pre-train in another --workdir']


def test_a_workdir_moved_while_the_run_trains_stops_it_at_its_next_save_in_one_line(tmp_path):
  """Helper-180's pass (moved runs): `mv RUN elsewhere` while it trained ended on orbax's
  NOT_FOUND tracebacks, the run writing checkpoints_saved.json and folders anew at the old path;
  its next save now stops it, naming the move, before anything is written there."""
  workdir = tmp_path / 'run'
  config = ml_collections.ConfigDict({'checkpoint': {'keep': 2, 'keep_best': 0,
                                                     'every_steps': 1}})
  mngr = checkpoint.manager(str(workdir), config, best_metric='acc')
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{workdir} is gone (moved or deleted while the run trained: config-resumed-at-2.json, '
      'written at its start, is not there): step 4 is not saved; resume the run where it is now '
      '(--workdir=<its new place>), from the last step it holds.')):
    loop._save(mngr, config, None, None, 4, 64, None,  # pylint: disable=protected-access
               str(workdir / 'config-resumed-at-2.json'))
  mngr.close()
  assert not (workdir / 'checkpoints_saved.json').exists()
