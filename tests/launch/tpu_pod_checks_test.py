"""What the TPU pod launcher checks before it books a slice, and refuses with the valid
choices: the accelerator type, zone and name; the --workdir (a bucket; a local path only on a
kept single-host slice; the job's own --workdir); the job's config (its file and configs/
copied to the workers, a module beside it, a config that fails on the slice, local data
paths warned about, the --aot_check flags) and the --git_ref URL. Nothing is booked or built
when one fails: the gcloud calls stay empty."""

import dataclasses
import os
import re
import subprocess
import sys

from pod_fakes import GIT_REF
from pod_fakes import MAIN_ARGS
from pod_fakes import REPO
from pod_fakes import launch
from pod_fakes import launch_in_process
from pod_fakes import slice_
from pod_fakes import worker_home
from pod_fakes import worker_job
import pytest

from bertjax import config_args
from bertjax import console
from launch import cloud
from launch import git_ref as git_refs
from launch import tpu_pod


@pytest.mark.parametrize('tpu, workdir, message', [
    (tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-12'), 'gs://bkt/r',
     r"unknown accelerator type 'v5litepod-12'; known: v5litepod-1, v5litepod-4"),
    (tpu_pod.Slice('b', 'us-east1-d', 'v5litepod-16'), 'gs://bkt/r',
     r"v5litepod slices are not offered in zone 'us-east1-d'; zones: us-central1-a"),
    (tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-16'), '/tmp/run',
     r'has 4 hosts, which cannot share the local path .* use a bucket'),
    (tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-16', spot=True, reserved=True), 'gs://bkt/r',
     'exclude each other'),
    (tpu_pod.Slice('Bad Name!', 'us-west4-a', 'v5litepod-16'), 'gs://bkt/r',
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
  assert code == cloud.REFUSED_EXIT, out
  assert "error: the local path '/home/me/run' lies on the VM's disk" in out, out
  assert calls == []
  assert tpu_pod.Slice('b', 'us-east5-a', 'v5p-32').hosts == 4
  assert cloud.SLICES['v6e-16'] == (4, 'v6e:4x4')


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
  for extra in (['--workdir=gs://bkt/other'], ['--workdir', 'gs://bkt/other'],
                ['-workdir=gs://bkt/other']):
    with pytest.raises(ValueError) as e:
      tpu_pod.launch(slice_(), MAIN_ARGS + extra, 'gs://bkt/runs/base',
                     run=lambda cmd, **_: calls.append(cmd))
    assert str(e.value) == ('the job\'s flags (after --) set --workdir=gs://bkt/other, the '
                            'launcher\'s --workdir=gs://bkt/runs/base: pass the run directory '
                            'once, as the launcher\'s --workdir (before --)')
  assert calls == []
  # The launcher's own workdir repeated after -- changes nothing: it runs.
  calls = launch_in_process(MAIN_ARGS + ['--workdir=gs://bkt/runs/base'])
  assert worker_job(calls)[-1] == '--workdir=gs://bkt/runs/base;'


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
      tpu_pod.launch(slice_(), MAIN_ARGS + extra, 'gs://bkt/runs/base',
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
                             '--workdir', 'gs://bkt/runs/base'], aot_check=True)
  assert calls[0][1:] == ['-m', 'launch.aot_compile', '--topology=v5e:4x4',
                          '--config=configs/pretrain.py:size=base',
                          '--config.num_train_steps=5', '--config.model.nsp']
  with pytest.raises(ValueError, match=r"--aot_check compiles the pre-training step only, and "
                     r"this job is config.job='finetune': leave --aot_check out"):
    launch_in_process(['--config=configs/finetune.py:task=mrpc'], aot_check=True)


@pytest.mark.parametrize('aot_exit, raised, message', [
    (console.REFUSED_EXIT, ValueError, "--aot_check: the step does not compile for v5litepod-16 "
     "(aot_compile's reason above): mend what it names (the job's config, or libtpu on this "
     'machine)'),
    (1, RuntimeError, 'launch.aot_compile exited with 1: '),
])
def test_a_step_aot_compile_refuses_is_the_launchs_refusal(monkeypatch, aot_exit, raised,
                                                            message):
  """aot_compile's refusal (78: the step does not fit, or cannot be sharded) was a command that
  failed: the launch exited 2, which a scheduler may retry. Its crash still is one."""
  monkeypatch.chdir(REPO)
  calls = []

  def run(cmd, check=True, **_):
    calls.append(cmd)
    return subprocess.CompletedProcess(cmd, aot_exit if 'launch.aot_compile' in cmd else 0)
  with pytest.raises(raised, match='^' + re.escape(message)):
    tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://bkt/runs/base', run=run, aot_check=True,
                   git_ref=GIT_REF)
  assert len(calls) == 1, calls  # Nothing built or booked.


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
    tpu_pod.launch(slice_(), [f'--config={experiments}/my.py:size=base'], 'gs://bkt/runs/base',
                   run=lambda cmd, **_: calls.append(cmd))
  assert calls == []  # Nothing booked, nothing built.


@pytest.mark.parametrize('workdir', ['gs://', 'gs:///runs', 'gs://Bad Bucket/runs'])
def test_a_workdir_naming_no_bucket_is_refused_before_anything_runs(tmp_path, workdir):
  with pytest.raises(ValueError, match=rf"^--workdir='{re.escape(workdir)}' names no bucket "
                     r'.*: pass --workdir=gs://BUCKET/path$'):
    tpu_pod.check(slice_(), workdir)
  code, out, calls = launch(tmp_path, f'--workdir={workdir}')
  assert code == cloud.REFUSED_EXIT and calls == [], out
  assert out.strip().splitlines()[-1] == (  # The line above: --workdir given twice, by launch().
      f"tpu_pod: error: --workdir='{workdir}' names no bucket (lowercase letters, digits, -, _ "
      'and .): pass --workdir=gs://BUCKET/path')


def test_a_git_ref_that_is_no_git_url_is_refused_before_anything_runs(monkeypatch):
  monkeypatch.chdir(REPO)
  calls = []
  for ref in ('bertjax==0.2', 'git+https://example.org', 'https://example.org/bertjax@v1',
              'git+https://example.org/@v1', 'git+https://example.org/bertjax@'):
    with pytest.raises(ValueError, match=re.escape(f"--git_ref='{ref}' is no git URL: pass "
                                                   'git+https://HOST/ORG/REPO@REF')):
      tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://bkt/runs/base', run=calls.append, git_ref=ref)
  with pytest.raises(ValueError, match=r'#subdirectory=pkg is not followed \(bertjax is the '):
    tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://bkt/runs/base', run=calls.append,
                   git_ref='git+https://example.org/bertjax@v1#subdirectory=pkg')
  assert calls == []
  # pip's #egg= and a SHA-256 repository's commit are taken.
  assert git_refs.source('git+https://example.org/b.git@refs/pull/1/head#egg=bertjax') == (
      'https://example.org/b.git', 'refs/pull/1/head')
  assert tpu_pod.pin_commit(slice_(), calls.append, f'git+file:///r@{"c3" * 32}').endswith('c3')


def test_a_config_path_on_this_machines_disk_is_warned_about():
  """Pass AB: local data paths on a slice were accepted; the job failed on every worker after
  booking and installing. Warned, not refused: a path mounted on every host (gcsfuse,
  Filestore) is read there."""
  config = config_args.check_args([
      '--config=configs/pretrain.py:size=tiny',
      '--config.data.train_files=/home/me/data/train-*,gs://bkt/more-*',
      '--config.data.vocab_file=~/vocab.txt', '--config.data.eval_files=gs://bkt/eval-*'])
  warning = cloud.local_paths_warning('tpu_pod', config)
  assert warning.startswith(
      "tpu_pod: warning: config.data.train_files=/home/me/data/train-*,gs://bkt/more-*, "
      "config.data.vocab_file=~/vocab.txt: a path on this machine's "
      "disk, which the slice's hosts do not see (a relative one is read from a host's own "
      "folder: a TPU VM's home, the image's /bertjax): copy it to a bucket"), warning
  # Relative paths were not warned about: a host reads them from its own folder.
  relative = cloud.local_paths_warning('tpu_pod', config_args.check_args([
      '--config=configs/pretrain.py:size=tiny', '--config.data.train_files=data/train-*',
      '--config.data.vocab_file=vocab.txt']))
  assert relative.startswith('tpu_pod: warning: config.data.train_files=data/train-*, '
                             'config.data.vocab_file=vocab.txt: a path on this machine'), relative
  assert cloud.local_paths_warning('tpu_pod', config_args.check_args(
      ['--config=configs/pretrain.py:size=tiny', '--config.data.train_files=gs://bkt/t-*'])) == ''
