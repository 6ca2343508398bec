"""The vectorised masked-LM choice: the original's greedy word loop, budget and 80/10/10."""

import numpy as np

from bertjax.pretraining_data import masking


def test_greedy_word_choice_equals_the_original_loop():
  rng = np.random.default_rng(0)
  lens = rng.choice([0, 1, 1, 1, 2, 3, 5], size=(2000, 30))
  budget = rng.integers(1, 25, size=2000)
  taken = masking._greedy_take(lens, budget)  # pylint: disable=protected-access
  for row in range(len(lens)):
    expected, total = [], 0
    for length in lens[row]:  # The original's loop over shuffled candidate words.
      fits = length > 0 and total < budget[row] and total + length <= budget[row]
      expected.append(fits)
      total += length if fits else 0
    assert taken[row].tolist() == expected, row


def test_mask_batch_budget_labels_and_whole_words():
  rng = np.random.default_rng(0)
  num, seq, vocab_size = 4000, 64, 1000
  ids = rng.integers(5, vocab_size, (num, seq)).astype(np.int32)
  length = rng.integers(8, seq + 1, num)
  candidates = (np.arange(seq) > 0) & (np.arange(seq) < (length - 1)[:, None])
  continuation = np.zeros(vocab_size, bool)
  continuation[500:] = True  # Half the vocab are '##' pieces: words of several pieces.
  for strategy, whole_words in (('wordpiece', None), ('whole_word', continuation)):
    masked, positions, labels, weights = masking.mask_batch(
        ids, candidates, rng, masked_lm_prob=0.15, max_predictions=8, vocab_size=vocab_size,
        mask_id=3, strategy=strategy, continuation=whole_words)
    count = weights.sum(axis=1).astype(int)
    budget = masking.num_to_predict(candidates.sum(axis=1), 0.15, 8)
    assert np.all(count <= budget) and np.mean(count == budget) > 0.9
    valid = weights > 0
    rows = np.nonzero(valid)[0]
    assert candidates[rows, positions[valid]].all()
    np.testing.assert_array_equal(labels[valid], ids[rows, positions[valid]])
    chosen = np.zeros_like(candidates)
    chosen[rows, positions[valid]] = True
    np.testing.assert_array_equal(masked[~chosen], ids[~chosen])
    at = masked[chosen]
    assert abs(np.mean(at == 3) - 0.8) < 0.02 and abs(np.mean(at == ids[chosen]) - 0.1) < 0.02
    if whole_words is not None:
      inside = candidates[:, 1:] & candidates[:, :-1] & continuation[ids[:, 1:]]
      np.testing.assert_array_equal(chosen[:, 1:][inside], chosen[:, :-1][inside])
