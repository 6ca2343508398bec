"""Epochs as google-research/bert counts them: int(examples / batch x epochs) steps, the epoch
shown as examples seen / examples, an eval after the step that completes each epoch's examples.
"""

import json

import finetune_runs
import log_records
import pytest

from bertjax.finetune import batches
from bertjax.finetune import job as finetune
from bertjax.finetune import job_setup
from configs import finetune as finetune_config

ONE_DEVICE = pytest.mark.usefixtures('one_device')


def _config(batch, num_epochs, num_train_steps=0):
  config = finetune_config.get_config('task=sst2')
  config.num_train_steps, config.global_batch_size, config.num_epochs = (
      num_train_steps, batch, num_epochs)
  return config


@pytest.mark.parametrize('n, batch, num_epochs, steps', [
    (38, 8, 4.0, 19),  # The README's reviews: 16 steps when each epoch was floored (4 x 4).
    (63, 32, 3.0, 5),  # 2 x batch - 1: 3 steps when each epoch was floored, half the data.
    (12_400, 32, 1.0, 387),
    (12_400, 32, 3.0, 1162),  # 1162.5: floored once, not 3 x 387.
    (38, 8, 10.0, 47),
    (30, 3, 0.1, 1),  # Exactly 1 (a float's 30 x 0.1 / 3 is just under).
])
def test_steps_are_the_epochs_examples_over_the_batch_floored_once(n, batch, num_epochs, steps):
  assert job_setup.num_steps(_config(batch, num_epochs), n) == steps


def test_num_train_steps_given_wins_over_the_epochs():
  assert job_setup.num_steps(_config(8, 4.0, num_train_steps=7), 38) == 7


@pytest.mark.parametrize('n, batch, total, evals', [
    (38, 8, 19, [5, 10, 15, 19]),  # Epoch k's examples complete at step ceil(38k / 8).
    (63, 32, 5, [2, 4]),  # The third epoch completes at step 6, past the run's 5 steps.
    (64, 16, 8, [4, 8]),
    (10, 32, 3, [1, 2, 3]),  # A batch larger than the data ends an epoch every step.
])
def test_the_per_epoch_evals_follow_the_step_that_completes_each_epoch(n, batch, total, evals):
  epochs = job_setup.Epochs(n, batch)
  assert [s for s in range(1, total + 1) if epochs.ends_at(s)] == evals


def test_the_epoch_shown_is_the_examples_seen():
  counted = job_setup.Epochs(38, 8)
  assert counted.at(4) == pytest.approx(32 / 38)  # Not epoch 1.00: 6 examples are still unseen.
  assert counted.at(19) == 4.0
  assert counted.start_words(19) == '19 steps (4 epochs of 38 train features at batch 8)'
  one = job_setup.Epochs(8, 8)  # Said '(1 epochs ...)'.
  assert one.start_words(1) == '1 step (1 epoch of 8 train features at batch 8)'
  resumed = job_setup.Epochs(64, 8, offset=48 - 3 * 8)  # 3 steps at batch 16, then batch 8.
  assert resumed.seen(3) == 48 and resumed.at(5) == 1.0 and resumed.ends_at(5)


@ONE_DEVICE
def test_a_run_evaluates_where_its_epochs_end(tmp_path, monkeypatch):
  data = finetune_runs.write_sst2(tmp_path / 'sst2')  # 64 training examples.
  config = finetune_runs.tiny_config(data, global_batch_size=24)  # 2 epochs: 128 / 24 = 5.33.
  said = log_records.recorded_warnings(monkeypatch, finetune, 'info')
  finetune.train_and_evaluate(config, str(tmp_path / 'run'))
  assert any('5 steps (1.88 epochs of 64 train features at batch 24)' in line
             for line in said), said
  # The first epoch's 64 examples complete at step 3 (72 seen); the second's at step 6, past
  # the run's end: its last eval is step 5's.
  assert list(json.loads((tmp_path / 'run' / 'eval_history.json').read_text())) == ['3', '5']
  assert finetune_runs.final_params(tmp_path / 'run')[1] == 5


@ONE_DEVICE
def test_a_run_begun_when_each_epoch_was_floored_keeps_its_steps(tmp_path, monkeypatch):
  # Such a run recorded floor(64 / 24) x 2 = 4 steps in its config.json; resumed, it goes on to
  # its own 4 (and says why), not to the 5 a new run takes, nor is it refused.
  data = finetune_runs.write_sst2(tmp_path / 'sst2')
  workdir = str(tmp_path / 'run')
  example_indices = finetune_runs.crash_at_step(monkeypatch, 3)
  with pytest.raises(KeyboardInterrupt):  # Saved step 3 (checkpoint.every_steps=3).
    finetune.train_and_evaluate(finetune_runs.tiny_config(data, global_batch_size=24,
                                                          num_train_steps=4), workdir)
  monkeypatch.setattr(batches, 'example_indices', example_indices)
  warned = log_records.recorded_warnings(monkeypatch, job_setup)
  finetune.train_and_evaluate(finetune_runs.tiny_config(data, global_batch_size=24), workdir)
  assert finetune_runs.final_params(workdir)[1] == 4
  assert warned == [f'{workdir} recorded 4 steps, the old count of whole batches per epoch: it '
                    'keeps them (num_epochs=2 of 64 examples at batch 24 make 5 steps now, '
                    'google-research/bert\'s count); --config.num_train_steps=5 trains on to '
                    'step 5'], warned


def test_epochs_past_a_32_bit_step_count_are_refused_naming_them():
  """Hostile pass of 2026-12-01: epochs=1e9 made 4.75e9 steps, an overflow in the first jitted
  step (a traceback, after the data and the model were made)."""
  with pytest.raises(ValueError, match=r'^config.num_epochs=1e\+09 makes 4750000000 steps of 8 '
                     r'over 38 train features, past what a 32-bit step count holds; set '
                     r'--config.num_epochs lower.$'):
    job_setup.num_steps(_config(8, 1e9), 38)
