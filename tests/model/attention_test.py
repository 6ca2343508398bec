"""Every attention kernel gives the written-out XLA attention's numbers at every real token, for
rows of one instance with padding and for packed rows: jax.nn.dot_product_attention with
sequence lengths, the splash kernel (Pallas, interpret mode on CPU) with segment ids, and
cuDNN's arguments (lengths and offsets of the packed layout, checked here against what they
mean; the kernel itself against XLA when a GPU is present)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
from matmul_precision import needs_eight_devices
from matmul_precision import splash_runs_here
import numpy as np
import pytest

from bertjax.model import attention
from bertjax.model import encoder_config
from bertjax.model import heads
from bertjax.training import sharding

B, L, H, K = 2, 128, 2, 8
UNPACKED = [(70,), (128,)]  # Real tokens per row.
PACKED = [(40, 50, 20), (100, 10)]  # Instances per row (3 at most), then padding.


def ids(rows):
  """input_mask of rows made of instances of these lengths: 1, 2, ... per instance, 0 after."""
  out = np.zeros((len(rows), L), np.int32)
  for r, lengths in enumerate(rows):
    start = 0
    for n, length in enumerate(lengths):
      out[r, start:start + length] = n + 1
      start += length
  return jnp.asarray(out)


def qkv(seed=0):
  return tuple(jax.random.normal(k, (B, L, H, K), jnp.float32)
               for k in jax.random.split(jax.random.key(seed), 3))


# The kernels and the model run jitted, as the steps run them: op by op, each primitive compiled
# on its own (the model's first eager init and apply took 8 s of the file's 25 on CPU).
@jax.jit
def xla_attention(q, k, v, mask):
  """attention.xla without dropout."""
  return attention.xla(q, k, v, mask, lambda p: p)


@functools.partial(jax.jit, static_argnames='packed')
def reference(q, k, v, input_mask, packed):
  mask = attention.packed_mask(input_mask) if packed else input_mask > 0
  return attention.xla(q, k, v, mask, lambda p: p)


dot_product_attention = jax.jit(attention.dot_product_attention, static_argnames='packed')
splash_interpreted = jax.jit(functools.partial(attention.splash, interpret=True))


def assert_equal_at_real_tokens(got, want, input_mask, atol=1e-5):
  real = np.asarray(input_mask) > 0
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=atol)


@pytest.mark.parametrize('impl', ['dot_product_attention',
                                  pytest.param('splash', marks=splash_runs_here)])
@pytest.mark.parametrize('rows', [UNPACKED, PACKED], ids=['unpacked', 'packed'])
def test_dot_product_attention_and_splash_equal_xla(rows, impl):
  q, k, v = qkv()
  mask = ids(rows)
  packed = rows is PACKED
  want = reference(q, k, v, mask, packed)
  got = (dot_product_attention(q, k, v, mask, packed) if impl != 'splash' else
         splash_interpreted(q, k, v, mask))
  assert_equal_at_real_tokens(got, want, mask)
  # The comparison can fail: attention across the instances of a packed row differs.
  if packed:
    crossed = xla_attention(q, k, v, mask > 0)
    assert not np.allclose(np.asarray(crossed)[np.asarray(mask) > 0],
                           np.asarray(want)[np.asarray(mask) > 0], atol=1e-3)


@splash_runs_here
def test_splash_refuses_a_length_its_blocks_cannot_tile():
  q, k, v = (x[:, :48] for x in qkv())
  with pytest.raises(ValueError, match=r'max_seq_length \(48\) to be a multiple of 128'):
    attention.splash(q, k, v, ids(UNPACKED)[:, :48], interpret=True)


def segment_mask(lengths_BxN, offsets_BxN1):
  """[B, L, L]: what cuDNN's packed layout means, a token attends to its own segment only."""
  starts_BxN = offsets_BxN1[:, :-1]
  pos = np.arange(L)
  inside_BxNxL = ((pos >= starts_BxN[..., None]) & (pos < (starts_BxN + lengths_BxN)[..., None])
                  & (lengths_BxN[..., None] > 0))
  return np.einsum('bnq,bns->bqs', inside_BxNxL, inside_BxNxL) > 0


def test_cudnn_arguments_describe_the_rows():
  """The lengths (padding mode) and the segment lengths and offsets (packed layout) that the
  cuDNN path passes: the documented values, and attention under what they mean equals XLA's."""
  np.testing.assert_array_equal(attention.sequence_lengths(ids(UNPACKED)), [70, 128])
  lengths, offsets = attention.instance_segments(ids(PACKED), 3)
  np.testing.assert_array_equal(lengths, [[40, 50, 20], [100, 10, -1]])
  np.testing.assert_array_equal(offsets, [[0, 40, 90, -1], [0, 100, -1, -1]])
  q, k, v = qkv(1)
  mask = ids(PACKED)
  meant = xla_attention(q, k, v, segment_mask(np.asarray(lengths), np.asarray(offsets)))
  assert_equal_at_real_tokens(meant, reference(q, k, v, mask, True), mask)


@pytest.mark.skipif(jax.default_backend() != 'gpu', reason='cuDNN runs on a GPU only (the '
                    'arguments are tested on CPU above)')
@pytest.mark.parametrize('rows', [UNPACKED, PACKED], ids=['unpacked', 'packed'])
def test_cudnn_kernel_equals_xla_on_gpu(rows):
  q, k, v = (x.astype(jnp.bfloat16) for x in qkv(2))
  mask = ids(rows)
  packed = rows is PACKED
  got = attention.cudnn(q, k, v, mask, 3 if packed else 0)
  want = reference(q, k, v, mask, packed)
  assert_equal_at_real_tokens(got.astype(jnp.float32), want.astype(jnp.float32), mask, 2e-2)


def model_config(impl='xla'):
  return encoder_config.default_config(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2,
                                       mlp_dim=64, max_position_embeddings=L, attention_impl=impl)


def model_batch():
  """A fresh batch (tests set its input_mask)."""
  batch = heads.dummy_batch(B, L, 4)
  batch['input_ids'] = np.random.default_rng(0).integers(5, 100, (B, L)).astype(np.int32)
  return batch


@pytest.fixture(scope='module')
def model_params():
  """The model's parameters, initialised once for the tests that read them (never written)."""
  module = heads.BertForPreTraining(model_config())
  return nn.unbox(jax.jit(module.init)(jax.random.key(0), **model_batch())['params'])


@functools.cache
def model_apply(impl):
  """(MLM logits, NSP logits) of (params, batch) with this attention kernel: one jitted
  function per kernel, shared by the tests."""
  module = heads.BertForPreTraining(model_config(impl))
  return jax.jit(lambda p, batch: module.apply({'params': p}, **batch))


@pytest.mark.parametrize('impl', ['dot_product_attention',
                                  pytest.param('splash', marks=splash_runs_here)])
@pytest.mark.parametrize('rows', [UNPACKED, PACKED], ids=['unpacked', 'packed'])
def test_model_outputs_equal_across_kernels(impl, rows, model_params):
  batch = model_batch()
  packed = rows is PACKED
  batch['input_mask'] = ids(rows)
  if packed:
    batch['instance_starts'] = jnp.asarray([[0, 40, 90], [0, 100, 0]])
  want = model_apply('xla')(model_params, batch)
  got = model_apply(impl)(model_params, batch)
  for a, b in zip(got, want, strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


@needs_eight_devices
@splash_runs_here
def test_splash_under_a_mesh_runs_per_device_shard_and_trains_alike(model_params):
  """With jax.set_mesh over 8 devices (data 2, fsdp 2, tensor 2), splash runs inside shard_map
  on each device's rows and heads; its loss and gradients equal XLA attention's."""
  cfg, params, batch = model_config(), model_params, model_batch()
  batch['input_mask'] = ids(PACKED)
  extra = {'instance_starts': jnp.asarray([[0, 40, 90], [0, 100, 0]])}
  batch = {k: jnp.tile(v, (4,) + (1,) * (v.ndim - 1)) for k, v in (batch | extra).items()}

  def loss(config, p):
    mlm, _ = heads.BertForPreTraining(config).apply({'params': p}, **batch)
    return jnp.sum(mlm.astype(jnp.float32) ** 2) / mlm.size

  mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 2, 2),
                           ('data', 'fsdp', 'tensor'))
  rules = sharding.RULES
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    got = jax.jit(jax.value_and_grad(functools.partial(loss, model_config('splash'))))(params)
    want = jax.jit(jax.value_and_grad(functools.partial(loss, cfg)))(params)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1]), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def pallas_interpret_flags(jaxpr) -> list:
  """The `interpret` parameter of every pallas_call in a jaxpr, nested jaxprs included."""
  flags = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'pallas_call':
      flags.append(eqn.params['interpret'])
    for param in eqn.params.values():
      for sub in param if isinstance(param, (list, tuple)) else [param]:
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          flags += pallas_interpret_flags(inner)
  return flags


@splash_runs_here
@pytest.mark.parametrize('platform', ['tpu', 'cpu'])
def test_splash_compiles_the_kernel_for_the_meshs_platform_not_the_hosts(platform,
                                                                          model_params):
  """launch/aot_compile.py traces on a CPU machine under a mesh of TPU devices: the model must
  emit the real kernel for them, not interpret mode (interpreting only where the target is not
  a TPU). An abstract mesh with a TPU device stands for the topology's devices."""
  from jax._src import mesh as mesh_lib  # pylint: disable=g-import-not-at-top  # AbstractDevice.
  cfg = model_config('splash')
  params, batch = model_params, model_batch()
  batch['input_mask'] = ids(UNPACKED)
  device = mesh_lib.AbstractDevice('TPU v5 lite' if platform == 'tpu' else 'cpu', None, platform)
  # Auto axes, as sharding.make_mesh makes them (jax 0.12's AbstractMesh defaults to Explicit).
  mesh = jax.sharding.AbstractMesh((1, 1, 1), ('data', 'fsdp', 'tensor'), abstract_device=device,
                                   axis_types=(jax.sharding.AxisType.Auto,) * 3)
  with jax.sharding.use_abstract_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    assert attention.target_platform() == platform
    traced = jax.make_jaxpr(
        lambda p: heads.BertForPreTraining(cfg).apply({'params': p}, **batch))(params)
  flags = pallas_interpret_flags(traced.jaxpr)
  assert len(flags) == cfg.num_layers, flags
  assert all(bool(f) == (platform != 'tpu') for f in flags), flags
