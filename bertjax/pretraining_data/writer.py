"""Pre-training TFRecord shards from text files, over worker processes on one host.

Worker w of W reads every input file but keeps documents w, w + W, ... (text_input.py), or,
from a TFDS dataset, reads part w of the split's W even parts (tfds_source.py); it makes their
instances (instances.py) with the seed (random_seed, w), shuffles the serialized records in a
bounded buffer and deals them round-robin to its files: whole shards
(s = w, w + W, ...) when the shard count is a multiple of W, else one part of every shard, the
parts concatenated in worker order at the end (TFRecord files concatenate).

Crash safety. Everything is written in a hidden directory beside the outputs
(`.create_pretraining_data-tmp-<host>-<pid>-<ns>/`), which no shard pattern matches. When every
worker has finished, the JSON report (settings, the vocab's sha256, the counts, and each
shard's bytes and records) is put in place first, then the shards are renamed into place one by
one. A run killed at any moment leaves either the previous complete set, or shards that
disagree with the report beside them, which readers refuse (records/file_set.py) and the embedded
corpus remakes; the next run removes the temporary directories of dead runs. Outputs in an
object store (gs://...) are made in a local temporary directory and then put, the report first,
each shard as one object (through bertjax.files); input files and vocabs may be URLs too.
The same seed and worker count give byte-identical shards. Memory per worker is bounded by the
NotNext pool, the shuffle buffer and one tokenization batch, never by the corpus. Records are
framed by tfrecord.py, so a worker imports TensorFlow only for the fast tokenizer.
"""

import collections
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import platform
import resource
import shutil
import socket
import tempfile
import time
import traceback

import numpy as np

import bertjax
from bertjax import files as files_lib
from bertjax import paths as paths_lib
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import text_input
from bertjax.pretraining_data import tfds_source
from bertjax.records import example_encoding
from bertjax.records import tfrecord
from bertjax.text import tokenizer as tokenization

TOKENIZERS = ('auto', 'fast', 'reference')
# The fast tokenizer needs TensorFlow, whose import takes ~2.5 s per worker; the reference
# tokenizer runs at ~2M tokens (~8 MB) per second. Below this much input per worker, 'auto'
# takes the reference path.
FAST_TOKENIZER_MIN_BYTES = 24 << 20
TEMP_DIR_PREFIX = '.create_pretraining_data-tmp-'
# Above this fraction of [UNK] tokens the vocab does not fit the text (a truncated vocab, the
# wrong casing or script): refused unless --max_unk_fraction is raised.
MAX_UNK_FRACTION = 0.05


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
    if job.tfds_source is None:
      raw = text_input.raw_documents(job.files, job.input_format, job.max_line_bytes, skips,
                                     where, job.worker, job.num_workers)
    else:
      raw = tfds_source.raw_documents(job.tfds_source, job.input_format, job.max_line_bytes,
                                      skips, where, job.worker, job.num_workers)
    documents = text_input.tokenized_documents(raw, encoder, skips, where)
    batches = instances.instance_batches(documents, job.settings, encoder,
                                                (job.random_seed, job.worker), counts)
    rng = np.random.default_rng([job.random_seed, job.worker, 2])
    # The parts live in the run's temporary directory (see _temp_parts): local temp.
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
            'part_records': per_file,
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


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # Alive, another user's.
    return True
  return True


def remove_stale_temp_dirs(directory) -> list[str]:
  """Removes the temporary directories that dead runs on this host left in `directory`.

  A directory of a live run, or of a run on another host (a shared file system), is kept.
  Returns the removed paths.
  """
  removed = []
  host = socket.gethostname()
  try:
    names = os.listdir(directory)  # local temp (a remote output's are in tempfile's folder)
  except FileNotFoundError:
    return removed
  for name in names:
    if not name.startswith(TEMP_DIR_PREFIX):
      continue
    try:
      run_host, pid, _ = name[len(TEMP_DIR_PREFIX):].rsplit('-', 2)
      pid = int(pid)
    except ValueError:
      continue
    if run_host == host and not _pid_alive(pid):
      shutil.rmtree(os.path.join(directory, name), ignore_errors=True)  # local temp
      removed.append(os.path.join(directory, name))
  return removed


def check_outputs(outputs, report_file):
  """Fails before any input is read when an output cannot be written where it is asked for."""
  for path in [*outputs, report_file]:
    if files_lib.is_remote(path):
      files_lib.check_bucket(path)
      if files_lib.isdir(path) and not files_lib.isfile(path):
        raise ValueError(f'output {path} is a folder: give a file path (or, with '
                         '--num_output_shards, a prefix such as gs://bucket/dir/train)')
      continue
    if files_lib.isdir(path):
      raise ValueError(f'output {path} is a directory: give a file path (or, with '
                       '--num_output_shards, a prefix such as DIR/train)')
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not files_lib.exists(parent):
      parent = os.path.dirname(parent)
    if parent and not files_lib.isdir(parent):
      raise ValueError(f'cannot write {path}: {parent} is a file, not a directory')
    if parent and not os.access(parent, os.W_OK | os.X_OK):
      raise ValueError(f'cannot write {path}: no write permission in {parent}')


def check_not_inputs(outputs, inputs):
  """Fails before any work when an output would overwrite a file it is made from (a corpus
  file matched by --input_file's globs, the vocab)."""
  for path in outputs:
    for source in inputs:
      if source and paths_lib.same_path(path, source):
        raise ValueError(f'output {path} is the input {source}: writing it would lose that '
                         'input; name another file')


def _write_json(path, value):
  with open(path, 'w', encoding='utf-8') as f:  # local temp (the run's temporary directory)
    json.dump(value, f, indent=1)
    f.flush()
    os.fsync(f.fileno())


def _put_in_place(staged, destination):
  """Moves a finished file from its temporary directory to where it was asked for: a rename
  beside it, or one object put for a URL."""
  if files_lib.is_remote(destination):
    files_lib.copy(staged, destination)
  else:
    os.replace(staged, destination)  # local temp, renamed into place beside it


def _temp_parts(outputs, num_workers):
  """({output: its hidden temp dir}, per worker the part files it writes), dirs created.

  Whole shards (shard s by worker s % W) when the worker count divides the shard count, else
  a part of every shard per worker, concatenated in _stage. A remote output's temp dir is a
  local one (tempfile), its shards put once complete.
  """
  temp_name = f'{TEMP_DIR_PREFIX}{socket.gethostname()}-{os.getpid()}-{time.time_ns()}'
  made = {}
  for directory in sorted({files_lib.parent(p) for p in outputs}):
    if files_lib.is_remote(directory):
      made[directory] = tempfile.mkdtemp(prefix=temp_name + '-')  # local temp
      continue
    files_lib.makedirs(directory)
    remove_stale_temp_dirs(directory)
    made[directory] = os.path.join(directory, temp_name)
    os.makedirs(made[directory])  # local temp
  temp_dirs = {out: made[files_lib.parent(out)] for out in outputs}

  def part(out, suffix=''):
    return os.path.join(temp_dirs[out], files_lib.name(out) + suffix)

  if len(outputs) % num_workers == 0:
    return temp_dirs, [[part(out) for out in outputs[w::num_workers]]
                       for w in range(num_workers)]
  return temp_dirs, [[part(out, f'.w{w:03d}') for out in outputs] for w in range(num_workers)]


def _run_workers(jobs, skips):
  """The workers' results and their summed counts; raises when any failed or none made data."""
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
  counts.pop('shard_instances', None)
  return results, counts


def _stage(outputs, parts, temp_dirs, results):
  """(each shard's complete file in its temp dir, its record count): whole parts as they are,
  else every worker's part of the shard concatenated in worker order (TFRecords concatenate)."""
  num_workers = len(parts)
  staged, records = [], []
  for s, out in enumerate(outputs):
    if len(outputs) % num_workers == 0:
      staged.append(parts[s % num_workers][s // num_workers])
      records.append(results[s % num_workers]['part_records'][s // num_workers])
      continue
    staged.append(os.path.join(temp_dirs[out], files_lib.name(out)))
    with open(staged[-1], 'wb') as merged:  # local temp
      for w in range(num_workers):
        with open(parts[w][s], 'rb') as part:  # local temp
          shutil.copyfileobj(part, merged, 1 << 22)  # local temp
        os.remove(parts[w][s])  # local temp
    records.append(sum(results[w]['part_records'][s] for w in range(num_workers)))
  return staged, records


def _report(job, vocab_size, outputs, report_file, results, counts, skips, staged, records,
            seconds, source=None):
  """The JSON report: settings, vocab, counts, and each shard's bytes and records (checked by
  readers, records/file_set.py: a set that disagrees is refused)."""
  names = [files_lib.name(o) for o in outputs]
  settings = job.settings
  return {
      'tool': f'bertjax {bertjax.__version__} create_pretraining_data',
      'settings': dataclasses.asdict(settings) | {
          'vocab_file': job.vocab_file or None, 'spm_model_file': job.spm_model_file or None,
          'do_lower_case': job.do_lower_case, 'random_seed': job.random_seed,
          'num_workers': job.num_workers, 'input_format': job.input_format,
          'max_line_bytes': job.max_line_bytes, 'shuffle_buffer': job.shuffle_buffer,
          'tokenizer': 'fast' if job.fast_tokenizer else 'reference'},
      'vocab_sha256': files_lib.sha256(job.vocab_file or job.spm_model_file),
      'vocab_size': vocab_size,
      # The input: text files, or the TFDS dataset (name, split, version, field) read instead.
      **({'tfds_source': source} if source else {'input_files': list(job.files)}),
      'output_files': outputs,
      'output_bytes': dict(zip(names, map(os.path.getsize, staged), strict=True)),  # local temp
      'output_records': dict(zip(names, records, strict=True)),
      'report_file': report_file,
      'features': {k: f'{dtype}{list(shape)}' for k, (shape, dtype) in
                   example_encoding.feature_spec(settings.max_seq_length,
                                                 settings.max_predictions_per_seq,
                                                 settings.static_masking,
                                                 settings.nsp,
                                                 settings.max_instances_per_row).items()},
      'counts': dict(sorted(counts.items())),
      'unk_fraction': round(counts['unk_tokens'] / max(counts['document_tokens'], 1), 6),
      # Token slots of the written rows that hold no instance.
      'padding_fraction': round(
          1 - counts['instance_tokens'] / max(counts['rows'] * settings.max_seq_length, 1), 6),
      'skipped': skips.as_dict(),
      'workers': [{k: r[k] for k in ('worker', 'seconds', 'startup_seconds', 'peak_rss_mb')}
                  | {'instances': r['counts'].get('instances', 0)} for r in results],
      'seconds': seconds,
      'host': platform.node(),
  }


def default_num_workers() -> int:
  """The cores this process may use."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not Linux.
    return os.cpu_count() or 1


def create(input_file, output_file, settings, *, vocab_file=None, spm_model_file=None,
           do_lower_case=True, num_output_shards=0, num_workers=None, random_seed=12345,
           input_format=None, max_line_bytes=100_000, shuffle_buffer=10_000,
           tokenizer='auto', report_file=None, max_unk_fraction=MAX_UNK_FRACTION,
           tfds=None):
  """Writes the shards and the JSON report; returns the report (a dict).

  input_file: comma-separated files and globs, or None with `tfds`, a tfds_source.Source (one
  of the two). input_format: None = 'lines' for files, 'text' for a TFDS dataset.
  num_workers: worker processes; None = the cores available. The bytes written depend on
  (random_seed, num_workers), so pass it explicitly to reproduce files on another machine.
  """
  start = time.perf_counter()
  settings.validate()
  num_workers = default_num_workers() if num_workers is None else num_workers
  if num_workers < 1:
    raise ValueError(f'num_workers={num_workers}: need at least 1')
  if tokenizer not in TOKENIZERS:
    raise ValueError(f'tokenizer={tokenizer!r}: pass one of {TOKENIZERS}')
  if (not vocab_file) == (not spm_model_file):
    raise ValueError('pass exactly one of --vocab_file (WordPiece) and --spm_model_file')
  if (not input_file) == (tfds is None):
    raise ValueError('pass exactly one input: --input_file (text files) or --tfds_name (a '
                     f'TFDS dataset); got {"both" if input_file else "neither"}')
  if input_format is None:
    input_format = 'lines' if input_file else 'text'
  if input_format not in text_input.INPUT_FORMATS:
    raise ValueError(f'input_format={input_format!r}: pass one of {text_input.INPUT_FORMATS}')
  outputs = output_paths(output_file, num_output_shards)
  for path in outputs:  # As given: absolute() drops a local path's last /.
    if path.endswith(('/', os.sep)):  # A bucket would keep an object named `dir/`.
      raise ValueError(f'output {path} ends in /: give a file path (or, with '
                       '--num_output_shards, a prefix such as DIR/train)')
  outputs = [paths_lib.absolute(p) for p in outputs]
  report_file = paths_lib.absolute(
      report_file or (output_file.strip() if num_output_shards else outputs[0]) + '.json')
  check_outputs(outputs, report_file)
  skips = text_input.Skips()
  source = None
  if tfds is not None:
    tfds, source = tfds_source.check(tfds)
    check_not_inputs([*outputs, report_file], [vocab_file, spm_model_file])
    files = []
  else:
    matched = paths_lib.expand_input_patterns(input_file)
    check_not_inputs([*outputs, report_file], [*matched, vocab_file, spm_model_file])
    files = text_input.usable_files(matched, skips)
    if not files:
      raise ValueError(f'no readable text in --input_file={input_file}: {skips.as_dict()}')
  # Fails here, in the parent, on a missing vocab or one whose casing contradicts
  # do_lower_case, before any worker starts.
  vocab = tokenization.from_files(vocab_file or None, spm_model_file or None,
                                  do_lower_case=do_lower_case).vocab
  missing = [t for t in ('[CLS]', '[SEP]', '[MASK]') if t not in vocab]
  if missing:
    raise ValueError(f'the vocab has no {missing}: instances need [CLS], [SEP] and [MASK]')
  input_bytes = sum(files_lib.size(f) for f in files)
  # Both WordPiece paths give the same ids, so this choice changes only the speed. A TFDS
  # source's workers import TensorFlow anyway (tf.data reads it), so auto takes the fast path.
  fast = bool(vocab_file) and (tokenizer == 'fast' or tokenizer == 'auto' and (
      tfds is not None or input_bytes / num_workers > FAST_TOKENIZER_MIN_BYTES))

  temp_dirs, parts = _temp_parts(outputs, num_workers)
  try:
    jobs = [Job(tuple(files), tuple(parts[w]), settings, vocab_file or '', spm_model_file or '',
                do_lower_case, input_format, max_line_bytes, shuffle_buffer, fast, random_seed,
                w, num_workers, tfds) for w in range(num_workers)]
    results, counts = _run_workers(jobs, skips)
    unk_fraction = counts['unk_tokens'] / max(counts['document_tokens'], 1)
    if unk_fraction > max_unk_fraction:
      raise ValueError(
          f'{unk_fraction:.1%} of the tokens are [UNK] (limit {max_unk_fraction:.0%}): the vocab '
          f'({vocab_file or spm_model_file}, {len(vocab)} entries) does not fit this text -- '
          'truncated, or the wrong casing or language? Pass the vocab the model was made with, '
          'or raise --max_unk_fraction if this is intended. No shard was written.')
    staged, records = _stage(outputs, parts, temp_dirs, results)
    report = _report(jobs[0], len(vocab), outputs, report_file, results, counts, skips, staged,
                     records, time.perf_counter() - start, source)
    # The report first, then the shards (module docstring): a kill in between leaves shards
    # that disagree with the report, which readers refuse.
    staged_report = os.path.join(temp_dirs[outputs[0]], files_lib.name(report_file))
    _write_json(staged_report, report)
    if files_lib.is_remote(report_file) or files_lib.parent(report_file) == files_lib.parent(
        outputs[0]):
      _put_in_place(staged_report, report_file)
    else:  # Another local folder: the rename may cross file systems.
      files_lib.write_atomically(report_file, files_lib.read_bytes(staged_report))
    for path, out in zip(staged, outputs, strict=True):
      _put_in_place(path, out)
  finally:
    for directory in set(temp_dirs.values()):
      shutil.rmtree(directory, ignore_errors=True)  # local temp
  return report
