"""One run per workdir: the second is refused at once, naming the live one.

Process 0 holds an exclusive `fcntl.flock` on <workdir>/.lock for the whole run and writes who
holds it (host, pid, start time) into the file. The kernel drops the lock when the process
dies, however it dies, so a lock left by a killed run never blocks a restart. Other processes of
a multi-host job take no lock: they read process 0's token in it (training/hosts.py), which
tells a workdir the hosts share from a folder on each host's own disk.

An object store (gs://, s3://) has no flock. There process 0 holds a lock object
<workdir>/.lock with a lease, renewed in the background (remote_lock.py says how a live holder,
an expired lease and two starters at once are told apart).
"""

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid

import jax
from jax.experimental import multihost_utils
import numpy as np

from bertjax import console
from bertjax import files
from bertjax import paths
from bertjax import remote_lock
from bertjax.training import hosts

LOCK_NAME = '.lock'
# Workdirs whose block runs in this process -> the thread running it: a job nested in it (the
# same thread) shares the lock; another thread of this process (a notebook's background run)
# is refused as another process is (the file lock, held by this process, would let it in).
_ACTIVE = {}


class WorkdirInUseError(RuntimeError):
  """Another live run holds the workdir."""


class WorkdirNotAFolderError(ValueError):
  """--workdir names a file."""


def _not_a_folder(workdir: str) -> WorkdirNotAFolderError:
  return WorkdirNotAFolderError(f'--workdir={workdir} is a file: pass a folder (a new one, or '
                                'the run to resume).')


def _in_use(workdir: str, who: str) -> WorkdirInUseError:
  return WorkdirInUseError(
      f'{workdir} is in use by {who}: wait for that run to end or stop it (it resumes from '
      'its last checkpoint), or pass another --workdir')


def _folders_above(workdir: str) -> list[str]:
  """The folders above a local `workdir`, nearest first."""
  found, path = [], os.path.dirname(workdir.rstrip('/'))
  while path and path not in found:
    found.append(path)
    path = os.path.dirname(path)
  return found


def _check_outside_checkpoints(workdir: str):
  """Refuses a workdir that is another run's checkpoints/ folder or inside it (a step's folder,
  mistaken for the run or for init_from): that run's checkpointer prunes the steps it no longer
  keeps, and would delete the new run with the step it sits in."""
  found = paths.in_checkpoints(workdir)
  if found is not None:
    run, below = found
    raise ValueError(f'--workdir={workdir} is {"inside " if below else ""}'
                     f'{files.join(run, "checkpoints")}, the checkpoints of the run at {run} (its '
                     'checkpointer deletes the steps it no longer keeps, and what is in them): '
                     f'pass a folder outside {run}; to start from that run\'s weights, pass '
                     f'--config.init_from={run}.')


def _check_not_a_model(workdir: str):
  """Refuses a workdir that is a model's folder (transformers, TF1, SavedModel) or inside one,
  before anything is written: a run there wrote its config.json over a transformers model's
  (which transformers then could not load), or left checkpoints/ beside it (which made every
  tool read the model as a run without checkpoints)."""
  found = paths.model_folder(workdir.rstrip('/'))
  if found is None:
    return
  folder, what = found
  raise ValueError(f'--workdir={workdir} is in {what} ({folder}): a run there would write its '
                   'files among the model\'s (its config.json over a transformers model\'s); '
                   f'pass a folder of its own (to start from the model: --config.init_from='
                   f'{folder}).')


def _acquire(workdir: str):
  """(open lock file, None) or (None, the error naming the holder)."""
  link = '' if files.is_remote(workdir) else workdir.rstrip('/')
  # A link to a folder moved or deleted since: makedirs said '[Errno 17] File exists'.
  if link and os.path.islink(link) and not os.path.exists(link):  # local: links are a disk's
    return None, WorkdirNotAFolderError(
        f'--workdir={workdir} is a link to {os.readlink(link)}, which does not exist (moved or '
        'deleted since?): point the link at the run, or pass --workdir=<where it is now>; for a '
        'new run there, remove the link.')
  if files.exists(workdir) and not files.isdir(workdir):
    return None, _not_a_folder(workdir)
  try:
    files.makedirs(workdir)
  except NotADirectoryError:  # A file where a folder above it should be.
    above = next(p for p in _folders_above(workdir) if files.exists(p))
    return None, WorkdirNotAFolderError(f'--workdir={workdir} is under {above}, which is a '
                                        'file: pass a --workdir under a folder.')
  lock_path = files.join(workdir, LOCK_NAME)
  for _ in range(3):  # A lock removed meanwhile with its new workdir (_remove_if_unused): anew.
    files.makedirs(workdir)
    f = files.open(lock_path, 'a+')  # A local file: flock needs one.
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      f.seek(0)
      try:
        holder = json.loads(f.read())
        since = remote_lock.since(holder['since'])
        who = f"pid {holder['pid']} on {holder['host']}, running since {since}"
      except (ValueError, KeyError):
        who = 'another process'
      f.close()
      return None, _in_use(workdir, who)
    with contextlib.suppress(FileNotFoundError):
      if os.stat(lock_path).st_ino == os.fstat(f.fileno()).st_ino:  # local: the lock file
        return f, None
    f.close()
  return None, WorkdirInUseError(f'the lock of {workdir} keeps being replaced: is another run '
                                 'starting there? Rerun when it is done.')


def _remove_if_unused(workdir: str, made: list[str], before: set[str]):
  """Removes the lock file (held by this run, new with it) and the folders this run made for
  `workdir` (`made`, the workdir first) where the run added nothing else (`before`: the
  workdir's names when it began): a run refused at its start (a setting, the data) leaves no
  empty workdir behind, nor a .lock in a folder of the user's."""
  try:
    checkpoints = files.join(workdir, 'checkpoints')  # Made by the run's checkpoint manager
    # before a refusal reading init_from: still empty, it is no history.
    if set(os.listdir(workdir)) - before == {LOCK_NAME, 'checkpoints'} and not os.listdir(  # local
        checkpoints):  # local, as the rest
      os.rmdir(checkpoints)
    if set(os.listdir(workdir)) != before | {LOCK_NAME}:  # local: the lock is a local file
      return
    os.remove(files.join(workdir, LOCK_NAME))  # local: while held (_acquire checks the inode)
    for folder in made:
      os.rmdir(folder)  # local: empty, and made by this run
  except OSError:  # Written meanwhile, or not ours to remove: kept.
    pass


def _acquire_remote(workdir: str, lock: remote_lock.RemoteLock) -> Exception | None:
  """None when `lock` is taken, else the error naming its holder."""
  files.check_bucket(workdir)  # Named as given, not as the lock object's URL.
  if files.isfile(workdir):
    return _not_a_folder(workdir)
  who = lock.acquire()
  return None if who is None else _in_use(workdir, who)


def live_holder(workdir: str) -> str:
  """'' or who holds a workdir's lock now (a run training there): `pid N` of a local one, as
  the kernel lists its locks (/proc/locks), `pid N on HOST` of a bucket's lock object whose
  lease runs. No lock is taken, so a run starting meanwhile is never refused. '' where that
  cannot be told (another OS)."""
  if files.is_remote(workdir):
    return remote_lock.live_holder(files.join(workdir, LOCK_NAME))
  try:
    held = os.stat(os.path.join(workdir, LOCK_NAME))  # local: a bucket was answered above
    with open('/proc/locks', encoding='ascii') as f:  # local: the kernel's table
      table = f.read().splitlines()
  except OSError:
    return ''
  for line in table:  # '1: FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0 EOF' ('->': a waiter)
    parts = line.split()
    if 'FLOCK' in parts and '->' not in parts and len(parts) >= 6:
      pid, (major, minor, inode) = parts[-4], (parts[-3].split(':') + ['', '', ''])[:3]
      if (inode.isdigit() and int(inode) == held.st_ino and major and minor
          and os.makedev(int(major, 16), int(minor, 16)) == held.st_dev):
        return f'pid {pid}'
  return ''


def say_if_live(workdir: str, newest: int) -> bool:
  """A reader's warning, once per job (eval resolves its step twice), where the run it reads
  trains now: its `newest` step is not its last. Whether it does."""
  if holder := live_holder(workdir):
    # It may save another step before the reader lists them again: 'or a newer one', and the
    # job's summary names the step read.
    console.warn_once('%s is training now (%s): its newest checkpoint is read (step %d, or one '
                      'saved since), not its final one', workdir, holder, newest)
    return True
  return False


@contextlib.contextmanager
def locked(workdir: str):
  """Holds the workdir's lock (process 0) for the duration of the block; every process of a
  multi-host job raises when process 0 finds the workdir in use."""
  if workdir in _ACTIVE:
    if _ACTIVE[workdir] != threading.get_ident():
      raise WorkdirInUseError(
          f'{workdir} is in use by another run of this process (another thread, e.g. a '
          'notebook cell still training in the background): wait for it to end, or use '
          'another --workdir.')
    yield
    return
  remote = files.is_remote(workdir)
  f, error, held = None, None, None
  made = [] if remote else [p for p in files.folders_up(workdir) if not os.path.exists(p)]  # local
  # What the workdir held (nothing, where this run makes it): a lock new with this run, beside
  # nothing new, is removed at the end. None: a bucket's, or a lock there before.
  before = None if remote or (not made and not os.path.isdir(workdir)) else (  # local
      set() if made else set(os.listdir(workdir)))  # local: the lock is a local file
  if before is not None and LOCK_NAME in before:
    before = None
  if jax.process_index() == 0:
    try:
      _check_outside_checkpoints(workdir)
      _check_not_a_model(workdir)
      if remote:
        held = remote_lock.RemoteLock(files.join(workdir, LOCK_NAME))
        error = _acquire_remote(workdir, held)
      else:
        f, error = _acquire(workdir)
    except (OSError, ValueError) as e:  # No bucket, permission or network, or a workdir in a
      error = e  # run's checkpoints: told to the other processes too, which would otherwise
      # wait for process 0's answer until timeout.
  if jax.process_count() > 1:
    free = multihost_utils.broadcast_one_to_all(np.int32(error is None))
    if not free and error is None:
      error = WorkdirInUseError(f'process 0 could not take {workdir}: another run holds it or '
                                'it cannot be written (process 0\'s error says which)')
  if error is not None:
    raise error
  token = held.record['token'] if held is not None else uuid.uuid4().hex
  if f is not None:
    f.seek(0)
    f.truncate()
    f.write(json.dumps({'host': socket.gethostname(), 'pid': os.getpid(), 'since': time.time(),
                        'token': token}))
    f.flush()
    os.fsync(f.fileno())  # local: the lock is a local file (flock); the other hosts read it next
  _ACTIVE[workdir] = threading.get_ident()
  try:
    # Every host reads the token process 0 just wrote: a folder on each host's own disk is not
    # a multi-host workdir (each checkpoint's parts would be spread over the hosts' disks).
    lock_path = files.join(workdir, LOCK_NAME)
    hosts.check_shared(workdir, token,
                       lambda: (remote_lock.read_holder(lock_path) or {}).get('token'))
    if held is None:
      yield
    else:  # Ctrl-C skips `finally`: a restart on another host would wait out the lease.
      with console.at_interrupt(held.release):
        yield
  finally:
    _ACTIVE.pop(workdir, None)
    if f is not None:
      if before is not None:
        _remove_if_unused(workdir, made, before)
      f.close()  # Releases the lock; the file stays (its content is only informative).
    if held is not None:
      held.release()
