"""The TPU pod launcher's command lines, against a fake gcloud that records its arguments."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

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
INSTALL = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=all',
           '--command=pip install -U "jax[tpu]" git+https://example.org/bertjax@v1', ZONE]
START = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=all', f'--command={RUN}', ZONE]
LOGS = ['compute', 'tpus', 'tpu-vm', 'ssh', 'bert', '--worker=0', f'--command={STREAM}', ZONE]
DELETE = ['compute', 'tpus', 'queued-resources', 'delete', 'bert', '--force', '--quiet', ZONE]


def test_a_run_creates_installs_runs_streams_and_deletes(tmp_path):
  code, out, calls = launch(tmp_path, '--spot', '--git_ref=git+https://example.org/bertjax@v1',
                            states=['PROVISIONING', 'ACTIVE', 'ACTIVE'])
  assert code == 0, out
  assert calls == [CREATE, DESCRIBE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE, DELETE]
  assert 'step 10/10: loss 6.1 (worker 0 log)' in out


def test_a_preempted_slice_is_recreated_and_the_run_resumed(tmp_path):
  code, out, calls = launch(tmp_path, '--spot', '--git_ref=git+https://example.org/bertjax@v1',
                            states=['ACTIVE', 'SUSPENDED', 'ACTIVE', 'ACTIVE'],
                            exits=['255', '0'])
  assert code == 0, out
  attempt = [CREATE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE]
  assert calls == attempt + [DELETE] + attempt + [DELETE]
  assert 'preempted; re-creating it (restart 1 of 10)' in out


def test_a_failed_run_on_a_healthy_slice_is_not_retried(tmp_path):
  code, _, calls = launch(tmp_path, '--spot', '--git_ref=git+https://example.org/bertjax@v1',
                          '--keep', exits=['1'])
  assert code == 1
  assert calls == [CREATE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE]  # --keep: no delete.


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
  assert lines[4] == ('gcloud compute tpus tpu-vm scp dist/bertjax-0.1.0-py3-none-any.whl bert: '
                      '--worker=all --zone=us-west4-a')
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
