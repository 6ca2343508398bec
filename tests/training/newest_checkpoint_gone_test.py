"""A run whose newest checkpoints are gone while older ones remain (run_files.lost_checkpoints,
which loop.run calls before anything is written): warned, never resumed from an older step
without a word."""

import json

import log_records

from bertjax.training import run_files


def _run(tmp_path, steps, saved=None, record_text=None):
  for step in steps:
    (tmp_path / 'checkpoints' / str(step)).mkdir(parents=True)
  if saved is not None:
    record_text = json.dumps({'newest_step': saved})
  if record_text is not None:
    (tmp_path / 'checkpoints_saved.json').write_text(record_text)
  return tmp_path


def test_a_deleted_newest_checkpoint_is_warned(tmp_path, monkeypatch):
  """Hostile pass A, 8: with checkpoints/8 deleted (the record says 8), the rerun restored
  step 6 and trained steps 7 and 8 again with only 'restored step 6'."""
  said = log_records.recorded_warnings(monkeypatch, run_files)
  workdir = _run(tmp_path, [4, 6], saved=8)
  assert run_files.lost_checkpoints(str(workdir)) == ''  # Resumes: steps remain.
  assert said == [
      f'{workdir} saved checkpoints up to step 8 (checkpoints_saved.json) but '
      f'{workdir}/checkpoints holds none after step 6: they were deleted or moved (by hand, a '
      'cleanup script, a copy of the workdir made before them), so resuming from step 6 trains '
      '2 steps again. To resume from step 8, stop the run, put its checkpoint back and rerun; '
      'if it was removed on purpose, nothing to do']


def test_steps_the_run_removed_itself_or_moved_aside_are_not_warned(tmp_path, monkeypatch):
  said = log_records.recorded_warnings(monkeypatch, run_files)
  # Older steps removed by checkpoint.keep: the newest is there.
  assert run_files.lost_checkpoints(str(_run(tmp_path / 'kept', [8], saved=8))) == ''
  # The record lags a save (written at the next save's start and at the run's end).
  assert run_files.lost_checkpoints(str(_run(tmp_path / 'lag', [6, 8], saved=6))) == ''
  # The newest moved aside as unreadable: the restore that moved it said so.
  aside = _run(tmp_path / 'aside', [6], saved=8)
  (aside / 'checkpoints' / '8.unreadable-1700000000').mkdir()
  assert run_files.lost_checkpoints(str(aside)) == ''
  # No record, or a damaged one (the next save rewrites it): the steps present resume.
  assert run_files.lost_checkpoints(str(_run(tmp_path / 'none', [6]))) == ''
  for i, text in enumerate(('{oops', '[19]', '{"newest_step": "8"}')):
    assert run_files.lost_checkpoints(str(_run(tmp_path / f'bad{i}', [6], record_text=text))) == ''
  assert said == []


def test_a_reader_of_the_newest_step_is_told_newer_ones_are_gone(tmp_path, monkeypatch):
  """Session 54's export pass: with checkpoints/6 deleted (the record says 6), export (and
  every reader of the newest step) read step 3 with no word; a resume was warned."""
  said = log_records.recorded_warnings(monkeypatch, run_files)
  workdir = _run(tmp_path / 'run', [3], saved=6)
  run_files.say_newest_gone_to_reader(str(workdir), 3)
  assert said == [
      f'{workdir} saved checkpoints up to step 6 (checkpoints_saved.json) but '
      f'{workdir}/checkpoints holds none after step 3: they were deleted or moved, and step 3 is '
      'read; put them back to read the newest']
  said.clear()
  run_files.say_newest_gone_to_reader(str(_run(tmp_path / 'kept', [3, 6], saved=6)), 6)
  assert said == []
