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
import fnmatch
import json
import os
import re
import shutil
import socket
import tempfile
import time

from bertjax import console
from bertjax import files as files_lib
from bertjax import output_lock
from bertjax import paths as paths_lib
from bertjax import processes
from bertjax.records import file_set

TEMP_DIR_PREFIX = '.create_pretraining_data-tmp-'
# The reports of the sets this process put in place (its interrupt line tells them).
PUT_IN_PLACE = []


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
  check_outputs(outputs, report_file)
  check_earlier_set(outputs, report_file, overwrite)
  check_other_sets(outputs, report_file,
                   paths_lib.absolute(output_file.strip()) if num_output_shards else None)
  return outputs, report_file


def _shard_prefix(report_path, listed):
  """The prefix of a set of N shards (`<prefix>-0000i-of-0000N`, its report `<prefix>.json`)
  from its report, or None for a list of files."""
  prefix = files_lib.name(report_path)[:-len('.json')]
  shard = re.compile(re.escape(prefix) + r'-\d{5}-of-\d{5}')
  if listed and all(shard.fullmatch(name) for name in listed):
    return prefix
  return None


def check_other_sets(outputs, report_file, prefix=None):
  """Fails before any work when this set would break or blur another set's report beside it:
  an output that another report lists (overwritten, both sets would be refused), or a prefix
  that overlaps another set's so that one's `<prefix>-*` glob, the readers' pattern, would
  read both sets (`train-*` also matching `train-eval-*`). `prefix`: this run's, with
  --num_output_shards."""
  ours = {}
  for out in outputs:
    ours.setdefault(files_lib.parent(out), set()).add(files_lib.name(out))
  ours_report = paths_lib.file_key(report_file)
  for directory, names in sorted(ours.items()):
    try:
      reports = file_set.reports_in(directory)
    except OSError:
      continue  # No folder yet (made later), or unreadable: nothing there to break.
    for report_path, report in sorted(reports.items()):
      if paths_lib.file_key(report_path) == ours_report:
        continue  # This set's own report: check_earlier_set.
      listed = [files_lib.name(p) for p in report['output_files'] if isinstance(p, str)]
      taken = sorted(names & set(listed))
      if taken:
        raise ValueError(
            f'{files_lib.join(directory, taken[0])} is a shard of the set that {report_path} '
            'lists: writing it would leave both sets unreadable; pick another --output_file')
      other = _shard_prefix(report_path, listed)
      mine = files_lib.name(prefix) if prefix and files_lib.parent(prefix) == directory else None
      clash = None
      if other is not None:
        clash = next((n for n in sorted(names) if fnmatch.fnmatchcase(n, f'{other}-*')), None)
      if clash:
        raise ValueError(
            f'{report_path}\'s shards are read as {other}-*, which would also match this '
            f'set\'s {files_lib.join(directory, clash)} (training on both sets): pick an '
            f'--output_file whose name does not start with "{other}-", e.g. '
            f'{other}_{clash[len(other) + 1:].split("-")[0]}, or write it to another folder')
      clash = mine and next((n for n in listed if fnmatch.fnmatchcase(n, f'{mine}-*')), None)
      if clash:
        raise ValueError(
            f'this set\'s shards would be read as {mine}-*, which also matches '
            f'{files_lib.join(directory, clash)} of the set that {report_path} lists '
            f'(training on both sets): pick another --output_file prefix, or write it to '
            'another folder')


def check_earlier_set(outputs, report_file, overwrite: bool = False) -> list[str]:
  """Fails when the report would replace that of another set of shards that is still there
  (another shard count or list on the same prefix): those shards would be left without the
  report that their readers check them against. Before any work, and again before publishing.
  With `overwrite`, that set's shards beside the report are returned instead (publish moves
  them away with the rest of the set); shards it lists in another folder (a report copied or
  linked from there) are never replaced."""
  earlier = file_set.report_at(report_file)
  if earlier is None:
    return []  # No report yet, or not one of ours (check_not_foreign): no shard of it checked.
  ours = {paths_lib.file_key(out) for out in outputs}
  kept = [path for path in earlier['output_files'] if isinstance(path, str)
          and paths_lib.file_key(path) not in ours and files_lib.exists(path)]
  folder = paths_lib.file_key(files_lib.parent(report_file))
  away = [path for path in kept if paths_lib.file_key(files_lib.parent(path)) != folder]
  if away:
    raise ValueError(
        f'{report_file} lists shards in another folder ({away[0]}: a report copied or linked '
        'from there?): writing this set would leave them unchecked. Remove that report if the '
        'set it lists has its own, or pass another --output_file.')
  if kept and overwrite and not files_lib.is_remote(report_file):
    return kept
  if kept:
    raise ValueError(
        f'{report_file} is the report of another set of shards, still there ({len(kept)} not '
        f'among this run\'s outputs, e.g. {kept[0]}): writing this set would leave them '
        'unchecked. Pass --overwrite to replace that set (its shards and report), or another '
        '--output_file.')
  return []


def check_not_foreign(outputs, report_file, overwrite: bool):
  """Fails before any work where an output is a file that no set made here claims (its report
  at `report_file` does not list it: a file of the user's, a stray shard), unless `overwrite`;
  and always where an output is another set's report (its shards would be left unchecked)."""
  earlier = file_set.report_at(report_file) or {}
  sizes = earlier.get('output_bytes') if isinstance(earlier.get('output_bytes'), dict) else {}
  # A shard the report lists, of the size it records: the set's own (a user's file put there
  # since is not).
  listed = {paths_lib.file_key(p) for p in earlier.get('output_files', ())
            if isinstance(p, str) and files_lib.exists(p)
            and sizes.get(files_lib.name(p), files_lib.size(p)) == files_lib.size(p)}
  for path in outputs:
    if not files_lib.exists(path) or paths_lib.file_key(path) in listed:
      continue
    if (other := file_set.report_at(path)) is not None:
      raise ValueError(f'output {path} is the report of a set of {len(other["output_files"])} '
                       'shards: writing over it would leave them unchecked (every reader '
                       'refuses them); pick another --output_file')
    if not overwrite:
      raise ValueError(f'output {path} exists and is no shard of a set made here ({report_file} '
                       'does not list it, or not at its size): writing it would lose that file; '
                       'pass --overwrite to replace it, or another --output_file')
  if files_lib.exists(report_file) and not earlier and not overwrite:
    raise ValueError(f'{report_file}, where this set\'s report goes, exists and is no report of '
                     'create_pretraining_data: writing it would lose that file; pass --overwrite '
                     'to replace it, or another --output_file')


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
  immutable shard) puts the earlier set back as it was, not a mix of both."""
  replaced = check_earlier_set(outputs, report_file, overwrite)  # Its shards not ours: moved.
  check_other_sets(outputs, report_file, prefix)
  staged_report = os.path.join(temp_dirs[outputs[0]], files_lib.name(report_file))
  _write_json(staged_report, report)
  local = not files_lib.is_remote(report_file)
  earlier_report = (files_lib.read_bytes(report_file) if local and files_lib.isfile(report_file)
                    else None)
  moved, placed = [], []  # (aside, where) of the earlier set's files; this set's shards.
  # An interrupt waits for the renames (or their undoing): it removes the temporary folder,
  # which holds the earlier set's files meanwhile.
  with console.interrupts_held():
    _publish(staged, outputs, temp_dirs, replaced, staged_report, report_file, local,
             earlier_report, moved, placed)
    PUT_IN_PLACE.append(report_file)  # Before a held interrupt's line, which tells it.


def _publish(staged, outputs, temp_dirs, replaced, staged_report, report_file, local,
             earlier_report, moved, placed):
  """publish's renames: the earlier set's files moved aside, the report put in place, then
  the shards; an error undoes them."""
  report_put = False
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
    if not local or files_lib.parent(report_file) == files_lib.parent(outputs[0]):
      _put_in_place(staged_report, report_file)
    else:  # Another local folder: the rename may cross file systems.
      files_lib.write_atomically(report_file, files_lib.read_bytes(staged_report))
    for path, out in zip(staged, outputs, strict=True):
      _put_in_place(path, out)
      placed.append(out)
  except OSError as e:
    if not local:
      raise
    _put_back(placed, moved, report_file if report_put else None, earlier_report)
    if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
      raise  # The writer says a full disk its own way.
    where = next((f for f in (e.filename, e.filename2)  # The file in place, not a hidden one.
                  if f and TEMP_DIR_PREFIX not in str(f)), report_file)
    fix = ('remove that set (its shards and report) first, or pass another --output_file'
           if e.errno == errno.EXDEV else  # An earlier set on another file system.
           'make that folder writable (a file\'s immutable flag: lsattr) and rerun')
    raise ValueError(f'{where}: {e.strerror}: the set could not be put in place, and the '
                     f'earlier files there are as they were; {fix}') from None


def _put_back(placed, moved, report_file, earlier_report):
  """Undoes a publish cut short: this set's shards `placed` removed, the earlier set's files
  back where they were, its report (or none) too."""
  for out in placed:
    with contextlib.suppress(OSError):
      os.remove(out)  # local: this run's shard, put in place before the error
  for aside, out in reversed(moved):
    with contextlib.suppress(OSError):
      os.replace(aside, out)  # local temp: moved aside by publish
  if report_file is not None:
    with contextlib.suppress(OSError):
      if earlier_report is None:
        os.remove(report_file)  # local: this run's report, its shards not put in place
      else:
        files_lib.write_atomically(report_file, earlier_report)


def remove_temp_dirs(temp_dirs):
  """Removes this run's temporary directories, whatever they still hold."""
  for directory in set(temp_dirs.values()):
    shutil.rmtree(directory, ignore_errors=True)  # local temp
