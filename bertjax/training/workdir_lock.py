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

LOCK_NAME = '.lock'
_HELD = {}  # workdir -> open file, so that nested jobs of one process share the lock.


class WorkdirInUseError(RuntimeError):
  """Another live run holds the workdir."""


@contextlib.contextmanager
def locked(workdir: str):
  """Holds the workdir's lock (process 0) for the duration of the block."""
  if jax.process_index() != 0 or workdir in _HELD:
    yield
    return
  if '://' in workdir:
    logging.info('%s is remote and cannot be locked: start one run per workdir', workdir)
    yield
    return
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, LOCK_NAME)
  f = open(path, 'a+', encoding='utf-8')  # pylint: disable=consider-using-with
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
    raise WorkdirInUseError(
        f'{workdir} is in use by {who}: wait for that run to end or stop it (it resumes from '
        'its last checkpoint), or pass another --workdir') from None
  f.seek(0)
  f.truncate()
  f.write(json.dumps({'host': socket.gethostname(), 'pid': os.getpid(), 'since': time.time()}))
  f.flush()
  _HELD[workdir] = f
  try:
    yield
  finally:
    del _HELD[workdir]
    f.close()  # Releases the lock; the file stays (its content is only informative).
