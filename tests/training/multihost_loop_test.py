"""Two processes (jax.distributed on 127.0.0.1, gloo collectives, 4 CPU devices each) pre-train
together through `python -m bertjax.main` into one workdir: a SIGTERM to one of them stops both
at the same step with a checkpoint there (orbax's preemption sync over jax.distributed), the
same command resumes both, and they end where one process with 8 devices ends. The rows are
packed (pretrain_runs.PACK instances at most).

For the two runs to see the same examples in every step, each host reads one of two train files
in order (shuffle_window=1) and the single process interleaves the same two files: a global
batch then holds the same 16 examples, in another row order (host 0's rows first). Dropout is
off because its masks follow the rows; what is left is the order of floating-point sums.
"""

import glob
import re
import signal
import subprocess
import time

import pretrain_runs
import pytest
import two_processes

from bertjax import console
from bertjax import pretrain

STEPS = 9
HOSTS = 2


@pytest.fixture(scope='module')
def fields(tmp_path_factory):
  corpus = pretrain_runs.corpus_files(tmp_path_factory, pretrain_runs.PACK)
  train_files = sorted(glob.glob(corpus['data.train_files']))[:HOSTS]
  return pretrain_runs.fields(
      corpus | {'data.train_files': ','.join(map(str, train_files))},
      model__dropout_rate=0.0, model__attention_dropout_rate=0.0, data__shuffle_window=1,
      mesh__data=4, mesh__fsdp=2,  # fsdp=2: every parameter is split across the two hosts.
      # One layer: the hosts' agreement is the same for any depth, and each process (process 1
      # finds nothing in the compilation cache, which process 0 writes) compiles less.
      model__num_layers=1)


@pytest.fixture(scope='module')
def single_process(tmp_path_factory, fields):
  """(workdir, eval metrics) of the run in this process over its 8 simulated devices."""
  workdir = tmp_path_factory.mktemp('single')
  return workdir, pretrain.train_and_evaluate(pretrain_runs.config(STEPS, fields), str(workdir))



def start_hosts(workdir, fields, env, tag: str) -> tuple[list[subprocess.Popen], list]:
  """Both processes of one job; logs in workdir/<tag>-host-<i>.txt."""
  workdir.mkdir(exist_ok=True)
  address = f'--coordinator_address=127.0.0.1:{two_processes.free_port()}'
  logs = [workdir / f'{tag}-host-{i}.txt' for i in range(HOSTS)]
  processes = [pretrain_runs.start(
      pretrain_runs.command(workdir, STEPS, fields, address, f'--num_processes={HOSTS}',
                            f'--process_id={i}'), logs[i], env) for i in range(HOSTS)]
  return processes, logs


def finish_hosts(processes, logs, timeout=pretrain_runs.TIMEOUT_S) -> list[int]:
  """Exit codes; a host that fails gets its peer killed (it would wait on collectives). A host
  that saved and stopped preempted (console.PREEMPTED_EXIT) has not failed: its peer may still
  be finishing its own save."""
  deadline = time.monotonic() + timeout
  while any(p.poll() is None for p in processes):
    failed = [i for i, p in enumerate(processes)
              if p.poll() not in (None, 0, console.PREEMPTED_EXIT)]
    if failed or time.monotonic() > deadline:
      for p in processes:
        if p.poll() is None:
          p.kill()
          p.wait()
      culprit = failed[0] if failed else 0
      pytest.fail(f'host {culprit} {"failed" if failed else "timed out"}:\n'
                  f'{pretrain_runs.log_tail(logs[culprit])}')
    time.sleep(0.1)
  return [p.returncode for p in processes]


@pytest.fixture(scope='module')
def env(tmp_path_factory):
  return pretrain_runs.environment(8 // HOSTS, tmp_path_factory.getbasetemp() / 'jax-cache')


@pytest.fixture(scope='module')
def preempted(tmp_path_factory, fields, env):
  """(workdir, logs) of the two-process run after a SIGTERM to host 1 past its first step."""
  workdir = tmp_path_factory.mktemp('two_hosts')
  processes, logs = start_hosts(workdir, fields, env, 'preempted')
  try:  # Process 0 shows the progress; a step is taken by both hosts together.
    pretrain_runs.wait_for(lambda: f'step 1/{STEPS}:' in logs[0].read_text(), processes[0],
                           logs[0], 'the first step')
  finally:
    if processes[0].poll() is not None:  # Host 1 would wait for its peer until timeouts.
      processes[1].kill()
  processes[1].send_signal(signal.SIGTERM)  # Only host 1: jax.distributed tells host 0.
  assert finish_hosts(processes, logs) == [console.PREEMPTED_EXIT] * HOSTS  # Both: run again.
  return workdir, [log.read_text() for log in logs]


@pytest.fixture(scope='module')
def resumed(preempted, fields, env):
  """(workdir, logs) of the same two-process command run again, to the end."""
  workdir = preempted[0]
  processes, logs = start_hosts(workdir, fields, env, 'resumed')
  assert finish_hosts(processes, logs) == [0] * HOSTS
  return workdir, [log.read_text() for log in logs]


def _stop_step(preempted) -> int:
  stops = [re.findall(r'preempted: saved step (\d+)', log) for log in preempted[1]]
  assert stops[0] == stops[1] and len(stops[0]) == 1, stops
  return int(stops[0][0])


def _eval_line(log: str) -> dict:
  line = re.search(rf'eval at step {STEPS}: (.*) \(\d+\.\d s\)', log).group(1)
  return {k: float(v) for k, v in (item.split() for item in line.split(', '))}


def test_sigterm_to_one_host_stops_both_at_the_same_step(preempted):
  workdir, _ = preempted
  stopped = _stop_step(preempted)
  assert stopped < STEPS
  assert pretrain_runs.checkpoint_steps(workdir)[-1] == stopped
  assert pretrain_runs.read_meta(workdir, stopped)['examples_consumed'] == (
      stopped * pretrain_runs.BATCH)
  # One summary line, process 0's, its last; process 1 prints none.
  host_0, host_1 = preempted[1]
  assert host_0.strip().splitlines()[-1].startswith(
      f'pretrain stopped (preempted at step {stopped}: rerun the same command to resume) in ')
  assert 'pretrain stopped' not in host_1


def test_both_hosts_resume_train_to_the_end_and_evaluate(preempted, resumed, single_process):
  workdir, logs = resumed
  for i, log in enumerate(logs):
    assert f'process {i}/{HOSTS}, 8 devices (4 local)' in log
  assert f'restored step {_stop_step(preempted)} ' in logs[0]
  assert f'step {STEPS}/{STEPS}:' in logs[0]
  # Eval reads every example once across the hosts: the single process's figures (4 decimals
  # in the log).
  got, want = _eval_line(logs[0]), single_process[1]
  assert got.keys() == want.keys()
  for key in want:
    assert got[key] == pytest.approx(want[key], abs=1e-4), key
  # Process 1 leaves the progress to process 0 (a pod's consoles carried every line twice).
  assert 'process 1 shows its warnings and errors only: process 0 shows the progress' in logs[1]
  assert 'restored step' not in logs[1] and f'step {STEPS}/{STEPS}:' not in logs[1], logs[1]
  assert pretrain_runs.checkpoint_steps(workdir)[-1] == STEPS
  assert re.match(rf'pretrain finished in .*: step {STEPS}/{STEPS}, train loss ',
                  logs[0].strip().splitlines()[-1]), logs[0][-2000:]
  assert 'pretrain finished' not in logs[1]
  assert pretrain_runs.read_meta(workdir, STEPS)['mesh'] == {'data': 4, 'fsdp': 2, 'tensor': 1}


def test_two_hosts_end_where_one_process_ends(resumed, single_process):
  # The rows of each batch summed in another order, in the loss and in the gradient all-reduce
  # over gloo. Measured: within 2.1e-8 (params) and 5.6e-9 (Adam moments).
  pretrain_runs.assert_close_leaves(pretrain_runs.read_state(resumed[0], STEPS),
                                    pretrain_runs.read_state(single_process[0], STEPS))
