"""Optimisers against hand-computed updates; the weight-decay mask; the schedule."""

import pathlib

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from bertjax import config_args
from bertjax.model import heads
from bertjax.training import optimizer
from configs import common

REPO = pathlib.Path(__file__).resolve().parents[2]

def opt_config(**overrides):
  c = ml_collections.ConfigDict(dict(
      name='adamw', learning_rate=0.1, end_learning_rate=0.0, warmup_steps=0, total_steps=100,
      decay_power=1.0, decay_from='warmup_end', bias_correction=True, b1=0.9, b2=0.999, eps=1e-6,
      weight_decay=0.01, grad_clip_norm=0.0, layer_decay=1.0, trust_ratio_everywhere=True))
  c.update(overrides)
  return c


def toy():
  params = {'dense': {'kernel': jnp.array([[1.0, -2.0], [0.5, 3.0]]),
                      'bias': jnp.array([0.5, -0.5])},
            'layer_norm': {'scale': jnp.array([1.0, 2.0]), 'bias': jnp.array([0.1, 0.2])}}
  grads = jax.tree.map(lambda p: 0.3 * p + 0.05, params)
  return params, grads


def test_weight_decay_never_touches_layer_norm_or_bias():
  cfg = common.model_config('tiny', scan_layers=False)
  params = jax.eval_shape(lambda: flax.linen.unbox(heads.BertForPreTraining(cfg).init(
      jax.random.key(0), **heads.dummy_batch(1, 8, 2))['params']))
  mask = flax.traverse_util.flatten_dict(optimizer.weight_decay_mask(params), sep='/')
  decayed = {k for k, v in mask.items() if v}
  assert decayed and all(k.endswith(('kernel', 'embedding')) for k in decayed)
  kept = set(mask) - decayed
  assert all('layer_norm' in k or k.endswith('bias') for k in kept)
  assert 'mlm/output_bias' in kept and 'bert/embeddings/layer_norm/scale' in kept
  # Every kernel and embedding is decayed.
  assert all(mask[k] for k in mask if k.endswith(('kernel', 'embedding')))


def test_adamw_matches_hand_computed_step():
  params, grads = toy()
  config = opt_config()
  opt = optimizer.make(config)
  state = opt.init(params)
  updates, state = opt.update(grads, state, params)
  lr = 0.1  # Step 0 of the decay schedule is the peak.
  for path, p in flax.traverse_util.flatten_dict(params, sep='/').items():
    g = flax.traverse_util.flatten_dict(grads, sep='/')[path]
    m, v = 0.1 * g, 0.001 * g * g  # First step, before bias correction.
    m_hat, v_hat = m / 0.1, v / 0.001
    decay = 0.0 if ('bias' in path or 'layer_norm' in path) else 0.01
    want = -lr * (m_hat / (np.sqrt(v_hat) + 1e-6) + decay * p)
    got = flax.traverse_util.flatten_dict(updates, sep='/')[path]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def _original_adam_weight_decay(params, grads, steps, rates):
  """google-research/bert's AdamWeightDecayOptimizer.apply_gradients, in NumPy: moments never
  bias-corrected, decay added to the step, the rate of each step given."""
  flat = {k: np.asarray(v, np.float64) for k, v in
          flax.traverse_util.flatten_dict(params, sep='/').items()}
  m = {k: np.zeros_like(v) for k, v in flat.items()}
  v = {k: np.zeros_like(x) for k, x in flat.items()}
  for t in range(steps):
    for path, g in flax.traverse_util.flatten_dict(grads(t), sep='/').items():
      g = np.asarray(g, np.float64)
      m[path] = 0.9 * m[path] + 0.1 * g
      v[path] = 0.999 * v[path] + 0.001 * g * g
      update = m[path] / (np.sqrt(v[path]) + 1e-6)
      if not ('bias' in path or 'layer_norm' in path):  # _do_use_weight_decay's exclusions.
        update += 0.01 * flat[path]
      flat[path] = flat[path] - rates[t] * update
  return flat


def test_adamw_without_bias_correction_is_the_originals_optimizer():
  """optimizer.bias_correction=false and decay_from='step_0': google-research/bert's
  optimization.py (create_optimizer) step for step: its polynomial decay counted from step 0,
  the warmup replacing the first steps, AdamWeightDecayOptimizer's uncorrected moments."""
  params, _ = toy()
  config = opt_config(learning_rate=2e-2, warmup_steps=3, total_steps=10, decay_from='step_0',
                      bias_correction=False)
  # optimization.py's rate: init_lr * (1 - t / T), replaced by init_lr * t / warmup while
  # t < warmup (t = global_step before the update).
  rates = [2e-2 * t / 3 if t < 3 else 2e-2 * (1 - t / 10) for t in range(10)]
  schedule = optimizer.learning_rate_schedule(config)
  np.testing.assert_allclose([float(schedule(t)) for t in range(10)], rates, rtol=1e-6)
  assert float(schedule(3)) < 2e-2  # The peak is never reached, as in the original.

  def grads(t):
    return jax.tree.map(lambda p: (t + 1) * 0.3 * p - 0.05 * t, params)

  opt, state, now = optimizer.make(config), None, params
  state = opt.init(params)
  for t in range(6):
    updates, state = opt.update(grads(t), state, now)
    now = optimizer.optax.apply_updates(now, updates)
  want = _original_adam_weight_decay(params, grads, 6, rates)
  for path, got in flax.traverse_util.flatten_dict(now, sep='/').items():
    np.testing.assert_allclose(got, want[path], rtol=1e-5, atol=1e-7)
  # The corrected optimizer (the default) differs: its first step is ~1/sqrt(1 - b2) / 10 =
  # 3.16x smaller (no warmup here: the step trains at the peak).
  corrected, uncorrected = (optimizer.make(opt_config(bias_correction=on)) for on in (True, False))
  first = [float(optimizer.optax.global_norm(o.update(grads(1), o.init(params), params)[0]))
           for o in (corrected, uncorrected)]
  assert first[1] == pytest.approx(3.16 * first[0], rel=0.02)


@pytest.mark.parametrize('name', ['adamw', 'lamb'])
def test_the_default_optimizers_are_optax_own_bit_for_bit(name):
  """make() builds optax.adamw's and optax.lamb's chains from their parts (to choose some):
  with the defaults, the same updates and state as optax's own."""
  params, grads = toy()
  ours = optimizer.make(opt_config(name=name))
  theirs = getattr(optimizer.optax, name)(optimizer.learning_rate_schedule(opt_config()),
                                          b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01,
                                          mask=optimizer.weight_decay_mask)
  a, b = ours.init(params), theirs.init(params)
  for t in range(3):
    g = jax.tree.map(lambda x: x * (t + 1), grads)  # noqa: B023
    (ua, a), (ub, b) = ours.update(g, a, params), theirs.update(g, b, params)
    for x, y in zip(jax.tree.leaves((ua, a)), jax.tree.leaves((ub, b)), strict=True):
      np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize('name', ['adamw', 'lamb'])
def test_the_switches_keep_the_optimizer_state(name):
  """bias_correction and trust_ratio_everywhere on or off, the state is optax's: a checkpoint
  resumes with the other setting."""
  params, _ = toy()
  states = [optimizer.make(opt_config(name=name, bias_correction=on, grad_clip_norm=1.0,
                                      layer_decay=0.8, trust_ratio_everywhere=on)).init(
                                          {'bert': {'layers_0': params}})
            for on in (True, False)]
  assert jax.tree.structure(states[0]) == jax.tree.structure(states[1])


def test_the_decay_from_the_warmup_end_reaches_the_peak():
  schedule = optimizer.learning_rate_schedule(opt_config(learning_rate=2e-5, warmup_steps=34,
                                                         total_steps=344))
  # transformers' linear schedule: the peak at the warmup's end, then down over 310 steps.
  assert float(schedule(34)) == pytest.approx(2e-5)
  assert float(schedule(189)) == pytest.approx(1e-5)
  original = optimizer.learning_rate_schedule(opt_config(
      learning_rate=2e-5, warmup_steps=34, total_steps=344, decay_from='step_0'))
  assert float(original(34)) == pytest.approx(2e-5 * (1 - 34 / 344))  # 1.8023e-05
  assert float(original(33)) == float(schedule(33))  # The warmups are the same.


@pytest.mark.parametrize('everywhere', [True, False])
def test_lamb_matches_hand_computed_step(everywhere):
  """trust_ratio_everywhere=false: no trust ratio where weight decay is skipped (LayerNorm,
  biases), as TF Addons' LAMB (exclude_from_layer_adaptation defaults to the decay's)."""
  params, grads = toy()
  opt = optimizer.make(opt_config(name='lamb', trust_ratio_everywhere=everywhere))
  updates, _ = opt.update(grads, opt.init(params), params)
  for path, p in flax.traverse_util.flatten_dict(params, sep='/').items():
    g = np.asarray(flax.traverse_util.flatten_dict(grads, sep='/')[path])
    p = np.asarray(p)
    adam = g / (np.abs(g) + 1e-6)  # m_hat / (sqrt(v_hat) + eps) on the first step.
    decay = 0.0 if ('bias' in path or 'layer_norm' in path) else 0.01
    u = adam + decay * p
    trust = np.linalg.norm(p) / np.linalg.norm(u)  # Layer-wise trust ratio.
    if not everywhere and not decay:
      trust = 1.0
    want = -0.1 * trust * u
    got = flax.traverse_util.flatten_dict(updates, sep='/')[path]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize('everywhere', [True, False])
def test_lamb_takes_a_trust_ratio_per_layer_also_of_scanned_layers(everywhere):
  """Pre-training options combined (helper-184): with model.scan_layers (a TPU's default from 12
  layers on) a weight's layers are one array, and LAMB took one trust ratio over all of them, so
  a scanned model trained otherwise than the same model unrolled (a GPU's default)."""
  params, grads = toy()
  # Two layers whose weights differ in scale: one ratio over both is neither layer's.
  layers = [jax.tree.map(lambda x, k=k: x * k, params) for k in (1.0, 8.0)]
  layer_grads = [jax.tree.map(lambda x, k=k: x * k, grads) for k in (2.0, 0.5)]
  unrolled = {'bert': {f'layers_{i}': p for i, p in enumerate(layers)}}
  scanned = {'bert': {'layers': jax.tree.map(lambda *x: jnp.stack(x), *layers)}}
  opt = optimizer.make(opt_config(name='lamb', trust_ratio_everywhere=everywhere))
  want, _ = opt.update({'bert': {f'layers_{i}': g for i, g in enumerate(layer_grads)}},
                       opt.init(unrolled), unrolled)
  got, _ = opt.update({'bert': {'layers': jax.tree.map(lambda *x: jnp.stack(x), *layer_grads)}},
                      opt.init(scanned), scanned)
  for path, stacked in flax.traverse_util.flatten_dict(got['bert']['layers'], sep='/').items():
    for i in range(2):
      np.testing.assert_allclose(
          stacked[i], flax.traverse_util.flatten_dict(want['bert'][f'layers_{i}'], sep='/')[path],
          rtol=1e-6, atol=0, err_msg=f'{path} of layer {i}')


def test_schedule_warmup_then_linear_decay():
  schedule = optimizer.learning_rate_schedule(opt_config(learning_rate=1e-4, warmup_steps=10,
                                                         total_steps=110))
  assert float(schedule(0)) == 0.0
  assert float(schedule(5)) == pytest.approx(5e-5)
  assert float(schedule(10)) == pytest.approx(1e-4)
  assert float(schedule(60)) == pytest.approx(5e-5)
  assert float(schedule(110)) == pytest.approx(0.0, abs=1e-12)


def test_a_run_can_train_part_of_a_longer_schedule(monkeypatch):
  # num_train_steps and optimizer.total_steps are two settings: one FieldReference made the
  # last of the two flags set both, so a 1200-step run of a 600-step schedule ran 600 steps.
  monkeypatch.chdir(REPO)
  config_file = '--config=configs/pretrain.py:size=tiny'
  for flags in (['--config.num_train_steps=1200', '--config.optimizer.total_steps=600'],
                ['--config.optimizer.total_steps=600', '--config.num_train_steps=1200']):
    config = optimizer.resolve_total_steps(config_args.check_args([config_file, *flags]))
    assert (config.num_train_steps, config.optimizer.total_steps) == (1200, 600)
  # Unset, the decay ends with the run, however long it is made.
  config = config_args.check_args([config_file, '--config.num_train_steps=1200'])
  assert config.optimizer.total_steps == 1200
  assert float(optimizer.learning_rate_schedule(config.optimizer)(1200)) == 0.0
  # A config that leaves it 0 (fine-tuning's, before its steps are known) is resolved first.
  config.optimizer.total_steps = 0
  with pytest.raises(ValueError, match='total_steps=0 is not resolved'):
    optimizer.learning_rate_schedule(config.optimizer)
  assert optimizer.resolve_total_steps(config).optimizer.total_steps == 1200


def test_the_steps_past_a_schedule_are_said_at_the_rate_its_schedule_gives(monkeypatch):
  """A warmup longer than optimizer.total_steps is still rising after it: a 35-step run of a
  20-step schedule warming up over 60 was said to train steps 21 to 35 at end_learning_rate=0,
  while it logged 1.13e-03 at step 35."""
  said = []
  monkeypatch.setattr(optimizer.console, 'warn_once',
                      lambda message, *args: said.append(message % args))

  def warned(steps, **fields):
    said.clear()
    optimizer.resolve_total_steps(ml_collections.ConfigDict(dict(
        num_train_steps=steps, optimizer=opt_config(learning_rate=2e-3, total_steps=20,
                                                    **fields))))
    return said

  assert warned(35, warmup_steps=60) == [
      "config.optimizer.total_steps=20 ends the schedule before the run's 35 steps: "
      'optimizer.warmup_steps=60 outlasts it: steps 21 to 35 still warm up (the learning rate '
      'is 0.00113 at step 35), not at optimizer.end_learning_rate=0; set '
      "--config.optimizer.total_steps to 0 (the run's steps) or 35 or more"]
  assert ('steps 21 to 61 still warm up to 0.002, then steps 62 to 100 train at '
          'optimizer.end_learning_rate=0;') in warned(100, warmup_steps=60)[0]
  assert 'steps 21 to 35 train at optimizer.end_learning_rate=0;' in warned(35, warmup_steps=10)[0]
  # google-research/bert's schedule (decay_from=step_0): the warmup's last step is its highest
  # rate (59/60 of the peak), the next the decay's, over by then (review of 2026-12-02).
  assert ('steps 21 to 60 still warm up to 0.00197, then steps 61 to 100 train at '
          'optimizer.end_learning_rate=0;') in warned(100, warmup_steps=60, decay_from='step_0')[0]


def test_gradient_clipping():
  params, grads = toy()
  big = jax.tree.map(lambda g: 1e3 * g, grads)
  opt = optimizer.make(opt_config(grad_clip_norm=1.0, weight_decay=0.0, name='lamb'))
  opt_noclip = optimizer.make(opt_config(weight_decay=0.0, name='lamb'))
  a, _ = opt.update(big, opt.init(params), params)
  b, _ = opt_noclip.update(big, opt_noclip.init(params), params)
  # Adam normalises the scale away on step 1, so clipping must not change the update...
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-4)
  # ...but it does bound the gradient that enters the moments.
  clip = optimizer.optax.clip_by_global_norm(1.0)
  clipped, _ = clip.update(big, clip.init(params))
  assert float(optimizer.optax.global_norm(clipped)) == pytest.approx(1.0, rel=1e-5)


def test_unknown_optimizer_and_missing_rule():
  params, _ = toy()
  with pytest.raises(ValueError, match='valid: adamw, lamb'):
    optimizer.make(opt_config(name='sgd'))
  with pytest.raises(ValueError, match='no rule matches parameter'):
    optimizer.match_rules(params, [(r'kernel$', 1.0)])
