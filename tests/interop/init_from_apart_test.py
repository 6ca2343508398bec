"""A training run's workdir apart from the model init_from names (hostile pass of 2026-12-01):
a fine-tuning workdir inside its pre-training run, or a bucket's root around it, trained without a
word, and every tool then refused to write anywhere in the bucket (its root read as a run)."""

import json

import ml_collections
import pytest

from bertjax import pretrain
from bertjax.interop import init_from
from configs import pretrain as pretrain_config


def _run(folder):
  """A bertjax run's folder as tools tell one: its config.json (naming its job) and checkpoints/."""
  (folder / 'checkpoints' / '3').mkdir(parents=True)
  (folder / 'config.json').write_text(json.dumps({'job': 'pretrain'}))
  return folder


def _config(path):
  return ml_collections.ConfigDict({'init_from': str(path)})


def test_a_workdir_inside_or_around_the_model_it_starts_from_is_refused(tmp_path):
  pre = _run(tmp_path / 'runs' / 'pre')
  with pytest.raises(ValueError, match=rf'^--workdir={pre}/fine is inside {pre}, the model '
                     r'--config.init_from starts from: .* pass a --workdir outside'):
    init_from.check_apart(_config(pre), str(pre / 'fine'))
  # A step of the run: the run is the model.
  with pytest.raises(ValueError, match='is inside'):
    init_from.check_apart(_config(pre / 'checkpoints' / '3'), str(pre / 'fine'))
  with pytest.raises(ValueError, match=rf'^--workdir={tmp_path} holds {pre}, the model '
                     r'--config.init_from starts from: .* a --workdir of its own'):
    init_from.check_apart(_config(pre), str(tmp_path))
  # Beside it, named alike, or no init_from: as before.
  for workdir in (tmp_path / 'runs' / 'fine', tmp_path / 'runs' / 'pre2'):
    init_from.check_apart(_config(pre), str(workdir))
  init_from.check_apart(_config(''), str(tmp_path))


def test_pretraining_around_its_init_from_writes_nothing(tmp_path):
  pre = _run(tmp_path / 'pre')
  config = pretrain_config.get_config(f'size=tiny,steps=2,init_from={pre}')
  with pytest.raises(ValueError, match=f'--workdir={tmp_path} holds {pre}'):
    pretrain.train_and_evaluate(config, str(tmp_path))
  assert sorted(p.name for p in tmp_path.iterdir()) == ['pre']
