"""The job's flags after a launcher's `--` (bertjax/config_args.py), read as bertjax.main's absl
reads them: --config FILE and --config.X V (space-separated) as well as --flag=value."""

import pathlib

from absl import flags
from ml_collections import config_flags
import pytest

from bertjax import command_flags
from bertjax import config_args

REPO = pathlib.Path(__file__).resolve().parents[2]


def absl_config(main_args):
  """The config bertjax.main ends up with: absl parsing its argv with its --config and --workdir
  flags (a fresh FlagValues, so that the process's flags are left alone)."""
  values = flags.FlagValues()
  argv = ['bertjax.main', *main_args]
  holder = config_flags.DEFINE_config_file('config', None, '', flag_values=values,
                                           lock_config=True, sys_argv=argv)
  flags.DEFINE_string('workdir', None, '', flag_values=values)
  values(argv)
  return holder.value


@pytest.mark.parametrize('main_args, field, value', [
    (['--config', 'configs/pretrain.py:size=base', '--config.num_train_steps', '5'],
     'num_train_steps', 5),
    (['--config', 'configs/pretrain.py:size=base', '--workdir', 'gs://bkt/r',
      '--config.data.train_files', 'gs://bkt/train-*', '--config.optimizer.learning_rate', '3e-4'],
     'optimizer.learning_rate', 3e-4),
    # A bool field's bare flag takes no value: the next flag is a flag, not its value.
    (['-config', 'configs/pretrain.py', '--config.data.dynamic_masking',
      '--config.num_train_steps', '9'], 'data.dynamic_masking', True),
    (['--config=configs/pretrain.py', '--noconfig.model.nsp', '-config.global_batch_size', '32'],
     'model.nsp', False),
    (['--config=configs/finetune.py:task=mrpc', '--config.num_epochs', '2',
      '--workdir=gs://bkt/r'], 'num_epochs', 2),
])
def test_space_separated_flags_load_the_config_bertjax_main_loads(monkeypatch, main_args, field,
                                                                  value):
  monkeypatch.chdir(REPO)
  config = config_args.check_args(main_args)
  assert config.to_dict() == absl_config(main_args).to_dict()
  node = config
  for key in field.split('.'):
    node = node[key]
  assert node == value


@pytest.mark.parametrize('main_args, message', [
    (['--config', 'configs/pretrain.py', '--config.num_train_steps'],
     "the job's --config flags do not parse: Error: Missing value for flag "
     '--config.num_train_steps'),
    (['--config', 'configs/pretrain.py', '--config.num_train_step', '5'],
     "unknown config field 'num_train_step' (in --config.num_train_step=5); closest valid "
     'names: num_train_steps'),
    (['--config', 'configs/pretrain.py', '--config.global_batch_size', '-8'],
     'config.global_batch_size=-8: must be > 0'),
    (['--workdir', 'gs://bkt/r', '--config'], 'the job has no --config='),
])
def test_space_separated_mistakes_are_named_in_one_line(monkeypatch, main_args, message):
  monkeypatch.chdir(REPO)
  with pytest.raises(ValueError) as e:
    config_args.check_args(main_args)
  assert message in str(e.value) and '\n' not in str(e.value), str(e.value)


def test_config_flags_are_each_one_argument_as_absl_reads_them(monkeypatch):
  monkeypatch.chdir(REPO)
  config = config_args.load_config('configs/pretrain.py')
  argv = ['--config', 'configs/pretrain.py:size=base', '--workdir', 'gs://bkt/r',
          '--config.model.nsp', '--noconfig.data.dynamic_masking', '-config.num_train_steps', '5',
          '--config.seed=3', '--', '--config.seed', '4']
  assert config_args.config_flags(argv, config) == [
      '--config=configs/pretrain.py:size=base', '--config.model.nsp',
      '--noconfig.data.dynamic_masking', '--config.num_train_steps=5', '--config.seed=3']
  assert command_flags.flag_values(argv, 'workdir') == ['gs://bkt/r']
  assert config_args.with_config_file(argv, 'elsewhere.py:size=base')[:3] == [
      '--config=elsewhere.py:size=base', '--workdir', 'gs://bkt/r']
