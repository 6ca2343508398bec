"""A transformers folder whose weights or config cannot be read, as init_from of a fine-tuning
or as an export's source: one line naming the file, before the data is read or anything is
written (it was a traceback, or an error at the restore that left checkpoints/ behind)."""

import finetune_runs
import pytest
import source_checks_test
import torch

from bertjax.finetune import job as finetune
from bertjax.interop import hf_checkpoint
from bertjax.interop import init_from
from bertjax.interop import sources

CUT = r'could not be read \(.*\): the file is corrupt or truncated.*; download or save it again'


@pytest.fixture(scope='module')
def sst2_dir(tmp_path_factory):
  return finetune_runs.write_sst2(tmp_path_factory.mktemp('sst2'))


def fine_tune_from(folder, sst2_dir, workdir):
  config = finetune_runs.tiny_config(sst2_dir, num_train_steps=1)
  config.init_from = str(folder)
  config.model_from_init = True
  finetune.train_and_evaluate(config, str(workdir))


def assert_nothing_written(workdir):
  """No checkpoints/ or config.json: the new workdir, which held only its lock, is gone."""
  assert not workdir.exists(), sorted(p.name for p in workdir.iterdir())


def cut(path, keep: float = 0.5):
  data = path.read_bytes()
  path.write_bytes(data[:int(len(data) * keep)])


@pytest.mark.parametrize('weights', ['model.safetensors', 'pytorch_model.bin'])
def test_weights_cut_short_are_refused_before_anything_is_written(
    tmp_path, sst2_dir, weights):
  folder = tmp_path / 'model'
  model = source_checks_test.make(folder)
  if weights == 'pytorch_model.bin':
    (folder / 'model.safetensors').unlink()
    torch.save(model.state_dict(), folder / weights)
  cut(folder / weights)
  with pytest.raises(ValueError, match=f'{folder / weights} {CUT}'):
    hf_checkpoint.read(folder)  # The export's, extract_features' and embed's reader.
  with pytest.raises(ValueError, match=f'{folder / weights} {CUT}'):
    fine_tune_from(folder, sst2_dir, tmp_path / 'run')
  assert_nothing_written(tmp_path / 'run')


def test_a_folder_without_pytorch_weights_is_refused_at_the_start(tmp_path, sst2_dir):
  folder = tmp_path / 'model'
  source_checks_test.make(folder)
  (folder / 'model.safetensors').rename(folder / 'flax_model.msgpack')  # As a Flax-only upload.
  with pytest.raises(FileNotFoundError, match='has neither model.safetensors nor '
                     'pytorch_model.bin'):
    fine_tune_from(folder, sst2_dir, tmp_path / 'run')
  assert_nothing_written(tmp_path / 'run')


def test_a_cut_config_json_is_named(tmp_path, sst2_dir):
  folder = tmp_path / 'model'
  source_checks_test.make(folder)
  cut(folder / 'config.json', 0.6)
  with pytest.raises(ValueError, match=f'{folder / "config.json"} is not a transformers config '
                     r'\(JSON\) file: '):
    init_from.model_config(str(folder))
  with pytest.raises(ValueError, match=f'{folder / "config.json"} is not a transformers config'):
    fine_tune_from(folder, sst2_dir, tmp_path / 'run')


def test_a_config_bertjax_cannot_hold_names_its_file(tmp_path):
  folder = tmp_path / 'model'
  source_checks_test.make(folder)
  source_checks_test.edit_json(folder / 'config.json', position_embedding_type='relative_key')
  with pytest.raises(ValueError, match=str(folder / 'config.json')):
    init_from.model_config(str(folder))


def test_a_head_its_config_does_not_describe_is_said_of_the_folder(tmp_path):
  """A transformers classifier whose config.json's id2label names 3 classes over a 2-output
  head: its config and weights disagree (it was said as "the run recorded")."""
  folder = tmp_path / 'model'
  source_checks_test.make(folder, 'BertForSequenceClassification', num_labels=2)
  source_checks_test.edit_json(folder / 'config.json',
                               id2label={'0': 'a', '1': 'b', '2': 'c'},
                               label2id={'a': 0, 'b': 1, 'c': 2})
  with pytest.raises(ValueError, match=r"head has 2 outputs but its config describes 3 \(\['a', "
                     r"'b', 'c'\]\): the weights and their config do not match; restore"):
    sources.load(str(folder))


def test_a_bin_saved_by_torch_before_1_6_is_read(tmp_path):
  """The original BERT ports' pytorch_model.bin is a plain pickle, not a zip: torch.load reads
  it, and so must the check before any work."""
  folder = tmp_path / 'model'
  model = source_checks_test.make(folder)
  (folder / 'model.safetensors').unlink()
  torch.save(model.state_dict(), folder / 'pytorch_model.bin', _use_new_zipfile_serialization=False)
  init_from.model_config(str(folder))
  assert hf_checkpoint.read(folder).params


def test_a_shard_cut_short_is_refused_at_the_start(tmp_path):
  folder = tmp_path / 'model'
  model = source_checks_test.make(folder)
  (folder / 'model.safetensors').unlink()
  model.save_pretrained(str(folder), max_shard_size='20KB')
  shards = sorted(folder.glob('model-*.safetensors'))
  assert len(shards) > 1
  cut(shards[-1])
  with pytest.raises(ValueError, match=f'{shards[-1]} {CUT}'):
    init_from.model_config(str(folder))
