"""The readers' checkpoint path (predict, export, extract_features, init_from): digests
checked, a damaged newest step skipped without moving anything, a named step never replaced."""

import logging
import pathlib
import re
import shutil

import flax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from bertjax.training import checkpoint
from bertjax.training import checkpoint_damage
from bertjax.training import checkpoint_reader
from bertjax.training import checkpoint_step


@flax.struct.dataclass
class State:
  params: dict
  step: jnp.ndarray


def params_of(seed):
  rng = np.random.default_rng(seed)
  return {'dense': {'kernel': jnp.asarray(rng.normal(size=(64, 32)), jnp.float32),
                    'bias': jnp.asarray(rng.normal(size=(32,)), jnp.float32)}}


def save_steps(workdir, steps=(1, 2, 3)):
  config = ml_collections.ConfigDict(
      {'checkpoint': {'keep': 5, 'keep_best': 0, 'every_steps': 1}})
  mngr = checkpoint.manager(workdir, config, best_metric='acc')
  for step in steps:
    checkpoint.save(mngr, step, State(params_of(step), jnp.int32(step)),
                    {'step': step, 'examples_consumed': step * 4}, force=True)
  checkpoint.wait(mngr)
  mngr.close()
  return workdir / 'checkpoints'


def listing(directory):
  return sorted(str(p.relative_to(directory)) for p in directory.rglob('*'))


def largest_data_file(step_dir):
  return max((p for p in (step_dir / 'state').rglob('*') if p.is_file()),
             key=lambda p: p.stat().st_size)


def test_reads_the_newest_step_with_its_digests_checked(tmp_path):
  save_steps(tmp_path)
  read = checkpoint_reader.read(tmp_path)
  assert read.step == 3 and read.meta['examples_consumed'] == 12
  np.testing.assert_array_equal(read.params['dense']['kernel'], params_of(3)['dense']['kernel'])
  assert checkpoint_reader.read(tmp_path / 'checkpoints' / '2').step == 2
  assert checkpoint_reader.read(tmp_path, step=1).step == 1


@pytest.mark.parametrize('damage', ['flipped_bit', 'no_metadata', 'truncated_metadata', 'meta',
                                    'missing_data_file', 'copied_in', 'no_data_folder',
                                    'flipped_manifest_bit'])
def test_a_damaged_newest_step_is_skipped_and_nothing_is_moved(tmp_path, damage, caplog):
  directory = save_steps(tmp_path)
  step_dir = directory / '3'
  if damage == 'flipped_bit':
    victim = largest_data_file(step_dir)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x10
    victim.write_bytes(bytes(data))
  elif damage == 'no_metadata':
    (step_dir / 'state' / '_METADATA').unlink()
  elif damage == 'truncated_metadata':
    metadata = step_dir / 'state' / '_METADATA'
    metadata.write_bytes(metadata.read_bytes()[:40])
  elif damage == 'missing_data_file':
    largest_data_file(step_dir).unlink()
  elif damage == 'no_data_folder':  # OCDBT's data folder of the state, gone.
    shutil.rmtree(step_dir / 'state' / 'd')
  elif damage == 'flipped_manifest_bit':  # Its root manifest's data, where the tree is listed.
    victim = next((step_dir / 'state' / 'd').iterdir())
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x10
    victim.write_bytes(bytes(data))
  elif damage == 'copied_in':  # Another step's folder copied in under this name.
    shutil.rmtree(step_dir)
    shutil.copytree(directory / '1', step_dir)
  else:
    (step_dir / 'meta' / 'metadata').write_text('{"step": ')
  before = listing(directory)
  read = checkpoint_reader.read(tmp_path)
  assert read.step == 2
  np.testing.assert_array_equal(read.params['dense']['kernel'], params_of(2)['dense']['kernel'])
  assert 'checkpoints/3 cannot be read' in caplog.text
  assert listing(directory) == before  # A reader moves nothing: a live run may be writing.
  # A step the user names is never replaced by another.
  with pytest.raises(checkpoint_damage.DamagedCheckpointError, match='its other steps: 1, 2'):
    checkpoint_reader.read(tmp_path, step=3)


def test_missing_steps_and_empty_runs_say_what_exists(tmp_path):
  save_steps(tmp_path)
  with pytest.raises(FileNotFoundError, match='no checkpoint step 7; its steps: 1, 2, 3'):
    checkpoint_reader.read(tmp_path, step=7)
  (tmp_path / 'empty' / 'checkpoints').mkdir(parents=True)
  with pytest.raises(FileNotFoundError, match='holds no checkpoint') as error:
    checkpoint_reader.read(tmp_path / 'empty')
  assert 'init_from' not in str(error.value)
  (tmp_path / 'afile').write_text('x')
  with pytest.raises(ValueError, match='is a file'):
    checkpoint_reader.read(tmp_path / 'afile')


def test_a_step_deleted_while_read_sends_the_reader_to_the_newest(tmp_path, monkeypatch):
  directory = save_steps(tmp_path)
  read_step = checkpoint_step.read_step
  calls = []

  def deleted_by_a_live_run(step_dir, step):
    calls.append(step)
    if len(calls) == 1:  # The run's keep policy deletes step 3 as we read it, after saving 4.
      save_steps(tmp_path, steps=(4,))
      shutil.rmtree(step_dir)
      raise FileNotFoundError(f'{step_dir}/state/_METADATA')
    return read_step(step_dir, step)

  monkeypatch.setattr(checkpoint_step, 'read_step', deleted_by_a_live_run)
  assert checkpoint_reader.read(tmp_path).step == 4
  assert calls == [3, 4] and (directory / '2').is_dir()


class LiveRun:
  """A run training in the workdir now, saving every step with checkpoint.keep=1: each save
  deletes the step before it (orbax's retention), whoever is reading that one."""

  def __init__(self, workdir):
    self.mngr = checkpoint.manager(workdir, ml_collections.ConfigDict(
        {'checkpoint': {'keep': 1, 'keep_best': 0, 'every_steps': 1}}), best_metric='acc')
    self.saved = []

  def save(self, step):
    checkpoint.save(self.mngr, step, State(params_of(step), jnp.int32(step)),
                    {'step': step, 'examples_consumed': step * 4}, force=True)
    checkpoint.wait(self.mngr)
    self.saved.append(step)


def reading_races(monkeypatch, live, races, *, half_deleted=False):
  """The live run saves the next step (deleting the one read, or, `half_deleted`, leaving its
  folder with a file gone, as a delete in progress does) just before a reader reads a step,
  the first `races` times."""
  read_step = checkpoint_step.read_step

  def raced(step_dir, step):
    if len(live.saved) < races:
      kept = shutil.copytree(step_dir, f'{step_dir}.kept') if half_deleted else None
      live.save(step + 1)
      if kept:
        shutil.move(kept, step_dir)
        (pathlib.Path(step_dir) / 'state' / '_METADATA').unlink()
    return read_step(step_dir, step)

  monkeypatch.setattr(checkpoint_step, 'read_step', raced)


@pytest.mark.parametrize('half_deleted', [False, True], ids=['deleted', 'being_deleted'])
def test_a_reader_reads_the_newer_step_a_live_run_kept(tmp_path, monkeypatch, caplog,
                                                        half_deleted):
  # eval, predict or export on a live run's workdir: it listed [1], the run saved 2 and deleted
  # 1 (or was deleting it) before 1 was read. A step being deleted was reported as damage.
  save_steps(tmp_path, steps=(1,))
  live = LiveRun(tmp_path)
  reading_races(monkeypatch, live, races=1, half_deleted=half_deleted)
  with caplog.at_level(logging.WARNING):  # INFO may be off: absl's verbosity is per process.
    read = checkpoint_reader.read(tmp_path)
  assert live.saved == [2] and read.step == 2 and read.meta['step'] == 2
  np.testing.assert_array_equal(read.params['dense']['kernel'], params_of(2)['dense']['kernel'])
  assert 'cannot be read' not in caplog.text  # No damage said: the step was deleted.
  live.mngr.close()


@pytest.mark.parametrize('named', [False, True], ids=['newest', 'named'])
def test_a_step_a_live_run_keeps_deleting_is_a_race_not_damage(tmp_path, monkeypatch, named):
  # Newest: the run deletes each step as it is read, every time the reader looks again. Named
  # (step=1): a named step is never swapped for another; it is said to be gone.
  save_steps(tmp_path, steps=(1,))
  live = LiveRun(tmp_path)
  reading_races(monkeypatch, live, races=100)
  if named:
    with pytest.raises(FileNotFoundError, match='has no checkpoint step 1; its steps: 2'):
      checkpoint_reader.read(tmp_path, step=1)
    assert live.saved == [2]
  else:
    with pytest.raises(RuntimeError, match='kept disappearing while they were read'):
      checkpoint_reader.read(tmp_path)
    assert live.saved == [2, 3, 4]
  live.mngr.close()


def test_a_damaged_newest_step_beside_no_live_run_is_still_damage(tmp_path, caplog):
  # The race test above must not make damage a race: with no newer step appearing, a newest
  # step with a file missing is skipped as unreadable, with the warning naming it.
  save_steps(tmp_path, steps=(1, 2))
  (tmp_path / 'checkpoints' / '2' / 'state' / '_METADATA').unlink()
  with caplog.at_level(logging.WARNING):
    assert checkpoint_reader.read(tmp_path).step == 1
  assert 'checkpoints/2 cannot be read' in caplog.text


def test_every_damaged_step_is_one_clear_error(tmp_path):
  directory = save_steps(tmp_path, steps=(1, 2))
  for step in (1, 2):
    (directory / str(step) / 'state' / '_METADATA').unlink()
  with pytest.raises(checkpoint_damage.DamagedCheckpointError,
                     match=r'none of the checkpoints \[1, 2\]'):
    checkpoint_reader.read(tmp_path)


def test_a_readers_own_error_stops_the_read_and_names_the_cause(tmp_path, monkeypatch):
  save_steps(tmp_path)

  def denied(step_dir, step):
    raise PermissionError(f'{step_dir}/state: permission denied')

  monkeypatch.setattr(checkpoint_step, 'read_step', denied)
  with pytest.raises(RuntimeError, match='permission denied.*fix the cause'):
    checkpoint_reader.read(tmp_path)


def test_a_folder_that_holds_no_model_is_named_so_with_the_model_below_it(tmp_path):
  """Pass AL: the package folder above its model/, an empty folder and the parent of a run were
  each 'a run that saved none: train it first'."""
  (tmp_path / 'package' / 'model').mkdir(parents=True)
  (tmp_path / 'package' / 'model' / 'config.json').write_text('{}')
  (tmp_path / 'package' / '__pycache__').mkdir()
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{tmp_path}/package is not a model folder (no config.json with weights, no TF1 '
      f'checkpoint, no bertjax run\'s checkpoints/): the model is in {tmp_path}/package/model, '
      'pass that')):
    checkpoint_reader.read(tmp_path / 'package')
  (tmp_path / 'nothing').mkdir()
  with pytest.raises(FileNotFoundError, match='nothing is not a model folder .*: pass the folder '
                     'that holds one$'):
    checkpoint_reader.read(tmp_path / 'nothing')


def test_a_step_of_another_run_in_a_runs_checkpoints_is_refused(tmp_path):
  """Helper-180's pass (moved and copied runs): a step copied in from another run (another
  seed), or checkpoints/ swapped with another run's, was read (init_from, predict, export) and
  resumed as the run's without a word. Each save's meta names its run (checkpoint_step's
  run_for_save, kept in checkpoints_saved.json): a step naming another is refused, with the
  steps to move out; a step or run from before the record reads as before."""
  run = checkpoint_step.run_for_save(str(tmp_path))
  assert checkpoint_step.run_for_save(str(tmp_path)) == run  # Recorded once.
  config = ml_collections.ConfigDict(
      {'checkpoint': {'keep': 5, 'keep_best': 0, 'every_steps': 1}})
  mngr = checkpoint.manager(tmp_path, config, best_metric='acc')
  for step, saved_by in ((1, run), (2, None), (3, 'another-run'), (4, 'another-run')):
    checkpoint.save(mngr, step, State(params_of(step), jnp.int32(step)),
                    {'step': step, 'examples_consumed': step * 4} |
                    ({'run': saved_by} if saved_by else {}), force=True)
  checkpoint.wait(mngr)
  mngr.close()
  directory = tmp_path / 'checkpoints'
  said = (f'{directory}/4 was saved by another run than {tmp_path} (its meta names run '
          f'another-run; {tmp_path}/checkpoints_saved.json names run {run}): copied in from '
          "another run (another config or seed), or checkpoints/ swapped with another run's. "
          f'Move step(s) 3, 4 out of {directory} (then step 2, this run\'s newest, is read)')
  for path, step in ((tmp_path, None), (directory / '4', None), (tmp_path, 4)):
    with pytest.raises(ValueError, match='^' + re.escape(said)):
      checkpoint_reader.read(path, step)
  assert checkpoint_reader.read(tmp_path, step=2).step == 2  # Before the record: read.
  assert checkpoint_reader.read(tmp_path, step=1).step == 1
  with pytest.raises(ValueError, match=re.escape(f'{directory}/3 was saved by another run')):
    checkpoint_step.check_same_run(directory, 3)  # As a resume of step 3 checks it.
  checkpoint_step.check_same_run(directory, 1)
  aside = tmp_path / 'aside'
  aside.mkdir()
  shutil.move(directory / '4', aside / '4')  # Moved out, as said: read where it is.
  assert checkpoint_reader.read(aside / '4').step == 4


def test_a_run_resumed_by_a_bertjax_from_before_the_run_record_keeps_its_name(tmp_path):
  """A run saved today (steps naming it), resumed by 14e2d6a (2026-12-03: its saves name no run
  and it rewrote checkpoints_saved.json as {'newest_step': N}), then today again: the resume
  named it anew, and its own earlier steps were refused as another run's ('Move step(s) 30, 40
  out'). The name is the newest step's that names one."""
  run = checkpoint_step.run_for_save(str(tmp_path))
  config = ml_collections.ConfigDict(
      {'checkpoint': {'keep': 5, 'keep_best': 0, 'every_steps': 1}})
  mngr = checkpoint.manager(tmp_path, config, best_metric='acc')
  for step, saved_by in ((1, run), (2, run), (3, None)):  # 3: the older bertjax's save.
    checkpoint.save(mngr, step, State(params_of(step), jnp.int32(step)),
                    {'step': step, 'examples_consumed': step * 4} |
                    ({'run': saved_by} if saved_by else {}), force=True)
  checkpoint.wait(mngr)
  mngr.close()
  (tmp_path / 'checkpoints_saved.json').write_text('{\n "newest_step": 3\n}')  # As it wrote.
  assert checkpoint_step.run_for_save(str(tmp_path)) == run
  assert checkpoint_reader.read(tmp_path, step=1).step == 1
  checkpoint_step.check_same_run(tmp_path / 'checkpoints', 2)
