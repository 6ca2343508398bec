"""The workdir lock on an object store (the GCS emulator): a lock object with a lease, the
holder's host and pid; a live holder refuses a second run, a stale one is taken over."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import log_records
import pytest

from bertjax import files
from bertjax import remote_lock
from bertjax.training import workdir_lock

# A short lease, renewed every 0.5 s, and a short read-back pause: the test waits on neither.
HOLD = ('import sys, time; from bertjax import remote_lock; from bertjax.training import '
        'workdir_lock\nremote_lock.LEASE_S, remote_lock.CONFIRM_S = 2.0, 0.1\n'
        'with workdir_lock.locked(sys.argv[1]):\n'
        '  print("held", flush=True); time.sleep(600)\n')


def _start_ticks() -> str:
  """When this process started, in clock ticks since boot (proc(5): stat's 22nd field)."""
  return pathlib.Path('/proc/self/stat').read_text().rpartition(')')[2].split()[19]


@pytest.fixture
def short_lease(monkeypatch):
  monkeypatch.setattr(remote_lock, 'LEASE_S', 2.0)
  monkeypatch.setattr(remote_lock, 'CONFIRM_S', 0.1)


def test_a_live_remote_holder_refuses_a_second_run(gcs_bucket, short_lease):
  workdir = f'{gcs_bucket}/run'
  holder = subprocess.Popen([sys.executable, '-c', HOLD, workdir], stdout=subprocess.PIPE,
                            text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    record = json.loads(files.read_text(f'{workdir}/.lock'))
    assert record['pid'] == holder.pid and record['host'] == socket.gethostname()
    time.sleep(2.5)  # Past one lease: the holder's renewals keep it.
    with pytest.raises(workdir_lock.WorkdirInUseError,
                       match=rf'{workdir} is in use by pid {holder.pid} on '
                       rf'{socket.gethostname()}, running since .*another --workdir'):
      with workdir_lock.locked(workdir):
        pass
    assert json.loads(files.read_text(f'{workdir}/.lock'))['renewed'] > record['renewed']
  finally:
    holder.kill()
    holder.wait()
  # Killed: its pid is dead on this host, so the lock is taken at once (no lease wait).
  with workdir_lock.locked(workdir):
    with workdir_lock.locked(workdir):  # Nested jobs share it.
      assert json.loads(files.read_text(f'{workdir}/.lock'))['pid'] == os.getpid()
  assert not files.exists(f'{workdir}/.lock')  # Removed at the end of the block.


def test_a_stale_lock_is_taken_over(gcs_bucket, short_lease):
  lock = f'{gcs_bucket}/run/.lock'
  now = time.time()
  files.write_atomically(lock, json.dumps({  # Another host whose lease expired long ago.
      'host': 'gone-vm', 'pid': 1, 'since': now - 900, 'renewed': now - 600, 'lease_s': 120}))
  with workdir_lock.locked(f'{gcs_bucket}/run'):
    assert json.loads(files.read_text(lock))['host'] == socket.gethostname()
  assert not files.exists(lock)
  dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], check=True,
                        capture_output=True, text=True)
  files.write_atomically(lock, json.dumps({  # This host, a fresh lease, a dead pid.
      'host': socket.gethostname(), 'pid': int(dead.stdout), 'since': now, 'renewed': now,
      'lease_s': 120}))
  with workdir_lock.locked(f'{gcs_bucket}/run'):
    assert json.loads(files.read_text(lock))['pid'] == os.getpid()
  files.write_atomically(lock, json.dumps({  # This host, a fresh lease, a pid alive now (this
      # process's) but not the holder's: a restarted container's python has the same pid 1.
      'host': socket.gethostname(), 'pid': os.getpid(), 'since': now, 'renewed': now,
      'started': str(int(_start_ticks()) - 100), 'lease_s': 120}))
  with workdir_lock.locked(f'{gcs_bucket}/run'):
    assert json.loads(files.read_text(lock))['started'] == _start_ticks()
  files.write_atomically(lock, json.dumps({  # Another host within its lease: refused.
      'host': 'other-vm', 'pid': 4242, 'since': now, 'renewed': time.time(), 'lease_s': 120}))
  with pytest.raises(workdir_lock.WorkdirInUseError, match='in use by pid 4242 on other-vm'):
    with workdir_lock.locked(f'{gcs_bucket}/run'):
      pass
  assert json.loads(files.read_text(lock))['host'] == 'other-vm'  # Left as it was.


def test_a_remote_workdir_that_is_a_file_is_named(gcs_bucket):
  files.write_atomically(f'{gcs_bucket}/notes.txt', 'mine')
  with pytest.raises(ValueError, match=f'--workdir={gcs_bucket}/notes.txt is a file'):
    with workdir_lock.locked(f'{gcs_bucket}/notes.txt'):
      pass
  assert files.read_text(f'{gcs_bucket}/notes.txt') == 'mine'


@pytest.mark.usefixtures('gcs_emulator')
def test_a_missing_bucket_is_named_and_told_to_the_other_processes(monkeypatch):
  """The error names --workdir as given (not its .lock object); on a pod process 0 still tells
  the other processes, which would otherwise wait for its answer until the job's timeout."""
  told = []
  monkeypatch.setattr(workdir_lock.jax, 'process_count', lambda: 2)
  monkeypatch.setattr(workdir_lock.multihost_utils, 'broadcast_one_to_all',
                      lambda x: told.append(int(x)) or x)
  with pytest.raises(FileNotFoundError, match='^gs://no-such-bucket-xyz/run: the bucket'):
    with workdir_lock.locked('gs://no-such-bucket-xyz/run'):
      pass
  assert told == [0]


def test_ctrl_c_removes_the_lock(gcs_bucket):
  """Ctrl-C ends a run without its `finally` (console.interrupted): the lock object is removed
  all the same, so that a restart on another host need not wait out the lease."""
  import signal  # pylint: disable=g-import-not-at-top
  workdir = f'{gcs_bucket}/run'
  script = ('from bertjax import console\n'
            'console.exit_on_interrupt(lambda: "interrupted")\n' + HOLD)
  holder = subprocess.Popen(  # SIGINT as a terminal sends it, even where pytest ignores it.
      [sys.executable, '-c', script, workdir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  try:
    assert holder.stdout.readline().strip() == 'held'
    assert files.exists(f'{workdir}/.lock')
    holder.send_signal(signal.SIGINT)
    assert holder.wait(timeout=60) == 130
  finally:
    holder.kill()
  assert 'interrupted' in holder.stderr.read()
  assert not files.exists(f'{workdir}/.lock')


def test_of_two_starters_the_one_whose_lock_stays_wins(gcs_bucket, short_lease, monkeypatch):
  lock = f'{gcs_bucket}/run/.lock'

  def other_starter_puts(seconds):  # Lands while this one waits to read its lock back.
    del seconds
    files.write_atomically(lock, json.dumps({
        'host': 'other-vm', 'pid': 77, 'since': time.time(), 'renewed': time.time(),
        'lease_s': 2.0, 'token': 'theirs'}))

  monkeypatch.setattr(remote_lock, 'pause', other_starter_puts)
  with pytest.raises(workdir_lock.WorkdirInUseError, match='in use by pid 77 on other-vm'):
    with workdir_lock.locked(f'{gcs_bucket}/run'):
      pass
  assert json.loads(files.read_text(lock))['token'] == 'theirs'  # The winner's lock stays.


def test_a_lock_released_twice_is_released_once(tmp_path, short_lease, monkeypatch):
  """An interrupt's exit and the `with` both release: the second, on a store that cannot be read
  by then, said 'could not remove the lock' of a lock already removed."""
  lock = remote_lock.RemoteLock(str(tmp_path / '.lock'))
  assert lock.acquire() is None
  lock.release()
  assert not (tmp_path / '.lock').exists()

  def unreadable(path):
    raise PermissionError(f'{path}: the store refuses reads now')
  monkeypatch.setattr(files, 'read_text', unreadable)
  said = log_records.recorded_warnings(monkeypatch, remote_lock)
  lock.release()
  assert not said
