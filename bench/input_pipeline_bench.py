"""Input pipeline throughput: batches/s of base-sized batches, static and dynamic masking.

  python bench/input_pipeline_bench.py [--examples=20000] [--global_batch=256] [--seconds=10]

Writes synthetic instances (seq 128, 20 predictions) as TFRecords to a temporary folder, masked
for the static path and unmasked for the dynamic one, then prints for each: host batches/s,
examples/s, the time to the first batch from example 0 and from a resume point deep into an
epoch. One process (this host reads every file). Not a test: figures only.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

# Before TensorFlow: bertjax holds its C++ start-up lines (bertjax/__init__.py).
import bertjax  # noqa: E402,F401

# isort: split
from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bertjax.input import input_pipeline  # noqa: E402
from bertjax.input import masking_tf  # noqa: E402

_EXAMPLES = flags.DEFINE_integer('examples', 20_000, 'Synthetic instances to write.')
_FILES = flags.DEFINE_integer('files', 16, 'TFRecord files to spread them over.')
_GLOBAL_BATCH = flags.DEFINE_integer('global_batch', 256, 'Examples per batch.')
_SEQ_LEN = flags.DEFINE_integer('seq_len', 128, 'max_seq_length.')
_PREDICTIONS = flags.DEFINE_integer('max_predictions', 20, 'max_predictions_per_seq.')
_SECONDS = flags.DEFINE_float('seconds', 10.0, 'Time budget per measurement.')
MASKING = masking_tf.MaskingConfig(vocab_size=30522, mask_id=103, cls_id=101, sep_id=102)


def _ints(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=np.asarray(values, np.int64)))


def _features(ids, seq_len, predictions, rng, masked):
  """One instance as tf.train.Features: [CLS] A [SEP] B [SEP], mostly full length."""
  n = seq_len if rng.random() < 0.9 else int(rng.integers(16, seq_len))
  tokens = np.zeros(seq_len, np.int64)
  tokens[:n] = ids[:n]
  tokens[0], tokens[n // 2], tokens[n - 1] = 101, 102, 102
  segments = (np.arange(seq_len) > n // 2) & (tokens > 0)
  feature = {'input_ids': _ints(tokens), 'input_mask': _ints(tokens > 0),
             'segment_ids': _ints(segments), 'next_sentence_labels': _ints([1])}
  if masked:
    chosen = np.sort(rng.choice(np.arange(1, n // 2), size=min(predictions, n // 2 - 1),
                                replace=False))
    pad = predictions - len(chosen)
    feature['masked_lm_positions'] = _ints(np.pad(chosen, (0, pad)))
    feature['masked_lm_ids'] = _ints(np.pad(tokens[chosen], (0, pad)))
    feature['masked_lm_weights'] = tf.train.Feature(float_list=tf.train.FloatList(
        value=[1.0] * len(chosen) + [0.0] * pad))
  return tf.train.Features(feature=feature)


def _write(folder, masked):
  rng = np.random.default_rng(0)
  writers = [tf.io.TFRecordWriter(os.path.join(folder, f'part-{j:03d}.tfrecord'))
             for j in range(_FILES.value)]
  for i in range(_EXAMPLES.value):
    ids = rng.integers(1000, 30000, _SEQ_LEN.value)
    example = tf.train.Example(features=_features(ids, _SEQ_LEN.value, _PREDICTIONS.value, rng,
                                                  masked))
    writers[i % len(writers)].write(example.SerializeToString())
  for writer in writers:
    writer.close()


def _measure(pattern, masking, seconds, start_example=0):
  """(seconds to build and get the first batch, batches/s over `seconds` after it)."""
  begin = time.perf_counter()
  dataset = input_pipeline.pretrain_dataset(
      pattern, global_batch_size=_GLOBAL_BATCH.value, max_seq_length=_SEQ_LEN.value,
      max_predictions_per_seq=_PREDICTIONS.value, seed=0, masking=masking,
      start_example=start_example, process_index=0, process_count=1)
  batches = dataset.as_numpy_iterator()
  next(batches)
  first = time.perf_counter() - begin
  count, begin = 0, time.perf_counter()
  while time.perf_counter() - begin < seconds:
    next(batches)
    count += 1
  return first, count / max(time.perf_counter() - begin, 1e-9)


def main(_):
  print(f'{_EXAMPLES.value} instances in {_FILES.value} files, seq {_SEQ_LEN.value}, '
        f'{_PREDICTIONS.value} predictions, global batch {_GLOBAL_BATCH.value}, 1 process, '
        f'{os.cpu_count()} CPUs')
  with tempfile.TemporaryDirectory() as root:
    for mode, masking in (('static', None), ('dynamic', MASKING)):
      folder = os.path.join(root, mode)
      os.makedirs(folder)
      begin = time.perf_counter()
      _write(folder, masked=masking is None)
      size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
      print(f'{mode:8s} wrote {size / 2**20:.1f} MiB in {time.perf_counter() - begin:.1f}s')
      pattern = os.path.join(folder, 'part-*')
      first, rate = _measure(pattern, masking, _SECONDS.value)
      # Resume 3.5 epochs in: the offset is reached by seeks, not by reading 70k records.
      resume_at = (_EXAMPLES.value * 7 // 2) // _GLOBAL_BATCH.value * _GLOBAL_BATCH.value
      resumed_first, _ = _measure(pattern, masking, 0, start_example=resume_at)
      print(f'{mode:8s} {rate:7.1f} batches/s  {rate * _GLOBAL_BATCH.value:9.0f} examples/s  '
            f'first batch {first:.2f}s, resumed at example {resume_at} {resumed_first:.2f}s')


if __name__ == '__main__':
  app.run(main)
