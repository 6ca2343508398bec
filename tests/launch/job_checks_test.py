"""What both launchers refuse before a slice is booked that bertjax.main (or the hosts' reads)
would refuse only on it (hostile pass A): a flag the hosts set for themselves or a help flag
after --, a --step for a job other than fine-tuning, a path in the job's config that no host can
read (a misspelt or foreign URL, a bucket GCS would not name, quotes a flagfile kept), a
--poll_seconds time.sleep cannot take, and bertjax.main's flags given before --; each refusal
exits 78, as bertjax.main's do."""

import os
import re
import subprocess
import sys

from pod_fakes import MAIN_ARGS
from pod_fakes import REPO
from pod_fakes import launch_in_process
from pod_fakes import slice_
import pytest

from bertjax import console
from launch import cloud
from launch import tpu_pod


def refused(main_args, message):
  """tpu_pod.launch refusing `main_args` with `message` (the start of its line), nothing run."""
  calls = []
  with pytest.raises(ValueError, match='^' + re.escape(message)):
    tpu_pod.launch(slice_(), main_args, 'gs://bkt/runs/base', run=calls.append)
  assert calls == []


@pytest.mark.parametrize('extra, message', [
    (['--coordinator_address=10.0.0.2:1234'], "the job's --coordinator_address=10.0.0.2:1234: "
     'each host of the slice finds its own (jax.distributed reads the TPU runtime\'s, or '
     "JobSet's, variables), and one value for all would be wrong on all but one: drop it"),
    (['--num_processes', '4'], "the job's --num_processes: each host of the slice finds its own"),
    (['-process_id=0'], "the job's -process_id=0: each host of the slice finds its own"),
    (['--helpfull'], "the job's --helpfull would print bertjax.main's help on every host and "
     'stop, the slice booked for nothing: drop it (python -m bertjax.main --helpfull prints it '
     'here)'),
    (['--help'], "the job's --help would print bertjax.main's help on every host"),
    (['--helpshort'], "the job's --helpshort would print bertjax.main's help on every host"),
])
def test_a_flag_the_hosts_set_or_a_help_flag_is_refused_before_booking(monkeypatch, extra,
                                                                        message):
  """They passed the check of names (bertjax.main defines them) and failed on the booked slice
  (on GKE, exit 1 restarted the JobSet --max_restarts times)."""
  monkeypatch.chdir(REPO)
  refused(MAIN_ARGS + extra, message)


def test_a_step_is_refused_for_a_job_other_than_fine_tuning(monkeypatch):
  """bertjax.main refuses --step unless config.job is finetune (its own test, on the config)."""
  monkeypatch.chdir(REPO)
  refused(MAIN_ARGS + ['--step=latest'], "the job's --step=latest picks the checkpoint a "
          'fine-tuning run evaluates or predicts with (--config.mode=eval or predict); '
          'job=pretrain reads none: drop it')
  refused(['--config=configs/embed.py', '--step', '3'], "the job's --step=3 picks the checkpoint")
  assert launch_in_process(['--config=configs/finetune.py:task=mrpc', '--config.mode=eval',
                            '--step=best'])


@pytest.mark.parametrize('value, message', [
    ('GS://bkt/train-*', "--config.data.train_files='GS://bkt/train-*' is no gs:// URL (a bucket "
     'is gs://BUCKET/path, lowercase, two slashes): pass --config.data.train_files='
     'gs://bkt/train-*'),
    ('gs://Bkt/train-*', "--config.data.train_files='gs://Bkt/train-*' names no bucket"),
    ('gs:///train-*', "--config.data.train_files='gs:///train-*' names no bucket"),
    ('gs://b/train-*', "--config.data.train_files='gs://b/train-*': GCS has no bucket named 'b' "
     '(a bucket name is 3 to 63 characters, ending with a letter or digit)'),
    ('gs://bkt/a-*,s3://bkt/b-*', "--config.data.train_files='s3://bkt/b-*': the launchers run "
     "on Google Cloud, where the slice's hosts share (and read) gs:// buckets only"),
    ("'gs://bkt/train-*'", "--config.data.train_files='gs://bkt/train-*': its quotes are part of "
     'the path (a flagfile takes no shell quotes): write --config.data.train_files='
     'gs://bkt/train-*'),
    # A list in quotes: the fix keeps every path of it (it named the first one only).
    ("'gs://bkt/x-*,gs://bkt/y-*'", "--config.data.train_files='gs://bkt/x-*,gs://bkt/y-*': its "
     'quotes are part of the path (a flagfile takes no shell quotes): write '
     '--config.data.train_files=gs://bkt/x-*,gs://bkt/y-*'),
])
def test_a_config_path_no_host_can_read_is_refused_as_the_workdir_is(monkeypatch, value,
                                                                      message):
  monkeypatch.chdir(REPO)
  refused([MAIN_ARGS[0], f'--config.data.train_files={value}'], message)


def test_a_flagfiles_quoted_path_is_refused_by_both_launchers(tmp_path):
  """A flagfile's line keeps its quotes (absl reads no shell): the hosts looked for a path
  starting with a quote."""
  flags_file = tmp_path / 'job.flags'
  # With its train_files: config_check refuses a vocab_file set alone first.
  flags_file.write_text(f"{MAIN_ARGS[0]}\n{MAIN_ARGS[1]}\n"
                        '--config.data.vocab_file="gs://bkt/vocab.txt"\n')
  message = ('--config.data.vocab_file="gs://bkt/vocab.txt": its quotes are part of the path (a '
             'flagfile takes no shell quotes): write --config.data.vocab_file=gs://bkt/vocab.txt')
  tpu = subprocess.run(
      [sys.executable, '-m', 'launch.tpu_pod', '--name=bert', '--zone=us-west4-a',
       '--accelerator_type=v5litepod-16', '--workdir=gs://bkt/x', '--dry_run', '--',
       f'--flagfile={flags_file}'], cwd=REPO, capture_output=True, text=True, timeout=120)
  gke = subprocess.run(
      [sys.executable, '-m', 'launch.gke_jobset', '--name=bert', '--accelerator_type=v6e-8',
       '--image=gcr.io/p/bertjax:1', '--workdir=gs://bkt/x', f'--output={tmp_path}/b.yaml',
       '--', f'--flagfile={flags_file}'], cwd=REPO, capture_output=True, text=True, timeout=120)
  for launcher, done in (('tpu_pod', tpu), ('gke_jobset', gke)):
    assert done.returncode == cloud.REFUSED_EXIT and done.stdout == '', (launcher, done.stdout)
    assert done.stderr.strip().splitlines() == [f'{launcher}: error: {message}'], done.stderr
  assert not (tmp_path / 'b.yaml').exists()


@pytest.mark.parametrize('workdir', ['gs://b', 'gs://ab/runs', f'gs://{"a" * 64}/r', 'gs://ab-/r'])
def test_a_bucket_gcs_would_not_name_is_refused(workdir):
  with pytest.raises(ValueError, match=re.escape(f"--workdir='{workdir}': GCS has no bucket ")):
    tpu_pod.check(slice_(), workdir)
  for fine in ('gs://abc', f'gs://{"a" * 63}/r', 'gs://my.bucket.example.com/r'):
    tpu_pod.check(slice_(), fine)


# Each launcher's own flags, besides --name, --accelerator_type and --workdir.
OWN_FLAGS = {'tpu_pod': ['--zone=us-west4-a'], 'gke_jobset': ['--image=gcr.io/p/b:1']}


@pytest.mark.parametrize('launcher', ['tpu_pod', 'gke_jobset'])
@pytest.mark.parametrize('value', ['nan', 'inf', '1e300', '-1'])
def test_a_poll_interval_sleep_cannot_take_is_a_usage_error(tmp_path, launcher, value):
  """It was taken, and failed once the slice was booked (time.sleep: OverflowError)."""
  done = subprocess.run(
      [sys.executable, '-m', f'launch.{launcher}', '--name=bert', *OWN_FLAGS[launcher],
       '--accelerator_type=v5litepod-16', '--workdir=gs://bkt/x', '--dry_run',
       f'--poll_seconds={value}', '--', MAIN_ARGS[0]], cwd=tmp_path, capture_output=True,
      text=True, timeout=120, env={**os.environ, 'PYTHONPATH': str(REPO)})
  assert done.returncode == cloud.REFUSED_EXIT and done.stdout == '', done.stdout
  assert done.stderr.strip().splitlines() == [
      f'{launcher}: error: --poll_seconds={float(value)}: pass a number of seconds from 0 to '
      f'{cloud.POLL_MAX_S} (--helpshort lists the flags)'], done.stderr
  assert os.listdir(tmp_path) == []  # No manifest written.


@pytest.mark.parametrize('launcher', ['tpu_pod', 'gke_jobset'])
def test_a_job_flag_before_the_separator_says_where_it_goes(launcher):
  """absl said only "Unknown command line flag 'config'"."""
  done = subprocess.run(
      [sys.executable, '-m', f'launch.{launcher}', '--name=bert', *OWN_FLAGS[launcher],
       '--accelerator_type=v6e-8', '--workdir=gs://bkt/x',
       '--config=configs/pretrain.py:size=tiny', '--dry_run'], cwd=REPO, capture_output=True,
      text=True, timeout=120)
  assert done.returncode == cloud.REFUSED_EXIT and done.stdout == '', done.stdout
  assert done.stderr.strip().splitlines() == [
      f"{launcher}: error: --config=configs/pretrain.py:size=tiny is bertjax.main's flag: put it "
      f"after -- (the launcher's flags go before --, the job's after: python -m launch.{launcher} "
      '--name=... -- --config=...)'], done.stderr


@pytest.mark.parametrize('launcher', ['tpu_pod', 'gke_jobset'])
@pytest.mark.parametrize('flag, line', [
    ('--max_restarts=-1', 'flag --max_restarts=-1: -1 is not a non-negative integer '
     '(--helpshort lists the flags)'),  # absl's.
    ('--accelerator_type=v5litepod-12', "unknown accelerator type 'v5litepod-12'; known: "),
    ('--workdir=', "--workdir= is empty: pass the run's folder, --workdir=gs://BUCKET/PATH"),
    ('--workdir=GS://bkt/x', "--workdir='GS://bkt/x' is no gs:// URL"),
])
def test_a_refused_command_line_exits_as_bertjax_main_does(tmp_path, launcher, flag, line):
  """bertjax.main exits REFUSED_EXIT on a command it refuses, which a scheduler must not retry;
  the launchers exited 1 on a flag absl refused and 2 on a workdir or config they refused."""
  done = subprocess.run(
      [sys.executable, '-m', f'launch.{launcher}', '--name=bert', *OWN_FLAGS[launcher],
       '--accelerator_type=v5litepod-16', '--workdir=gs://bkt/x', '--dry_run', flag, '--',
       MAIN_ARGS[0]], cwd=tmp_path, capture_output=True, text=True, timeout=120,
      env={**os.environ, 'PYTHONPATH': str(REPO)})
  assert done.returncode == console.REFUSED_EXIT and done.stdout == '', done.stdout
  # The line above it, if any: absl's warning of a flag given twice (the last one is taken).
  assert done.stderr.strip().splitlines()[-1].startswith(f'{launcher}: error: {line}'), done.stderr
  assert os.listdir(tmp_path) == []  # No manifest written.


def test_help_is_no_refusal():
  """absl's own exit (1) after the help: only a refusal's line exits 78."""
  done = subprocess.run([sys.executable, '-m', 'launch.tpu_pod', '--helpshort'], cwd=REPO,
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 1 and '--accelerator_type' in done.stdout, done.stderr
