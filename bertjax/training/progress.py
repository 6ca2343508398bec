"""What a run tells its user: the progress line and train/ scalars while it trains (rates,
ETA, MFU over padded and real tokens, the NaN check), a profiler trace of the steps asked for,
and its summary line when it ends.
"""

import dataclasses
import math
import shutil
import tempfile
import time

from absl import logging
import jax

from bertjax import console
from bertjax import files
from bertjax import job_lines
from bertjax.training import losses
from bertjax.training import perf


@dataclasses.dataclass(frozen=True)
class Outcome:
  """How a run ended: what `summary` reports."""

  eval_metrics: dict  # The last eval's; {} when none ran (a finished run's eval_results.json).
  step: int  # The step it ended at, its last checkpoint.
  total_steps: int
  train_loss: float | None  # Mean loss of the steps logged last; None: this call trained none.
  eval_step: int | None  # The step of eval_metrics (None: no eval).
  stopped: str = ''  # Why it ended before total_steps by design (preemption); '' = it did not.
  # The step its evals ranked best and its value of best_metric (None: no best kept, no eval).
  best_step: int | None = None
  best: tuple = ()  # (metric, value) of best_step.
  best_note: str = ''  # Said after the value (', of phase 1: phase 2 has no eval').
  early_stopped: bool = False  # Stopped by early stopping (best_step is what it hands on).


def summary(job: str, seconds: float, outcome: Outcome, workdir: str, *, main_metric: str,
            outputs=(), metrics=()):
  """Prints the run's last console line (process 0 only): how it ended, its step and train
  loss, the last eval's metrics (`main_metric` first, the loss last; its step where that is an
  earlier one), `metrics`, `outputs` (what, where), its checkpoints and TensorBoard folder. The
  job calls it once its saves are done and its workdir released."""
  console.preempted(outcome.stopped)  # Every host: each exits with PREEMPTED_EXIT.
  if jax.process_index() > 0:
    return
  # A step past the total is said by the stop itself (loop._nothing_to_do).
  done = ('' if outcome.train_loss is not None or outcome.step != outcome.total_steps
          else ' (reached before: nothing to do)')
  shown = [('step', f'{outcome.step}/{outcome.total_steps}{done}')]
  if outcome.train_loss is not None:
    shown.append(('train loss', outcome.train_loss))
  results = outcome.eval_metrics
  names = sorted(results, key=lambda k: (k != main_metric, k == 'loss', k))
  # An earlier step's eval (a phase without eval files, a stop between evals) says its step.
  at = '' if outcome.eval_step in (None, outcome.step) else f'at step {outcome.eval_step}: '
  shown += [(f'eval {at}' * (i == 0) + name, results[name]) for i, name in enumerate(names)]
  if outcome.best_step is not None:
    shown.append(('best step', f'{outcome.best_step} ({outcome.best[0]} {outcome.best[1]:.4g}'
                                 f'{outcome.best_note})'))
  outputs = [*outputs,
             ('checkpoints', f'{files.join(workdir, "checkpoints")} (step {outcome.step})'),
             ('TensorBoard', workdir)]
  job_lines.summary(job, seconds, stopped=outcome.stopped, metrics=[*shown, *metrics],
                  outputs=outputs)


def batch_words(batch, global_batch_size: int) -> str:
  """'16 sequences of 128 tokens', or where the step computes other rows (packed, choices):
  '16 sequences in 8 rows of 128 tokens'."""
  *rows, length = batch['input_ids'].shape
  rows = math.prod(rows)
  return (f'{global_batch_size} sequences of {length} tokens' if rows == global_batch_size else
          f'{global_batch_size} sequences in {rows} rows of {length} tokens')


class Progress:
  """The progress line and the train/ scalars: rates count training time only."""

  def __init__(self, config, job, writer, start_step: int, saved_step: int | None):
    # job: the loop's Job (its describe and remaining_flops); saved_step: the newest checkpoint
    # (None: none yet), kept by the loop as it saves.
    self._config, self._job, self._writer = config, job, writer
    self._peak = perf.peak_flops_per_device(config.peak_tflops)
    if self._peak is None:
      logging.info('no MFU: the peak FLOP/s of a %r device is not known; set '
                   '--config.peak_tflops=<TFLOP/s per device> to see it',
                   jax.devices()[0].device_kind)
    self._timer = (time.perf_counter(), start_step)
    self._not_training = 0.0  # Seconds since the timer started that were no training.
    # Seconds in evals and saves since start_step, and the step of the last: the ETA's.
    self._paused = (0.0, start_step, start_step)
    self.checked_step = start_step  # Last step whose loss and grads were checked finite.
    self.saved_step = saved_step
    self.last_loss = None  # The mean train loss of the steps logged last.
    self._pending = []  # (device metrics, perf.step_cost) of the steps not yet read.
    self._deferred = None  # (step, pending) of a log step, read once the next is dispatched.

  def step_done(self, step: int, metrics: dict, cost: tuple[float, float], *, read_now: bool,
                not_training: float = 0.0):
    """Takes the metrics of `step`, just dispatched, and its (padded tokens, FLOPs);
    `not_training` seconds since the last step (a compile, an input pipeline's start, a trace)
    are left out of the rates. A log step's are read after the next step is dispatched, so the
    host never waits for the device there; `read_now` reads them at once (before an eval or a
    save: a NaN state must never be saved)."""
    self._not_training += not_training
    self._pending.append((metrics, cost))
    if self._deferred is not None:
      self.log(*self._deferred)
      self._deferred = None
    if read_now:
      self.log(step, self._pending)
      self._pending = []
    elif step % self._config.log_every_steps == 0:
      self._deferred, self._pending = (step, self._pending), []

  def restart_timer(self, step: int, paused: float = 0.0):
    """The rates' timer starts again after `step`'s eval and save, which took `paused` seconds:
    the ETA counts them as the steps to come will (per step since the start)."""
    self._timer, self._not_training = (time.perf_counter(), step), 0.0
    if paused:
      self._paused = (self._paused[0] + paused, self._paused[1], step)

  def nonfinite(self, what: str) -> FloatingPointError:
    """The error that stops a run whose numbers became NaN/Inf (`what`), saying where it
    resumes: the step that showed it is never saved."""
    saved = ('no checkpoint was saved, so a rerun starts over: lower the learning rate or '
             'raise the warmup' if self.saved_step is None else
             f'the newest checkpoint is step {self.saved_step}: lower the learning rate, or '
             'resume from it with more warmup')
    return FloatingPointError(f'{what}; {saved}.')

  def log(self, step: int, pending: list):
    """Reads the device metrics of the steps up to `step`, checks them, logs and writes them:
    the means over the steps since the last log, but the learning rate of `step` itself (its
    update's), so the schedule's peak and end show as they are. The figures per token and the
    MFU average the steps' own costs: a window may hold steps of several lengths."""
    host = jax.device_get([metrics for metrics, _ in pending])  # One read of the window.
    means = losses.host_means(host)
    if 'learning_rate' in means:  # (sum, weight) of the last step alone.
      means['learning_rate'] = losses.mean_of(*host[-1]['learning_rate'])
    if means['nonfinite']:
      raise self.nonfinite(f'loss, gradients or weights became NaN/Inf between steps '
                           f'{self.checked_step + 1} and {step} (grad_norm {means["grad_norm"]})')
    self.checked_step = step
    self.last_loss = float(means['loss'])
    cfg = self._config
    now = time.perf_counter()
    training = max(now - self._timer[0] - self._not_training, 1e-9)
    steps_per_sec = (step - self._timer[1]) / training
    self._timer, self._not_training = (now, step), 0.0
    padded = sum(cost[0] for _, cost in pending) / len(pending)  # Tokens per step.
    flops = sum(cost[1] for _, cost in pending) / len(pending)  # FLOPs per step.
    real = means.pop('real_tokens', None)  # Per step (perf.real_tokens); None: no input_mask.
    scalars = {f'train/{k}': v for k, v in means.items() if k != 'nonfinite'}
    seq_per_sec = steps_per_sec * cfg.global_batch_size
    scalars |= {'train/sequences_per_sec': seq_per_sec,
                'train/tokens_per_sec': steps_per_sec * padded}
    utilisation = perf.mfu(steps_per_sec, flops, jax.device_count(), self._peak)
    share = None if real is None else real / padded
    if share is not None:
      scalars |= {'train/real_tokens_per_sec': steps_per_sec * real,
                  'train/real_token_share': share}
    if utilisation is not None:
      scalars['train/mfu'] = utilisation
      if share is not None:
        scalars['train/real_mfu'] = utilisation * share
    self._writer.write_scalars(step, scalars)
    logging.info('step %d/%d%s | %.2f steps/s, %.1f seq/s%s%s, ETA %s', step,
                 cfg.num_train_steps, self._job.describe(step, means), steps_per_sec,
                 seq_per_sec, '' if share is None else
                 f', {steps_per_sec * real:.0f} real tokens/s ({share:.0%} of the padded)',
                 '' if utilisation is None else f', MFU {utilisation:.1%}' + (
                     '' if share is None else f' (real {utilisation * share:.1%})'),
                 job_lines.eta(self._seconds_left(step, steps_per_sec, flops)))

  def _seconds_left(self, step: int, steps_per_sec: float, flops: float) -> float:
    """The ETA: the steps left at this rate, or where the job knows its later steps cost
    otherwise (two-phase pre-training's longer phase 2), their FLOPs at this FLOP rate; plus the
    evals and saves to come, at the seconds per step they took so far."""
    steps_left = self._config.num_train_steps - step
    seconds, start, last = self._paused  # As often from the last on as up to it.
    pauses = seconds / (last - start) * (self._config.num_train_steps - last) if last > start else 0
    if self._job.remaining_flops is None or not flops:
      return steps_left / max(steps_per_sec, 1e-9) + pauses
    return self._job.remaining_flops(step) / max(steps_per_sec * flops, 1e-9) + pauses


class Trace:
  """jax.profiler's trace of the updates after step config.profile_start_step, up to
  profile_start_step + profile_steps, in <workdir>/plugins/profile/<time>/, where TensorBoard's
  profile tab (tensorboard-plugin-profile, or xprof) finds it beside the scalars. A resumed run
  traces what is left of that window after the step it compiles, and nothing once the window
  is behind it. Process 0 traces its host and devices (the others would write the same file
  name where processes share a host)."""

  def __init__(self, config, workdir: str, start_step: int, total_steps: int):
    count = config.profile_steps if jax.process_index() == 0 else 0
    # Step indices [first, end): never the step this process compiles (start_step).
    self._first = max(config.profile_start_step, start_step + 1)
    self._end = config.profile_start_step + count
    self._workdir, self._folder, self._traced = workdir, None, 0
    self._overhead = 0.0  # Seconds starting and writing the trace: no training.
    if count and self._first >= total_steps:
      logging.warning('no profiler trace: it would start after step %d, and this run ends at '
                      'step %d; lower --config.profile_start_step', self._first, total_steps)
      self._end = 0
    elif count and self._first >= self._end:
      logging.info('no profiler trace: its updates %d-%d came before this run\'s first',
                   config.profile_start_step + 1, self._end)

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    """The loop's end, early too (a stop, a preemption, an error): closes an open trace."""
    self.stop()

  def before(self, step: int):
    """Starts the trace before the first step asked for (step: the one about to run)."""
    if step != self._first or step >= self._end:
      return
    # The profiler writes local files: a gs:// workdir gets them copied when it stops.
    remote = files.is_remote(self._workdir)
    folder = tempfile.mkdtemp(prefix='bertjax-trace-') if remote else self._workdir
    started = time.perf_counter()
    try:
      jax.profiler.start_trace(folder)
      self._overhead += time.perf_counter() - started
    except Exception as e:  # pylint: disable=broad-except  E.g. a notebook's own trace runs.
      logging.warning('no profiler trace: it did not start (%s); training goes on', e)
      if remote:
        shutil.rmtree(folder, ignore_errors=True)  # local: the profiler's temp folder
      return
    self._folder = folder

  def after(self, done: int, state):
    """Counts a traced update; stops the trace after the last one asked for (done: steps
    done)."""
    if self._folder is not None:
      self._traced += 1
      if done >= self._end:
        self.stop(state)

  def stop(self, state=None):
    """Stops an open trace (also when the loop ends early), its updates' device work inside
    it. The trace is a diagnosis: failing to write it (a full disk) warns and never ends the
    run; a device error met while waiting for the traced updates is raised, the trace closed."""
    if self._folder is None:
      return
    folder, self._folder = self._folder, None
    where = files.join(self._workdir, 'plugins', 'profile')
    try:
      jax.block_until_ready(state)  # Training: the traced updates' device work.
    finally:
      started = time.perf_counter()  # From here on the device is idle: no training.
      written = _stop_trace(where)
      if folder != self._workdir:
        try:
          if written:
            files.copy_tree(files.join(folder, 'plugins', 'profile'), where)
        except Exception as e:  # pylint: disable=broad-except  gcsfs's errors are not OSError.
          logging.warning('the profiler trace was not copied to %s (%s); training goes on',
                          where, e)
          written = False
        shutil.rmtree(folder, ignore_errors=True)  # local: the profiler's temp folder
      self._overhead += time.perf_counter() - started
    if written:
      logging.info('profiler trace of updates %d-%d: %s (TensorBoard --logdir %s, its profile '
                   'tab)', self._first + 1, self._first + self._traced, where, self._workdir)

  def overhead(self) -> float:
    """The seconds spent starting and writing the trace since the last call: the progress line
    leaves them out of its rates."""
    seconds, self._overhead = self._overhead, 0.0
    return seconds


def _stop_trace(where) -> bool:
  """Stops jax's trace, writing it; False (and a warning) where that failed."""
  try:
    jax.profiler.stop_trace()
    return True
  except Exception as e:  # pylint: disable=broad-except
    logging.warning('the profiler trace was not written to %s (%s); training goes on', where, e)
    return False
