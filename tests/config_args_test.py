"""A job's command line loaded as bertjax.main loads it (bertjax/config_args.py): the launchers'
check, and the one line for a mistyped, renamed or replaced field."""

import os
import pathlib
import subprocess
import sys
import threading

import pytest

from bertjax import command_flags
from bertjax import config_args
from bertjax import console

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_a_launch_command_line_is_checked_as_bertjax_main_loads_it(monkeypatch):
  monkeypatch.chdir(REPO)
  config = config_args.check_args(['--config=configs/pretrain.py:size=base,vocab=30522',
                                    '--config.data.train_files=gs://b/train-*', '--workdir=x'])
  assert config.data.train_files == 'gs://b/train-*'
  cases = [
      (['--workdir=gs://b/r'], 'the job has no --config='),
      (['--config=configs/pretrain.py', '--config.optimizer.learning_rat=1'],
       "unknown config field 'optimizer.learning_rat' (in --config.optimizer.learning_rat=1); "
       'closest valid names: optimizer.learning_rate'),
      (['--config=configs/pretrain.py:size=huge'], "does not load: ValueError: unknown size "
       "'huge'"),
      (['--config=configs/nope.py'], "no config file 'configs/nope.py'"),
      (['--config=configs/pretrain.py', '--config.global_batch_size=abc'],
       'flag --config.global_batch_size=abc'),
      (['--config=configs/pretrain.py', '--config.global_batch_size=-8'],
       'config.global_batch_size=-8: must be > 0'),
  ]
  for args, message in cases:
    with pytest.raises(ValueError) as e:
      config_args.check_args(args)
    assert message in str(e.value) and '\n' not in str(e.value), str(e.value)


@pytest.mark.parametrize('old, config_file', [('checkpoint.init_from', 'pretrain'),
                                              ('init', 'finetune'), ('checkpoint', 'embed')])
def test_a_renamed_start_from_field_is_refused_naming_init_from(old, config_file):
  config = config_args.load_config(f'{REPO}/configs/{config_file}.py')
  message = config_args.unknown_field(config, [f'--config.{old}=/runs/pre'])
  assert message == (f'config.{old} was renamed: use --config.init_from (in '
                     f'--config.{old}=/runs/pre; the same field in every job).')


def test_the_whole_word_bool_is_refused_naming_data_masking():
  config = config_args.load_config(f'{REPO}/configs/pretrain.py')
  message = config_args.unknown_field(config, ['--config.data.whole_word_masking=True'])
  assert message == ('config.data.whole_word_masking was replaced: use '
                     '--config.data.masking=whole_word (in --config.data.whole_word_masking=True; '
                     'data.masking is one of wordpiece, whole_word, ngram, span).')


def test_config_field_error_names_a_mistyped_field_of_main_s_argv():
  argv = ['bertjax.main', f'--config={REPO}/configs/pretrain.py',
          '--config.optimizer.learning_rat=1']
  assert "unknown config field 'optimizer.learning_rat'" in config_args.config_field_error(argv)
  assert config_args.config_field_error(argv[:2]) is None  # Every field known.
  # A config that does not load: None, so that main shows the original error.
  assert config_args.config_field_error(['bertjax.main', '--config=/nowhere.py', argv[2]]) is None


def test_a_config_flag_after_the_double_dash_or_naming_no_field_is_said():
  """Hostile pass H8: `-- --config.foo=1` said `AttributeError: "'foo'"` (ml_collections reads
  a --config.X past '--', absl does not) and `--config.=1` a bare SyntaxError."""
  argv = ['bertjax.main', f'--config={REPO}/configs/pretrain.py']
  assert config_args.config_field_error([*argv, '--', '--config.foo=1']) == (
      "--config.foo=1 comes after '--', which ends the flags: move it before the '--', or drop "
      "the '--'.")
  for word in ('--config.=1', '--config..seed=1', '--config.seed.=2', '-config.=1'):
    assert config_args.config_field_error([*argv, word]) == (
        f'{word} names no config field: write --config.FIELD=VALUE, e.g. --config.seed=5.')
  assert config_args.config_field_error([*argv, '--config.seed=1', '--', 'x']) is None
  # A name misspelt with dashes is a name: told its closest valid names, as any typo.
  assert "closest valid names: data.max_seq_length" in config_args.config_field_error(
      [*argv, '--config.data.max-seq-length=64'])


def test_a_config_argument_of_the_wrong_type_or_given_twice_is_refused_naming_it(monkeypatch):
  """configs/common.parse_arg: `file.py:k=v,...` values are cast to their defaults' types; a
  value that does not cast, a key given twice, or seq=0 is one line naming the argument, never
  read as something else (a last-wins duplicate, a typo read as false) or a bare traceback."""
  monkeypatch.chdir(REPO)
  assert config_args.check_args(['--config=configs/pretrain.py:steps=1e5']).num_train_steps == (
      100_000)
  assert config_args.check_args(['--config=configs/pretrain.py:steps=2_000']).num_train_steps == (
      2_000)
  cases = [
      ('pretrain.py:steps=2.5', "config argument steps='2.5': steps takes a whole number"),
      ('pretrain.py:steps=', "config argument steps='': steps takes a whole number"),
      ('pretrain.py:batch=256,batch=512', "config argument 'batch' is given twice (batch=256, "
       'then batch=512): pass it once.'),
      ('finetune.py:task=sst2,epochs=three', "config argument epochs='three': epochs takes a "
       'float'),
      ('pretrain.py:seq=0', 'config.data.max_seq_length=0: needs room for [CLS]'),
      # 0 is the recipe's value for these: given, it was silently 2e-5, 32, 128, 3 and 600.
      ('finetune.py:task=sst2,lr=0', "config argument lr=0: 0 stands for the recipe's own value "
       'here, so leave lr out for that, or pass a positive lr.'),
      ('finetune.py:task=sst2,batch=0', 'config argument batch=0: 0 stands for'),
      ('finetune.py:task=sst2,seq=0', 'config argument seq=0: 0 stands for'),
      ('finetune.py:task=sst2,epochs=0.0', 'config argument epochs=0.0: 0 stands for'),
      ('pretrain.py:steps=0', 'config argument steps=0: 0 stands for'),
  ]
  for arg, message in cases:
    with pytest.raises(ValueError) as e:
      config_args.check_args([f'--config=configs/{arg}'])
    assert message in str(e.value) and '\n' not in str(e.value), str(e.value)


def test_a_true_or_false_argument_takes_only_true_or_false_words():
  """The words a --config.X=V bool flag takes (absl's); a typo is refused, never read as false."""
  from configs import common  # pylint: disable=g-import-not-at-top
  for word, value in [('true', True), ('True', True), ('t', True), ('1', True),
                      ('false', False), ('F', False), ('0', False)]:
    assert common.parse_arg(f'flag={word}', flag=not value).flag is value
  for typo in ('ture', '', 'flase', '2', 'yes'):
    with pytest.raises(ValueError, match=f"config argument flag='{typo}': flag takes true or "
                       'false'):
      common.parse_arg(f'flag={typo}', flag=True)


def test_a_second_config_file_is_refused(monkeypatch):
  """absl keeps the last --config=FILE yet registers the --config.X overrides against the first
  (an AttributeError, a DuplicateFlagError, or without overrides the last file silently): the
  launchers' check and bertjax.main refuse a second one in one line."""
  monkeypatch.chdir(REPO)
  args = ['--config=configs/pretrain.py:size=base', '--config=configs/finetune.py:task=sst2']
  message = ('--config= is given 2 times (configs/pretrain.py:size=base, then '
             'configs/finetune.py:task=sst2): pass one --config=FILE[:ARG], and change its '
             'fields with --config.X=V.')
  for extra in ([], ['--config.num_epochs=2']):
    with pytest.raises(ValueError) as e:
      config_args.check_args(args + extra)
    assert str(e.value) == message
    assert config_args.config_field_error(['bertjax.main', *args, *extra]) == message
  for command in (['bertjax.main', '--workdir=/nonexistent'],
                  ['launch.aot_compile', '--topology=cpu:8']):
    run = subprocess.run([sys.executable, '-m', *command, *args], cwd=REPO, capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode == console.REFUSED_EXIT, run.stderr  # Not restarted by a scheduler.
    assert f'FATAL Flags parsing error: {message}' in run.stderr, run.stderr


def test_a_config_file_that_does_not_load_is_one_line_in_main(tmp_path):
  """bertjax.main (and aot_compile) showed a config file that does not load as a traceback: 41
  lines for a missing file (or one named from another folder), 17 around 'unknown task' for a
  typo in the argument string. One line now, as the launchers' check says it."""
  (tmp_path / 'no_function.py').write_text('x = 1\n')
  (tmp_path / 'broken.py').write_text('def get_config(:\n')
  (tmp_path / 'flags.txt').write_text('--config.optimizer.learnin_rate=1e-4\n')
  (tmp_path / 'latin1.txt').write_bytes('--config.seed=3  # café\n'.encode('latin-1'))
  cases = [
      ([f'--config={REPO}/configs/pretrain.py', '--flagfile=latin1.txt'],  # A traceback before.
       '--flagfile=latin1.txt is not UTF-8 text (line 1, byte 22): re-encode it, e.g. iconv -f '
       'latin1 -t utf-8 latin1.txt > flags.txt'),
      ([f'--config={REPO}/configs/pretrain.py', '--flagfile=flags.txt'],  # absl's repr before.
       "unknown config field 'optimizer.learnin_rate' (in --config.optimizer.learnin_rate=1e-4)"
       '; closest valid names: optimizer.learning_rate'),
      ([f'--config={REPO}/configs/pretrain.py', '--config.optimizer=adamw'],  # ast's error.
       'config.optimizer is a group of fields, not a value: set one with '
       '--config.optimizer.NAME=VALUE (optimizer.b1, '),
      ([f'--config={REPO}/configs/pretrain.py', '--flagfile=nope.txt'],  # A traceback before.
       '--flagfile=nope.txt cannot be read (No such file or directory): check the path.'),
      ([f'--config={REPO}/configs/finetune.py:task=mprc'],
       f"--config={REPO}/configs/finetune.py:task=mprc does not load: ValueError: unknown task "
       "'mprc' (did you mean 'mrpc'?); valid tasks: cola, "),
      ([f'--config={REPO}/configs/pretrain.py:sise=tiny'],
       "unknown config argument 'sise' (did you mean 'size'?); valid ones: "),
      (['--config=configs/pretrain.py:size=tiny'],
       f"--config=configs/pretrain.py:size=tiny: no config file 'configs/pretrain.py' (from "
       f'{tmp_path}); the configs are configs/pretrain.py, '),
      ([f'--config={REPO}/configs'], f'--config={REPO}/configs is a folder: name a config file'),
      (['--config=no_function.py'], 'no_function.py defines no get_config(arg) function'),
      (['--config=broken.py'], '--config=broken.py does not load: SyntaxError: '),
      # Pass 33, item 14: absl named no fix for a value its field's type does not parse
      # ('invalid literal for int() ...').
      ([f'--config={REPO}/configs/pretrain.py:size=tiny', '--config.global_batch_size=1.5'],
       "--config.global_batch_size='1.5' is not a whole number: config.global_batch_size takes "
       'a whole number (the config gives 64); pass e.g. --config.global_batch_size=64.'),
      ([f'--config={REPO}/configs/pretrain.py', '--config.optimizer.learning_rate=abc'],
       "--config.optimizer.learning_rate='abc' is not a number: config.optimizer.learning_rate "
       'takes a number'),
      ([f'--config={REPO}/configs/pretrain.py', '--config.model.nsp=maybe'],
       "--config.model.nsp='maybe' is not true or false: config.model.nsp takes true or false "
       '(the config gives true); pass e.g. --config.model.nsp=true.'),
  ]
  for args, message in cases:
    run = subprocess.run([sys.executable, '-m', 'bertjax.main', *args, '--workdir=out'],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, 'PYTHONPATH': str(REPO)})
    assert run.returncode == console.REFUSED_EXIT, run.stderr
    assert 'Traceback' not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stderr.startswith('FATAL Flags parsing error: '), run.stderr
    assert message in run.stderr, run.stderr
  assert not (tmp_path / 'out').exists()


def test_a_flagfile_under_home_is_read_as_absl_reads_it(tmp_path, monkeypatch):
  """Review: bash leaves `~` after --flagfile= unexpanded; absl expands it."""
  monkeypatch.setenv('HOME', str(tmp_path))
  (tmp_path / 'flags.txt').write_text('--config.seed=3\n')
  assert command_flags.unreadable_flagfile(['--flagfile=~/flags.txt']) is None
  assert command_flags.unreadable_flagfile(['--flagfile=~/nope.txt']).startswith(
      '--flagfile=~/nope.txt cannot be read')


def test_a_tools_flagfile_that_is_not_utf8_is_one_line(tmp_path, capsys, monkeypatch):
  """Matrix pass of 2026-12-02: predict and extract_features said only absl's codec error
  ('utf-8' codec can't decode byte 0xe9 ...), naming neither the file nor the fix."""
  (tmp_path / 'flags.txt').write_bytes(b'--input_file=caf\xe9.txt\n')
  monkeypatch.setattr(console, 'COMMAND', threading.Event())  # The parser marks a command.
  with pytest.raises(SystemExit) as ended:
    command_flags.flags_parser()(['predict', f'--flagfile={tmp_path}/flags.txt'])
  assert ended.value.code == 1
  assert capsys.readouterr().err == (
      f'error: --flagfile={tmp_path}/flags.txt is not UTF-8 text (line 1, byte 16): re-encode '
      f'it, e.g. iconv -f latin1 -t utf-8 {tmp_path}/flags.txt > flags.txt\n')


def test_an_override_the_job_would_not_apply_is_refused(monkeypatch, tmp_path):
  """Pass S: --config.model.num_layers=1 on a fine-tuning from init_from ran the checkpoint's 2
  layers without a word; --config.task=squad_v2 kept sst2's recipe (128 tokens, lr 2e-5, batch
  32, not 384 / 5e-5 / 48); --config.model.size=base relabelled a tiny model 'base'. Each is
  refused in one line saying where the value belongs, by the launchers' check and by main."""
  monkeypatch.chdir(REPO)
  cases = [
      (['--config=configs/finetune.py:task=sst2,init_from=/runs/pre',
        '--config.model.num_layers=1'],
       '--config.model.num_layers=1 is not applied: without size= a fine-tuning takes the '
       "model's shape from init_from"),
      (['--config=configs/finetune.py:task=sst2,init_from=/runs/pre',
        '--config.model.hidden_act=relu'], '--config.model.hidden_act=relu is not applied'),
      (['--config=configs/finetune.py', '--config.task=squad_v2'],
       "--config.task=squad_v2: the task is the argument string's task= (e.g. "
       '--config=configs/finetune.py:task=squad_v2), which also picks its recipe'),
      (['--config=configs/pretrain.py:size=tiny', '--config.model.size=base'],
       "config.model.size is the argument string's size= (e.g. "
       '--config=configs/pretrain.py:size=base)'),
  ]
  for args, message in cases:
    with pytest.raises(ValueError) as e:
      config_args.check_args(args)
    assert str(e.value).startswith(message), str(e.value)
  # Applied, so accepted: the shape with size= (checked against init_from by the job), a model
  # field that is not the shape, and the shape of a fine-tuning from scratch.
  for args in (['--config=configs/finetune.py:task=sst2,size=tiny,init_from=/runs/pre',
                '--config.model.num_layers=1'],
               ['--config=configs/finetune.py:task=sst2,init_from=/runs/pre',
                '--config.model.dropout_rate=0.2'],
               ['--config=configs/finetune.py:task=sst2', '--config.model.vocab_size=1000']):
    config_args.check_args(args)
  run = subprocess.run([sys.executable, '-m', 'bertjax.main', *cases[0][0],
                        f'--workdir={tmp_path / "run"}'], cwd=REPO, capture_output=True,
                       text=True, timeout=300, check=False)
  assert run.returncode == 78 and f'error: {cases[0][1]}' in run.stderr, run.stderr
  assert not (tmp_path / 'run').exists()


def test_every_absl_form_of_config_is_counted():
  """absl takes --config FILE and -config[=]FILE as well as --config=FILE; a second file in any
  form is refused, and what follows '--' is an argument, not a flag."""
  assert config_args.config_spec(['m', '--config', 'a.py:k=1', '--workdir=w']) == 'a.py:k=1'
  assert config_args.config_spec(['m', '-config=a.py']) == 'a.py'
  assert config_args.config_spec(['m', '--config=a.py', '--', '--config=b.py']) == 'a.py'
  for second in (['--config', 'b.py'], ['-config', 'b.py'], ['-config=b.py']):
    with pytest.raises(ValueError, match=r'given 2 times \(a.py, then b.py\)'):
      config_args.config_spec(['m', '--config=a.py', *second])
  argv = ['bertjax.main', '--config', f'{REPO}/configs/pretrain.py', '--config.optimizer.lr=1']
  assert "unknown config field 'optimizer.lr'" in config_args.config_field_error(argv)


def test_a_config_field_without_a_config_file_names_the_file_to_pass(tmp_path):
  """Helper-180's pass (moved runs): `bertjax.main --workdir=RUN --config.mode=eval` said
  "Unknown command line flag 'config.mode'. Did you mean: config ?": the line names the
  --config=FILE to pass first, with a fine-tuning run's task as its config.json records it."""
  (tmp_path / 'config.json').write_text('{"task": "classification"}')
  run = subprocess.run([sys.executable, '-m', 'bertjax.main', f'--workdir={tmp_path}',
                        '--config.mode=eval'], cwd=REPO, capture_output=True, text=True,
                       timeout=300, check=False)
  assert run.returncode == console.REFUSED_EXIT, run.stderr
  assert run.stderr.strip().splitlines()[-1] == (
      'FATAL Flags parsing error: --config.mode sets a field of the config a --config=FILE '
      'loads, and none is given: pass one before it, e.g. --config=configs/finetune.py:'
      f'task=classification (the task {tmp_path}/config.json names).'), run.stderr
  argv = ['bertjax.main', '--workdir=/nonexistent', '--config.mode=eval']
  error = "Unknown command line flag 'config.mode'. Did you mean: config ?"
  assert config_args.without_config_file(argv, error).endswith(
      'e.g. --config=configs/finetune.py:task=TASK (a fine-tuning run: the task its config.json '
      'names) or --config=configs/pretrain.py:size=SIZE.')
  assert config_args.without_config_file(argv + ['--config=configs/pretrain.py'], error) is None
  assert config_args.without_config_file(argv, "Unknown command line flag 'nope'") is None


def test_a_resume_given_only_its_workdir_names_the_config_file_to_pass(tmp_path):
  """Pass helper-181: `bertjax.main --workdir=RUN` (a resume from another shell, config.json in
  the run) said absl's 'flag --config=None: Flag --config must have a value other than None.'
  and its two-line help hint: the line names the --config=FILE to pass, with the run's task."""
  (tmp_path / 'config.json').write_text('{"task": "classification"}')
  run = subprocess.run([sys.executable, '-m', 'bertjax.main', f'--workdir={tmp_path}'], cwd=REPO,
                       capture_output=True, text=True, timeout=300, check=False)
  assert run.returncode == console.REFUSED_EXIT, run.stderr
  assert run.stderr.strip().splitlines()[-1] == (
      "FATAL Flags parsing error: --config=FILE is required, a resume's too (--workdir holds the "
      "run's state, not its config file): pass the one the run started with, e.g. "
      f'--config=configs/finetune.py:task=classification (the task {tmp_path}/config.json '
      'names), and its --config.* fields (config.json records the values).'), run.stderr
  (tmp_path / 'config.json').write_text('{"model": {"size": "tiny"}}')  # A pre-training run.
  argv = ['bertjax.main', f'--workdir={tmp_path}']
  error = 'flag --config=None: Flag --config must have a value other than None.'
  assert config_args.without_config_file(argv, error).startswith(
      "--config=FILE is required, a resume's too (--workdir holds the run's state, not its config "
      'file): pass the one the run started with, e.g. --config=configs/pretrain.py:size=tiny (the '
      f'size {tmp_path}/config.json names), and')
