"""The kind table: every kind builds its model, runs its loss and decodes its outputs."""

import flax.linen as nn
import jax
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax.finetune import batches
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


def test_a_renamed_argument_is_refused_with_its_new_name():
  with pytest.raises(ValueError, match="config argument 'init' was renamed 'init_from': pass "
                     'init_from=/ckpt/bert'):
    finetune_config.get_config('task=sst2,init=/ckpt/bert')


def test_packed_tagging_gives_every_token_its_logits_alone_and_the_same_loss():
  """Tagging examples packed 3 to a row (batches.pack_rows, rows rounded up to 4 with a filler)
  give every real token the logits it gets alone in a row (fp32, 1e-5), and the same loss and
  loss weight: tags move with their tokens, positions restart, filler rows weigh nothing."""
  seq = 32
  config = common.model_config('tiny', vocab_size=128)
  objective = kinds.objective('tagging', config, LABELS, 'cls', seq)
  params = objective.model.init(jax.random.key(0), **objective.init_inputs)['params']
  params = nn.unbox(params)
  # Logits of order 1 (the 0.02 init gives ~0.01), so 1e-5 is a tight tolerance.
  params['classifier']['kernel'] = params['classifier']['kernel'] * 100
  rng = np.random.default_rng(0)
  lengths = [5, 12, 7, 20, 3, 9, 16]
  n = len(lengths)
  f = {k: np.zeros((n, seq), np.int32) for k in ('input_ids', 'input_mask', 'segment_ids',
                                                  'label_ids')}
  f['label_weights'] = np.zeros((n, seq), np.float32)
  for i, length in enumerate(lengths):
    f['input_ids'][i, :length] = rng.integers(3, 128, length)
    f['input_mask'][i, :length] = 1
    f['segment_ids'][i, length // 2:length] = 1
    f['label_ids'][i, :length] = rng.integers(0, LABELS, length)
    f['label_weights'][i, 1:length - 1] = rng.random(length - 2) < 0.7  # Not [CLS], [SEP].
  examples = np.array([3, 0, 6, 2, 5, 1])
  one = {k: v[examples] for k, v in f.items()} | {'example_weight': np.ones(6, np.float32)}
  packed, slots = batches.pack_rows(f, examples, 'tagging', 3, rows_multiple=4)
  assert len(packed['input_ids']) == 4 and packed['label_ids'].shape == (4, seq)
  want = np.asarray(kinds.predict_step(params, one, model=objective.model, kind='tagging')[0])
  got = np.asarray(kinds.predict_step(params, packed, model=objective.model, kind='tagging')[0])
  spans = batches.token_spans(packed, slots, 3)
  np.testing.assert_array_equal(spans[:, 2], np.array(lengths)[examples])
  for i, (r, start, length) in enumerate(spans):
    np.testing.assert_allclose(got[r, start:start + length], want[i, :length], atol=1e-5,
                               rtol=1e-5)
    np.testing.assert_array_equal(packed['label_ids'][r, start:start + length],
                                  one['label_ids'][i, :length])
  assert np.max(np.abs(want)) > 0.1
  # Back in example order at the full length, zeros past each example's tokens.
  layout = batches.Layout('tagging', 0, 3, None)
  back = batches.example_outputs(batches.Batch({}, slots, spans), got, layout, seq)
  real = one['input_mask'][..., None] > 0
  np.testing.assert_allclose(np.where(real, back, 0), np.where(real, want, 0), atol=1e-5)
  assert not np.any(np.where(real, 0, back))
  # The same loss over the same weight.
  results = []
  for batch in (one, packed):
    normalizers = objective.normalizers(batch)
    loss, _ = objective.loss(objective.model, params, batch, jax.random.key(1), normalizers,
                             deterministic=True)
    results.append((float(loss), float(normalizers['loss'])))
  assert results[1][1] == results[0][1] == float(np.sum(one['label_weights']))
  np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
  # It can fail: the packed rows read as one sequence each give other logits.
  whole = {**packed, 'input_mask': (packed['input_mask'] > 0).astype(np.int32)}
  del whole['instance_starts']
  whole['example_weight'] = np.ones(4, np.float32)
  other = np.asarray(kinds.predict_step(params, whole, model=objective.model, kind='tagging')[0])
  r, start, length = spans[np.argmax(spans[:, 1])]
  assert np.max(np.abs(other[r, start:start + length] - want[np.argmax(spans[:, 1]), :length])
                ) > 1e-3
