"""Small pre-training TFRecord files for the input tests: rows as tf.train.Examples."""

import tensorflow as tf


def write(path, rows):
  """Writes dicts of int lists (float lists for *_weights) as tf.train.Examples."""
  with tf.io.TFRecordWriter(str(path)) as writer:
    for row in rows:
      feature = {k: tf.train.Feature(float_list=tf.train.FloatList(value=v))
                 if k.endswith('_weights') else
                 tf.train.Feature(int64_list=tf.train.Int64List(value=[int(x) for x in v]))
                 for k, v in row.items()}
      writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                   .SerializeToString())


def static_row(i, seq, pred):
  """A statically masked row whose token 1 and first masked id are `i` (rows are told apart
  by them), with one prediction and the next-sentence label i % 2."""
  return {'input_ids': [101, i] + [5] * (seq - 3) + [102], 'input_mask': [1] * seq,
          'segment_ids': [0] * seq, 'masked_lm_positions': [1] + [0] * (pred - 1),
          'masked_lm_ids': [i] + [0] * (pred - 1), 'masked_lm_weights': [1.0] + [0.0] * (pred - 1),
          'next_sentence_labels': [i % 2]}
