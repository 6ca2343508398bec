"""Where the shards go: output paths, checks before any work, a hidden temporary directory, and
the finished files put in place, the report first.

Crash safety. Everything is written in a hidden directory beside the outputs
(`.create_pretraining_data-tmp-<host>-<pid>-<ns>/`), which no shard pattern matches. When every
worker has finished, the JSON report (creation_report.py) is put in place first, then the shards
are renamed into place one by one. A run killed at any moment leaves either the previous
complete set, or shards that disagree with the report beside them, which readers refuse
(records/file_set.py) and the embedded corpus remakes; the next run removes the temporary
directories of dead runs. Outputs in an object store (gs://...) are made in a local temporary
directory and then put, the report first, each shard as one object (through bertjax.files).
"""

import contextlib
import errno
import json
import os
import shutil
import socket
import tempfile
import time

from bertjax import console
from bertjax import files as files_lib
from bertjax import output_lock
from bertjax import paths as paths_lib
from bertjax import processes
from bertjax.pretraining_data import output_checks

TEMP_DIR_PREFIX = '.create_pretraining_data-tmp-'
# The reports of the sets this process put in place (its interrupt line tells them).
PUT_IN_PLACE = []
# Temporary folders left in place: they hold files of an earlier set that could not be put back.
KEPT = set()


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
    _check_name(outputs[0], 'prefix')
    return [f'{outputs[0]}-{i:05d}-of-{num_output_shards:05d}' for i in range(num_output_shards)]
  if len(set(outputs)) != len(outputs):
    raise ValueError(f'--output_file lists a file twice: {output_file}')
  for path in outputs:
    _check_name(path, 'file')
  return outputs


def _check_name(path, what):
  """Refuses an output (a file, or the prefix of N shards) that ends in a separator or whose
  name is hidden: `DIR/` would write `DIR/-00000-of-00001` and the report `DIR/.json`, which
  readers skip (hidden), so the set would train unchecked; or that holds glob wildcards."""
  name = path.rstrip('/' + os.sep).rsplit('/', 1)[-1].rsplit(os.sep, 1)[-1]
  if path.endswith(('/', os.sep)) or not name:  # A bucket would keep an object named `dir/`.
    raise ValueError(f'--output_file={path} ends in /: give a {what} path (or, with '
                     '--num_output_shards, a prefix such as DIR/train)')
  if name.startswith('.'):
    raise ValueError(f'--output_file={path}: a name starting with "." is hidden and readers '
                     f'skip hidden files; give a {what} name such as DIR/train')
  if '[' in path:  # `tr[1]-*` matches tr1-*, not the files written (a * or ? matches itself).
    raise ValueError(f'--output_file={path}: [ in a path opens a set of characters in the '
                     'pattern training reads the shards by (data.train_files), which would not '
                     f'match the files written; give a {what} path without it')



def resolve(output_file, num_output_shards, report_file, overwrite: bool = False):
  """(the shards' absolute paths, the report's), checked writable before any input is read
  (`overwrite`: an earlier set of other shards on the report may be replaced)."""
  outputs = output_paths(output_file, num_output_shards)  # Names checked as given.
  outputs = [paths_lib.absolute(p) for p in outputs]
  report_file = paths_lib.absolute(
      report_file or (output_file.strip() if num_output_shards else outputs[0]) + '.json')
  # Two spellings of one file (a/x, ./a/x, a link to it) would be two shards written into one.
  first = {}
  for i, path in enumerate([*outputs, report_file]):
    earlier = first.setdefault(paths_lib.file_key(path), (i, path))
    if earlier[0] != i:
      earlier = earlier[1]
      what = 'the report' if i == len(outputs) else 'the output'
      raise ValueError(f'{what} {path} is the same file as the output {earlier}: every shard '
                       'and the report need a file of their own; name another file')
  output_checks.check_outputs(outputs, report_file)
  output_checks.check_earlier_set(outputs, report_file, overwrite)
  output_checks.check_other_sets(outputs, report_file,
                   paths_lib.absolute(output_file.strip()) if num_output_shards else None)
  return outputs, report_file


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
    if run_host == host and not processes.alive(pid):
      shutil.rmtree(os.path.join(directory, name), ignore_errors=True)  # local temp
      removed.append(os.path.join(directory, name))
  return removed


def temp_parts(outputs, num_workers):
  """({output: its hidden temp dir}, per worker the part files it writes), dirs created.

  Whole shards (shard s by worker s % W) when the worker count divides the shard count, else
  a part of every shard per worker, concatenated in stage. A remote output's temp dir is a
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


def stage(outputs, parts, temp_dirs, results):
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


def most_filled_shard_count(records_per_worker) -> int:
  """The largest shard count that, with every smaller one, leaves no shard empty, given the
  records each worker writes (writer.run_worker deals them round-robin from the first of its
  files): a multiple of the W workers gives each worker S / W whole shards, another count gives
  each worker a part of every shard, so shard s is empty when no worker has more than s."""
  workers, fewest, most = (len(records_per_worker), min(records_per_worker),
                           max(records_per_worker))
  count = 1
  while (fewest * workers if (count + 1) % workers == 0 else most) >= count + 1:
    count += 1
  return count


def empty_shards_warning(records, per_worker, num_output_shards) -> str:
  """'' or a warning that some shards (`records`: their record counts) hold no record, more
  shards than the workers' records fill, with the count that leaves none empty: an empty shard
  reads as nothing, but a host given only empty shards has no examples to train on."""
  empty = records.count(0)
  if not empty:
    return ''
  fewer = most_filled_shard_count(per_worker)
  return (f'warning: {empty} of the {len(records)} shards hold no record ({sum(per_worker)} '
          f'records from {len(per_worker)} worker(s), each dealing its own): they read as empty '
          'files, and a training host given only empty ones has nothing to read; for none '
          'empty, pass '
          + (f'--num_output_shards={fewer} or fewer' if num_output_shards else
             f'{fewer} or fewer files in --output_file'))


@contextlib.contextmanager
def one_run(report_file):
  """Held while this run makes the set of `report_file`: a second run on the same set at the
  same time is refused at its start (the later one to finish would replace the first's report,
  leaving its shards unchecked, or mix the two sets' files): output_lock's lock beside the
  report (a flock locally, a lock object with a lease in a bucket). publish checks again that
  no other set was put there meanwhile (a set of another shard count or prefix)."""
  with output_lock.held(report_file, 'create_pretraining_data',
                        f'making the set of {report_file}'):
    yield


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


def publish(report, report_file, staged, outputs, temp_dirs, prefix=None, overwrite=False):
  """Puts the report, then each staged shard, where they were asked for, after checking again
  that no other set was put there while this one was made (one beside this one on another
  prefix has no lock of this one's: one_run). `prefix`: with a shard count. A local earlier
  set's files are moved aside first: an error putting any file in place (a full disk, an
  immutable shard) puts the earlier set back as it was, not a mix of both; an interrupt waits
  for the local renames (or their undoing)."""
  # Files put there meanwhile (no lock is held in a bucket, nor beside another prefix).
  output_checks.check_not_foreign(outputs, report_file, overwrite)
  # The earlier set's shards not among ours (--overwrite, another shard count): moved too.
  replaced = output_checks.check_earlier_set(outputs, report_file, overwrite)
  output_checks.check_other_sets(outputs, report_file, prefix)
  staged_report = os.path.join(temp_dirs[outputs[0]], files_lib.name(report_file))
  _write_json(staged_report, report)
  earlier_report = (files_lib.read_bytes(report_file) if not files_lib.is_remote(report_file)
                    and files_lib.isfile(report_file) else None)
  local = [p for p in [*outputs, report_file] if not files_lib.is_remote(p)]
  # The temporary folder an interrupt removes holds the earlier set's files meanwhile.
  with console.interrupts_held() if local else contextlib.nullcontext():
    _publish(staged, outputs, temp_dirs, replaced, staged_report, report_file, earlier_report)
    PUT_IN_PLACE.append(report_file)  # Before a held interrupt's line, which tells it.


def _publish(staged, outputs, temp_dirs, replaced, staged_report, report_file, earlier_report):
  """publish's renames: the earlier set's local files moved aside, the report put in place,
  then the shards; any error (an interrupt of a caller that handles none, too) undoes them."""
  moved, placed, report_put = [], [], False
  try:
    for i, out in enumerate([*outputs, *replaced]):
      if not files_lib.is_remote(out) and os.path.lexists(out):  # local: the earlier shard
        aside = os.path.join(temp_dirs[outputs[0]] if i >= len(outputs) else temp_dirs[out],
                             f'.earlier-{i}-{files_lib.name(out)}')
        os.rename(out, aside)  # local temp: in its folder (a shard of the earlier set there)
        moved.append((aside, out))
    # The report first, then the shards (module docstring): a kill in between leaves shards
    # that disagree with the report, which readers refuse.
    report_put = True
    if files_lib.is_remote(report_file) or files_lib.parent(report_file) == files_lib.parent(
        outputs[0]):
      _put_in_place(staged_report, report_file)
    else:  # Another local folder: the rename may cross file systems.
      files_lib.write_atomically(report_file, files_lib.read_bytes(staged_report))
    for path, out in zip(staged, outputs, strict=True):
      _put_in_place(path, out)
      placed.append(out)
  except BaseException as e:
    failed = _put_back(placed, moved, report_file if report_put else None, earlier_report)
    if failed:  # Kept where they are (remove_temp_dirs leaves them), said.
      KEPT.update(os.path.dirname(aside) for aside in failed)  # local temp
      raise ValueError(f'the set could not be put in place ({e}), and {len(failed)} files of '
                       f'the earlier set could not be put back: they are in {failed[0]}... '
                       '(move them back by hand)') from e
    where = next((f for f in (getattr(e, 'filename', None), getattr(e, 'filename2', None))
                  if f and TEMP_DIR_PREFIX not in str(f)), report_file)
    if (not isinstance(e, OSError) or e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
        or files_lib.is_remote(str(where))):
      raise  # An interrupt; a full disk, which the writer says its own way; a bucket's error.
    fix = ('remove that set (its shards and report) first, or pass another --output_file'
           if e.errno == errno.EXDEV else  # An earlier set on another file system.
           'make that folder writable (a file\'s immutable flag: lsattr) and rerun')
    raise ValueError(f'{where}: {e.strerror}: the set could not be put in place, and the '
                     f'earlier files there are as they were; {fix}') from None


def _put_back(placed, moved, report_file, earlier_report) -> list[str]:
  """Undoes a publish cut short: this set's shards `placed` removed, the earlier set's files
  back where they were, its local report (or none) too. Returns the files it could not put
  back (moved aside)."""
  failed = []
  for out in placed:
    with contextlib.suppress(OSError):
      os.remove(out)  # local: this run's shard, put in place before the error
  for aside, out in reversed(moved):
    try:
      os.replace(aside, out)  # local temp: moved aside by publish
    except OSError:
      failed.append(aside)
  if report_file is not None and not files_lib.is_remote(report_file):
    with contextlib.suppress(OSError):
      if earlier_report is None:
        os.remove(report_file)  # local: this run's report, its shards not put in place
      else:
        files_lib.write_atomically(report_file, earlier_report)
  return failed


def remove_temp_dirs(temp_dirs):
  """Removes this run's temporary directories, whatever they still hold (but for KEPT)."""
  for directory in set(temp_dirs.values()) - KEPT:
    shutil.rmtree(directory, ignore_errors=True)  # local temp
