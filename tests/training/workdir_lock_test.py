"""One run per workdir: a second is refused naming the first; a killed run's lock is no lock."""

import os
import signal
import subprocess
import sys

import pytest

from bertjax.training import workdir_lock

HOLD = ('import sys, time; from bertjax.training import workdir_lock\n'
        'with workdir_lock.locked(sys.argv[1]):\n'
        '  print("held", flush=True); time.sleep(600)\n')


def test_a_live_run_blocks_a_second_and_a_killed_one_does_not(tmp_path):
  holder = subprocess.Popen([sys.executable, '-c', HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    with pytest.raises(workdir_lock.WorkdirInUseError,
                       match=rf'is in use by pid {holder.pid} on .*running since .*another '
                       '--workdir'):
      with workdir_lock.locked(str(tmp_path)):
        pass
  finally:
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
  # The kernel dropped the dead run's lock: the restart goes ahead, and nests within itself.
  with workdir_lock.locked(str(tmp_path)):
    with workdir_lock.locked(str(tmp_path)):
      assert (tmp_path / workdir_lock.LOCK_NAME).read_text().find(f'"pid": {os.getpid()}') > 0
  with workdir_lock.locked(str(tmp_path)):  # Released at the end of the block.
    pass


def test_a_workdir_that_is_a_file_is_named_and_left_alone(tmp_path):
  named = tmp_path / 'notes.txt'
  named.write_text('mine')
  with pytest.raises(ValueError, match='notes.txt is a file: pass a folder'):
    with workdir_lock.locked(str(named)):
      pass
  assert named.read_text() == 'mine'
  # Under a file: was a bare NotADirectoryError traceback.
  with pytest.raises(ValueError, match=rf'^--workdir={named}/run/a is under {named}, which is a '
                     'file: pass a --workdir under a folder.$'):
    with workdir_lock.locked(str(named / 'run' / 'a')):
      pass
  assert named.read_text() == 'mine'
