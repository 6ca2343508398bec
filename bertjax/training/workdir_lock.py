"""One run per workdir: the second is refused at once, naming the live one.

Process 0 holds an exclusive `fcntl.flock` on <workdir>/.lock for the whole run and writes who
holds it (host, pid, start time) into the file. The kernel drops the lock when the process
dies, however it dies, so a lock left by a killed run never blocks a restart. Other processes of
a multi-host job take no lock: they read process 0's token in it (training/hosts.py), which
tells a workdir the hosts share from a folder on each host's own disk.

An object store (gs://, s3://) has no flock. There process 0 puts a lock object <workdir>/.lock
holding JSON {host, pid, since, started, renewed, lease_s, token} and a daemon thread renews it
every lease/4; the block's end removes it. A starter finding a lock whose lease has not expired is
refused, naming the holder. An expired lease (a killed run, a lost VM) is taken over, and so is
one of this host whose process is gone (a restart need not wait for the lease): its pid dead, or
alive but started at another time than the holder (a restarted pod's python is pid 1 again).
Object stores have no compare-and-swap here, so a starter writes its lock, waits a moment and
reads it back: of two starting at once, the one whose token is still there won, the other is
refused. The lease is judged by the holder's clock: hosts whose clocks differ by more than a
few seconds shorten or lengthen it by that much.
"""

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from bertjax import console
from bertjax import files
from bertjax import processes
from bertjax.training import hosts

LOCK_NAME = '.lock'
# A remote lock's lease: renewed every LEASE_S / 4, taken over LEASE_S after its last renewal.
LEASE_S = 120.0
# How long a starter waits before reading its remote lock back (another starter's put lands
# within this).
CONFIRM_S = 2.0
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


def _since(seconds: float) -> str:
  return time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(seconds))


def _folders_above(workdir: str) -> list[str]:
  """The folders above a local `workdir`, nearest first."""
  found, path = [], os.path.dirname(workdir.rstrip('/'))
  while path and path not in found:
    found.append(path)
    path = os.path.dirname(path)
  return found


def _acquire(workdir: str):
  """(open lock file, None) or (None, the error naming the holder)."""
  if files.exists(workdir) and not files.isdir(workdir):
    return None, _not_a_folder(workdir)
  try:
    files.makedirs(workdir)
  except NotADirectoryError:  # A file where a folder above it should be.
    above = next(p for p in _folders_above(workdir) if files.exists(p))
    return None, WorkdirNotAFolderError(f'--workdir={workdir} is under {above}, which is a '
                                        'file: pass a --workdir under a folder.')
  f = files.open(files.join(workdir, LOCK_NAME), 'a+')  # A local file: flock needs one.
  try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    f.seek(0)
    try:
      holder = json.loads(f.read())
      who = f"pid {holder['pid']} on {holder['host']}, running since {_since(holder['since'])}"
    except (ValueError, KeyError):
      who = 'another process'
    f.close()
    return None, _in_use(workdir, who)
  return f, None


def _pause(seconds: float):
  """The wait before a starter reads its lock back (a seam for tests)."""
  time.sleep(seconds)


def _read_holder(lock: str) -> dict | None:
  """The lock's record (remote, or a local one read by the other hosts); None when there is
  none; {} when it is unreadable."""
  try:
    holder = json.loads(files.read_text(lock))
  except FileNotFoundError:
    return None
  except ValueError:
    return {}
  return holder if isinstance(holder, dict) else {}


class RemoteLock:
  """The lock object of a remote workdir, held by this process and renewed in the background."""

  def __init__(self, workdir: str, lease_s: float = None, confirm_s: float = None):
    self.workdir = workdir
    self.path = files.join(workdir, LOCK_NAME)
    self.lease_s = LEASE_S if lease_s is None else lease_s
    self.confirm_s = CONFIRM_S if confirm_s is None else confirm_s
    self.record = {'host': socket.gethostname(), 'pid': os.getpid(), 'since': time.time(),
                   'started': processes.start_ticks(os.getpid()), 'lease_s': self.lease_s,
                   'token': uuid.uuid4().hex}
    self._stop = threading.Event()
    self._thread = None

  def _live_holder(self, holder: dict | None) -> str | None:
    """Who holds the lock as a phrase, or None when it may be taken (none, expired, dead)."""
    if holder is None:
      return None
    try:
      renewed, lease = float(holder['renewed']), float(holder['lease_s'])
      host, pid, since = holder['host'], holder['pid'], float(holder['since'])
    except (KeyError, TypeError, ValueError):
      logging.warning('%s holds no lock record (%r): taking it over', self.path, holder)
      return None
    age = time.time() - renewed
    if age > lease:
      logging.warning('taking over %s: its lease (pid %s on %s) expired %.0f s ago', self.path,
                      pid, host, age - lease)
      return None
    if host == socket.gethostname() and not processes.alive(pid, holder.get('started')):
      logging.warning('taking over %s: its holder, pid %s on this host, is dead', self.path, pid)
      return None
    return (f'pid {pid} on {host}, running since {_since(since)} (lock {self.path}, renewed '
            f'{max(age, 0):.0f} s ago; taken over {lease:.0f} s after its last renewal if that '
            'run is gone)')

  def _put(self):
    files.write_atomically(self.path, json.dumps(self.record | {'renewed': time.time()}))

  def acquire(self) -> Exception | None:
    """Takes the lock (then renews it until release) or returns the error naming the holder."""
    files.check_bucket(self.workdir)  # Named as given, not as the lock object's URL.
    if files.isfile(self.workdir):
      return _not_a_folder(self.workdir)
    who = self._live_holder(_read_holder(self.path))
    if who is not None:
      return _in_use(self.workdir, who)
    self._put()
    _pause(self.confirm_s)  # Another starter's put, if any, lands meanwhile.
    holder = _read_holder(self.path)
    if not holder or holder.get('token') != self.record['token']:
      return _in_use(self.workdir, self._live_holder(holder) or
                     'another run that started at the same moment')
    self._thread = threading.Thread(target=self._renew, name='bertjax-workdir-lock',
                                    daemon=True)
    self._thread.start()
    return None

  def _renew(self):
    while not self._stop.wait(self.lease_s / 4):
      try:
        holder = _read_holder(self.path)
        if holder and holder.get('token') != self.record['token']:
          logging.error('%s was taken over by pid %s on %s (this run did not renew its lease in '
                        'time): two runs may now write this workdir', self.path,
                        holder.get('pid'), holder.get('host'))
          return
        self._put()
      except Exception as e:  # pylint: disable=broad-except  # Retried at the next period.
        logging.warning('could not renew the lock %s (%s): retrying in %.0f s', self.path, e,
                        self.lease_s / 4)

  def release(self):
    """Stops renewing and removes the lock object, if it is still this process's."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
    try:
      holder = _read_holder(self.path)
      if holder and holder.get('token') == self.record['token']:
        files.remove(self.path)
    except Exception as e:  # pylint: disable=broad-except  # Its lease expires by itself.
      logging.warning('could not remove the lock %s (%s): it expires %.0f s after its last '
                      'renewal', self.path, e, self.lease_s)


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
  f, error, remote_lock = None, None, None
  if jax.process_index() == 0:
    try:
      if remote:
        remote_lock = RemoteLock(workdir)
        error = remote_lock.acquire()
      else:
        f, error = _acquire(workdir)
    except OSError as e:  # No bucket, permission or network: told to the other processes too,
      error = e           # which would otherwise wait for process 0's answer until timeout.
  if jax.process_count() > 1:
    free = multihost_utils.broadcast_one_to_all(np.int32(error is None))
    if not free and error is None:
      error = WorkdirInUseError(f'process 0 could not take {workdir}: another run holds it or '
                                'it cannot be written (process 0\'s error says which)')
  if error is not None:
    raise error
  token = remote_lock.record['token'] if remote_lock is not None else uuid.uuid4().hex
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
    hosts.check_shared(workdir, token,
                       lambda: (_read_holder(files.join(workdir, LOCK_NAME)) or {}).get('token'))
    if remote_lock is None:
      yield
    else:  # Ctrl-C skips `finally`: a restart on another host would wait out the lease.
      with console.at_interrupt(remote_lock.release):
        yield
  finally:
    _ACTIVE.pop(workdir, None)
    if f is not None:
      f.close()  # Releases the lock; the file stays (its content is only informative).
    if remote_lock is not None:
      remote_lock.release()
