"""Dynamic masking strategies (masking_tf) on the embedded corpus: the same checks as the static
ones (tests/pretraining_data/masking_strategies_test.py, whose docstring justifies the
tolerances), and masks that are a function of the seed alone (the pipeline derives it from the
run seed and the batch's stream position, so a resumed run draws the same masks)."""

import masking_corpus
import numpy as np
import pytest
import tensorflow as tf

from bertjax.input import masking_tf
from bertjax.pretraining_data import masking

BATCH = 512


@pytest.fixture(scope='module')
def corpus():
  encoder, features = masking_corpus.unmasked_instances()
  return encoder, features['input_ids'], features['input_mask']


def _config(encoder, strategy):
  return masking_tf.MaskingConfig(
      vocab_size=encoder.vocab_size, mask_id=encoder.mask_id, cls_id=encoder.cls_id,
      sep_id=encoder.sep_id, continuation=encoder.continuation, strategy=strategy)


def _batches(corpus, strategy, function, seed=5):
  """`function` (choose or mask_batch) over the corpus in batches, one seed per batch."""
  encoder, ids, input_mask = corpus
  config = _config(encoder, strategy)
  run = tf.function(lambda i, m, s: function(i, m, config=config, max_predictions_per_seq=20,
                                             seed_2=s))
  outputs = [run(ids[b:b + BATCH], input_mask[b:b + BATCH], tf.constant([seed, b], tf.int64))
             for b in range(0, len(ids), BATCH)]
  if isinstance(outputs[0], dict):
    return {k: np.concatenate([o[k].numpy() for o in outputs]) for k in outputs[0]}
  return tuple(np.concatenate([o[i].numpy() for o in outputs]) for i in range(2))


def _maskable(encoder, ids, input_mask):
  return masking_corpus.candidates(encoder, {'input_ids': ids, 'input_mask': input_mask})


@pytest.mark.parametrize('strategy', masking.STRATEGIES)
def test_each_strategy_masks_15_percent_in_whole_words_and_by_seed(corpus, strategy):
  encoder, ids, input_mask = corpus
  maskable = _maskable(encoder, ids, input_mask)
  chosen, span_ids = _batches(corpus, strategy, masking_tf.choose)
  budget = masking.num_to_predict(maskable.sum(axis=1), 0.15, masking_corpus.PRED)
  assert np.all(chosen.sum(axis=1) <= budget)
  assert np.mean(chosen.sum(axis=1) == budget) > 0.99
  stats, span_words, span_pieces, first, first_budget = masking_corpus.statistics(
      ids, maskable, chosen, span_ids, encoder.continuation)
  assert stats['outside'] == 0 and stats['broken_spans'] == 0 and stats['unnumbered'] == 0
  assert abs(stats['chosen'] / stats['maskable'] - 0.15) < 0.005, stats
  if strategy == 'wordpiece':
    assert stats['partial_words'] > 1000 and span_pieces.max() == 1
  else:
    assert stats['partial_words'] == 0 and stats['words_in_two_spans'] == 0
  first = first[first_budget >= 19]
  if strategy == 'ngram':
    for n, share in enumerate(masking_corpus.expected_ngram_shares(), 1):
      measured = np.mean(first == n)
      assert abs(measured - share) < 4 * np.sqrt(share * (1 - share) / first.size), (n, measured)
    assert span_words.max() == 3
  if strategy == 'span':
    expected = masking_corpus.expected_span_mean()
    assert abs(first.mean() - expected) < 4 * first.std() / np.sqrt(first.size), first.mean()
    assert span_words.max() == 10 and 2.5 < span_words.mean() < expected
  again, _ = _batches(corpus, strategy, masking_tf.choose)
  other, _ = _batches(corpus, strategy, masking_tf.choose, seed=6)
  np.testing.assert_array_equal(again, chosen)
  assert not np.array_equal(other, chosen)


@pytest.mark.parametrize('strategy', ['ngram', 'span'])
def test_80_10_10_on_the_chosen_positions(corpus, strategy):
  encoder, ids, input_mask = corpus
  out = _batches(corpus, strategy, masking_tf.mask_batch)
  chosen, _ = _batches(corpus, strategy, masking_tf.choose)
  valid = out['masked_lm_weights'] > 0
  rows = np.nonzero(valid)[0]
  from_positions = np.zeros_like(chosen)
  from_positions[rows, out['masked_lm_positions'][valid]] = True
  np.testing.assert_array_equal(from_positions, chosen)  # mask_batch predicts what choose chose.
  np.testing.assert_array_equal(out['masked_lm_ids'][valid], ids[rows,
                                                                out['masked_lm_positions'][valid]])
  stats, *_ = masking_corpus.statistics(ids, _maskable(encoder, ids, input_mask), chosen,
                                        chosen.astype(np.int32), encoder.continuation,
                                        out['input_ids'], encoder.mask_id)
  assert stats['changed_unchosen'] == 0
  for key, share in (('as_mask', 0.8), ('kept', 0.1), ('random', 0.1)):
    assert abs(stats[key] / stats['chosen'] - share) < 0.01, stats


def test_a_strategy_is_checked_and_word_strategies_need_the_vocab():
  with pytest.raises(ValueError, match="masking='spans' is unknown; valid: wordpiece"):
    masking_tf.MaskingConfig(vocab_size=10, mask_id=3, cls_id=1, sep_id=2, strategy='spans')
  with pytest.raises(ValueError, match='needs continuation flags'):
    masking_tf.MaskingConfig(vocab_size=10, mask_id=3, cls_id=1, sep_id=2, strategy='ngram')
