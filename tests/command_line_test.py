"""The commands as a user meets them (issue 28): config errors before anything runs, Ctrl-C,
a multi-host start whose peer never comes, the original's bool flags, one-line errors."""

import os
import signal
import subprocess
import sys
import time

from commands import REPO
from commands import default_sigint
from commands import environ
from commands import run
import pytest
import two_processes

from bertjax import config_args
from bertjax import config_files
from launch import tpu_pod

TINY = [f'--config={REPO}/configs/pretrain.py:size=tiny,steps=200,seq=32,batch=8',
        '--config.model.num_layers=1', '--config.data.dupe_factor=1',
        '--config.checkpoint.every_steps=2', '--config.log_every_steps=1',
        '--config.optimizer.warmup_steps=2', '--config.eval_every_steps=0']


def test_a_bad_config_value_fails_before_anything_runs(tmp_path):
  done = run(tmp_path, '-m', 'bertjax.main',
             f'--config={REPO}/configs/finetune.py:task=classification,size=tiny',
             '--config.num_epochs=-1', '--workdir=w', '--log_dir=logs')
  assert done.returncode == 78, done.stderr  # Refused before it starts: it would be again.
  [log] = (tmp_path / 'logs').iterdir()
  said = done.stderr.splitlines()
  assert said[0].startswith(
      'error: config.num_epochs=-1.0: must be > 0 when num_train_steps is 0'), done.stderr
  assert 'Traceback' not in done.stderr and not (tmp_path / 'w').exists()
  written = log.read_text().splitlines()  # --log_dir's file: the command, then its error.
  assert written[0].startswith('command: ') and written[0].endswith(' --log_dir=logs')
  assert written[-2:] == said[:2]


def start(tmp_path, *args):
  log = tmp_path / 'stderr'
  process = subprocess.Popen([sys.executable, '-m', 'bertjax.main', *args], cwd=tmp_path,
                             env=environ(), stdout=subprocess.DEVNULL,
                             stderr=log.open('w'), preexec_fn=default_sigint)
  return process, log


def wait_until(condition, process, log, timeout=240, pause=0.2):
  """Waits for `condition()` while the process runs; its log's tail if it ends or times out."""
  deadline = time.time() + timeout
  while not condition():
    assert process.poll() is None, log.read_text()[-3000:]
    assert time.time() < deadline, log.read_text()[-3000:]
    time.sleep(pause)


def test_ctrl_c_in_training_ends_with_one_line_and_the_checkpoint_to_resume(tmp_path):
  # Steps enough that a loaded machine's poll sees a checkpoint before the run ends (CI at
  # 4a63346: 200 steps ran out, the Ctrl-C came after, rc 0); Ctrl-C ends it long before.
  process, log = start(tmp_path, *TINY, '--config.num_train_steps=100000', '--workdir=w',
                       '--compilation_cache_dir=', '--log_dir=logs')
  saved = tmp_path / 'w' / 'checkpoints'
  wait_until(lambda: saved.is_dir() and any(p.name.isdigit() for p in saved.iterdir()), process,
             log)
  process.send_signal(signal.SIGINT)
  assert process.wait(timeout=60) == 130, log.read_text()[-3000:]
  err = log.read_text()
  last = err.strip().splitlines()[-1]
  where = f'{tmp_path}/w/checkpoints'
  assert last.startswith(f'interrupted: the last checkpoint in {where} (step '), err
  assert last.endswith('is intact; rerun the same command to resume from it')
  assert 'Traceback' not in err and 'KeyboardInterrupt' not in err
  step = int(last.split('(step ')[1].split(')')[0])
  assert (tmp_path / 'w' / 'checkpoints' / str(step)).is_dir()
  [file] = (tmp_path / 'logs').iterdir()  # --log_dir's file ends with the same line.
  assert file.read_text().splitlines()[-1] == last


@pytest.mark.parametrize('delay', [1.0, 4.0])
def test_ctrl_c_while_starting_ends_with_one_line(tmp_path, delay):
  # While the config and the libraries load, TensorFlow imports (a swallowed KeyboardInterrupt
  # there went on training) or the first step compiles.
  process, log = start(tmp_path, *TINY, '--workdir=w', '--compilation_cache_dir=')
  time.sleep(delay)
  process.send_signal(signal.SIGINT)
  assert process.wait(timeout=60) == 130, log.read_text()[-3000:]
  err = log.read_text()
  assert err.strip().splitlines()[-1].startswith('interrupted'), err
  assert 'Traceback' not in err and 'KeyboardInterrupt' not in err



def test_sigterm_before_the_first_step_exits_75_for_a_rerun(tmp_path):
  """A preemption while the job makes its data or compiles: nothing was trained, nothing is
  lost, and the status asks a scheduler (SLURM's requeue, tpu_pod, a JobSet) to run it again,
  as a SIGTERM inside the loop does after its save; it was killed with 143 (no rerun)."""
  process, log = start(tmp_path, *TINY, '--workdir=w', '--compilation_cache_dir=')
  # Logged once jax.distributed was settled.
  wait_until(lambda: 'process 0/1' in log.read_text(), process, log, pause=0.05)
  process.send_signal(signal.SIGTERM)
  assert process.wait(timeout=60) == 75, log.read_text()[-3000:]
  err = log.read_text()
  assert err.strip().splitlines()[-1].startswith('stopped (SIGTERM) before the first checkpoint '
                                                 f'in {tmp_path}/w/checkpoints: rerun'), err
  assert 'Traceback' not in err and 'step 1/200' not in err


@pytest.mark.parametrize('process_id', [0, 1])
def test_a_multi_host_start_whose_peer_never_comes_times_out_with_one_line(tmp_path, process_id):
  address = f'localhost:{two_processes.free_port()}'
  began = time.time()
  done = run(tmp_path, '-m', 'bertjax.main', *TINY, '--workdir=w',
             f'--coordinator_address={address}', '--num_processes=2',
             f'--process_id={process_id}', '--distributed_timeout_s=4')
  assert done.returncode == 1, done.stderr  # A JobSet restarts it (a slice waiting for capacity).
  assert time.time() - began < 60
  lines = done.stderr.strip().splitlines()
  assert f'process {process_id} of 2: waiting up to 4 s for 2 processes at {address}' in lines[0]
  assert lines[-1].startswith(f'error: process {process_id} of 2 could not start the multi-host '
                              f'job at {address} within 4 s: check that all 2 processes'), lines
  # A peer's refusal (exit 78 before it connects) is what most often leaves a process waiting.
  assert 'that none stopped before connecting (a refused command or file exits 78 first' in (
      lines[-1])
  assert 'stack trace' not in done.stderr and 'Fatal Python error' not in done.stderr


def test_predict_and_extract_features_refuse_a_batch_size_below_one(tmp_path):
  for args in (['-m', 'bertjax.predict', '--workdir=w', '--batch_size=0'],
               ['-m', 'bertjax.predict', '--workdir=w', '--batch_size=-4'],
               ['-m', 'bertjax.extract_features', '--input_file=i', '--output_file=o',
                '--init=m', '--batch_size=0']):
    done = run(tmp_path, *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith('error: flag --batch_size='), done.stderr
    assert 'is not a positive integer' in done.stderr and 'Traceback' not in done.stderr


def test_do_lower_case_takes_the_original_bool_forms(tmp_path):
  # Every form in one command line (absl parses a repeated flag in turn; the bare form last, so
  # that it could not swallow a following argument): the flags parse, and the command then stops
  # at the missing model (not at a flag).
  forms = ['--do_lower_case=False', '--do_lower_case=True', '--do_lower_case=false',
           '--do_lower_case=1', '--nodo_lower_case', '--do_lower_case']
  done = run(tmp_path, '-m', 'bertjax.extract_features', '--input_file=i', '--output_file=o',
             *forms)
  assert done.returncode == 1 and 'Flags parsing error' not in done.stderr, done.stderr
  assert 'error: pass --init=DIR' in done.stderr
  done = run(tmp_path, '-m', 'bertjax.export', f'--from={tmp_path}/none', '--format=hf',
             f'--output={tmp_path}/out', *forms)
  assert 'Flags parsing error' not in done.stderr, done.stderr
  assert done.returncode == 1 and f'{tmp_path}/none' in done.stderr, done.stderr


@pytest.mark.parametrize('main_args, message', [
    (['--config.data.train_files=gs://bkt/train-*'], 'the job has no --config='),
    (['--config=configs/pretrain.py:size=base', '--config.optimizer.learning_rat=1e-4'],
     "unknown config field 'optimizer.learning_rat'"),
    (['--config=configs/pretrain.py:size=base', '--config.global_batch_size=0'],
     'config.global_batch_size=0: must be > 0'),
])
def test_the_tpu_launcher_checks_the_config_before_booking_anything(monkeypatch, main_args,
                                                                     message):
  monkeypatch.chdir(REPO)
  calls = []
  tpu = tpu_pod.Slice('bert', 'us-west4-a', 'v5litepod-16', spot=True)
  with pytest.raises(ValueError, match=message):
    tpu_pod.launch(tpu, main_args, 'gs://bkt/runs/base', run=lambda cmd, **kw: calls.append(cmd),
                   git_ref='git+https://example.org/bertjax@' + 'a1' * 20)
  assert calls == []


def test_the_tpu_launcher_command_fails_on_a_config_typo_with_no_gcloud_call(tmp_path):
  done = subprocess.run(
      [sys.executable, '-m', 'launch.tpu_pod', '--name=bert', '--zone=us-west4-a',
       '--accelerator_type=v5litepod-16', '--workdir=gs://bkt/runs/base', '--dry_run', '--',
       '--config=configs/pretrain.py:size=base', '--config.optimizer.learning_rat=1e-4'],
      cwd=REPO, env=environ(), capture_output=True, text=True, timeout=120)
  assert done.returncode == 78, done.stderr  # A refusal, as bertjax.main's: no retry helps.
  assert "tpu_pod: error: unknown config field 'optimizer.learning_rat'" in done.stderr
  assert 'gcloud' not in done.stdout + done.stderr  # Not even printed as a dry run.


def test_the_gke_launcher_checks_the_config_before_writing_or_applying(tmp_path):
  done = subprocess.run(
      [sys.executable, '-m', 'launch.gke_jobset', '--name=bert', '--accelerator_type=v6e-8',
       '--image=gcr.io/p/bertjax:1', '--workdir=gs://bkt/r', f'--output={tmp_path / "b.yaml"}',
       '--dry_run', '--', '--config=configs/pretrain.py:size=base',
       '--config.optimizer.warmup_steps=-1'],
      cwd=REPO, env=environ(), capture_output=True, text=True, timeout=120)
  assert done.returncode == 78, done.stderr
  assert 'gke_jobset: error: config.optimizer.warmup_steps=-1: must be >= 0' in done.stderr
  assert not (tmp_path / 'b.yaml').exists() and 'kubectl' not in done.stdout


def test_check_args_is_what_the_launchers_use():
  assert tpu_pod.config_args is config_args


def _ignore_sigint():  # What a script's `cmd &` (and nohup) starts a command with.
  signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize('signum, code, start', [
    (signal.SIGINT, 130, default_sigint), (signal.SIGTERM, 143, default_sigint),
    (signal.SIGTERM, 143, _ignore_sigint)], ids=['SIGINT', 'SIGTERM', 'SIGTERM-background'])
def test_ctrl_c_or_sigterm_in_extract_features_leaves_nothing_half_written(tmp_path, minilm_dir,
                                                                          signum, code, start):
  (tmp_path / 'in.txt').write_text('The weather is lovely today.\n' * 3000)
  log = tmp_path / 'stderr'
  process = subprocess.Popen(
      [sys.executable, '-m', 'bertjax.extract_features', '--input_file=in.txt',
       '--output_file=out/features.jsonl', f'--init_checkpoint={minilm_dir}',
       '--max_seq_length=16', '--batch_size=8', '--layers=-1'],
      cwd=tmp_path, env=environ(), stdout=subprocess.DEVNULL, stderr=log.open('w'),
      preexec_fn=start)
  deadline = time.time() + 240
  while not list((tmp_path / 'out').glob('.features.jsonl.*.tmp')):
    assert process.poll() is None, log.read_text()[-3000:]
    assert time.time() < deadline, log.read_text()[-3000:]
    time.sleep(0.1)
  process.send_signal(signum)
  assert process.wait(timeout=60) == code, log.read_text()[-3000:]
  err = log.read_text()
  assert err.strip().splitlines()[-1].startswith('interrupted: nothing was written'), err
  assert 'Traceback' not in err and 'KeyboardInterrupt' not in err
  assert not (tmp_path / 'out').exists()  # Nor the folder it made for its output (session 60).


@pytest.mark.parametrize('command, flags, named', [
    ('bertjax.main', TINY[:1] + ['--workdir=w'], '--config=..., --workdir=...'),
    ('bertjax.export', ['--from=w', '--format=hf', '--output=out'], '--from=..., --format=...'),
    ('bertjax.create_pretraining_data', ['--input_file=a.txt', '--output_file=o',
                                         '--vocab_file=v.txt'], '--input_file=..., --output_file'),
    ('bertjax.learn_vocab', ['--input_file=a.txt', '--output_file=v.txt', '--vocab_size=99'],
     '--input_file=..., --output_file=..., --vocab_size=...'),
])
def test_a_word_after_the_flags_is_refused_naming_the_commands_own_flags(tmp_path, command,
                                                                          flags, named):
  done = run(tmp_path, '-m', command, *flags, 'stray.txt')
  # bertjax.main's refusals exit 78 (a scheduler must not rerun it); it printed absl's whole
  # help (40 lines) and exited 1 (hostile pass H5).
  assert done.returncode == (78 if command == 'bertjax.main' else 1), done.stderr
  assert f"unexpected arguments ['stray.txt']: every input is a --flag ({named}" in done.stderr
  assert 'Traceback' not in done.stderr and os.listdir(tmp_path) == []
  assert '--helpfull' not in done.stderr and len(done.stderr.splitlines()) <= 3, done.stderr
  # A flag after '--' (absl reads it as a word): said so, not called an unexpected argument.
  flag = '--config.seed=3' if command == 'bertjax.main' else '--verbosity=1'
  done = run(tmp_path, '-m', command, *flags, '--', flag)
  assert done.returncode == (78 if command == 'bertjax.main' else 1), done.stderr
  assert f"{flag} comes after '--', which ends the flags" in done.stderr, done.stderr
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('config', ['', ':size=tiny'])
def test_an_empty_config_file_is_one_line_and_exit_78(tmp_path, config):
  """`--config=` gave a 28-line traceback and exit 1 (hostile pass H3)."""
  done = run(tmp_path, '-m', 'bertjax.main', f'--config={config}', '--workdir=w')
  assert done.returncode == 78, done.stderr
  assert done.stderr.startswith(f"FATAL Flags parsing error: --config={config}: no config file "
                                "'' (from "), done.stderr
  assert 'Traceback' not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('command, flag, said', [
    ('bertjax.export', '--workdir=run', 'error: unknown flag --workdir: this command takes '
     '--do_lower_case, --format, --from, --labels'),  # absl: 'Did you mean: log_dir ?'.
    ('bertjax.learn_vocab', '--inputt=a.txt', 'learn_vocab: error: unknown flag --inputt (did '
     'you mean --input_file?): this command takes --character_coverage, '),
    # Session 56's hostile pass: 'flag --vocab_size=None: Flag --vocab_size must have a value
    # other than None.'
    ('bertjax.learn_vocab', '--input_file=a.txt', 'learn_vocab: error: --output_file and '
     '--vocab_size are required: pass them (--helpshort lists the flags)\n'),
    ('bertjax.create_pretraining_data', '--input_file=a.txt', 'create_pretraining_data: error: '
     '--output_file is required: pass it (--helpshort lists the flags)\n'),
])
def test_a_flag_the_command_does_not_take_names_the_ones_it_does(tmp_path, command, flag, said):
  """Console pass of 2026-12-02: `export --workdir=...` was answered 'Did you mean: log_dir ?',
  an absl logging flag, not one of export's."""
  done = run(tmp_path, '-m', command, flag)
  assert done.returncode == 1 and done.stderr.startswith(said), done.stderr
  assert 'log_dir' not in done.stderr and done.stderr.count('\n') == 1
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('command, flags', [
    ('bertjax.main', TINY[:1] + ['--workdir', '--config.seed=1']),
    ('bertjax.export', ['--from=w', '--format=hf', '--output=o', '--vocab_file', '--step=1']),
    ('bertjax.export', ['--from=w', '--output=o', '--format', '--overwrite']),  # A list flag.
])
def test_a_flag_given_no_value_is_refused_not_fed_the_next_flag(tmp_path, command, flags):
  """absl gives a text flag with no value the next word: `--workdir --config.seed=1` ran a
  pre-training in a folder named '--config.seed=1'. bertjax.main's refusals before it starts
  exit 78 (it would refuse again), the tools' 1."""
  done = run(tmp_path, '-m', command, *flags)
  assert done.returncode == (78 if command == 'bertjax.main' else 1), done.stderr
  name = flags[-2][2:]
  assert f"--{name} took the next word '{flags[-1]}' as its value" in done.stderr, done.stderr
  assert 'Traceback' not in done.stderr and os.listdir(tmp_path) == []


def test_a_launcher_flag_given_no_value_is_refused():
  done = run(REPO, '-m', 'launch.tpu_pod', '--name=x', '--zone=z', '--accelerator_type=v5p-8',
             '--workdir=gs://bkt/r', '--project', '--dry_run', '--', TINY[0])
  assert done.returncode == 78, done.stderr
  assert "--project took the next word '--dry_run' as its value" in done.stderr, done.stderr


def test_a_flag_given_twice_is_said_with_the_value_used(tmp_path):
  done = run(tmp_path, '-m', 'bertjax.main', *TINY[:1], '--workdir=w',
             '--config.optimizer.learning_rate=1e-4', '--config.optimizer.learning_rate=3e-4',
             '--config.num_train_steps=0')  # Stops at the config check: nothing runs.
  assert done.returncode == 78, done.stderr  # num_train_steps=0: refused.
  assert ('--config.optimizer.learning_rate is given 2 times (1e-4, 3e-4): the last, 3e-4, is '
          'used') in done.stderr, done.stderr
  # In each form absl reads: `--flag value` as well as `--flag=value`.
  spaced = run(tmp_path, '-m', 'bertjax.main', *TINY[:1], '--workdir', 'w', '-workdir=v',
               '--config.num_train_steps=0')
  assert spaced.returncode == 78, spaced.stderr
  assert '--workdir is given 2 times (w, v): the last, v, is used' in spaced.stderr, spaced.stderr


def test_a_pod_whose_configs_differ_from_the_launchers_refuses_to_run(tmp_path):
  """gke_jobset sets the digest of the configs/ it checked the job against; an image built from
  other configs/ (a config edited and not rebuilt) must not run them silently."""
  configs = tmp_path / 'image' / 'configs'
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.copytree(REPO / 'configs', configs, ignore=shutil.ignore_patterns('__pycache__'))
  checked = config_files.configs_digest(configs)
  assert checked == config_files.configs_digest(REPO / 'configs')
  with (configs / 'common.py').open('a') as f:
    f.write('\n# Edited after the image was built.\n')
  args = ['-m', 'bertjax.main', '--config=configs/pretrain.py:size=tiny', f'--workdir={tmp_path}/w']
  result = subprocess.run([sys.executable, *args], cwd=tmp_path / 'image', capture_output=True,
                          text=True, timeout=120, env=environ(BERTJAX_CONFIGS_SHA256=checked))
  assert result.returncode == 78, result.stderr  # A JobSet fails at once on it.
  assert result.stderr.strip().splitlines()[-2] == (
      f"error: this image's configs/ ({configs}) differ from the ones the launcher checked the "
      'job against: rebuild and push the image from that checkout (docker build -f '
      'launch/Dockerfile), then launch again')
  assert not (tmp_path / 'w').exists()


# predict with its loader stubbed (no model needed): what it says while it waits for stdin.
_PREDICT_ON_STDIN = '''
import sys
from absl import app
from bertjax import predict
class Loaded:
  tokenizer, kind, step, run = None, 'classification', 1, {}
predict.Predictor._load = classmethod(lambda cls, *args, **kwargs: Loaded())  # What main loads by.
predict._define_flags()
app.run(predict.main, argv=['predict', '--workdir=w'])
'''


def test_predict_on_a_terminal_says_it_reads_standard_input(tmp_path):
  """`predict --workdir=RUN` on a terminal waited for lines without a word."""
  primary, secondary = os.openpty()
  try:
    proc = subprocess.Popen([sys.executable, '-c', _PREDICT_ON_STDIN], stdin=secondary,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=environ())
    os.close(secondary)
    os.write(primary, b'\x04')  # Ctrl-D: the terminal's end of input (no lines).
    _, stderr = proc.communicate(timeout=120)
  finally:
    os.close(primary)
  assert stderr.splitlines() == [
      'reading inputs from standard input, one per line (Ctrl-D ends)',
      'error: <stdin> holds no inputs: one per line expected.'], stderr
  piped = subprocess.run([sys.executable, '-c', _PREDICT_ON_STDIN], input='', cwd=REPO,
                         env=environ(), capture_output=True, text=True, timeout=120, check=False)
  assert piped.stderr.splitlines() == ['error: <stdin> holds no inputs: one per line expected.']


def test_help_names_the_configs_and_how_to_set_a_field(tmp_path):
  done = run(tmp_path, '-m', 'bertjax.main', '--help')  # absl's help exits 1.
  text = ' '.join(done.stdout.split())  # absl wraps the help text.
  for config in ('configs/pretrain.py:size=', 'configs/finetune.py:task=', 'configs/embed.py'):
    assert config in text, text
  assert '--config.FIELD=VALUE' in text


def test_a_copied_config_file_loads_from_any_folder(tmp_path):
  """Hostile pass H9: a copy of configs/pretrain.py run from outside the checkout said
  `ModuleNotFoundError: No module named 'configs'` (its `from configs import common`)."""
  (tmp_path / 'mine.py').write_text((REPO / 'configs' / 'pretrain.py').read_text())
  done = run(tmp_path, '-m', 'bertjax.main', '--config=mine.py:size=tiny', '--workdir=w',
             '--config.num_train_steps=-1')
  assert done.returncode == 78, done.stderr  # Loaded, then checked: the field's own refusal.
  assert done.stderr.startswith('error: config.num_train_steps=-1: must be >= 1'), done.stderr
  assert sorted(os.listdir(tmp_path)) == ['mine.py']
  # Kept in a folder of its own named configs/, run from above it: that folder is a namespace
  # package `configs` without common.py ("cannot import name 'common' from 'configs'").
  (tmp_path / 'configs').mkdir()
  (tmp_path / 'mine.py').rename(tmp_path / 'configs' / 'mine.py')
  done = run(tmp_path, '-m', 'bertjax.main', '--config=configs/mine.py:size=tiny', '--workdir=w',
             '--config.num_train_steps=-1')
  assert done.returncode == 78, done.stderr
  assert done.stderr.startswith('error: config.num_train_steps=-1: must be >= 1'), done.stderr
  assert sorted(os.listdir(tmp_path)) == ['configs']
  # With an __init__.py that folder is a package of its own, which hides the checkout's
  # configs/ (it said only "cannot import name 'common' from 'configs'").
  (tmp_path / 'configs' / '__init__.py').write_text('')
  done = run(tmp_path, '-m', 'bertjax.main', '--config=configs/mine.py:size=tiny', '--workdir=w')
  assert done.returncode == 78, done.stderr
  assert done.stderr.strip().endswith(
      f"ImportError: {tmp_path / 'configs'} is a Python package named configs (it holds "
      "__init__.py), which hides bertjax's configs/ (from configs import common): remove its "
      '__init__.py, or rename the folder'), done.stderr
  assert not (tmp_path / 'w').exists()
  # A package named configs elsewhere on the import path (PYTHONPATH; an installed one is the
  # same folder with a pip package's metadata beside it) is not the user's to edit: it was
  # told to remove its __init__.py.
  other = tmp_path / 'lib'
  (other / 'configs').mkdir(parents=True)
  (other / 'configs' / '__init__.py').write_text('')
  (tmp_path / 'configs' / '__init__.py').unlink()
  hides = (f"ImportError: {other / 'configs'} is a Python package named configs (it holds "
           "__init__.py), which hides bertjax's configs/ (from configs import common), ")
  # A pip package's metadata lists configs elsewhere on the path: it is not the one imported.
  elsewhere = tmp_path / 'site'
  _a_pip_package_of_configs(elsewhere)
  for installed in (False, True):
    if installed:
      _a_pip_package_of_configs(other)
    done = subprocess.run([sys.executable, '-m', 'bertjax.main', '--workdir=w',
                           f"--config={tmp_path / 'configs' / 'mine.py'}:size=tiny"],
                          cwd=tmp_path, env=environ(PYTHONPATH=f'{other}:{elsewhere}'),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 78, done.stderr
    assert done.stderr.strip().endswith(hides + (
        'installed by pip package tool: pip uninstall tool, or run from an environment without '
        'it' if installed else f'found through PYTHONPATH: drop {other} from PYTHONPATH, or '
        'rename that folder')), done.stderr
    assert not (tmp_path / 'w').exists()


def test_the_pip_package_that_installed_a_hiding_configs_is_the_one_named(tmp_path, monkeypatch):
  """A reviewer's cases: an editable install (its RECORD holds a .pth only), a distribution of
  the same name without configs/ earlier on the path, a dist-info folder named otherwise than
  its Name (it raised PackageNotFoundError)."""
  def dist_info(site, name, record, **files):
    info = site / f'{name}-1.0.dist-info'
    info.mkdir(parents=True)
    (info / 'METADATA').write_text(f'Name: {files.pop("named", name)}\nVersion: 1.0\n')
    (info / 'RECORD').write_text(record)
    for file_name, text in files.items():
      (info / file_name.replace('_json', '.json')).write_text(text)
  source = tmp_path / 'src'
  (source / 'configs').mkdir(parents=True)
  dist_info(tmp_path / 'site', 'edtool', '__editable__.edtool-1.0.pth,,\n', direct_url_json=(
      f'{{"url": "file://{source}", "dir_info": {{"editable": true}}}}'))
  dist_info(tmp_path / 'early', 'tool', 'tool/__init__.py,,\n')
  for site in ('late', 'odd'):  # Python 3.12 lists a RECORD's files that exist only.
    (tmp_path / site / 'configs').mkdir(parents=True)
    (tmp_path / site / 'configs' / '__init__.py').write_text('')
  dist_info(tmp_path / 'late', 'tool', 'configs/__init__.py,,\n')
  dist_info(tmp_path / 'odd', 'other', 'configs/__init__.py,,\n', named='oddtool')
  for site in ('odd', 'late', 'early', 'site'):
    monkeypatch.syspath_prepend(str(tmp_path / site))
  for folder, owner in ((source / 'configs', 'edtool'), (tmp_path / 'late' / 'configs', 'tool'),
                        (tmp_path / 'odd' / 'configs', 'oddtool')):
    said = config_files._foreign_configs(str(folder), str(tmp_path / 'mine.py'))  # pylint: disable=protected-access
    assert said.endswith(f'installed by pip package {owner}: pip uninstall {owner}, or run from '
                         'an environment without it'), said


def _a_pip_package_of_configs(folder):
  """What pip leaves of a package `tool` that installs a top-level configs/ into `folder`."""
  (folder / 'configs').mkdir(parents=True, exist_ok=True)
  (folder / 'configs' / '__init__.py').write_text('')
  (folder / 'tool-1.0.dist-info').mkdir()
  (folder / 'tool-1.0.dist-info' / 'METADATA').write_text('Name: tool\nVersion: 1.0\n')
  (folder / 'tool-1.0.dist-info' / 'top_level.txt').write_text('configs\n')
  (folder / 'tool-1.0.dist-info' / 'RECORD').write_text('configs/__init__.py,,\n')


@pytest.mark.parametrize('text', ["It's sunny", 'Say "hi" to $HOME `now` \\n'])
def test_a_sentence_that_is_no_tuple_is_told_the_quoting_bash_takes(tmp_path, text):
  """Hostile pass H11: ml_collections' advice for --config.sentences=It's sunny was
  `--flag '"It\\'s sunny"'`, which bash does not take. The line's own example, run by bash,
  parses (as config_flags parses it for main) to that one sentence."""
  done = run(tmp_path, '-m', 'bertjax.main', f'--config={REPO}/configs/embed.py',
             f'--config.sentences={text}')
  assert done.returncode == 78, done.stderr
  said = done.stderr.strip()
  assert said.startswith(f'FATAL Flags parsing error: --config.sentences={text} is not a tuple: '
                         'config.sentences takes quoted texts'), said
  assert said.endswith('(bash), or a file of them: --config.input_file=FILE (one per line)')
  example = said.partition('e.g. ')[2].rpartition(' (bash)')[0]
  check = ("import sys; from absl import flags; from ml_collections import config_flags; "
           "c = config_flags.DEFINE_config_file('config'); flags.FLAGS(sys.argv); "
           "print(repr(c.value.sentences))")
  parsed = subprocess.run(['bash', '-c', f'"$0" -c "$1" --config="$2" {example}',
                           sys.executable, check, f'{REPO}/configs/embed.py'],
                          cwd=tmp_path, env=environ(), capture_output=True, text=True,
                          check=False)
  assert parsed.stdout.strip() == repr((text,)), parsed.stderr
