"""BERT's masked-LM choice for a whole batch of instances at once, vectorised with numpy.

Per instance this is google-research/bert's `create_masked_lm_predictions`: the candidates are
the non-special tokens, grouped into words when whole-word masking is on (a `##` piece joins
the word before it); the words are taken in a random order, a word is skipped if it would
overshoot the budget, and taking stops when the budget is met; each chosen position becomes
`[MASK]` with probability 0.8, a uniformly random vocab id with 0.1 and stays unchanged with 0.1.

Two deliberate differences, both documented in pretraining_data.py's docstring:
  * the budget is `min(max_predictions, max(1, round(masked_lm_prob * candidates)))`, 15% of the
    maskable tokens; the original takes 15% of all tokens including [CLS] and the two [SEP]s.
    For a full 128-token instance both give 19 (round(18.75) = round(19.2)).
  * a `##` piece right after [CLS] or [SEP] starts a word: the original would join it to the
    last word of segment A across the [SEP].
A random permutation of the words is a sort of random keys; keys carry the position in their
low bits, so they are unique and one `np.sort` (SIMD) yields the permuted positions directly.
Without whole-word masking every word is one token and the greedy loop reduces to taking the
first `budget` words.
"""

import numpy as np

# Keys of non-word positions: sorted after every real key.
_NO_KEY = np.uint64(np.iinfo(np.uint64).max)


def num_to_predict(num_candidates, masked_lm_prob, max_predictions):
  """Per-instance budget: masked_lm_prob of the candidates, at least 1, at most the cap."""
  # np.rint rounds half to even, as Python's round() does in the original.
  budget = np.rint(num_candidates * masked_lm_prob).astype(np.int64)
  return np.minimum(max_predictions, np.maximum(1, budget))


def _greedy_take(word_lens, budget):
  """Which words (in random order along axis 1) the original's greedy loop takes."""
  alive = word_lens > 0
  while True:
    cum = np.cumsum(np.where(alive, word_lens, 0), axis=1)
    over = alive & (cum > budget[:, None])
    rows = np.flatnonzero(over.any(axis=1))
    if rows.size == 0:
      return alive
    first = over[rows].argmax(axis=1)
    before = cum[rows, first] - word_lens[rows, first]
    # A full budget ends the loop (`break`): every later word is dropped at once. Otherwise only
    # the word that does not fit is skipped (`continue`) and the rest is looked at again.
    full = before >= budget[rows]
    alive[rows[full]] &= ~over[rows[full]]
    alive[rows[~full], first[~full]] = False


def mask_batch(input_ids, candidates, rng, *, masked_lm_prob, max_predictions, vocab_size,
               mask_id, continuation=None):
  """Masks a batch; returns (masked_ids, positions, label_ids, weights) as the original pads.

  input_ids: [N, S] ints; candidates: [N, S] bool, True at maskable (real, non-special)
  positions; rng: np.random.Generator; continuation: None, or a bool array over vocab ids that is
  True for `##` pieces, to mask whole words. Positions, labels and weights are [N, P] with
  P = max_predictions, zero-padded, positions ascending.
  """
  num, seq = input_ids.shape
  pos = np.arange(seq, dtype=np.int64)
  budget = num_to_predict(candidates.sum(axis=1), masked_lm_prob, max_predictions)
  if continuation is None:
    starts = candidates
  else:
    after_candidate = np.zeros_like(candidates)
    after_candidate[:, 1:] = candidates[:, :-1]
    starts = candidates & ~(continuation[input_ids] & after_candidate)
  # Random keys with the position in the low bits: unique, so sorting a row permutes its words.
  shift = int(seq).bit_length()
  low_bits = np.uint64((1 << shift) - 1)
  keys = rng.bit_generator.random_raw((num, seq)) & ~low_bits
  keys = np.sort(np.where(starts, keys | pos.astype(np.uint64), _NO_KEY), axis=1)
  has_word = keys != _NO_KEY  # Per row, the words come first, in random order.
  word_pos = np.where(has_word, keys & low_bits, 0).astype(np.int64)
  if continuation is None:
    # Every word is one token, so the greedy loop takes the first `budget` of them.
    taken = has_word & (pos < budget[:, None])
  else:
    # Each candidate belongs to the word starting at the last start at or before it.
    start_of = np.maximum.accumulate(np.where(starts, pos, 0), axis=1)
    rows = np.broadcast_to(np.arange(num)[:, None], (num, seq))
    lens_at = np.bincount((rows * seq + start_of)[candidates], minlength=num * seq)
    word_lens = np.where(has_word, np.take_along_axis(lens_at.reshape(num, seq), word_pos, 1), 0)
    taken = _greedy_take(word_lens, budget)
  chosen = np.zeros((num, seq), bool)
  taken_rows, taken_cols = np.nonzero(taken)
  chosen[taken_rows, word_pos[taken_rows, taken_cols]] = True
  if continuation is not None:
    chosen = candidates & np.take_along_axis(chosen, start_of, 1)

  rows, cols = np.nonzero(chosen)  # Row-major: per row, positions ascending, as sorted().
  labels = input_ids[rows, cols]
  draw = rng.random(rows.size)
  replacement = np.where(draw < 0.8, mask_id,
                         np.where(draw < 0.9, labels, rng.integers(0, vocab_size, rows.size)))
  masked_ids = input_ids.copy()
  masked_ids[rows, cols] = replacement
  counts = chosen.sum(axis=1)
  slot = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
  positions = np.zeros((num, max_predictions), input_ids.dtype)
  label_ids = np.zeros((num, max_predictions), input_ids.dtype)
  weights = np.zeros((num, max_predictions), np.float32)
  positions[rows, slot] = cols
  label_ids[rows, slot] = labels
  weights[rows, slot] = 1.0
  return masked_ids, positions, label_ids, weights
