"""tf.train.Example bytes and TFRecord framing written with numpy equal TensorFlow's own."""

import numpy as np

from bertjax.records import example_encoding
from bertjax.records import tfrecord
from bertjax.text import fast_tokenizer


def test_encoded_examples_equal_tf_serialisation():
  tf = fast_tokenizer.import_tf()[0]
  ints = np.array([[0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**24 - 1]])
  floats = np.array([[0.0, 1.0, -2.5, 1e-30, 3.4e38]], np.float32)
  record = example_encoding.encode_examples({'a': ints, 'b': floats, 'c': np.array([[5]])})[0]
  expected = tf.train.Example(features=tf.train.Features(feature={
      'a': tf.train.Feature(int64_list=tf.train.Int64List(value=ints[0])),
      'b': tf.train.Feature(float_list=tf.train.FloatList(value=floats[0])),
      'c': tf.train.Feature(int64_list=tf.train.Int64List(value=[5]))}))
  assert tf.train.Example.FromString(record) == expected
  assert len(record) == len(expected.SerializeToString())


def test_batch_of_examples_parses_as_written():
  tf = fast_tokenizer.import_tf()[0]
  rng = np.random.default_rng(0)
  features = {'input_ids': rng.integers(0, 30522, (300, 128)),
              'masked_lm_weights': rng.random((300, 20)).astype(np.float32),
              'next_sentence_labels': rng.integers(0, 2, (300, 1))}
  records = example_encoding.encode_examples(features)
  spec = {'input_ids': tf.io.FixedLenFeature([128], tf.int64),
          'masked_lm_weights': tf.io.FixedLenFeature([20], tf.float32),
          'next_sentence_labels': tf.io.FixedLenFeature([1], tf.int64)}
  parsed = tf.io.parse_example(records, spec)
  for name, values in features.items():
    np.testing.assert_array_equal(parsed[name].numpy(), values)


def test_tfrecord_frames_equal_tf_writer(tmp_path):
  tf = fast_tokenizer.import_tf()[0]
  rng = np.random.default_rng(1)
  records = [rng.integers(0, 256, n).astype(np.uint8).tobytes()
             for n in rng.integers(4, 3000, 500)] + [b'abcd', bytes(4)]
  with tf.io.TFRecordWriter(str(tmp_path / 'tf.tfrecord')) as writer:
    for record in records:
      writer.write(record)
  assert tfrecord.frame(records) == (tmp_path / 'tf.tfrecord').read_bytes()
  assert tfrecord.frame([]) == b''
