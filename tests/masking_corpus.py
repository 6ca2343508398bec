"""Unmasked instances of the embedded corpus and masking statistics computed word by word, for
the masking-strategy tests (static and dynamic): the statistics are plain Python loops over
each row's words, independent of the vectorised code they check."""

import collections
import itertools

import numpy as np

from bertjax.pretraining_data import embedded
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import text_input

SEQ, PRED = 128, 20
# SpanBERT: span lengths in words ~ Geometric(0.2), at most 10; ngram: n <= 3 with P ∝ 1/n.
SPAN_P, SPAN_MAX = 0.2, 10
NGRAM_MAX = 3


def unmasked_instances(every=10, seed=0):
  """(encoder, features) of every `every`-th train document, one pass, unmasked."""
  encoder = text_input.Encoder(str(embedded.vocab_path()), fast=False)
  docs = itertools.islice(embedded.documents('train'), 0, None, every)
  tokenized = text_input.tokenized_documents(docs, encoder, text_input.Skips(), {})
  settings = instances.Settings(max_seq_length=SEQ, max_predictions_per_seq=PRED, dupe_factor=1,
                                static_masking=False)
  batches = list(instances.instance_batches(tokenized, settings, encoder, (seed,),
                                            collections.Counter()))
  return encoder, {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def candidates(encoder, features):
  """Maskable positions: real tokens other than [CLS] and [SEP]."""
  ids = features['input_ids']
  return (features['input_mask'] > 0) & (ids != encoder.cls_id) & (ids != encoder.sep_id)


def row_words(ids, maskable, continuation):
  """A row's words as lists of positions: a '##' piece right after a maskable token joins it."""
  words = []
  for i in np.flatnonzero(maskable).tolist():
    if continuation[ids[i]] and words and words[-1][-1] == i - 1:
      words[-1].append(i)
    else:
      words.append([i])
  return words


def expected_ngram_shares():
  weights = [1 / n for n in range(1, NGRAM_MAX + 1)]
  return [w / sum(weights) for w in weights]


def expected_span_mean():
  """Mean words per span: Geometric(p) on 1..max, renormalised (SpanBERT's 3.8)."""
  weights = [SPAN_P * (1 - SPAN_P) ** (n - 1) for n in range(1, SPAN_MAX + 1)]
  return sum(n * w for n, w in zip(range(1, SPAN_MAX + 1), weights, strict=True)) / sum(weights)


def statistics(ids, maskable, chosen, span_ids, continuation, masked_ids=None, mask_id=None):
  """Per batch: the masked fraction, words partly masked, spans (words, pieces, segment
  crossings), the first span of each row, and with masked_ids the 80/10/10 shares."""
  stats = collections.Counter()
  span_words, span_pieces, first_words, first_budget = [], [], [], []
  for row in range(len(ids)):
    words = row_words(ids[row], maskable[row], continuation)
    stats['maskable'] += int(maskable[row].sum())
    stats['chosen'] += int(chosen[row].sum())
    stats['outside'] += int((chosen[row] & ~maskable[row]).sum())
    word_of = {i: w for w, word in enumerate(words) for i in word}
    for word in words:
      taken = [bool(chosen[row, i]) for i in word]
      stats['partial_words'] += any(taken) and not all(taken)
      stats['words_in_two_spans'] += len({int(span_ids[row, i]) for i in word}) > 1
    by_span = collections.defaultdict(list)
    for i in np.flatnonzero(chosen[row] & maskable[row]).tolist():
      by_span[int(span_ids[row, i])].append(i)
    for span, positions in sorted(by_span.items()):
      # A span is contiguous and inside one segment: its positions are consecutive maskables.
      stats['broken_spans'] += positions != list(range(positions[0], positions[-1] + 1))
      stats['unnumbered'] += span == 0
      span_words.append(len({word_of[i] for i in positions}))
      span_pieces.append(len(positions))
      if span == min(by_span):
        first_words.append(span_words[-1])
        first_budget.append(min(PRED, max(1, round(0.15 * int(maskable[row].sum())))))
  if masked_ids is not None:
    at = chosen
    stats['as_mask'] = int((masked_ids[at] == mask_id).sum())
    stats['kept'] = int((masked_ids[at] == ids[at]).sum())
    stats['random'] = int(((masked_ids[at] != mask_id) & (masked_ids[at] != ids[at])).sum())
    stats['changed_unchosen'] = int((masked_ids[~at] != ids[~at]).sum())
  return stats, np.array(span_words), np.array(span_pieces), np.array(first_words), np.array(
      first_budget)
