"""Training FLOPs and model FLOP utilisation (MFU).

FLOPs per sequence follow REFERENCES.md: weight matmuls 6*S*L*(4*d*d + 2*d*f), attention scores
and values 12*L*S*S*d, and the MLM head on the P gathered positions 6*P*(d*d + d*V) (forward
and backward; embedding lookups, norms and softmax are left out, as is customary).

Padding is not work: on unpacked data a row's padding runs through every matmul yet trains
nothing, so the loop reports beside the padded figures (every position of every row) the real
ones: tokens/s of the real tokens (the batch's input_mask, counted on device and read with the
other metrics at log steps) and MFU scaled by their share. The scaling is linear in tokens; the
attention's quadratic term makes it a slight overestimate for short rows.
"""

import math

import jax
import jax.numpy as jnp

from bertjax.training import losses

# Peak dense bf16 TFLOP/s per device (chip or GPU), matched on jax's device_kind.
PEAK_TFLOPS = (
    ('TPU v6', 918.0),
    ('TPU v5p', 459.0),
    ('TPU v5 lite', 197.0),
    ('TPU v5e', 197.0),
    ('TPU v5', 459.0),  # v5p reports itself as 'TPU v5'.
    ('TPU v4', 275.0),
    ('TPU v3', 123.0),
    ('H200', 989.0),
    ('H100', 989.0),
    ('A100', 312.0),
)


def flops_per_sequence(model_config, seq_len: int, predictions: int) -> float:
  """Training FLOPs (forward + backward) for one sequence."""
  d, f, layers = model_config.hidden_size, model_config.mlp_dim, model_config.num_layers
  return (6 * seq_len * layers * (4 * d * d + 2 * d * f) + 12 * layers * seq_len * seq_len * d
          + 6 * predictions * (d * d + d * model_config.vocab_size))


def step_cost(model_config, batch) -> tuple[float, float]:
  """(padded tokens, training FLOPs) of one step on `batch`, read from its shapes alone (no
  device read, no wait): every row at its cut length ([B, L], or [B, C, L] choices), and the MLM
  head at the gathered positions of a batch that has them. Summed per step by the progress line,
  so that a window of steps of several lengths (two-phase pre-training; fine-tuning's batches
  cut to their longest row) reports each step's own work."""
  *rows, length = batch['input_ids'].shape
  positions = batch.get('masked_lm_positions')
  predictions = 0 if positions is None else positions.shape[-1]
  count = math.prod(rows)
  return count * length, count * flops_per_sequence(model_config, length, predictions)


def peak_flops_per_device(override_tflops: float = 0.0, device=None) -> float | None:
  """Peak FLOP/s of one device: the override, else looked up by kind; None if unknown (CPU)."""
  if override_tflops:
    return override_tflops * 1e12
  kind = (device or jax.devices()[0]).device_kind
  for prefix, tflops in PEAK_TFLOPS:
    if prefix.lower() in kind.lower():
      return tflops * 1e12
  return None


def mfu(per_second: float, flops_each: float, num_devices: int,
        peak_per_device: float | None) -> float | None:
  """Achieved / peak FLOP/s over all devices (`per_second` sequences or steps of `flops_each`
  FLOPs), or None when the peak is unknown."""
  if not peak_per_device:
    return None
  return per_second * flops_each / (num_devices * peak_per_device)


def real_tokens(batch) -> dict:
  """{'real_tokens': (count, 1)}: the global batch's real tokens as a metric pair (mean over
  steps = real tokens per step), computed inside the train step (no dispatch of its own); {}
  for a batch without input_mask."""
  if 'input_mask' not in batch:
    return {}
  # Nonzero, not the sum: packed rows hold instance ids 1, 2, ... (records/packing.py).
  real = batch['input_mask'] != 0
  if 'example_weight' in batch:  # Fine-tuning: rows (or instances) at weight 0 are filler
    real &= losses.token_example_weight(batch) > 0  # (packed rows rounded up): no work.
  # Counted exactly in int32, then float32 so that the host's sum over many steps cannot
  # overflow.
  count = jnp.sum(real, dtype=jnp.int32).astype(jnp.float32)
  return {'real_tokens': (count, jnp.float32(1))}
