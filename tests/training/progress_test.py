"""The progress line's rates count training time only: the seconds a step's call spent
compiling a new batch shape (the first step; a two-phase run's second length; fine-tuning's
batches cut to a length not seen yet) are left out of the steps/s, MFU and ETA."""

import numpy as np
import pytest

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
  @staticmethod
  def describe(step, means):
    del step, means
    return ''


def metrics():
  one = np.float32(1)
  return {'loss': (np.float32(2.0), one), 'grad_norm': (np.float32(1.0), one),
          'learning_rate': (np.float32(1e-4), one), 'nonfinite': (np.float32(0), one)}


@pytest.mark.parametrize('compile_seconds', [0.0, 30.0])
def test_compile_time_is_left_out_of_the_rates(monkeypatch, compile_seconds):
  clock = Clock()
  monkeypatch.setattr(progress.time, 'perf_counter', clock)
  config = pretrain.get_config('size=tiny,steps=100,batch=8,seq=32')
  config.log_every_steps = 4
  writer = Writer()
  line = progress.Progress(config, Job(), writer, start_step=0)
  for step in range(1, 5):
    # Step 1's call compiles (compile_seconds), then every step trains 0.5 s.
    clock.now += 0.5 + (compile_seconds if step == 1 else 0.0)
    line.step_done(step, metrics(), (8 * 32, 1e9), read_now=step == 4,
                   compile_seconds=compile_seconds if step == 1 else 0.0)
  scalars = writer.scalars[4]
  assert scalars['train/sequences_per_sec'] == pytest.approx(8 / 0.5)
  assert scalars['train/tokens_per_sec'] == pytest.approx(8 * 32 / 0.5)
  # The next window starts where this one was read: no compile seconds carried over.
  for step in range(5, 9):
    clock.now += 0.25
    line.step_done(step, metrics(), (8 * 32, 1e9), read_now=step == 8)
  assert writer.scalars[8]['train/sequences_per_sec'] == pytest.approx(8 / 0.25)
