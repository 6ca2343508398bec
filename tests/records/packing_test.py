"""Packed rows give the numbers of the same instances one per row: hidden states at every real
token, MLM logits at every masked position, NSP logits per instance, and the losses (fp32)."""

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


@pytest.fixture(scope='module')
def model():
  cfg = encoder_config.default_config(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                                      mlp_dim=64, max_position_embeddings=64)
  module = heads.BertForPreTraining(cfg)
  params = nn.unbox(module.init(jax.random.key(0), **heads.dummy_batch(1, SEQ, PREDICTIONS))
                    ['params'])
  return cfg, module, params


def test_first_fit_places_every_instance_once_within_the_limits():
  lengths = [30, 5, 60, 2, 33, 64, 1, 1, 1, 1, 1]
  rows = packing.first_fit(lengths, [1] * len(lengths), 64, 3, 4)
  assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
  for row in rows:
    assert sum(lengths[i] for i in row) <= 64 and len(row) <= 3 and row == sorted(row)
  with pytest.raises(ValueError, match='instance 0 has 65 tokens'):
    packing.first_fit([65], [1], 64, 3, 4)


def test_packed_rows_equal_the_instances_one_per_row(model):
  cfg, module, params = model
  unpacked = instances()
  rows = packing.pack(unpacked, PACKED_SEQ, PACKED_PREDICTIONS, MAX_INSTANCES)
  assert len(rows) < len(unpacked)
  assert padding(rows) < padding(unpacked)
  places = where_packed(unpacked)
  assert len(places) == len(unpacked)
  flat, packed = stack(unpacked), stack(rows)

  # Hidden states at every real token.
  bert = encoder.BertEncoder(cfg)
  enc = {'params': params['bert']}
  x_flat, pooled_flat = bert.apply(enc, flat['input_ids'], flat['input_mask'],
                                   flat['segment_ids'])
  x_packed, pooled_packed = bert.apply(enc, packed['input_ids'], packed['input_mask'],
                                       packed['segment_ids'],
                                       instance_starts=packed['instance_starts'])
  for i, (r, slot, start, _) in enumerate(places):
    length = LENGTHS[i]
    np.testing.assert_allclose(x_packed[r, start:start + length], x_flat[i, :length],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled_packed[r, slot], pooled_flat[i], atol=1e-5, rtol=0)

  # MLM and NSP logits, then the losses.
  mlm_flat, nsp_flat = module.apply({'params': params}, flat['input_ids'], flat['input_mask'],
                                    flat['segment_ids'], flat['masked_lm_positions'])
  mlm_packed, nsp_packed = module.apply(
      {'params': params}, packed['input_ids'], packed['input_mask'], packed['segment_ids'],
      packed['masked_lm_positions'], instance_starts=packed['instance_starts'])
  assert nsp_packed.shape == (len(rows), MAX_INSTANCES, 2)
  for i, (r, slot, _, pred) in enumerate(places):
    count = int(unpacked[i]['masked_lm_weights'].sum())
    np.testing.assert_allclose(mlm_packed[r, pred:pred + count], mlm_flat[i, :count],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(nsp_packed[r, slot], nsp_flat[i], atol=1e-5, rtol=0)
  loss_flat, metrics_flat = losses.pretraining(mlm_flat, nsp_flat, flat,
                                               pretrain.normalizers(flat))
  loss_packed, metrics_packed = losses.pretraining(mlm_packed, nsp_packed, packed,
                                                   pretrain.normalizers(packed))
  np.testing.assert_allclose(loss_packed, loss_flat, rtol=1e-6)
  for name in ('mlm_loss', 'nsp_loss', 'mlm_accuracy', 'nsp_accuracy'):
    np.testing.assert_allclose(metrics_packed[name], metrics_flat[name], rtol=1e-6)


def test_the_training_loss_and_its_gradient_match(model):
  """pretrain.loss (what the step differentiates) on packed and unpacked batches."""
  _, module, params = model
  unpacked = instances()
  flat = stack(unpacked)
  packed = stack(packing.pack(unpacked, PACKED_SEQ, PACKED_PREDICTIONS, MAX_INSTANCES))

  def value_and_grad(batch):
    def f(p):
      return pretrain.loss(module, p, batch, jax.random.key(0), pretrain.normalizers(batch),
                           deterministic=True)[0]
    return jax.value_and_grad(f)(params)
  (loss_flat, grads_flat), (loss_packed, grads_packed) = (value_and_grad(b)
                                                          for b in (flat, packed))
  np.testing.assert_allclose(loss_packed, loss_flat, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-4),
               grads_packed, grads_flat)


def test_mlm_only_rows_pack_without_nsp_features(model):
  cfg, _, params = model
  rows = packing.pack(instances(nsp=False), PACKED_SEQ, PACKED_PREDICTIONS, MAX_INSTANCES,
                      nsp=False)
  assert 'next_sentence_labels' not in rows[0]
  batch = stack(rows)
  loss, metrics = losses.pretraining(
      *heads.BertForPreTraining(cfg).apply(
          {'params': params}, batch['input_ids'], batch['input_mask'], batch['segment_ids'],
          batch['masked_lm_positions'], instance_starts=batch['instance_starts']),
      batch, pretrain.normalizers(batch))
  assert set(metrics) == {'mlm_loss', 'mlm_accuracy'} and np.isfinite(loss)
