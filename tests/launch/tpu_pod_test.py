"""The TPU pod launcher's command lines, against a fake gcloud that records its arguments."""

import dataclasses
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import commands
import pytest

from bertjax import config_args
from bertjax import console
from launch import cloud
from launch import tpu_pod

REPO = pathlib.Path(__file__).resolve().parents[2]
FAKE_GCLOUD = '''#!{python}
"""Records its arguments; answers `describe` and worker 0's ssh from scripted lists; a deleted
queued resource is not found until it is created again. FAKE_INTERRUPT: worker 0's ssh sends
its launcher SIGINT (Ctrl-C) while it streams."""
import json, os, signal, sys, time
args = sys.argv[1:]
gone = os.environ['FAKE_LOG'] + '.gone'
with open(os.environ['FAKE_LOG'], 'a') as f:
  f.write(json.dumps(args) + '\\n')
def pop(name, default):
  path = os.environ[name]
  lines = open(path).read().split()
  open(path, 'w').write(' '.join(lines[1:]))
  return lines[0] if lines else default
if 'describe' in args:
  if os.path.exists(gone):
    sys.exit('ERROR: (gcloud.compute.tpus.queued-resources.describe) NOT_FOUND')
  print(pop('FAKE_STATES', 'ACTIVE'))
elif 'delete' in args:
  open(gone, 'w').close()
elif 'create' in args and os.path.exists(gone):
  os.unlink(gone)
elif 'ssh' in args and '--worker=0' in args and 'rev-parse' in args[-2]:
  print('b2' * 20)
elif 'ssh' in args and '--worker=0' in args:
  print('step 10/10: loss 6.1 (worker 0 log)', flush=True)
  if os.environ.get('FAKE_INTERRUPT'):
    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(30)
  sys.exit(int(pop('FAKE_EXITS', '0')))
'''
MAIN_ARGS = ['--config=configs/pretrain.py:size=base,vocab=30522',
             '--config.data.train_files=gs://b/train-*']


def launch(tmp_path, *flags, states=(), exits=(), interrupt=False):
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
             FAKE_STATES=str(tmp_path / 'states'), FAKE_EXITS=str(tmp_path / 'exits'),
             FAKE_INTERRUPT='1' if interrupt else '')
  result = subprocess.run(
      [sys.executable, '-m', 'launch.tpu_pod', '--name=bert', '--zone=us-west4-a',
       '--accelerator_type=v5litepod-16', '--workdir=gs://b/runs/base', '--poll_seconds=0',
       *flags, '--', *MAIN_ARGS], cwd=REPO, env=env, capture_output=True, text=True,
      timeout=120, preexec_fn=commands.default_sigint)
  calls = [json.loads(line) for line in log.read_text().splitlines()]
  return result.returncode, result.stdout + result.stderr, calls


def slice_():
  return tpu_pod.Slice('bert', 'us-west4-a', 'v5litepod-16', spot=True)


ZONE = '--zone=us-west4-a'
RUN = ("rm -f ~/bertjax.rc ~/bertjax.pid; (trap '' HUP; ~/bertjax-venv/bin/python -m bertjax.main "
       '--config=configs/pretrain.py:size=base,vocab=30522 '
       "'--config.data.train_files=gs://b/train-*' --workdir=gs://b/runs/base; "
       'echo $? > ~/bertjax.rc) > ~/bertjax.log 2>&1 < /dev/null & echo $! > ~/bertjax.pid')
STREAM = ('tail -n +1 -F ~/bertjax.log & while [ ! -f ~/bertjax.rc ]; do if ! kill -0 '
          '"$(cat ~/bertjax.pid 2>/dev/null)" 2>/dev/null && [ ! -f ~/bertjax.rc ]; then kill %1; '
          'exit 75; fi; sleep 5; done; sleep 2; kill %1; exit $(cat ~/bertjax.rc)')
CREATE = ['compute', 'tpus', 'queued-resources', 'create', 'bert', '--node-id=bert',
          '--accelerator-type=v5litepod-16', '--runtime-version=v2-alpha-tpuv5-lite', '--spot',
          ZONE]
DESCRIBE = ['compute', 'tpus', 'queued-resources', 'describe', 'bert',
            '--format=value(state.state)', ZONE]
COMMIT = 'a1' * 20
GIT_REF = f'git+https://example.org/bertjax@{COMMIT}'  # A commit: installed as it is.
INSTALL = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=all',
           '--command=rm -rf ~/bertjax-src && git init -q ~/bertjax-src && git -C ~/bertjax-src '
           f'fetch -q --depth=1 https://example.org/bertjax {COMMIT} && git -C ~/bertjax-src '
           'checkout -q FETCH_HEAD && rm -rf ~/configs && cp -r ~/bertjax-src/configs ~/configs '
           '&& python3 -m pip install -q --user -U uv && python3 -m uv venv -q '
           '--allow-existing --python 3.12 ~/bertjax-venv && python3 -m uv pip install -q '
           '--python ~/bertjax-venv/bin/python -U "jax[tpu]" ~/bertjax-src', ZONE]
START = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=all', f'--command={RUN}', ZONE]
LOGS = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=0',
        '--ssh-flag=-o ServerAliveInterval=30', '--ssh-flag=-o ServerAliveCountMax=4',
        f'--command={STREAM}', ZONE]
DELETE = ['compute', 'tpus', 'queued-resources', 'delete', 'bert', '--force', '--quiet', ZONE]


def test_a_run_creates_installs_runs_streams_and_deletes(tmp_path):
  code, out, calls = launch(tmp_path, '--spot', '--git_ref=' + GIT_REF,
                            states=['PROVISIONING', 'ACTIVE', 'ACTIVE'])
  assert code == 0, out
  assert calls == [CREATE, DESCRIBE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE, DELETE]
  assert 'step 10/10: loss 6.1 (worker 0 log)' in out


def test_a_preempted_slice_is_recreated_and_the_run_resumed(tmp_path):
  code, out, calls = launch(tmp_path, '--spot', '--git_ref=' + GIT_REF,
                            states=['ACTIVE', 'SUSPENDED', 'ACTIVE', 'ACTIVE'],
                            exits=['255', '0'])
  assert code == 0, out
  attempt = [CREATE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE]
  # Deleted: not found, twice in a row.
  assert calls == attempt + [DELETE, DESCRIBE, DESCRIBE] + attempt + [DELETE]
  assert 'preempted; re-creating it (restart 1 of 10)' in out


def test_a_failed_run_on_a_healthy_slice_is_not_retried(tmp_path):
  code, _, calls = launch(tmp_path, '--spot', '--git_ref=' + GIT_REF,
                          '--keep', exits=['1'])
  assert code == 1
  assert calls == [CREATE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE]  # --keep: no delete.


def test_restarts_run_out_after_max_restarts(tmp_path):
  code, _, calls = launch(tmp_path, '--git_ref=' + GIT_REF,
                          '--max_restarts=1', exits=['75', '75'])
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


def test_a_local_workdir_only_on_a_single_host_slice_kept_and_not_spot(tmp_path):
  """Deleting the slice (at the end, or on a preemption) deletes the VM's disk, checkpoints and
  all: a re-created slice would start the run again from step 0."""
  one_host = tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-8')
  tpu_pod.check(one_host, '/tmp/run', keep=True)
  for tpu, keep in ((one_host, False), (dataclasses.replace(one_host, spot=True), True)):
    with pytest.raises(ValueError, match=r"^the local path '/tmp/run' lies on the VM's disk, .*: "
                       r'use a bucket, --workdir=gs://BUCKET/runs/NAME, or pass --keep without '
                       r'--spot$'):
      tpu_pod.check(tpu, '/tmp/run', keep=keep)
  code, out, calls = launch(tmp_path, '--accelerator_type=v5litepod-8', '--workdir=/home/me/run',
                            '--spot', '--keep')
  assert code == 2 and "error: the local path '/home/me/run' lies on the VM's disk" in out, out
  assert calls == []
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
                        git_ref=GIT_REF, **kwargs)
  assert code == 0
  return calls


def worker_home(calls, home):
  """What the launcher's `gcloud ... scp` commands leave in a worker's home (`home`), copied
  from the current directory as scp copies (--recurse: folders whole; NAME:PATH: that name),
  and the git ref's configs/ its install takes (the ref: this checkout)."""
  for cmd in calls:
    if 'cp -r ~/bertjax-src/configs ~/configs' in cmd[-2]:
      shutil.copytree(REPO / 'configs', home / 'configs', dirs_exist_ok=True)
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
  command = next(a for c in calls for a in c if 'python -m bertjax.main' in a)
  words = shlex.split(command.partition('python -m bertjax.main ')[2])
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


def test_a_config_that_fails_on_the_slice_is_refused_before_booking(monkeypatch):
  """Pass S: these passed the launchers' check, then failed on the booked slice at their start
  (cudnn on a TPU; a batch 16 devices cannot split) or once traced, the data read (splash with
  attention dropout, on any platform)."""
  monkeypatch.chdir(REPO)
  for extra, message in (
      (['--config.model.attention_impl=cudnn'], 'model.attention_impl=cudnn is a GPU kernel and '
       'this run is on tpu'),
      (['--config.global_batch_size=100'], 'global_batch_size=100 cannot be split over the 16 '
       'batch shards of 1 x v5litepod-16 (16 devices), mesh data=16 x fsdp=1: pass a multiple '
       'of 16, e.g. 96'),
      (['--config.global_batch_size=128', '--config.grad_accum_steps=16'], 'the micro-batch '
       '(global_batch_size / grad_accum_steps)=8 cannot be split over the 16 batch shards'),
      (['--config.mesh.tensor=3'], 'on 1 x v5litepod-16 (16 devices): mesh '),
      (['--config.model.attention_impl=splash'], "config.model.attention_impl='splash': has no "
       'attention-probability dropout, and model.attention_dropout_rate=0.1 trains with it')):
    calls = []
    with pytest.raises(ValueError, match=re.escape(message)):
      tpu_pod.launch(slice_(), MAIN_ARGS + extra, 'gs://b/runs/base',
                     run=lambda cmd, _calls=calls, **_: _calls.append(cmd))
    assert calls == [], extra
  assert launch_in_process(MAIN_ARGS + ['--config.model.attention_impl=splash',
                                        '--config.model.attention_dropout_rate=0'])
  # A batch split over the data axis only (the rules' choice): 4 shards, not 16.
  assert launch_in_process(MAIN_ARGS + [
      '--config.mesh.fsdp=4', '--config.global_batch_size=4', '--config.eval_batch_size=4',
      '--config.mesh.rules=batch=data,embed=fsdp,mlp=tensor,heads=tensor,vocab=tensor'])


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
  assert tpu_pod.was_preempted(255, 'PREEMPTED') and tpu_pod.was_preempted(1, 'SUSPENDING')
  # The run saved and stopped on a SIGTERM (maintenance) while the slice stayed ACTIVE.
  assert tpu_pod.was_preempted(console.PREEMPTED_EXIT, 'ACTIVE')
  assert not tpu_pod.was_preempted(0, 'ACTIVE') and not tpu_pod.was_preempted(1, 'ACTIVE')
  assert not tpu_pod.was_preempted(0, 'SUSPENDED')  # Finished: never run again.
  assert not tpu_pod.was_preempted(1, '')  # The state unknown (gcloud failing): not preempted.


def launch_scripted(monkeypatch, states=(), exits=(), fails=(), interrupt=None, **kwargs):
  """tpu_pod.launch in this process, its runner answering as FAKE_GCLOUD does (`states` for
  describe, ERROR where gcloud fails; `exits` for worker 0's ssh) and failing each command in
  `fails` once (exit 255, as ssh does when the slice goes away): (launch's exit code or its
  error, the gcloud calls as FAKE_GCLOUD records them). `interrupt`: the command at which Ctrl-C
  comes."""
  monkeypatch.chdir(REPO)
  states, exits, fails, calls = list(states), list(exits), list(fails), []
  gone = [False]  # Deleted, not created since: describe does not find it.

  def run(cmd, check=True, capture=False):
    args = cmd[1:]
    calls.append(args)
    code, out = 0, ''
    if interrupt == args:
      raise KeyboardInterrupt
    if 'describe' in args and gone[0]:
      code = 1
    elif 'describe' in args:
      state = states.pop(0) if states else 'ACTIVE'
      code, out = (1, '') if state == 'ERROR' else (0, f'{state}\n')
    elif args in fails:
      fails.remove(args)
      code = 255
    elif 'delete' in args or 'create' in args:
      gone[0] = 'delete' in args
    elif '--worker=0' in args and 'rev-parse' in args[-2]:
      out = 'b2' * 20
    elif '--worker=0' in args:
      code = int(exits.pop(0)) if exits else 0
    if check and code:
      raise RuntimeError(f'{cmd[0]} exited with {code}: {shlex.join(cmd)}')
    return subprocess.CompletedProcess(cmd, code, out if capture else None)

  try:
    result = tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://b/runs/base', run=run, poll_s=0,
                            **{'git_ref': GIT_REF, **kwargs})
  except RuntimeError as e:
    result = str(e)
  return result, calls


ATTEMPT = [CREATE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE]


def test_a_cut_ssh_session_on_a_live_slice_is_reattached_not_deleted(monkeypatch):
  code, calls = launch_scripted(monkeypatch, exits=['255', '0'])
  assert code == 0 and calls == ATTEMPT + [LOGS, DESCRIBE, DELETE]
  # Cut every time: the slice, whose run may go on, is left, with what to do about it.
  error, calls = launch_scripted(monkeypatch, exits=['255'] * (tpu_pod.REATTACH + 1))
  assert error.startswith('the ssh session to worker 0 of bert was cut 6 times while the slice '
                          'was not preempted; it is left running: follow its run with gcloud '
                          'compute tpus tpu-vm ssh bert --worker=0'), error
  assert error.endswith('or delete it with gcloud compute tpus queued-resources delete bert '
                        '--force --quiet --zone=us-west4-a')
  assert calls == ATTEMPT + [LOGS, DESCRIBE] * tpu_pod.REATTACH  # No delete, no re-create.


def test_a_finished_run_is_never_run_again_and_a_failing_describe_is_asked_again(monkeypatch):
  # Exit 0: finished, even if the slice was preempted just after.
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], exits=['0'])
  assert code == 0 and calls == ATTEMPT + [DELETE]
  # gcloud failing on describe is asked again; the run's own failure is not a preemption.
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'ERROR', 'ACTIVE'], exits=['1'])
  assert code == 1 and calls == ATTEMPT + [DESCRIBE, DELETE]


def test_an_existing_queued_resource_is_refused_and_left(monkeypatch):
  """The same command run again while the slice of an earlier one exists (its launcher died, or
  --keep): the create fails, and that slice is not this process's to delete."""
  error, calls = launch_scripted(monkeypatch, fails=[CREATE])
  assert error.startswith('queued resource bert exists already (ACTIVE): follow its run with '
                          'gcloud compute tpus tpu-vm ssh bert --worker=0 '), error
  assert error.endswith(', or delete it with gcloud compute tpus queued-resources delete bert '
                        '--force --quiet --zone=us-west4-a and run this again')
  assert calls == [CREATE, DESCRIBE]
  # A create that failed otherwise (no such resource): gcloud's error, nothing deleted.
  error, calls = launch_scripted(monkeypatch, states=['ERROR'], fails=[CREATE])
  assert error.startswith('gcloud exited with 255: gcloud compute tpus queued-resources create')
  assert calls == [CREATE, DESCRIBE]


def test_a_preemption_before_the_run_starts_is_a_restart(monkeypatch):
  # Suspended while waiting to be ACTIVE.
  code, calls = launch_scripted(monkeypatch, states=['PROVISIONING', 'SUSPENDED'])
  assert code == 0 and calls == ([CREATE, DESCRIBE, DESCRIBE, DELETE, DESCRIBE, DESCRIBE] + ATTEMPT
                                 + [DELETE])
  # Preempted during the install: ssh exits 255 and the slice is SUSPENDED.
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], fails=[INSTALL])
  assert code == 0 and calls == (ATTEMPT[:3] + [DESCRIBE, DELETE, DESCRIBE, DESCRIBE] + ATTEMPT
                                 + [DELETE])
  # Counted against --max_restarts.
  code, calls = launch_scripted(monkeypatch, states=['SUSPENDED'], max_restarts=0)
  assert code == cloud.PREEMPTED_EXIT and calls == [CREATE, DESCRIBE, DELETE]
  # An install that fails on a slice still ACTIVE is an error, as before.
  error, calls = launch_scripted(monkeypatch, fails=[INSTALL])
  assert error.startswith('gcloud exited with 255: gcloud compute tpus tpu-vm ssh bert')
  assert calls == ATTEMPT[:3] + [DESCRIBE, DELETE]


def test_the_workers_python_is_one_bertjax_installs_on():
  """The TPU images hold Python 3.10 (Ubuntu 22.04): each worker's venv takes a version that
  pyproject's requires-python admits, and the run starts with that venv's python."""
  import tomllib  # pylint: disable=g-import-not-at-top
  pyproject = pathlib.Path(tpu_pod.__file__).resolve().parents[1] / 'pyproject.toml'
  spec = tomllib.loads(pyproject.read_text())['project']['requires-python']  # >=3.11,<3.14
  bounds = dict((op, (int(a), int(b))) for op, a, b in re.findall(r'(>=|<)(\d+)\.(\d+)', spec))
  version = tuple(map(int, re.search(r'--python (\d+)\.(\d+) ', tpu_pod.VENV_SETUP).groups()))
  assert bounds['>='] <= version < bounds['<'], (spec, version)
  install = tpu_pod.install_commands(slice_(), 'dist/bertjax-0.1.0-py3-none-any.whl', '')[-1]
  assert f'--python {tpu_pod.PYTHON} -U "jax[tpu]" ~/bertjax-0.1.0-py3-none-any.whl' in (
      install[-2])
  assert tpu_pod.run_command(slice_(), ['--config=c.py'], 'gs://b/r')[-2].startswith(
      f"--command=rm -f ~/bertjax.rc ~/bertjax.pid; (trap '' HUP; {tpu_pod.PYTHON} -m "
      'bertjax.main ')


def test_a_config_importing_a_module_beside_it_is_refused_before_booking(tmp_path, monkeypatch):
  """Here the module is found through PYTHONPATH; a worker gets the config file alone."""
  experiments = tmp_path / 'experiments'
  experiments.mkdir()
  (experiments / 'mycommon.py').write_text('STEPS = 7\n')
  (experiments / 'my.py').write_text(
      'import mycommon\nfrom configs import pretrain\n\n\ndef get_config(arg):\n'
      '  config = pretrain.get_config(arg)\n  config.num_train_steps = mycommon.STEPS\n'
      '  return config\n')
  monkeypatch.chdir(REPO)
  monkeypatch.setenv('PYTHONPATH', str(experiments))
  monkeypatch.syspath_prepend(str(experiments))
  calls = []
  with pytest.raises(ValueError, match=rf'--config={experiments}/my.py loads here but not on a '
                     r"worker, .*No module named 'mycommon'.*: put what it imports into it or "
                     r'into configs/'):
    tpu_pod.launch(slice_(), [f'--config={experiments}/my.py:size=base'], 'gs://b/runs/base',
                   run=lambda cmd, **_: calls.append(cmd))
  assert calls == []  # Nothing booked, nothing built.


@pytest.mark.parametrize('ends, code', [('exits 3', 3), ('is killed', cloud.PREEMPTED_EXIT)])
def test_the_log_stream_ends_with_the_runs_status_or_75_when_the_run_is_gone(tmp_path, ends,
                                                                           code):
  """The worker's two commands run by bash in a home of their own, bertjax.main a stand-in: the
  stream gives the run's status; a run gone without one (a VM rebooted for maintenance, which
  takes the process, the ssh session and no file with it) ends it with 75, a restart."""
  python = tmp_path / 'bertjax-venv' / 'bin' / 'python'
  python.parent.mkdir(parents=True)
  python.write_text('#!/bin/bash\necho "step 1/9"\nsleep 2\nexit 3\n')
  python.chmod(0o755)
  env = dict(os.environ, HOME=str(tmp_path))

  def command(argv):
    return next(a for a in argv if a.startswith('--command=')).partition('=')[2]

  subprocess.run(['bash', '-c', command(tpu_pod.run_command(slice_(), ['--config=c.py'],
                                                            'gs://b/r'))],
                 env=env, check=True, timeout=30)
  if ends == 'is killed':  # The shell first: killed after its python, it would write 137.
    run = int((tmp_path / 'bertjax.pid').read_text())
    children = subprocess.run(['pgrep', '-P', str(run)], capture_output=True, text=True,
                              check=False).stdout.split()
    os.kill(run, 9)
    for child in children:
      os.kill(int(child), 9)
  stream = subprocess.run(['bash', '-c', command(tpu_pod.stream_command(slice_()))], env=env,
                          capture_output=True, text=True, timeout=60)
  assert stream.returncode == code, stream.stderr
  assert 'step 1/9' in stream.stdout


def test_ctrl_c_leaves_the_slice_and_its_run_and_says_how_to_follow_and_delete(tmp_path):
  """Ctrl-C while the log streams tells the run nothing (it would not save): deleting the slice
  would lose its work since the last checkpoint. One line, exit 130, no traceback."""
  code, out, calls = launch(tmp_path, '--spot', '--git_ref=' + GIT_REF,
                            interrupt=True)
  assert code == 130, out
  assert calls == [CREATE, DESCRIBE, INSTALL, START, LOGS]  # No delete.
  assert 'Traceback' not in out and 'KeyboardInterrupt' not in out, out
  line = out.strip().splitlines()[-1]
  assert line == (f'tpu_pod: interrupted; bert and its run (if started) go on: follow it with '
                  f'{shlex.join(tpu_pod.stream_command(slice_()))}; delete the slice when done '
                  f'with {shlex.join(tpu_pod.delete_command(slice_()))}'), out


def test_ctrl_c_in_the_launch_leaves_the_slice(monkeypatch, capsys):
  for at in (LOGS, INSTALL, DESCRIBE):
    try:
      code, calls = launch_scripted(monkeypatch, interrupt=at)
    except KeyboardInterrupt:
      pytest.fail('Ctrl-C was not handled: a traceback, and the slice deleted in `finally`')
    assert code == 130 and DELETE not in calls, (at, calls)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith('tpu_pod: interrupted; bert and its run (if started) go on: follow '
                           'it with gcloud '), last


def test_a_preempted_slice_whose_delete_fails_once_is_deleted_again(monkeypatch):
  """A transient gcloud failure (a 503) on the restart's delete: tried again, the slice waited
  for until it is gone, then re-created; never taken for another run's slice."""
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], exits=['255'],
                                fails=[DELETE])
  assert code == 0, code
  # The failed delete: the slice still there; the next: gone.
  assert calls == ATTEMPT + [DELETE, DESCRIBE, DELETE, DESCRIBE, DESCRIBE] + ATTEMPT + [DELETE]


def test_a_preempted_slice_that_cannot_be_deleted_is_named_as_the_launchs_own(monkeypatch):
  error, calls = launch_scripted(monkeypatch, states=['ACTIVE'] + ['SUSPENDED'] * 5,
                                 exits=['255'], fails=[DELETE] * tpu_pod.DELETE_TRIES)
  assert error == ('the preempted slice bert of this launch could not be deleted to re-create '
                   'it (SUSPENDED): delete it with gcloud compute tpus queued-resources delete '
                   'bert --force --quiet --zone=us-west4-a and run this again (the run resumes '
                   'from its last checkpoint)'), error
  assert 'exists already' not in error
  assert calls == ATTEMPT + [DELETE, DESCRIBE] * tpu_pod.DELETE_TRIES + [DELETE]
  assert CREATE not in calls[len(ATTEMPT):]
  # Deleted, but still there when re-created (its deletion not done): the launch's own, too.
  tpu, calls = slice_(), []

  def run(cmd, **_):
    calls.append(cmd)
    return subprocess.CompletedProcess(cmd, int('create' in cmd), 'SUSPENDED\n')

  with pytest.raises(RuntimeError, match=r'^the preempted slice bert of this launch could not '
                     r'be deleted to re-create it \(SUSPENDED\)'):
    tpu_pod.create(tpu, run, restart=True)


@pytest.mark.parametrize('workdir', ['gs://', 'gs:///runs', 'gs://Bad Bucket/runs'])
def test_a_workdir_naming_no_bucket_is_refused_before_anything_runs(tmp_path, workdir):
  with pytest.raises(ValueError, match=rf"^--workdir='{re.escape(workdir)}' names no bucket "
                     r'.*: pass --workdir=gs://BUCKET/path$'):
    tpu_pod.check(slice_(), workdir)
  code, out, calls = launch(tmp_path, f'--workdir={workdir}')
  assert code == 2 and calls == [], out
  assert out.strip().splitlines()[-1] == (  # The line above: --workdir given twice, by launch().
      f"tpu_pod: error: --workdir='{workdir}' names no bucket (lowercase letters, digits, -, _ "
      'and .): pass --workdir=gs://BUCKET/path')


def test_a_git_ref_is_pinned_to_the_commit_it_names_at_launch(monkeypatch, capsys):
  """A branch or tag can move between preemption restarts (each installed it again): the run
  resumed on other code. Worker 0 reads the commit once; every install, restarts too, fetches
  that commit, and the run takes that commit's configs/, not this checkout's."""
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED'], exits=['255'],
                                git_ref='git+https://example.org/bertjax@main')
  assert code == 0
  resolve = calls[2]
  assert resolve[:6] == ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=0'], calls
  assert resolve[6] == ('--command=rm -rf ~/bertjax-src && git init -q ~/bertjax-src && git -C '
                        '~/bertjax-src fetch -q --depth=1 https://example.org/bertjax main && '
                        "git -C ~/bertjax-src rev-parse 'FETCH_HEAD^{commit}'")
  installs = [c for c in calls if '--worker=all' in c and 'uv pip install' in c[-2]]
  pinned = [c[-2].replace('b2' * 20, COMMIT) for c in installs]
  assert len(installs) == 2 and pinned == [INSTALL[-2]] * 2, installs  # Both: worker 0's commit.
  assert sum('rev-parse' in c[-2] for c in calls) == 1  # Read once, not again at the restart.
  assert ('tpu_pod: --git_ref=git+https://example.org/bertjax@main is commit ' + 'b2' * 20 +
          ': every worker and every restart installs it and runs its configs/'
          ) in capsys.readouterr().out
  # A commit is installed as it is, with nothing to read.
  code, calls = launch_scripted(monkeypatch)
  assert code == 0 and not any('rev-parse' in c[-2] for c in calls)


@pytest.mark.parametrize('ref', ['main', 'v1', '', 'COMMIT'])
def test_the_workers_commands_fetch_the_commit_the_ref_names(tmp_path, ref):
  """The shell that worker 0 and the installs run, against a real repository: a branch, an
  annotated tag, the default branch and a commit each resolve to the commit, whose configs/
  the install takes (pip's part left out)."""
  repo, home = tmp_path / 'repo', tmp_path / 'home'
  home.mkdir()
  git = ['git', '-c', 'user.name=t', '-c', 'user.email=t@t', '-C', str(repo)]
  (repo / 'configs').mkdir(parents=True)
  (repo / 'configs' / 'pretrain.py').write_text('# first\n')
  subprocess.run(['git', 'init', '-q', '-b', 'main', str(repo)], check=True)
  subprocess.run(git + ['add', '.'], check=True)
  subprocess.run(git + ['commit', '-qm', 'first'], check=True)
  subprocess.run(git + ['tag', '-a', 'v1', '-m', 'v1'], check=True)
  first = subprocess.run(git + ['rev-parse', 'HEAD'], capture_output=True, text=True,
                         check=True).stdout.strip()
  git_ref = f'git+file://{repo}' + (f'@{first if ref == "COMMIT" else ref}' if ref else '')

  def on_worker(command):
    return subprocess.run(['bash', '-c', command], env={**os.environ, 'HOME': str(home)},
                          capture_output=True, text=True, check=True, timeout=60).stdout
  runs = []

  def run(cmd, **_):
    runs.append(cmd)
    return subprocess.CompletedProcess(cmd, 0, on_worker(cmd[-2].removeprefix('--command=')))
  pinned = tpu_pod.pin_commit(slice_(), run, git_ref)
  assert pinned == f'git+file://{repo}@{first}' and len(runs) == (ref != 'COMMIT')
  # The branch moves on: the pinned install still fetches the first commit.
  (repo / 'configs' / 'pretrain.py').write_text('# second\n')
  subprocess.run(git + ['commit', '-qam', 'second'], check=True)
  install = tpu_pod.install_commands(slice_(), '', pinned)[-1][-2].removeprefix('--command=')
  on_worker(install.partition(' && python3 -m pip')[0])
  assert (home / 'configs' / 'pretrain.py').read_text() == '# first\n'


def test_a_git_ref_that_is_no_git_url_is_refused_before_anything_runs(monkeypatch):
  monkeypatch.chdir(REPO)
  calls = []
  for ref in ('bertjax==0.2', 'git+https://example.org', 'https://example.org/bertjax@v1',
              'git+https://example.org/@v1', 'git+https://example.org/bertjax@'):
    with pytest.raises(ValueError, match=re.escape(f"--git_ref='{ref}' is no git URL: pass "
                                                   'git+https://HOST/ORG/REPO@REF')):
      tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://b/runs/base', run=calls.append, git_ref=ref)
  with pytest.raises(ValueError, match=r'#subdirectory=pkg is not followed \(bertjax is the '):
    tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://b/runs/base', run=calls.append,
                   git_ref='git+https://example.org/bertjax@v1#subdirectory=pkg')
  assert calls == []
  # pip's #egg= and a SHA-256 repository's commit are taken.
  assert cloud.git_source('git+https://example.org/b.git@refs/pull/1/head#egg=bertjax') == (
      'https://example.org/b.git', 'refs/pull/1/head')
  assert tpu_pod.pin_commit(slice_(), calls.append, f'git+file:///r@{"c3" * 32}').endswith('c3')


def test_a_dry_run_prints_the_command_that_reads_the_commit(tmp_path):
  code, out, calls = launch(tmp_path, '--dry_run', '--git_ref=git+https://example.org/b@main')
  assert code == 0 and calls == [], out
  assert ("gcloud compute tpus tpu-vm ssh bert --worker=0 '--command=rm -rf ~/bertjax-src && git "
          'init -q ~/bertjax-src && git -C ~/bertjax-src fetch -q --depth=1 '
          "https://example.org/b main && git -C ~/bertjax-src rev-parse '\"'\"'FETCH_HEAD^{commit}'"
          ) in out, out
  assert ("tpu_pod: the job's config was checked against this checkout; the workers run "
          '--git_ref=git+https://example.org/b@main\'s configs/ and code') in out


def test_a_config_path_on_this_machines_disk_is_warned_about():
  """Pass AB: local data paths on a slice were accepted; the job failed on every worker after
  booking and installing. Warned, not refused: a path mounted on every host (gcsfuse,
  Filestore) is read there."""
  config = config_args.check_args([
      '--config=configs/pretrain.py:size=tiny',
      '--config.data.train_files=/home/me/data/train-*,gs://b/more-*',
      '--config.data.vocab_file=~/vocab.txt', '--config.data.eval_files=gs://b/eval-*'])
  warning = cloud.local_paths_warning('tpu_pod', config)
  assert warning.startswith(
      "tpu_pod: warning: config.data.train_files=/home/me/data/train-*,gs://b/more-*, "
      "config.data.vocab_file=~/vocab.txt: a path on this machine's "
      "disk, which the slice's hosts do not see: copy it to a bucket"), warning
  assert cloud.local_paths_warning('tpu_pod', config_args.check_args(
      ['--config=configs/pretrain.py:size=tiny', '--config.data.train_files=gs://b/t-*'])) == ''


def test_a_failed_delete_of_a_slice_already_gone_goes_on(monkeypatch):
  """Review: a delete that fails because the preempted slice is gone already (not found twice
  in a row) is no reason to stop: it is re-created."""
  code, calls = launch_scripted(monkeypatch, states=['ACTIVE', 'SUSPENDED', 'ERROR', 'ERROR'],
                                exits=['255'], fails=[DELETE] * tpu_pod.DELETE_TRIES)
  assert code == 0, code
  assert calls == ATTEMPT + [DELETE, DESCRIBE, DESCRIBE] + ATTEMPT + [DELETE]
