"""mode=eval and mode=predict put their results in place whole or not at all
(scored_folders.writing): an error or an interrupt while they are written leaves no folder
holding some splits' results and not others, and a rerun of the same inputs keeps a user's own
files beside them."""

import errno
import json
import os
import subprocess
import sys

import pytest

from bertjax import console
from bertjax import files
from bertjax import processes
from bertjax.finetune import scored_folders

INPUTS = 'a' * 64


def _results(folder):
  return sorted(p.name for p in folder.iterdir())


def test_a_new_folder_appears_only_once_complete(tmp_path):
  folder = tmp_path / 'predictions' / 'eval_step_4'
  with scored_folders.writing(str(folder), INPUTS) as into:
    assert not folder.exists()
    assert into in console._TEMPORARY  # pylint: disable=protected-access  # Ctrl-C removes it.
    (tmp_path / 'predictions' / 'x').write_text('')  # Beside: not the folder.
    with open(os.path.join(into, 'validation_results.json'), 'w') as f:  # local test
      f.write('{}')
  assert _results(folder) == ['scored_inputs.json', 'validation_results.json']
  assert json.loads((folder / 'scored_inputs.json').read_text()) == {'sha256': INPUTS}
  assert sorted(p.name for p in folder.parent.iterdir()) == ['eval_step_4', 'x']  # No temp.


def test_an_error_while_writing_leaves_nothing_and_keeps_earlier_results(tmp_path):
  folder = tmp_path / 'eval_step_4'
  with pytest.raises(OSError, match='No space'):
    with scored_folders.writing(str(folder), INPUTS) as into:
      (tmp_path.joinpath(into) / 'validation_results.json').write_text('{"accuracy": 1}')
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  assert list(tmp_path.iterdir()) == []
  with scored_folders.writing(str(folder), INPUTS) as into:  # Written; then a rerun fails.
    (tmp_path.joinpath(into) / 'validation_results.json').write_text('{"accuracy": 0.5}')
  with pytest.raises(RuntimeError):
    with scored_folders.writing(str(folder), INPUTS) as into:
      (tmp_path.joinpath(into) / 'validation_results.json').write_text('{"accuracy": 1}')
      raise RuntimeError('cut short')
  assert (folder / 'validation_results.json').read_text() == '{"accuracy": 0.5}'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['eval_step_4']


def test_a_rerun_replaces_its_results_and_keeps_the_users_files(tmp_path):
  folder = tmp_path / 'eval_step_4'
  for accuracy in ('0.5', '0.75'):
    with scored_folders.writing(str(folder), INPUTS) as into:
      (tmp_path.joinpath(into) / 'validation_results.json').write_text(accuracy)
      (tmp_path.joinpath(into) / 'nested').mkdir()
      (tmp_path.joinpath(into) / 'nested' / 'part').write_text(accuracy)
    (folder / 'notes.txt').write_text('mine')
  assert (folder / 'validation_results.json').read_text() == '0.75'
  assert (folder / 'nested' / 'part').read_text() == '0.75'
  assert (folder / 'notes.txt').read_text() == 'mine'


def test_what_a_killed_writer_left_is_removed_and_a_live_ones_kept(tmp_path):
  folder = tmp_path / 'eval_step_4'
  prefix = f'{processes.hidden_prefix(folder.name)}writing-'
  dead = subprocess.run([sys.executable, '-c', 'from bertjax import processes; '
                         'print(processes.mark())'], capture_output=True, text=True,
                        check=True).stdout.strip()
  killed = tmp_path / f'{prefix}{dead}-123'
  live = tmp_path / f'{prefix}{processes.mark()}-456'
  # Session 55's hostile pass: another folder's (step, file) was removed by its own eval only.
  other = tmp_path / f'{processes.hidden_prefix("eval_step_9-b.csv-1a2b3c4d")}writing-{dead}-7'
  mine = tmp_path / '.notes.writing-by-hand'
  for left in (killed, live, other, mine):
    (left / 'deep').mkdir(parents=True)
    (left / 'deep' / 'validation_predictions.tsv').write_text('half')
  with scored_folders.writing(str(folder), INPUTS):
    pass
  assert not killed.exists() and live.exists() and not other.exists() and mine.exists()


def test_a_buckets_folder_says_it_is_incomplete_until_its_last_file(gcs_bucket, tmp_path,
                                                                    monkeypatch):
  folder = f'{gcs_bucket}/run/predictions/eval_step_4'
  copied = []
  def copy(source, destination):  # What the bucket holds while each file is uploaded.
    record = json.loads(files.read_text(f'{folder}/scored_inputs.json'))
    copied.append((files.name(destination), record))
    real_copy(source, destination)
  real_copy = files.copy
  monkeypatch.setattr(files, 'copy', copy)
  with pytest.raises(RuntimeError):
    with scored_folders.writing(folder, INPUTS) as into:
      (tmp_path.joinpath(into) / 'validation_results.json').write_text('1')
      raise RuntimeError('cut short')
  assert not files.exists(folder)
  with scored_folders.writing(folder, INPUTS) as into:
    (tmp_path.joinpath(into) / 'validation_results.json').write_text('1')
  assert copied == [('validation_results.json', {'sha256': INPUTS, 'complete': False})]
  assert json.loads(files.read_text(f'{folder}/scored_inputs.json')) == {'sha256': INPUTS}
  assert scored_folders.scored_into(folder, INPUTS) == folder  # A rerun rewrites it.


def test_an_error_of_the_hidden_folder_names_the_folder_the_user_knows(tmp_path):
  """Hostile pass of 2026-12-04: an immutable predictions/ said `[Errno 1] Operation not
  permitted: '.../predictions/.eval_step_9.writing-<host-pid>-<ns>'`."""
  folder = tmp_path / 'eval_step_4'
  with pytest.raises(PermissionError) as raised:
    with scored_folders.writing(str(folder), INPUTS) as into:
      raise OSError(errno.EPERM, os.strerror(errno.EPERM), os.path.join(into, 'x.json'))
  assert raised.value.filename == str(folder) and not list(tmp_path.iterdir())
  with pytest.raises(OSError) as raised:  # Another file's error: as it was.
    with scored_folders.writing(str(folder), INPUTS):
      raise OSError(errno.EIO, os.strerror(errno.EIO), '/data/eval.csv')
  assert raised.value.filename == '/data/eval.csv'
