"""Early stopping: config.early_stopping_patience evals without an improvement of
checkpoint.best_metric stop a fine-tuning run, whose summary line says so and names the best
step, whose predictions are the run's; a resumed run counts on from what it recorded.

At learning rate 0 every eval gives the same accuracy: the first eval is the best and every
later one is an eval without improvement, so the step a run stops at is known exactly.
"""

import pathlib

import finetune_runs
import numpy as np
import pytest

from bertjax import config_check
from bertjax import export
from bertjax import metric_direction
from bertjax import predict
from bertjax.finetune import job as finetune
from bertjax.interop import sources
from bertjax.training import checkpoint_reader


@pytest.fixture(scope='module')
def sst2_dir(tmp_path_factory):
  return finetune_runs.write_sst2(tmp_path_factory.mktemp('sst2'))


def flat_config(sst2_dir, steps: int, **fields):
  return finetune_runs.tiny_config(sst2_dir, **{
      'num_train_steps': steps, 'eval_every_steps': 1, 'optimizer.learning_rate': 0.0,
      'checkpoint.every_steps': 1000, 'checkpoint.keep': 1, 'early_stopping_patience': 2,
      **fields})


def summary_line(capsys) -> str:
  return capsys.readouterr().out.strip().splitlines()[-1]


def kept_steps(workdir) -> set[int]:
  return set(checkpoint_reader.steps(pathlib.Path(workdir) / 'checkpoints'))


@pytest.fixture(scope='module')
def stopped_run(sst2_dir, tmp_path_factory):
  workdir = tmp_path_factory.mktemp('early') / 'run'
  finetune.train_and_evaluate(flat_config(sst2_dir, 10), str(workdir))
  return workdir


def test_stops_names_the_best_step_and_hands_it_on(stopped_run, sst2_dir, capsys):
  # Evals at steps 1, 2, 3: no improvement at 2 and 3, so it stops at 3 of 10.
  assert kept_steps(stopped_run) == {1, 3}  # The newest (keep=1) and the best, kept for it.
  capsys.readouterr()
  finetune.train_and_evaluate(flat_config(sst2_dir, 10), str(stopped_run))  # Nothing to do.
  line = summary_line(capsys)
  assert line.startswith('finetune stopped (early: accuracy did not improve for 2 evaluations '
                         'after step 1, its best ('), line
  assert 'step 3/10' in line and ', best step 1 (accuracy ' in line, line
  assert f'predictions {stopped_run}/predictions/step_1' in line, line
  assert checkpoint_reader.resolve_step(stopped_run, 'best') == 1
  assert predict.Predictor.from_workdir(stopped_run, step='best').step == 1
  assert predict.Predictor.from_workdir(stopped_run, step='latest').step == 3
  # mode=eval reads the step asked for.
  config = flat_config(sst2_dir, 10, mode='eval')
  finetune.run(config, str(stopped_run), step='best')
  line = summary_line(capsys)
  assert 'step 1, ' in line and f'{stopped_run}/predictions/eval_step_1' in line, line
  with pytest.raises(FileNotFoundError, match=r'no checkpoint step 2; its steps: 1, 3'):
    finetune.run(config, str(stopped_run), step=2)
  with pytest.raises(ValueError, match='--step=best picks the checkpoint that --config.mode=eval'):
    finetune.run(flat_config(sst2_dir, 10), str(stopped_run), step='best')


def test_the_export_of_a_run_stopped_early_is_its_best_step(sst2_dir, tmp_path, monkeypatch):
  # A learning rate that moves the weights, ranked so that a falling eval loss is no
  # improvement ('max'): the run stops at its first falling eval, and the best step's weights
  # differ from the last step's. What export writes with --step=best is the best step's.
  # (A run refuses 'max' for a loss: here the loss's direction is unknown to it.)
  monkeypatch.setattr(metric_direction, 'LOSS_LIKE', ())
  workdir = tmp_path / 'run'
  finetune.train_and_evaluate(flat_config(sst2_dir, 12, **{
      'optimizer.learning_rate': 1e-3, 'optimizer.warmup_steps': 0,
      'checkpoint.best_metric': 'loss', 'checkpoint.best_mode': 'max',
      'early_stopping_patience': 1}), str(workdir))
  best, last = checkpoint_reader.resolve_step(workdir, 'best'), max(kept_steps(workdir))
  assert best < last < 12, (best, last)
  exported = sources.load(str(export.export(str(workdir), 'hf', tmp_path / 'hf', step='best')))
  at_best = sources.load(str(workdir), step=best)
  at_last = sources.load(str(workdir), step=last)
  assert exported.params.keys() == at_best.params.keys()
  for key, value in at_best.params.items():
    np.testing.assert_allclose(exported.params[key], value, atol=1e-6, err_msg=key)
  assert any(not np.allclose(at_last.params[k], v) for k, v in at_best.params.items())


def test_the_live_run_summary(sst2_dir, tmp_path, capsys):
  workdir = tmp_path / 'live'
  finetune.train_and_evaluate(flat_config(sst2_dir, 10, early_stopping_patience=1), str(workdir))
  line = summary_line(capsys)
  assert line.startswith('finetune stopped (early: accuracy did not improve for 1 evaluation '
                         'after step 1'), line
  assert 'step 2/10' in line and 'best step 1 (accuracy' in line, line
  assert f'predictions {workdir}/predictions/step_1' in line, line


def test_a_resumed_run_counts_on_from_what_it_recorded(sst2_dir, tmp_path, capsys):
  workdir = str(tmp_path / 'resumed')
  # Evals at 1 and 2: one without improvement when the run ends at its last step.
  finetune.train_and_evaluate(flat_config(sst2_dir, 2), workdir)
  assert summary_line(capsys).startswith('finetune finished')
  # Resumed for 10 steps: the eval at 3 is the second without improvement, so it stops there
  # (a count started afresh at the resume would stop at 4).
  finetune.train_and_evaluate(flat_config(sst2_dir, 10), workdir)
  line = summary_line(capsys)
  assert 'did not improve for 2 evaluations after step 1' in line and 'step 3/10' in line, line
  assert max(kept_steps(workdir)) == 3


def test_patience_a_user_gets_wrong(sst2_dir):
  with pytest.raises(ValueError, match=r'config.early_stopping_patience=-1: must be >= 0; set '):
    config_check.check(flat_config(sst2_dir, 10, early_stopping_patience=-1))
