"""A lock on an object store (gs://, s3://), which has no flock: a lock object with a lease.

The holder puts a lock object holding JSON {host, pid, since, started, renewed, lease_s, token}
and a daemon thread renews it every lease/4; release removes it. A starter finding a lock whose
lease has not expired is refused, naming the holder. An expired lease (a killed run, a lost VM)
is taken over, and so is one of this host whose process is gone (a restart need not wait for
the lease): its pid dead, or alive but started at another time than the holder (a restarted
pod's python is pid 1 again). Object stores have no compare-and-swap here, so a starter writes
its lock, waits a moment and reads it back: of two starting at once, the one whose token is
still there won, the other is refused. The lease is judged by the holder's clock: hosts whose
clocks differ by more than a few seconds shorten or lengthen it by that much.

Used for a run's workdir (training/workdir_lock.py) and for a tool's output in a bucket
(output_lock.py). No JAX here: the tools that write outputs need none.
"""

import json
import os
import socket
import threading
import time
import uuid

from absl import logging

from bertjax import files
from bertjax import processes

# A lock's lease: renewed every LEASE_S / 4, taken over LEASE_S after its last renewal.
LEASE_S = 120.0
# How long a starter waits before reading its lock back (another starter's put lands within it).
CONFIRM_S = 2.0


def since(seconds: float) -> str:
  return time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(seconds))


def pause(seconds: float):
  """The wait before a starter reads its lock back (a seam for tests)."""
  time.sleep(seconds)


def read_holder(lock: str) -> dict | None:
  """The lock's record (remote, or a local one read by the other hosts); None when there is
  none; {} when it is unreadable."""
  try:
    holder = json.loads(files.read_text(lock))
  except FileNotFoundError:
    return None
  except ValueError:
    return {}
  return holder if isinstance(holder, dict) else {}


def _gone(holder: dict) -> str:
  """'' while the lock record's holder may still be running (its lease runs, and on this host its
  process lives); else why it may be taken over, as a phrase for the log."""
  try:
    renewed, lease, host, pid = (float(holder['renewed']), float(holder['lease_s']),
                                 holder['host'], holder['pid'])
  except (KeyError, TypeError, ValueError):
    return f'it holds no lock record ({holder!r})'
  age = time.time() - renewed
  if age > lease:
    return f'its lease (pid {pid} on {host}) expired {age - lease:.0f} s ago'
  if host == socket.gethostname() and not processes.alive(pid, holder.get('started')):
    return f'its holder, pid {pid} on this host, is dead'
  return ''


def live_holder(lock: str) -> str:
  """'' or `pid N on HOST` of the lock object's holder while it may run (_gone): a reader's
  question (a predict of a run training in a bucket), so nothing is taken over or written."""
  try:
    holder = read_holder(lock)
  except OSError:  # Unreachable: no answer.
    return ''
  if not holder or _gone(holder):
    return ''
  return f'pid {holder["pid"]} on {holder["host"]}'


class RemoteLock:
  """The lock object at `path`, held by this process and renewed in the background."""

  def __init__(self, path: str, lease_s: float = None, confirm_s: float = None):
    self.path = path
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
    if why := _gone(holder):
      logging.warning('taking over %s: %s', self.path, why)
      return None
    try:
      host, pid, started = holder['host'], holder['pid'], float(holder['since'])
    except (KeyError, TypeError, ValueError):
      logging.warning('taking over %s: it holds no lock record (%r)', self.path, holder)
      return None
    age = time.time() - float(holder['renewed'])
    lease = float(holder['lease_s'])
    return (f'pid {pid} on {host}, running since {since(started)} (lock {self.path}, renewed '
            f'{max(age, 0):.0f} s ago; taken over {lease:.0f} s after its last renewal if that '
            'run is gone)')

  def _put(self):
    files.write_atomically(self.path, json.dumps(self.record | {'renewed': time.time()}))

  def acquire(self) -> str | None:
    """Takes the lock (then renews it until release): None; or who holds it, as a phrase."""
    who = self._live_holder(read_holder(self.path))
    if who is not None:
      return who
    self._put()
    pause(self.confirm_s)  # Another starter's put, if any, lands meanwhile.
    holder = read_holder(self.path)
    if not holder or holder.get('token') != self.record['token']:
      return self._live_holder(holder) or 'another run that started at the same moment'
    self._thread = threading.Thread(target=self._renew, name='bertjax-remote-lock', daemon=True)
    self._thread.start()
    return None

  def _renew(self):
    while not self._stop.wait(self.lease_s / 4):
      try:
        holder = read_holder(self.path)
        if holder and holder.get('token') != self.record['token']:
          logging.error('%s was taken over by pid %s on %s (this run did not renew its lease in '
                        'time): two runs may now write there', self.path,
                        holder.get('pid'), holder.get('host'))
          return
        self._put()
      except Exception as e:  # pylint: disable=broad-except  # Retried at the next period.
        logging.warning('could not renew the lock %s (%s): retrying in %.0f s', self.path, e,
                        self.lease_s / 4)

  def release(self):
    """Stops renewing and removes the lock object, if it is still this process's; once (an
    interrupt's exit and the end of a `with` both release)."""
    if self._stop.is_set():
      return
    self._stop.set()
    if self._thread is not None and self._thread is not threading.current_thread():
      self._thread.join()
    try:
      holder = read_holder(self.path)
      if holder and holder.get('token') == self.record['token']:
        files.remove(self.path)
    except Exception as e:  # pylint: disable=broad-except  # Its lease expires by itself.
      logging.warning('could not remove the lock %s (%s): it expires %.0f s after its last '
                      'renewal', self.path, e, self.lease_s)
