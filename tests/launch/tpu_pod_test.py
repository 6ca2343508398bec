"""The TPU pod launcher's command lines, against a fake gcloud that records its arguments."""

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import pytest

from bertjax import config_args
from bertjax import console
from launch import cloud
from launch import tpu_pod

REPO = pathlib.Path(__file__).resolve().parents[2]
FAKE_GCLOUD = '''#!{python}
"""Records its arguments; answers `describe` and worker 0's ssh from scripted lists."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ['FAKE_LOG'], 'a') as f:
  f.write(json.dumps(args) + '\\n')
def pop(name, default):
  path = os.environ[name]
  lines = open(path).read().split()
  open(path, 'w').write(' '.join(lines[1:]))
  return lines[0] if lines else default
if 'describe' in args:
  print(pop('FAKE_STATES', 'ACTIVE'))
elif 'ssh' in args and '--worker=0' in args:
  print('step 10/10: loss 6.1 (worker 0 log)')
  sys.exit(int(pop('FAKE_EXITS', '0')))
'''
MAIN_ARGS = ['--config=configs/pretrain.py:size=base,vocab=30522',
             '--config.data.train_files=gs://b/train-*']


def launch(tmp_path, *flags, states=(), exits=()):
  """Runs the launcher with the fake gcloud first on PATH: (exit code, stdout, gcloud calls)."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir(exist_ok=True)
  fake = bin_dir / 'gcloud'
  fake.write_text(FAKE_GCLOUD.format(python=sys.executable))
  fake.chmod(0o755)
  (tmp_path / 'states').write_text(' '.join(states))
  (tmp_path / 'exits').write_text(' '.join(exits))
  log = tmp_path / 'calls.jsonl'
  log.write_text('')
  env = dict(os.environ, PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}', FAKE_LOG=str(log),
             FAKE_STATES=str(tmp_path / 'states'), FAKE_EXITS=str(tmp_path / 'exits'))
  result = subprocess.run(
      [sys.executable, '-m', 'launch.tpu_pod', '--name=bert', '--zone=us-west4-a',
       '--accelerator_type=v5litepod-16', '--workdir=gs://b/runs/base', '--poll_seconds=0',
       *flags, '--', *MAIN_ARGS], cwd=REPO, env=env, capture_output=True, text=True,
      timeout=120)
  calls = [json.loads(line) for line in log.read_text().splitlines()]
  return result.returncode, result.stdout + result.stderr, calls


def slice_():
  return tpu_pod.Slice('bert', 'us-west4-a', 'v5litepod-16', spot=True)


ZONE = '--zone=us-west4-a'
RUN = ("rm -f ~/bertjax.rc; (trap '' HUP; python3 -m bertjax.main "
       '--config=configs/pretrain.py:size=base,vocab=30522 '
       "'--config.data.train_files=gs://b/train-*' --workdir=gs://b/runs/base; "
       'echo $? > ~/bertjax.rc) > ~/bertjax.log 2>&1 < /dev/null &')
STREAM = ('tail -n +1 -F ~/bertjax.log & while [ ! -f ~/bertjax.rc ]; do sleep 5; done; '
          'sleep 2; kill %1; exit $(cat ~/bertjax.rc)')
CREATE = ['compute', 'tpus', 'queued-resources', 'create', 'bert', '--node-id=bert',
          '--accelerator-type=v5litepod-16', '--runtime-version=v2-alpha-tpuv5-lite', '--spot',
          ZONE]
DESCRIBE = ['compute', 'tpus', 'queued-resources', 'describe', 'bert',
            '--format=value(state.state)', ZONE]
COPY = ['compute', 'tpus', 'tpu-vm', 'scp', '--recurse', 'configs', 'bert:', '--worker=all', ZONE]
INSTALL = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=all',
           '--command=pip install -U "jax[tpu]" git+https://example.org/bertjax@v1', ZONE]
START = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=all', f'--command={RUN}', ZONE]
LOGS = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=0', f'--command={STREAM}', ZONE]
DELETE = ['compute', 'tpus', 'queued-resources', 'delete', 'bert', '--force', '--quiet', ZONE]


def test_a_run_creates_installs_runs_streams_and_deletes(tmp_path):
  code, out, calls = launch(tmp_path, '--spot', '--git_ref=git+https://example.org/bertjax@v1',
                            states=['PROVISIONING', 'ACTIVE', 'ACTIVE'])
  assert code == 0, out
  assert calls == [CREATE, DESCRIBE, DESCRIBE, COPY, INSTALL, START, LOGS, DESCRIBE, DELETE]
  assert 'step 10/10: loss 6.1 (worker 0 log)' in out


def test_a_preempted_slice_is_recreated_and_the_run_resumed(tmp_path):
  code, out, calls = launch(tmp_path, '--spot', '--git_ref=git+https://example.org/bertjax@v1',
                            states=['ACTIVE', 'SUSPENDED', 'ACTIVE', 'ACTIVE'],
                            exits=['255', '0'])
  assert code == 0, out
  attempt = [CREATE, DESCRIBE, COPY, INSTALL, START, LOGS, DESCRIBE]
  assert calls == attempt + [DELETE] + attempt + [DELETE]
  assert 'preempted; re-creating it (restart 1 of 10)' in out


def test_a_failed_run_on_a_healthy_slice_is_not_retried(tmp_path):
  code, _, calls = launch(tmp_path, '--spot', '--git_ref=git+https://example.org/bertjax@v1',
                          '--keep', exits=['1'])
  assert code == 1
  assert calls == [CREATE, DESCRIBE, COPY, INSTALL, START, LOGS, DESCRIBE]  # --keep: no delete.


def test_restarts_run_out_after_max_restarts(tmp_path):
  code, _, calls = launch(tmp_path, '--git_ref=git+https://example.org/bertjax@v1',
                          '--max_restarts=1', exits=['255', '255'])
  assert code == cloud.PREEMPTED_EXIT
  assert sum(c[:4] == CREATE[:4] for c in calls) == 2


def test_dry_run_prints_every_command_and_runs_none(tmp_path):
  code, out, calls = launch(tmp_path, '--dry_run', '--aot_check', '--reserved')
  assert code == 0 and calls == []
  lines = out.strip().splitlines()
  assert lines[0].endswith('-m launch.aot_compile --topology=v5e:4x4 '
                           '--config=configs/pretrain.py:size=base,vocab=30522 '
                           "'--config.data.train_files=gs://b/train-*'")
  assert lines[1].endswith('-m pip wheel --no-deps --wheel-dir=dist .')
  assert lines[2] == ('gcloud compute tpus queued-resources create bert --node-id=bert '
                      '--accelerator-type=v5litepod-16 --runtime-version=v2-alpha-tpuv5-lite '
                      '--reserved --zone=us-west4-a')
  assert lines[4] == ('gcloud compute tpus tpu-vm scp --recurse '
                      'dist/bertjax-0.1.0-py3-none-any.whl configs bert: --worker=all '
                      '--zone=us-west4-a')
  assert len(lines) == 10 and lines[-1].startswith('gcloud compute tpus queued-resources delete')


@pytest.mark.parametrize('tpu, workdir, message', [
    (tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-12'), 'gs://b/r',
     r"unknown accelerator type 'v5litepod-12'; known: v5litepod-1, v5litepod-4"),
    (tpu_pod.Slice('b', 'us-east1-d', 'v5litepod-16'), 'gs://b/r',
     r"v5litepod slices are not offered in zone 'us-east1-d'; zones: us-central1-a"),
    (tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-16'), '/tmp/run',
     r'has 4 hosts, which cannot share the local path .* use a bucket'),
    (tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-16', spot=True, reserved=True), 'gs://b/r',
     'exclude each other'),
    (tpu_pod.Slice('Bad Name!', 'us-west4-a', 'v5litepod-16'), 'gs://b/r',
     "--name='Bad Name!': a TPU VM name is lowercase letters"),
])
def test_bad_requests_are_refused_with_the_valid_choices(tpu, workdir, message):
  with pytest.raises(ValueError, match=message):
    tpu_pod.check(tpu, workdir)


def test_a_single_host_slice_may_use_a_local_workdir():
  tpu_pod.check(tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-8'), '/tmp/run')
  assert tpu_pod.Slice('b', 'us-east5-a', 'v5p-32').hosts == 4
  assert cloud.SLICES['v6e-16'] == (4, 'v6e:4x4')


def launch_in_process(main_args, workdir='gs://b/runs/base', **kwargs):
  """tpu_pod.launch with a runner that records each command and answers as a healthy slice
  whose run succeeds; returns the commands."""
  calls = []

  def run(cmd, **_):
    calls.append(cmd)
    return subprocess.CompletedProcess(cmd, 0, 'ACTIVE\n')

  code = tpu_pod.launch(slice_(), main_args, workdir, run=run, poll_s=0,
                        git_ref='git+https://example.org/bertjax@v1', **kwargs)
  assert code == 0
  return calls


def worker_home(calls, home):
  """What the launcher's `gcloud ... scp` commands leave in a worker's home (`home`), copied
  from the current directory as scp copies (--recurse: folders whole; NAME:PATH: that name)."""
  for cmd in calls:
    if cmd[:5] != ['gcloud', 'compute', 'tpus', 'tpu-vm', 'scp']:
      continue
    paths = [a for a in cmd[5:] if not a.startswith('--')]
    *sources, dest = paths
    for source in sources:
      target = home / (dest.partition(':')[2] or pathlib.Path(source).name)
      if pathlib.Path(source).is_dir():
        assert '--recurse' in cmd, cmd
        shutil.copytree(source, target, dirs_exist_ok=True)
      else:
        shutil.copy(source, target)


def worker_job(calls) -> list[str]:
  """bertjax.main's flags in the command the launcher starts on every worker."""
  command = next(a for c in calls for a in c if 'python3 -m bertjax.main' in a)
  words = shlex.split(command.partition('python3 -m bertjax.main ')[2])
  return words[:words.index('--workdir=gs://b/runs/base;') + 1]


@pytest.mark.parametrize('config', [
    ['--config', 'configs/pretrain.py:size=base,steps=7'],  # absl's --flag value form.
    [f'--config={REPO}/configs/pretrain.py:size=base,steps=7'],  # An absolute local path.
    ['--config=OUTSIDE:size=base,steps=7'],  # A file outside configs/ (importing configs').
])
def test_the_workers_hold_the_config_file_the_job_names(tmp_path, monkeypatch, config):
  """A worker runs bertjax.main in its home, which holds only what the launcher copies there
  (the wheel has the bertjax package only): the job's config file and configs/ (every config
  imports configs.common) must be among the copies, at the path the worker's --config names.
  The worker's home is rebuilt from the scp commands and the job's config loaded there, in a
  process that cannot import this checkout's configs."""
  outside = tmp_path / 'experiments' / 'jax.py'  # A module's name: must not shadow jax there.
  outside.parent.mkdir()
  outside.write_text('from configs import pretrain\n\n\ndef get_config(arg):\n'
                     '  return pretrain.get_config(arg)\n')
  config = [a.replace('OUTSIDE', str(outside)) for a in config]
  monkeypatch.chdir(REPO)
  calls = launch_in_process(config)
  home = tmp_path / 'home'
  home.mkdir()
  worker_home(calls, home)
  job = worker_job(calls)
  script = ('import sys; from bertjax import config_args; '
            'print(config_args.check_args(sys.argv[1:]).num_train_steps)')
  loaded = subprocess.run([sys.executable, '-c', script, *job], cwd=home, capture_output=True,
                          text=True, timeout=120, env={**os.environ, 'PYTHONPATH': ''})
  assert loaded.returncode == 0 and loaded.stdout.strip() == '7', (job, loaded.stderr)
  # Read from the home, not from this machine's disk (which a worker does not have).
  config_file = config_args.config_spec(job).partition(':')[0]
  assert (home / config_file).resolve().is_relative_to(home), job
  assert not (home / 'jax.py').exists()


def test_a_job_workdir_other_than_the_launchers_is_refused_before_anything_runs(monkeypatch):
  monkeypatch.chdir(REPO)
  calls = []
  for extra in (['--workdir=gs://b/other'], ['--workdir', 'gs://b/other'],
                ['-workdir=gs://b/other']):
    with pytest.raises(ValueError) as e:
      tpu_pod.launch(slice_(), MAIN_ARGS + extra, 'gs://b/runs/base',
                     run=lambda cmd, **_: calls.append(cmd))
    assert str(e.value) == ('the job\'s flags (after --) set --workdir=gs://b/other, the '
                            'launcher\'s --workdir=gs://b/runs/base: pass the run directory '
                            'once, as the launcher\'s --workdir (before --)')
  assert calls == []
  # The launcher's own workdir repeated after -- changes nothing: it runs.
  calls = launch_in_process(MAIN_ARGS + ['--workdir=gs://b/runs/base'])
  assert worker_job(calls)[-1] == '--workdir=gs://b/runs/base;'


def test_the_aot_check_gets_the_config_flags_in_any_absl_form_and_only_for_pretraining(
    monkeypatch):
  monkeypatch.chdir(REPO)
  calls = launch_in_process(['--config', 'configs/pretrain.py:size=base',
                             '--config.num_train_steps', '5', '--config.model.nsp',
                             '--workdir', 'gs://b/runs/base'], aot_check=True)
  assert calls[0][1:] == ['-m', 'launch.aot_compile', '--topology=v5e:4x4',
                          '--config=configs/pretrain.py:size=base',
                          '--config.num_train_steps=5', '--config.model.nsp']
  with pytest.raises(ValueError, match=r"--aot_check compiles the pre-training step only, and "
                     r"this job is config.job='finetune': leave --aot_check out"):
    launch_in_process(['--config=configs/finetune.py:task=mrpc'], aot_check=True)


def test_what_counts_as_a_preemption():
  assert tpu_pod.was_preempted(0, 'PREEMPTED') and tpu_pod.was_preempted(1, 'SUSPENDING')
  assert tpu_pod.was_preempted(255, 'ACTIVE')  # The ssh session cut, the run not finished.
  # The run saved and stopped on a SIGTERM (maintenance) while the slice stayed ACTIVE.
  assert tpu_pod.was_preempted(console.PREEMPTED_EXIT, 'ACTIVE')
  assert not tpu_pod.was_preempted(0, 'ACTIVE') and not tpu_pod.was_preempted(1, 'ACTIVE')
