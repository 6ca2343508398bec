"""Losses as (sum, weight) pairs: weighted correctly and exact when merged across shards."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.training import losses


def test_masked_lm_ignores_zero_weight_positions():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
  ids = np.array([[1, 2, 3], [4, 5, 0]])
  weights = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], np.float32)
  metrics = losses.masked_lm(jnp.array(logits), jnp.array(ids), jnp.array(weights))
  logp = jax.nn.log_softmax(logits)
  nll = -np.take_along_axis(np.asarray(logp), ids[..., None], -1)[..., 0]
  assert float(losses.mean(metrics['mlm_loss'])) == pytest.approx(nll[weights > 0].mean(),
                                                                    rel=1e-6)
  assert float(metrics['mlm_loss'][1]) == 5.0
  # Changing the padded position's logits changes nothing.
  logits[1, 2] += 100
  again = losses.masked_lm(jnp.array(logits), jnp.array(ids), jnp.array(weights))
  assert float(again['mlm_loss'][0]) == pytest.approx(float(metrics['mlm_loss'][0]), rel=1e-6)


def test_merged_shards_equal_whole_batch():
  rng = np.random.default_rng(1)
  mlm = jnp.array(rng.normal(size=(4, 5, 11)), jnp.float32)
  nsp = jnp.array(rng.normal(size=(4, 2)), jnp.float32)
  batch = {'masked_lm_ids': jnp.array(rng.integers(0, 11, (4, 5))),
           'masked_lm_weights': jnp.array(rng.integers(0, 2, (4, 5)), jnp.float32),
           'next_sentence_labels': jnp.array([0, 1, 1, 0])}
  _, whole = losses.pretraining(mlm, nsp, batch)
  halves = [losses.pretraining(mlm[s], nsp[s], jax.tree.map(lambda x, s=s: x[s], batch))[1]
            for s in (slice(0, 1), slice(1, 4))]
  merged = losses.merge(*halves)
  for key in whole:
    assert float(losses.mean(merged[key])) == pytest.approx(float(losses.mean(whole[key])),
                                                            rel=1e-6)


def test_nsp_example_weight_masks_padding_examples():
  logits = jnp.array([[2.0, 0.0], [0.0, 2.0], [5.0, -5.0]])
  labels = jnp.array([0, 1, 1])
  m = losses.next_sentence(logits, labels, jnp.array([1.0, 1.0, 0.0]))
  assert float(losses.mean(m['nsp_accuracy'])) == 1.0
  assert float(m['nsp_accuracy'][1]) == 2.0


def test_is_argmax_matches_argmax_with_ties():
  """losses.is_argmax (a max + sum rewrite) must agree with argmax, first maximum winning."""
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.integers(0, 4, size=(5, 7, 9)), jnp.float32)  # Many ties.
  ids = jnp.asarray(rng.integers(0, 9, size=(5, 7)), jnp.int32)
  want = np.asarray(jnp.argmax(logits, -1) == ids)
  np.testing.assert_array_equal(np.asarray(losses.is_argmax(logits, ids)), want)
  assert 0 < want.mean() < 1
