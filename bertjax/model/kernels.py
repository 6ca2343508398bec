"""The encoder's kernels: float32-accumulating einsum with a written-out VJP, dropout, GELU.

Each is a drop-in for what flax or jax would do, with the same values (dropout bit for bit), in a
form that XLA compiles better; why, per function. Shape legend as in encoder.py.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def gelu(x):
  """BERT's exact GELU, written as the original and PyTorch do: x / 2 * (1 + erf(x / sqrt(2))).

  jax.nn.gelu(approximate=False) computes the same function through erfc, which XLA:CPU
  evaluates ~2.5x slower than erf (values agree to ~1e-6).
  """
  return 0.5 * x * (1.0 + jax.lax.erf(x * np.sqrt(0.5).astype(x.dtype)))


# XLA's own float32 erf: x * P(x^2) / Q(x^2) on [-4, 4], where erf is +-1 in float32 beyond.
_ERF_ALPHA = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
              -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
              -1.60960333262415e-02)
_ERF_BETA = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
             -7.37332916720468e-03, -1.42647390514189e-02)


def _polynomial(x, coefficients):
  out = jnp.zeros_like(x)
  for c in coefficients:
    out = out * x + jnp.asarray(c, x.dtype)
  return out


def erf_rational(x):
  """erf in plain arithmetic (no chlo.erf): for exports whose consumer cannot run chlo's
  decomposition on dynamic shapes (TensorFlow's XlaCallModule)."""
  x = jnp.clip(x, -4.0, 4.0)
  x2 = x * x
  return x * _polynomial(x2, _ERF_ALPHA) / _polynomial(x2, _ERF_BETA)


def gelu_rational(x):
  """gelu with erf_rational: the same function to float32 rounding."""
  return 0.5 * x * (1.0 + erf_rational(x * np.sqrt(0.5).astype(x.dtype)))


def _einsum_f32(spec, lhs, rhs):
  out = jnp.einsum(spec, lhs, rhs, preferred_element_type=jnp.float32)
  return out.astype(jnp.result_type(lhs, rhs))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def einsum(spec, lhs, rhs):
  """jnp.einsum of two operands accumulating in float32, returned in the operands' dtype.

  Identical to jnp.einsum for float32. For bfloat16 it is what TPUs and GPUs do anyway, and
  XLA:CPU runs bf16 dots that return float32 at about twice the speed of those returning bf16.
  The gradient is written out so that its two dots also take bf16 operands (the cotangent in
  the compute dtype) and accumulate in float32: autodiff of a float32-returning dot would
  instead hand them a float32 cotangent and turn them into float32 matmuls.
  """
  return _einsum_f32(spec, lhs, rhs)


def _einsum_fwd(spec, lhs, rhs):
  return _einsum_f32(spec, lhs, rhs), (lhs, rhs)


def _einsum_bwd(spec, residuals, g):
  lhs, rhs = residuals
  operands, out = spec.split('->')
  lhs_spec, rhs_spec = operands.split(',')
  # Each index of an operand is in the other operand or in the output (no reduction within
  # one operand, no repeated index), so each gradient is one einsum.
  assert all(set(s) <= set(out) | set(o) and len(set(s)) == len(s)
             for s, o in ((lhs_spec, rhs_spec), (rhs_spec, lhs_spec))), spec
  g = g.astype(jnp.result_type(lhs, rhs))
  return (_einsum_f32(f'{out},{rhs_spec}->{lhs_spec}', g, rhs).astype(lhs.dtype),
          _einsum_f32(f'{lhs_spec},{out}->{rhs_spec}', lhs, g).astype(rhs.dtype))


einsum.defvjp(_einsum_fwd, _einsum_bwd)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                **kwargs):
  """jax.lax.dot_general (flax's Dense and DenseGeneral call it) as model.einsum."""
  del precision, kwargs  # Default precision; flax passes no other option.
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  letters = iter('abcdefghijklmnopqrstuvwxyz')
  lhs_idx, rhs_idx = [None] * lhs.ndim, [None] * rhs.ndim
  for i, j in (*zip(lhs_batch, rhs_batch, strict=True),
               *zip(lhs_contract, rhs_contract, strict=True)):
    lhs_idx[i] = rhs_idx[j] = next(letters)
  lhs_idx = [x or next(letters) for x in lhs_idx]
  rhs_idx = [x or next(letters) for x in rhs_idx]

  def free(idx, contract, batch):
    return [x for i, x in enumerate(idx) if i not in (*contract, *batch)]
  out_idx = ([lhs_idx[i] for i in lhs_batch] + free(lhs_idx, lhs_contract, lhs_batch)
             + free(rhs_idx, rhs_contract, rhs_batch))
  out = einsum(f'{"".join(lhs_idx)},{"".join(rhs_idx)}->{"".join(out_idx)}', lhs, rhs)
  return out if preferred_element_type is None else out.astype(preferred_element_type)


def in_float32(fn):
  """fn applied in float32 and cast back: XLA:CPU evaluates bfloat16 elementwise math ~3x
  slower than float32 (element by element conversions); on TPU/GPU the casts fuse away."""

  @functools.wraps(fn)
  def wrapped(x):
    return fn(x.astype(jnp.float32)).astype(x.dtype)
  return wrapped


ACTIVATIONS = {
    'gelu': in_float32(gelu),  # BERT's erf GELU.
    'gelu_rational': in_float32(gelu_rational),  # The same, for exports (interop/saved_model).
    'gelu_tanh': in_float32(functools.partial(jax.nn.gelu, approximate=True)),
    'relu': jax.nn.relu,
}

_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(key1, key2, count1, count2):
  """jax's threefry2x32 hash, unrolled: jax lowers it to a 5-trip loop on CPU, whose passes
  over the counters made dropout ~10% of a small model's training step on XLA:CPU."""
  keys = (key1, key2, key1 ^ key2 ^ np.uint32(0x1BD11BDA))
  x1, x2 = count1 + keys[0], count2 + keys[1]
  for i in range(5):
    for rotation in _THREEFRY_ROTATIONS[i % 2]:
      x1 = x1 + x2
      x2 = x1 ^ ((x2 << np.uint32(rotation)) | (x2 >> np.uint32(32 - rotation)))
    x1 = x1 + keys[(i + 1) % 3]
    x2 = x2 + keys[(i + 2) % 3] + np.uint32(i + 1)
  return x1, x2


def _uniform_bits(key, shape):
  """jax.random.bits(key, shape, uint32) for a partitionable threefry key, same values."""
  key1, key2 = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) \
      else key
  # The row-major element index from per-axis iotas, which SPMD partitioning keeps local.
  index = jnp.zeros(shape, jnp.uint32)
  stride = 1
  for axis in reversed(range(len(shape))):
    index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * np.uint32(stride)
    stride *= shape[axis]
  bits1, bits2 = _threefry2x32(key1, key2, jnp.zeros(shape, jnp.uint32), index)
  return bits1 ^ bits2


class Dropout(nn.Dropout):
  """nn.Dropout with the same masks (bit for bit), drawn with an unrolled threefry.

  Falls back to nn.Dropout for anything but a partitionable threefry2x32 key (the default)
  and for arrays of 2^32 elements or more.
  """

  def __call__(self, inputs, deterministic=None, rng=None):
    deterministic = nn.merge_param('deterministic', self.deterministic, deterministic)
    if self.rate == 0.0 or deterministic or self.rate == 1.0 or self.broadcast_dims:
      return super().__call__(inputs, deterministic, rng)
    rng = self.make_rng(self.rng_collection) if rng is None else rng
    impl = (str(jax.random.key_impl(rng)) if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)
            else jax.config.jax_default_prng_impl)
    if (impl != 'threefry2x32' or not jax.config.jax_threefry_partitionable
        or inputs.size >= 2**32):
      return super().__call__(inputs, deterministic, rng)
    keep_prob = 1.0 - self.rate
    # jax.random.bernoulli(rng, keep_prob): a uniform float32 from the top 23 bits, < p.
    floats = jax.lax.bitcast_convert_type(
        (_uniform_bits(rng, inputs.shape) >> np.uint32(9)) | np.uint32(0x3F800000),
        jnp.float32) - np.float32(1.0)
    mask = floats < np.float32(keep_prob)
    return jax.lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))
