"""Pre-training and fine-tuning losses and metrics as (sum, weight) pairs.

Averages are taken only after summing both parts over devices and hosts, so a metric is exact
whatever the sharding or the number of padded examples. Shape legend as in model.py.
"""

import functools
import operator

import jax
import jax.numpy as jnp
import optax


def token_example_weight(batch):
  """Each token's example weight, broadcastable to input_mask: its row's ([B] example_weight,
  [B, 1] or [B, 1, 1] for [B, C, L] choices) or, in packed rows, its instance's ([B, N], read at
  the token's instance id: [B, L], padding 0)."""
  weight = batch['example_weight'].astype(jnp.float32)
  ids = batch['input_mask']
  if 'instance_starts' not in batch:
    return weight.reshape(weight.shape + (1,) * (ids.ndim - 1))
  per_token = jnp.take_along_axis(weight, jnp.maximum(ids - 1, 0), axis=1)
  return jnp.where(ids > 0, per_token, 0.0)


def masked_lm(logits_BxPxV, masked_lm_ids_BxP, masked_lm_weights_BxP):
  """MLM cross-entropy and accuracy over the gathered positions, weighted by masked_lm_weights."""
  weights_BxP = masked_lm_weights_BxP.astype(jnp.float32)
  loss_BxP = optax.softmax_cross_entropy_with_integer_labels(
      logits_BxPxV.astype(jnp.float32), masked_lm_ids_BxP)
  correct_BxP = is_argmax(logits_BxPxV, masked_lm_ids_BxP).astype(jnp.float32)
  weight = jnp.sum(weights_BxP)
  return {'mlm_loss': (jnp.sum(loss_BxP * weights_BxP), weight),
          'mlm_accuracy': (jnp.sum(correct_BxP * weights_BxP), weight)}


def is_argmax(logits_BxPxV, ids_BxP):
  """argmax(logits, -1) == ids (first maximum wins; False where the row has a NaN).

  Written with a max and an any() instead of argmax's (value, index) reduction, which XLA:CPU
  does not vectorise (~10% of a small model's training step at vocab 30522); the max is shared
  with the cross-entropy's.
  """
  vocab = logits_BxPxV.shape[-1]
  max_BxPx1 = jnp.max(logits_BxPxV, -1, keepdims=True)
  label_BxPx1 = jnp.take_along_axis(logits_BxPxV, ids_BxP[..., None], -1, mode='clip')
  index_1x1xV = jnp.arange(vocab, dtype=ids_BxP.dtype)[None, None]
  earlier_max_BxP = jnp.any(
      (logits_BxPxV == max_BxPx1) & (index_1x1xV < ids_BxP[..., None]), axis=-1)
  return ((label_BxPx1[..., 0] == max_BxPx1[..., 0]) & ~earlier_max_BxP
          & (ids_BxP >= 0) & (ids_BxP < vocab))


def next_sentence(logits_Bx2, next_sentence_labels_B, example_weight_B=None):
  """NSP cross-entropy and accuracy; example_weight (0 for padding examples) defaults to 1.
  Packed rows: logits [B, N, 2], labels and weights [B, N] (0 = no instance there)."""
  labels_B = next_sentence_labels_B.reshape(logits_Bx2.shape[:-1])
  weights_B = (jnp.ones(labels_B.shape, jnp.float32) if example_weight_B is None
               else example_weight_B)
  metrics = classification(logits_Bx2, labels_B, weights_B)
  return {'nsp_loss': metrics['loss'], 'nsp_accuracy': metrics['accuracy']}


def pretraining(mlm_logits_BxPxV, nsp_logits_Bx2, batch, normalizers=None):
  """BERT's objective, MLM loss + NSP loss; returns (loss, metrics).

  Each loss is its sum divided by `normalizers['mlm' | 'nsp']`: the whole batch's weights under
  gradient accumulation (bertjax/pretrain.py), by default this batch's own.
  """
  metrics = masked_lm(mlm_logits_BxPxV, batch['masked_lm_ids'], batch['masked_lm_weights'])
  if 'next_sentence_labels' in batch:  # Absent when pre-training without NSP (RoBERTa-style).
    weights = batch.get('next_sentence_weights', batch.get('example_weight'))
    metrics.update(next_sentence(nsp_logits_Bx2, batch['next_sentence_labels'], weights))
  loss = 0.0
  for name in ('mlm', 'nsp'):
    if f'{name}_loss' in metrics:
      total, weight = metrics[f'{name}_loss']
      loss = loss + total / jnp.maximum(weight if normalizers is None else normalizers[name],
                                        1e-8)
  return loss, metrics


def classification(logits_BxC, labels_B, weights_B):
  """Softmax cross-entropy and accuracy, weighted (0 = padding). Any leading shape: [B, C] per
  example, [B, L, C] per token (tagging: the first piece of each word weighs 1)."""
  weights_B = weights_B.astype(jnp.float32)
  loss_B = optax.softmax_cross_entropy_with_integer_labels(logits_BxC.astype(jnp.float32),
                                                           labels_B)
  correct_B = (jnp.argmax(logits_BxC, -1) == labels_B).astype(jnp.float32)
  weight = jnp.sum(weights_B)
  return {'loss': (jnp.sum(loss_B * weights_B), weight),
          'accuracy': (jnp.sum(correct_B * weights_B), weight)}


def regression(predictions_B, labels_B, weights_B):
  """Mean squared error (STS-B), weighted by weights_B."""
  weights_B = weights_B.astype(jnp.float32)
  error_B = jnp.square(predictions_B.astype(jnp.float32) - labels_B.astype(jnp.float32))
  return {'loss': (jnp.sum(error_B * weights_B), jnp.sum(weights_B))}


def span(logits_BxLx2, start_B, end_B, weights_B):
  """SQuAD's loss: the mean of the start and end cross-entropies over sequence positions."""
  weights_B = weights_B.astype(jnp.float32)
  logits_BxLx2 = logits_BxLx2.astype(jnp.float32)
  start_loss_B = optax.softmax_cross_entropy_with_integer_labels(logits_BxLx2[..., 0], start_B)
  end_loss_B = optax.softmax_cross_entropy_with_integer_labels(logits_BxLx2[..., 1], end_B)
  exact_B = ((jnp.argmax(logits_BxLx2[..., 0], -1) == start_B)
             & (jnp.argmax(logits_BxLx2[..., 1], -1) == end_B)).astype(jnp.float32)
  weight = jnp.sum(weights_B)
  return {'loss': (jnp.sum(0.5 * (start_loss_B + end_loss_B) * weights_B), weight),
          'span_accuracy': (jnp.sum(exact_B * weights_B), weight)}


def mean(pair):
  """sum / weight, 0 where nothing was counted."""
  total, weight = pair
  return total / jnp.maximum(weight, 1e-8)


def merge(a, b):
  """Adds two metric dicts of (sum, weight) pairs: on device (micro-batches) or on the host."""
  return jax.tree.map(operator.add, a, b)


def host_means(metrics_list) -> dict:
  """{name: sum / weight} of device metrics summed over steps or batches, as host floats."""
  summed = functools.reduce(merge, jax.device_get(list(metrics_list)))
  return {k: mean_of(*entry) for k, entry in summed.items()}


def mean_of(total, weight) -> float:
  """A metric's host value from its (sum, weight) entry."""
  return float(total) / max(float(weight), 1e-8)
