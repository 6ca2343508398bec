"""The MLM + NSP pre-training objective and its eval step: what the train step needs, no TensorFlow.

bertjax/pretrain.py (the job: data files, tf.data, eval sets) builds on it; what compiles and
times the step (bench/train_bench.py) needs only this, so a machine without TensorFlow can
(tests/no_tensorflow_step_test.py holds the step's modules to that).
"""

import jax.numpy as jnp

from bertjax import phase_plan
from bertjax.model import heads
from bertjax.training import losses
from bertjax.training import train_state

BEST_METRIC = phase_plan.BEST_METRIC


def eval_metric_names(config) -> tuple:
  """The eval metrics a run of `config` reports, in the order a user would rank by."""
  return phase_plan.eval_metric_names(config.model.nsp)


def loss(model, params, batch, rng, normalizers, *, deterministic):
  """MLM + NSP, each divided by the whole batch's weights (exact under accumulation)."""
  mlm_logits_BxPxV, nsp_logits_Bx2 = model.apply(
      {'params': params}, batch['input_ids'], batch['input_mask'], batch['segment_ids'],
      batch['masked_lm_positions'], deterministic=deterministic, rngs={'dropout': rng},
      instance_starts=batch.get('instance_starts'))  # Packed rows only.
  return losses.pretraining(mlm_logits_BxPxV, nsp_logits_Bx2, batch, normalizers)


def normalizers(batch):
  """What each pre-training loss is divided by: the whole (not micro-) batch's weights."""
  nsp = (jnp.sum(batch['next_sentence_weights']) if 'next_sentence_weights' in batch
         else jnp.float32(batch['input_ids'].shape[0]))  # Packed: instances, not rows.
  return {'mlm': jnp.maximum(jnp.sum(batch['masked_lm_weights']), 1e-8),
          'nsp': jnp.maximum(nsp, 1e-8)}


def objective(config) -> train_state.Objective:
  """BertForPreTraining with BERT's loss, initialised on a zero batch of the data's shapes."""
  return train_state.Objective(
      model=heads.BertForPreTraining(config.model), loss=loss, normalizers=normalizers,
      init_inputs=heads.dummy_batch(1, config.data.max_seq_length,
                                    config.data.max_predictions_per_seq))


def eval_step(params, batch, *, model):
  """Eval metrics of one batch as (sum, weight); padding examples weigh 0."""
  mlm_logits_BxPxV, nsp_logits_Bx2 = model.apply(
      {'params': params}, batch['input_ids'], batch['input_mask'], batch['segment_ids'],
      batch['masked_lm_positions'], deterministic=True,
      instance_starts=batch.get('instance_starts'))
  _, metrics = losses.pretraining(mlm_logits_BxPxV, nsp_logits_Bx2, batch)
  return metrics
