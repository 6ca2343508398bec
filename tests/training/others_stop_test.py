"""A host that stops on an error of its own tells the others (hosts.tell_stopped), which stop
too at once (hosts.watch_others): two real processes (jax.distributed on 127.0.0.1, gloo).
Without it the other host waited in its next collective, and the stopped one in
jax.distributed's shutdown, until the heartbeat timeout aborted both (~100 s, SIGABRT)."""

import os
import pathlib
import subprocess
import sys
import time

import pytest
import two_processes

REPO = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 90


def _worker(process_id: int, port: int, case: str):
  import jax  # pylint: disable=g-import-not-at-top

  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}', num_processes=2,
                             process_id=process_id, initialization_timeout=60)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  hosts.watch_others()
  multihost_utils.process_allgather(np.int32(process_id))  # Both are up.
  if process_id == 1 and case == 'error':  # As bertjax.main ends on an error.
    hosts.tell_stopped('[Errno 28] No space left on device')
    sys.exit(1)
  if process_id == 1 and case == 'interrupted':  # As a Ctrl-C ends it: at once.
    hosts.tell_stopped('interrupted', interrupted=True)
    os._exit(130)  # pylint: disable=protected-access
  # Process 0 goes on into a collective process 1 never joins ('finished': both join it).
  multihost_utils.process_allgather(np.int32(process_id))
  print('finished', flush=True)


def _run(case: str) -> list:
  """[(exit status, output, seconds)] of processes 0 and 1."""
  env = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2',
             XLA_FLAGS='--xla_force_host_platform_device_count=1',
             PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / 'tests'),
                                         os.environ.get('PYTHONPATH', '')]))
  port, start = two_processes.free_port(), time.monotonic()
  workers = [subprocess.Popen([sys.executable, __file__, str(i), str(port), case], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=REPO) for i in range(2)]
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


@pytest.mark.parametrize('case', ['error', 'interrupted'])
def test_the_other_host_stops_at_once_with_one_line(case):
  (rc0, out0, seconds0), (rc1, out1, _) = _run(case)
  assert rc0 == 1, out0[-3000:]
  reason = '[Errno 28] No space left on device' if case == 'error' else 'interrupted'
  assert out0.strip().splitlines()[-1] == (
      f'error: process 1 of this job stopped ({reason}): this host stops too, as it would wait '
      'for it'), out0[-3000:]
  assert seconds0 < 40, out0[-3000:]  # The grace and the shutdown, not a heartbeat timeout.
  assert rc1 == (1 if case == 'error' else 130), out1[-3000:]  # Not aborted (134).
  assert 'finished' not in out0


def test_hosts_that_finish_exit_cleanly_with_the_watch_running():
  """A thread left inside a request of jax.distributed's store crashed the exit (rc 134)."""
  for rc, output, _ in _run('finished'):
    assert rc == 0, output[-3000:]
    assert 'finished' in output


if __name__ == '__main__':
  _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
