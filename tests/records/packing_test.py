"""Packed rows give the numbers of the same instances one per row: hidden states at every real
token, MLM logits at every masked position, NSP logits per instance, and the losses (fp32).

The model runs jitted, as the training and eval steps run it: op by op, its forward and backward
passes compiled each primitive on its own (75 s of CPU time on 2 cores, against ~15 s).
"""

import flax.linen as nn
import jax
import numpy as np
import pytest

from bertjax import pretrain
from bertjax.model import encoder
from bertjax.model import encoder_config
from bertjax.model import heads
from bertjax.records import packing
from bertjax.training import losses

LENGTHS = (10, 20, 7, 25, 14, 31, 5, 18)  # Real tokens per instance ([CLS] ... [SEP]).
SEQ, PREDICTIONS = 32, 5  # Unpacked rows.
PACKED_SEQ, PACKED_PREDICTIONS, MAX_INSTANCES = 64, 16, 4


def instances(nsp=True):
  rng = np.random.default_rng(0)
  out = []
  for length in LENGTHS:
    ids = np.zeros(SEQ, np.int32)
    ids[:length] = rng.integers(5, 100, length)
    ids[0] = 1  # [CLS]
    segments = np.zeros(SEQ, np.int32)
    segments[length // 2:length] = 1
    count = min(PREDICTIONS, max(1, length // 5))
    positions = np.zeros(PREDICTIONS, np.int32)
    positions[:count] = np.sort(rng.choice(np.arange(1, length), count, replace=False))
    weights = np.zeros(PREDICTIONS, np.float32)
    weights[:count] = 1.0
    instance = {'input_ids': ids, 'input_mask': (np.arange(SEQ) < length).astype(np.int32),
                'segment_ids': segments, 'masked_lm_positions': positions,
                'masked_lm_ids': np.where(weights > 0, rng.integers(5, 100, PREDICTIONS), 0).astype(
                    np.int32),
                'masked_lm_weights': weights}
    if nsp:
      instance['next_sentence_labels'] = np.array([rng.integers(0, 2)], np.int32)
    out.append(instance)
  return out


def padding(rows):
  return float(np.mean(np.stack([r['input_mask'] for r in rows]) == 0))


def stack(rows):
  return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def where_packed(unpacked):
  """For each instance in input order: (row, slot, start, first prediction index)."""
  lengths = [packing.instance_length(x) for x in unpacked]
  predictions = [int(x['masked_lm_weights'].sum()) for x in unpacked]
  places = {}
  for r, row in enumerate(packing.first_fit(lengths, predictions, PACKED_SEQ,
                                            PACKED_PREDICTIONS, MAX_INSTANCES)):
    start = pred = 0
    for slot, i in enumerate(row):
      places[i] = (r, slot, start, pred)
      start, pred = start + lengths[i], pred + predictions[i]
  return [places[i] for i in range(len(unpacked))]


def model_inputs(batch):
  """The features the model reads (one compiled shape whatever else the batch holds)."""
  names = ('input_ids', 'input_mask', 'segment_ids', 'masked_lm_positions', 'instance_starts')
  return {k: batch[k] for k in names if k in batch}


@pytest.fixture(scope='module')
def model():
  """(BertForPreTraining, its params, jitted functions: 'encoder' and 'logits' of (params,
  model_inputs(batch)), packed where the batch has instance_starts; 'loss' of (MLM logits, NSP
  logits, batch): losses.pretraining with the batch's pretrain.normalizers)."""
  cfg = encoder_config.default_config(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                                      mlp_dim=64, max_position_embeddings=64)
  module = heads.BertForPreTraining(cfg)
  params = nn.unbox(jax.jit(module.init)(jax.random.key(0),
                                         **heads.dummy_batch(1, SEQ, PREDICTIONS))['params'])
  bert = encoder.BertEncoder(cfg)
  run = {
      # (hidden states, pooled) of the encoder alone: params['bert'].
      'encoder': jax.jit(lambda p, b: bert.apply(
          {'params': p}, b['input_ids'], b['input_mask'], b['segment_ids'],
          instance_starts=b.get('instance_starts'))),
      # (MLM logits, NSP logits): params.
      'logits': jax.jit(lambda p, b: module.apply(
          {'params': p}, b['input_ids'], b['input_mask'], b['segment_ids'],
          b['masked_lm_positions'], instance_starts=b.get('instance_starts'))),
      # (loss, metrics).
      'loss': jax.jit(lambda mlm, nsp, b: losses.pretraining(mlm, nsp, b,
                                                             pretrain.normalizers(b))),
  }
  return module, params, run


def test_first_fit_places_every_instance_once_within_the_limits():
  lengths = [30, 5, 60, 2, 33, 64, 1, 1, 1, 1, 1]
  rows = packing.first_fit(lengths, [1] * len(lengths), 64, 3, 4)
  assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
  for row in rows:
    assert sum(lengths[i] for i in row) <= 64 and len(row) <= 3 and row == sorted(row)
  with pytest.raises(ValueError, match='instance 0 has 65 tokens'):
    packing.first_fit([65], [1], 64, 3, 4)


def test_packed_rows_equal_the_instances_one_per_row(model):
  _, params, run = model
  unpacked = instances()
  rows = packing.pack(unpacked, PACKED_SEQ, PACKED_PREDICTIONS, MAX_INSTANCES)
  assert len(rows) < len(unpacked)
  assert padding(rows) < padding(unpacked)
  places = where_packed(unpacked)
  assert len(places) == len(unpacked)
  flat, packed = stack(unpacked), stack(rows)

  # Hidden states at every real token (as numpy: each slice of a jax array compiles an op).
  x_flat, pooled_flat = jax.device_get(run['encoder'](params['bert'], model_inputs(flat)))
  x_packed, pooled_packed = jax.device_get(run['encoder'](params['bert'], model_inputs(packed)))
  for i, (r, slot, start, _) in enumerate(places):
    length = LENGTHS[i]
    np.testing.assert_allclose(x_packed[r, start:start + length], x_flat[i, :length],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled_packed[r, slot], pooled_flat[i], atol=1e-5, rtol=0)

  # MLM and NSP logits, then the losses.
  mlm_flat, nsp_flat = jax.device_get(run['logits'](params, model_inputs(flat)))
  mlm_packed, nsp_packed = jax.device_get(run['logits'](params, model_inputs(packed)))
  assert nsp_packed.shape == (len(rows), MAX_INSTANCES, 2)
  for i, (r, slot, _, pred) in enumerate(places):
    count = int(unpacked[i]['masked_lm_weights'].sum())
    np.testing.assert_allclose(mlm_packed[r, pred:pred + count], mlm_flat[i, :count],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(nsp_packed[r, slot], nsp_flat[i], atol=1e-5, rtol=0)
  loss_flat, metrics_flat = run['loss'](mlm_flat, nsp_flat, flat)
  loss_packed, metrics_packed = run['loss'](mlm_packed, nsp_packed, packed)
  np.testing.assert_allclose(loss_packed, loss_flat, rtol=1e-6)
  for name in ('mlm_loss', 'nsp_loss', 'mlm_accuracy', 'nsp_accuracy'):
    np.testing.assert_allclose(metrics_packed[name], metrics_flat[name], rtol=1e-6)


def test_the_training_loss_and_its_gradient_match(model):
  """pretrain.loss (what the step differentiates) on packed and unpacked batches."""
  module, params, _ = model
  unpacked = instances()
  flat = stack(unpacked)
  packed = stack(packing.pack(unpacked, PACKED_SEQ, PACKED_PREDICTIONS, MAX_INSTANCES))

  @jax.jit  # As the training step differentiates it.
  def value_and_grad(p, batch):
    def f(p):
      return pretrain.loss(module, p, batch, jax.random.key(0), pretrain.normalizers(batch),
                           deterministic=True)[0]
    return jax.value_and_grad(f)(p)
  (loss_flat, grads_flat), (loss_packed, grads_packed) = (value_and_grad(params, b)
                                                          for b in (flat, packed))
  np.testing.assert_allclose(loss_packed, loss_flat, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-4),
               grads_packed, grads_flat)


def test_mlm_only_rows_pack_without_nsp_features(model):
  _, params, run = model
  rows = packing.pack(instances(nsp=False), PACKED_SEQ, PACKED_PREDICTIONS, MAX_INSTANCES,
                      nsp=False)
  assert 'next_sentence_labels' not in rows[0]
  batch = stack(rows)
  loss, metrics = run['loss'](*run['logits'](params, model_inputs(batch)), batch)
  assert set(metrics) == {'mlm_loss', 'mlm_accuracy'} and np.isfinite(loss)
