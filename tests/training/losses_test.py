"""Losses as (sum, weight) pairs: weighted correctly and exact when merged across shards.

The losses run jitted, as the steps run them: op by op, each primitive compiled on its own for
every shape (1.5 to 2 s a call on CPU, against 0.2 s for the whole function).
"""

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
  masked_lm = jax.jit(losses.masked_lm)
  metrics = masked_lm(jnp.array(logits), jnp.array(ids), jnp.array(weights))
  logp = jax.jit(jax.nn.log_softmax)(logits)
  nll = -np.take_along_axis(np.asarray(logp), ids[..., None], -1)[..., 0]
  assert float(losses.mean(metrics['mlm_loss'])) == pytest.approx(nll[weights > 0].mean(),
                                                                    rel=1e-6)
  assert float(metrics['mlm_loss'][1]) == 5.0
  # Changing the padded position's logits changes nothing.
  logits[1, 2] += 100
  again = masked_lm(jnp.array(logits), jnp.array(ids), jnp.array(weights))
  assert float(again['mlm_loss'][0]) == pytest.approx(float(metrics['mlm_loss'][0]), rel=1e-6)


def test_merged_shards_equal_whole_batch():
  rng = np.random.default_rng(1)
  # On the host: each slice of a device array would compile an op.
  mlm = rng.normal(size=(4, 5, 11)).astype(np.float32)
  nsp = rng.normal(size=(4, 2)).astype(np.float32)
  batch = {'masked_lm_ids': rng.integers(0, 11, (4, 5)),
           'masked_lm_weights': rng.integers(0, 2, (4, 5)).astype(np.float32),
           'next_sentence_labels': np.array([0, 1, 1, 0])}
  # Each shard its own call (its own program), as each device or micro-batch computes its own.
  pretraining = jax.jit(losses.pretraining)
  _, whole = pretraining(mlm, nsp, batch)
  halves = [pretraining(mlm[s], nsp[s], jax.tree.map(lambda x, s=s: x[s], batch))[1]
            for s in (slice(0, 1), slice(1, 4))]
  merged = losses.merge(*halves)
  for key in whole:
    assert float(losses.mean(merged[key])) == pytest.approx(float(losses.mean(whole[key])),
                                                            rel=1e-6)


def test_nsp_example_weight_masks_padding_examples():
  logits = jnp.array([[2.0, 0.0], [0.0, 2.0], [5.0, -5.0]])
  labels = jnp.array([0, 1, 1])
  m = jax.jit(losses.next_sentence)(logits, labels, jnp.array([1.0, 1.0, 0.0]))
  assert float(losses.mean(m['nsp_accuracy'])) == 1.0
  assert float(m['nsp_accuracy'][1]) == 2.0


def test_is_argmax_matches_argmax_with_ties():
  """losses.is_argmax (a max + sum rewrite) must agree with argmax, first maximum winning."""
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.integers(0, 4, size=(5, 7, 9)), jnp.float32)  # Many ties.
  ids = jnp.asarray(rng.integers(0, 9, size=(5, 7)), jnp.int32)
  want = np.asarray(jnp.argmax(logits, -1) == ids)
  np.testing.assert_array_equal(np.asarray(jax.jit(losses.is_argmax)(logits, ids)), want)
  assert 0 < want.mean() < 1
