r"""Masking strategies measured on the embedded corpus: masked fraction, span length in words and
pieces, words partly masked, and the time to choose the masks (static, numpy).

  python bench/masking_stats.py [--every=5]

Instances: every `--every`-th train document of Shakespeare + KJV, one unmasked pass at 128
tokens (the embedded vocab), masked by bertjax.pretraining_data.masking.choose under the 15%
budget capped at 20. The first span of a full row (budget 19) shows the drawn length
distribution; over all spans the budget's end shortens some.
"""

import collections
import itertools
import time

from absl import app
from absl import flags
import numpy as np

from bertjax import job_lines
from bertjax.pretraining_data import embedded
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import masking
from bertjax.pretraining_data import text_input

_EVERY = flags.DEFINE_integer('every', 5, 'Use every N-th train document.')


def main(argv):
  del argv
  start = time.perf_counter()
  encoder = text_input.Encoder(str(embedded.vocab_path()), fast=False)
  docs = itertools.islice(embedded.documents('train'), 0, None, _EVERY.value)
  tokenized = text_input.tokenized_documents(docs, encoder, text_input.Skips(), {})
  settings = instances.Settings(max_seq_length=128, max_predictions_per_seq=20, dupe_factor=1,
                                static_masking=False)
  batches = list(instances.instance_batches(tokenized, settings, encoder, (0,),
                                            collections.Counter()))
  ids = np.concatenate([b['input_ids'] for b in batches])
  mask = np.concatenate([b['input_mask'] for b in batches]) > 0
  maskable = mask & (ids != encoder.cls_id) & (ids != encoder.sep_id)
  budget = masking.num_to_predict(maskable.sum(axis=1), 0.15, 20)
  after = np.zeros_like(maskable)
  after[:, 1:] = maskable[:, :-1]
  word_of = np.cumsum(maskable & ~(encoder.continuation[ids] & after), axis=1) - 1
  print(f'{len(ids)} instances, {maskable.sum()} maskable tokens')
  print('| strategy | masked fraction | mean span, words (all / first of a full row) | '
        'mean span, pieces | words partly masked | choose time |')
  print('|---|---|---|---|---|---|')
  metrics = []
  for strategy in masking.STRATEGIES:
    tick = time.perf_counter()
    chosen, span_ids = masking.choose(ids, maskable, np.random.default_rng(1), strategy=strategy,
                                      budget=budget, continuation=encoder.continuation)
    seconds = time.perf_counter() - tick
    rows, cols = np.nonzero(chosen)
    span_key = rows * 1024 + span_ids[rows, cols]
    pieces = np.unique(span_key, return_counts=True)[1]
    words = np.unique(np.stack([span_key, word_of[rows, cols]]), axis=1)[0]
    words_per_span = np.unique(words, return_counts=True)[1]
    first = []  # Spans are numbered in the order taken (wordpiece/whole_word: by position).
    for row in np.flatnonzero(budget >= 19):
      row_spans = span_ids[row][chosen[row]]
      first_span = row_spans.min()
      first.append(len(np.unique(word_of[row][chosen[row]][row_spans == first_span])))
    word_key = rows * 1024 + word_of[rows, cols]
    taken_pieces = collections.Counter(word_key.tolist())
    all_rows, all_cols = np.nonzero(maskable)
    word_sizes = collections.Counter((all_rows * 1024 + word_of[all_rows, all_cols]).tolist())
    partial = sum(n < word_sizes[k] for k, n in taken_pieces.items())
    fraction = chosen.sum() / maskable.sum()
    print(f'| {strategy} | {fraction:.4f} | {words_per_span.mean():.2f} / {np.mean(first):.2f} | '
          f'{pieces.mean():.2f} | {partial} of {len(word_sizes)} | {seconds:.2f} s |')
    metrics.append((f'{strategy} words/span', f'{words_per_span.mean():.2f}'))
  job_lines.summary('masking_stats', time.perf_counter() - start, metrics=metrics)


if __name__ == '__main__':
  app.run(main)
