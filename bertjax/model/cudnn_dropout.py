"""BERT's attention dropout inside cuDNN's fused flash kernel, and the check that it trains.

How XLA runs it (jax._src.cudnn; XLA's CuDnnThunk): each call of the kernel in a compiled
program draws its mask from a Philox stream whose seed is fixed when the program is compiled
(one per layer here: layer_seed) and whose offset that call advances by itself after every
execution. So in one compiled train step of unrolled layers:
  - a layer's forward and backward kernels each run once per step (twice the forward under
    remat, each its own call) and so stand at the same offset: the backward drops exactly what
    the forward dropped; under grad accumulation each runs once per micro-batch, in order;
  - the offset moves every step: a new mask each step;
  - each layer has its own seed: the layers draw different masks.
A CUDA graph (XLA's command buffers) would replay a recorded offset, so a step that drops
inside cuDNN compiles with cuDNN's calls left out of command buffers (compiler_options).
What it does not give, said on the run's start line (platform_defaults.settle):
  - under nn.scan one forward kernel serves every layer in layer order and one backward kernel
    in reverse order, so a layer's backward would undo another layer's mask: cuDNN's dropout
    needs unrolled layers (the GPU default) and is refused with scanned ones;
  - the masks are not drawn from the run's PRNG key: a resumed run (a new process, offsets from
    0 again) is not bit for bit the uninterrupted run, as it is with the XLA attention;
  - one program runs on every device of a mesh: each device draws the same masks for its rows.
These rest on XLA's runtime, not on anything jax documents, so before a run relies on them on a
GPU, check() runs a two-layer program three times and reads the masks back (measure, judge);
where one fails, 'auto' takes the XLA attention and an explicit cudnn is refused, each saying
why.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.model import attention

# Seeds are static (compiled into the program); one per layer, away from jax's default of 42.
_FIRST_SEED = 1_000_003


def layer_seed(layer_index: int) -> int:
  """The Philox seed of layer `layer_index`'s attention-dropout mask."""
  return _FIRST_SEED + 7919 * layer_index


# XLA's default command-buffer commands (FUSION, CUBLAS, CUBLASLT, CUSTOM_CALL, CUDNN,
# DYNAMIC_SLICE_FUSION) less CUDNN, so that cuDNN's calls run (and advance their offsets) on
# every execution instead of replaying a recorded CUDA graph.
COMPILER_OPTIONS = {'xla_gpu_enable_command_buffer':
                    'FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,DYNAMIC_SLICE_FUSION'}


def compiler_options(model_config) -> dict | None:
  """The XLA options a train step of this (settled) model compiles with: COMPILER_OPTIONS where
  cuDNN draws the attention dropout, else None (XLA's defaults)."""
  if model_config.attention_impl == 'cudnn' and model_config.attention_dropout_rate > 0:
    return dict(COMPILER_OPTIONS)
  return None


def _kernel(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, input_mask_BxL, max_instances, rate, seed):
  return attention.cudnn(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, input_mask_BxL, max_instances,
                         dropout_rate=rate, seed=seed)


def _rows(length: int, packed: bool):
  """(input_mask [2, L], max_instances, allowed [2, L, L]: the query-key pairs that attend)."""
  if packed:  # Row 0: three instances, full; row 1: two, then padding.
    sizes = [(length // 2, length // 4, length - length // 2 - length // 4), (length // 2, 12)]
  else:
    sizes = [(length,), (length - length // 4,)]
  ids = np.zeros((2, length), np.int32)
  for row, parts in enumerate(sizes):
    ids[row, :sum(parts)] = np.repeat(np.arange(1, len(parts) + 1), parts)
  if not packed:
    ids = (ids > 0).astype(np.int32)
  allowed = (ids[:, :, None] == ids[:, None, :]) & (ids[:, :, None] > 0)
  return jnp.asarray(ids), 3 if packed else 0, allowed


def measure(kernel=_kernel, *, rate: float = 0.5, length: int = 64, packed: bool = False,
            runs: int = 3) -> dict:
  """Reads back the masks that two dropout attention layers (seeds layer_seed(0) and (1), the
  same inputs) apply, forward and backward, in one jitted program (compiled as a train step
  that drops in cuDNN is) run `runs` times on fresh copies of its inputs.

  With V the identity (head dim = length) a layer's output is its dropped probabilities
  P_dropped, and with the identity as the output's cotangent its dV is P_dropped transposed as
  the backward pass applies it, so each pass's mask is where its matrix is 0 (a softmax is
  never 0). Over the query-key pairs that attend (rows padded, or packed when `packed`):
    backward_agreement  the least share of a layer's entries that the forward and backward
                        passes keep or drop alike (1: the backward undoes the forward's mask);
    kept                the share the forward keeps (1 - rate expected);
    run_change          the least share whose mask differs between consecutive runs;
    run_shift           the most that a run's mask agrees with the last run's shifted by up to
                        16 queries or keys either way (a random stream reused from an offset);
    layer_change, row_change, head_change   the share that differs between the two layers,
                        the two rows and the two heads within a run.
  `kernel(q, k, v, input_mask, max_instances, rate, seed)` is cuDNN's by default (tests pass
  stand-ins)."""
  batch, heads = 2, 2
  shape = (batch, length, heads, length)
  q, k = (jax.random.normal(key, shape, jnp.float32).astype(jnp.bfloat16)
          for key in jax.random.split(jax.random.key(0)))
  identity = jnp.broadcast_to(jnp.eye(length, dtype=jnp.bfloat16)[None, :, None, :], shape)
  input_mask, max_instances, allowed = _rows(length, packed)

  @functools.partial(jax.jit, compiler_options=COMPILER_OPTIONS)
  def program(q, k, v):
    def layers(v0, v1):
      return [kernel(q, k, v_i, input_mask, max_instances, rate, seed)
              for v_i, seed in ((v0, layer_seed(0)), (v1, layer_seed(1)))]
    out, pullback = jax.vjp(layers, v, v)
    return out, pullback([v, v])  # [B, query, H, key] forward; [B, key, H, query] backward.

  fresh = lambda x: jnp.array(x, copy=True)  # noqa: E731  (new buffers each run)
  results = jax.device_get([program(fresh(q), fresh(k), fresh(identity)) for _ in range(runs)])
  # kept[run][layer], [B, H, query, key], and the backward's, transposed to match.
  kept = [[np.swapaxes(np.asarray(o, np.float32), 1, 2) != 0 for o in out] for out, _ in results]
  kept_back = [[np.moveaxis(np.asarray(d, np.float32), (1, 2, 3), (3, 1, 2)) != 0 for d in d_v]
               for _, d_v in results]
  real = np.broadcast_to(allowed[:, None], kept[0][0].shape)

  def share(a, where=real):
    return float(np.mean(a[where]))

  def shifted_agreement(now, before):
    agreements = [0.0]
    for axis in (2, 3):
      for shift in (*range(-16, 0), *range(1, 17)):
        both = real & np.roll(real, shift, axis)
        agreements.append(share(now == np.roll(before, shift, axis), both))
    return max(agreements)

  both_rows = allowed[0] & allowed[1]
  return dict(
      backward_agreement=min(share(f == b) for fs, bs in zip(kept, kept_back, strict=True)
                             for f, b in zip(fs, bs, strict=True)),
      kept=share(kept[0][0]),
      run_change=min(share(kept[i][0] != kept[i + 1][0]) for i in range(runs - 1)),
      run_shift=max(shifted_agreement(kept[i + 1][0], kept[i][0]) for i in range(runs - 1)),
      layer_change=share(kept[0][0] != kept[0][1]),
      row_change=float(np.mean((kept[0][0][0] != kept[0][0][1])[:, both_rows])),
      head_change=share(kept[0][0][:, 0] != kept[0][0][:, 1], real[:, 0]),
      rate=rate)


def judge(measured: dict) -> str:
  """'' where cuDNN's dropout trains as the module docstring says, else what fails."""
  if measured['backward_agreement'] < 1.0:
    return ("cuDNN's backward pass drops other entries than its forward pass (they agree on "
            f"{measured['backward_agreement']:.1%})")
  if abs(measured['kept'] - (1 - measured['rate'])) > 0.05:
    return (f"cuDNN keeps {measured['kept']:.0%} of the attention probabilities at dropout "
            f"rate {measured['rate']}")
  if measured['run_change'] < 0.2:
    return 'cuDNN draws the same attention-dropout mask every step'
  if measured['run_shift'] > 0.9:
    return "cuDNN's attention-dropout mask repeats the last step's, shifted"
  for what in ('layer', 'row', 'head'):
    if measured[f'{what}_change'] < 0.2:
      return f'cuDNN draws the same attention-dropout mask in every {what}'
  return ''


@functools.cache
def check(packed: bool = False) -> str:
  """judge(measure(packed=packed)) on this process's GPU, once per layout: '' where cuDNN's
  attention dropout trains, else why not (an error running the probe is a reason too)."""
  try:
    return judge(measure(packed=packed))
  except Exception as e:  # pylint: disable=broad-except
    return f'cuDNN attention dropout failed to run here ({type(e).__name__}: {e})'
