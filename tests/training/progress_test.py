"""The progress line's rates count training time only: the seconds a step's call spent
compiling a new batch shape (the first step; a two-phase run's second length; fine-tuning's
batches cut to a length not seen yet) are left out of the steps/s, MFU and ETA."""

import numpy as np
import pytest

from bertjax.training import optimizer as optimizer_lib
from bertjax.training import progress
from configs import pretrain


class Clock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


class Writer:
  def __init__(self):
    self.scalars = {}

  def write_scalars(self, step, scalars):
    self.scalars[step] = scalars


class Job:
  remaining_flops = None

  @staticmethod
  def describe(step, means):
    del step, means
    return ''


def metrics(nonfinite=0.0):
  one = np.float32(1)
  return {'loss': (np.float32(2.0), one), 'grad_norm': (np.float32(1.0), one),
          'learning_rate': (np.float32(1e-4), one), 'nonfinite': (np.float32(nonfinite), one)}


@pytest.mark.parametrize('compile_seconds', [0.0, 30.0])
def test_compile_time_is_left_out_of_the_rates(monkeypatch, compile_seconds):
  clock = Clock()
  monkeypatch.setattr(progress.time, 'perf_counter', clock)
  config = pretrain.get_config('size=tiny,steps=100,batch=8,seq=32')
  config.log_every_steps = 4
  writer = Writer()
  line = progress.Progress(config, Job(), writer, start_step=0, saved_step=None)
  for step in range(1, 5):
    # Step 1's call compiles (compile_seconds), then every step trains 0.5 s.
    clock.now += 0.5 + (compile_seconds if step == 1 else 0.0)
    line.step_done(step, metrics(), (8 * 32, 1e9), read_now=step == 4,
                   not_training=compile_seconds if step == 1 else 0.0)
  scalars = writer.scalars[4]
  assert scalars['train/sequences_per_sec'] == pytest.approx(8 / 0.5)
  assert scalars['train/tokens_per_sec'] == pytest.approx(8 * 32 / 0.5)
  # The next window starts where this one was read: no compile seconds carried over.
  for step in range(5, 9):
    clock.now += 0.25
    line.step_done(step, metrics(), (8 * 32, 1e9), read_now=step == 8)
  assert writer.scalars[8]['train/sequences_per_sec'] == pytest.approx(8 / 0.25)


@pytest.mark.parametrize('saved_step, said', [
    (None, 'no checkpoint was saved, so a rerun starts over: lower the learning rate or raise '
     'the warmup.'),
    (8, 'the newest checkpoint is step 8: lower the learning rate, or resume from it with more '
     'warmup.')])
def test_a_nan_names_the_newest_checkpoint_not_the_last_checked_step(saved_step, said):
  """Pass AA: 'nothing after step 0 was saved' where no checkpoint existed (the last checked
  step was said, not the last saved one)."""
  config = pretrain.get_config('size=tiny,steps=100,batch=8,seq=32')
  line = progress.Progress(config, Job(), Writer(), start_step=8, saved_step=saved_step)
  line.checked_step = 12
  with pytest.raises(FloatingPointError) as raised:
    line.step_done(13, metrics(nonfinite=1.0), (8 * 32, 1e9), read_now=True)
  assert str(raised.value) == ('loss, gradients or weights became NaN/Inf between steps 13 and '
                               f'13 (grad_norm 1.0); {said}')


def test_the_eta_weights_the_steps_left_by_their_flops(monkeypatch, caplog):
  """Pass AA: a two-phase run's ETA in phase 1 counted phase 2's 4x heavier steps at phase 1's
  rate."""
  clock = Clock()
  monkeypatch.setattr(progress.time, 'perf_counter', clock)
  config = pretrain.get_config('size=tiny,steps=100,batch=8,seq=32')

  class TwoPhases(Job):
    # Steps 0..49 cost 1 GFLOP, 50..99 cost 4.
    remaining_flops = staticmethod(lambda step: (max(50 - step, 0) + 4 * min(100 - step, 50)) * 1e9)

  line = progress.Progress(config, TwoPhases(), Writer(), start_step=0, saved_step=None)
  clock.now += 10.0  # 10 steps of 1 GFLOP at 1 step/s.
  with caplog.at_level('INFO', logger='absl'):
    line.step_done(10, metrics(), (8 * 32, 1e9), read_now=True)
  # 40 steps at 1 s, then 50 steps of 4 s: 240 s, not the 90 s of 90 steps at 1 step/s.
  assert caplog.records[-1].getMessage().endswith('ETA 0:04:00'), caplog.records[-1].getMessage()


def test_the_logged_learning_rate_is_the_logged_steps_not_the_windows_mean(caplog):
  """Pass AC3: the learning rate went through the window's mean like the loss, so the warmup's
  peak and the decay's end were smoothed and shifted by half a window (a schedule ending at 0
  was logged at 9.44e-05 on its last step). The loss stays the window's mean."""
  config = pretrain.get_config('size=tiny,steps=100,batch=8,seq=32')
  config.log_every_steps = 10
  schedule = optimizer_lib.learning_rate_schedule(config.optimizer)
  writer = Writer()

  class Rate(Job):
    @staticmethod
    def describe(step, means):
      return f', lr {means["learning_rate"]:.2e}'

  line = progress.Progress(config, Rate(), writer, start_step=0, saved_step=None)
  one = np.float32(1)
  with caplog.at_level('INFO', logger='absl'):
    for step in range(1, 101):  # train_step's metrics: its update's rate, schedule(step - 1).
      line.step_done(step, {'loss': (np.float32(step), one), 'grad_norm': (one, one),
                            'learning_rate': (np.float32(schedule(step - 1)), one),
                            'nonfinite': (np.float32(0), one)},
                     (8 * 32, 1e9), read_now=step == 100)
  assert sorted(writer.scalars) == list(range(10, 101, 10))
  for step, scalars in writer.scalars.items():
    assert scalars['train/learning_rate'] == pytest.approx(float(schedule(step - 1)), rel=1e-6)
    assert scalars['train/loss'] == pytest.approx(step - 4.5)  # The mean of steps step-9..step.
  assert f'step 100/100, lr {float(schedule(99)):.2e} |' in caplog.records[-1].getMessage()


def test_the_eta_counts_the_evals_and_saves_to_come(monkeypatch, caplog):
  """Console pass of 2026-12-02: 'ETA 0:00:01' with three 30 s evals still to come; the ETA
  counted the training steps alone."""
  clock = Clock()
  monkeypatch.setattr(progress.time, 'perf_counter', clock)
  config = pretrain.get_config('size=tiny,steps=100,batch=8,seq=32')
  line = progress.Progress(config, Job(), Writer(), start_step=0, saved_step=None)
  clock.now += 10.0  # 10 steps at 1 step/s, then an eval and a save of 30 s.
  with caplog.at_level('INFO', logger='absl'):
    line.step_done(10, metrics(), (8 * 32, 1e9), read_now=True)
  assert caplog.records[-1].getMessage().endswith('ETA 0:01:30')  # None taken yet.
  clock.now += 30.0
  line.restart_timer(10, paused=30.0)
  clock.now += 10.0
  with caplog.at_level('INFO', logger='absl'):
    line.step_done(20, metrics(), (8 * 32, 1e9), read_now=True)
  # 80 steps at 1 s, and 30 s of evals and saves per 10 steps, step 20's next: 80 + 9 x 30 s
  # (review of 2026-12-02: over the steps since the start, the pause about to come halved it).
  assert caplog.records[-1].getMessage().endswith('ETA 0:05:50'), caplog.records[-1].getMessage()
