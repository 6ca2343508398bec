"""Whether a restored checkpoint is what was saved: array digests; damage told from other errors.

The meta item of every save records a digest of each array of the state (an order-sensitive sum
of its bits, computed on the device in any sharding), checked after each restore, so a flipped
bit is found even where the storage format has no checksum. An error is damage (the bytes are
not what was saved: restore falls back to the previous step) or not (permissions, memory, a
bug: the run stops with the checkpoints left where they are).
"""

import json

import jax
import jax.numpy as jnp

# Messages of errors that mean damaged bytes (tensorstore's status codes among them), as
# opposed to errors of the reader (permissions, memory, a wrong path).
_DAMAGE_MARKERS = ('OUT_OF_RANGE', 'NOT_FOUND', 'DATA_LOSS', 'INVALID_ARGUMENT', 'does not exist',
                   'corrupt', 'Corrupt', 'checksum', 'truncated', 'Unexpected end', 'decode')


class DamagedCheckpointError(ValueError):
  """A checkpoint's bytes are not what was saved."""


def is_damage(error: BaseException) -> bool:
  """True when an error (or one it came from) says a checkpoint's bytes are damaged."""
  seen = 0
  while error is not None and seen < 10:
    if isinstance(error, (DamagedCheckpointError, FileNotFoundError, json.JSONDecodeError,
                          UnicodeDecodeError)):
      return True
    if isinstance(error, (PermissionError, MemoryError)):
      return False
    if any(marker in str(error) for marker in _DAMAGE_MARKERS):
      return True
    error, seen = error.__cause__ or error.__context__, seen + 1
  return False


def _digest(x):
  """A uint32 digest of an array's bits: sum of bits x an odd weight per position, mod 2^32."""
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
  bits = jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)  # 8 bytes: [..., 2].
  index = jnp.zeros(bits.shape, jnp.uint32)
  stride = 1
  for dim in reversed(range(bits.ndim)):
    index = index + jax.lax.broadcasted_iota(jnp.uint32, bits.shape, dim) * jnp.uint32(stride)
    stride = stride * bits.shape[dim] % (1 << 32)
  weight = index * jnp.uint32(2654435761) * jnp.uint32(2) + jnp.uint32(1)  # Odd: no bit lost.
  return jnp.sum(bits * weight, dtype=jnp.uint32)


_digests = jax.jit(lambda tree: jax.tree.map(_digest, tree))


def digests(state) -> dict:
  """{path: digest} of every array of a (sharded) state; the same for any sharding."""
  values = jax.device_get(_digests(state))
  return {jax.tree_util.keystr(path): int(v)
          for path, v in jax.tree_util.tree_flatten_with_path(values)[0]}


def check_restored(step: int, state, meta):
  """Raises DamagedCheckpointError when the meta or the arrays are not what was saved."""
  if not isinstance(meta, dict) or not all(
      isinstance(meta.get(k), int) for k in ('step', 'examples_consumed')):
    raise DamagedCheckpointError(f'its meta item lacks the step or the examples consumed: {meta}')
  if 'digests' in meta:
    found = digests(state)
    bad = sorted(k for k, v in meta['digests'].items() if found.get(k) != v)
    if bad:
      raise DamagedCheckpointError(f'{len(bad)} array(s) differ from what was saved (digest), '
                                   f'e.g. {bad[0]}')
