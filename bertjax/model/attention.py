"""Self-attention kernels, and how a row's padding and packed instances reach each of them.

model.attention_impl picks one; every one gives the same numbers at every real token:
  xla                    softmax(q.k / sqrt(d) masked) . v written out: any backend, with
                         attention dropout drawn from the run's PRNG key.
  dot_product_attention  jax.nn.dot_product_attention, XLA's choice of kernel: padding as
                         sequence lengths, packed rows as a [B, L, L] mask.
  cudnn                  cuDNN's fused flash kernel (GPU): padding as sequence lengths (cuDNN's
                         padding mode: no [B, L, L] bias is built or read), packed rows as each
                         instance's length and offset (cuDNN's packed layout); attention
                         dropout inside the kernel with unrolled layers (cudnn_dropout.py).
  splash                 Pallas splash attention (TPU): padding and instances as segment ids.
                         Runs in interpret mode when not compiled for a TPU (tests); the
                         target is the mesh's devices (launch/aot_compile.py compiles for a
                         TPU slice on a CPU machine), else the default backend.

A row's layout is its input_mask: 0/1 for one instance per row, padding at the end (what every
bertjax pipeline writes), or instance ids 1, 2, ... for packed rows (records/packing.py).
Queries at padding positions give values that no real token reads (each kernel its own).

Attention dropout: xla draws it from the run's PRNG key, as every other dropout; cudnn draws
it inside the kernel (model/cudnn_dropout.py: unrolled layers, checked on the GPU before a run
relies on it); dot_product_attention and splash have none and refuse
model.attention_dropout_rate > 0 in training. Its measured effect on the tiny run is in
README.md (Pre-train at scale, "Attention kernels").
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

IMPLEMENTATIONS = ('xla', 'dot_product_attention', 'cudnn', 'splash')


def packed_mask(instance_ids_BxL):
  """[B, L, L]: a token attends to the real tokens of its own instance (a packed row holds
  several; 0 = padding). Padding queries attend to every real token, as in an unpacked row, so
  that no softmax row is empty (their outputs are never read)."""
  query_BxLx1, key_Bx1xL = instance_ids_BxL[:, :, None], instance_ids_BxL[:, None, :]
  return ((query_BxLx1 == key_Bx1xL) | (query_BxLx1 == 0)) & (key_Bx1xL != 0)


def _broadcast_mask(mask):
  """[B, L] key mask or [B, L, L] query x key mask -> broadcastable to [B, H, L, L]."""
  return mask[:, None, None, :] if mask.ndim == 2 else mask[:, None]


def xla(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask, dropout):
  """Plain softmax attention written out, so that attention dropout can be applied. `mask`:
  [B, L] keys, or [B, L, L] (packed_mask)."""
  depth = q_BxLxHxK.shape[-1]
  # jnp.einsum, not model.einsum: XLA:CPU (jax 0.10.2) has no kernel for the batched bf16 x
  # bf16 -> f32 dots of its gradient ("Unsupported element type for DotThunk").
  logits_BxHxLxL = jnp.einsum('bqhk,bshk->bhqs', q_BxLxHxK, k_BxLxHxK) / np.sqrt(depth)
  # Softmax in float32: bfloat16's 8-bit mantissa loses the small probabilities.
  logits_BxHxLxL = logits_BxHxLxL.astype(jnp.float32)
  neg = jnp.finfo(jnp.float32).min
  logits_BxHxLxL = jnp.where(_broadcast_mask(mask), logits_BxHxLxL, neg)
  probs_BxHxLxL = jax.nn.softmax(logits_BxHxLxL, axis=-1).astype(v_BxLxHxK.dtype)
  probs_BxHxLxL = dropout(probs_BxHxLxL)
  return jnp.einsum('bhqs,bshk->bqhk', probs_BxHxLxL, v_BxLxHxK)


def sequence_lengths(input_mask_BxL):
  """[B] real tokens per row: cuDNN's padding mode (the padding at the end of the row)."""
  return jnp.sum(input_mask_BxL > 0, axis=-1, dtype=jnp.int32)


def instance_segments(instance_ids_BxL, max_instances: int):
  """(lengths [B, N], offsets [B, N + 1]) of a packed row's instances, -1 past the last: the
  q/kv seqlen and offsets of cuDNN's packed layout."""
  ids_N = jnp.arange(1, max_instances + 1)
  lengths_BxN = jnp.sum(instance_ids_BxL[:, None, :] == ids_N[None, :, None], axis=-1,
                        dtype=jnp.int32)
  # Instances are contiguous from token 0, so each starts where the ones before it end.
  starts_BxN = jnp.cumsum(lengths_BxN, axis=-1) - lengths_BxN
  present_BxN = lengths_BxN > 0
  lengths_BxN = jnp.where(present_BxN, lengths_BxN, -1)
  offsets_BxN = jnp.where(present_BxN, starts_BxN, -1)
  return lengths_BxN, jnp.pad(offsets_BxN, [(0, 0), (0, 1)], constant_values=-1)


def dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, input_mask_BxL, packed: bool,
                          implementation=None):
  """jax.nn.dot_product_attention: padding as sequence lengths, packed rows as a mask."""
  if packed:
    return jax.nn.dot_product_attention(
        q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, mask=_broadcast_mask(packed_mask(input_mask_BxL)),
        implementation=implementation)
  lengths_B = sequence_lengths(input_mask_BxL)
  return jax.nn.dot_product_attention(
      q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, query_seq_lengths=lengths_B,
      key_value_seq_lengths=lengths_B, implementation=implementation)


def cudnn(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, input_mask_BxL, max_instances: int, *,
          dropout_rate: float = 0.0, seed: int = 0):
  """cuDNN's flash kernel: one instance per row (max_instances 0) in its padding mode, packed
  rows in its packed layout (segment lengths and offsets). GPU only. dropout_rate > 0 drops
  attention probabilities inside the kernel, from the Philox stream of `seed` (a static int:
  model/cudnn_dropout.py says how the masks move from step to step and what that needs)."""
  if not max_instances and not dropout_rate:
    return dot_product_attention(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, input_mask_BxL, False,
                                 implementation='cudnn')
  # Dropout and the packed layout are not in jax.nn.dot_product_attention's signature.
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_lib  # pylint: disable=g-import-not-at-top
  if max_instances:
    lengths, offsets = instance_segments(input_mask_BxL, max_instances)
    layout = dict(q_seqlen=lengths, kv_seqlen=lengths, q_offsets=offsets, kv_offsets=offsets)
  else:
    lengths_B = sequence_lengths(input_mask_BxL)
    layout = dict(q_seqlen=lengths_B, kv_seqlen=lengths_B)
  return cudnn_lib.dot_product_attention(
      q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, **layout,
      scale=float(1 / np.sqrt(q_BxLxHxK.shape[-1])), mask_type=cudnn_lib.MaskType.PADDING,
      seed=int(seed), dropout_rate=float(dropout_rate), qkv_layout='BTNH')


def target_platform() -> str:
  """The platform the traced computation is compiled for: the devices of the mesh it is traced
  under (jax.set_mesh), else JAX's default backend."""
  device = jax.sharding.get_abstract_mesh().abstract_device
  return device.platform if device is not None else jax.default_backend()


def splash_block(length: int) -> int:
  """The splash kernel's q/kv block: the whole row up to 512 tokens, else 512."""
  block = min(length, 512)
  if length % 128 or length % block:
    raise ValueError(f'attention_impl=splash needs max_seq_length ({length}) to be a multiple '
                     'of 128 (of 512 past 512): pad the rows, or use attention_impl=xla.')
  return block


def _splash_kernel(heads: int, length: int, interpret: bool):
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks  # pylint: disable=g-import-not-at-top
  block = splash_block(length)
  sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                            block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                            block_q_dq=block, block_kv_dq=block)
  mask = masks.MultiHeadMask([masks.FullMask((length, length))] * heads)
  return splash.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1,
                                interpret=interpret)


def splash(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, input_mask_BxL, interpret: bool = False):
  """Pallas splash attention with segment ids (input_mask: 1 / 0, or instance ids): a token
  attends to its own segment. Sharded over the mesh's batch and head axes with shard_map when a
  mesh is set (jax.set_mesh), so each device runs the kernel on its own rows and heads."""
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash_lib  # pylint: disable=g-import-not-at-top
  scale = 1 / np.sqrt(q_BxLxHxK.shape[-1])

  def local(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, ids_BxL):
    _, length, heads, _ = q_BxLxHxK.shape
    kernel = _splash_kernel(heads, length, interpret)

    def one_row(q_LxHxK, k_LxHxK, v_LxHxK, ids_L):
      q_HxLxK, k_HxLxK, v_HxLxK = (jnp.swapaxes(x, 0, 1) for x in (q_LxHxK, k_LxHxK, v_LxHxK))
      out_HxLxK = kernel((q_HxLxK * scale).astype(q_HxLxK.dtype), k_HxLxK, v_HxLxK,
                         segment_ids=splash_lib.SegmentIds(q=ids_L, kv=ids_L))
      return jnp.swapaxes(out_HxLxK, 0, 1)

    return jax.vmap(one_row)(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, ids_BxL)

  ids_BxL = input_mask_BxL.astype(jnp.int32)
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return local(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, ids_BxL)
  qkv_spec = nn.logical_to_mesh_axes(('batch', None, 'heads', None))
  ids_spec = nn.logical_to_mesh_axes(('batch', None))
  return jax.shard_map(local, in_specs=(qkv_spec, qkv_spec, qkv_spec, ids_spec),
                       out_specs=qkv_spec, check_vma=False)(
                           q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, ids_BxL)
