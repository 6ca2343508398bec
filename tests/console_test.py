"""What the console holds while the Python API loads a model, and whose lines it holds."""

import logging as std_logging
import os
import re
import subprocess
import sys
import threading

from absl import logging

from bertjax import console
from bertjax import job_lines

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


def test_a_commands_summary_counts_from_its_process_start(tmp_path, capsys):
  """Console pass 13 (2026-12-02): a command's summary said its job's time, leaving out its
  imports and JAX's start-up (seconds) that `time` counts; a job called from Python says its
  own."""
  (tmp_path / 'in.txt').write_text('the king doth speak of his lord\n' * 50)
  code = ('import runpy, sys, time\n'
          'import bertjax\n'
          'time.sleep(3)\n'  # As slow imports would, before the command's main.
          'sys.argv = ["learn_vocab", "--input_file=in.txt", "--output_file=vocab.txt", '
          '"--vocab_size=40"]\n'
          'runpy.run_module("bertjax.learn_vocab", run_name="__main__")\n')
  done = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True,
                        text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  took = re.match(r'learn_vocab finished in ([\d.]+) s', done.stdout.splitlines()[-1])
  assert took and float(took[1]) >= 3, done.stdout
  assert not console.COMMAND.is_set()  # This process (older than 0.5 s): a job called from
  job_lines.summary('x', 0.5)  # Python, which says its own time.
  assert capsys.readouterr().out == 'x finished in 0.5 s\n'


HELD = '''
import sys, threading, time
from bertjax import console
console._run_at_interrupt = lambda: time.sleep(1)  # An exit under way, slowly.
if sys.argv[1] == 'watcher_first':
  threading.Thread(target=console.interrupted, args=(lambda: 'bye',)).start()
  time.sleep(0.3)
  with console.interrupts_held():
    print('entered', flush=True)
else:
  with console.interrupts_held():
    console.interrupted(lambda: 'bye')  # The handler, inside: as the block ends.
    print('finished the renames', flush=True)
  print('not reached', flush=True)
'''


def test_an_interrupt_waits_for_a_held_block_and_a_held_block_for_an_exit_under_way():
  """Review of session 56: the watcher thread's exit, begun just before the main thread entered
  interrupts_held(), removed the temporary folder while the renames moved files into it."""
  for order, out in (('watcher_first', ''), ('inside', 'finished the renames\n')):
    done = subprocess.run([sys.executable, '-c', HELD, order], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr.strip().splitlines()[-1:]) == (
        130, out, ['bye']), done.stderr
