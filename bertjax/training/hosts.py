"""What the hosts of a multi-host job must share, checked at its start on every host.

The same command: a host given another config or workdir (a SLURM script's per-node override,
a hand-started host with an older flag file) would compile another step or write elsewhere: the
job hangs in a collective or trains with settings nobody chose. Every host compares its digest
of (config, workdir) with the others', and a host whose differs names the fields.

A workdir every host writes to and reads from (a bucket, or a file system shared by the hosts):
orbax writes each checkpoint in parts, one per host, and process 0 finishes it. A local folder
on each host leaves every checkpoint incomplete, found only at the resume. Process 0 writes a
token into the workdir's lock (workdir_lock); each host reads it back there before any step.

One host's error stops every host: at known points all of them gather it (fail_together, worst,
check_same_view); anywhere else the host tells the others through jax.distributed's key-value
store, which each watches (tell_stopped, watch_others).
"""

import atexit
import contextlib
import hashlib
import json
import os
import sys
import threading
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from bertjax import console

# The fields a differing host names at most.
_NAMED = 6


def _gathered(values: np.ndarray) -> np.ndarray:
  """Every host's `values`, stacked by process index."""
  return np.asarray(multihost_utils.process_allgather(values))


def worst(verdict: int) -> tuple[int, int]:
  """(the highest of every host's `verdict`, the first host that gave it): one host alone,
  acting on its own verdict, would go another way than the others (and wait in another
  collective). One process: its own."""
  if jax.process_count() == 1:
    return verdict, 0
  verdicts = _gathered(np.array([verdict], np.int32))[:, 0]
  return int(verdicts.max()), int(verdicts.argmax())


def _flat(tree, prefix='') -> dict:
  if not isinstance(tree, dict):
    return {prefix: tree}
  flat = {}
  for key, value in tree.items():
    flat |= _flat(value, f'{prefix}.{key}' if prefix else key)
  return flat


def check_same_command(config, workdir: str, **flags):
  """Raises on every host when any host runs another config, workdir or `flags` (--step) than
  process 0; the hosts that differ name the first fields that do."""
  if jax.process_count() == 1:
    return
  text = json.dumps({'workdir': workdir, 'config': json.loads(config.to_json_best_effort()),
                     **{f'--{name}': value for name, value in flags.items()}}, sort_keys=True)
  digest = np.frombuffer(hashlib.sha256(text.encode()).digest(), np.uint8)
  digests = _gathered(digest)
  differ = [i for i in range(len(digests)) if (digests[i] != digests[0]).any()]
  if not differ:
    return
  # Process 0's command, for the others to name what differs (every host takes this branch).
  encoded = np.frombuffer(text.encode(), np.uint8)
  longest = int(_gathered(np.int32(len(encoded))).max())
  buffer = np.zeros(longest, np.uint8)
  buffer[:len(encoded)] = encoded
  first = bytes(np.asarray(multihost_utils.broadcast_one_to_all(buffer))).rstrip(b'\0')
  others = ', '.join(map(str, differ))
  hint = ('run the same command, config, --workdir and flags on every host (the launchers in '
          'launch/ do)')
  if jax.process_index() not in differ:
    raise ValueError(f'process {others} of this job run another config, --workdir or flags '
                     f'than process 0 (their lines name the fields): {hint}.')
  mine, theirs = _flat(json.loads(text)), _flat(json.loads(first.decode()))
  fields = [k for k in sorted(mine.keys() | theirs.keys()) if mine.get(k) != theirs.get(k)]
  named = '; '.join(f'{k}={mine.get(k)!r} here, {theirs.get(k)!r} on process 0'
                    for k in fields[:_NAMED])
  more = f' (and {len(fields) - _NAMED} more)' if len(fields) > _NAMED else ''
  raise ValueError(f'process {jax.process_index()} runs another command than process 0: '
                   f'{named}{more}: {hint}.')


def check_shared(workdir: str, token: str, read_token):
  """Raises on every host when a host does not read process 0's `token` (written just before)
  with `read_token()`: the workdir is not one folder for all the hosts."""
  if jax.process_count() == 1:
    return
  sent = np.zeros(64, np.uint8)
  if jax.process_index() == 0:
    sent[:len(token)] = np.frombuffer(token.encode(), np.uint8)
  expected = bytes(np.asarray(multihost_utils.broadcast_one_to_all(sent))).rstrip(b'\0').decode()
  try:
    seen = read_token() == expected
  except OSError:
    seen = False
  seen_by = _gathered(np.int32(seen))
  blind = [str(i) for i, ok in enumerate(seen_by) if not ok]
  if blind:
    raise ValueError(
        f'--workdir={workdir} is not one folder for every host: process {", ".join(blind)} '
        'does not see the lock process 0 just wrote there. Every host writes its part of each '
        'checkpoint into the workdir, so a folder on each host\'s own disk leaves every '
        'checkpoint incomplete: pass a bucket (gs://...) or a folder on a file system all the '
        'hosts share.')


def check_same_view(workdir: str, seen: str, *, what: str = '', fix: str = ''):
  """Raises on every host when the hosts read other things at `workdir` (`seen`: what this host
  reads there, e.g. its checkpoint steps): a folder on each host's own disk, or a run that
  saved between their reads. Readers (eval, predict) take no lock, so check_shared's token
  is not there to read. `what` and `fix` name the source and the remedy (a --workdir's)."""
  if jax.process_count() == 1:
    return
  # The whole view's digest, and its first bytes to name it.
  shown = np.frombuffer(seen.encode()[:_VIEW_BYTES], np.uint8)
  buffer = np.zeros(32 + _VIEW_BYTES, np.uint8)
  buffer[:32] = np.frombuffer(hashlib.sha256(seen.encode()).digest(), np.uint8)
  buffer[32:32 + len(shown)] = shown
  rows = _gathered(buffer)
  if len({bytes(row[:32]) for row in rows}) > 1:
    views = [bytes(row[32:]).rstrip(b'\0').decode(errors='replace') for row in rows]
    said = '; '.join(f'process {i}: {view}' for i, view in enumerate(views))
    fix = fix or ('pass a bucket (gs://...) or a folder on a file system all the hosts share, '
                  'and a run that is not saving (or --step=N)')
    raise ValueError(f'{what or f"--workdir={workdir}"} reads differently on the hosts '
                     f'({said}): {fix}.')


_VIEW_BYTES = 200  # Of a view named in the error.


@contextlib.contextmanager
def fail_together():
  """Runs the block on every host and raises on every host when it raised on any: an error on
  one host (a damaged file in its share of the data, a path only some hosts see) would otherwise
  stop that host alone while the others wait for it in their next collective until the job
  times out. Every host's error names the hosts that failed and the first one's message. The
  block must hold no collective itself: the hosts would pair it with this one's. A Ctrl-C or a
  SystemExit on one host is told the others too, then raised there as it came."""
  error = None
  try:
    yield
  except (Exception, KeyboardInterrupt, SystemExit) as e:  # pylint: disable=broad-except
    if jax.process_count() == 1:
      raise
    error = e
    # Said here first: a host that died before this gather would leave it unsaid.
    logging.warning('process %d stopped (%s): telling the other hosts', jax.process_index(),
                    told(e))
  if jax.process_count() == 1:
    return
  said = np.zeros(1 + _ERROR_BYTES, np.uint8)  # Failed or not, then the message's first bytes.
  if error is not None:
    text = told(error).encode()[:_ERROR_BYTES]
    said[0] = 1
    said[1:1 + len(text)] = np.frombuffer(text, np.uint8)
  rows = _gathered(said)
  failed = [i for i, row in enumerate(rows) if row[0]]
  if not failed:
    return
  _STOPPING.set()  # Every host raises and stops on its own: no host is left to wait for.
  if error is not None:
    raise error
  first = bytes(rows[failed[0]][1:]).rstrip(b'\0').decode(errors='replace')
  raise ValueError(f'process {", ".join(map(str, failed))} of this job stopped (process '
                   f'{failed[0]}: {first})')


def told(error: BaseException) -> str:
  """An error as the other hosts read it: its message, after its type's name unless a
  ValueError or one of bertjax's own (whole sentences) or an OSError with an errno."""
  own = type(error) is ValueError or type(error).__module__.partition('.')[0] == 'bertjax'
  if own or (isinstance(error, OSError) and error.errno):
    return str(error)
  return f'{type(error).__name__}: {error}'.removesuffix(': ')


_ERROR_BYTES = 1000


# A host that stops on an error the others did not meet (one process's write, read or library
# error outside fail_together) or a Ctrl-C tells them in jax.distributed's key-value store:
# without it they wait for it in their next collective, and it waits for them in
# jax.distributed's shutdown, until its timeout aborts them all (313 s measured: SIGABRT and a
# native stack on each host). Once a host stopped, no host joins that shutdown (a barrier the
# stopped one may never reach): each marks that it leaves and waits for the others' marks
# (_leave); process 0, which holds the store, leaves last (a host still reading the store when
# it goes is aborted).
_STOPPED_KEY = 'bertjax/stopped'
_LEFT = 'bertjax/left/'  # + the process index: it leaves.
_STOPPING = threading.Event()  # This host stops on its own: its error, one all met, a Ctrl-C.
_UNWINDING = threading.Event()  # This host's clean-up after an error (a save finishing).
_LEAVING = threading.Event()  # The watch ends this host.
_POLL_S = 2.0  # Between two reads of the store: one small request per host.
# How long a host told of another's error lets its own come first (the same error met later).
_GRACE_S = 5.0
_LEAVE_S = 60.0  # The most a host waits for the others to leave (one cleaning up a save).
_INTERRUPTED = 'interrupted'
_STATUS = [None]  # This host's exit status, once known (tell_stopped, exit_status).


def _distributed():
  """jax.distributed's state (no public API for its key-value store): its client is None where
  it did not start, without starting JAX's backends as jax.process_count() would."""
  from jax._src import distributed  # pylint: disable=g-import-not-at-top
  return distributed.global_state


def unwinding():
  """Marks this host as cleaning up after an error of its own (checkpoint.closing waiting for a
  save): another host's error does not cut it short; its own is told when it ends."""
  _UNWINDING.set()


def exit_status(status: int):
  """The status this host exits with (a finished job's 0, a preempted one's 75): kept where
  another host stopped and this one leaves without jax.distributed's shutdown."""
  _STATUS[0] = status


def tell_stopped(why: str, *, status: int = 1, interrupted: bool = False):
  """Tells the other hosts that this one stops (`why`, one line) with exit `status`, for
  watch_others; best effort (the first host to tell is the one said). `interrupted`: a Ctrl-C,
  which exits at once. Nothing where jax.distributed did not start (no backend is started)."""
  state = _distributed()
  if state.client is None:
    return
  _STATUS[0] = status
  if _STOPPING.is_set():
    return
  _STOPPING.set()
  said = f'{_INTERRUPTED if interrupted else "error"} {state.process_id} {why}'
  try:
    state.client.key_value_set(_STOPPED_KEY, said[:_ERROR_BYTES])
  except Exception:  # pylint: disable=broad-except  # Another host told first; the service gone.
    pass


def _stopped() -> str | None:
  """What the host that stopped first said (tell_stopped), or None (none did, or no store)."""
  try:
    said = _distributed().client.key_value_try_get(_STOPPED_KEY)
  except Exception:  # pylint: disable=broad-except  # NOT_FOUND: nobody stopped.
    return None
  return said.decode(errors='replace') if isinstance(said, bytes) else said


def _leave():
  """Marks that this host leaves, then waits (up to _LEAVE_S) until every host did: none closes
  its connections under another still in a collective (which would fail there with gloo's
  error, not this line), and process 0, which holds the store, goes last."""
  state = _distributed()
  if state.client is None:
    return
  try:
    state.client.key_value_set(f'{_LEFT}{state.process_id}', '1')
  except Exception:  # pylint: disable=broad-except  # Marked already.
    pass
  start, warned = time.monotonic(), False
  while time.monotonic() - start < _LEAVE_S:
    try:
      if len(state.client.key_value_dir_get(_LEFT)) >= state.num_processes:
        break
    except Exception:  # pylint: disable=broad-except  # The store is gone: nothing to wait for.
      return
    if not warned and time.monotonic() - start > _POLL_S + _GRACE_S + 3:  # Past the usual.
      warned = True
      logging.warning('waiting up to %d s for the other hosts to stop as well', _LEAVE_S)
    time.sleep(0.1)
  if state.process_id == 0:
    time.sleep(0.5)  # The others' last read of the store, before it goes with this process.


def watch_others():
  """Stops this host (exit status 1, one line) when another says it stopped (tell_stopped),
  unless this one stops by itself (within _GRACE_S of another's error). Started once
  jax.distributed is up: a thread reads the store every _POLL_S; at this host's exit, before
  jax's own (a thread left inside a request of the store crashes it), a host that stopped or
  was told of a stop leaves without jax.distributed's shutdown (_leave)."""
  if jax.process_count() == 1:
    return
  done = threading.Event()

  def watch():
    while not done.wait(_POLL_S):
      if (said := _stopped()) is not None:
        _stop_for(said)
        return

  thread = threading.Thread(target=watch, name='bertjax-watch-others', daemon=True)
  thread.start()
  console.last_at_interrupt(_leave)

  def end():  # Runs before jax's exit (atexit: the last registered first).
    done.set()
    thread.join(_GRACE_S + _POLL_S + 5)
    if _LEAVING.is_set():  # The watch ends the process.
      thread.join()
    if _STOPPING.is_set() or _stopped() is not None:
      _leave()
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(1 if _STATUS[0] is None else _STATUS[0])  # pylint: disable=protected-access

  atexit.register(end)


def _stop_for(said: str):
  """Ends this process for another host's tell_stopped (`said`), unless the stop is its own or
  this host stops by itself: it cleans up after its own error, or meets it within _GRACE_S of
  another's (the same error, met later here: its own line is said). A Ctrl-C's host is gone:
  this one goes too."""
  how, index, why = (said.split(' ', 2) + ['', ''])[:3]
  if index == str(jax.process_index()):
    return
  if how != _INTERRUPTED and (_UNWINDING.is_set() or _STOPPING.wait(_GRACE_S) or
                              _UNWINDING.is_set()):
    return
  _STOPPING.set()
  _LEAVING.set()
  # A Ctrl-C's exit: its clean-ups (a remote lock's release), _leave, the line, status 1.
  console.interrupted(lambda: f'error: process {index} of this job stopped ({why}): this host '
                      'stops too, as it would wait for it', 1)
