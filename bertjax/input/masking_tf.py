"""Dynamic (RoBERTa-style) masked-LM masking of unmasked instances, as a tf.data batch map.

The rule is BERT's: choose round(masked_lm_prob * n) of a row's n maskable tokens (special
tokens and padding are never chosen), at least one and at most max_predictions_per_seq; replace
80% of the chosen with [MASK], 10% with a token drawn uniformly from the whole vocabulary (as the
original create_pretraining_data does) and keep 10% unchanged. Outputs carry the static files'
keys (masked_lm_positions ascending, zero-padded, with masked_lm_ids and masked_lm_weights).
What is chosen is MaskingConfig.strategy, as in static masking (pretraining_data/masking.py):
wordpiece (each piece on its own), whole_word (whole words in a random order, a word that would
overflow the budget skipped, as the original's --do_whole_word_mask), ngram and span (rounds of
one whole-word n-gram or span per row, its length in words drawn among the lengths that still
fit: ∝ 1/n up to 3 words, or SpanBERT's geometric(0.2) truncated at 10 words).

Randomness is stateless: a batch's masks are a function of its seed only, and input_pipeline.py
derives that seed from the run seed, the host and the stream position of the batch's first
example, so masks change every epoch and a resumed run draws exactly the masks it would have.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from bertjax.pretraining_data import masking
from bertjax.text import vocab_files


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
  """The vocabulary facts and rates that dynamic masking needs."""

  vocab_size: int  # Replacement tokens are drawn from [0, vocab_size).
  mask_id: int  # [MASK]
  cls_id: int  # [CLS]
  sep_id: int  # [SEP]
  # The padding piece ([PAD]; a SentencePiece model's pad_id), never chosen; None where the
  # vocab has none (a SentencePiece model's id 0 is then a real piece, <unk> by default).
  # Padding itself is told by input_mask.
  pad_id: int | None = None
  masked_lm_prob: float = 0.15  # Fraction of maskable tokens chosen for prediction.
  # True per vocab id for a word's continuation pieces (WordPiece '##', SentencePiece: no '▁';
  # continuation_flags): the words that every strategy but wordpiece masks whole. None:
  # wordpiece only.
  continuation: np.ndarray | None = None
  strategy: str = 'wordpiece'  # One of masking.STRATEGIES: wordpiece, whole_word, ngram, span.

  def __post_init__(self):
    ids = {'mask_id': self.mask_id, 'cls_id': self.cls_id, 'sep_id': self.sep_id,
           'pad_id': self.pad_id}
    bad = {name: i for name, i in ids.items()
           if i is not None and not 0 <= i < self.vocab_size}
    if bad:
      raise ValueError(f'special token ids {bad} are outside the vocabulary of {self.vocab_size}')
    if not 0.0 < self.masked_lm_prob < 1.0:
      raise ValueError(f'masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}')
    masking.check_strategy(self.strategy)
    if self.strategy != 'wordpiece' and self.continuation is None:
      raise ValueError(f'masking={self.strategy!r} masks whole words: it needs continuation '
                       'flags (continuation_flags(vocab))')
    if self.continuation is not None and len(self.continuation) != self.vocab_size:
      raise ValueError(f'continuation has {len(self.continuation)} entries for a vocabulary of '
                       f'{self.vocab_size}')


def continuation_flags(vocab: dict, sentencepiece: bool = False) -> np.ndarray:
  """True per id for a word's continuation pieces: WordPiece's '##...'; for a SentencePiece
  vocab every piece but a '▁' word start (the rule static masking uses), indexed by id."""
  return vocab_files.continuation_flags(vocab, sentencepiece)


def _whole_words(input_ids_BxL, maskable_BxL, num_to_mask_B, seed, continuation):
  """Chosen tokens [B, L] under the original's whole-word rule: words in a random order, each
  taken whole when it still fits the budget (else skipped), until the budget is met."""
  batch, length = tf.shape(input_ids_BxL)[0], tf.shape(input_ids_BxL)[1]
  starts_BxL = _word_starts(input_ids_BxL, maskable_BxL, continuation)
  word_BxL = tf.cumsum(tf.cast(starts_BxL, tf.int32), axis=1) - 1  # Word index in the row.
  segments_BxL = tf.where(maskable_BxL, word_BxL + tf.range(batch)[:, None] * length,
                          batch * length)  # Non-maskable tokens go to a discarded segment.
  size_BxW = tf.reshape(tf.math.unsorted_segment_sum(
      tf.ones([batch * length], tf.int32), tf.reshape(segments_BxL, [-1]),
      batch * length + 1)[:-1], [batch, length])
  score_BxW = tf.where(size_BxW > 0, tf.random.stateless_uniform([batch, length], seed), -1.0)
  order_BxW = tf.argsort(score_BxW, axis=1, direction='DESCENDING', stable=True)
  # The scan's counts in float32, exact for counts below 2**24: TensorFlow's oneDNN transpose
  # of an int or bool tensor prints an error line on CPUs without AVX-512 (then falls back).
  sorted_size_WxB = tf.transpose(tf.cast(tf.gather(size_BxW, order_BxW, batch_dims=1),
                                         tf.float32))
  budget_B = tf.cast(num_to_mask_B, tf.float32)

  def take(count_B, size_B):
    fits_B = (size_B > 0) & (count_B + size_B <= budget_B)
    return count_B + tf.where(fits_B, size_B, 0.0)

  counts_BxW = tf.transpose(tf.scan(take, sorted_size_WxB,
                                    initializer=tf.zeros([batch], tf.float32)))
  taken_BxW = counts_BxW > tf.pad(counts_BxW[:, :-1], [[0, 0], [1, 0]])
  chosen_word_BxW = tf.gather(taken_BxW, tf.argsort(order_BxW, axis=1), batch_dims=1)
  chosen_BxL = maskable_BxL & tf.gather(chosen_word_BxW, tf.maximum(word_BxL, 0), batch_dims=1)
  return chosen_BxL, tf.where(chosen_BxL, word_BxL + 1, 0)


def _word_starts(input_ids_BxL, maskable_BxL, continuation):
  is_piece_BxL = tf.gather(tf.constant(continuation), input_ids_BxL) & maskable_BxL
  previous_maskable_BxL = tf.pad(maskable_BxL[:, :-1], [[0, 0], [1, 0]])
  return maskable_BxL & ~(is_piece_BxL & previous_maskable_BxL)


def _spans(input_ids_BxL, maskable_BxL, num_to_mask_B, seed, continuation, probabilities,
           max_rounds):
  """(chosen, span ids) [B, L] under ngram or span: masking.py's _take_spans in TensorFlow.

  Each round, every row with a span that still fits (whole words of one run of maskable tokens,
  none taken, within what is left of its budget) draws a length in words among the lengths
  that fit (probabilities renormalised), then one such span uniformly. A round takes at least
  one token per row, so max_rounds = max_predictions_per_seq rounds suffice.
  """
  batch, length = tf.shape(input_ids_BxL)[0], tf.shape(input_ids_BxL)[1]
  sizes = len(probabilities)  # K: the longest span, in words. Words W <= L.
  starts_BxL = _word_starts(input_ids_BxL, maskable_BxL, continuation)
  word_BxL = tf.cumsum(tf.cast(starts_BxL, tf.int32), axis=1) - 1
  num_words_B = tf.reduce_sum(tf.cast(starts_BxL, tf.int32), axis=1)
  segments = tf.reshape(tf.where(maskable_BxL, word_BxL + tf.range(batch)[:, None] * length,
                                 batch * length), [-1])
  position_BxL = tf.broadcast_to(tf.range(length)[None, :], [batch, length])
  run_BxL = tf.cumsum(tf.cast(maskable_BxL & ~tf.pad(maskable_BxL[:, :-1], [[0, 0], [1, 0]]),
                              tf.int32), axis=1)

  def per_word(values_BxL, reduce):
    per_segment = reduce(tf.reshape(values_BxL, [-1]), segments, batch * length + 1)[:-1]
    return tf.pad(tf.reshape(per_segment, [batch, length]), [[0, 0], [0, sizes]])

  size_BxW = per_word(tf.ones([batch, length], tf.int32), tf.math.unsorted_segment_sum)
  # Empty segments reduce to the dtype's extremes: zeroed, they are never a valid span anyway.
  first_BxW = tf.where(size_BxW > 0, per_word(position_BxL, tf.math.unsorted_segment_min), 0)
  word_run_BxW = tf.where(size_BxW > 0, per_word(run_BxL, tf.math.unsorted_segment_max), -1)
  index_W = tf.range(length)
  last_KxW = index_W[None, :] + tf.range(sizes)[:, None]  # Word i + n - 1 for n = 1..K.
  shape_ok_BxKxW = ((last_KxW[None] < num_words_B[:, None, None])
                    & (tf.gather(word_run_BxW, last_KxW, axis=1)
                       == word_run_BxW[:, None, :length]))
  tokens_BxKxW = (tf.gather(first_BxW + size_BxW, last_KxW, axis=1)
                  - first_BxW[:, None, :length])
  probabilities_K = tf.constant(probabilities, tf.float32)

  def round_(i, taken_BxW, left_B, span_BxW, _):
    taken_before = tf.pad(tf.cumsum(tf.cast(taken_BxW, tf.int32), axis=1), [[0, 0], [1, 0]])
    free_BxKxW = (tf.gather(taken_before, last_KxW + 1, axis=1)
                  == taken_before[:, None, :length])
    valid_BxKxW = shape_ok_BxKxW & free_BxKxW & (tokens_BxKxW <= left_B[:, None, None])
    fits_BxK = tf.reduce_any(valid_BxKxW, axis=2)
    live_B = tf.reduce_any(fits_BxK, axis=1)
    size_seed, start_seed = tf.unstack(tf.random.experimental.stateless_split(
        tf.random.experimental.stateless_fold_in(seed, i), 2))
    cumulative_BxK = tf.cumsum(tf.where(fits_BxK, probabilities_K[None, :], 0.0), axis=1)
    draw_B = tf.random.stateless_uniform([batch], size_seed) * cumulative_BxK[:, -1]
    # The first length whose cumulative weight exceeds the draw: one that fits.
    size_B = tf.minimum(tf.reduce_sum(tf.cast(cumulative_BxK <= draw_B[:, None], tf.int32),
                                      axis=1), sizes - 1)
    valid_BxW = tf.gather(valid_BxKxW, size_B, batch_dims=1)
    keys_BxW = tf.where(valid_BxW, tf.random.stateless_uniform([batch, length], start_seed),
                        -1.0)
    start_B = tf.argmax(keys_BxW, axis=1, output_type=tf.int32)
    tokens_B = tf.gather(tf.gather(tokens_BxKxW, size_B, batch_dims=1), start_B, batch_dims=1)
    words_BxW = (live_B[:, None] & (index_W[None, :] >= start_B[:, None])
                 & (index_W[None, :] <= (start_B + size_B)[:, None]))
    # Static shapes kept through the loop (gathers lose them).
    return (i + 1, tf.ensure_shape(taken_BxW | tf.pad(words_BxW, [[0, 0], [0, sizes]]),
                                   taken_BxW.shape),
            tf.ensure_shape(left_B - tf.where(live_B, tokens_B, 0), left_B.shape),
            tf.ensure_shape(tf.where(words_BxW, i, span_BxW), span_BxW.shape),
            tf.reduce_any(live_B))

  _, taken_BxW, _, span_BxW, _ = tf.while_loop(
      lambda i, taken, left, span, live: (i <= max_rounds) & live, round_,
      (tf.constant(1), tf.zeros([batch, length + sizes], tf.bool), num_to_mask_B,
       tf.zeros([batch, length], tf.int32), tf.constant(True)))
  word_BxL = tf.maximum(word_BxL, 0)
  chosen_BxL = maskable_BxL & tf.gather(taken_BxW, word_BxL, batch_dims=1)
  return chosen_BxL, tf.where(chosen_BxL, tf.gather(span_BxW, word_BxL, batch_dims=1), 0)


def choose(input_ids_BxL, input_mask_BxL, *, config: MaskingConfig,
           max_predictions_per_seq: int, seed_2):
  """(chosen, span ids), both [B, L]: the positions mask_batch predicts under config.strategy,
  and per chosen position its span's number (unique within the row; 0 elsewhere)."""
  batch, length = tf.shape(input_ids_BxL)[0], tf.shape(input_ids_BxL)[1]
  num_predictions = max_predictions_per_seq
  choice_seed = tf.random.experimental.stateless_split(seed_2, 3)[0]

  special_ids = tf.constant([i for i in (config.cls_id, config.sep_id, config.pad_id,
                                         config.mask_id) if i is not None],
                            input_ids_BxL.dtype)
  is_special_BxL = tf.reduce_any(input_ids_BxL[:, :, None] == special_ids, axis=-1)
  maskable_BxL = tf.logical_and(input_mask_BxL > 0, tf.logical_not(is_special_BxL))
  num_maskable_B = tf.reduce_sum(tf.cast(maskable_BxL, tf.int32), axis=-1)
  # float64 and half-to-even, as Python's round(n * prob) in the original: 30 * 0.15 gives 4.
  wanted_B = tf.cast(tf.round(tf.cast(num_maskable_B, tf.float64) * config.masked_lm_prob),
                     tf.int32)
  num_to_mask_B = tf.minimum(tf.minimum(num_predictions, tf.maximum(1, wanted_B)), num_maskable_B)

  if config.strategy == 'whole_word':
    return _whole_words(input_ids_BxL, maskable_BxL, num_to_mask_B, choice_seed,
                        config.continuation)
  if config.strategy in ('ngram', 'span'):
    return _spans(input_ids_BxL, maskable_BxL, num_to_mask_B, choice_seed, config.continuation,
                  masking.span_probabilities(config.strategy), num_predictions)
  # The num_to_mask highest random scores among maskable tokens: a uniform random subset.
  scores_BxL = tf.where(maskable_BxL,
                        tf.random.stateless_uniform([batch, length], choice_seed), -1.0)
  _, top_BxP = tf.math.top_k(scores_BxL, k=num_predictions)
  keep_BxP = tf.range(num_predictions)[None, :] < num_to_mask_B[:, None]
  chosen_BxL = tf.reduce_any(
      tf.logical_and(tf.one_hot(top_BxP, length, on_value=True, off_value=False),
                     keep_BxP[:, :, None]), axis=1)
  return chosen_BxL, tf.where(chosen_BxL, tf.range(length)[None, :] + 1, 0)


def mask_batch(input_ids_BxL, input_mask_BxL, *, config: MaskingConfig,
               max_predictions_per_seq: int, seed_2):
  """Masks a batch: returns input_ids and the masked_lm_{positions,ids,weights} tensors."""
  batch, length = tf.shape(input_ids_BxL)[0], tf.shape(input_ids_BxL)[1]
  num_predictions = max_predictions_per_seq
  _, action_seed, token_seed = tf.unstack(tf.random.experimental.stateless_split(seed_2, 3))
  chosen_BxL, _ = choose(input_ids_BxL, input_mask_BxL, config=config,
                         max_predictions_per_seq=max_predictions_per_seq, seed_2=seed_2)

  action_BxL = tf.random.stateless_uniform([batch, length], action_seed)
  random_ids_BxL = tf.random.stateless_uniform([batch, length], token_seed, minval=0,
                                               maxval=config.vocab_size, dtype=tf.int32)
  to_mask_BxL = tf.logical_and(chosen_BxL, action_BxL < 0.8)
  to_random_BxL = tf.logical_and(chosen_BxL, action_BxL >= 0.9)
  masked_ids_BxL = tf.where(
      to_mask_BxL, tf.cast(config.mask_id, input_ids_BxL.dtype),
      tf.where(to_random_BxL, tf.cast(random_ids_BxL, input_ids_BxL.dtype), input_ids_BxL))

  # Chosen positions in ascending order, as the original writes them: top_k of (L - position).
  descending_BxL = tf.where(chosen_BxL, length - tf.range(length)[None, :], 0)
  values_BxP, _ = tf.math.top_k(descending_BxL, k=num_predictions)
  valid_BxP = values_BxP > 0
  positions_BxP = tf.where(valid_BxP, length - values_BxP, 0)
  labels_BxP = tf.where(valid_BxP, tf.gather(input_ids_BxL, positions_BxP, batch_dims=1), 0)
  return {
      'input_ids': masked_ids_BxL,
      'masked_lm_positions': tf.cast(positions_BxP, input_ids_BxL.dtype),
      'masked_lm_ids': labels_BxP,
      'masked_lm_weights': tf.cast(valid_BxP, tf.float32),
  }
