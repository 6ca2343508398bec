"""The kind table: every kind builds its model, runs its loss and decodes its outputs."""

import jax
import numpy as np
import pytest

from bertjax.finetune import kinds
from bertjax.training import losses
from configs import common
from configs import finetune as finetune_config

SEQ, BATCH, LABELS = 8, 4, 3


def _batch(kind: str, rng) -> dict:
  # Multiple choice: LABELS choices per question, each its own [CLS] context [SEP] choice row.
  shape = (BATCH, LABELS, SEQ) if kind == 'multiple_choice' else (BATCH, SEQ)
  batch = {'input_ids': rng.integers(1, 100, shape).astype(np.int32),
           'input_mask': np.ones(shape, np.int32),
           'segment_ids': np.zeros(shape, np.int32),
           'example_weight': np.array([1, 1, 1, 0], np.float32)}  # The last row is padding.
  targets = {
      'classification': {'label': rng.integers(0, LABELS, BATCH).astype(np.int32)},
      'regression': {'label': rng.random(BATCH).astype(np.float32)},
      'multiple_choice': {'label': rng.integers(0, LABELS, BATCH).astype(np.int32)},
      'span': {'start_position': np.array([1, 2, 3, 0], np.int32),
               'end_position': np.array([2, 2, 5, 0], np.int32)},
      'tagging': {'label_ids': rng.integers(0, LABELS, (BATCH, SEQ)).astype(np.int32),
                  'label_weights': (rng.random((BATCH, SEQ)) < 0.5).astype(np.float32)},
  }[kind]
  assert set(kinds.batch_keys(kind)) == set(batch) - {'example_weight'} | set(targets)
  return batch | targets


@pytest.mark.parametrize('kind', sorted(kinds.KINDS))
def test_every_kind_trains_and_decodes(kind):
  config = common.model_config('tiny', vocab_size=128)
  objective = kinds.objective(kind, config, LABELS, 'cls', SEQ)
  params = objective.model.init(jax.random.key(0), **objective.init_inputs)['params']
  batch = _batch(kind, np.random.default_rng(0))
  normalizers = objective.normalizers(batch)
  loss, metrics = objective.loss(objective.model, params, batch, jax.random.key(1),
                                 normalizers, deterministic=True)
  assert next(iter(metrics)) == 'loss'
  # The loss is the summed loss over the whole batch's weight: padding rows count for nothing.
  np.testing.assert_allclose(float(loss), float(losses.mean(metrics['loss'])), rtol=1e-6)
  expected_weight = (3.0 if kind != 'tagging'
                     else float(np.sum(batch['label_weights'][:3])))
  np.testing.assert_allclose(float(normalizers['loss']), expected_weight)
  outputs, _ = kinds.predict_step(params, batch, model=objective.model, kind=kind)
  decoded = kinds.get(kind).decode(np.asarray(outputs))
  assert decoded.shape[0] == BATCH
  if kind == 'multiple_choice':  # One score per choice; a choice's score ignores the others.
    assert outputs.shape == (BATCH, LABELS)
    alone = kinds.predict_step(params, {k: v[:, :1] if v.ndim == 3 else v
                                        for k, v in batch.items()},
                               model=objective.model, kind=kind)[0]
    np.testing.assert_allclose(np.asarray(alone)[:, 0], np.asarray(outputs)[:, 0], atol=1e-5)
  grads = jax.grad(lambda p: objective.loss(objective.model, p, batch, jax.random.key(1),
                                            normalizers, deterministic=False)[0])(params)
  assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def test_unknown_kind_lists_the_valid_ones():
  with pytest.raises(ValueError, match='valid: classification, regression, span, tagging, '
                                       'multiple_choice'):
    kinds.get('ranking')


def test_every_task_preset_names_no_kind_of_its_own():
  """The kind lives in the task's reader only: configs carry no copy that could disagree."""
  config = finetune_config.get_config('task=stsb')
  assert 'kind' not in config
  assert all(len(preset) == 4 for preset in finetune_config.TASKS.values())


def test_old_init_argument_still_works():
  config = finetune_config.get_config('task=sst2,init=/ckpt/bert')
  assert config.init_from == '/ckpt/bert'
