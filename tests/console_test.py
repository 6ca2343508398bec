"""What the console holds while the Python API loads a model, and whose lines it holds."""

import logging as std_logging
import os
import threading

from absl import logging

from bertjax import console

LOOP = os.path.join(os.sep, 'site', 'bertjax', 'training', 'loop.py')  # A bertjax module's line.


def _log(level, message):
  """`message` logged as a bertjax module logs it, from the calling thread."""
  logger = std_logging.getLogger('absl')
  logger.handle(logger.makeRecord('absl', level, LOOP, 1, message, (), None))


def test_a_model_loading_holds_its_own_threads_lines_not_a_training_threads():
  """Notebook pass (session 34), 3: Predictor / Embedder loading in one cell held every INFO line
  of the process, so a run training in a background thread lost its progress, save and eval
  lines meanwhile (steps 17-39 of 40, the final eval line)."""
  seen = []

  class Recorder(std_logging.Handler):
    def emit(self, record):
      seen.append(record.getMessage())

  recorder = Recorder()
  logger = std_logging.getLogger('absl')
  logger.addHandler(recorder)
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.INFO)
  try:
    with console.library_lines_held(quiet=True):
      _log(std_logging.INFO, 'loading line of the holding thread')
      _log(std_logging.WARNING, 'a warning of the holding thread')
      other = threading.Thread(target=_log, args=(std_logging.INFO,
                                                  'step 17/40 of a training thread'))
      other.start()
      other.join()
    _log(std_logging.INFO, 'after the block')
  finally:
    logging.set_verbosity(verbosity)
    logger.removeHandler(recorder)
  assert seen == ['a warning of the holding thread', 'step 17/40 of a training thread',
                  'after the block'], seen
