"""Dynamic (RoBERTa-style) masked-LM masking of unmasked instances, as a tf.data batch map.

The rule is BERT's: choose round(masked_lm_prob * n) of a row's n maskable tokens (special
tokens and padding are never chosen), at least one and at most max_predictions_per_seq (with
whole-word masking: whole words in a random order, a word that would overflow that budget
skipped, as the original's --do_whole_word_mask); replace
80% of the chosen with [MASK], 10% with a token drawn uniformly from the whole vocabulary (as the
original create_pretraining_data does) and keep 10% unchanged. Outputs carry the static files'
keys (masked_lm_positions ascending, zero-padded, with masked_lm_ids and masked_lm_weights).

Randomness is stateless: a batch's masks are a function of its seed only, and input_pipeline.py
derives that seed from the run seed, the host and the stream position of the batch's first
example, so masks change every epoch and a resumed run draws exactly the masks it would have.
"""

import dataclasses

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
  """The vocabulary facts and rates that dynamic masking needs."""

  vocab_size: int  # Replacement tokens are drawn from [0, vocab_size).
  mask_id: int  # [MASK]
  cls_id: int  # [CLS]
  sep_id: int  # [SEP]
  pad_id: int = 0  # [PAD]
  masked_lm_prob: float = 0.15  # Fraction of maskable tokens chosen for prediction.
  # Whole-word masking: True per vocab id for a word's continuation pieces (WordPiece '##');
  # None masks single pieces.
  continuation: np.ndarray | None = None

  def __post_init__(self):
    ids = {'mask_id': self.mask_id, 'cls_id': self.cls_id, 'sep_id': self.sep_id,
           'pad_id': self.pad_id}
    bad = {name: i for name, i in ids.items() if not 0 <= i < self.vocab_size}
    if bad:
      raise ValueError(f'special token ids {bad} are outside the vocabulary of {self.vocab_size}')
    if not 0.0 < self.masked_lm_prob < 1.0:
      raise ValueError(f'masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}')
    if self.continuation is not None and len(self.continuation) != self.vocab_size:
      raise ValueError(f'continuation has {len(self.continuation)} entries for a vocabulary of '
                       f'{self.vocab_size}')


def continuation_flags(vocab: dict) -> np.ndarray:
  """True for WordPiece continuation pieces ('##...'), indexed by id."""
  flags = np.zeros(len(vocab), bool)
  for token, index in vocab.items():
    flags[index] = token.startswith('##')
  return flags


def _whole_words(input_ids_BxL, maskable_BxL, num_to_mask_B, seed, continuation):
  """Chosen tokens [B, L] under the original's whole-word rule: words in a random order, each
  taken whole when it still fits the budget (else skipped), until the budget is met."""
  batch, length = tf.shape(input_ids_BxL)[0], tf.shape(input_ids_BxL)[1]
  is_piece_BxL = tf.gather(tf.constant(continuation), input_ids_BxL) & maskable_BxL
  previous_maskable_BxL = tf.pad(maskable_BxL[:, :-1], [[0, 0], [1, 0]])
  starts_BxL = maskable_BxL & ~(is_piece_BxL & previous_maskable_BxL)
  word_BxL = tf.cumsum(tf.cast(starts_BxL, tf.int32), axis=1) - 1  # Word index in the row.
  segments_BxL = tf.where(maskable_BxL, word_BxL + tf.range(batch)[:, None] * length,
                          batch * length)  # Non-maskable tokens go to a discarded segment.
  size_BxW = tf.reshape(tf.math.unsorted_segment_sum(
      tf.ones([batch * length], tf.int32), tf.reshape(segments_BxL, [-1]),
      batch * length + 1)[:-1], [batch, length])
  score_BxW = tf.where(size_BxW > 0, tf.random.stateless_uniform([batch, length], seed), -1.0)
  order_BxW = tf.argsort(score_BxW, axis=1, direction='DESCENDING', stable=True)
  sorted_size_WxB = tf.transpose(tf.gather(size_BxW, order_BxW, batch_dims=1))

  def take(count_B, size_B):
    fits_B = (size_B > 0) & (count_B + size_B <= num_to_mask_B)
    return count_B + tf.where(fits_B, size_B, 0)

  counts_WxB = tf.scan(take, sorted_size_WxB, initializer=tf.zeros([batch], tf.int32))
  before_WxB = tf.concat([tf.zeros([1, batch], tf.int32), counts_WxB[:-1]], axis=0)
  taken_BxW = tf.transpose(counts_WxB > before_WxB)
  chosen_word_BxW = tf.gather(taken_BxW, tf.argsort(order_BxW, axis=1), batch_dims=1)
  return maskable_BxL & tf.gather(chosen_word_BxW, tf.maximum(word_BxL, 0), batch_dims=1)


def mask_batch(input_ids_BxL, input_mask_BxL, *, config: MaskingConfig,
               max_predictions_per_seq: int, seed_2):
  """Masks a batch: returns input_ids and the masked_lm_{positions,ids,weights} tensors."""
  batch, length = tf.shape(input_ids_BxL)[0], tf.shape(input_ids_BxL)[1]
  num_predictions = max_predictions_per_seq
  choice_seed, action_seed, token_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed_2, 3))

  special_ids = tf.constant([config.cls_id, config.sep_id, config.pad_id, config.mask_id],
                            input_ids_BxL.dtype)
  is_special_BxL = tf.reduce_any(input_ids_BxL[:, :, None] == special_ids, axis=-1)
  maskable_BxL = tf.logical_and(input_mask_BxL > 0, tf.logical_not(is_special_BxL))
  num_maskable_B = tf.reduce_sum(tf.cast(maskable_BxL, tf.int32), axis=-1)
  # float64 and half-to-even, as Python's round(n * prob) in the original: 30 * 0.15 gives 4.
  wanted_B = tf.cast(tf.round(tf.cast(num_maskable_B, tf.float64) * config.masked_lm_prob),
                     tf.int32)
  num_to_mask_B = tf.minimum(tf.minimum(num_predictions, tf.maximum(1, wanted_B)), num_maskable_B)

  if config.continuation is not None:
    chosen_BxL = _whole_words(input_ids_BxL, maskable_BxL, num_to_mask_B, choice_seed,
                              config.continuation)
  else:
    # The num_to_mask highest random scores among maskable tokens: a uniform random subset.
    scores_BxL = tf.where(maskable_BxL,
                          tf.random.stateless_uniform([batch, length], choice_seed), -1.0)
    _, top_BxP = tf.math.top_k(scores_BxL, k=num_predictions)
    keep_BxP = tf.range(num_predictions)[None, :] < num_to_mask_B[:, None]
    chosen_BxL = tf.reduce_any(
        tf.logical_and(tf.one_hot(top_BxP, length, on_value=True, off_value=False),
                       keep_BxP[:, :, None]), axis=1)

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
