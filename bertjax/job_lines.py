"""The lines a job shows as it goes and as it ends: a long job's one progress line (its count,
rate and ETA, at most every PROGRESS_SECONDS) and every job's summary line, its last."""

import sys
import time

from absl import logging

import bertjax
from bertjax import console
from bertjax import log_file


def duration(seconds: float) -> str:
  """'3.2 s', '4m05s', '2h03m': a wall time as a person reads it."""
  if seconds < 60:
    return f'{seconds:.1f} s'
  minutes, secs = divmod(int(round(seconds)), 60)
  if minutes < 60:
    return f'{minutes}m{secs:02d}s'
  hours, minutes = divmod(minutes, 60)
  return f'{hours}h{minutes:02d}m'


def eta(seconds: float) -> str:
  """'0:11:46' (h:mm:ss): the time left on a progress line."""
  seconds = int(seconds)
  return f'{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'


def summary_line(job: str, seconds: float, *, stopped: str = '', metrics=(),
                 outputs=()) -> str:
  """The last line of every job: how it ended, its wall time, its final metrics (name, value
  pairs) and where its outputs are (what, where pairs):

    finetune finished in 2m14s: eval accuracy 0.9120, loss 0.2810; results RUN/eval_results.json,
      checkpoints RUN/checkpoints (step 600)

  all on one line; `stopped` (why) instead of 'finished' for a job that ended early by design
  (early stopping, a step limit reached by time)."""
  ended = f'stopped ({stopped})' if stopped else 'finished'
  line = f'{job} {ended} in {duration(seconds)}'
  shown = [f'{name} {value:.4g}' if isinstance(value, float) else f'{name} {value}'
           for name, value in metrics]
  if shown:
    line += ': ' + ', '.join(shown)
  if outputs:
    line += '; ' + ', '.join(f'{what} {where}' for what, where in outputs)
  return line


# The most seconds between two of a long job's progress lines; tests set 0 (a line per update).
PROGRESS_SECONDS = 30.0


class Progress:
  """A long job's progress line, so that hours of work are not hours of silence:

    extract_features: 4,096/100,000 inputs (4.1%), 136 inputs/s, ETA 0:11:46

  logged (absl INFO) at most every PROGRESS_SECONDS, the first only once that much time has
  passed: a short job stays as quiet as before. With `total` None (not known) the count and the
  rate alone; `rate_unit`: the rate's unit where `unit` is more than one word."""

  def __init__(self, job: str, total=None, unit: str = 'items', rate_unit: str = '',
               clock=time.monotonic):
    self.job, self.total, self.unit = job, total, unit
    self.rate_unit = rate_unit or unit
    self._clock = clock
    self._start = self._last = clock()

  def update(self, done, extra: str = ''):
    """`done` so far (of `total`); logs the line if the interval has passed since the last."""
    now = self._clock()
    if now - self._last >= PROGRESS_SECONDS:
      self._last = now
      logging.info('%s', self.line(done, now, extra))

  def line(self, done, now: float, extra: str = '') -> str:
    """The line at `now` (the clock's): the rate is the mean since the start, steadier than the
    last interval's, and the ETA the rest at that rate ('?' before anything is done)."""
    rate = done / max(now - self._start, 1e-9)
    shown = f'{self.job}: {_amount(done)}'
    if not self.total:
      return f'{shown} {self.unit}, {_amount(rate)} {self.rate_unit}/s{extra}'
    left = eta(max(self.total - done, 0) / rate) if rate > 0 else '?'
    return (f'{shown}/{_amount(self.total)} {self.unit} ({min(done / self.total, 1):.1%}), '
            f'{_amount(rate)} {self.rate_unit}/s, ETA {left}{extra}')


def _amount(x) -> str:
  """12,345 / 8.5 / 0.906: whole numbers with commas, small fractions to 3 figures."""
  return f'{x:,.0f}' if abs(x) >= 100 or x == int(x) else f'{x:.3g}'


def summary(job: str, seconds: float, file=None, **kwargs):
  """Prints summary_line(...) as the console's last line (stdout, flushed after stderr so a
  terminal shows it after every log line; `file=sys.stderr` where stdout carries outputs). A
  command's wall time is its process's, imports and JAX's start-up included (as `time` gives
  it); a job called from Python (a notebook) gives its own."""
  if console.COMMAND.is_set():
    seconds = time.perf_counter() - bertjax.STARTED
  sys.stdout.flush()
  sys.stderr.flush()
  log_file.say(summary_line(job, seconds, **kwargs), file or sys.stdout)
