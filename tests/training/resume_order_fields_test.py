"""A resume with another shuffle window or lane count reads the data in another order
(input/read_order.py plans each epoch from both): warned as a data-order change, as a changed
seed is (resume_checks._check_data_order)."""

import json
import pathlib
import shutil

import log_records
import pretrain_runs
import pytest

from bertjax.training import resume_checks
from configs import finetune
from configs import pretrain


@pytest.mark.parametrize('field, value, old', [('shuffle_window', 100, 10000),
                                               ('num_lanes', 4, 16)])
def test_another_window_or_lane_count_is_a_data_order_change(monkeypatch, field, value, old):
  """Hostile pass A, 10: data.shuffle_window 10000 -> 100 on a resume got only the generic
  'resumed at step 4 with settings other than the run had' warning."""
  said = log_records.recorded_warnings(monkeypatch, resume_checks)
  last = json.loads(pretrain.get_config('size=tiny').to_json())
  last['data']['train_files'] = 'records/train-*'  # Own files (the embedded corpus adds fields).
  config = pretrain.get_config('size=tiny')
  config.data.train_files = 'records/train-*'
  resume_checks._check_data_order(config, last, 4, 256)  # pylint: disable=protected-access
  assert said == []
  config.data[field] = value
  resume_checks._check_data_order(config, last, 4, 256)  # pylint: disable=protected-access
  assert said == [f'the data order differs from the one this run last ran with (data.{field} '
                  f'{old} -> {value}): from step 4 it reads on at example 256 of another order, '
                  'so examples already seen may come again and others never. To resume exactly, '
                  'keep the old values.']


def test_a_fine_tuning_file_moved_since_is_no_data_order_change(monkeypatch):
  """Helper-180's pass (moved runs and data): train.csv moved, the resume naming its new place
  was warned to read 'another order' and told to keep the old path (gone); the same rows
  (data.train_sha256, recorded by both) are the same order. Other rows are still warned of."""
  said = log_records.recorded_warnings(monkeypatch, resume_checks)
  config = finetune.get_config('task=classification,size=tiny,batch=8')
  config.unlock()
  config.data.train_file, config.data.train_sha256 = '/data/reviews.csv', 'ab' * 32
  last = json.loads(config.to_json())
  config.data.train_file = '/moved/reviews.csv'
  resume_checks._check_data_order(config, last, 4, 32)  # pylint: disable=protected-access
  assert said == []
  config.data.train_sha256 = 'cd' * 32
  resume_checks._check_data_order(config, last, 4, 32)  # pylint: disable=protected-access
  assert said == ["the data order differs from the one this run last ran with (data.train_file "
                  "'/data/reviews.csv' -> '/moved/reviews.csv'): from step 4 it reads on at "
                  'example 32 of another order, so examples already seen may come again and '
                  'others never. To resume exactly, keep the old values.']


def test_pre_training_files_moved_or_copied_since_are_no_data_order_change(
    tmp_path_factory, tmp_path, monkeypatch):
  """Helper-180's pass (moved runs and data): the TFRecords and their report moved to another
  folder, the resume naming it was warned to read 'another order' and told to keep the old
  path (gone), though it read on exactly (the same loss). The same shards by name (every one in
  its report) are the same order; where the old ones are still there, by name and size too."""
  said = log_records.recorded_warnings(monkeypatch, resume_checks)
  made = pathlib.Path(pretrain_runs.corpus_files(tmp_path_factory)['data.train_files'])
  old, new = tmp_path / 'old', tmp_path / 'new'
  for folder in (old, new):
    shutil.copytree(made.parent, folder)
  config = pretrain.get_config('size=tiny')
  config.data.train_files = f'{old}/{made.name}'
  last = json.loads(config.to_json())
  config.data.train_files = f'{new}/{made.name}'
  order = resume_checks._check_data_order  # pylint: disable=protected-access
  order(config, last, 4, 256)  # Copied: the same names and sizes.
  shutil.rmtree(old)
  order(config, last, 4, 256)  # Moved.
  assert said == []
  shard = sorted(new.glob(made.name))[-1]
  shard.rename(shard.with_name('other-' + shard.name))  # Not the shards the run read: said.
  order(config, last, 4, 256)
  assert len(said) == 1 and said[0].startswith(
      f"the data order differs from the one this run last ran with (data.train_files '{old}/")
