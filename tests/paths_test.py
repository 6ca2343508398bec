"""Paths are made absolute at the start of a job."""

import ml_collections
import pytest

from bertjax import paths
from bertjax.interop import init_from


def test_config_paths_become_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  config = ml_collections.ConfigDict({
      'init_from': 'runs/pre', 'seed': 3, 'name': 'relative/not/a/path',
      'data': {'train_files': 'a/train-*,gs://b/train-*', 'vocab_file': '~/v.txt',
               'eval_files': ''},
      'checkpoint': {'init_from': 'old', 'keep': 2}})
  config.lock()
  paths.absolute_config(config)
  assert config.init_from == str(tmp_path / 'runs/pre')
  assert config.data.train_files == f'{tmp_path}/a/train-*,gs://b/train-*'
  assert config.data.vocab_file.endswith('/v.txt') and not config.data.vocab_file.startswith('~')
  assert config.data.eval_files == '' and config.name == 'relative/not/a/path'
  assert config.checkpoint.init_from == str(tmp_path / 'old') and config.seed == 3


def test_a_relative_init_from_is_resolved(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  config = ml_collections.ConfigDict({'init_from': 'pre'})
  assert init_from.configured(config) == str(tmp_path / 'pre')
  assert paths.absolute('gs://bucket/dir') == 'gs://bucket/dir'


def test_read_text_lines_names_the_flag_and_the_fix(tmp_path):
  (tmp_path / 'ok.txt').write_text('a\nb ||| c\n', encoding='utf-8')
  assert paths.read_text_lines(tmp_path / 'ok.txt') == ['a', 'b ||| c']
  with pytest.raises(FileNotFoundError, match='--input_file=.*none.txt does not exist'):
    paths.read_text_lines(tmp_path / 'none.txt')
  (tmp_path / 'l1.txt').write_bytes('caf\xe9\n'.encode('latin-1'))
  with pytest.raises(ValueError, match='is not UTF-8 text .byte 3.: re-encode it'):
    paths.read_text_lines(tmp_path / 'l1.txt')
