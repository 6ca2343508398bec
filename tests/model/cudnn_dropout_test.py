"""cuDNN's attention dropout: the check a GPU run passes before relying on it (against stand-in
kernels that draw masks the way XLA's cuDNN calls do, and the ways that can go wrong), the
program each layer's kernel call compiles into (lowered for CUDA here, no GPU needed), the
refusal under nn.scan, and what a run picks when the check fails. The real kernel's check runs
where a GPU is present."""

import collections
import json
import os
import pathlib
import re
import subprocess

import flax.linen as nn
import jax
from jax.experimental import io_callback
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from bertjax.model import cudnn_dropout
from bertjax.model import encoder_config
from bertjax.model import heads
from bertjax.model import platform_defaults
from configs import common


def stand_in(*, masks_move=True, backward_follows=True, seeds_used=True, drops=True,
             rows_and_heads_differ=True, stream_shifts=False):
  """A kernel(q, k, v, input_mask, max_instances, rate, seed) that draws its dropout mask the
  way XLA runs cuDNN's: from (seed, an offset that each call site advances by itself after each
  execution), the forward and backward calls counting separately; each keyword but the first
  four breaks one of those (stream_shifts: each step's mask is the last one's moved a key on)."""
  counters = collections.Counter()

  def offset(site):
    def host():
      value = counters[site]
      counters[site] += 1 if masks_move else 0
      return np.int32(value + (0 if backward_follows or site[0] == 'fwd' else 1000))
    return io_callback(host, jax.ShapeDtypeStruct((), jnp.int32))

  def kernel(q, k, v, input_mask, max_instances, rate, seed):
    ids = input_mask
    attends = ((ids[:, :, None] == ids[:, None, :]) if max_instances
               else jnp.ones_like(ids[:, :, None] == ids[:, None, :])) & (ids[:, None, :] > 0)
    probs = jax.nn.softmax(
        jnp.where(attends[:, None], jnp.einsum('bqhk,bshk->bhqs', q, k).astype(jnp.float32) / 8,
                  -1e9), axis=-1)

    def dropped(site):
      key = jax.random.key(seed if seeds_used else 0)
      keep = 1 - rate if drops else 1.0
      b, h, length, _ = probs.shape
      if stream_shifts:  # One long stream, read from the step's offset on.
        stream = jax.random.bernoulli(key, keep, (b, h, length, 2 * length))
        mask = jax.lax.dynamic_slice_in_dim(stream, offset(site) % length, length, axis=3)
      else:
        key = jax.random.fold_in(key, offset(site))
        mask = jax.random.bernoulli(
            key, keep, probs.shape if rows_and_heads_differ else (1, 1, length, length))
      return probs * mask / keep

    @jax.custom_vjp
    def attend(v):
      return jnp.einsum('bhqs,bshk->bqhk', dropped(('fwd', seed)), v).astype(v.dtype)

    def forward(v):
      return attend(v), None

    def backward(_, d_out):
      d_v = jnp.einsum('bhqs,bqhk->bshk', dropped(('bwd', seed)), d_out.astype(jnp.float32))
      return (d_v.astype(d_out.dtype),)

    attend.defvjp(forward, backward)
    return attend(v)
  return kernel


@pytest.mark.parametrize('packed', [False, True], ids=['padded', 'packed'])
def test_a_kernel_that_trains_passes_the_check(packed):
  measured = cudnn_dropout.measure(stand_in(), packed=packed)
  assert measured['backward_agreement'] == 1.0
  assert measured['kept'] == pytest.approx(0.5, abs=0.03)
  for what in ('run', 'layer', 'row', 'head'):  # Two independent masks at rate 0.5.
    assert measured[f'{what}_change'] == pytest.approx(0.5, abs=0.03), what
  assert measured['run_shift'] < 0.6
  assert cudnn_dropout.judge(measured) == ''


@pytest.mark.parametrize('broken, says', [
    (dict(backward_follows=False), 'backward pass drops other entries than its forward'),
    (dict(masks_move=False), 'the same attention-dropout mask every step'),
    (dict(seeds_used=False), 'the same attention-dropout mask in every layer'),
    (dict(drops=False), 'keeps 100% of the attention probabilities at dropout rate 0.5'),
    (dict(rows_and_heads_differ=False), 'the same attention-dropout mask in every row'),
    (dict(stream_shifts=True), "mask repeats the last step's, shifted"),
])
def test_each_way_the_masks_can_go_wrong_fails_the_check(broken, says):
  assert says in cudnn_dropout.judge(cudnn_dropout.measure(stand_in(**broken)))


def test_the_check_compiles_as_a_dropping_train_step_does():
  """The probe's program and a train step that drops in cuDNN leave cuDNN's calls out of XLA's
  command buffers (a CUDA graph would replay a recorded offset); XLA takes the option (here on
  the CPU: it checks the names whatever the platform)."""
  assert 'CUDNN' not in cudnn_dropout.COMPILER_OPTIONS['xla_gpu_enable_command_buffer'].split(',')
  doubled = jax.jit(lambda x: 2 * x, compiler_options=cudnn_dropout.COMPILER_OPTIONS)(jnp.ones(3))
  np.testing.assert_array_equal(doubled, [2, 2, 2])
  def model(**overrides):
    return encoder_config.default_config(**{'dtype': 'bfloat16', 'attention_impl': 'cudnn',
                                            'attention_dropout_rate': 0.1, **overrides})
  assert cudnn_dropout.compiler_options(model()) == cudnn_dropout.COMPILER_OPTIONS
  assert cudnn_dropout.compiler_options(model(attention_dropout_rate=0.0)) is None
  assert cudnn_dropout.compiler_options(model(attention_impl='xla')) is None


def test_the_check_reports_a_kernel_that_cannot_run():
  cudnn_dropout.check.cache_clear()
  try:
    reason = cudnn_dropout.check()  # The real cuDNN kernel: no GPU here.
  finally:
    cudnn_dropout.check.cache_clear()
  if jax.default_backend() == 'gpu':
    assert reason == ''
  else:
    assert reason.startswith('cuDNN attention dropout failed to run here (')


def tiny_model(**overrides):
  return encoder_config.default_config(
      vocab_size=128, hidden_size=128, num_layers=3, num_heads=2, mlp_dim=256,
      max_position_embeddings=128, dtype='bfloat16', attention_impl='cudnn',
      attention_dropout_rate=0.1, **overrides)


def lowered_for_cuda(cfg, monkeypatch, deterministic=False):
  """The pre-training model's loss and gradient, lowered for a CUDA GPU (jax's cuDNN version
  and compute-capability probes answered as an H100's would be)."""
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_lib  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(cudnn_lib, 'check_cudnn_version', lambda: 91000)
  monkeypatch.setattr(cudnn_lib, 'check_compute_capability', lambda capability: True)
  model = heads.BertForPreTraining(cfg)
  batch = heads.dummy_batch(2, 128, 4)
  params = jax.eval_shape(lambda: nn.unbox(model.init(jax.random.key(0), **batch)['params']))

  def loss(params):
    mlm, nsp = model.apply({'params': params}, **batch, deterministic=deterministic,
                           rngs={'dropout': jax.random.key(1)})
    return jnp.sum(mlm.astype(jnp.float32)) + jnp.sum(nsp.astype(jnp.float32))

  return jax.jit(jax.grad(loss)).trace(params).lower(lowering_platforms=('cuda',)).as_text()


def fmha_calls(text):
  """(custom call name, seed, dropout rate) of each cuDNN attention call in lowered text."""
  calls = []
  for name, config in re.findall(r'custom_call @(__cudnn\$fmha\w*)\(.*?backend_config = '
                                 r'"((?:[^"\\]|\\.)*)"', text):
    fmha = json.loads(config.replace('\\22', '"').replace('\\"', '"'))['cudnn_fmha_backend_config']
    calls.append((name, int(fmha.get('seed', 0)), float(fmha.get('dropout_rate', 0))))
  return calls


def test_each_unrolled_layer_drops_with_its_own_seed_forward_and_backward(monkeypatch):
  calls = fmha_calls(lowered_for_cuda(tiny_model(), monkeypatch))
  seeds = [cudnn_dropout.layer_seed(i) for i in range(3)]
  forward = sorted(s for name, s, rate in calls if name == '__cudnn$fmhaSoftmaxDropout'
                   and rate == pytest.approx(0.1))
  backward = sorted(s for name, s, rate in calls
                    if name == '__cudnn$fmhaSoftmaxDropoutBackward' and rate == pytest.approx(0.1))
  assert len(calls) == 6 and forward == seeds and backward == seeds
  assert len(set(seeds)) == 3


def test_evaluation_runs_cudnn_without_dropout(monkeypatch):
  text = lowered_for_cuda(tiny_model(), monkeypatch, deterministic=True)
  calls = fmha_calls(text)
  assert calls and all('Dropout' not in name and rate == 0 for name, _, rate in calls)


def test_remat_recomputes_each_forward_with_its_own_seed(monkeypatch):
  """Under remat a layer's forward runs twice (the pass and its recomputation), two calls of
  the same seed, each at the step's offset: the recomputed mask is the forward's."""
  calls = fmha_calls(lowered_for_cuda(tiny_model(remat_policy='full'), monkeypatch))
  seeds = [cudnn_dropout.layer_seed(i) for i in range(3)]
  forward = collections.Counter(s for name, s, _ in calls
                                if name == '__cudnn$fmhaSoftmaxDropout')
  backward = collections.Counter(s for name, s, _ in calls
                                 if name == '__cudnn$fmhaSoftmaxDropoutBackward')
  assert forward == {seed: 2 for seed in seeds} and backward == {seed: 1 for seed in seeds}


def test_scanned_layers_refuse_cudnn_dropout_naming_the_fix(monkeypatch):
  with pytest.raises(ValueError, match='needs unrolled layers.*scan_layers=False'):
    lowered_for_cuda(tiny_model(scan_layers=True), monkeypatch)


def gpu_config(**overrides):
  return common.model_config('base', **{'dtype': 'bfloat16', **overrides})


def test_a_gpu_run_keeps_cudnn_with_dropout_where_the_check_passes():
  model, asked = gpu_config(), []
  line = platform_defaults.settle(model, 'gpu', packed=True,
                                  dropout_check=lambda packed: asked.append(packed) or '')
  assert asked == [True]  # The check runs the run's row layout.
  assert (model.attention_impl, model.scan_layers) == ('cudnn', False)
  assert line == ("attention cudnn, layers unrolled: GPU defaults; cuDNN draws the "
                  "attention-dropout masks, not the run's key: a resumed run is not bit for bit "
                  'the uninterrupted one, and each device draws the same masks')


def test_a_failed_check_gives_auto_the_xla_attention_and_refuses_an_explicit_cudnn():
  model = gpu_config()
  line = platform_defaults.settle(model, 'gpu', dropout_check=lambda packed: 'it broke')
  assert model.attention_impl == 'xla'
  assert line == 'attention xla (it broke), layers unrolled: GPU defaults'
  with pytest.raises(ValueError, match='attention_impl=cudnn with attention dropout: it broke'):
    platform_defaults.settle(gpu_config(attention_impl='cudnn'), 'gpu',
                             dropout_check=lambda packed: 'it broke')


def test_the_check_is_not_run_where_nothing_needs_it():
  def never(packed):
    raise AssertionError('checked')
  for platform, overrides in [('gpu', dict(attention_dropout_rate=0.0)), ('tpu', {}),
                              ('cpu', {}), ('gpu', dict(dtype='float32'))]:
    platform_defaults.settle(gpu_config(**overrides), platform, dropout_check=never)


def test_cudnn_set_with_scanned_layers_is_refused_before_the_check_or_a_trace():
  def never(packed):
    raise AssertionError('checked')
  with pytest.raises(ValueError, match='needs unrolled layers, and these are scanned: set '
                     'model.scan_layers=False, model.attention_dropout_rate=0, or'):
    platform_defaults.settle(gpu_config(attention_impl='cudnn', scan_layers=True), 'gpu',
                             dropout_check=never)
  # Resuming scanned layers (a checkpoint's layout stays): no scan_layers=False to offer.
  with pytest.raises(ValueError, match='these are scanned: set model.attention_dropout_rate=0'):
    platform_defaults.settle(gpu_config(attention_impl='cudnn'), 'gpu', saved_scan=True,
                             dropout_check=never)


def test_a_train_step_that_drops_in_cudnn_compiles_without_cudnn_command_buffers(monkeypatch):
  from bertjax.training import train_state  # pylint: disable=g-import-not-at-top
  seen = []
  monkeypatch.setattr(train_state.jax, 'jit', lambda fn, **kw: seen.append(kw) or fn)
  for model, options in [(gpu_config(attention_impl='cudnn'), cudnn_dropout.COMPILER_OPTIONS),
                         (gpu_config(attention_impl='xla'), None)]:
    config = ml_collections.ConfigDict(dict(model=model.to_dict(), grad_accum_steps=1))
    train_state.jit_train_step(config, None, None, None, None, None)
    assert seen.pop()['compiler_options'] == options


@pytest.mark.parametrize('platform', ['cpu', 'tpu'])
def test_cudnn_set_for_a_run_off_a_gpu_is_refused_before_anything_compiles(platform):
  with pytest.raises(ValueError, match=f'cudnn is a GPU kernel and this run is on {platform}: '
                     'use attention_impl=auto'):
    platform_defaults.settle(gpu_config(attention_impl='cudnn'), platform)
  # Helper-173's pass: mode=eval with it set on a CPU was cuDNN's 'not detected' traceback.
  with pytest.raises(ValueError, match=f'cudnn is a GPU kernel and this run is on {platform}: '
                     'use attention_impl=auto'):
    platform_defaults.resolve(gpu_config(attention_impl='cudnn'), platform, training=False)


def test_the_gpu_check_script_reports_what_a_run_would_be_told():
  """bench/gpu_checks.sh check, prepared for a lent GPU, runs here too: off a GPU it exits 1
  with the reason a run would be given."""
  if jax.default_backend() == 'gpu':
    pytest.skip('on a GPU the script measures the real kernel (bench/gpu_checks.sh)')
  repo = pathlib.Path(__file__).resolve().parents[2]
  env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS='')
  run = subprocess.run(['bash', 'bench/gpu_checks.sh', 'check'], capture_output=True, text=True,
                       timeout=120, cwd=repo, env=env)
  assert run.returncode == 1, (run.stdout, run.stderr)
  assert run.stdout.startswith('=== check ('), run.stdout
  for layout in ('padded', 'packed'):
    assert (f'{layout}: cuDNN attention dropout failed to run here (RuntimeError: cuDNN is not '
            'detected.)') in run.stderr.splitlines(), run.stderr
