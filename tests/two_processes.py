"""Two real processes on this machine (jax.distributed on 127.0.0.1, gloo CPU collectives): a
free port, and the run of a test file's `_worker(process_id, port, folder)` in both."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def run_workers(test_file: str, folder: pathlib.Path, *, devices: int, timeout_s: int) -> list:
  """Runs `python test_file <process_id> <port> <folder>` as processes 0 and 1 (`devices` CPU
  devices each), each logging to folder/log-<i>.txt; returns the result-<i>.json each wrote.
  A worker still waiting on its peer at the timeout is killed."""
  env = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2',
             XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}',
             PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / 'tests'),
                                         os.environ.get('PYTHONPATH', '')]))
  port = free_port()
  logs = [open(folder / f'log-{i}.txt', 'w') for i in range(2)]
  workers = [subprocess.Popen([sys.executable, test_file, str(i), str(port), str(folder)],
                              env=env, stdout=logs[i], stderr=subprocess.STDOUT, cwd=REPO)
             for i in range(2)]
  try:
    for worker in workers:
      worker.wait(timeout=timeout_s)
  except subprocess.TimeoutExpired:
    pytest.fail(f'workers did not finish in {timeout_s}s; logs in {folder}')
  finally:
    for worker in workers:  # Never leave a worker waiting on its peer.
      if worker.poll() is None:
        worker.kill()
        worker.wait()
    for log in logs:
      log.close()
  for i, worker in enumerate(workers):
    assert worker.returncode == 0, (folder / f'log-{i}.txt').read_text()[-3000:]
  return [json.loads((folder / f'result-{i}.json').read_text()) for i in range(2)]
