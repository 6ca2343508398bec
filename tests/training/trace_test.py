"""progress.Trace: the loop's profiler trace of the steps a config asks for, where TensorBoard's
profile tab finds it (a gs:// workdir's too), never of the step a process compiles."""

import glob
import logging as std_logging
import os
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import pytest

from bertjax import files
from bertjax.training import progress


def _config(steps, start):
  return ml_collections.ConfigDict(dict(profile_steps=steps, profile_start_step=start))


def _run(trace, start_step, total_steps):
  """The loop's calls around each step, on a small jitted function."""
  f = jax.jit(lambda x: jnp.tanh(x @ x))
  x = jnp.ones((32, 32))
  try:
    for step in range(start_step, total_steps):
      trace.before(step)
      with jax.profiler.StepTraceAnnotation('train', step_num=step):
        x = f(x)
      trace.after(step + 1, x)
  finally:
    trace.stop()


def _traced_steps(path):
  """The step numbers of the 'train' annotations in one .xplane.pb."""
  data = jax.profiler.ProfileData.from_file(path)
  return sorted(dict(e.stats)['step_num'] for plane in data.planes for line in plane.lines
                for e in line.events if e.name == 'train')


def test_the_steps_asked_for_are_traced_beside_the_scalars(tmp_path):
  _run(progress.Trace(_config(2, 3), str(tmp_path), 0, 10), 0, 10)
  (path,) = glob.glob(str(tmp_path / 'plugins/profile/*/*.xplane.pb'))
  assert _traced_steps(path) == [3, 4]  # The 4th and 5th updates: after step 3 is done.


def test_a_resumed_run_traces_what_is_left_of_the_window_after_its_compiling_step(tmp_path,
                                                                                  caplog):
  with caplog.at_level(std_logging.INFO, logger='absl'):
    _run(progress.Trace(_config(5, 3), str(tmp_path), 5, 12), 5, 12)  # Window: steps 3-7.
  (path,) = glob.glob(str(tmp_path / 'plugins/profile/*/*.xplane.pb'))
  assert _traced_steps(path) == [6, 7]
  assert 'profiler trace of updates 7-8: ' in caplog.text  # Updates count from 1.


def test_a_run_resumed_past_the_window_traces_nothing(tmp_path, caplog):
  with caplog.at_level(std_logging.INFO, logger='absl'):
    _run(progress.Trace(_config(2, 3), str(tmp_path), 7, 12), 7, 12)
  assert not (tmp_path / 'plugins').exists()
  assert "no profiler trace: its updates 4-5 came before this run's first" in caplog.text


def test_a_device_error_while_waiting_is_raised_with_the_trace_closed(tmp_path, monkeypatch):
  def failing(_):
    raise jax.errors.JaxRuntimeError('INTERNAL: device lost')

  trace = progress.Trace(_config(1, 1), str(tmp_path), 0, 4)
  monkeypatch.setattr(jax, 'block_until_ready', failing)
  with pytest.raises(jax.errors.JaxRuntimeError, match='device lost'):
    _run(trace, 0, 4)
  monkeypatch.undo()
  assert glob.glob(str(tmp_path / 'plugins/profile/*/*.xplane.pb'))  # Written, and closed:
  jax.profiler.start_trace(str(tmp_path / 'next'))  # a new trace can start.
  jax.profiler.stop_trace()


def test_a_window_cut_by_the_end_is_closed_with_what_ran(tmp_path, caplog):
  with caplog.at_level(std_logging.INFO, logger='absl'):
    _run(progress.Trace(_config(5, 3), str(tmp_path), 0, 6), 0, 6)
  (path,) = glob.glob(str(tmp_path / 'plugins/profile/*/*.xplane.pb'))
  assert _traced_steps(path) == [3, 4, 5]
  assert 'profiler trace of updates 4-6: ' in caplog.text  # What ran, not what was asked.


def test_a_window_past_the_end_says_so(tmp_path, caplog):
  with caplog.at_level(std_logging.WARNING):
    _run(progress.Trace(_config(2, 10), str(tmp_path), 0, 8), 0, 8)
  assert not (tmp_path / 'plugins').exists()
  assert 'no profiler trace: it would start after step 10, and this run ends at step 8' in (
      caplog.text)


def test_no_trace_unless_asked(tmp_path):
  _run(progress.Trace(_config(0, 0), str(tmp_path), 0, 4), 0, 4)
  assert not os.listdir(tmp_path)


def test_a_bucket_workdir_gets_the_trace_copied(gcs_bucket, tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))  # Where the trace is written first.
  workdir = f'{gcs_bucket}/run'
  _run(progress.Trace(_config(2, 1), workdir, 0, 4), 0, 4)
  (name,) = [n for n in files.walk_files(workdir) if n.endswith('.xplane.pb')]
  assert name.startswith('plugins/profile/'), name
  local = tmp_path / 'trace.xplane.pb'
  local.write_bytes(files.read_bytes(f'{workdir}/{name}'))
  assert _traced_steps(str(local)) == [1, 2]
  assert [p.name for p in tmp_path.iterdir()] == ['trace.xplane.pb']  # The local copy: gone.


def test_a_trace_already_running_is_left_alone_and_training_goes_on(tmp_path, caplog):
  jax.profiler.start_trace(str(tmp_path / 'notebook'))  # A notebook's own trace.
  try:
    with caplog.at_level(std_logging.WARNING):
      _run(progress.Trace(_config(2, 1), str(tmp_path / 'run'), 0, 4), 0, 4)
  finally:
    jax.profiler.stop_trace()
  assert 'no profiler trace: it did not start' in caplog.text
  assert not (tmp_path / 'run').exists()
  assert glob.glob(str(tmp_path / 'notebook/plugins/profile/*/*.xplane.pb'))  # Its own, whole.


def test_a_trace_that_cannot_be_written_warns_and_training_goes_on(tmp_path, caplog,
                                                                  monkeypatch):
  stop = jax.profiler.stop_trace

  def full_disk():
    stop()
    raise jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: No space left on device')

  monkeypatch.setattr(jax.profiler, 'stop_trace', full_disk)
  with caplog.at_level(std_logging.WARNING):
    _run(progress.Trace(_config(1, 1), str(tmp_path), 0, 4), 0, 4)  # Steps after it run.
  assert 'the profiler trace was not written to' in caplog.text
  assert 'No space left on device' in caplog.text


def test_a_failed_copy_to_the_bucket_warns_and_leaves_no_local_folder(gcs_bucket, tmp_path,
                                                                      monkeypatch, caplog):
  def failing(*_):
    raise ValueError('HttpError 503')  # gcsfs's errors are not OSErrors.

  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
  monkeypatch.setattr(files, 'copy_tree', failing)
  with caplog.at_level(std_logging.WARNING):
    _run(progress.Trace(_config(2, 1), f'{gcs_bucket}/run', 0, 4), 0, 4)  # Steps after it run.
  assert 'the profiler trace was not copied to' in caplog.text and 'HttpError 503' in caplog.text
  assert not os.listdir(tmp_path)
