"""Pre-training TFRecord shards from text files, over worker processes on one host.

Worker w of W reads every input file but keeps documents w, w + W, ... (text_input.py), or,
from a TFDS dataset, reads part w of the split's W even parts (tfds_source.py); it makes their
instances (instances.py) with the seed (random_seed, w), shuffles the serialized records in a
bounded buffer and deals them round-robin to its files: whole shards
(s = w, w + W, ...) when the shard count is a multiple of W, else one part of every shard, the
parts concatenated in worker order at the end (TFRecord files concatenate).

Where the shards go, crash-safe through a hidden temporary directory, is shard_outputs.py; the
JSON report beside them is creation_report.py. Input files and vocabs may be URLs.
The same seed and worker count give byte-identical shards. Memory per worker is bounded by the
NotNext pool, the shuffle buffer and one tokenization batch, never by the corpus. Records are
framed by tfrecord.py, so a worker imports TensorFlow only for the fast tokenizer.
"""

import collections
import concurrent.futures
import contextlib
import ctypes
import dataclasses
import errno
import functools
import logging as std_logging
import multiprocessing
import os
import resource
import signal
import sys
import time
import traceback

import numpy as np

from bertjax import console
from bertjax import files as files_lib
from bertjax import job_lines
from bertjax import paths as paths_lib
from bertjax.pretraining_data import creation_args
from bertjax.pretraining_data import creation_report
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import output_checks
from bertjax.pretraining_data import shard_outputs
from bertjax.pretraining_data import text_input
from bertjax.pretraining_data import tfds_source
from bertjax.records import example_encoding
from bertjax.records import tfrecord
from bertjax.text import corpus_lines


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
  tfds_source: object = None  # A tfds_source.Source read instead of `files`.
  sizes: tuple = ()  # Each file's bytes when the run checked it (one changed since is refused).


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
    read = functools.partial(_tell, job, 0)
    if job.tfds_source is None:
      raw = text_input.raw_documents(job.files, job.input_format, job.max_line_bytes, skips,
                                     where, job.worker, job.num_workers, read, job.sizes)
    else:
      raw = tfds_source.raw_documents(job.tfds_source, job.input_format, job.max_line_bytes,
                                      skips, where, job.worker, job.num_workers, read)
    documents = text_input.tokenized_documents(raw, encoder, skips, where)
    batches = instances.instance_batches(documents, job.settings, encoder,
                                                (job.random_seed, job.worker), counts)
    rng = np.random.default_rng([job.random_seed, job.worker, 2])
    # The parts live in the run's temporary directory (shard_outputs.temp_parts): local temp.
    files.extend(open(p, 'wb') for p in job.shard_parts)  # local temp  # pylint: disable=R1732
    written, buffer, per_file = 0, [], [0] * len(files)

    def emit(records):
      """Deals records round-robin to the files, continuing where the last call stopped."""
      nonlocal written
      for s, f in enumerate(files):
        share = records[(s - written) % len(files)::len(files)]
        f.write(tfrecord.frame(share))
        per_file[s] += len(share)
      written += len(records)

    for batch in batches:
      _tell(job, 1, counts['instances'])
      buffer.extend(example_encoding.encode_examples(batch))
      if len(buffer) >= job.shuffle_buffer:
        # Write a random half, keep the other half: records leave in random order.
        order = rng.permutation(len(buffer)).tolist()
        half = len(buffer) // 2
        emit([buffer[j] for j in order[:half]])
        buffer = [buffer[j] for j in order[half:]]
    emit([buffer[j] for j in rng.permutation(len(buffer)).tolist()])
    _tell(job, 1, counts['instances'])
    for f in files:
      f.close()  # Here, so that a full disk is an error of this worker.
    counts['shard_instances'] = written
    return {'worker': job.worker, 'counts': dict(counts), 'skips': skips.as_dict(),
            'file_lines': skips.file_lines, 'part_records': per_file,
            'startup_seconds': ready - start, 'seconds': time.perf_counter() - start,
            'peak_rss_mb': _peak_rss_mb(), 'error': None}
  except Exception as e:  # pylint: disable=broad-except  # Reported with the place, below.
    place = f"{where['path']}:{where.get('line', '?')}" if 'path' in where else 'start-up'
    error = (disk_full(e, job.shard_parts[0]) if isinstance(e, OSError) and e.errno in _DISK_FULL
             else f'{type(e).__name__}: {e} (while reading {place})')
    return {'worker': job.worker, 'error': error,
            'traceback': traceback.format_exc()}
  finally:
    for f in files:
      f.close()


_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def disk_full(e, path) -> str:
  """What to do when writing `path` (or its temporary files beside it) hit a full disk."""
  return (f'the disk is full writing {files_lib.parent(path)} ({e.strerror}): free space there '
          'or pass an --output_file on another disk; an earlier set there is kept')


# How far each worker is, for the parent's progress line: a shared array of [input read (bytes,
# or TFDS examples), instances made] per worker, each pair written by its worker alone (no
# lock); in a worker process set by _start_worker, in-process by _run_jobs, with its poll.
_SHARED = {'counts': None, 'poll': None}


def _tell(job, slot, value):
  """Records one of this worker's counts where the parent reads them (slot 0: input read)."""
  counts, poll = _SHARED['counts'], _SHARED['poll']
  if counts is not None:
    counts[2 * job.worker + slot] = int(value)
  if poll is not None:  # One worker, in the parent's process: the line from here.
    poll()


def _poller(counts, jobs, progress):
  """The parent's look at the shared counts: the progress line of their sums (files: the mean
  worker's bytes read, since every worker reads every file; TFDS: the examples of all parts)."""
  per = len(jobs) * (1 << 20) if jobs[0].tfds_source is None else 1

  def poll():
    if progress is not None:
      progress.update(sum(counts[0::2]) / per, f'; {sum(counts[1::2]):,} instances made')
  return poll


def _progress_line(source, input_bytes):
  """The line of a run that reads text files (their bytes) or a TFDS split (`source`, check()'s
  description: its examples, where the builder knows how many; else the count alone)."""
  if source is None:
    return job_lines.Progress('create_pretraining_data', input_bytes / (1 << 20),
                            'MiB of input read', rate_unit='MiB')
  return job_lines.Progress('create_pretraining_data', source['num_examples'], 'examples read',
                          rate_unit='examples')


def _start_worker(parent_pid, counts):
  """A worker process's start: bound to its parent's life, its counts in the shared array, its
  libraries' lines filtered as the command's own console filters them (TFDS's reader)."""
  _die_with_parent(parent_pid)
  _SHARED['counts'] = counts
  std_logging.getLogger('absl').addFilter(console.ConsoleFilter())


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent_pid):
  """A worker's start: it ends when the process that started it ends, however that ends
  (SIGKILL from a scheduler or the OOM killer, which runs no clean-up), instead of writing
  on for hours into a folder nobody reads; Ctrl-C is the parent's to handle (it ends the
  workers), so a terminal's Ctrl-C to the process group prints no worker tracebacks."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  if sys.platform.startswith('linux'):
    try:
      libc = ctypes.CDLL(None, use_errno=True)
      libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # No prctl (another libc): the check below still runs.
      pass
  if os.getppid() != parent_pid:  # The parent died before prctl: no signal will come.
    os._exit(1)  # pylint: disable=protected-access


def _kill_workers(pool):
  """Ends the pool's worker processes at once (an interrupt, an error while waiting)."""
  for process in list((getattr(pool, '_processes', None) or {}).values()):
    try:
      process.kill()
    except (OSError, ValueError):  # Already gone, or closed.
      pass


def _run_jobs(jobs, progress=None):
  """Every job's result, in order; `progress` (a job_lines.Progress) shows how far they are."""
  # spawn, not fork: the parent may have TensorFlow's threads running (tests, notebooks).
  context = multiprocessing.get_context('spawn')
  if len(jobs) == 1:  # In this process: no start-up cost, and a debugger sees everything
    counts = [0, 0]  # (and no shared memory, which some containers lack).
    _SHARED.update(counts=counts, poll=_poller(counts, jobs, progress))
    try:
      return [run_worker(jobs[0])]
    finally:
      _SHARED.update(counts=None, poll=None)
  counts = context.Array('q', 2 * len(jobs), lock=False)
  poll = _poller(counts, jobs, progress)
  pool = concurrent.futures.ProcessPoolExecutor(
      len(jobs), mp_context=context, initializer=_start_worker, initargs=(os.getpid(), counts))
  # A Ctrl-C or SIGTERM (console.exit_on_interrupt, which exits without unwinding) or a
  # KeyboardInterrupt here ends the workers too; a SIGKILL to this process, _die_with_parent.
  with pool, console.at_interrupt(lambda: _kill_workers(pool)):
    try:
      futures = [pool.submit(run_worker, job) for job in jobs]
      pending = set(futures)
      while pending:  # The counts polled while the workers run.
        pending = concurrent.futures.wait(pending, min(max(job_lines.PROGRESS_SECONDS, 0.1), 1))[1]
        poll()
      results = []
      for job, future in zip(jobs, futures, strict=True):
        try:
          results.append(future.result())
        except concurrent.futures.process.BrokenProcessPool as e:
          results.append({'worker': job.worker, 'error': f'the worker process died ({e}): '
                          'killed or out of memory (lower --pool_tokens or --shuffle_buffer)? '
                          "Or started from a script without an `if __name__ == '__main__':` "
                          'guard?'})
    except BaseException:
      _kill_workers(pool)  # Else leaving the block waits for them to finish.
      raise
    return results


def _run_workers(jobs, skips, progress=None):
  """The workers' results and their summed counts; raises when any failed or none made data."""
  results = _run_jobs(jobs, progress)
  errors = [r for r in results if r['error']]
  if errors:
    raise RuntimeError('create_pretraining_data failed, no shard written: ' + '; '.join(
        f"worker {r['worker']}: {r['error']}" for r in errors))
  counts = collections.Counter()
  for r in results:
    counts.update(r['counts'])
    skips.merge(r['skips'])
    for path, (lines, invalid) in r.get('file_lines', {}).items():
      skips.add_file_lines(path, lines, invalid)
  _check_utf8(skips, from_tfds=jobs[0].tfds_source is not None)
  if not counts['instances']:
    raise ValueError('no instances: the input has no usable sentences'
                     + (f' ({skips.described()})' if skips.counts else ' (its lines hold no text)')
                     + (': pass a larger --max_line_bytes to read the lines skipped for their '
                        'length' if skips.counts.get('line_too_long') else ''))
  counts.pop('shard_instances', None)
  return results, counts


def _check_utf8(skips, from_tfds: bool = False):
  """Refuses an input file (or a TFDS split's text field) whose lines are mostly not UTF-8
  (another encoding, corpus_lines.check_utf8's rule, learn_vocab's too): read line by line,
  most of its text would be skipped and the data made from the rest. Per file, all workers
  summed."""
  fix = ('re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8), or leave it out'
         if not from_tfds else
         'pick the field that holds the text (--tfds_text_field), or another dataset')
  for path, (lines, invalid) in skips.file_lines.items():
    line = next((p for p in skips.examples.get('invalid_utf8', []) if p.startswith(f'{path}:')),
                path)
    corpus_lines.check_utf8(path, lines, invalid, line, f'{fix}. No shard was written.')


def _inputs(input_file, tfds, outputs, vocab_files_given, skips):
  """(the text files to read, the TFDS source checked, its description for the report), refused
  where an output would overwrite an input or the vocab; unusable files counted in `skips`."""
  if tfds is not None:
    tfds, source = tfds_source.check(tfds)
    output_checks.check_not_inputs(outputs, vocab_files_given)
    return [], tfds, source
  matched = [paths_lib.absolute(p) for p in paths_lib.expand_input_patterns(input_file)]
  vocabs = [v for v in vocab_files_given if v]
  files = text_input.usable_files(matched, skips, vocabs)
  # The text read (a shard of an earlier set that the glob matches is not: check_not_foreign).
  output_checks.check_not_inputs(outputs, [*files, *vocabs])
  if not files:
    raise ValueError(f'no readable text in --input_file={input_file}: {skips.described()}')
  return files, None, None


def create(input_file, output_file, settings, *, vocab_file=None, spm_model_file=None,
           do_lower_case=True, num_output_shards=0, num_workers=None, random_seed=12345,
           input_format=None, max_line_bytes=100_000, shuffle_buffer=10_000,
           tokenizer='auto', report_file=None, max_unk_fraction=creation_args.MAX_UNK_FRACTION,
           tfds=None, overwrite=False):
  """Writes the shards and the JSON report; returns the report (a dict).

  input_file: comma-separated files and globs, or None with `tfds`, a tfds_source.Source (one
  of the two). input_format: None = 'lines' for files, 'text' for a TFDS dataset.
  num_workers: worker processes; None = the cores available. The bytes written depend on
  (random_seed, num_workers), so pass it explicitly to reproduce files on another machine.
  overwrite: replace a set on the same output made otherwise (creation_report.check_replaced).
  """
  start = time.perf_counter()
  settings.validate()
  # The report names absolute paths (a relative one means another file after a cd).
  vocab_file, spm_model_file = (paths_lib.absolute(p) if p else p
                                for p in (vocab_file, spm_model_file))
  num_workers, input_format = creation_args.checked_workers_and_format(num_workers, input_format,
                                                                       input_file)
  creation_args.check_numbers(random_seed, num_output_shards or 0, max_line_bytes,
                              max_unk_fraction, shuffle_buffer)
  creation_args.check_sources(tokenizer, vocab_file, spm_model_file, input_file, tfds)
  outputs, report_file = shard_outputs.resolve(output_file, num_output_shards, report_file,
                                               overwrite)
  skips = text_input.Skips()
  files, tfds, source = _inputs(input_file, tfds, [*outputs, report_file],
                                [vocab_file, spm_model_file], skips)
  output_checks.check_not_foreign(outputs, report_file, overwrite)  # Said after 'is the input'.
  vocab = creation_args.checked_vocab(vocab_file, spm_model_file, do_lower_case, settings)
  sizes = tuple(files_lib.size(f) for f in files)
  input_bytes = sum(sizes)
  # Both WordPiece paths give the same ids, so this choice changes only the speed. A TFDS
  # source's workers import TensorFlow anyway (tf.data reads it), so auto takes the fast path.
  fast = bool(vocab_file) and (tokenizer == 'fast' or tokenizer == 'auto' and (
      tfds is not None or input_bytes / num_workers > creation_args.FAST_TOKENIZER_MIN_BYTES))

  held = contextlib.ExitStack()
  held.enter_context(shard_outputs.one_run(report_file))  # Released last, by held.close().
  temp_dirs = {}
  try:
    job = Job(tuple(files), (), settings, vocab_file or '', spm_model_file or '', do_lower_case,
              input_format, max_line_bytes, shuffle_buffer, fast, random_seed, 0, num_workers,
              tfds, sizes)
    creation_report.check_replaced(report_file, job, source, overwrite)
    temp_dirs, parts = shard_outputs.temp_parts(outputs, num_workers)
    for directory in sorted(set(temp_dirs.values())):  # An interrupt removes them too.
      held.enter_context(console.temporary(directory))
    jobs = [dataclasses.replace(job, shard_parts=tuple(parts[w]), worker=w)
            for w in range(num_workers)]
    progress = _progress_line(source, input_bytes)
    results, counts = _run_workers(jobs, skips, progress)
    creation_report.check_counts(counts, len(vocab), vocab_file or spm_model_file,
                                 max_unk_fraction, num_workers)
    try:
      staged, records = shard_outputs.stage(outputs, parts, temp_dirs, results)
      report = creation_report.build(jobs[0], len(vocab), outputs, report_file, results,
                                     counts, skips, staged, records,
                                     time.perf_counter() - start, source)
      shard_outputs.publish(report, report_file, staged, outputs, temp_dirs,
                            paths_lib.absolute(output_file.strip()) if num_output_shards else None,
                            overwrite)
      warnings = (shard_outputs.empty_shards_warning(
          records, [r['counts']['shard_instances'] for r in results], num_output_shards),
                  creation_report.masking_rate_warning(settings, counts),
                  creation_report.long_lines_warning(skips, max_line_bytes))
      for warning in filter(None, warnings):  # Written (such sets read fine); said last.
        print(warning, file=sys.stderr)
    except OSError as e:
      if e.errno not in _DISK_FULL:
        raise
      raise ValueError(f'{disk_full(e, outputs[0])}. No shard was written.') from None
  finally:
    shard_outputs.remove_temp_dirs(temp_dirs)
    held.close()
  return report
