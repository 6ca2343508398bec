"""A pre-training workdir in a bucket (the GCS emulator): TensorBoard events written without
TensorFlow and readable while the run goes on; a tiny run through `python -m bertjax.main
--workdir=gs://...` in a separate process writes its checkpoints (orbax), vocab, config and
results there, and a second run resumes from them."""

import json

import numpy as np
import pretrain_runs
from tensorboard.backend.event_processing import event_accumulator

from bertjax import files
from bertjax.training import event_writer
from bertjax.training import summaries


def test_events_in_a_bucket_are_put_whole_and_read_by_tensorboard(gcs_bucket, tmp_path,
                                                                   monkeypatch):
  monkeypatch.setattr(event_writer, 'FLUSH_S', 3600.0)  # Only the first write and close put.
  writer = event_writer.EventWriter(f'{gcs_bucket}/run')
  assert writer.path.startswith(f'{gcs_bucket}/run/events.out.tfevents.')
  writer.write_hparams({'learning_rate': 1e-4, 'model.size': 'tiny'})  # Put at once.
  writer.write_scalars(1, {'train/loss': 4.0})  # Held until the next put.
  assert files.exists(writer.path) and summaries.read_scalars(f'{gcs_bucket}/run') == {}
  writer.flush()
  assert summaries.read_scalars(f'{gcs_bucket}/run') == {'train/loss': {1: 4.0}}
  writer.write_scalars(2, {'train/loss': 2.0, 'eval/f1': 0.5})
  writer.close()
  local = tmp_path / files.name(writer.path)
  local.write_bytes(files.read_bytes(writer.path))
  events = event_accumulator.EventAccumulator(str(local))
  events.Reload()
  assert sorted(events.Tags()['scalars']) == ['eval/f1', 'train/loss']
  assert [(e.step, e.value) for e in events.Scalars('train/loss')] == [(1, 4.0), (2, 2.0)]
  assert '_hparams_/session_start_info' in events.PluginTagToContent('hparams')
  assert summaries.read_scalars(f'{gcs_bucket}/run') == {
      'train/loss': {1: 4.0, 2: 2.0}, 'eval/f1': {2: 0.5}}


def test_a_long_run_in_a_bucket_puts_its_events_in_files_of_bounded_size(gcs_bucket,
                                                                          monkeypatch):
  """Each flush puts a remote event file whole: one file for the whole run grew with it (a
  month-long run's puts, MiBs every FLUSH_S, the loop waiting on each). Past ROLL_BYTES the
  writer goes on in a new file, and every step reads back once, in order."""
  monkeypatch.setattr(event_writer, 'FLUSH_S', 0.0)  # Every write puts the file.
  monkeypatch.setattr(event_writer, 'ROLL_BYTES', 2000, raising=False)
  puts, put = [], files.write_atomically
  monkeypatch.setattr(files, 'write_atomically',
                      lambda path, data: (puts.append(len(data)), put(path, data))[1])
  writer = event_writer.EventWriter(f'{gcs_bucket}/run', start_step=0)
  record = 0
  for step in range(1, 301):
    writer.write_scalars(step, {'train/loss': 1.0 / step, 'train/learning_rate': 1e-4})
    record = record or puts[-1] - puts[0]  # The bytes of one step's event.
  writer.close()
  assert sum(puts) > 3 * 2000 and max(puts) < 2000 + record, (max(puts), record)
  loss = summaries.read_scalars(f'{gcs_bucket}/run', 'train/loss')['train/loss']
  assert loss == {step: float(np.float32(1.0 / step)) for step in range(1, 301)}


def test_a_run_in_a_bucket_writes_everything_there_and_resumes(gcs_bucket, tmp_path,
                                                                tmp_path_factory):
  workdir = f'{gcs_bucket}/runs/tiny'
  config = pretrain_runs.fields(pretrain_runs.corpus_files(tmp_path_factory),
                                checkpoint__every_steps=2)
  env = pretrain_runs.environment(1, tmp_path_factory.getbasetemp() / 'jax-cache')
  log = tmp_path / 'run.log'
  pretrain_runs.run(pretrain_runs.command(workdir, 2, config), log, env)
  listed = files.walk_files(workdir)
  assert {'vocab.txt', 'config.json', 'eval_results.json'} <= set(listed), listed
  assert any(n.startswith('checkpoints/2/state/') for n in listed), listed
  assert not files.exists(f'{workdir}/.lock')  # Removed when the run ended.
  assert files.read_bytes(f'{workdir}/vocab.txt') == files.read_bytes(config['data.vocab_file'])
  assert json.loads(files.read_text(f'{workdir}/config.json'))['num_train_steps'] == 2
  assert set(summaries.read_scalars(workdir, ['train/loss'])['train/loss']) == {1, 2}

  # A second process resumes from the bucket's checkpoint and goes on to step 4.
  pretrain_runs.run(pretrain_runs.command(workdir, 4, config), log, env)
  assert 'restored step 2 from gs://' in log.read_text()
  listed = files.walk_files(workdir)
  assert 'config-resumed-at-2.json' in listed and any(
      n.startswith('checkpoints/4/state/') for n in listed), listed
  assert set(summaries.read_scalars(workdir, ['train/loss'])['train/loss']) == {1, 2, 3, 4}
