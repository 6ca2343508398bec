"""One run per workdir: a second is refused naming the first; a killed run's lock is no lock."""

import os
import pathlib
import signal
import subprocess
import sys

import pytest

from bertjax import paths
from bertjax.training import workdir_lock

HOLD = ('import sys, time; from bertjax.training import workdir_lock\n'
        'with workdir_lock.locked(sys.argv[1]):\n'
        '  print("held", flush=True); time.sleep(600)\n')


def _tree(folder):
  """Every path under `folder`, relative to it: what a refused run must leave as it was."""
  return sorted(p.relative_to(folder) for p in folder.rglob('*'))


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


def test_a_run_that_wrote_nothing_leaves_no_folder_it_made(tmp_path):
  """Hostile pass of 2026-12-04: a new run refused at its start (a column its file lacks) left
  its workdir holding only .lock. The folders it made go; a folder that was there, or one the
  run wrote into, stays; a second run of the same new workdir meanwhile is refused."""
  workdir = tmp_path / 'new' / 'run'
  with pytest.raises(ValueError, match='refused'):
    with workdir_lock.locked(str(workdir)):
      assert (workdir / workdir_lock.LOCK_NAME).is_file()
      second = subprocess.run([sys.executable, '-c', HOLD.replace('time.sleep(600)', 'pass'),
                               str(workdir)], check=False, capture_output=True, text=True)
      assert second.returncode == 1 and 'is in use by pid' in second.stderr, second.stderr
      raise ValueError('refused')
  assert list(tmp_path.iterdir()) == []
  with workdir_lock.locked(str(workdir)):
    (workdir / 'config.json').write_text('{}')
  assert _tree(tmp_path) == sorted(map(pathlib.Path, [
      'new', 'new/run', 'new/run/.lock', 'new/run/config.json']))
  (tmp_path / 'kept').mkdir()
  with workdir_lock.locked(str(tmp_path / 'kept')):
    pass
  assert (tmp_path / 'kept').is_dir()
  # A folder of the user's (session 55's hostile pass: its refused run left a .lock there): as
  # it was; a run that wrote into it keeps its lock.
  (tmp_path / 'kept' / 'notes.txt').write_text('mine')
  with pytest.raises(ValueError, match='refused'):
    with workdir_lock.locked(str(tmp_path / 'kept')):
      raise ValueError('refused')
  assert sorted(p.name for p in (tmp_path / 'kept').iterdir()) == ['notes.txt']
  with workdir_lock.locked(str(tmp_path / 'kept')):
    (tmp_path / 'kept' / 'config.json').write_text('{}')
  assert sorted(p.name for p in (tmp_path / 'kept').iterdir()) == [
      '.lock', 'config.json', 'notes.txt']



def test_a_run_refused_reading_init_from_leaves_no_empty_checkpoints_folder(tmp_path):
  """Helper-180's pass: a fine-tuning run refused as it read init_from (its steps damaged, or
  another run's) left its new workdir holding .lock and the empty checkpoints/ its checkpoint
  manager had made. An empty one goes with the rest; one holding a step stays."""
  workdir = tmp_path / 'new'
  with pytest.raises(ValueError, match='refused'):
    with workdir_lock.locked(str(workdir)):
      (workdir / 'checkpoints').mkdir()
      raise ValueError('refused')
  assert list(tmp_path.iterdir()) == []
  with pytest.raises(ValueError, match='refused'):
    with workdir_lock.locked(str(workdir)):
      (workdir / 'checkpoints' / '3').mkdir(parents=True)
      raise ValueError('refused')
  assert _tree(workdir) == sorted(map(pathlib.Path, ['.lock', 'checkpoints', 'checkpoints/3']))

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



def test_a_workdir_link_whose_run_moved_away_is_named_and_left_alone(tmp_path):
  """Helper-180's pass (moved runs): --workdir a link to a run moved since ended on
  '[Errno 17] File exists: .../link'; it says where the link points, and the fixes."""
  link = tmp_path / 'latest'
  link.symlink_to(tmp_path / 'run')  # The run moved to run-old.
  for workdir in (str(link), f'{link}/'):
    with pytest.raises(ValueError, match=rf'^--workdir={link}/? is a link to {tmp_path}/run, which '
                       r'does not exist \(moved or deleted since\?\): point the link at the run, '
                       r'or pass --workdir=<where it is now>; for a new run there, remove the '
                       r'link\.$'):
      with workdir_lock.locked(workdir):
        pass
  assert link.is_symlink() and not (tmp_path / 'run').exists()
  (tmp_path / 'run').mkdir()  # Pointed at a run again: locked.
  with workdir_lock.locked(str(link)):
    pass

def test_a_workdir_inside_a_runs_checkpoints_is_refused_before_anything_is_made(tmp_path):
  """Pass 33, item 13: a step's folder passed as --workdir (for init_from) took a run inside
  another run's checkpoints/, which its checkpointer prunes with the steps it no longer keeps."""
  run = tmp_path / 'pre'
  (run / 'checkpoints' / '6').mkdir(parents=True)
  (run / 'config.json').write_text('{"job": "pretrain"}')
  before = _tree(tmp_path)
  for inside in (run / 'checkpoints' / '6', run / 'checkpoints' / '6' / 'ft',
                 run / 'checkpoints' / 'new'):
    with pytest.raises(ValueError, match=rf'^--workdir={inside} is inside {run}/checkpoints, '
                       rf'the checkpoints of the run at {run} .*pass a folder outside {run}; to '
                       rf'start from that run\'s weights, pass --config.init_from={run}.$'):
      with workdir_lock.locked(str(inside)):
        pass
  with pytest.raises(ValueError, match=rf'^--workdir={run}/checkpoints is {run}/checkpoints, '
                     'the checkpoints of the run at'):  # Itself: was taken for a new run.
    with workdir_lock.locked(str(run / 'checkpoints')):
      pass
  assert _tree(tmp_path) == before
  # Beside the run, or in a folder of it that no checkpointer prunes: a run as any other.
  for beside in (tmp_path / 'ft', run / 'finetune'):
    with workdir_lock.locked(str(beside)):
      assert (beside / workdir_lock.LOCK_NAME).is_file()
  # A folder named checkpoints that is no run's holds a run as any other.
  with workdir_lock.locked(str(tmp_path / 'checkpoints' / 'mine')):
    pass


def test_a_model_folder_or_one_inside_it_is_refused_before_anything_is_written(tmp_path):
  """Notebook pass (session 34), 1: fine-tuning with its workdir a transformers folder wrote the
  run's config.json over the model's (transformers could no longer load it); pre-training there
  was refused late, leaving checkpoints/ beside the model's config.json, which made every tool
  read the model as a run without checkpoints."""
  hf, tf1, saved = tmp_path / 'hf', tmp_path / 'tf1', tmp_path / 'sm'
  for folder, names in ((hf, ('config.json', 'model.safetensors')),
                        (tf1, ('bert_config.json', 'vocab.txt', 'bert_model.ckpt.index')),
                        (saved, ('saved_model.pb',))):
    folder.mkdir()
    for name in names:
      (folder / name).write_text('{"model_type": "bert"}')
  before = _tree(tmp_path)
  for workdir, what, folder in ((hf, 'a transformers model', hf),
                                (hf / 'run', 'a transformers model', hf),
                                (tf1, 'an original TF1 checkpoint', tf1),
                                (saved, 'a SavedModel', saved)):
    with pytest.raises(ValueError, match=rf'^--workdir={workdir} is in {what} \({folder}\): a run '
                       rf'there would write its files among the model\'s .*pass a folder of its '
                       rf'own \(to start from the model: --config.init_from={folder}\).$'):
      with workdir_lock.locked(str(workdir)):
        pass
  assert _tree(tmp_path) == before


def test_a_bert_config_json_alone_is_no_checkpoint(tmp_path):
  """A user's copy of bert_config.json in their own folder (no variables) made every run and
  output there refused as "in an original TF1 checkpoint"."""
  (tmp_path / 'bert_config.json').write_text('{"hidden_size": 768}')
  with workdir_lock.locked(str(tmp_path / 'run')):
    pass
  assert paths.model_folder(str(tmp_path)) is None
  (tmp_path / 'bert_model.ckpt.index').write_bytes(b'')
  assert paths.model_folder(str(tmp_path)) == (str(tmp_path), 'an original TF1 checkpoint')


def test_another_thread_of_this_process_is_refused_a_nested_job_is_not(tmp_path):
  """Pass U: a notebook's run in a background thread held the lock, and the next cell's run on
  the same workdir went in (both wrote config.json and event files): the file lock is the
  process's, so threads are told apart here."""
  import threading  # pylint: disable=g-import-not-at-top
  workdir = str(tmp_path)
  held, release, done = threading.Event(), threading.Event(), []

  def background():
    with workdir_lock.locked(workdir):
      held.set()
      release.wait(30)
    done.append(True)

  thread = threading.Thread(target=background)
  thread.start()
  assert held.wait(30)
  try:
    with pytest.raises(workdir_lock.WorkdirInUseError, match='in use by another run of this '
                       'process'):
      with workdir_lock.locked(workdir):
        pass
  finally:
    release.set()
    thread.join(30)
  assert done
  with workdir_lock.locked(workdir):
    with workdir_lock.locked(workdir):  # A job nested in a job: the same thread shares it.
      pass


def test_a_run_outside_the_main_thread_says_sigterm_is_not_watched(monkeypatch):
  """Pass U: training in a thread ended in 'signal only works in main thread', after the data
  was made and config.json written."""
  import threading  # pylint: disable=g-import-not-at-top

  from bertjax.training import preemption  # pylint: disable=g-import-not-at-top
  warned = []

  class Recorded:  # preemption's own `logging`, whatever earlier tests left on absl's logger.
    def warning(self, message, *args):
      warned.append(message % args)

  monkeypatch.setattr(preemption, 'logging', Recorded())
  made = []
  thread = threading.Thread(target=lambda: made.append(preemption.Preemption(None)))
  thread.start()
  thread.join(30)
  assert made and not made[0].reached(0)
  made[0].close()
  assert any('SIGTERM is not watched' in w for w in warned), warned
