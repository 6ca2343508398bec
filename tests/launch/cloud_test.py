"""The checks both launchers (tpu_pod.py, gke_jobset.py) share in launch/cloud.py, run before a
slice is booked: the job's flags after -- (bertjax.main's own only; a --flagfile read here,
checked, and sent to the hosts expanded), a multi-slice mesh, the --workdir URL; and the
launchers' usage errors, one line each."""

import re
import subprocess
import sys

from pod_fakes import MAIN_ARGS
from pod_fakes import REPO
from pod_fakes import launch
from pod_fakes import launch_in_process
from pod_fakes import slice_
from pod_fakes import worker_job
import pytest

from bertjax import config_args
from launch import cloud
from launch import tpu_pod


def test_the_flags_a_job_may_set_are_bertjax_mains():
  script = ('import sys; sys.argv = ["x"]; import bertjax.main; from absl import flags; '
            'print(" ".join(f.name for f in flags.FLAGS.get_flags_for_module("bertjax.main")))')
  listed = subprocess.run([sys.executable, '-c', script], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=True).stdout.split()
  assert sorted(listed) == sorted(cloud.MAIN_FLAGS)


@pytest.mark.parametrize('extra, message', [
    (['--spot', '--keep'], "--spot is tpu_pod's flag: put it before --"),
    (['--nokeep'], "--keep is tpu_pod's flag: put it before --"),
    (['stray_word'], "the job's flags (after --) hold 'stray_word', which is no flag: "
     'bertjax.main takes flags only (a value goes with its flag, --flag=VALUE): drop it'),
    # A second '--' ends bertjax.main's flags: what follows is said to be after it.
    (['--', '--config.seed=1'], "the job's flags (after --) hold --config.seed=1 after a second "
     "'--', which ends bertjax.main's flags (what follows is read as words): drop that '--'"),
    (['--', 'word'], "the job's flags (after --) hold 'word', which is no flag"),
    (['--', '--', '--config.seed=1'], "the job's flags (after --) hold '-- --': a '--' ends "
     "bertjax.main's flags (what follows is read as words): drop both"),
    (['--no_such=1'], "the job's --no_such=1: bertjax.main has no flag --no_such (its flags: "
     '--config, --workdir, --step, '),
    # A --flagfile left unread (the launchers read it first: cloud.job_flags): the hosts lack it.
    (['--flagfile=/tmp/x.flags'], "the job's --flagfile=/tmp/x.flags names a file on this "
     "machine, which the slice's hosts do not hold: put its flags after -- instead"),
])
def test_a_word_bertjax_main_would_refuse_is_refused_before_booking(monkeypatch, extra,
                                                                    message):
  """A launcher's flag after -- went to the job: the slice was booked on demand, then every
  host's bertjax.main stopped on 'Unknown command line flag'."""
  monkeypatch.chdir(REPO)
  with pytest.raises(ValueError, match='^' + re.escape(message)):
    cloud.check_workdir(MAIN_ARGS + extra, 'gs://bkt/runs/base')
  if extra[0] != '--flagfile=/tmp/x.flags':  # tpu_pod reads it: test_a_flagfile_... below.
    calls = []
    with pytest.raises(ValueError, match='^' + re.escape(message)):
      tpu_pod.launch(slice_(), MAIN_ARGS + extra, 'gs://bkt/runs/base', run=calls.append)
    assert calls == []


def test_the_job_flags_bertjax_main_takes_pass_in_every_absl_form(monkeypatch):
  monkeypatch.chdir(REPO)
  extra = ['--config.num_train_steps', '5', '--config.model.nsp',
           '--noconfig.data.dynamic_masking', '--step', 'latest', '-verbosity=1',
           '--nologtostderr', '--config.optimizer.learning_rate', '-1e-4']
  cloud.check_job_flags(MAIN_ARGS + extra[:-2])
  # A negative value after its flag is its value, not a flag (config_check refuses this one).
  with pytest.raises(ValueError, match='learning_rate=-0.0001: a negative learning rate'):
    tpu_pod.launch(slice_(), MAIN_ARGS + extra, 'gs://bkt/runs/base', run=print)


def test_a_launcher_flag_after_the_separator_is_one_line_and_books_nothing(tmp_path):
  code, out, calls = launch(tmp_path, '--dry_run', main_args=[
      '--config=configs/pretrain.py:size=tiny', '--spot', '--keep'])
  assert code == cloud.REFUSED_EXIT and calls == [], out
  assert out.strip().splitlines() == [
      "tpu_pod: error: --spot is tpu_pod's flag: put it before --"], out


def test_a_flagfile_after_the_separator_is_read_here_checked_and_sent_expanded(tmp_path,
                                                                              monkeypatch):
  """It was neither checked nor copied: the hosts ran --flagfile=PATH, a file they lack; with
  the --config inside it, the launch said the job had none."""
  monkeypatch.chdir(REPO)
  flags_file = tmp_path / 'job.flags'
  flags_file.write_text('# the job\n--config=configs/pretrain.py:size=base,vocab=30522\n'
                        '--config.num_train_steps=7\n')
  calls = launch_in_process([f'--flagfile={flags_file}', '--config.data.train_files=gs://bkt/t-*'])
  assert worker_job(calls) == ['--config=configs/pretrain.py:size=base,vocab=30522',
                               '--config.num_train_steps=7',
                               '--config.data.train_files=gs://bkt/t-*',
                               '--workdir=gs://bkt/runs/base;']
  for lines, message in (
      ('--config.num_trian_steps=7', "unknown config field 'num_trian_steps' (in "
       '--config.num_trian_steps=7); closest valid names: num_train_steps'),
      ('--config.global_batch_size=100', 'global_batch_size=100 cannot be split over the 16 '
       'batch shards'),
      ('--spot', "--spot is tpu_pod's flag: put it before --")):
    flags_file.write_text(lines + '\n')
    with pytest.raises(ValueError, match=re.escape(message)):
      tpu_pod.launch(slice_(), MAIN_ARGS + [f'--flagfile={flags_file}'], 'gs://bkt/runs/base',
                     run=print)
  with pytest.raises(ValueError, match=re.escape(
      f"the job's --flagfile={tmp_path}/none.flags cannot be read (No such file or directory): "
      'check the path.')):
    cloud.job_flags(MAIN_ARGS + [f'--flagfile={tmp_path}/none.flags'])


def test_a_multislice_mesh_whose_data_axis_the_slices_cannot_split_is_refused():
  """device_grid refused it only on the pods, after the manifest was applied."""
  config = config_args.check_args(['--config=configs/pretrain.py:size=tiny',
                                   '--config.mesh.data=1', '--config.mesh.fsdp=32',
                                   '--config.global_batch_size=64'])
  with pytest.raises(ValueError, match=re.escape(
      "on 2 x v5litepod-16 (32 devices): mesh {'data': 1, 'fsdp': 32, 'tensor': 1} over 2 "
      'slices: mesh.data must be a multiple of 2 (only data parallelism crosses slices); lower '
      'mesh.fsdp or mesh.tensor to fit one slice: pass e.g. --config.mesh.data=2 '
      '--config.mesh.fsdp=-1')):
    cloud.check_for_slice(config, 'v5litepod-16', 2)
  config = config_args.check_args(['--config=configs/pretrain.py:size=tiny',
                                   '--config.mesh.data=2', '--config.mesh.fsdp=-1',
                                   '--config.global_batch_size=64'])
  cloud.check_for_slice(config, 'v5litepod-16', 2)


@pytest.mark.parametrize('workdir, fixed', [('gs:/bkt/x', 'gs://bkt/x'), ('GS://bkt/x',
                                                                          'gs://bkt/x'),
                                            ('gcs:/bkt/x', 'gs://bkt/x')])
def test_a_workdir_url_other_than_gs_is_refused_not_taken_for_a_local_path(workdir, fixed):
  """A single-host slice kept with --keep took gs:/bkt/x for a local folder; the run then failed
  on the VM, the slice left up."""
  with pytest.raises(ValueError, match=re.escape(
      f"--workdir='{workdir}' is no gs:// URL (a bucket is gs://BUCKET/path, lowercase, two "
      f'slashes): pass --workdir={fixed}')):
    tpu_pod.check(tpu_pod.Slice('b', 'us-west4-a', 'v5litepod-8'), workdir, keep=True)
  for local in ('/tmp/run', 'runs/x', 'file:///tmp/run'):
    cloud.check_bucket_path(local)
  with pytest.raises(ValueError, match=re.escape(  # No gs:// bucket of that name guessed.
      "--workdir='s3://bkt/x': the launchers run on Google Cloud, where the slice's hosts share "
      '(and read) gs:// buckets only: pass --workdir=gs://BUCKET/path')):
    cloud.check_bucket_path('s3://bkt/x')


@pytest.mark.parametrize('value, said', [
    ('', 'is empty'), ('  ', 'is empty'),
    ('""', 'holds quotes and no path (a flagfile takes no shell quotes)'),
    ('","', 'holds quotes and no path (a flagfile takes no shell quotes)'),
    (',', 'holds only commas, no path')])
def test_an_empty_workdir_is_said_empty_not_blamed_on_quotes(monkeypatch, value, said):
  """''[:1] is '', which is `in` any string: --workdir= was refused for its quotes, the fix
  given --workdir= again. A config path of blanks is refused by config_check (it is no path),
  an empty one is unset."""
  line = f"--workdir={value} {said}: pass the run's folder, --workdir=gs://BUCKET/PATH"
  with pytest.raises(ValueError, match='^' + re.escape(line) + '$'):
    cloud.check_bucket_path(value)
  with pytest.raises(ValueError, match='^' + re.escape(line) + '$'):
    tpu_pod.check(slice_(), value)
  monkeypatch.chdir(REPO)
  args = MAIN_ARGS + [f'--config.data.vocab_file={value}']
  if value and not value.strip(' ,'):  # Blanks or commas: config_check's own refusal.
    with pytest.raises(ValueError, match=re.escape(
        f"config.data.vocab_file='{value}': holds only blanks or commas, no path")):
      config_args.check_args(args, cloud.check_paths)
    return
  config = config_args.check_args(args)
  if value.strip():
    with pytest.raises(ValueError, match='^' + re.escape(
        f'--config.data.vocab_file={value} {said}: pass the path, --config.data.vocab_file=')):
      cloud.check_job(MAIN_ARGS, config)
  else:
    cloud.check_job(MAIN_ARGS, config)  # No path set: nothing to refuse.


def _tpu_pod(*flags_):
  """A dry tpu_pod of a tiny pre-training job in its own process, with `flags_` first."""
  return subprocess.run(
      [sys.executable, '-m', 'launch.tpu_pod', *flags_, '--accelerator_type=v5litepod-16',
       '--workdir=gs://bkt/x', '--dry_run', '--', '--config=configs/pretrain.py:size=tiny'],
      cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def test_a_flag_that_took_the_next_flag_as_its_value_is_named_in_one_line(tmp_path):
  """absl's required-flag check ran first: it said --zone had no value (--name had taken it),
  after the launcher's whole help."""
  result = _tpu_pod('--name', '--zone=us-west4-a')
  assert result.returncode == cloud.REFUSED_EXIT and result.stdout == '', result.stdout
  assert result.stderr.strip().splitlines() == [
      "tpu_pod: error: --name took the next word '--zone=us-west4-a' as its value: give it one "
      '(--name=VALUE), or drop it. (--helpshort lists the flags)'], result.stderr
  result = subprocess.run(
      [sys.executable, '-m', 'launch.tpu_pod', '--accelerator_type=v5litepod-16', '--dry_run'],
      cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert result.stderr.strip().splitlines() == [
      'tpu_pod: error: --name, --zone, --workdir are required: pass --name=VALUE --zone=VALUE '
      '--workdir=VALUE (--helpshort lists the flags)'], result.stderr


@pytest.mark.parametrize('before', [['stray'], ['--spot', 'stray', '--keep']])
def test_a_stray_word_before_the_separator_is_the_launchers_usage_error(before):
  """absl's GNU parse left it in argv with the job's flags: refused as a word 'after --' (gke_jobset
  said it right: one check now, cloud.check_usage)."""
  result = _tpu_pod('--name=n', '--zone=us-west4-a', *before)
  assert result.returncode == cloud.REFUSED_EXIT and result.stdout == '', result.stdout
  assert result.stderr.strip().splitlines() == [
      "tpu_pod: error: unexpected arguments ['stray']: the launcher takes --flags only; "
      "bertjax.main's flags go after -- (--helpshort lists the flags)"], result.stderr


def test_a_word_after_build_corpus_flags_is_one_line(tmp_path):
  result = subprocess.run([sys.executable, '-m', 'launch.build_corpus',
                           f'--output_dir={tmp_path}/x', 'extra'], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 1, result.stderr
  assert result.stderr.strip().splitlines() == [
      "error: unexpected arguments ['extra']: every input is a --flag (--output_dir=...). "
      '(--helpshort lists the flags)'], result.stderr
  assert not (tmp_path / 'x').exists()


def test_build_corpus_holds_the_learners_info_lines(tmp_path):
  script = (
      'import functools, sys; from absl import app, flags; from bertjax import command_flags; '
      'from launch import build_corpus as b; '
      "b.source_documents = lambda: [[f'Sentence {i} of document {d} , said the king .' "
      'for i in range(3)] for d in range(20)]; '
      'b.build = functools.partial(b.build, vocab_size=100, eval_every=10); '
      "flags.DEFINE_string('output_dir', None, ''); flags.DEFINE_bool('overwrite', False, ''); "
      'app.run(command_flags.usage_said(b.main))')
  result = subprocess.run([sys.executable, '-c', script, f'--output_dir={tmp_path}'], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr
  assert 'vocab: 100 entries' in result.stdout
  # Its INFO line ('1 file: N words, ...') held; its warnings (too few pieces) shown.
  assert not re.search(r'^I\d{4} .*vocab_learner', result.stderr, re.M), result.stderr
