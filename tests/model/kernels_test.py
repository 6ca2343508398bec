"""The encoder's kernels: einsum's VJP, dot_general, float32 activation math, dropout."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax.model import kernels


@pytest.mark.parametrize('spec,lhs_shape,rhs_shape', [
    ('bld,dthk->blthk', (2, 5, 8), (8, 3, 2, 4)),  # Fused QKV projection.
    ('bqhk,bshk->bhqs', (2, 5, 2, 4), (2, 6, 2, 4)),  # Attention logits.
    ('bhqs,bshk->bqhk', (2, 2, 5, 6), (2, 6, 2, 4)),  # Attention output.
    ('nv,vd->nd', (4, 7), (7, 3)),
])
def test_einsum_gradient_equals_autodiff(spec, lhs_shape, rhs_shape):
  rng = np.random.default_rng(0)
  lhs, rhs = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in (lhs_shape, rhs_shape))
  got_out, got_vjp = jax.vjp(functools.partial(kernels.einsum, spec), lhs, rhs)
  want_out, want_vjp = jax.vjp(functools.partial(jnp.einsum, spec), lhs, rhs)
  g = jnp.asarray(rng.normal(size=want_out.shape), jnp.float32)
  np.testing.assert_allclose(got_out, want_out, rtol=1e-6, atol=1e-6)
  for got, want in zip(got_vjp(g), want_vjp(g), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dot_general_equals_lax():
  rng = np.random.default_rng(1)
  lhs = jnp.asarray(rng.normal(size=(2, 3, 4, 5)), jnp.float32)
  rhs = jnp.asarray(rng.normal(size=(4, 5, 6)), jnp.float32)
  for dims in ((((2, 3), (0, 1)), ((), ())), (((3,), (1,)), ((2,), (0,)))):
    np.testing.assert_allclose(kernels.dot_general(lhs, rhs, dims),
                               jax.lax.dot_general(lhs, rhs, dims), rtol=1e-5, atol=1e-5)


def test_float32_activation_math_in_bfloat16_mode():
  x = jnp.linspace(-4, 4, 101).astype(jnp.bfloat16)
  got = kernels.ACTIVATIONS['gelu'](x)
  assert got.dtype == jnp.bfloat16
  want = kernels.gelu(x.astype(jnp.float32)).astype(jnp.bfloat16)  # One rounding, at the end.
  np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
  # Evaluated in bf16 throughout, the rounding of each step shows: the test can tell.
  assert not np.array_equal(np.asarray(kernels.gelu(x), np.float32), np.asarray(want, np.float32))
  np.testing.assert_array_equal(kernels.ACTIVATIONS['gelu'](x.astype(jnp.float32)),
                                kernels.gelu(x.astype(jnp.float32)))


@pytest.mark.parametrize('shape, rate', [((3, 5, 7), 0.1), ((2, 4, 16, 16), 0.5), ((1,), 0.3)])
def test_dropout_draws_flax_masks_bit_for_bit(shape, rate):
  """kernels.Dropout's unrolled threefry must reproduce nn.Dropout exactly (same key, same mask)."""
  x = jnp.arange(1, np.prod(shape) + 1, dtype=jnp.float32).reshape(shape)
  for seed in range(3):
    rngs = {'dropout': jax.random.key(seed)}
    ours = jax.jit(lambda x, r: kernels.Dropout(rate).apply({}, x, deterministic=False, rngs=r))(
        x, rngs)
    flax_ = nn.Dropout(rate).apply({}, x, deterministic=False, rngs=rngs)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(flax_))
    assert 0 < np.mean(np.asarray(ours) == 0) < 1 or np.prod(shape) == 1
