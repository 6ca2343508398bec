"""Dynamic whole-word masking: words whole, the original's budget rule, BERT's rates."""

import numpy as np
import tensorflow as tf

from bertjax.input import masking_tf

VOCAB, CLS, SEP, MASK, PIECES = 2000, 101, 102, 103, 1000  # Ids >= PIECES are '##' pieces.


def _rows(rng, batch=64, length=96, sizes=(1, 1, 2, 3, 4)):
  """[CLS] words [SEP] padding; words of 1-4 pieces (a start id, then continuation ids)."""
  ids = np.zeros((batch, length), np.int32)
  mask = np.zeros((batch, length), np.int32)
  for row in range(batch):
    n = int(rng.integers(length // 2, length + 1))
    tokens = [CLS]
    while len(tokens) < n - 1:
      size = int(rng.choice(sizes))
      tokens += [int(rng.integers(200, PIECES))] + list(rng.integers(PIECES, VOCAB, size - 1))
    tokens = tokens[:n - 1] + [SEP]
    ids[row, :n], mask[row, :n] = tokens, 1
  return ids, mask


def _words(row_ids, row_mask):
  """Lists of positions, one per word of a row (a piece continues the word before it)."""
  words = []
  for i in np.flatnonzero(row_mask):
    if row_ids[i] in (CLS, SEP):
      continue
    if row_ids[i] >= PIECES and words and words[-1][-1] == i - 1:
      words[-1].append(i)
    else:
      words.append([i])
  return words


def test_whole_word_masking_takes_whole_words_under_the_original_budget_rule():
  continuation = np.arange(VOCAB) >= PIECES
  config = masking_tf.MaskingConfig(vocab_size=VOCAB, mask_id=MASK, cls_id=CLS, sep_id=SEP,
                                    masked_lm_prob=0.15, continuation=continuation,
                                    strategy='whole_word')
  rng = np.random.default_rng(0)
  chosen_total = maskable_total = partial = 0
  for step in range(6):  # Then two batches of long words, where budgets often cannot be met.
    ids, mask = _rows(rng) if step < 4 else _rows(rng, sizes=(3, 4, 5))
    out = masking_tf.mask_batch(tf.constant(ids), tf.constant(mask), config=config,
                                max_predictions_per_seq=20,
                                seed_2=tf.constant([3, step], tf.int64))
    positions, weights = out['masked_lm_positions'].numpy(), out['masked_lm_weights'].numpy()
    np.testing.assert_array_equal(
        out['masked_lm_ids'].numpy()[weights > 0],
        np.take_along_axis(ids, positions, 1)[weights > 0])
    for row in range(len(ids)):
      chosen = set(positions[row][weights[row] > 0].tolist())
      words = _words(ids[row], mask[row])
      maskable = sum(len(w) for w in words)
      budget = min(20, max(1, round(0.15 * maskable)))
      taken = [w for w in words if chosen & set(w)]
      assert all(set(w) <= chosen for w in taken)  # Never part of a word.
      assert len(chosen) <= budget
      # The original's rule (words in a random order, one that does not fit is skipped): every
      # word left out is larger than the budget that remained.
      left = budget - len(chosen)
      assert all(len(w) > left for w in words if not chosen & set(w))
      partial += left > 0
      if step < 4:
        chosen_total += len(chosen)
        maskable_total += maskable
  assert abs(chosen_total / maskable_total - 0.15) < 0.01
  assert partial > 20  # Rows that end short of the budget: the skip rule was exercised.


def test_without_continuation_flags_single_pieces_are_chosen():
  config = masking_tf.MaskingConfig(vocab_size=VOCAB, mask_id=MASK, cls_id=CLS, sep_id=SEP)
  ids, mask = _rows(np.random.default_rng(1))
  out = masking_tf.mask_batch(tf.constant(ids), tf.constant(mask), config=config,
                              max_predictions_per_seq=20, seed_2=tf.constant([3, 0], tf.int64))
  positions, weights = out['masked_lm_positions'].numpy(), out['masked_lm_weights'].numpy()
  split = 0
  for row in range(len(ids)):
    chosen = set(positions[row][weights[row] > 0].tolist())
    split += sum(0 < len(chosen & set(w)) < len(w) for w in _words(ids[row], mask[row]))
  assert split > 10  # Pieces are chosen alone: the flags above are what keeps words whole.


def test_continuation_flags_mark_wordpiece_suffixes():
  flags = masking_tf.continuation_flags({'[PAD]': 0, 'play': 1, '##ing': 2, '#': 3})
  np.testing.assert_array_equal(flags, [False, False, True, False])
