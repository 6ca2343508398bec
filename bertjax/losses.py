"""Pre-training losses and metrics as (sum, weight) pairs.

Averages are taken only after summing both parts over devices and hosts, so a metric is exact
whatever the sharding or the number of padded examples. Shape legend as in model.py.
"""

import jax
import jax.numpy as jnp
import optax


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
  """NSP cross-entropy and accuracy; example_weight (0 for padding examples) defaults to 1."""
  labels_B = next_sentence_labels_B.reshape(-1)
  weights_B = (jnp.ones(labels_B.shape, jnp.float32) if example_weight_B is None
               else example_weight_B.astype(jnp.float32))
  loss_B = optax.softmax_cross_entropy_with_integer_labels(logits_Bx2.astype(jnp.float32),
                                                           labels_B)
  correct_B = (jnp.argmax(logits_Bx2, -1) == labels_B).astype(jnp.float32)
  weight = jnp.sum(weights_B)
  return {'nsp_loss': (jnp.sum(loss_B * weights_B), weight),
          'nsp_accuracy': (jnp.sum(correct_B * weights_B), weight)}


def pretraining(mlm_logits_BxPxV, nsp_logits_Bx2, batch):
  """BERT's objective: mean MLM loss + mean NSP loss; returns (loss, metrics)."""
  metrics = masked_lm(mlm_logits_BxPxV, batch['masked_lm_ids'], batch['masked_lm_weights'])
  loss = mean(metrics['mlm_loss'])
  if 'next_sentence_labels' in batch:  # Absent when pre-training without NSP (RoBERTa-style).
    metrics.update(next_sentence(nsp_logits_Bx2, batch['next_sentence_labels'],
                                 batch.get('example_weight')))
    loss = loss + mean(metrics['nsp_loss'])
  return loss, metrics


def mean(pair):
  """sum / weight, 0 where nothing was counted."""
  total, weight = pair
  return total / jnp.maximum(weight, 1e-8)


def merge(a, b):
  """Adds two metric dicts of (sum, weight) pairs (e.g. over micro-batches or eval batches)."""
  return jax.tree.map(jnp.add, a, b)
