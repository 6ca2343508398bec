"""Pre-training TFRecord shards from text files, over worker processes on one host.

Worker w of W reads every input file but keeps documents w, w + W, ... (text_input.py),
makes their instances (instances.py) with the seed (random_seed, w), shuffles the
serialized records in a bounded buffer and deals them round-robin to its files: whole shards
(s = w, w + W, ...) when the shard count is a multiple of W, else one part of every shard, the
parts concatenated in worker order at the end (TFRecord files concatenate). Everything is
written under temporary names and renamed into place only when every worker has finished, so
a shard that exists is complete, and a failed run leaves none (nor its temporary files).
The same seed and worker count give byte-identical shards. A JSON report beside the shards
records the settings, the vocab's sha256 and the counts. Memory per worker is bounded by the
NotNext pool, the shuffle buffer and one tokenization batch, never by the corpus. Records are
framed by tfrecord.py, so a worker imports TensorFlow only for the fast tokenizer.
"""

import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import multiprocessing
import os
import platform
import resource
import shutil
import time
import traceback

import numpy as np

import bertjax
from bertjax.pretraining_data import example_encoding
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import text_input
from bertjax.pretraining_data import tfrecord
from bertjax.text import tokenizer as tokenization

TOKENIZERS = ('auto', 'fast', 'reference')
# The fast tokenizer needs TensorFlow, whose import takes ~2.5 s per worker; the reference
# tokenizer runs at ~2M tokens (~8 MB) per second. Below this much input per worker, 'auto'
# takes the reference path.
FAST_TOKENIZER_MIN_BYTES = 24 << 20


@dataclasses.dataclass(frozen=True)
class Job:
  """Everything one worker needs; picklable, so it can cross into a spawned process."""

  files: tuple
  shard_parts: tuple  # One part file per output shard.
  settings: instances.Settings
  vocab_file: str
  spm_model_file: str
  do_lower_case: bool
  input_format: str
  max_line_bytes: int
  shuffle_buffer: int
  fast_tokenizer: bool
  random_seed: int
  worker: int
  num_workers: int


def output_paths(output_file, num_output_shards):
  """Shard paths: the comma-separated list, or `prefix-00000-of-0000N` for N shards."""
  outputs = [p.strip() for p in output_file.split(',') if p.strip()]
  if not outputs:
    raise ValueError('--output_file is empty: pass comma-separated files or, with '
                     '--num_output_shards, one prefix')
  if num_output_shards:
    if len(outputs) != 1:
      raise ValueError('--num_output_shards takes one --output_file prefix, got '
                       f'{len(outputs)} files; pass either a list or a prefix with a count')
    return [f'{outputs[0]}-{i:05d}-of-{num_output_shards:05d}' for i in range(num_output_shards)]
  if len(set(outputs)) != len(outputs):
    raise ValueError(f'--output_file lists a file twice: {output_file}')
  return outputs


def _sha256(path):
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def _peak_rss_mb():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux.


def run_worker(job):
  """Writes one worker's share of the instances to its part files; returns its counts.

  Errors are returned, with the file and line being read, rather than raised, so the parent
  can say where the input broke and clean up.
  """
  where, counts, skips = {}, collections.Counter(), text_input.Skips()
  start = time.perf_counter()
  files = []
  try:
    encoder = text_input.cached_encoder(job.vocab_file, job.spm_model_file,
                                               job.do_lower_case, job.fast_tokenizer)
    ready = time.perf_counter()
    raw = text_input.raw_documents(job.files, job.input_format, job.max_line_bytes, skips,
                                          where, job.worker, job.num_workers)
    documents = text_input.tokenized_documents(raw, encoder, skips, where)
    batches = instances.instance_batches(documents, job.settings, encoder,
                                                (job.random_seed, job.worker), counts)
    rng = np.random.default_rng([job.random_seed, job.worker, 2])
    files.extend(open(p, 'wb') for p in job.shard_parts)  # pylint: disable=consider-using-with
    written, buffer = 0, []

    def emit(records):
      """Deals records round-robin to the files, continuing where the last call stopped."""
      nonlocal written
      for s, f in enumerate(files):
        f.write(tfrecord.frame(records[(s - written) % len(files)::len(files)]))
      written += len(records)

    for batch in batches:
      buffer.extend(example_encoding.encode_examples(batch))
      if len(buffer) >= job.shuffle_buffer:
        # Write a random half, keep the other half: records leave in random order.
        order = rng.permutation(len(buffer)).tolist()
        half = len(buffer) // 2
        emit([buffer[j] for j in order[:half]])
        buffer = [buffer[j] for j in order[half:]]
    emit([buffer[j] for j in rng.permutation(len(buffer)).tolist()])
    for f in files:
      f.close()  # Here, so that a full disk is an error of this worker.
    counts['shard_instances'] = written
    return {'worker': job.worker, 'counts': dict(counts), 'skips': skips.as_dict(),
            'startup_seconds': ready - start, 'seconds': time.perf_counter() - start,
            'peak_rss_mb': _peak_rss_mb(), 'error': None}
  except Exception as e:  # pylint: disable=broad-except  # Reported with the place, below.
    place = f"{where['path']}:{where.get('line', '?')}" if 'path' in where else 'start-up'
    return {'worker': job.worker, 'error': f'{type(e).__name__}: {e} (while reading {place})',
            'traceback': traceback.format_exc()}
  finally:
    for f in files:
      f.close()


def _run_jobs(jobs):
  if len(jobs) == 1:  # In this process: no start-up cost, and a debugger sees everything.
    return [run_worker(jobs[0])]
  # spawn, not fork: the parent may have TensorFlow's threads running (tests, notebooks).
  context = multiprocessing.get_context('spawn')
  with concurrent.futures.ProcessPoolExecutor(len(jobs), mp_context=context) as pool:
    futures = [pool.submit(run_worker, job) for job in jobs]
    results = []
    for job, future in zip(jobs, futures, strict=True):
      try:
        results.append(future.result())
      except concurrent.futures.process.BrokenProcessPool as e:
        results.append({'worker': job.worker, 'error': f'the worker process died ({e}): killed '
                        'or out of memory (lower --pool_tokens or --shuffle_buffer)? Or started '
                        "from a script without an `if __name__ == '__main__':` guard?"})
    return results


def _remove(paths):
  for path in paths:
    if os.path.exists(path):
      os.remove(path)


def _write_shards(jobs, outputs, parts, tag, skips):
  """Runs the workers, then moves their parts into place as the shards: all of them or none.

  With a shard count that is a multiple of the worker count each part is a whole shard (only
  renamed); otherwise every worker wrote a part of every shard, concatenated in worker order.
  """
  num_workers = len(jobs)
  whole_shards = len(outputs) % num_workers == 0
  temporary = [p for worker_parts in parts for p in worker_parts] + [
      f'{out}.{tag}' for out in outputs]
  try:
    results = _run_jobs(jobs)
    errors = [r for r in results if r['error']]
    if errors:
      raise RuntimeError('create_pretraining_data failed, no shard written: ' + '; '.join(
          f"worker {r['worker']}: {r['error']}" for r in errors))
    counts = collections.Counter()
    for r in results:
      counts.update(r['counts'])
      skips.merge(r['skips'])
    if not counts['instances']:
      raise ValueError(f'no instances: the input has no usable sentences ({skips.as_dict()})')
    for s, out in enumerate(outputs):
      if not whole_shards:
        with open(f'{out}.{tag}', 'wb') as merged:
          for w in range(num_workers):
            with open(parts[w][s], 'rb') as part:
              shutil.copyfileobj(part, merged, 1 << 22)
      os.replace(f'{out}.{tag}', out)
  finally:
    _remove(temporary)
  return results, counts


def create(input_file, output_file, settings, *, vocab_file=None, spm_model_file=None,
           do_lower_case=True, num_output_shards=0, num_workers=1, random_seed=12345,
           input_format='lines', max_line_bytes=100_000, shuffle_buffer=10_000,
           tokenizer='auto', report_file=None):
  """Writes the shards and the JSON report; returns the report (a dict)."""
  start = time.perf_counter()
  settings.validate()
  if num_workers < 1:
    raise ValueError(f'num_workers={num_workers}: need at least 1')
  if tokenizer not in TOKENIZERS:
    raise ValueError(f'tokenizer={tokenizer!r}: pass one of {TOKENIZERS}')
  if (not vocab_file) == (not spm_model_file):
    raise ValueError('pass exactly one of --vocab_file (WordPiece) and --spm_model_file')
  outputs = output_paths(output_file, num_output_shards)
  report_file = report_file or (output_file.strip() if num_output_shards else outputs[0]) + '.json'
  skips = text_input.Skips()
  files = text_input.usable_files(text_input.expand_input_patterns(input_file),
                                         skips)
  if not files:
    raise ValueError(f'no readable text in --input_file={input_file}: {skips.as_dict()}')
  # Fails here, in the parent, on a missing vocab or one whose casing contradicts
  # do_lower_case, before any worker starts.
  vocab = tokenization.from_files(vocab_file or None, spm_model_file or None,
                                  do_lower_case=do_lower_case).vocab
  missing = [t for t in ('[CLS]', '[SEP]', '[MASK]') if t not in vocab]
  if missing:
    raise ValueError(f'the vocab has no {missing}: instances need [CLS], [SEP] and [MASK]')
  for directory in {os.path.dirname(os.path.abspath(p)) for p in outputs}:
    os.makedirs(directory, exist_ok=True)

  tag = f'tmp-{os.getpid()}-{time.time_ns()}'
  # Whole shards (shard s by worker s % W) when the worker count divides the shard count,
  # else a part of every shard per worker (see _write_shards).
  if len(outputs) % num_workers == 0:
    parts = [[f'{out}.{tag}' for out in outputs[w::num_workers]] for w in range(num_workers)]
  else:
    parts = [[f'{out}.{tag}-w{w:03d}' for out in outputs] for w in range(num_workers)]
  input_bytes = sum(os.path.getsize(f) for f in files)
  # Both WordPiece paths give the same ids, so this choice changes only the speed.
  fast = bool(vocab_file) and (tokenizer == 'fast' or tokenizer == 'auto' and
                               input_bytes / num_workers > FAST_TOKENIZER_MIN_BYTES)
  jobs = [Job(tuple(files), tuple(parts[w]), settings, vocab_file or '', spm_model_file or '',
              do_lower_case, input_format, max_line_bytes, shuffle_buffer, fast, random_seed,
              w, num_workers) for w in range(num_workers)]
  results, counts = _write_shards(jobs, outputs, parts, tag, skips)

  counts.pop('shard_instances', None)
  report = {
      'tool': f'bertjax {bertjax.__version__} create_pretraining_data',
      'settings': dataclasses.asdict(settings) | {
          'vocab_file': vocab_file, 'spm_model_file': spm_model_file,
          'do_lower_case': do_lower_case, 'random_seed': random_seed,
          'num_workers': num_workers, 'input_format': input_format,
          'max_line_bytes': max_line_bytes, 'shuffle_buffer': shuffle_buffer,
          'tokenizer': 'fast' if fast else 'reference'},
      'vocab_sha256': _sha256(vocab_file or spm_model_file),
      'vocab_size': len(vocab),
      'input_files': files,
      'output_files': outputs,
      'report_file': report_file,
      'features': {k: f'{dtype}{list(shape)}' for k, (shape, dtype) in
                   example_encoding.feature_spec(settings.max_seq_length,
                                                 settings.max_predictions_per_seq,
                                                 settings.static_masking).items()},
      'counts': dict(sorted(counts.items())),
      'skipped': skips.as_dict(),
      'workers': [{k: r[k] for k in ('worker', 'seconds', 'startup_seconds', 'peak_rss_mb')}
                  | {'instances': r['counts'].get('instances', 0)} for r in results],
      'seconds': time.perf_counter() - start,
      'host': platform.node(),
  }
  with open(report_file + '.tmp', 'w', encoding='utf-8') as f:
    json.dump(report, f, indent=1)
  os.replace(report_file + '.tmp', report_file)
  return report
