"""Shared by the TPU pod launcher's tests (tpu_pod_test.py, tpu_pod_restarts_test.py,
tpu_pod_checks_test.py), no tests here: a fake gcloud that records its arguments and launch(),
which runs the launcher against it; launch_scripted() and launch_in_process(), which run
tpu_pod.launch in this process with a scripted runner; what a worker's home and job hold
(worker_home, worker_job); and the gcloud command lines one launch of the slice `bert` runs
(CREATE, DESCRIBE, INSTALL, START, LOGS, DELETE, ATTEMPT)."""

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import commands

from launch import tpu_pod
from launch import tpu_vm

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
             '--config.data.train_files=gs://bkt/train-*']


def launch(tmp_path, *flags, states=(), exits=(), interrupt=False, main_args=MAIN_ARGS):
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
       '--accelerator_type=v5litepod-16', '--workdir=gs://bkt/runs/base', '--poll_seconds=0',
       *flags, '--', *main_args], cwd=REPO, env=env, capture_output=True, text=True,
      timeout=120, preexec_fn=commands.default_sigint)
  calls = [json.loads(line) for line in log.read_text().splitlines()]
  return result.returncode, result.stdout + result.stderr, calls


def slice_():
  return tpu_vm.Slice('bert', 'us-west4-a', 'v5litepod-16', spot=True)


ZONE = '--zone=us-west4-a'
RUN = ("rm -f ~/bertjax.rc ~/bertjax.pid; (trap '' HUP; ~/bertjax-venv/bin/python -m bertjax.main "
       '--config=configs/pretrain.py:size=base,vocab=30522 '
       "'--config.data.train_files=gs://bkt/train-*' --workdir=gs://bkt/runs/base; "
       'echo $? > ~/bertjax.rc) > ~/bertjax.log 2>&1 < /dev/null & echo $! > ~/bertjax.pid')
STREAM = ('tail -n +1 -F ~/bertjax.log & while [ ! -f ~/bertjax.rc ]; do if ! kill -0 '
          '"$(cat ~/bertjax.pid 2>/dev/null)" 2>/dev/null && [ ! -f ~/bertjax.rc ]; then kill %1; '
          'exit 75; fi; sleep 5; done; sleep 2; kill %1; rc=$(cat ~/bertjax.rc); case "$rc" in '
          '""|*[!0-9]*) echo "tpu_pod: the run ended but ~/bertjax.rc holds no exit status ($rc): '
          'it was lost" >&2; exit 86;; esac; exit "$rc"')
CREATE = ['compute', 'tpus', 'queued-resources', 'create', 'bert', '--node-id=bert',
          '--accelerator-type=v5litepod-16', '--runtime-version=v2-alpha-tpuv5-lite', '--spot',
          ZONE]
DESCRIBE = ['compute', 'tpus', 'queued-resources', 'describe', 'bert',
            '--format=value(state.state)', ZONE]
COMMIT = 'a1' * 20
# A commit, installed as it is; a host no DNS resolves (.invalid): the check here that the
# repository has it cannot reach it, as a network failure (git_ref_test.py checks it).
GIT_REF = f'git+https://example.invalid/bertjax@{COMMIT}'
INSTALL = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=all',
           '--command=rm -rf ~/bertjax-src && git init -q ~/bertjax-src && git -C ~/bertjax-src '
           f'fetch -q --depth=1 https://example.invalid/bertjax {COMMIT} && git -C ~/bertjax-src '
           'checkout -q FETCH_HEAD && rm -rf ~/configs && cp -r ~/bertjax-src/configs ~/configs '
           '&& python3 -m pip install -q --user -U uv && python3 -m uv venv -q '
           '--allow-existing --python 3.12 ~/bertjax-venv && python3 -m uv pip install -q '
           '--python ~/bertjax-venv/bin/python -U "jax[tpu]" ~/bertjax-src', ZONE]
START = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=all', f'--command={RUN}', ZONE]
LOGS = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=0',
        '--ssh-flag=-o ServerAliveInterval=30', '--ssh-flag=-o ServerAliveCountMax=4',
        f'--command={STREAM}', ZONE]
DELETE = ['compute', 'tpus', 'queued-resources', 'delete', 'bert', '--force', '--quiet', ZONE]


def launch_in_process(main_args, workdir='gs://bkt/runs/base', **kwargs):
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
  return words[:words.index('--workdir=gs://bkt/runs/base;') + 1]


# What gcloud says when it fails on a poll (a transient error): its last line is the reason.
GCLOUD_503 = ('WARNING: retrying\nERROR: (gcloud.compute.tpus.queued-resources.describe) '
              'HttpError 503: The service is currently unavailable.\n')


def launch_scripted(monkeypatch, states=(), exits=(), fails=(), interrupt=None, tpu=None,
                    workdir='gs://bkt/runs/base', interrupt_at=1, **kwargs):
  """tpu_pod.launch in this process, its runner answering as FAKE_GCLOUD does (`states` for
  describe, ERROR where gcloud fails; `exits` for worker 0's ssh) and failing each command in
  `fails` once (exit 255, as ssh does when the slice goes away): (launch's exit code or its
  error, the gcloud calls as FAKE_GCLOUD records them). `interrupt`: the command at which Ctrl-C
  comes (the `interrupt_at`-th time it runs); `tpu`: the slice (slice_() when None)."""
  monkeypatch.chdir(REPO)
  states, exits, fails, calls = list(states), list(exits), list(fails), []
  gone = [False]  # Deleted, not created since: describe does not find it.

  def run(cmd, check=True, capture=False):
    args = cmd[1:]
    calls.append(args)
    code, out, err = 0, '', ''
    if interrupt == args and calls.count(args) == interrupt_at:
      raise KeyboardInterrupt
    if 'describe' in args and gone[0]:
      code = 1
    elif 'describe' in args:
      state = states.pop(0) if states else 'ACTIVE'
      code, out, err = (1, '', GCLOUD_503) if state == 'ERROR' else (0, f'{state}\n', '')
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
    return subprocess.CompletedProcess(cmd, code, *((out, err) if capture else (None, None)))

  try:
    result = tpu_pod.launch(tpu or slice_(), MAIN_ARGS, workdir, run=run, poll_s=0,
                            **{'git_ref': GIT_REF, **kwargs})
  except RuntimeError as e:
    result = str(e)
  return result, calls


ATTEMPT = [CREATE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE]
