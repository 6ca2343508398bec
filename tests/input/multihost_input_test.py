"""Two real processes (jax.distributed on 127.0.0.1, gloo CPU collectives, 4 CPU devices each).

Each process runs this file as a worker: it reads its share of small TFRecord fixtures with the
pre-training and eval pipelines, resumes at an offset, builds global arrays over an 8-device
mesh spanning both processes and reduces them with a jitted collective; it writes what it saw
to JSON and the test compares the two processes' views.
"""

import json
import pathlib
import sys

import numpy as np
import pytest
import two_processes

SIZES = (5, 9, 3, 7, 11, 6)  # train-*: host 0 reads files 0, 2, 4 (19 examples), host 1 22.
ONE_FILE = 13  # one-*: a single file, so both hosts read it and keep alternate examples.
GLOBAL_BATCH, BATCHES, RESUME_STEP = 4, 30, 7
SEQ, PRED = 16, 4
TIMEOUT_S = 240


def _write_fixtures(folder: pathlib.Path):
  import pretraining_records

  def write(path, ids):
    pretraining_records.write(path, [pretraining_records.static_row(i, SEQ, PRED) for i in ids])

  start = 0
  for j, size in enumerate(SIZES):
    write(folder / f'train-{j}.tfrecord', range(start, start + size))
    start += size
  write(folder / 'one-0.tfrecord', range(ONE_FILE))
  for j, size in enumerate(SIZES[:4]):  # damaged-1, host 1's, cut in its last record.
    write(folder / f'damaged-{j}.tfrecord', range(size))
  cut = folder / 'damaged-1.tfrecord'
  cut.write_bytes(cut.read_bytes()[:-10])
  write(folder / 'empty-0.tfrecord', range(4))  # empty-1, host 1's share, holds no record.
  write(folder / 'empty-1.tfrecord', [])


def _worker(process_id: int, port: int, folder: pathlib.Path):
  """One host: reads its share and writes result-<process_id>.json."""
  import jax

  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}', num_processes=2,
                             process_id=process_id, initialization_timeout=120)
  from jax.experimental import multihost_utils

  from bertjax.input import global_batch
  from bertjax.input import input_pipeline

  assert (jax.process_count(), jax.device_count(), jax.local_device_count()) == (2, 8, 4)
  args = dict(global_batch_size=GLOBAL_BATCH, max_seq_length=SEQ, max_predictions_per_seq=PRED)
  order = dict(seed=5, num_lanes=2, shuffle_window=4)

  def ids(dataset, n):
    return [b['input_ids'][:, 1].tolist() for b in dataset.take(n).as_numpy_iterator()]

  result = {
      'train': ids(input_pipeline.pretrain_dataset(str(folder / 'train-*'), **args, **order),
                   BATCHES),
      'resumed': ids(input_pipeline.pretrain_dataset(
          str(folder / 'train-*'), start_example=RESUME_STEP * GLOBAL_BATCH, **args, **order),
                     BATCHES - RESUME_STEP),
      'one_file': ids(input_pipeline.pretrain_dataset(str(folder / 'one-*'), **args, **order),
                      BATCHES),
  }
  evaluation = input_pipeline.eval_dataset(str(folder / 'train-*'), **args)
  result['eval_batches'] = len(evaluation)
  result['eval'] = [i for b in evaluation.as_numpy_iterator()
                    for i, w in zip(b['input_ids'][:, 1].tolist(), b['example_weight'], strict=True)
                    if w]

  mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 2, 2), ('data', 'fsdp', 'tensor'))
  host_batch = next(input_pipeline.pretrain_dataset(str(folder / 'train-*'), **args, **order)
                    .as_numpy_iterator())
  arrays = global_batch.make_global_batch(host_batch, mesh, ('data', 'fsdp'))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  total = jax.jit(lambda x: x[:, 1].sum(), out_shardings=replicated)(arrays['input_ids'])
  result['global_shape'] = list(arrays['input_ids'].shape)
  result['global_sum'] = int(total)
  result['global_ids'] = np.asarray(
      multihost_utils.process_allgather(arrays['input_ids'][:, 1], tiled=True)).tolist()
  result.update(_counted_together(folder), folder=str(folder))
  (folder / f'result-{process_id}.json').write_text(json.dumps(result))
  jax.distributed.shutdown()


def _counted_together(folder: pathlib.Path) -> dict:
  """Each host counts its share of files without a report (as pre-training's start does), the
  counts kept in one workdir; a file damaged in host 1's share stops both hosts."""
  from bertjax.input import input_pipeline
  from bertjax.input import record_check
  from bertjax.training import hosts

  spec = record_check.feature_spec(SEQ, PRED)

  def counted(pattern):
    try:
      with hosts.fail_together():
        checked = input_pipeline.counted(str(folder / pattern), spec, masked=True,
                                         every_host_file=False, workdir=str(folder / 'run'))
    except ValueError as e:
      return str(e)
    return sorted(checked.record_counts.values())

  return {'counted': counted('train-*'), 'damaged': counted('damaged-*'),
          **_checked_together(folder)}


def _checked_together(folder: pathlib.Path) -> dict:
  """pre-training's start on two hosts: its data check (a share without examples, a pattern
  one host cannot match, hosts matching other files) and the embedded corpus process 0 makes
  (its writing failing) stop both hosts with one error."""
  import jax

  from bertjax import pretrain
  from bertjax.pretraining_data import writer
  from bertjax.training import hosts
  from configs import pretrain as pretrain_config

  config = pretrain_config.get_config('size=tiny')

  def checked(patterns):
    phase = pretrain.Phase(0, 10, SEQ, PRED, str(folder / patterns[jax.process_index()]), None)
    try:
      pretrain.check_data(config, phase, '', '')
    except ValueError as e:
      return str(e)
    except FileNotFoundError as e:
      return f'FileNotFoundError: {e}'
    return 'ok'

  result = {'empty_share': checked(['empty-*'] * 2),
            'unseen': checked(['train-*', 'nowhere-*']),
            'other_files': checked(['train-*', 'train-[0-4]*'])}

  def fail(*args, **kwargs):
    raise OSError(28, 'No space left on device')

  real = writer.create
  writer.create = fail if jax.process_index() == 0 else real
  try:
    with hosts.fail_together():  # As pretrain._train_and_evaluate asks for the phases.
      pretrain.phases(config, str(folder / 'embedded-run'))
    result['embedded'] = 'ok'
  except (ValueError, OSError) as e:
    result['embedded'] = str(e)
  finally:
    writer.create = real
  return result


@pytest.fixture(scope='module')
def results(tmp_path_factory):
  folder = tmp_path_factory.mktemp('multihost')
  _write_fixtures(folder)
  return two_processes.run_workers(__file__, folder, devices=4, timeout_s=TIMEOUT_S)


def _flat(batches):
  return [i for batch in batches for i in batch]


def test_every_example_once_per_epoch_across_two_processes(results):
  lengths = (sum(SIZES[0::2]), sum(SIZES[1::2]))
  epoch = [_flat(r['train'])[:n] for r, n in zip(results, lengths, strict=True)]
  assert sorted(epoch[0] + epoch[1]) == list(range(sum(SIZES)))
  # Fewer files than hosts: both read the file and keep alternate examples.
  one_file = [_flat(r['one_file'])[:n] for r, n in zip(results, (7, 6), strict=True)]
  assert sorted(one_file[0] + one_file[1]) == list(range(ONE_FILE))


def test_resume_matches_uninterrupted_in_each_process(results):
  for r in results:
    assert r['resumed'] == r['train'][RESUME_STEP:]


def test_eval_covers_every_example_once_in_lockstep(results):
  assert results[0]['eval_batches'] == results[1]['eval_batches'] == 11  # ceil(22 / 2).
  assert sorted(results[0]['eval'] + results[1]['eval']) == list(range(sum(SIZES)))


def test_global_arrays_span_both_processes(results):
  first = [r['train'][0] for r in results]
  for r in results:
    assert r['global_shape'] == [GLOBAL_BATCH, SEQ]
    assert r['global_ids'] == first[0] + first[1]  # Process 0 holds the first rows.
    assert r['global_sum'] == sum(first[0] + first[1])


def test_each_host_counts_its_share_into_the_workdir_and_a_damaged_file_stops_both(results):
  assert results[0]['counted'] == sorted(SIZES[0::2])
  assert results[1]['counted'] == sorted(SIZES[1::2])
  said = results[1]['damaged']
  assert 'damaged-1.tfrecord: not a readable TFRecord file (truncated record at' in said, said
  assert results[0]['damaged'] == f'process 1 of this job stopped (process 1: {said})'
  folder = pathlib.Path(results[0]['folder'])
  kept = {p.name: json.loads(p.read_text()) for p in (folder / 'run').iterdir()}
  assert sorted(kept) == ['record_counts.0.json', 'record_counts.1.json']
  # Host 0 also counted its share of the damaged set (damaged-0 and -2); host 1 stopped at it.
  assert sorted(kept['record_counts.0.json'].values()) == sorted(SIZES[0::2] + SIZES[0:3:2])
  assert sorted(kept['record_counts.1.json'].values()) == sorted(SIZES[1::2])


def test_a_start_that_fails_on_one_host_stops_both_with_one_error(results):
  said = results[1]['empty_share']
  assert said.startswith("host 1 has no examples to read from '") and 'empty-1.tfrecord' in said
  assert results[0]['empty_share'] == f'process 1 of this job stopped (process 1: {said})'
  said = results[1]['unseen']
  assert said.startswith('FileNotFoundError: config.data.train_files: no files match') and (
      'nowhere-*' in said), said
  assert results[0]['unseen'].startswith('process 1 of this job stopped (process 1: '
                                         'FileNotFoundError: config.data.train_files: no files '
                                         'match')
  for result in results:
    assert result['other_files'].startswith('data.train_files/eval_files reads differently on '
                                            'the hosts (process 0: 6 files'), result
    assert 'every host must match the same files' in result['other_files']
  assert results[0]['embedded'] == '[Errno 28] No space left on device'
  assert results[1]['embedded'] == ('process 0 of this job stopped (process 0: [Errno 28] No '
                                    'space left on device)')


if __name__ == '__main__':
  _worker(int(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3]))


def test_fewer_files_than_hosts_is_said_once_not_at_every_eval(monkeypatch):
  """Pass AG: a two-process run said 'only 1 files for 2 hosts' at every eval, of the eval
  split bertjax wrote itself."""
  import log_records  # noqa: PLC0415

  from bertjax.input import input_pipeline  # noqa: PLC0415
  said = log_records.recorded_warnings(monkeypatch, input_pipeline)
  monkeypatch.setattr(input_pipeline, '_SAID', set())
  for _ in range(3):
    assert input_pipeline._host_share(['e-0'], 1, 2) == (['e-0'], 2, 1)  # pylint: disable=protected-access
  assert said == ['only 1 file(s) for 2 hosts: every host reads every file and keeps every 2-th '
                  'example; write at least one file per host to avoid the extra reading']


def test_an_eval_sets_fewer_files_than_hosts_is_information_not_a_warning(monkeypatch):
  """Console pass 14: two hosts warned 'only 1 file(s) for 2 hosts ... write at least one file
  per host' of the embedded corpus's one eval file, which the user cannot split (and every
  host showed it: the other hosts show warnings)."""
  import log_records  # noqa: PLC0415

  from bertjax.input import input_pipeline  # noqa: PLC0415
  warned = log_records.recorded_warnings(monkeypatch, input_pipeline)
  monkeypatch.setattr(input_pipeline, '_SAID', set())
  share = input_pipeline._host_share(['e-0'], 0, 2, eval_set=True)  # pylint: disable=protected-access
  assert share == (['e-0'], 2, 0)
  assert warned == []
  informed = log_records.recorded_warnings(monkeypatch, input_pipeline, 'info')
  monkeypatch.setattr(input_pipeline, '_SAID', set())
  input_pipeline._host_share(['e-0'], 0, 2, eval_set=True)  # pylint: disable=protected-access
  assert informed == ['the eval set has 1 file(s) for 2 hosts: every host reads all of it at '
                      'each eval and keeps every 2-th example']
