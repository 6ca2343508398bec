"""Fine-tuning's side of the kind table (training/kinds.py): a task kind's batches and objective.

A task (tasks/registry.py) names its kind; what the kind is (head, loss, targets, predictions,
export formats) is its entry in training/kinds.py, looked up here; this module holds only what
fine-tuning does with it. Shape legend as in model/encoder.py.
"""

import functools

import jax.numpy as jnp
import numpy as np

from bertjax.model import encoder
from bertjax.training import kinds as kind_table
from bertjax.training import train_state

MODEL_INPUTS = ('input_ids', 'input_mask', 'segment_ids')
# The kinds fine-tuning trains: the table's entries with a task head, loss and metrics.
KINDS = {name: kind for name, kind in kind_table.KINDS.items() if kind.task}


def get(name: str) -> kind_table.Kind:
  if name not in KINDS:
    raise ValueError(f'unknown task kind {name!r}; valid: {", ".join(KINDS)}.')
  return KINDS[name]


def batch_keys(name: str) -> tuple[str, ...]:
  """The feature keys a batch of this kind carries to the device."""
  return MODEL_INPUTS + get(name).targets


def trim(name: str, host: dict, length: int) -> dict:
  """A host batch cut to its first `length` tokens: the model inputs (last axis: [B, L], or
  [B, C, L] for multiple choice) and the targets with a token axis (tagging's, axis 1)."""
  token_targets = get(name).token_targets
  return {k: v[..., :length] if k in MODEL_INPUTS else
          v[:, :length] if k in token_targets else v for k, v in host.items()}


def untrim(name: str, outputs: np.ndarray, max_seq_length: int) -> np.ndarray:
  """A per-token kind's outputs [N, length, ...] padded back to max_seq_length with zeros
  (positions past every row's last token: no prediction reads them)."""
  if not get(name).per_token or outputs.shape[1] == max_seq_length:
    return outputs
  pad = [(0, 0), (0, max_seq_length - outputs.shape[1])] + [(0, 0)] * (outputs.ndim - 2)
  return np.pad(outputs, pad)


def _apply(model, params, batch, **kwargs):
  """The model on a batch: [B, ...] outputs, or [B, N, ...] for packed rows (instance_starts)."""
  if 'instance_starts' in batch:
    kwargs['instance_starts'] = batch['instance_starts']
  return model.apply({'params': params}, *(batch[k] for k in MODEL_INPUTS), **kwargs)


def _loss(kind: kind_table.Kind, model, params, batch, rng, normalizers, *, deterministic):
  """The kind's summed loss divided by the whole batch's weight (exact under accumulation)."""
  outputs = _apply(model, params, batch, deterministic=deterministic, rngs={'dropout': rng})
  metrics = kind.metrics(outputs, batch)
  return metrics['loss'][0] / normalizers['loss'], metrics


def _normalizers(kind: kind_table.Kind, batch):
  return {'loss': jnp.maximum(kind.loss_weight(batch).astype(jnp.float32), 1e-8)}


def objective(name: str, config: encoder.Config, num_labels: int, pooling: str,
              max_seq_length: int) -> train_state.Objective:
  """The model and loss the training loop runs for a task of kind `name`."""
  kind = get(name)
  shape = (1, num_labels, max_seq_length) if kind.choices else (1, max_seq_length)
  return train_state.Objective(
      model=kind.head(config, num_labels, pooling),
      loss=functools.partial(_loss, kind),
      normalizers=functools.partial(_normalizers, kind),
      init_inputs={k: np.zeros(shape, np.int32) for k in MODEL_INPUTS})


def predict_step(params, batch, *, model, kind: str):
  """(outputs for every row, eval loss metrics) of one batch; padding rows weigh 0."""
  outputs = _apply(model, params, batch, deterministic=True)
  return outputs, get(kind).metrics(outputs, batch)
