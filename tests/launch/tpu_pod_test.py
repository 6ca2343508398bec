"""The TPU pod launcher run as a command against a fake gcloud that records its arguments:
the commands of a run (create, install, run, stream the log, delete), its restarts after a
preemption, --dry_run, Ctrl-C while the log streams, and the commands the workers run (their
python, the log stream and its exit status, run by bash). The checks before booking are in
tpu_pod_checks_test.py, the restarts launched in-process with a scripted gcloud in
tpu_pod_restarts_test.py; the fakes they share in pod_fakes.py."""

import os
import pathlib
import re
import shlex
import subprocess
import tempfile

from pod_fakes import CREATE
from pod_fakes import DELETE
from pod_fakes import DESCRIBE
from pod_fakes import GIT_REF
from pod_fakes import INSTALL
from pod_fakes import LOGS
from pod_fakes import START
from pod_fakes import launch
from pod_fakes import slice_
import pytest

from launch import cloud
from launch import tpu_pod
from launch import tpu_vm


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
  # The polls that find the deleted slice gone: gcloud's NOT_FOUND is not shown (it was, twice).
  assert 'NOT_FOUND' not in out, out


def test_a_failed_run_on_a_healthy_slice_is_not_retried(tmp_path):
  code, _, calls = launch(tmp_path, '--spot', '--git_ref=' + GIT_REF,
                          '--keep', exits=['1'])
  assert code == 1
  assert calls == [CREATE, DESCRIBE, INSTALL, START, LOGS, DESCRIBE]  # --keep: no delete.


def test_restarts_run_out_after_max_restarts(tmp_path):
  code, out, calls = launch(tmp_path, '--git_ref=' + GIT_REF,
                            '--max_restarts=1', exits=['75', '75'])
  assert code == cloud.PREEMPTED_EXIT
  assert out.strip().splitlines()[-1] == (
      'tpu_pod: bert was preempted 2 times (--max_restarts=1 spent): the run stopped at its last '
      'checkpoint (if it saved one); run the same command again to resume from it'), out
  assert sum(c[:4] == CREATE[:4] for c in calls) == 2


def test_dry_run_prints_every_command_and_runs_none(tmp_path):
  code, out, calls = launch(tmp_path, '--dry_run', '--aot_check', '--reserved')
  assert code == 0 and calls == []
  lines = out.strip().splitlines()
  assert lines[0].endswith('-m launch.aot_compile --topology=v5e:4x4 '
                           '--config=configs/pretrain.py:size=base,vocab=30522 '
                           "'--config.data.train_files=gs://bkt/train-*'")
  # The wheel is built in a temporary folder, not the checkout's dist/ (which git would list),
  # from a copy of the checkout made there (tpu_wheel_test.py).
  folder = re.fullmatch(r'.* -m pip wheel --no-deps --wheel-dir=(\S+) \1/source', lines[1])[1]
  assert pathlib.Path(folder).parent == pathlib.Path(tempfile.gettempdir()), lines[1]
  assert lines[2] == ('gcloud compute tpus queued-resources create bert --node-id=bert '
                      '--accelerator-type=v5litepod-16 --runtime-version=v2-alpha-tpuv5-lite '
                      '--reserved --zone=us-west4-a')
  assert lines[4] == (f'gcloud compute tpus tpu-vm scp --recurse {folder}/'
                      'bertjax-0.1.0-py3-none-any.whl configs bert: --worker=all '
                      '--zone=us-west4-a')
  assert len(lines) == 10 and lines[-1].startswith('gcloud compute tpus queued-resources delete')


def test_the_workers_python_is_one_bertjax_installs_on():
  """The TPU images hold Python 3.10 (Ubuntu 22.04): each worker's venv takes a version that
  pyproject's requires-python admits, and the run starts with that venv's python."""
  import tomllib  # pylint: disable=g-import-not-at-top
  pyproject = pathlib.Path(tpu_pod.__file__).resolve().parents[1] / 'pyproject.toml'
  spec = tomllib.loads(pyproject.read_text())['project']['requires-python']  # >=3.11,<3.14
  bounds = dict((op, (int(a), int(b))) for op, a, b in re.findall(r'(>=|<)(\d+)\.(\d+)', spec))
  version = tuple(map(int, re.search(r'--python (\d+)\.(\d+) ', tpu_vm.VENV_SETUP).groups()))
  assert bounds['>='] <= version < bounds['<'], (spec, version)
  install = tpu_vm.install_commands(slice_(), 'dist/bertjax-0.1.0-py3-none-any.whl', '')[-1]
  assert f'--python {tpu_vm.PYTHON} -U "jax[tpu]" ~/bertjax-0.1.0-py3-none-any.whl' in (
      install[-2])
  assert tpu_vm.run_command(slice_(), ['--config=c.py'], 'gs://bkt/r')[-2].startswith(
      f"--command=rm -f ~/bertjax.rc ~/bertjax.pid; (trap '' HUP; {tpu_vm.PYTHON} -m "
      'bertjax.main ')


@pytest.mark.parametrize('ends, code', [('exits 3', 3), ('is killed', cloud.PREEMPTED_EXIT),
                                        ('writes no status', tpu_vm.STATUS_LOST)])
def test_the_log_stream_ends_with_the_runs_status_or_75_when_the_run_is_gone(tmp_path, ends,
                                                                           code):
  """The worker's two commands run by bash in a home of their own, bertjax.main a stand-in: the
  stream gives the run's status; a run gone without one (a VM rebooted for maintenance, which
  takes the process, the ssh session and no file with it) ends it with 75, a restart. Hostile
  pass A: an empty status file (a full disk) gave a bare `exit`, 0, a success, the slice deleted
  as if the run had finished: the status is said lost, and the stream fails (STATUS_LOST)."""
  python = tmp_path / 'bertjax-venv' / 'bin' / 'python'
  python.parent.mkdir(parents=True)
  python.write_text('#!/bin/bash\necho "step 1/9"\nsleep 2\nexit 3\n')
  python.chmod(0o755)
  env = dict(os.environ, HOME=str(tmp_path))

  def command(argv):
    return next(a for a in argv if a.startswith('--command=')).partition('=')[2]

  subprocess.run(['bash', '-c', command(tpu_vm.run_command(slice_(), ['--config=c.py'],
                                                            'gs://bkt/r'))],
                 env=env, check=True, timeout=30)
  if ends != 'exits 3':  # The shell first: killed after its python, it would write 137.
    run = int((tmp_path / 'bertjax.pid').read_text())
    children = subprocess.run(['pgrep', '-P', str(run)], capture_output=True, text=True,
                              check=False).stdout.split()
    os.kill(run, 9)
    for child in children:
      os.kill(int(child), 9)
  if ends == 'writes no status':  # What `echo $? > ~/bertjax.rc` leaves on a full disk.
    (tmp_path / 'bertjax.rc').write_text('')
  stream = subprocess.run(['bash', '-c', command(tpu_vm.stream_command(slice_()))], env=env,
                          capture_output=True, text=True, timeout=60)
  assert stream.returncode == code, stream.stderr
  assert 'step 1/9' in stream.stdout
  assert ('tpu_pod: the run ended but ~/bertjax.rc holds no exit status (): it was lost' in
          stream.stderr) == (ends == 'writes no status'), stream.stderr


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
                  f'{shlex.join(tpu_vm.stream_command(slice_()))}; delete the slice when done '
                  f'with {shlex.join(tpu_vm.delete_command(slice_()))}'), out


def test_a_dry_run_prints_the_command_that_reads_the_commit(tmp_path):
  """Where this machine cannot read the ref (here: a host no DNS resolves), worker 0 reads it."""
  url = 'https://example.invalid/bertjax'
  code, out, calls = launch(tmp_path, '--dry_run', f'--git_ref=git+{url}@main')
  assert code == 0 and calls == [], out
  assert ("gcloud compute tpus tpu-vm ssh bert --worker=0 '--command=rm -rf ~/bertjax-src && git "
          'init -q ~/bertjax-src && git -C ~/bertjax-src fetch -q --depth=1 '
          f"{url} main && git -C ~/bertjax-src rev-parse '\"'\"'FETCH_HEAD^{{commit}}'"
          ) in out, out
  assert (f'tpu_pod: --git_ref=git+{url}@main could not be read here (fatal: ') in out, out
  assert ("worker 0 reads its commit when the slice is up; the job's config was checked against "
          "this checkout, not that commit's configs/ and code") in out, out
