"""--log_dir: every line of a command's run (libraries' INFO lines too, its summary, its error or
interrupt line, a traceback at --verbosity=1) in a file of its own beside the console. absl
defines the flag for every program and writes nothing unless the program asks it to."""

import logging as std_logging
import os
import shlex
import socket
import sys
import time
import traceback

from absl import flags
from absl import logging

from bertjax import files
from bertjax import paths

_HANDLER = None  # The open file's handler, once --log_dir's file is open.


class _Handler(std_logging.FileHandler):
  """The file's handler: a write that fails (a full disk) is said once on the console, and the
  run goes on without the file (its lines stay on the console)."""

  def __init__(self, path):
    super().__init__(path, encoding='utf-8')
    self.failed = False

  def emit(self, record):
    if not self.failed:
      super().emit(record)

  def handleError(self, record):  # Called by emit with the write's error being handled.
    del record
    self.stop(sys.exc_info()[1])

  def stop(self, error):
    if not self.failed:
      self.failed = True
      try:  # The console may be on the same full disk.
        print(f'warning: --log_dir: {self.baseFilename} takes no more lines ({error}); the run '
              'goes on, its lines on the console only', file=sys.stderr, flush=True)
      except OSError:
        pass


def open_from_flags():
  """Opens --log_dir's file where the command was given the flag (its flags just parsed), before
  its first line. ValueError, one line, for a value it cannot use."""
  if not _HANDLER and flags.FLAGS.is_parsed() and flags.FLAGS['log_dir'].present:
    open_in(flags.FLAGS.log_dir)


def open_in(folder: str):
  """Every line of this process from now on, in FOLDER/<command>.<time>.<host>.<pid>.log."""
  global _HANDLER
  if not folder.strip():  # `--log_dir=$LOGS` with LOGS unset: absl's default, a temp folder.
    raise ValueError('--log_dir is empty: name a folder for the log file, or drop the flag.')
  if files.is_remote(folder := paths.absolute(folder)):  # file:// and ~ made local paths.
    raise ValueError(f'--log_dir={folder}: a log file is appended to line by line, so it takes '
                     'a local folder (copy it to a bucket after the run).')
  if os.path.isfile(folder):  # local: the log file's folder
    raise ValueError(f'--log_dir={folder} is a file: name a folder (made if missing).')
  command = os.path.basename(sys.argv[0]).removesuffix('.py').rpartition('.')[2]
  name = f'{command}.{time.strftime("%Y%m%d-%H%M%S")}.{socket.gethostname()}.{os.getpid()}.log'
  try:
    os.makedirs(folder, exist_ok=True)  # local: a log file is appended to as lines come.
    _HANDLER = _Handler(os.path.join(folder, name))
  except OSError as e:
    raise ValueError(f'--log_dir={folder}: cannot write a log file there ({e}): give a writable '
                     'folder, or drop the flag.') from None
  _HANDLER.setFormatter(logging.PythonFormatter())
  std_logging.getLogger().addHandler(_HANDLER)
  handler = _HANDLER
  handler.hook = sys.excepthook

  def excepthook(kind, value, tb):  # At --verbosity=1 a command's error is a traceback.
    write(''.join(traceback.format_exception(kind, value, tb)).rstrip('\n'))
    handler.hook(kind, value, tb)
  sys.excepthook = excepthook
  write(f'command: {shlex.join(sys.orig_argv)}')
  return _HANDLER.baseFilename


def close():
  """Ends the file (a command's process ends with it; tests close theirs)."""
  global _HANDLER
  if _HANDLER:
    std_logging.getLogger().removeHandler(_HANDLER)
    sys.excepthook = _HANDLER.hook
    _HANDLER.close()
    _HANDLER = None


def announce():
  """The console's line naming the file (from the command's main, where INFO lines show)."""
  if _HANDLER:
    logging.info('log file: %s', _HANDLER.baseFilename)


def is_open() -> bool:
  return _HANDLER is not None


def holds(handler) -> bool:
  """Whether `handler` is the file's (the console's filters leave it every line)."""
  return handler is _HANDLER


def say(line: str, file=None):
  """Prints a line the console shows outside logging (a summary, a warning, an error) to `file`
  (stderr by default), and writes it to the log file."""
  print(line, file=file or sys.stderr, flush=True)
  write(line)


def write(line: str):
  """A line for the log file alone (what the console got another way)."""
  if _HANDLER and not _HANDLER.failed:
    try:
      _HANDLER.stream.write(f'{line}\n')
      _HANDLER.flush()
    except OSError as e:
      _HANDLER.stop(e)
