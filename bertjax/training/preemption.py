"""Preemption: a SIGTERM (a preempted VM, a scheduler's stop) asks the training loop to save
the step it is at and exit, which a rerun of the same command resumes from."""

import signal
import threading

from absl import logging
import jax


class Preemption:
  """SIGTERM (a preempted VM) asks for a save and a clean exit at the next step boundary;
  multi-host, at the same step on every host: orbax's reached_preemption (jax.distributed's
  preemption service), not a local signal handler."""

  def __init__(self, mngr):
    self._mngr, self._requested, self._previous = mngr, False, None
    if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    elif jax.process_count() == 1:  # Python takes signal handlers in the main thread only.
      logging.warning('this run is not in the main thread (a notebook running it in the '
                      'background): SIGTERM is not watched, so a preemption loses the steps '
                      'since the last checkpoint')

  def _handle(self, signum, frame):
    del frame
    logging.warning('signal %d: saving a checkpoint and exiting at the end of this step (or of '
                    'the eval or save under way)', signum)
    self._requested = True

  def reached(self, step: int) -> bool:
    """Whether the run saves and exits after `step`, asked once per step."""
    if jax.process_count() > 1:
      return self._mngr.reached_preemption(step)
    return self._requested

  def asked_since(self) -> bool:
    """Whether a signal came since `reached` (during an eval or a save): one process saves and
    exits there, not a step and a save later (a VM's grace period is ~30 s). Several wait for the
    step the preemption service chose, which every host must reach."""
    return jax.process_count() == 1 and self._requested

  def close(self):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
