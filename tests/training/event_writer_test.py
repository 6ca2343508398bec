"""The TensorFlow-free event writer: TensorBoard and TensorFlow read back what it wrote."""

import errno
import json
import os
import pathlib
import subprocess
import sys
from unittest import mock

import ml_collections
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

from bertjax import files
from bertjax.records import tfrecord
from bertjax.training import event_writer
from bertjax.training import loop
from bertjax.training import sharding
from bertjax.training import summaries


def _write_run(logdir):
  writer = event_writer.EventWriter(str(logdir))
  writer.write_hparams({'learning_rate': 1e-4, 'model.size': 'mini', 'pack': 4, 'bf16': True})
  for step in (1, 2, 3):
    writer.write_scalars(step, {'train/loss': 4.0 / step, 'train/mfu': np.float32(0.25 * step)})
  writer.write_scalars(3, {'eval/f1': 0.75})
  writer.close()
  return writer.path


def test_tensorflow_reads_back_every_scalar_at_its_step(tmp_path):
  _write_run(tmp_path)
  scalars = summaries.read_scalars(str(tmp_path))
  assert set(scalars) == {'train/loss', 'train/mfu', 'eval/f1'}
  np.testing.assert_allclose([scalars['train/loss'][s] for s in (1, 2, 3)], [4.0, 2.0, 4 / 3],
                             rtol=1e-6)
  assert scalars['train/mfu'] == {1: 0.25, 2: 0.5, 3: 0.75}
  assert scalars['eval/f1'] == {3: 0.75}


def test_tensorboard_shows_the_scalars_and_the_hparams(tmp_path):
  path = _write_run(tmp_path)
  events = event_accumulator.EventAccumulator(path)
  events.Reload()
  assert sorted(events.Tags()['scalars']) == ['eval/f1', 'train/loss', 'train/mfu']
  assert [(e.step, round(e.value, 6)) for e in events.Scalars('train/loss')] == [
      (1, 4.0), (2, 2.0), (3, round(4 / 3, 6))]
  content = events.PluginTagToContent('hparams')
  session = plugin_data_pb2.HParamsPluginData.FromString(
      content['_hparams_/session_start_info']).session_start_info
  assert session.hparams['learning_rate'].number_value == 1e-4
  assert session.hparams['model.size'].string_value == 'mini'
  assert session.hparams['pack'].number_value == 4
  assert session.hparams['bf16'].bool_value


def test_two_writers_in_one_logdir_write_two_files(tmp_path):
  first, second = _write_run(tmp_path), _write_run(tmp_path)
  assert first != second
  assert summaries.read_scalars(str(tmp_path))['eval/f1'] == {3: 0.75}


def test_reading_a_path_that_holds_no_run_or_a_tag_it_lacks_is_refused(tmp_path):
  """Pass: a typo'd workdir, a file, the run's checkpoints/ and tags=['train/los'] all read as
  {}, and tags='train/loss' as the tags 't', 'r', 'a', ..."""
  _write_run(tmp_path)
  (tmp_path / 'checkpoints').mkdir()
  (tmp_path / 'notes.txt').write_text('x')
  with pytest.raises(FileNotFoundError, match='typo does not exist: pass the workdir of a run$'):
    summaries.read_scalars(str(tmp_path / 'typo'))
  with pytest.raises(ValueError, match='notes.txt is a file: pass the workdir of a run'):
    summaries.read_scalars(str(tmp_path / 'notes.txt'))
  with pytest.raises(FileNotFoundError, match=r'checkpoints holds no TensorBoard events '
                     r"\(events.out.tfevents.\*\): pass a run's workdir, which holds them$"):
    summaries.read_scalars(str(tmp_path / 'checkpoints'))
  with pytest.raises(ValueError, match=r"hold no scalar 'train/los': pass one of its 3 tags "
                     r'\(closest: train/loss, train/mfu\)$'):
    summaries.read_scalars(str(tmp_path), ['train/los'])
  one = summaries.read_scalars(str(tmp_path), 'train/loss')  # One tag, not its letters.
  assert list(one) == ['train/loss'] and one['train/loss'] == pytest.approx({1: 4, 2: 2, 3: 4 / 3})


def test_a_live_run_not_at_a_tag_yet_reads_without_it(tmp_path):
  """A section not written yet (eval/ before the first evaluation), or no scalar at all yet, is
  a live run's normal state: no error, as for a tag all of whose steps a resume dropped."""
  writer = event_writer.EventWriter(str(tmp_path))
  writer.write_hparams({'lr': 1.0})
  writer.flush()
  assert summaries.read_scalars(str(tmp_path), ['train/loss', 'eval/f1']) == {}
  writer.write_scalars(1, {'train/loss': 3.0})
  writer.close()
  assert summaries.read_scalars(str(tmp_path), ['train/loss', 'eval/f1']) == {
      'train/loss': {1: 3.0}}
  resumed = event_writer.EventWriter(str(tmp_path), start_step=0)
  resumed.close()
  assert summaries.read_scalars(str(tmp_path), ['train/loss']) == {}


def test_writing_events_imports_no_tensorflow(tmp_path):
  code = ('import sys; from bertjax.training import event_writer; '
          f'w = event_writer.EventWriter({str(tmp_path)!r}); w.write_scalars(1, {{"a": 1.0}}); '
          'w.write_hparams({"b": 2}); w.close(); print("tensorflow" in sys.modules)')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == 'False'


class _FillingFile:
  """A file on a disk that fills up: after `room` bytes, writes store what fits, then fail."""

  def __init__(self, file, room):
    self._file, self._room = file, room

  def write(self, data):
    if self._room <= 0:
      raise OSError(errno.ENOSPC, 'No space left on device')
    written = self._file.write(bytes(data[:self._room]))
    self._room -= written
    return written

  def __getattr__(self, name):
    return getattr(self._file, name)


def test_a_full_disk_stops_the_events_with_a_warning_and_leaves_whole_records(tmp_path):
  writer = event_writer.EventWriter(str(tmp_path))
  writer.write_scalars(1, {'train/loss': 3.0})
  size = os.path.getsize(writer.path)
  writer._file = _FillingFile(writer._file, room=10)  # pylint: disable=protected-access
  with mock.patch.object(event_writer.logging, 'warning') as warning:
    writer.write_scalars(2, {'train/loss': 2.0})  # 10 bytes of it fit, then the disk is full.
    writer.write_scalars(3, {'train/loss': 1.0})
    writer.write_hparams({'lr': 1.0})
  writer.close()
  assert warning.call_count == 1 and 'No space left' in warning.call_args.args[-1].strerror
  assert os.path.getsize(writer.path) == size  # Cut back to the last whole record.
  assert summaries.read_scalars(str(tmp_path)) == {'train/loss': {1: 3.0}}


@pytest.mark.parametrize('resumed_to', [12, 8])
def test_a_resumed_run_shows_each_step_once_with_its_own_values(tmp_path, resumed_to):
  """A run killed after step 10 resumes from its checkpoint at step 5 (the loop's start_step):
  TensorBoard shows steps 6.. once, the resumed run's, and none of the killed run's past where
  the resumed one has got to."""
  killed = event_writer.EventWriter(str(tmp_path))
  killed.write_hparams({'lr': 1.0})
  for step in range(1, 11):
    killed.write_scalars(step, {'train/loss': float(step)})
  killed.close()
  resumed = event_writer.EventWriter(str(tmp_path), start_step=5)
  resumed.write_hparams({'lr': 1.0})
  for step in range(6, resumed_to + 1):
    resumed.write_scalars(step, {'train/loss': 100.0 + step})
  resumed.close()
  want = [(s, float(s)) for s in range(1, 6)] + [(s, 100.0 + s) for s in range(6, resumed_to + 1)]
  events = event_accumulator.EventAccumulator(str(tmp_path))  # purge_orphaned_data=True
  events.Reload()
  assert [(e.step, e.value) for e in events.Scalars('train/loss')] == want
  assert '_hparams_/session_start_info' in events.PluginTagToContent('hparams')  # At step 0.
  assert sorted(summaries.read_scalars(str(tmp_path))['train/loss'].items()) == want
  # TensorBoard's default reader ignores the START: every point of every file, the last value
  # of a step read twice (pass of 2026-12-02: the killed run's steps 9 and 10 showed there).
  shown = {}
  for path in sorted(tmp_path.glob('events.out.tfevents.*')):
    for record in tfrecord.read_records(path.read_bytes()):
      event = event_pb2.Event.FromString(record)
      for value in event.summary.value:
        if value.tag == 'train/loss':
          shown[event.step] = value.simple_value
  assert sorted(shown.items()) == want
  # The killed run's points past the checkpoint are kept, as a run of their own (a failed
  # resume loses nothing; a divergence that killed the run stays in view).
  [folder] = (tmp_path / 'superseded').glob('after_step_5.*')
  superseded = event_accumulator.EventAccumulator(str(folder))
  superseded.Reload()
  assert [(e.step, e.value) for e in superseded.Scalars('train/loss')] == [
      (s, float(s)) for s in range(6, 11)]


def test_the_hparams_hold_the_mesh_used_and_config_json_the_one_asked(tmp_path):
  """mesh.data=-1 (all devices left) was all TensorBoard showed of the mesh: runs on 8 and on
  64 devices looked alike."""
  config = ml_collections.ConfigDict(
      {'mesh': {'data': -1, 'fsdp': 2, 'tensor': 1}, 'learning_rate': 1e-4})
  mesh = sharding.make_mesh(config.mesh)
  writer = event_writer.EventWriter(str(tmp_path))
  loop._write_config(config, str(tmp_path), writer, None, mesh)  # pylint: disable=protected-access
  writer.close()
  events = event_accumulator.EventAccumulator(writer.path)
  events.Reload()
  session = plugin_data_pb2.HParamsPluginData.FromString(
      events.PluginTagToContent('hparams')['_hparams_/session_start_info']).session_start_info
  assert {k: session.hparams[k].number_value for k in ('mesh.data', 'mesh.fsdp', 'mesh.tensor',
                                                       'learning_rate')} == {
      'mesh.data': 4, 'mesh.fsdp': 2, 'mesh.tensor': 1, 'learning_rate': 1e-4}
  assert json.loads((tmp_path / 'config.json').read_text())['mesh']['data'] == -1


def test_a_resume_that_cannot_keep_the_replaced_points_leaves_them_where_they_were(
    tmp_path, monkeypatch):
  killed = event_writer.EventWriter(str(tmp_path))
  for step in range(1, 11):
    killed.write_scalars(step, {'train/loss': float(step)})
  killed.close()
  real_write = files.write_atomically

  def full_disk(path, data):
    if '/superseded/' in path:
      raise OSError(28, 'No space left on device')
    real_write(path, data)

  monkeypatch.setattr(files, 'write_atomically', full_disk)
  event_writer.EventWriter(str(tmp_path), start_step=5).close()
  assert not list(tmp_path.glob('superseded/**/events.out.tfevents.*'))
  kept = [event_pb2.Event.FromString(r).step for r in tfrecord.read_records(
      pathlib.Path(killed.path).read_bytes())]
  assert max(kept) == 10  # Not rewritten: its points past step 5 are all still there.
