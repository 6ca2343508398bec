"""--log_dir's file (bertjax/log_file.py): every line, the ones the console holds back too; a
traceback; a write that fails said once while the run goes on. The commands' own use of it:
tests/main_test.py, tests/command_line_test.py, tests/predict_api_test.py."""

import errno
import logging as std_logging
import sys

from absl import logging
import pytest

from bertjax import console
from bertjax import log_file

ORBAX = '/site-packages/orbax/checkpoint/_src/checkpoint_manager.py'
LOOP = '/site-packages/bertjax/training/loop.py'


class Full:
  """A stream on a full disk."""

  def write(self, text):
    raise OSError(errno.ENOSPC, 'No space left on device')

  def flush(self):
    pass


@pytest.fixture
def opened(tmp_path, monkeypatch):
  """(the file's path, the console's lines) with the file open in this process, at INFO."""
  shown = []

  class Console(std_logging.Handler):
    def emit(self, record):
      shown.append(record.getMessage())
  console_handler = Console()
  console_handler.addFilter(console.ConsoleFilter())
  monkeypatch.setattr(sys, 'argv', ['/bin/bertjax/main.py', '--log_dir=logs'])
  monkeypatch.setattr(sys, 'orig_argv', ['python', '-m', 'bertjax.main', '--log_dir=logs'])
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.INFO)
  std_logging.getLogger().addHandler(console_handler)
  try:
    yield log_file.open_in(str(tmp_path / 'logs')), shown
  finally:
    log_file.close()
    std_logging.getLogger().removeHandler(console_handler)
    logging.set_verbosity(verbosity)


def _log(message, source=ORBAX, level=std_logging.INFO):
  """`message` logged as orbax (or `source`) logs it: absl's logger, from that file."""
  logger = std_logging.getLogger('absl')
  logger.handle(logger.makeRecord('absl', level, source, 1, message, (), None))


def test_the_file_holds_what_the_console_holds_back(opened):
  path, shown = opened
  assert path.rsplit('/', 1)[1].startswith('main.') and path.endswith('.log')
  _log('ours', LOOP)
  _log('a library line')
  with console.library_lines_held():  # As predict and export load a checkpoint.
    _log('a restore line')
    _log('a warning', level=std_logging.WARNING)
  log_file.write('predict finished in 1.0 s')
  lines = open(path, encoding='utf-8').read().splitlines()
  assert lines[0] == 'command: python -m bertjax.main --log_dir=logs'  # As typed.
  assert lines[-1] == 'predict finished in 1.0 s'
  for message in ('ours', 'a library line', 'a restore line', 'a warning'):
    assert any(line.endswith(f'] {message}') for line in lines), (message, lines)
  assert shown == ['ours', 'a warning']  # The console as without the file.


def test_an_error_shown_as_a_traceback_is_in_the_file(opened, capsys):
  path, _ = opened
  try:
    raise FileNotFoundError('data/train-* matches nothing')
  except FileNotFoundError:
    sys.excepthook(*sys.exc_info())  # As the interpreter does at --verbosity=1.
  text = open(path, encoding='utf-8').read()
  assert 'Traceback (most recent call last)' in text
  assert text.rstrip().endswith('FileNotFoundError: data/train-* matches nothing')
  assert 'FileNotFoundError' in capsys.readouterr().err  # Still on the console too.


def test_a_full_disk_under_the_file_is_said_once_and_the_run_goes_on(opened, capsys):
  path, _ = opened
  log_file._HANDLER.stream = Full()  # pylint: disable=protected-access
  logging.info('a step')
  log_file.write('pretrain finished in 3.0 s')
  logging.info('another step')
  err = capsys.readouterr().err
  assert err.count('warning: --log_dir:') == 1, err
  assert f'{path} takes no more lines ([Errno 28] No space left on device)' in err
  assert 'Traceback' not in err and 'Logging error' not in err


def test_a_console_on_the_same_full_disk_stops_nothing(opened, monkeypatch):
  """Second review: the file's one warning, written to a console on the same full disk, raised
  into the run's next log call (a finished learn_vocab exited 1)."""
  log_file._HANDLER.stream = Full()  # pylint: disable=protected-access
  monkeypatch.setattr(sys, 'stderr', Full())
  logging.info('a step')  # Neither the file nor the console takes it: nothing raised.
  log_file.write('learn_vocab finished in 0.2 s')


@pytest.mark.parametrize('folder, said', [
    ('', '--log_dir is empty: name a folder for the log file, or drop the flag.'),
    ('gs://bucket/logs', '--log_dir=gs://bucket/logs: a log file is appended to line by line, so '
     'it takes a local folder (copy it to a bucket after the run).'),
])
def test_a_folder_it_cannot_use_is_one_line(folder, said):
  with pytest.raises(ValueError) as raised:
    log_file.open_in(folder)
  assert str(raised.value) == said


def test_a_file_url_is_a_local_folder(tmp_path, monkeypatch):
  """Second review: `--log_dir=file:///...` was refused as a bucket."""
  monkeypatch.setattr(sys, 'argv', ['/bin/bertjax/predict.py'])
  try:
    path = log_file.open_in(f'file://{tmp_path}/logs')
  finally:
    log_file.close()
  assert path.startswith(f'{tmp_path}/logs/predict.') and open(path).read().startswith('command:')
