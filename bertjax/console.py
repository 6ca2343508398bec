"""What the console shows: bertjax's lines and every library's warnings and errors; library
INFO lines and C++ start-up chatter only at --verbosity=1 (where they all remain)."""

import contextlib
import logging as std_logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from absl import logging

from bertjax import log_file

# Messages libraries log at WARNING that a user cannot act on (kept at --verbosity=1).
_QUIET_WARNINGS = ('_CHECKPOINT_METADATA',  # orbax on every restore of a healthy checkpoint.
                   'Metadata file does not exist',
                   # orbax's background threads on a full disk, said once by the run's error.
                   'No space left on device',
                   # orbax when a save waited over 1 s for the one before (a loaded machine,
                   # saves every few steps): the progress line's rate at that step shows it.
                   'Waiting for previous save to complete',
                   # TFDS's reader on every dataset it opens (its own features' dtype).
                   '`FeatureConnector.dtype` is deprecated',
                   # gcsfs logs, with a 40-line traceback, the error it raises next, which the
                   # command then says in one line (file_errors: no network, a 5xx kept up).
                   '_request out of retries on exception')

# The exit status of a run that saved and stopped because it was preempted (SIGTERM): not 0, so
# that a scheduler (a JobSet, SLURM, a wrapper) restarts it rather than taking it for done
# (EX_TEMPFAIL: try again). The launchers exit with it too when their restarts run out.
PREEMPTED_EXIT = 75
# The exit status of bertjax.main refusing its command before anything starts (EX_CONFIG): a
# config value, a stale image's configs/. It fails the same way however often it is restarted
# (a JobSet fails at once on it); any other error exits 1 (a scheduler may retry those).
REFUSED_EXIT = 78


class Refused(ValueError):
  """A config value the job refuses before any work (the mesh, the batch, the vocab): exits
  REFUSED_EXIT, as bertjax.main's own checks do."""


_PREEMPTED = threading.Event()
# Set on the hosts of a multi-host job other than process 0: their INFO lines (the progress
# line, the evals, each a copy of process 0's) kept for --verbosity=1; warnings and errors shown.
_ANOTHER_HOST = threading.Event()
# Set when a command's flags are parsed (app.run): its summary counts from the process's start.
COMMAND = threading.Event()


def preempted(stopped: str = '') -> bool:
  """Records that the job ended preempted (`stopped` says so); whether one did."""
  if stopped.startswith('preempted'):
    _PREEMPTED.set()
  return _PREEMPTED.is_set()


class ConsoleFilter(std_logging.Filter):
  """The console carries bertjax's lines and every library's warnings and errors; libraries'
  INFO lines (orbax: ~50 per save; jax's backend probing) only at --verbosity=1 or more."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    if logging.get_verbosity() >= logging.DEBUG:
      return True
    if _ANOTHER_HOST.is_set() and record.levelno < std_logging.WARNING:
      return False
    ours = f'{os.sep}bertjax{os.sep}' in record.pathname
    if record.levelno >= std_logging.WARNING:
      return ours or not any(m in record.getMessage() for m in _QUIET_WARNINGS)
    return ours


def leave_the_progress_to_process_0(process_index: int):
  """On the hosts of a multi-host job other than process 0: warnings and errors only (a pod's
  consoles, or a SLURM job's one log, carried a copy of every line per host)."""
  if process_index:
    logging.info('process %d shows its warnings and errors only: process 0 shows the progress '
                 '(--verbosity=1 shows everything here)', process_index)
    _ANOTHER_HOST.set()


def install():
  """The console filter on absl's handler, and tracebacks of orbax's asyncio callbacks that
  fire after a failed save or read ('Event loop is closed', ~40 lines each, through
  sys.excepthook or sys.unraisablehook) kept for --verbosity=1."""
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
  # tensorstore's callbacks into orbax's closed loop come here (a failed read, a failed save).
  unraisable = sys.unraisablehook

  def unraisablehook(args):
    if not (args.exc_type is RuntimeError and str(args.exc_value) == 'Event loop is closed'
            and logging.get_verbosity() < logging.DEBUG):
      unraisable(args)
  sys.unraisablehook = unraisablehook
  log_file.announce()


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
  # By name, not isinstance: after importlib.reload(console) (%autoreload) the filter set up by
  # the module's former self is another class, and a second handler would print every line twice.
  if any(type(f).__name__ == ConsoleFilter.__name__ for f in logger.filters):
    return
  logger.addFilter(ConsoleFilter())
  handler = std_logging.StreamHandler(sys.stdout)
  handler.setFormatter(std_logging.Formatter('%(asctime)s %(message)s', '%H:%M:%S'))
  logger.addHandler(handler)
  logger.propagate = False  # Not again through a root handler a library may have set up.


class _WarningsOnly(ConsoleFilter):
  """The console's warnings alone, bertjax's INFO lines held too, from the thread that holds
  them: another thread's lines (a run training in the background while a cell loads a model)
  are the console's as ever."""

  def __init__(self):
    super().__init__()
    self.thread = threading.get_ident()

  def filter(self, record: std_logging.LogRecord) -> bool:
    mine = record.thread == self.thread
    return (record.levelno >= std_logging.WARNING or not mine) and super().filter(record)


@contextlib.contextmanager
def library_lines_held(verbose: bool = False, quiet: bool = False):
  """For the Python API (Predictor, Embedder, export): libraries' lines a user cannot act on
  (orbax's INFO lines and its warning on every restore) held while a model loads, as the command
  line's console holds them; quiet: bertjax's INFO lines held as well (a notebook's
  console.notebook() shows them: 'predicting with step N' is the command line's, not an
  object's), warnings still shown; verbose: every line, bertjax's INFO lines included, whatever
  the absl verbosity is."""
  if verbose:
    verbosity = logging.get_verbosity()
    logging.set_verbosity(max(verbosity, logging.INFO))  # Never less than --verbosity=1 gives.
    try:
      yield
    finally:
      logging.set_verbosity(verbosity)
    return
  held = _WarningsOnly() if quiet else ConsoleFilter()
  # absl's logger; with --log_dir's file open, the console's handlers instead (the command
  # line's on the root logger, a notebook's on absl's), so that the file keeps every line.
  targets = ([h for h in {*std_logging.getLogger('absl').handlers,
                          *std_logging.getLogger().handlers} if not log_file.holds(h)]
             if log_file.is_open() else [std_logging.getLogger('absl')])
  for target in targets:
    target.addFilter(held)
  try:
    yield
  finally:
    for target in targets:
      target.removeFilter(held)


_WARNED = set()  # The warnings said in this job: forget_warnings() at its end.


def warn_once(message: str, *args):
  """A warning said once per job (its config is checked by bertjax.main and by the job), and
  again by the next job of this process (a notebook's next cell): unlike absl's log_first_n."""
  if (line := message % args) not in _WARNED:
    _WARNED.add(line)
    logging.warning('%s', line)


def forget_warnings():
  _WARNED.clear()


_EXIT_LOCK = threading.Lock()
_STDERR = [2]
_TEMPORARY = set()  # Half-written outputs an interrupt removes before it exits.
_AT_INTERRUPT = []  # Clean-ups an interrupt runs before it exits (e.g. a remote lock's removal).
_AT_INTERRUPT_S = 5.0  # The most an interrupt waits for them: a dead network must not hang it.


@contextlib.contextmanager
def temporary(path):
  """Marks a file or folder being written for removal if Ctrl-C ends the process meanwhile."""
  _TEMPORARY.add(str(path))
  try:
    yield path
  finally:
    _TEMPORARY.discard(str(path))


_HOLDING = [0]  # interrupts_held() blocks entered.
_HELD = []  # The interrupt (message, code) that came inside them, taking effect as they end.
_EXITING = [False]  # An interrupt is ending the process (interrupts_held() waits for it).
# Between the signal handler, the watcher thread and interrupts_held(): one decides at a time.
_HOLD_LOCK = threading.RLock()  # Re-entered by a signal handler run in the main thread.


@contextlib.contextmanager
def interrupts_held():
  """An interrupt (Ctrl-C; SIGTERM where handled) that comes inside the block takes effect as
  it ends: a few renames that must all happen, or be undone, are never cut in two (the
  temporary files an interrupt removes may hold what they put back). Where an interrupt is
  already ending the process, the block never starts."""
  with _HOLD_LOCK:
    exiting = _EXITING[0]
    if not exiting:
      _HOLDING[0] += 1
  while exiting:  # The interrupt's thread exits the process meanwhile.
    time.sleep(1)
  try:
    yield
  finally:
    with _HOLD_LOCK:
      _HOLDING[0] -= 1
      held = _HELD[0] if not _HOLDING[0] and _HELD else None
    if held:
      interrupted(*held)


@contextlib.contextmanager
def at_interrupt(callback):
  """Runs `callback()` if Ctrl-C ends the process inside the block (which skips `finally`),
  for at most a few seconds together with the others."""
  _AT_INTERRUPT.append(callback)
  try:
    yield
  finally:
    _AT_INTERRUPT.remove(callback)


_LAST_AT_INTERRUPT = []  # Run after the clean-ups, each bounding its own time (hosts._leave).


def last_at_interrupt(callback):
  """Runs `callback()` whenever an interrupt ends the process, after the at_interrupt clean-ups
  and before its line (for as long as the process lives)."""
  _LAST_AT_INTERRUPT.append(callback)


def _run_at_interrupt():
  def run():
    for callback in reversed(list(_AT_INTERRUPT)):  # The innermost block's first, as `finally`.
      try:
        callback()
      except Exception:  # pylint: disable=broad-except  # Best effort: the exit goes on.
        pass
  thread = threading.Thread(target=run, name='at-interrupt', daemon=True)
  thread.start()
  thread.join(_AT_INTERRUPT_S)


def exit_on_interrupt(message, terminate: bool = False):
  """Ctrl-C ends the process at once with one line, `message()`, and exit status 130, wherever
  it is (`terminate`: SIGTERM too, status 143, for tools whose temporary outputs it would leave
  behind; the training loop saves on a SIGTERM instead): no KeyboardInterrupt is raised, which
  libraries swallow (a bare `except:` during an import, a gc callback: 'Exception ignored') or
  which unwinds through XLA and crashes it at exit.

  Python runs a signal handler only between bytecodes of the main thread, i.e. after a long
  compile returns; the signal's wake-up byte also reaches a watcher thread that ends the process
  while the main thread is still inside C++. What was saved stays intact: orbax finalises a
  checkpoint by a rename (and removes a half-written one's temporary folder on the next start),
  and every other output is written to a temporary file renamed into place.
  """
  # nohup and a script's `cmd &` leave SIGINT ignored: it stays so; SIGTERM is still handled.
  sigint = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
  if not (sigint or terminate):
    return
  _STDERR[0] = os.dup(2)  # stderr_held() may point fd 2 elsewhere when it comes.
  # multiprocessing's resource tracker (the corpus writers' workers) outlives an interrupted
  # run and would add a 'leaked semaphore objects' warning after the line.
  os.environ['PYTHONWARNINGS'] = ','.join(filter(None, (
      os.environ.get('PYTHONWARNINGS'), 'ignore::UserWarning:multiprocessing.resource_tracker')))
  if sigint:
    signal.signal(signal.SIGINT, lambda signum, frame: interrupted(message))
  if terminate:
    signal.signal(signal.SIGTERM, lambda signum, frame: interrupted(message, 143))
  read_end, write_end = os.pipe()
  os.set_blocking(write_end, False)
  try:
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
  except ValueError:  # Not the main thread: the handler alone.
    return

  def watch():
    while True:
      received = os.read(read_end, 64)
      if sigint and signal.SIGINT in received:
        interrupted(message)
      if terminate and signal.SIGTERM in received:
        interrupted(message, 143)

  threading.Thread(target=watch, name='sigint-watcher', daemon=True).start()


def interrupted(message, code: int = 130):
  """Prints `message()` and exits `code` (130: 128 + SIGINT) without the interpreter's teardown:
  XLA's compiler threads still running at exit crash it (a segfault, rc 139)."""
  with _HOLD_LOCK:
    if _HOLDING[0]:  # Inside interrupts_held(): as the block ends.
      _HELD[:] = _HELD[:1] or [(message, code)]
      return
    _EXITING[0] = True
  if not _EXIT_LOCK.acquire(blocking=False):  # The handler and the watcher: one line.
    return
  for path in list(_TEMPORARY):  # local temp: this process's own temporary files
    # A writer may still be writing into a folder (TensorFlow's, in C++, while the watcher
    # thread ends the process): what it added meanwhile is removed on a second look.
    for _ in range(5):
      shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else (  # local temp
          os.path.exists(path) and os.unlink(path))  # local temp
      if not os.path.lexists(path):  # local temp
        break
      time.sleep(0.05)
  _run_at_interrupt()
  for callback in _LAST_AT_INTERRUPT:
    try:
      callback()
    except Exception:  # pylint: disable=broad-except  # Best effort: the exit goes on.
      pass
  try:
    line = message()
  except Exception:  # pylint: disable=broad-except  # Never a traceback here.
    line = 'interrupted; rerun the same command'
  try:
    sys.stdout.flush()
    sys.stderr.flush()
  except Exception:  # pylint: disable=broad-except
    pass
  log_file.write(line)
  os.write(_STDERR[0], f'{line}\n'.encode())
  os._exit(code)  # pylint: disable=protected-access


def said(why: str, fix: str) -> str:
  """A refusal's sentence, `why; fix.`: a fix ending 'did you mean embed?' takes no period."""
  return f"{why}; {fix}{'' if fix.endswith('?') else '.'}"


def fail(message: str, code: int = 1):
  """Ends a command with its error as the last line, exit status `code`. What libraries print while
  the process ends is dropped (at --verbosity=1 kept): an unreadable checkpoint leaves
  tensorstore's background reads failing into a closed event loop, a traceback each."""
  log_file.say(message)
  if logging.get_verbosity() < logging.DEBUG:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
  sys.exit(code)


def reader_gone():
  """The reader of standard output closed it (`... | head`): stops quietly with status 141
  (128 + SIGPIPE), as Unix tools do, not with an error line for a pipe the user closed."""
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit would raise again.
  sys.exit(141)


def nothing_written(what: str):
  """The interrupt line of a tool whose outputs are written whole or not at all."""
  return lambda: f'interrupted: {what}; rerun the same command'
