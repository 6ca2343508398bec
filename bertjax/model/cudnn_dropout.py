"""BERT's attention dropout inside cuDNN's fused flash kernel, and the check that it trains.

How XLA runs it (jax._src.cudnn; XLA's CuDnnThunk): each call of the kernel in a compiled
program draws its mask from a Philox stream whose seed is fixed when the program is compiled
(one per layer here: layer_seed) and whose offset that call advances by itself after every
execution. So in one compiled train step of unrolled layers:
  - a layer's forward and backward kernels each run once per step and so stand at the same
    offset: the backward drops exactly what the forward dropped;
  - the offset moves every step: a new mask each step;
  - each layer has its own seed: the layers draw different masks.
What it does not give, said where a run picks it (platform_defaults):
  - under nn.scan one forward kernel serves every layer in layer order and one backward kernel
    in reverse order, so a layer's backward would undo another layer's mask: cuDNN's dropout
    needs unrolled layers (the GPU default) and is refused with scanned ones;
  - the masks are not drawn from the run's PRNG key: a resumed run (a new process, offsets from
    0 again) is not bit for bit the uninterrupted run, as it is with the XLA attention;
  - one program runs on every device of a mesh: each device draws the same masks for its rows.
These rest on XLA's runtime, not on anything jax documents, so before a run relies on them on a
GPU, check() runs a two-layer program twice and verifies all three (about a second); where one
fails, 'auto' takes the XLA attention and an explicit cudnn is refused, each saying why.
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


def _kernel(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, input_mask_BxL, rate, seed):
  return attention.cudnn(q_BxLxHxK, k_BxLxHxK, v_BxLxHxK, input_mask_BxL, 0,
                         dropout_rate=rate, seed=seed)


def measure(kernel=_kernel, *, rate: float = 0.5, length: int = 64) -> dict:
  """Reads back the masks that two dropout attention layers (seeds layer_seed(0) and (1), the
  same inputs) apply, forward and backward, in one jitted program run twice.

  With V the identity (head dim = length) a layer's output is its dropped probabilities
  P_dropped, and with the identity as the output's cotangent its dV is P_dropped transposed as
  the backward pass applies it, so each pass's mask is where its matrix is 0 (a softmax is
  never 0). Over the real queries and keys (the second row is padded) it returns:
    backward_agreement  the least share of a layer's entries that the forward and backward
                        passes keep or drop alike (1: the backward undoes the forward's mask);
    kept                the share the forward keeps (1 - rate expected);
    run_change          the share whose mask differs between the two runs (a new mask a step);
    layer_change        the share that differs between the two layers within a run.
  `kernel(q, k, v, input_mask, rate, seed)` is cuDNN's by default (tests pass stand-ins)."""
  batch, heads = 2, 2
  shape = (batch, length, heads, length)
  q, k = (jax.random.normal(key, shape, jnp.float32).astype(jnp.bfloat16)
          for key in jax.random.split(jax.random.key(0)))
  identity = jnp.broadcast_to(jnp.eye(length, dtype=jnp.bfloat16)[None, :, None, :], shape)
  real_B = np.array([length, length - length // 4])
  input_mask = jnp.asarray(np.arange(length)[None] < real_B[:, None], jnp.int32)

  @jax.jit
  def program(q, k, v):
    def layers(v0, v1):
      return [kernel(q, k, v_i, input_mask, rate, seed)
              for v_i, seed in ((v0, layer_seed(0)), (v1, layer_seed(1)))]
    out, pullback = jax.vjp(layers, v, v)
    return out, pullback([v, v])  # [B, query, H, key] forward; [B, key, H, query] backward.

  runs = jax.device_get([program(q, k, identity) for _ in range(2)])
  real = np.stack([np.outer(np.arange(length) < n, np.arange(length) < n) for n in real_B])
  real = np.broadcast_to(real[:, :, None, :], shape)
  kept = [[np.asarray(o, np.float32) != 0 for o in out] for out, _ in runs]
  kept_backward = [[np.swapaxes(np.asarray(d, np.float32), 1, 3) != 0 for d in d_v]
                   for _, d_v in runs]
  share = lambda a: float(np.mean(a[real]))  # noqa: E731
  return dict(
      backward_agreement=min(share(f == b) for fs, bs in zip(kept, kept_backward, strict=True)
                             for f, b in zip(fs, bs, strict=True)),
      kept=share(kept[0][0]),
      run_change=share(kept[0][0] != kept[1][0]),
      layer_change=share(kept[0][0] != kept[0][1]),
      rate=rate)


def judge(measured: dict) -> str:
  """'' where cuDNN's dropout trains as the module docstring says, else what fails."""
  if measured['backward_agreement'] < 0.99:
    return ("cuDNN's backward pass drops other entries than its forward pass (they agree on "
            f"{measured['backward_agreement']:.0%})")
  if abs(measured['kept'] - (1 - measured['rate'])) > 0.05:
    return (f"cuDNN keeps {measured['kept']:.0%} of the attention probabilities at dropout "
            f"rate {measured['rate']}")
  if measured['run_change'] < 0.2:
    return 'cuDNN draws the same attention-dropout mask every step'
  if measured['layer_change'] < 0.2:
    return 'cuDNN draws the same attention-dropout mask in every layer'
  return ''


@functools.cache
def check() -> str:
  """judge(measure()) on this process's GPU, once: '' where cuDNN's attention dropout trains,
  else why not (an error running the probe is a reason too)."""
  try:
    return judge(measure())
  except Exception as e:  # pylint: disable=broad-except
    return f'cuDNN attention dropout failed to run here ({type(e).__name__}: {e})'
