"""The heads: the tied logits' hand-written gradients; packed sequence classification."""

import flax.linen as nn
import jax
import jax.numpy as jnp
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax.model import encoder_config
from bertjax.model import heads


def test_tied_logits_gradients_equal_autodiff():
  """heads.tied_logits's hand-written backward must give what autodiff of the plain form gives."""
  rng = np.random.default_rng(0)
  h, emb, bias = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((6, 8), (11, 8), (11,)))
  g = jnp.asarray(rng.normal(size=(6, 11)), jnp.float32)

  def plain(h, emb, bias):
    return jnp.sum((jnp.einsum('nd,vd->nv', h, emb) + bias) * g)

  def ours(h, emb, bias):
    return jnp.sum(heads.tied_logits(h, emb, bias) * g)

  np.testing.assert_allclose(ours(h, emb, bias), plain(h, emb, bias), rtol=1e-6)
  for got, want in zip(jax.grad(ours, (0, 1, 2))(h, emb, bias),
                       jax.grad(plain, (0, 1, 2))(h, emb, bias), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('pooling', ['cls', 'mean'])
def test_packed_sequence_classification_equals_one_per_row(pooling):
  """Examples packed into rows (instance ids, instance_starts) give each example's logits as
  one per row does (fp32), [CLS] or mean pooled: attention, positions and pooling per example."""
  cfg = encoder_config.default_config(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                                      mlp_dim=64, max_position_embeddings=32)
  model = heads.BertForSequenceClassification(cfg, 3, pooling)
  rng = np.random.default_rng(0)
  lengths = [(9, 4), (5, 2), (12, 6), (3, 1), (7, 7)]  # (tokens, first segment-1 token).
  ids = np.zeros((5, 16), np.int32)
  mask = np.zeros((5, 16), np.int32)
  segments = np.zeros((5, 16), np.int32)
  for i, (length, second) in enumerate(lengths):
    ids[i, :length] = rng.integers(3, 64, length)
    mask[i, :length] = 1
    segments[i, second:length] = 1
  params = model.init(jax.random.key(0), ids, mask, segments)['params']
  # Logits of order 1 (BERT's 0.02 init gives ~0.01), so 1e-5 is a tight tolerance.
  params = nn.unbox(params)
  params['classifier']['kernel'] = params['classifier']['kernel'] * 100
  want = model.apply({'params': params}, ids, mask, segments)
  # Rows of 24 tokens, up to 3 examples each: [0, 1, 4] (21 tokens), [2, 3] (15), [2] alone.
  places = [[0, 1, 4], [2, 3]]
  packed = {k: np.zeros((2, 24), np.int32) for k in ('ids', 'mask', 'segments')}
  starts = np.zeros((2, 3), np.int32)
  for r, row in enumerate(places):
    start = 0
    for n, i in enumerate(row):
      length = lengths[i][0]
      packed['ids'][r, start:start + length] = ids[i, :length]
      packed['segments'][r, start:start + length] = segments[i, :length]
      packed['mask'][r, start:start + length] = n + 1
      starts[r, n] = start
      start += length
  got = model.apply({'params': params}, packed['ids'], packed['mask'], packed['segments'],
                    instance_starts=starts)
  assert got.shape == (2, 3, 3)
  for r, row in enumerate(places):
    for n, i in enumerate(row):
      np.testing.assert_allclose(got[r, n], want[i], atol=1e-5, rtol=1e-5)
  # It can fail: the same rows read as one sequence each give other logits.
  whole = model.apply({'params': params}, packed['ids'], (packed['mask'] > 0).astype(np.int32),
                      packed['segments'])
  assert np.max(np.abs(whole[0] - want[0])) > 1e-3
  assert np.max(np.abs(want)) > 0.1
