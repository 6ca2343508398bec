"""One run per workdir: the second is refused at once, naming the live one.

Process 0 holds an exclusive `fcntl.flock` on <workdir>/.lock for the whole run and writes who
holds it (host, pid, start time) into the file. The kernel drops the lock when the process
dies, however it dies, so a lock left by a killed run never blocks a restart. Other processes of
a multi-host job take no lock. A remote workdir (gs://) cannot be locked this way: there the
run logs that it relies on the launcher to start one job per workdir.
"""

import contextlib
import fcntl
import json
import os
import socket
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

LOCK_NAME = '.lock'
_ACTIVE = set()  # Workdirs whose block runs in this process: nested jobs share the lock.


class WorkdirInUseError(RuntimeError):
  """Another live run holds the workdir."""


class WorkdirNotAFolderError(ValueError):
  """--workdir names a file."""


def _acquire(workdir: str):
  """(open lock file, None) or (None, the error naming the holder)."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    return None, WorkdirNotAFolderError(f'--workdir={workdir} is a file: pass a folder (a new '
                                        'one, or the run to resume).')
  os.makedirs(workdir, exist_ok=True)
  f = open(os.path.join(workdir, LOCK_NAME), 'a+', encoding='utf-8')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    f.seek(0)
    try:
      holder = json.loads(f.read())
      who = (f"pid {holder['pid']} on {holder['host']}, running since "
             f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder['since']))}")
    except (ValueError, KeyError):
      who = 'another process'
    f.close()
    return None, WorkdirInUseError(
        f'{workdir} is in use by {who}: wait for that run to end or stop it (it resumes from '
        'its last checkpoint), or pass another --workdir')
  return f, None


@contextlib.contextmanager
def locked(workdir: str):
  """Holds the workdir's lock (process 0) for the duration of the block; every process of a
  multi-host job raises when process 0 finds the workdir in use."""
  if workdir in _ACTIVE:
    yield
    return
  remote = '://' in workdir
  f, error = (None, None)
  if jax.process_index() == 0 and not remote:
    f, error = _acquire(workdir)
  if jax.process_count() > 1:
    free = multihost_utils.broadcast_one_to_all(np.int32(error is None))
    if not free and error is None:
      error = WorkdirInUseError(f'process 0 found {workdir} in use by another run')
  if error is not None:
    raise error
  if remote and jax.process_index() == 0:
    logging.info('%s is remote and cannot be locked: start one run per workdir', workdir)
  if f is not None:
    f.seek(0)
    f.truncate()
    f.write(json.dumps({'host': socket.gethostname(), 'pid': os.getpid(), 'since': time.time()}))
    f.flush()
  _ACTIVE.add(workdir)
  try:
    yield
  finally:
    _ACTIVE.discard(workdir)
    if f is not None:
      f.close()  # Releases the lock; the file stays (its content is only informative).
