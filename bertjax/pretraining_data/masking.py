"""BERT's masked-LM choice for a whole batch of instances at once, vectorised with numpy.

Per instance this is google-research/bert's `create_masked_lm_predictions`: the candidates are
the non-special tokens, grouped into words when whole-word masking is on (a `##` piece joins
the word before it); the words are taken in a random order, a word is skipped if it would
overshoot the budget, and taking stops when the budget is met; each chosen position becomes
`[MASK]` with probability 0.8, a uniformly random vocab id with 0.1 and stays unchanged with 0.1.

Two deliberate differences (instances.py's docstring lists them with the others):
  * the budget is `min(max_predictions, max(1, round(masked_lm_prob * candidates)))`, 15% of the
    maskable tokens; the original takes 15% of all tokens including [CLS] and the two [SEP]s.
    For a full 128-token instance both give 19 (round(18.75) = round(19.2)); for a full
    512-token one 76 against 77 (round(76.35), round(76.8)): 1.3% fewer predictions.
  * a `##` piece right after [CLS] or [SEP] starts a word: the original would join it to the
    last word of segment A across the [SEP].
A random permutation of the words is a sort of random keys; keys carry the position in their
low bits, so they are unique and one `np.sort` (SIMD) yields the permuted positions directly.
Without whole-word masking every word is one token and the greedy loop reduces to taking the
first `budget` words.

Four strategies (`STRATEGIES`), all under that budget and the 80/10/10 rule:
  * wordpiece: the original's, every piece on its own.
  * whole_word: the original's --do_whole_word_mask, as above.
  * ngram: TF Model Garden's n-gram masking (official/nlp/data/create_pretraining_data.py with
    --max_ngram_size=3): n-grams of whole words, n in 1..3 drawn with probability proportional
    to 1/n, inside one segment, never overlapping, never past the budget.
  * span: SpanBERT's span masking: spans of whole words whose length is drawn from a geometric
    distribution (p=0.2) truncated at 10 words and renormalised (mean 3.8 words, the paper's
    figure; clipping at 10 instead would give 4.46), spans taken until the budget is met.
ngram and span share one loop (`_take_spans`): each round, every row still short of its budget
draws a length in words (renormalised over the lengths that still fit somewhere) and takes one
of the spans of that length uniformly, among those inside one segment, disjoint from what is
taken and within the budget. Deliberate differences: Model Garden draws a length, then pops a
random n-gram of it and rejects it when it overlaps or overflows (so long n-grams lose more draws
near the budget); here the lengths that cannot fit are excluded before the draw, and the 1/n
weights hold among the lengths that can. SpanBERT picks a start token first and lets a span run
on until the budget cuts it inside a word; here the start is a word and only whole words are
taken, and the span stops at the segment's end (as SpanBERT's at the sentence's). Both decide
80/10/10 per n-gram or span; here it is per token, as for the other strategies.
"""

import numpy as np

# Keys of non-word positions: sorted after every real key.
_NO_KEY = np.uint64(np.iinfo(np.uint64).max)

STRATEGIES = ('wordpiece', 'whole_word', 'ngram', 'span')
MAX_NGRAM_WORDS = 3  # Model Garden's max_ngram_size as its README runs it.
SPAN_P = 0.2  # SpanBERT's geometric parameter ...
MAX_SPAN_WORDS = 10  # ... and its longest span, in words.


def check_strategy(strategy):
  """Raises ValueError naming the valid strategies for an unknown one."""
  if strategy not in STRATEGIES:
    raise ValueError(f'masking={strategy!r} is unknown; valid: {", ".join(STRATEGIES)}')


def span_probabilities(strategy) -> np.ndarray:
  """P(a span has n words) for n = 1, 2, ... under ngram or span (whole_word: one word)."""
  check_strategy(strategy)
  if strategy == 'ngram':
    weights = 1.0 / np.arange(1, MAX_NGRAM_WORDS + 1)
  elif strategy == 'span':
    weights = SPAN_P * (1.0 - SPAN_P) ** np.arange(MAX_SPAN_WORDS)
  else:
    weights = np.ones(1)
  return weights / weights.sum()


def num_to_predict(num_candidates, masked_lm_prob, max_predictions):
  """Per-instance budget: masked_lm_prob of the candidates, at least 1, at most the cap."""
  # np.rint rounds half to even, as Python's round() does in the original.
  budget = np.rint(num_candidates * masked_lm_prob).astype(np.int64)
  return np.minimum(max_predictions, np.maximum(1, budget))


def full_row_budget(max_seq_length: int, masked_lm_prob: float, nsp: bool) -> tuple[int, int]:
  """(a full row's maskable tokens: all but [CLS] and its [SEP]s, the budget masked_lm_prob
  gives them): what max_predictions_per_seq must hold, or the cap lowers the rate unsaid."""
  maskable = max_seq_length - (3 if nsp else 2)
  return maskable, int(num_to_predict(maskable, masked_lm_prob, maskable))


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


def _word_starts(input_ids, candidates, continuation):
  """[N, S] bool: the first piece of each word (every candidate when continuation is None)."""
  if continuation is None:
    return candidates
  after_candidate = np.zeros_like(candidates)
  after_candidate[:, 1:] = candidates[:, :-1]
  return candidates & ~(continuation[input_ids] & after_candidate)


def _take_spans(starts, candidates, budget, rng, probabilities):
  """(chosen, span_ids) [N, S] for ngram and span: rounds of one (length, span) draw per row.

  A span of n words starting at word i is valid while its words are in one run of candidates
  (one segment), none of them is taken and its tokens fit what is left of the row's budget.
  Each round a row draws n among the lengths with a valid span (probabilities renormalised),
  then one of those spans uniformly; every round takes at least one token, so it ends within
  max(budget) rounds.
  """
  num, seq = starts.shape
  sizes = len(probabilities)
  word_of = np.cumsum(starts, axis=1) - 1  # Per position: the index of its word in the row.
  num_words = starts.sum(axis=1)
  width = int(num_words.max(initial=0))
  chosen = np.zeros((num, seq), bool)
  span_ids = np.zeros((num, seq), np.int32)
  if width == 0:
    return chosen, span_ids
  # Per word (padded by `sizes` so that word i + n - 1 can always be indexed): first token,
  # token count and run of contiguous candidates; [CLS] and [SEP] end runs, so no span crosses.
  padded = width + sizes
  rows, cols = np.nonzero(starts)
  first = np.zeros((num, padded), np.int64)
  first[rows, word_of[rows, cols]] = cols
  in_row = np.broadcast_to(np.arange(num)[:, None], (num, seq))
  lens = np.bincount((in_row * padded + np.maximum(word_of, 0))[candidates],
                     minlength=num * padded).reshape(num, padded)
  run_starts = candidates.copy()
  run_starts[:, 1:] &= ~candidates[:, :-1]
  word_run = np.full((num, padded), -1, np.int64)
  word_run[rows, word_of[rows, cols]] = np.cumsum(run_starts, axis=1)[rows, cols]
  index_W = np.arange(width)
  last_KxW = index_W[None, :] + np.arange(sizes)[:, None]  # Word i + n - 1 for n = 1..sizes.
  shape_ok = ((last_KxW[None] < num_words[:, None, None])
              & (word_run[:, last_KxW] == word_run[:, None, :width]))
  tokens = first[:, last_KxW] + lens[:, last_KxW] - first[:, None, :width]

  taken = np.zeros((num, padded), bool)
  span_of_word = np.zeros((num, width), np.int32)
  left = budget.astype(np.int64).copy()
  live = np.flatnonzero(num_words > 0)
  for round_id in range(1, int(budget.max(initial=0)) + 1):
    taken_before = np.zeros((live.size, padded + 1), np.int64)
    np.cumsum(taken[live], axis=1, out=taken_before[:, 1:])
    free = taken_before[:, last_KxW + 1] == taken_before[:, None, :width]
    valid = shape_ok[live] & free & (tokens[live] <= left[live, None, None])
    fits = valid.any(axis=2)
    keep = fits.any(axis=1)
    live, valid, fits = live[keep], valid[keep], fits[keep]
    if live.size == 0:
      break
    cumulative = np.cumsum(np.where(fits, probabilities, 0.0), axis=1)
    draw = rng.random(live.size) * cumulative[:, -1]
    # The first length whose cumulative weight exceeds the draw: one that fits.
    size = np.minimum((cumulative <= draw[:, None]).sum(axis=1), sizes - 1)
    keys = np.where(valid[np.arange(live.size), size], rng.random((live.size, width)), -1.0)
    start = keys.argmax(axis=1)
    left[live] -= tokens[live, size, start]
    words = (index_W >= start[:, None]) & (index_W <= (start + size)[:, None])
    taken[live, :width] |= words
    span_of_word[live] = np.where(words, round_id, span_of_word[live])
  word_at = np.maximum(word_of, 0)
  chosen = candidates & np.take_along_axis(taken, word_at, axis=1)
  span_ids = np.where(chosen, np.take_along_axis(span_of_word, np.minimum(word_at, width - 1),
                                                 axis=1), 0).astype(np.int32)
  return chosen, span_ids


def choose(input_ids, candidates, rng, *, strategy, budget, continuation=None):
  """(chosen, span_ids), both [N, S]: the positions to predict under `strategy`, and per chosen
  position its span's number (unique within the row; 0 elsewhere): a piece under wordpiece, a
  word under whole_word, an n-gram or span of words under ngram and span.

  continuation: a bool array over vocab ids, True for a word's continuation pieces (`##`);
  needed by every strategy but wordpiece. budget: [N] tokens per row (num_to_predict).
  """
  check_strategy(strategy)
  if strategy != 'wordpiece' and continuation is None:
    raise ValueError(f'masking={strategy!r} masks whole words: it needs the vocab\'s '
                     'continuation flags')
  if strategy == 'wordpiece':
    continuation = None
  starts = _word_starts(input_ids, candidates, continuation)
  if strategy in ('ngram', 'span'):
    return _take_spans(starts, candidates, budget, rng, span_probabilities(strategy))
  num, seq = input_ids.shape
  pos = np.arange(seq, dtype=np.int64)
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
  if continuation is None:
    return chosen, np.where(chosen, pos + 1, 0).astype(np.int32)
  chosen = candidates & np.take_along_axis(chosen, start_of, 1)
  return chosen, np.where(chosen, start_of + 1, 0).astype(np.int32)


def mask_batch(input_ids, candidates, rng, *, masked_lm_prob, max_predictions, vocab_size,
               mask_id, strategy, continuation=None):
  """Masks a batch; returns (masked_ids, positions, label_ids, weights) as the original pads.

  input_ids: [N, S] ints; candidates: [N, S] bool, True at maskable (real, non-special)
  positions; rng: np.random.Generator; strategy: one of STRATEGIES; continuation: a bool array
  over vocab ids, True for `##` pieces (every strategy but wordpiece needs it). Positions,
  labels and weights are [N, P] with P = max_predictions, zero-padded, positions ascending.
  """
  num = input_ids.shape[0]
  budget = num_to_predict(candidates.sum(axis=1), masked_lm_prob, max_predictions)
  chosen, _ = choose(input_ids, candidates, rng, strategy=strategy, budget=budget,
                     continuation=continuation)

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
