"""A host that stops on an error of its own or a Ctrl-C tells the others (hosts.tell_stopped),
which stop too at once (hosts.watch_others): real processes (jax.distributed on 127.0.0.1,
gloo). Without it the others waited in their next collective, and the stopped one in
jax.distributed's shutdown, until its timeout aborted them all (313 s, SIGABRT)."""

import os
import pathlib
import subprocess
import sys
import time

import pytest
import two_processes

REPO = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 90


def _worker(process_id: int, port: int, case: str, count: int, stopper: int):
  import jax  # pylint: disable=g-import-not-at-top

  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}', num_processes=count,
                             process_id=process_id, initialization_timeout=60)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from bertjax import console  # pylint: disable=g-import-not-at-top
  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  hosts.watch_others()
  multihost_utils.process_allgather(np.int32(process_id))  # All are up.
  if process_id == stopper and case in ('error', 'unwinding'):  # As bertjax.main ends on one.
    hosts.tell_stopped('[Errno 28] No space left on device')
    sys.exit(1)
  interrupted = {'interrupted': [stopper], 'two_interrupted': [0, 1],
                 'error_then_interrupted': [0]}.get(case, [])
  if process_id in interrupted:  # As bertjax.main ends on a Ctrl-C.
    if case == 'error_then_interrupted':  # A Ctrl-C while its error's clean-up runs.
      hosts.tell_stopped('[Errno 28] No space left on device')
    with console.at_interrupt(lambda: hosts.tell_stopped('interrupted', status=130,
                                                         interrupted=True)):
      console.interrupted(lambda: 'interrupted here')
  if case == 'unwinding':  # The same error, met 9 s later here, after a save's end.
    hosts.unwinding()
    time.sleep(9)
    hosts.tell_stopped('its own error')
    print('error: its own error', flush=True)
    sys.exit(1)
  # The others go on into a collective the stopped host never joins ('finished': all join it).
  multihost_utils.process_allgather(np.int32(process_id))
  print('finished', flush=True)


def _run(case: str, count: int = 2, stopper: int = 1) -> list:
  """[(exit status, output, seconds)] of each process."""
  env = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2',
             XLA_FLAGS='--xla_force_host_platform_device_count=1',
             PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / 'tests'),
                                         os.environ.get('PYTHONPATH', '')]))
  port, start = two_processes.free_port(), time.monotonic()
  workers = [subprocess.Popen([sys.executable, __file__, str(i), str(port), case, str(count),
                               str(stopper)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=REPO)
             for i in range(count)]
  ended = []
  try:
    for worker in workers:
      output, _ = worker.communicate(timeout=TIMEOUT_S)
      ended.append((worker.returncode, output, time.monotonic() - start))
  except subprocess.TimeoutExpired:
    pytest.fail(f'{case}: the hosts still waited after {TIMEOUT_S} s')
  finally:
    for worker in workers:
      if worker.poll() is None:
        worker.kill()
        worker.wait()
  return ended


_FULL = '[Errno 28] No space left on device'


@pytest.mark.parametrize('case, count, stopper, statuses, said', [
    ('error', 2, 1, {1: 1}, [f'process 1 of this job stopped ({_FULL})']),
    # Process 0 holds the store the others read: it leaves last.
    ('interrupted', 2, 0, {0: 130}, ['process 0 of this job stopped (interrupted)']),
    ('interrupted', 3, 1, {1: 130}, ['process 1 of this job stopped (interrupted)']),
    # A Ctrl-C reaching two hosts (srun sends it to every task): the first one told is said.
    ('two_interrupted', 3, -1, {0: 130, 1: 130}, [
        f'process {i} of this job stopped (interrupted)' for i in (0, 1)]),
    # Process 0 stops on its error, then a Ctrl-C comes during its clean-up.
    ('error_then_interrupted', 2, -1, {0: 130}, [f'process 0 of this job stopped ({_FULL})']),
], ids=['error', 'process_0_interrupted', 'one_of_three_interrupted', 'two_interrupted',
        'error_then_interrupted'])
def test_the_other_hosts_stop_at_once_with_one_line(case, count, stopper, statuses, said):
  """Review: process 0 leaving before the others read its stop took the store with them (they
  aborted, rc -6); so did two hosts interrupted at once, and a Ctrl-C after an error."""
  ended = _run(case, count, stopper)
  for i, (rc, output, seconds) in enumerate(ended):
    if i in statuses:
      assert rc == statuses[i], output[-3000:]  # Not aborted (134, -6).
      continue
    assert rc == 1, output[-3000:]
    assert output.strip().splitlines()[-1] in [
        f'error: {s}: this host stops too, as it would wait for it' for s in said], output[-3000:]
    assert seconds < 40, output[-3000:]  # The poll and the leaving, not a timeout.
    assert 'finished' not in output


def test_a_host_cleaning_up_after_the_same_error_ends_with_its_own_line():
  """Review: a host that met the error every host met, 9 s after another (its save ending),
  was cut short by the other's stop 5 s in, its own line never said."""
  (rc0, out0, _), (rc1, out1, _) = _run('unwinding')
  assert rc0 == 1 and out0.strip().splitlines()[-1] == 'error: its own error', out0[-3000:]
  assert rc1 == 1, out1[-3000:]


def test_hosts_that_finish_exit_cleanly_with_the_watch_running():
  """A thread left inside a request of jax.distributed's store crashed the exit (rc 134)."""
  for rc, output, _ in _run('finished'):
    assert rc == 0, output[-3000:]
    assert 'finished' in output



def test_a_failing_run_marks_its_host_as_cleaning_up(monkeypatch):
  """checkpoint.closing, as a failed run waits for its last save: another host's stop then
  leaves this host to end with its own error (the test above reads the mark)."""
  import threading  # pylint: disable=g-import-not-at-top

  from bertjax.training import checkpoint  # pylint: disable=g-import-not-at-top
  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(hosts, '_UNWINDING', threading.Event())

  class Manager:
    closed = False

    def close(self):
      self.closed = True

  manager = Manager()
  with pytest.raises(FloatingPointError), checkpoint.closing(manager):
    raise FloatingPointError('loss is NaN')
  assert manager.closed and hosts._UNWINDING.is_set()  # pylint: disable=protected-access


if __name__ == '__main__':
  _worker(*map(int, sys.argv[1:3]), sys.argv[3], *map(int, sys.argv[4:6]))
