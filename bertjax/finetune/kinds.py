"""The task kinds, in one table: what a kind's head, loss, targets and predictions are.

A task (tasks/registry.py) names its kind; everything that depends on the kind looks it up
here, so adding a kind is one entry. Shape legend as in model/encoder.py.
"""

import dataclasses
import functools
from typing import Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from bertjax.model import encoder
from bertjax.model import heads
from bertjax.training import losses
from bertjax.training import train_state

MODEL_INPUTS = ('input_ids', 'input_mask', 'segment_ids')


@dataclasses.dataclass(frozen=True)
class Kind:
  """head(config, num_labels, pooling) -> the encoder + head model; metrics(outputs, batch) ->
  (sum, weight) pairs with 'loss' first; targets: the batch keys the loss reads besides the
  model inputs; loss_weight(batch) -> what the summed loss is divided by; decode(outputs) ->
  per-row predictions on the host (class index, value, start/end logits, tag indices);
  per_token: whether the outputs have the token axis (axis 1), like the inputs;
  token_targets: the targets that have it too; packable: several examples can share a row
  (batches.py), because each has one output from its own [CLS] or tokens' mean, or one per
  token with targets that move with their tokens (tagging); span logits are softmaxed over
  the whole row, so SQuAD is not packable."""

  head: Callable[[encoder.Config, int, str], nn.Module]
  metrics: Callable[[jnp.ndarray, dict], dict]
  targets: tuple[str, ...]
  loss_weight: Callable[[dict], jnp.ndarray]
  decode: Callable[[np.ndarray], np.ndarray]
  per_token: bool = False
  token_targets: tuple[str, ...] = ()
  packable: bool = False


def _example_weight(batch):
  return jnp.sum(batch['example_weight'])


def _token_example_weight(batch):
  """Each token's example weight [B, L]: its row's ([B] example_weight) or, in packed rows, its
  instance's ([B, N], read at the token's instance id; padding 0)."""
  weight = batch['example_weight'].astype(jnp.float32)
  if 'instance_starts' not in batch:
    return weight[:, None]
  ids_BxL = batch['input_mask']
  per_token = jnp.take_along_axis(weight, jnp.maximum(ids_BxL - 1, 0), axis=1)
  return jnp.where(ids_BxL > 0, per_token, 0.0)


def _tag_weights(batch):
  return batch['label_weights'] * _token_example_weight(batch)


def _label_weight(batch):
  return jnp.sum(_tag_weights(batch))


KINDS = {
    'classification': Kind(
        head=heads.BertForSequenceClassification,
        metrics=lambda logits_BxC, batch: losses.classification(
            logits_BxC, batch['label'], batch['example_weight']),
        targets=('label',), loss_weight=_example_weight,
        decode=lambda logits_NxC: np.argmax(logits_NxC, -1), packable=True),
    'regression': Kind(
        head=lambda config, num_labels, pooling: heads.BertForSequenceClassification(
            config, 1, pooling),
        metrics=lambda scores_Bx1, batch: losses.regression(
            scores_Bx1[..., 0], batch['label'], batch['example_weight']),
        targets=('label',), loss_weight=_example_weight,
        decode=lambda scores_Nx1: scores_Nx1[..., 0], packable=True),
    'span': Kind(
        head=lambda config, num_labels, pooling: heads.BertForQuestionAnswering(config),
        metrics=lambda logits_BxLx2, batch: losses.span(
            logits_BxLx2, batch['start_position'], batch['end_position'],
            batch['example_weight']),
        targets=('start_position', 'end_position'), loss_weight=_example_weight,
        decode=lambda logits_NxLx2: logits_NxLx2, per_token=True),
    'tagging': Kind(
        head=lambda config, num_labels, pooling: heads.BertForTokenClassification(
            config, num_labels),
        metrics=lambda logits_BxLxC, batch: losses.classification(
            logits_BxLxC, batch['label_ids'], _tag_weights(batch)),
        targets=('label_ids', 'label_weights'), loss_weight=_label_weight,
        decode=lambda logits_NxLxC: np.argmax(logits_NxLxC, -1), per_token=True,
        token_targets=('label_ids', 'label_weights'), packable=True),
    # num_labels is the number of choices per question; inputs are [B, C, L].
    'multiple_choice': Kind(
        head=lambda config, num_labels, pooling: heads.BertForMultipleChoice(config, pooling),
        metrics=lambda logits_BxC, batch: losses.classification(
            logits_BxC, batch['label'], batch['example_weight']),
        targets=('label',), loss_weight=_example_weight,
        decode=lambda logits_NxC: np.argmax(logits_NxC, -1)),
}


def get(name: str) -> Kind:
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


def _loss(kind: Kind, model, params, batch, rng, normalizers, *, deterministic):
  """The kind's summed loss divided by the whole batch's weight (exact under accumulation)."""
  outputs = _apply(model, params, batch, deterministic=deterministic, rngs={'dropout': rng})
  metrics = kind.metrics(outputs, batch)
  return metrics['loss'][0] / normalizers['loss'], metrics


def _normalizers(kind: Kind, batch):
  return {'loss': jnp.maximum(kind.loss_weight(batch).astype(jnp.float32), 1e-8)}


def objective(name: str, config: encoder.Config, num_labels: int, pooling: str,
              max_seq_length: int) -> train_state.Objective:
  """The model and loss the training loop runs for a task of kind `name`."""
  kind = get(name)
  shape = (1, num_labels, max_seq_length) if name == 'multiple_choice' else (1, max_seq_length)
  return train_state.Objective(
      model=kind.head(config, num_labels, pooling),
      loss=functools.partial(_loss, kind),
      normalizers=functools.partial(_normalizers, kind),
      init_inputs={k: np.zeros(shape, np.int32) for k in MODEL_INPUTS})


def predict_step(params, batch, *, model, kind: str):
  """(outputs for every row, eval loss metrics) of one batch; padding rows weigh 0."""
  outputs = _apply(model, params, batch, deterministic=True)
  return outputs, get(kind).metrics(outputs, batch)
