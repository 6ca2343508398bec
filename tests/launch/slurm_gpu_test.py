"""launch/slurm_gpu.sbatch: one bertjax.main per node through srun, against a fake srun."""

import os
import pathlib
import signal
import subprocess
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'launch' / 'slurm_gpu.sbatch'


def run_script(tmp_path, *args, srun_exit=0, job_state='RUNNING', **environ):
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  (bin_dir / 'srun').write_text(
      '#!/bin/bash\nprintf "%s\\n" "$@" > "$FAKE_LOG"\n'
      'echo "$JAX_LOCAL_DEVICE_IDS $SRUN_CPUS_PER_TASK" > "$FAKE_LOG.env"\n'
      f'exit {srun_exit}\n')
  (bin_dir / 'scontrol').write_text(  # `show job` answers with the job's state.
      '#!/bin/bash\nif [ "$1" = show ]; then echo "JobId=4242 JobState=$FAKE_STATE Reason=None"; '
      'exit; fi\nprintf "%s\\n" "$@" > "$FAKE_LOG.scontrol"\n')
  for tool in ('srun', 'scontrol'):
    (bin_dir / tool).chmod(0o755)
  venv = tmp_path / 'venv'
  (venv / 'bin').mkdir(parents=True)
  (venv / 'bin' / 'activate').write_text('export ACTIVATED=1\n')
  env = dict(os.environ, PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}',
             FAKE_LOG=str(tmp_path / 'srun.txt'), BERTJAX_VENV=str(venv),
             SLURM_SUBMIT_DIR=str(REPO), SLURM_JOB_NUM_NODES='4', SLURM_GPUS_ON_NODE='8',
             SLURM_JOB_ID='4242', SLURM_CPUS_PER_TASK='16', FAKE_STATE=job_state)
  env.update({k: v for k, v in environ.items() if v is not None})
  for name in ('JAX_LOCAL_DEVICE_IDS', *(k for k, v in environ.items() if v is None)):
    env.pop(name, None)  # None: a variable SLURM did not set.
  if not env['SLURM_SUBMIT_DIR']:
    del env['SLURM_SUBMIT_DIR']
  result = subprocess.run(['bash', str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=60)
  log = tmp_path / 'srun.txt'
  return result, log.read_text().splitlines() if log.exists() else None


def test_srun_starts_bertjax_main_with_the_flags_and_the_workdir(tmp_path):
  result, srun_args = run_script(tmp_path, '/shared/runs/base',
                                 '--config=configs/pretrain.py:size=base,phase2_fraction=0.1',
                                 '--config.data.train_files=/shared/data/train128-*')
  assert result.returncode == 0, result.stderr
  assert srun_args == ['--kill-on-bad-exit=1', 'python', '-m', 'bertjax.main',
                       '--config=configs/pretrain.py:size=base,phase2_fraction=0.1',
                       '--config.data.train_files=/shared/data/train128-*',
                       '--workdir=/shared/runs/base']
  assert '4 node(s) x 8 GPU(s) (devices 0,1,2,3,4,5,6,7), workdir /shared/runs/base' in (
      result.stdout)
  # One process per node drives all 8 GPUs (jax.distributed would take SLURM_LOCALID's GPU
  # alone), with the task's 16 CPUs for tf.data.
  assert (tmp_path / 'srun.txt.env').read_text().split() == ['0,1,2,3,4,5,6,7', '16']


def test_a_job_without_gpus_on_the_node_runs_under_set_u(tmp_path):
  """Hostile pass A: SLURM sets no SLURM_GPUS_ON_NODE without a GPU request (--gpus-per-node
  overridden), and the script's echo stopped on it under `set -u`, before srun."""
  result, srun_args = run_script(tmp_path, '/shared/runs/base', '--config=configs/pretrain.py',
                                 SLURM_GPUS_ON_NODE=None)
  assert result.returncode == 0 and srun_args[-1] == '--workdir=/shared/runs/base', result.stderr
  assert '4 node(s) x ? GPU(s) (devices all), workdir /shared/runs/base' in result.stdout


def test_no_workdir_prints_the_usage(tmp_path):
  result, srun_args = run_script(tmp_path)
  assert result.returncode == 2 and 'usage: sbatch' in result.stderr and srun_args is None


@pytest.mark.parametrize('args, message', [
    (('--config=configs/pretrain.py:size=base',),
     'the first argument is the WORKDIR, got the flag'),
    (('/shared/runs/base', '--config=configs/pretrain.py', '--workdir=/elsewhere'),
     'pass the workdir as the first argument, not --workdir=/elsewhere'),
    (('/shared/runs/base', '--workdir', '/elsewhere'),  # Hostile pass AH: srun got both.
     'pass the workdir as the first argument, not --workdir'),
    (('/shared/runs/base', '-workdir=/elsewhere'),
     'pass the workdir as the first argument, not -workdir=/elsewhere'),
])
def test_a_forgotten_or_doubled_workdir_is_refused_before_srun(tmp_path, args, message):
  result, srun_args = run_script(tmp_path, *args)
  assert result.returncode == 2 and message in result.stderr and srun_args is None, result.stderr


def test_the_script_run_without_sbatch_says_so(tmp_path):
  """Run with bash: 'SLURM_SUBMIT_DIR: unbound variable'."""
  result, srun_args = run_script(tmp_path, '/shared/runs/base', SLURM_SUBMIT_DIR='')
  assert result.returncode == 2 and srun_args is None
  assert result.stderr.strip() == (
      'slurm_gpu.sbatch: submit it with sbatch (SLURM_SUBMIT_DIR is unset): sbatch [--nodes=N] '
      'launch/slurm_gpu.sbatch WORKDIR [bertjax.main flags]')


def test_the_batch_directives_ask_for_one_task_per_node_and_requeue():
  directives = [line for line in SCRIPT.read_text().splitlines() if line.startswith('#SBATCH')]
  assert '#SBATCH --ntasks-per-node=1' in directives
  assert '#SBATCH --requeue' in directives and '#SBATCH --signal=TERM@120' in directives
  assert '#SBATCH --open-mode=append' in directives  # A requeued job's log goes on.


@pytest.mark.parametrize('srun_exit, requeued', [(75, True), (0, False), (1, False)])
def test_a_run_that_saved_and_stopped_is_requeued_and_no_other(tmp_path, srun_exit, requeued):
  """75: bertjax.main saved and stopped on SIGTERM (preemption, the time limit): the job goes
  back in the queue and resumes. A finished or failed run is not requeued; the status passes."""
  result, _ = run_script(tmp_path, '/shared/runs/base', '--config=configs/pretrain.py',
                         srun_exit=srun_exit)
  assert result.returncode == srun_exit, result.stderr
  scontrol = tmp_path / 'srun.txt.scontrol'
  if requeued:
    assert scontrol.read_text().split() == ['requeue', '4242']
    assert 'requeueing job 4242 to resume from its last checkpoint (restart 1)' in result.stdout
  else:
    assert not scontrol.exists()


def test_a_job_cancelled_with_scancel_is_not_requeued(tmp_path):
  """Review: the batch shell now outlives scancel's SIGTERM, and the run saves (75): a job the
  user cancelled must stay cancelled."""
  result, _ = run_script(tmp_path, '/shared/runs/base', '--config=configs/pretrain.py',
                         srun_exit=75, job_state='CANCELLED')
  assert result.returncode == 75, result.stderr
  assert not (tmp_path / 'srun.txt.scontrol').exists()  # No requeue.
  assert 'the job was cancelled (scancel): the run saved its last checkpoint and is not ' \
      'requeued' in result.stdout


def test_a_sigterm_to_the_whole_job_is_passed_to_the_run_and_the_job_requeued(tmp_path):
  """scancel, or a preemption that signals the whole job, sends SIGTERM to the batch shell too:
  it must outlive it, let the run save (exit 75) and requeue the job."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  started = tmp_path / 'started'
  # The run: a SIGTERM (one or several: SLURM's and the script's) asks it to save at the end of
  # its step, then it exits 75, as bertjax.main does.
  (bin_dir / 'srun').write_text(
      f"#!/bin/bash\nstop=\ntrap 'stop=1' TERM\ntouch \"{started}\"\n"
      'for i in $(seq 300); do [ -n "$stop" ] && break; sleep 0.1; done\n'
      f'[ -n "$stop" ] || exit 0\necho saved >> "{tmp_path}/srun.log"\nexit 75\n')
  (bin_dir / 'scontrol').write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > "{tmp_path}/scontrol"\n')
  for tool in ('srun', 'scontrol'):
    (bin_dir / tool).chmod(0o755)
  venv = tmp_path / 'venv'
  (venv / 'bin').mkdir(parents=True)
  (venv / 'bin' / 'activate').write_text('')
  env = dict(os.environ, PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}',
             BERTJAX_VENV=str(venv), SLURM_SUBMIT_DIR=str(REPO), SLURM_JOB_NUM_NODES='1',
             SLURM_GPUS_ON_NODE='8', SLURM_JOB_ID='4242')
  job = subprocess.Popen(['bash', str(SCRIPT), '/shared/runs/base'], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
  try:
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
      time.sleep(0.05)
    assert started.exists(), 'the fake srun did not start'
    os.killpg(job.pid, signal.SIGTERM)  # The whole job, as SLURM signals it.
    out, err = job.communicate(timeout=60)
  finally:
    if job.poll() is None:
      os.killpg(job.pid, signal.SIGKILL)
  assert job.returncode == 75, (job.returncode, out, err)
  assert (tmp_path / 'srun.log').read_text().split()[0] == 'saved'
  assert (tmp_path / 'scontrol').read_text().split() == ['requeue', '4242']
  assert 'requeueing job 4242 to resume from its last checkpoint' in out
