"""What the console shows: bertjax's lines and every library's warnings and errors; library
INFO lines and C++ start-up chatter only at --verbosity=1 (where they all remain)."""

import contextlib
import logging as std_logging
import os
import sys
import tempfile

from absl import logging

# Messages libraries log at WARNING that a user cannot act on (kept at --verbosity=1).
_QUIET_WARNINGS = ('_CHECKPOINT_METADATA',  # orbax on every restore of a healthy checkpoint.
                   'Metadata file does not exist',
                   # orbax's background threads on a full disk, said once by the run's error.
                   'No space left on device')


class ConsoleFilter(std_logging.Filter):
  """The console carries bertjax's lines and every library's warnings and errors; libraries'
  INFO lines (orbax: ~50 per save; jax's backend probing) only at --verbosity=1 or more."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    if logging.get_verbosity() >= logging.DEBUG:
      return True
    ours = f'{os.sep}bertjax{os.sep}' in record.pathname
    if record.levelno >= std_logging.WARNING:
      return ours or not any(m in record.getMessage() for m in _QUIET_WARNINGS)
    return ours


def install():
  """The console filter on absl's handler, and tracebacks of orbax's asyncio callbacks that
  fire after a failed save ('Event loop is closed', ~40 lines each) kept for --verbosity=1."""
  handler = logging.get_absl_handler()
  if not any(isinstance(f, ConsoleFilter) for f in handler.filters):
    handler.addFilter(ConsoleFilter())
  hook = sys.excepthook

  def excepthook(kind, value, tb):
    if (kind is RuntimeError and str(value) == 'Event loop is closed'
        and logging.get_verbosity() < logging.DEBUG):
      return
    hook(kind, value, tb)
  sys.excepthook = excepthook


@contextlib.contextmanager
def stderr_held():
  """Holds what C++ libraries write to stderr (TensorFlow probing for CUDA on a CPU machine:
  'failed call to cuInit'); shown only if the block fails or at --verbosity=1."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as held:
    os.dup2(held.fileno(), 2)
    failed = True
    try:
      yield
      failed = False
    finally:
      os.dup2(saved, 2)
      os.close(saved)
      if failed or logging.get_verbosity() >= logging.DEBUG:
        held.seek(0)
        sys.stderr.write(held.read().decode(errors='replace'))


def notebook():
  """A notebook's cell output as the command line's console: bertjax's INFO lines (the progress
  line, evals) and every library's warnings, as `time message` lines; libraries' INFO lines
  hidden. (Outside absl's app.run, absl logs at WARNING through whatever the root logger has.)"""
  logging.set_verbosity(logging.INFO)
  logger = std_logging.getLogger('absl')
  if any(isinstance(f, ConsoleFilter) for f in logger.filters):
    return
  logger.addFilter(ConsoleFilter())
  handler = std_logging.StreamHandler(sys.stdout)
  handler.setFormatter(std_logging.Formatter('%(asctime)s %(message)s', '%H:%M:%S'))
  logger.addHandler(handler)
  logger.propagate = False  # Not again through a root handler a library may have set up.
