"""Static masking strategies (wordpiece, whole_word, ngram, span) on the embedded corpus: the 15%
budget, 80/10/10, whole words, ngram's 1/n and span's geometric lengths, determinism by seed.

Tolerances: the budget is round(0.15 * maskable) per row (at most 20), so the masked fraction
of ~2.5k rows is 0.15 up to rounding (+0.0018 measured, short rows' minimum of 1 included) and
a strategy may fall short only where no whole word fits what is left: within 0.005. The
80/10/10 shares are binomial over ~43k tokens (sd <= 0.002): within 0.01. The first span of a
row with a budget of 19+ tokens is drawn from the full length distribution (every length fits
in it), so its length shares and mean are checked within 4 standard errors of the exact
values; later spans are shortened by what is left of the budget, so all spans are only checked
for ordering and their range.
"""

import collections
import subprocess
import sys

import masking_corpus
import numpy as np
import pytest

from bertjax import create_pretraining_data
from bertjax.pretraining_data import embedded
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import masking
from bertjax.pretraining_data import text_input

WHOLE_WORDS = ('whole_word', 'ngram', 'span')


@pytest.fixture(scope='module')
def corpus():
  encoder, features = masking_corpus.unmasked_instances()
  return encoder, features['input_ids'], masking_corpus.candidates(encoder, features)


def _mask(corpus, strategy, seed=1):
  encoder, ids, maskable = corpus
  rng = np.random.default_rng(seed)
  budget = masking.num_to_predict(maskable.sum(axis=1), 0.15, masking_corpus.PRED)
  chosen, span_ids = masking.choose(ids, maskable, rng, strategy=strategy, budget=budget,
                                    continuation=encoder.continuation)
  return budget, chosen, span_ids


@pytest.mark.parametrize('strategy', masking.STRATEGIES)
def test_each_strategy_masks_15_percent_under_the_budget(corpus, strategy):
  encoder, ids, maskable = corpus
  budget, chosen, span_ids = _mask(corpus, strategy)
  assert np.all(chosen.sum(axis=1) <= budget)
  assert np.mean(chosen.sum(axis=1) == budget) > 0.99
  stats, span_words, span_pieces, _, _ = masking_corpus.statistics(
      ids, maskable, chosen, span_ids, encoder.continuation)
  assert stats['maskable'] > 250_000 and stats['outside'] == 0
  assert abs(stats['chosen'] / stats['maskable'] - 0.15) < 0.005, stats
  assert stats['broken_spans'] == 0 and stats['unnumbered'] == 0
  if strategy in WHOLE_WORDS:
    assert stats['partial_words'] == 0 and stats['words_in_two_spans'] == 0
  else:  # Pieces on their own: words of several pieces are often cut (the check has teeth).
    assert stats['partial_words'] > 1000 and span_pieces.max() == 1
  most = {'wordpiece': 1, 'whole_word': 1, 'ngram': 3, 'span': 10}[strategy]
  assert span_words.min() == 1 and span_words.max() == most


def _span_lengths(corpus, strategy):
  """Every span's length in words, and the first span's of each row with a full budget (19+
  predictions left: what the drawn length law gives, before the budget's end cuts it)."""
  encoder, ids, maskable = corpus
  _, chosen, span_ids = _mask(corpus, strategy)
  _, span_words, _, first, budget = masking_corpus.statistics(ids, maskable, chosen, span_ids,
                                                              encoder.continuation)
  return span_words, first[budget >= 19]


def test_ngram_lengths_follow_one_over_n(corpus):
  span_words, first = _span_lengths(corpus, 'ngram')
  assert first.size > 1500
  for n, share in enumerate(masking_corpus.expected_ngram_shares(), 1):
    measured = np.mean(first == n)
    assert abs(measured - share) < 4 * np.sqrt(share * (1 - share) / first.size), (n, measured)
  # Over all n-grams, the budget's end favours short ones, but 1/n's order holds.
  shares = np.bincount(span_words, minlength=4)[1:] / span_words.size
  assert shares[0] > shares[1] > shares[2] > 0.1, shares


def test_span_lengths_are_spanbert_geometric(corpus):
  span_words, first = _span_lengths(corpus, 'span')
  expected = masking_corpus.expected_span_mean()
  assert abs(expected - 3.797) < 0.001  # The paper's 3.8: clipping (min(L, 10)) would be 4.46.
  assert abs(first.mean() - expected) < 4 * first.std() / np.sqrt(first.size), first.mean()
  # Shares fall with the length as Geometric(0.2) does: P(n + 1) / P(n) = 0.8.
  shares = np.bincount(first, minlength=11)[1:] / first.size
  assert abs(shares[1] / shares[0] - 0.8) < 0.15 and np.all(np.diff(shares[:6]) < 0), shares
  assert 2.5 < span_words.mean() < expected  # All spans: the budget's end cuts some short.


@pytest.mark.parametrize('strategy', masking.STRATEGIES)
def test_80_10_10_and_determinism_by_seed(corpus, strategy):
  encoder, ids, maskable = corpus

  def mask_batch(seed):
    return masking.mask_batch(ids, maskable, np.random.default_rng(seed), masked_lm_prob=0.15,
                              max_predictions=masking_corpus.PRED,
                              vocab_size=encoder.vocab_size, mask_id=encoder.mask_id,
                              strategy=strategy, continuation=encoder.continuation)

  first, again, other = mask_batch(3), mask_batch(3), mask_batch(4)
  for a, b in zip(first, again, strict=True):
    np.testing.assert_array_equal(a, b)
  assert not np.array_equal(first[1], other[1])
  masked, positions, labels, weights = first
  valid = weights > 0
  rows = np.nonzero(valid)[0]
  chosen = np.zeros_like(maskable)
  chosen[rows, positions[valid]] = True
  np.testing.assert_array_equal(labels[valid], ids[rows, positions[valid]])
  stats, *_ = masking_corpus.statistics(ids, maskable, chosen, chosen.astype(np.int32),
                                        encoder.continuation, masked, encoder.mask_id)
  assert stats['changed_unchosen'] == 0
  assert abs(stats['as_mask'] / stats['chosen'] - 0.8) < 0.01, stats
  assert abs(stats['kept'] / stats['chosen'] - 0.1) < 0.01, stats
  assert abs(stats['random'] / stats['chosen'] - 0.1) < 0.01, stats


def test_instances_mask_with_the_setting_and_refuse_a_wrong_one(corpus):
  encoder, _, _ = corpus
  documents = text_input.tokenized_documents(embedded.documents('eval'), encoder,
                                             text_input.Skips(), {})
  settings = instances.Settings(max_seq_length=masking_corpus.SEQ, dupe_factor=1,
                                masking='span')
  features = next(instances.instance_batches(documents, settings, encoder, (0,),
                                             collections.Counter()))
  masked, positions, weights = (features[k] for k in ('input_ids', 'masked_lm_positions',
                                                      'masked_lm_weights'))
  original = masked.copy()
  valid = weights > 0
  rows = np.nonzero(valid)[0]
  original[rows, positions[valid]] = features['masked_lm_ids'][valid]
  chosen = np.zeros(masked.shape, bool)
  chosen[rows, positions[valid]] = True
  stats, span_words, *_ = masking_corpus.statistics(
      original, masking_corpus.candidates(encoder, features | {'input_ids': original}), chosen,
      chosen.astype(np.int32), encoder.continuation)
  # Span ids are not written: contiguous spans read as one, so only whole words are checked.
  assert stats['chosen'] > 3000 and stats['partial_words'] == 0
  assert abs(stats['chosen'] / stats['maskable'] - 0.15) < 0.01
  with pytest.raises(ValueError, match=r"masking='spans' is unknown; valid: wordpiece, "
                     'whole_word, ngram, span'):
    instances.Settings(masking='spans').validate()
  with pytest.raises(ValueError, match=r'static_masking=False .*\(--config.data.masking=ngram\)'):
    instances.Settings(masking='ngram', static_masking=False).validate()
  with pytest.raises(ValueError, match='needs the vocab'):
    masking.choose(np.zeros((1, 4), np.int32), np.ones((1, 4), bool), np.random.default_rng(0),
                   strategy='span', budget=np.ones(1, np.int64))


def test_the_original_whole_word_flag_is_an_alias_that_warns():
  strategy = create_pretraining_data.masking_strategy
  assert strategy('wordpiece', False, None) == ('wordpiece', '')
  assert strategy('span', True, None) == ('span', '')
  chosen, warning = strategy('wordpiece', False, True)
  assert chosen == 'whole_word' and '--masking=whole_word instead' in warning
  assert strategy('ngram', True, True)[0] == 'ngram'  # Model Garden: ngram with whole words.
  # Session 56's hostile pass: it said '--do_whole_word_mask is the original's flag:
  # masking=span', as if it had chosen span.
  assert strategy('span', True, True) == ('span', "warning: --do_whole_word_mask (the "
                                          "original's flag) adds nothing to --masking=span, "
                                          'which masks whole words: drop it')
  assert strategy('wordpiece', False, False)[0] == 'wordpiece'
  with pytest.raises(Exception, match='--do_whole_word_mask contradicts --masking=wordpiece'):
    strategy('wordpiece', True, True)
  with pytest.raises(Exception, match='--nodo_whole_word_mask contradicts --masking=span'):
    strategy('span', True, False)


def test_cli_writes_span_masks_and_reads_the_original_flag(tmp_path):
  corpus = tmp_path / 'c.txt'
  corpus.write_text('the lord is my shepherd ; i shall not want .\nhe maketh me to lie down in '
                    'green pastures .\n\nto be , or not to be , that is the question .\n'
                    'whether tis nobler in the mind to suffer .\n', encoding='utf-8')
  def cli(*flags):
    return subprocess.run(
        [sys.executable, '-m', 'bertjax.create_pretraining_data', f'--input_file={corpus}',
         f'--output_file={tmp_path / "out"}', f'--vocab_file={embedded.vocab_path()}',
         '--num_workers=1', '--dupe_factor=2', *flags], capture_output=True, text=True,
        timeout=300, check=False)

  run = cli('--masking=span')
  assert run.returncode == 0 and 'warning' not in run.stderr, run.stderr[-2000:]
  assert '"masking": "span"' in (tmp_path / 'out.json').read_text(encoding='utf-8')
  # The span set is not replaced by one made otherwise without --overwrite (session 36).
  run = cli('--do_whole_word_mask')
  assert run.returncode == 1 and run.stderr.endswith(
      f'{tmp_path / "out.json"} holds a set made otherwise (masking span, now whole_word): pass '
      '--overwrite to replace it, or another --output_file.\n'), run.stderr[-2000:]
  assert '"masking": "span"' in (tmp_path / 'out.json').read_text(encoding='utf-8')
  run = cli('--do_whole_word_mask', '--overwrite')
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stderr.count('--do_whole_word_mask is the original') == 1
  assert '"masking": "whole_word"' in (tmp_path / 'out.json').read_text(encoding='utf-8')
  run = cli('--masking=ngram', '--nodo_whole_word_mask')
  assert run.returncode != 0 and 'contradicts --masking=ngram' in run.stderr
  run = cli('--masking=spans')
  assert run.returncode != 0 and '<wordpiece|whole_word|ngram|span>' in run.stderr
