"""Encoder and heads: golden parameter counts, jit, padding, bf16, scan/remat, attention paths."""

import functools

import flax.linen as nn
import jax
import jax.extend.core  # noqa: F401  # ClosedJaxpr, Jaxpr (jax.extend is not imported by jax)
import jax.numpy as jnp
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax.model import encoder
from bertjax.model import encoder_config
from bertjax.model import heads
from configs import common

GOLDEN_ENCODER_PARAMS = {'base': 109_482_240, 'large': 335_141_888}


def formula_param_count(cfg) -> int:
  """Encoder + pooler parameters, counted by hand from the architecture."""
  d, f = cfg.hidden_size, cfg.mlp_dim
  embeddings = (cfg.vocab_size + cfg.max_position_embeddings + cfg.type_vocab_size) * d + 2 * d
  attention = 4 * (d * d + d) + 2 * d
  mlp = d * f + f + f * d + d + 2 * d
  pooler = d * d + d
  return embeddings + cfg.num_layers * (attention + mlp) + pooler


def abstract_params(cfg, module_cls=encoder.BertEncoder, batch=None):
  batch = batch or heads.dummy_batch(1, 8, 2)
  if module_cls is encoder.BertEncoder:
    batch = {k: v for k, v in batch.items() if k != 'masked_lm_positions'}
  return jax.eval_shape(
      lambda: module_cls(cfg).init(jax.random.key(0), **batch))['params']


@pytest.mark.parametrize('size', list(common.SIZES))
def test_param_counts(size):
  cfg = common.model_config(size)
  count = encoder.param_count(abstract_params(cfg))
  assert count == formula_param_count(cfg)
  if size in GOLDEN_ENCODER_PARAMS:
    assert count == GOLDEN_ENCODER_PARAMS[size]




def test_pretraining_head_param_count():
  cfg = common.model_config('base')
  d, v = cfg.hidden_size, cfg.vocab_size
  heads_only = (d * d + d) + 2 * d + v + (2 * d + 2)  # transform, LayerNorm, bias, NSP.
  count = encoder.param_count(abstract_params(cfg, heads.BertForPreTraining))
  assert count == GOLDEN_ENCODER_PARAMS['base'] + heads_only  # Decoder is tied: no V x D.


def test_every_param_has_logical_axes():
  cfg = common.model_config('tiny', scan_layers=True)
  boxed = jax.eval_shape(lambda: heads.BertForPreTraining(cfg).init(
      jax.random.key(0), **heads.dummy_batch(1, 8, 2)))['params']
  leaves = jax.tree.leaves(boxed, is_leaf=lambda x: hasattr(x, 'names'))
  assert leaves and all(hasattr(x, 'names') for x in leaves)
  names = {n for x in leaves for n in x.names if n}
  assert names == {'vocab', 'embed', 'heads', 'kv', 'mlp', 'layers'}
  for x in leaves:
    assert len(x.names) == len(x.value.shape)


def tiny_setup(seed=0, **overrides):
  cfg = common.model_config('tiny', vocab_size=500, max_position_embeddings=64, **overrides)
  rng = np.random.default_rng(seed)
  batch = {
      'input_ids': rng.integers(0, 500, (3, 16)).astype(np.int32),
      'input_mask': np.ones((3, 16), np.int32),
      'segment_ids': (np.arange(16) >= 7).astype(np.int32)[None].repeat(3, 0),
      'masked_lm_positions': rng.integers(0, 10, (3, 4)).astype(np.int32),
  }
  batch['input_mask'][1, 10:] = 0
  batch['input_mask'][2, 4:] = 0
  batch['segment_ids'] *= batch['input_mask']
  variables = heads.BertForPreTraining(cfg).init(jax.random.key(seed), **batch)
  return cfg, variables, batch


def apply(cfg, variables, batch, **kw):
  return heads.BertForPreTraining(cfg).apply(variables, **batch, **kw)


def test_jit_equals_eager():
  cfg, variables, batch = tiny_setup()
  eager = apply(cfg, variables, batch)
  jitted = jax.jit(functools.partial(apply, cfg))(variables, batch)
  for a, b in zip(eager, jitted, strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)


def test_padding_does_not_change_real_positions():
  cfg, variables, batch = tiny_setup()
  # Jitted: op by op, the longer rows' shapes compiled each primitive again.
  encode = jax.jit(encoder.BertEncoder(cfg).apply)
  params = {'params': variables['params']['bert']}
  inputs = {k: v for k, v in batch.items() if k != 'masked_lm_positions'}
  seq, pooled = encode(params, **inputs)
  # Change what sits at padded positions, and add more padding at the end.
  garbage = dict(inputs)
  garbage['input_ids'] = np.where(inputs['input_mask'] == 1, inputs['input_ids'], 7)
  longer = {k: np.pad(v, ((0, 0), (0, 9)), constant_values=3 if k == 'input_ids' else 0)
            for k, v in garbage.items()}
  seq2, pooled2 = encode(params, **longer)
  mask = inputs['input_mask'].astype(bool)
  np.testing.assert_allclose(np.asarray(seq2)[:, :16][mask], np.asarray(seq)[mask], atol=1e-6)
  np.testing.assert_allclose(np.asarray(pooled2), np.asarray(pooled), atol=1e-6)


def test_bfloat16_close_to_float32():
  cfg, variables, batch = tiny_setup()
  mlm32, nsp32 = apply(cfg, variables, batch)
  cfg16 = common.model_config('tiny', vocab_size=500, max_position_embeddings=64,
                              dtype='bfloat16')
  mlm16, nsp16 = apply(cfg16, variables, batch)
  assert mlm16.dtype == jnp.float32  # Logits leave the head in float32.
  # Stated tolerance: bf16 keeps 8 mantissa bits (~0.4% per rounding); through 2 layers and
  # the head the logits stay within 3% relative (L2) of float32.
  for got, want in ((mlm16, mlm32), (nsp16, nsp32)):
    got, want = np.asarray(got), np.asarray(want)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 3e-2
    assert np.linalg.norm(got - want) > 0  # bf16 really was used.
  # Parameters stay float32 whatever the compute dtype. (Dtypes are set when the functions are
  # traced: eval_shape traces init and apply as running them would, without computing.)
  params16 = jax.eval_shape(heads.BertForPreTraining(cfg16).init, jax.random.key(0),
                            **batch)['params']
  assert {x.dtype for x in jax.tree.leaves(params16)} == {jnp.dtype('float32')}
  seq16, _ = jax.eval_shape(
      encoder.BertEncoder(cfg16).apply, {'params': variables['params']['bert']},
      **{k: v for k, v in batch.items() if k != 'masked_lm_positions'})
  assert seq16.dtype == jnp.bfloat16


def _dot_generals(jaxpr):
  """Every dot_general equation in a closed jaxpr, sub-jaxprs included."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      yield eqn
    for sub in _sub_jaxprs(eqn.params):
      yield from _dot_generals(sub)


def _sub_jaxprs(params):
  """The jaxprs an equation's params hold (scan/cond/remat/custom_vjp bodies), read by type:
  jax.core.jaxprs_in_params is gone from jax 0.12."""
  for value in params.values():
    for item in value if isinstance(value, (tuple, list)) else (value,):
      if isinstance(item, jax.extend.core.ClosedJaxpr):
        yield item.jaxpr
      elif isinstance(item, jax.extend.core.Jaxpr):
        yield item


def test_bfloat16_matmuls_accumulate_in_float32():
  """Forward and backward, every bf16 matmul asks for a float32 result (TPU/GPU accumulate in
  float32 anyway; XLA:CPU runs bf16-out dots at half the speed) and the activations between
  blocks stay bf16."""
  cfg, variables, batch = tiny_setup(dtype='bfloat16')

  def loss(params):
    mlm, nsp = apply(cfg, {'params': params}, batch)
    return mlm.sum() + nsp.sum()

  jaxpr = jax.make_jaxpr(jax.grad(loss))(variables['params']).jaxpr
  dots = list(_dot_generals(jaxpr))
  bf16_dots = [e for e in dots if {v.aval.dtype for v in e.invars} == {jnp.dtype('bfloat16')}]
  # A float32 operand would make a float32 matmul of it (the MXU's slow multi-pass mode).
  mixed = [e for e in dots if len({v.aval.dtype for v in e.invars}) > 1]
  assert not mixed, [e.outvars[0].aval.shape for e in mixed]
  f32_out = [e for e in bf16_dots if e.params['preferred_element_type'] == jnp.float32]
  # Every parameter matmul, forward and both gradients: 2 layers x (qkv, out, 2 mlp) + pooler
  # + transform + tied logits + nsp. (Attention's batched q.k and p.v dots stay bf16 -> bf16:
  # XLA:CPU has no batched bf16 -> f32 kernel for their gradients.)
  assert len(f32_out) == 3 * (2 * 4 + 4), len(f32_out)
  assert len(bf16_dots) - len(f32_out) == 3 * 2 * 2, len(bf16_dots)
  # And XLA:CPU has a kernel for every one of them (it has none for some bf16 -> f32 forms).
  grads = jax.jit(jax.grad(loss))(variables['params'])
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(grads))








@pytest.mark.parametrize('impl', ['dot_product_attention'])  # splash: model/attention_test.py.
def test_attention_impls_agree(impl):
  """At real tokens (fused kernels leave padding queries' values unspecified; no real token
  reads them): MLM logits at masked positions inside each row, and NSP logits."""
  cfg, variables, batch = tiny_setup()
  want_mlm, want_nsp = apply(cfg, variables, batch)
  cfg_impl = common.model_config('tiny', vocab_size=500, max_position_embeddings=64,
                                 attention_impl=impl)
  got_mlm, got_nsp = apply(cfg_impl, variables, batch)
  inside = np.take_along_axis(batch['input_mask'], batch['masked_lm_positions'], axis=1) > 0
  assert inside.sum() >= 6
  np.testing.assert_allclose(np.asarray(got_mlm)[inside], np.asarray(want_mlm)[inside],
                             atol=1e-5)
  np.testing.assert_allclose(np.asarray(got_nsp), np.asarray(want_nsp), atol=1e-5)


def test_fused_attention_refuses_dropout_in_training():
  cfg, variables, batch = tiny_setup(attention_impl='dot_product_attention')
  with pytest.raises(ValueError, match='attention_dropout_rate=0'):
    apply(cfg, variables, batch, deterministic=False, rngs={'dropout': jax.random.key(1)})


def stacked(params, num_layers):
  """Unrolled layers' params in the scanned layout: the same weights, stacked along a leading
  layer axis."""
  params = nn.unbox(params)
  bert = {k: v for k, v in params['bert'].items() if not k.startswith('layers_')}
  layers = [params['bert'][f'layers_{i}'] for i in range(num_layers)]
  bert['layers'] = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
  return dict(params, bert=bert)


@pytest.mark.parametrize('remat_policy', ['none', 'full', 'dots'])
def test_scan_and_remat_equal_plain_loop(remat_policy):
  cfg, variables, batch = tiny_setup()
  want = apply(cfg, variables, batch)
  cfg_scan = common.model_config('tiny', vocab_size=500, max_position_embeddings=64,
                                 scan_layers=True, remat_policy=remat_policy)
  params = stacked(variables['params'], cfg.num_layers)  # Same weights.

  def loss(p):
    mlm, nsp = apply(cfg_scan, {'params': p}, batch)
    return jnp.sum(mlm ** 2) + jnp.sum(nsp ** 2), (mlm, nsp)
  # The outputs of the forward pass that the gradients go back through (where remat acts), and
  # the gradients, in one compiled program: the forward alone was a second compile, and the
  # gradient op by op (eager) compiled each primitive of the backward pass on its own.
  grads, got = jax.jit(jax.grad(loss, has_aux=True))(params)
  for a, b in zip(got, want, strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
  # Gradients flow through remat + scan.
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


def test_scan_unroll_changes_the_loop_not_the_numbers():
  """Layers per trip of the layer loop (model.scan_unroll): the same outputs under dropout and
  the same gradients as one layer per trip, with a trip count that leaves a remainder (3 layers,
  2 per trip) and with the whole stack in one trip; the compiled loop holds that many layers."""
  batch = tiny_setup()[2]
  rngs = {'dropout': jax.random.key(3)}
  # One set of weights for every unroll, 3 unrolled layers' stacked: each unroll's own init of
  # the scanned model took 3 to 7 s (op by op around its scan), the unrolled init reuses the ops
  # that the other tests' inits compiled.
  plain = common.model_config('tiny', vocab_size=500, max_position_embeddings=64, num_layers=3)
  params = stacked(heads.BertForPreTraining(plain).init(jax.random.key(0), **batch)['params'], 3)

  def run(unroll):
    cfg = common.model_config('tiny', vocab_size=500, max_position_embeddings=64,
                              num_layers=3, scan_layers=True, scan_unroll=unroll)
    # The scanned model's own init (traced, not run) lays its params out so.
    layout = jax.eval_shape(heads.BertForPreTraining(cfg).init, jax.random.key(0), **batch)
    assert (jax.tree.map(np.shape, nn.unbox(layout['params']))
            == jax.tree.map(np.shape, params)), unroll

    def loss(p):
      mlm, nsp = apply(cfg, {'params': p}, batch, deterministic=False, rngs=rngs)
      return jnp.sum(mlm ** 2) + jnp.sum(nsp ** 2), (mlm, nsp)
    step = jax.jit(jax.grad(loss, has_aux=True)).lower(params).compile()
    return step(params), step.as_text()

  (want_grads, want_out), hlo_1 = run(1)
  for unroll in (2, 3):
    (grads, out), hlo = run(unroll)
    for a, b in zip(jax.tree.leaves((grads, out)), jax.tree.leaves((want_grads, want_out)),
                    strict=True):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-5)
    # More layers per trip: more of the layer's matmuls in the compiled program.
    assert hlo.count(' dot(') > hlo_1.count(' dot('), unroll


@pytest.mark.parametrize('unroll', [0, 3, True])  # The config refuses a float or str itself.
def test_scan_unroll_outside_one_to_num_layers_is_refused(unroll):
  with pytest.raises(ValueError, match=r'scan_unroll=.*an integer from 1 to num_layers \(2\)'):
    encoder_config.check_config(common.model_config('tiny', scan_unroll=unroll, scan_layers=True))
  if unroll == 3:  # Unrolled layers have no trips: a value past their count is unused.
    encoder_config.check_config(common.model_config('tiny', scan_unroll=3, scan_layers=False))


def test_dropout_is_active_in_training_only():
  cfg, variables, batch = tiny_setup()
  train = functools.partial(apply, cfg, variables, batch, deterministic=False)
  a, _ = train(rngs={'dropout': jax.random.key(1)})
  b, _ = train(rngs={'dropout': jax.random.key(2)})
  c, _ = train(rngs={'dropout': jax.random.key(1)})
  assert not np.allclose(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_check_inputs_rejects_out_of_range_ids():
  cfg = common.model_config('tiny', vocab_size=500, max_position_embeddings=64)
  ids = np.zeros((2, 8), np.int32)
  encoder_config.check_inputs(cfg, ids, np.zeros_like(ids), np.ones_like(ids))
  ids[1, 3] = 500
  with pytest.raises(ValueError, match=r'token id 500 at position \(1, 3\) is outside'):
    encoder_config.check_inputs(cfg, ids)
  with pytest.raises(ValueError, match='exceeds max_position_embeddings 64'):
    encoder_config.check_inputs(cfg, np.zeros((1, 65), np.int32))
  with pytest.raises(ValueError, match='segment id 2'):
    encoder_config.check_inputs(cfg, np.zeros((1, 4), np.int32), np.full((1, 4), 2))


def test_config_validation():
  with pytest.raises(ValueError, match='valid sizes: tiny, mini, small, medium, base, large'):
    common.model_config('huge')
  with pytest.raises(ValueError, match='unknown model field'):
    common.model_config('tiny', hidden=3)
  cfg = common.model_config('tiny', num_heads=3)
  with pytest.raises(ValueError, match='not divisible by num_heads'):
    encoder.BertEncoder(cfg).init(jax.random.key(0), *[np.zeros((1, 4), np.int32)] * 3)




