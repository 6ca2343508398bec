"""Input pipeline: exact read order, exactly-once epochs per host, resume, masking, eval, arrays.

Fixtures are small TFRecord files written to tmp with each example's id in input_ids[1] (plus
1000 for unmasked instances, so ids are never special tokens), so coverage can be checked.
Hosts are simulated by passing process_index/process_count; multihost_input_test.py runs two
real processes.
"""

import functools

import jax
import numpy as np
import pretraining_records
import pytest
import tensorflow as tf

from bertjax.input import global_batch
from bertjax.input import input_pipeline
from bertjax.input import masking_tf
from bertjax.input import read_order
from bertjax.input import record_check

SEQ, PRED = 16, 4
SIZES = (5, 9, 3, 7, 11, 2, 6)  # Uneven on purpose; 43 examples.
TOTAL = sum(SIZES)
ORDER_ARGS = dict(seed=3, num_lanes=3, shuffle_window=5)  # Small, so lanes and windows matter.
MASKING = masking_tf.MaskingConfig(vocab_size=30522, mask_id=103, cls_id=101, sep_id=102)
ID_OFFSET = 1000


def _static_row(i, seq=SEQ, pred=PRED):
  return pretraining_records.static_row(i, seq, pred)


@pytest.fixture(scope='module')
def static_dir(tmp_path_factory):
  """Seven static-masking files of uneven sizes; example i has input_ids[1] == i."""
  folder = tmp_path_factory.mktemp('static')
  start = 0
  for j, size in enumerate(SIZES):
    pretraining_records.write(folder / f'train-{j}.tfrecord',
                              [_static_row(i) for i in range(start, start + size)])
    start += size
  return folder


def _unmasked_rows(first, count, rng, seq=128):
  """Instances, 10% of them shorter: [CLS] id A.. [SEP] B.. [SEP] then padding."""
  rows = []
  for i in range(first, first + count):
    n = int(rng.integers(24, seq + 1)) if rng.random() < 0.1 else seq
    ids = rng.integers(ID_OFFSET + 1000, 30000, n)
    ids[0], ids[1], ids[n // 2], ids[n - 1] = 101, ID_OFFSET + i, 102, 102
    segments = [0] * (n // 2 + 1) + [1] * (n - n // 2 - 1)
    rows.append({'input_ids': list(ids) + [0] * (seq - n), 'input_mask': [1] * n + [0] * (seq - n),
                 'segment_ids': segments + [0] * (seq - n), 'next_sentence_labels': [i % 2]})
  return rows


@pytest.fixture(scope='module')
def unmasked_dir(tmp_path_factory):
  """Four files of 150 unmasked instances (seq 128) for dynamic masking."""
  folder = tmp_path_factory.mktemp('unmasked')
  rng = np.random.default_rng(0)
  originals = {}
  for j in range(4):
    rows = _unmasked_rows(150 * j, 150, rng)
    originals.update({r['input_ids'][1] - ID_OFFSET: np.array(r['input_ids']) for r in rows})
    pretraining_records.write(folder / f'unmasked-{j}.tfrecord', rows)
  return folder, originals


def _pretrain(folder, pattern='train-*', **kwargs):
  args = dict(global_batch_size=4, max_seq_length=SEQ, max_predictions_per_seq=PRED,
              process_index=0, process_count=1, **ORDER_ARGS)
  args.update(kwargs)
  return input_pipeline.pretrain_dataset(str(folder / pattern), **args)


def _ids(dataset, num_batches):
  return np.concatenate([b['input_ids'][:, 1] for b in dataset.take(num_batches)
                         .as_numpy_iterator()])


def _reference_epoch(files, counts, *, epoch, seed, num_lanes, window, shard_count, shard_index):
  """One epoch as (file, record) pairs, simulated record by record from the documented order."""
  order = read_order.file_order(len(files), seed, epoch)
  lanes = [[(files[i], r) for i in order[j::num_lanes] for r in range(counts[i])]
           for j in range(min(num_lanes, len(files)))]
  interleaved = [lane[depth] for depth in range(max(map(len, lanes)))
                 for lane in lanes if depth < len(lane)]
  stream = interleaved[shard_index::shard_count]
  shuffled = []
  for w, begin in enumerate(range(0, len(stream), window)):
    chunk = stream[begin:begin + window]
    perm = tf.random.experimental.index_shuffle(
        tf.range(len(chunk), dtype=tf.int64), read_order.window_seed(seed, epoch, w),
        len(chunk) - 1)
    shuffled += [chunk[i] for i in perm.numpy()]
  return shuffled


def test_round_robin_consumed_matches_simulation():
  rng = np.random.default_rng(1)
  for _ in range(20):
    lengths = rng.integers(0, 6, rng.integers(1, 5))
    reads = [j for depth in range(max(lengths, default=0)) for j in range(len(lengths))
             if depth < lengths[j]]
    for skip in range(len(reads) + 1):
      consumed, next_lane = read_order.round_robin_consumed(lengths, skip)
      np.testing.assert_array_equal(consumed, np.bincount(reads[:skip], minlength=len(lengths)))
      if skip < len(reads):
        assert next_lane == reads[skip]


@pytest.mark.parametrize('process_count, process_index', [(1, 0), (2, 1), (10, 3)])
def test_stream_follows_documented_order(static_dir, process_count, process_index):
  files = [str(static_dir / f'train-{j}.tfrecord') for j in range(len(SIZES))]
  first_id = dict(zip(files, np.cumsum((0,) + SIZES[:-1]), strict=True))
  if process_count <= len(files):  # Each host reads files process_index::process_count.
    host_files, shard_count, shard_index = files[process_index::process_count], 1, 0
  else:  # Fewer files than hosts: all files, every process_count-th example.
    host_files, shard_count, shard_index = files, process_count, process_index
  counts = [SIZES[files.index(f)] for f in host_files]
  expected = []
  for epoch in range(3):
    expected += [first_id[f] + r for f, r in _reference_epoch(
        host_files, counts, epoch=epoch, seed=3, num_lanes=3, window=5, shard_count=shard_count,
        shard_index=shard_index)]
  dataset = _pretrain(static_dir, global_batch_size=process_count, process_count=process_count,
                      process_index=process_index)
  np.testing.assert_array_equal(_ids(dataset, len(expected)), expected)


@pytest.mark.parametrize('process_count', [1, 2, 3, 10])
def test_each_epoch_reads_every_example_once_across_hosts(static_dir, process_count):
  files = [str(static_dir / f'train-{j}.tfrecord') for j in range(len(SIZES))]
  seen = {0: [], 1: []}
  for index in range(process_count):
    if process_count <= len(files):
      length = sum(SIZES[index::process_count])
    else:
      length = read_order.examples_in_shard(TOTAL, process_count, index)
    ids = _ids(_pretrain(static_dir, global_batch_size=process_count,
                         process_count=process_count, process_index=index), 2 * length)
    seen[0] += list(ids[:length])
    seen[1] += list(ids[length:])
  assert sorted(seen[0]) == list(range(TOTAL))
  assert sorted(seen[1]) == list(range(TOTAL))
  assert seen[0] != seen[1]  # Each epoch has its own order.


def test_each_epoch_of_one_file_has_its_own_order(tmp_path):
  """One file, one shuffle window: the window's permutation is the only shuffle, and every epoch
  repeated epoch 0's order (index_shuffle dropped the epoch from its seed)."""
  pretraining_records.write(tmp_path / 'train-0.tfrecord', [_static_row(i) for i in range(20)])
  ids = _ids(_pretrain(tmp_path, shuffle_window=100), 4 * 20 // 4).reshape(4, 20)
  assert all(sorted(epoch) == list(range(20)) for epoch in ids)
  assert len({tuple(epoch) for epoch in ids}) == 4, ids


@pytest.mark.parametrize('process_count', [1, 2, 10])
def test_resume_yields_the_batches_an_uninterrupted_read_would(static_dir, process_count):
  global_batch = 2 * process_count
  for index in {0, process_count - 1} if process_count < 10 else {7}:
    kwargs = dict(global_batch_size=global_batch, process_count=process_count,
                  process_index=index)
    uninterrupted = list(_pretrain(static_dir, **kwargs).take(60).as_numpy_iterator())
    # Mid-window, window and epoch boundaries, later epochs.
    for step in (2, 5, 11, 37):
      resumed = _pretrain(static_dir, start_example=step * global_batch, **kwargs)
      for want, got in zip(uninterrupted[step:step + 12], resumed.take(12).as_numpy_iterator(),
                           strict=True):
        for key in want:
          np.testing.assert_array_equal(got[key], want[key], err_msg=f'step {step} {key}')


def test_resume_at_an_offset_that_is_not_a_batch_boundary(static_dir):
  ids = _ids(_pretrain(static_dir, global_batch_size=1), 100)
  for offset in (3, 17, 44, 51):
    np.testing.assert_array_equal(
        _ids(_pretrain(static_dir, global_batch_size=1, start_example=offset), 30),
        ids[offset:offset + 30])


def test_same_seed_same_batches_other_seed_other_order(static_dir):
  first = _ids(_pretrain(static_dir), 20)
  np.testing.assert_array_equal(_ids(_pretrain(static_dir), 20), first)
  assert not np.array_equal(_ids(_pretrain(static_dir, seed=4), 20), first)
  unshuffled = _ids(_pretrain(static_dir, shuffle=False, num_lanes=1), 11)
  np.testing.assert_array_equal(unshuffled, np.arange(44) % TOTAL)


def test_static_batches_have_bert_keys_dtypes_and_shapes(static_dir):
  batch = next(_pretrain(static_dir, global_batch_size=8).as_numpy_iterator())
  assert {k: (v.dtype.name, v.shape) for k, v in batch.items()} == {
      'input_ids': ('int32', (8, SEQ)), 'input_mask': ('int32', (8, SEQ)),
      'segment_ids': ('int32', (8, SEQ)), 'masked_lm_positions': ('int32', (8, PRED)),
      'masked_lm_ids': ('int32', (8, PRED)), 'masked_lm_weights': ('float32', (8, PRED)),
      'next_sentence_labels': ('int32', (8,))}
  np.testing.assert_array_equal(batch['masked_lm_ids'][:, 0], batch['input_ids'][:, 1])
  np.testing.assert_array_equal(batch['next_sentence_labels'], batch['input_ids'][:, 1] % 2)


def _dynamic(folder, **kwargs):
  args = dict(global_batch_size=50, max_seq_length=128, max_predictions_per_seq=20, seed=7,
              masking=MASKING, process_index=0, process_count=1, num_lanes=2,
              shuffle_window=64)
  args.update(kwargs)
  pattern = args.pop('pattern', 'unmasked-*')
  return input_pipeline.pretrain_dataset(str(folder / pattern), **args)


def _unmask(batch):
  """The instances before masking, from masked_lm_positions/ids."""
  original = batch['input_ids'].copy()
  for row, positions, ids, weights in zip(original, batch['masked_lm_positions'],
                                          batch['masked_lm_ids'], batch['masked_lm_weights'],
                                          strict=True):
    row[positions[weights > 0]] = ids[weights > 0]
  return original


def test_dynamic_masking_follows_bert_rule_and_statistics(unmasked_dir):
  folder, originals = unmasked_dir
  batches = list(_dynamic(folder).take(12).as_numpy_iterator())  # One epoch: 600 instances.
  chosen = mask = random = kept = maskable_total = 0
  for batch in batches:
    original = _unmask(batch)
    ids = original[:, 1] - ID_OFFSET
    np.testing.assert_array_equal(original, np.stack([originals[i] for i in ids]))
    for row, orig, positions, weights in zip(batch['input_ids'], original,
                                             batch['masked_lm_positions'],
                                             batch['masked_lm_weights'], strict=True):
      real = positions[weights > 0]
      maskable = np.flatnonzero((orig != 0) & (orig != 101) & (orig != 102))
      assert set(real) <= set(maskable)  # Special tokens and padding never chosen.
      assert list(real) == sorted(set(real))  # Ascending and distinct, as the original writes.
      assert len(real) == min(20, max(1, round(0.15 * len(maskable))))
      assert (positions[weights == 0] == 0).all()
      unchosen = np.setdiff1d(np.arange(128), real)
      np.testing.assert_array_equal(row[unchosen], orig[unchosen])
      chosen += len(real)
      maskable_total += len(maskable)
      mask += (row[real] == MASKING.mask_id).sum()
      kept += (row[real] == orig[real]).sum()
      random += ((row[real] != MASKING.mask_id) & (row[real] != orig[real])).sum()
  assert abs(chosen / maskable_total - 0.15) < 0.005
  assert chosen > 8000
  assert abs(mask / chosen - 0.8) < 0.015
  assert abs(random / chosen - 0.1) < 0.015
  assert abs(kept / chosen - 0.1) < 0.015


def test_dynamic_masking_is_deterministic_resumable_and_new_each_epoch(unmasked_dir):
  folder, _ = unmasked_dir
  uninterrupted = list(_dynamic(folder, global_batch_size=60).take(20).as_numpy_iterator())
  again = list(_dynamic(folder, global_batch_size=60).take(3).as_numpy_iterator())
  resumed = list(_dynamic(folder, global_batch_size=60, start_example=7 * 60).take(8)
                 .as_numpy_iterator())
  for want, got in list(zip(uninterrupted[:3], again, strict=True)) + list(
      zip(uninterrupted[7:15], resumed, strict=True)):
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])
  # Epoch 0 is batches 0-9, epoch 1 batches 10-19: each instance gets fresh masks.
  positions = {}
  for epoch in (0, 1):
    for batch in uninterrupted[10 * epoch:10 * (epoch + 1)]:
      for i, p in zip(_unmask(batch)[:, 1], batch['masked_lm_positions'], strict=True):
        positions.setdefault(i, []).append(tuple(p))
  assert len(positions) == 600
  assert sum(a != b for a, b in positions.values()) > 590


def test_dynamic_masking_without_nsp(unmasked_dir):
  folder, _ = unmasked_dir
  masking = masking_tf.MaskingConfig(vocab_size=30522, mask_id=103, cls_id=101, sep_id=102)
  batch = next(_dynamic(folder, masking=masking, nsp=False).as_numpy_iterator())
  assert 'next_sentence_labels' not in batch
  assert batch['masked_lm_positions'].shape == (50, 20)


def _eval(folder, pattern='train-*', **kwargs):
  args = dict(global_batch_size=6, max_seq_length=SEQ, max_predictions_per_seq=PRED)
  args.update(kwargs)
  return input_pipeline.eval_dataset(str(folder / pattern), **args)


@pytest.mark.parametrize('process_count', [1, 2, 3, 10])
def test_eval_reads_every_example_once_and_pads(static_dir, process_count):
  batch = 2 * process_count
  seen, num_batches = [], set()
  for index in range(process_count):
    dataset = _eval(static_dir, global_batch_size=batch, process_count=process_count,
                    process_index=index)
    batches = list(dataset.as_numpy_iterator())
    assert len(batches) == len(dataset)
    num_batches.add(len(batches))
    for b in batches:
      assert b['example_weight'].dtype == np.float32
      real = b['example_weight'] == 1
      seen += list(b['input_ids'][real, 1])
      assert (b['input_mask'][~real] == 0).all() and (b['masked_lm_weights'][~real] == 0).all()
  assert len(num_batches) == 1  # Every host steps the same number of times.
  assert sorted(seen) == list(range(TOTAL))


@pytest.mark.parametrize('process_count', [1, 2])
def test_an_eval_batch_past_the_eval_set_is_cut_to_the_rows_that_hold_it(static_dir,
                                                                         process_count):
  """Pass 33, item 14: eval_batch_size=1000000 padded a million rows (out of memory)."""
  want = sorted(list(b['input_ids'][b['example_weight'] == 1, 1])
                for b in _eval(static_dir).as_numpy_iterator())
  seen, rows, largest = [], set(), 0
  for index in range(process_count):
    batches = list(_eval(static_dir, global_batch_size=1_000_000, batch_multiple=8,
                         process_count=process_count, process_index=index).as_numpy_iterator())
    assert len(batches) == 1
    rows.add(batches[0]['input_ids'].shape[0])
    largest = max(largest, int(batches[0]['example_weight'].sum()))
    seen += list(batches[0]['input_ids'][batches[0]['example_weight'] == 1, 1])
  assert sorted(seen) == sorted(x for b in want for x in b) == list(range(TOTAL))
  (rows,) = rows  # Every host the same, together a multiple of the 8 devices, the fewest such.
  assert (rows * process_count) % 8 == 0 and rows * process_count - 8 < largest * process_count
  assert largest <= rows and (process_count > 1 or rows == 48)


def test_dynamic_eval_masks_are_fixed(unmasked_dir):
  folder, _ = unmasked_dir
  args = dict(global_batch_size=64, max_seq_length=128, max_predictions_per_seq=20,
              masking=MASKING, seed=1, pattern='unmasked-*')
  first, second = (list(_eval(folder, **args).as_numpy_iterator()) for _ in range(2))
  assert len(first) == 10 and first[-1]['example_weight'].sum() == 600 - 9 * 64
  for a, b in zip(first, second, strict=True):
    np.testing.assert_array_equal(a['input_ids'], b['input_ids'])
  assert (first[-1]['masked_lm_weights'][first[-1]['example_weight'] == 0] == 0).all()


def test_bad_inputs_fail_early_with_what_to_change(static_dir, unmasked_dir, tmp_path):
  with pytest.raises(FileNotFoundError, match='no files match'):
    _pretrain(tmp_path, pattern='nothing-*')
  with pytest.raises(ValueError, match="'input_ids' has 16 values, but max_seq_length gives 32"):
    _pretrain(static_dir, max_seq_length=32)
  with pytest.raises(ValueError, match='max_predictions_per_seq gives 5'):
    _eval(static_dir, max_predictions_per_seq=5)
  with pytest.raises(ValueError, match='not divisible by the 3 hosts'):
    _pretrain(static_dir, global_batch_size=4, process_count=3)
  with pytest.raises(ValueError, match='start_example 3 is not divisible by the 2 hosts'):
    _pretrain(static_dir, global_batch_size=4, process_count=2, start_example=3)
  with pytest.raises(ValueError, match=r'holds masked instances.*--config.data.dynamic_masking='
                     r'False.*--nostatic_masking'):
    _pretrain(static_dir, masking=MASKING)
  with pytest.raises(ValueError, match=r'holds unmasked instances \(made with '
                     r'--nostatic_masking\).*--config.data.dynamic_masking=True'):
    _pretrain(unmasked_dir[0], pattern='unmasked-*', max_seq_length=128)
  (tmp_path / 'garbage.tfrecord').write_bytes(bytes(range(256)) * 8)
  with pytest.raises(ValueError, match='garbage.tfrecord: not a readable TFRecord'):
    _pretrain(tmp_path, pattern='garbage.tfrecord')


def test_a_truncated_file_is_one_line_naming_it_and_what_to_do(tmp_path):
  """A copy cut short: TensorFlow's error carries the graph's stack (20 lines); the user gets
  the file, TensorFlow's reason and the fix, on one line."""
  path = tmp_path / 'cut.tfrecord'
  pretraining_records.write(path, [{'input_ids': list(range(SEQ))}] * 50)
  data = path.read_bytes()
  path.write_bytes(data[:-10])  # Its last record's header whole, its data cut.
  spec = record_check.feature_spec(SEQ, PRED)
  with pytest.raises(ValueError) as raised:
    record_check.inspect_files([str(path)], spec)
  last = len(data) - len(data) // 50  # Where the last record (the one cut) starts.
  assert str(raised.value) == (f'{path}: not a readable TFRecord file (truncated record at '
                               f'{last}): recreate it with create_pretraining_data')


def _mesh():
  devices = np.array(jax.devices()[:8]).reshape(2, 2, 2)
  return jax.sharding.Mesh(devices, ('data', 'fsdp', 'tensor'))


def test_global_batch_on_8_devices_has_batch_sharding_and_contents(static_dir):
  assert jax.device_count() == 8
  mesh = _mesh()
  host_batch = next(_pretrain(static_dir, global_batch_size=8).as_numpy_iterator())
  arrays = global_batch.make_global_batch(host_batch, mesh, ('data', 'fsdp'))
  for name, array in arrays.items():
    assert array.shape == host_batch[name].shape
    assert array.sharding.spec == jax.sharding.PartitionSpec(('data', 'fsdp'))
    np.testing.assert_array_equal(np.asarray(array), host_batch[name])
    for shard in array.addressable_shards:  # 2 rows per (data, fsdp) slice, 2 tensor replicas.
      rows = shard.index[0]
      assert rows.stop - rows.start == 2
      np.testing.assert_array_equal(shard.data, host_batch[name][rows])
  assert len({s.index[0].start for s in arrays['input_ids'].addressable_shards}) == 4


def test_global_batch_errors_say_what_to_change():
  batch = {'input_ids': np.zeros((6, SEQ), np.int32)}
  with pytest.raises(ValueError, match='make global_batch_size a multiple of 4'):
    global_batch.make_global_batch(batch, _mesh(), ('data', 'fsdp'))
  with pytest.raises(ValueError, match='not mesh axes'):
    global_batch.make_global_batch(batch, _mesh(), 'batch')


@pytest.fixture(scope='module')
def packed_unmasked_dir(unmasked_dir, tmp_path_factory):
  """unmasked_dir's instances packed 3 to a row (the short ones fill gaps), in two files."""
  from bertjax.records import packing  # pylint: disable=g-import-not-at-top
  folder, originals = unmasked_dir
  rows = []
  spec = record_check.feature_spec(128, 20, masked=False)
  for batch in tf.data.TFRecordDataset(sorted(str(p) for p in folder.glob('unmasked-*'))).batch(
      1000).map(lambda x: tf.io.parse_example(x, spec)):
    batch = {k: v.numpy() for k, v in batch.items()}
    count = len(batch['input_ids'])
    rows += packing.pack([{k: v[i] for k, v in batch.items()} for i in range(count)],
                         128, 0, 3, decreasing=True)
  packed = tmp_path_factory.mktemp('packed')
  lists = [{k: list(v) for k, v in r.items()} for r in rows]
  pretraining_records.write(packed / 'packed-0.tfrecord', lists[:200])
  pretraining_records.write(packed / 'packed-1.tfrecord', lists[200:])
  return packed, rows, originals


def test_packed_rows_are_read_and_masked_per_row(packed_unmasked_dir):
  """Dynamic masking of packed rows: BERT's rule over each row's maskable tokens, never a
  special token or padding; per-instance features [B, 3]; deterministic and resumable."""
  folder, rows, originals = packed_unmasked_dir
  assert 500 < len(rows) < 600  # 600 instances, 60 of them shorter.
  read = functools.partial(_dynamic, folder, pattern='packed-*', max_instances_per_row=3,
                           global_batch_size=40)
  batches = list(read().take(len(rows) // 40).as_numpy_iterator())
  seen = []
  for batch in batches:
    assert batch['next_sentence_labels'].shape == batch['instance_starts'].shape == (40, 3)
    original = _unmask(batch)
    for row, orig, mask, positions, weights, starts in zip(
        batch['input_ids'], original, batch['input_mask'], batch['masked_lm_positions'],
        batch['masked_lm_weights'], batch['instance_starts'], strict=True):
      for n, start in enumerate(starts[:mask.max()]):
        size = int((mask == n + 1).sum())
        np.testing.assert_array_equal(orig[start:start + size],
                                      originals[orig[start + 1] - ID_OFFSET][:size])
        seen.append(orig[start + 1] - ID_OFFSET)
      real = positions[weights > 0]
      maskable = np.flatnonzero((mask > 0) & (orig != 101) & (orig != 102))
      assert set(real) <= set(maskable) and list(real) == sorted(set(real))
      assert len(real) == min(20, max(1, round(0.15 * len(maskable))))
      unchosen = np.setdiff1d(np.arange(128), real)
      np.testing.assert_array_equal(row[unchosen], orig[unchosen])
  assert len(seen) == len(set(seen)) > 0.9 * 600
  resumed = list(read(start_example=3 * 40).take(4).as_numpy_iterator())
  for want, got in zip(batches[3:7], resumed, strict=True):
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])


def test_packed_and_unpacked_files_are_told_apart(packed_unmasked_dir, unmasked_dir):
  folder = packed_unmasked_dir[0]
  with pytest.raises(ValueError, match='holds packed rows .*up to 3 instances per row.*'
                     'data.max_instances_per_row is 1'):
    _dynamic(folder, pattern='packed-*')
  with pytest.raises(ValueError, match="has 3 values, but "
                     'max_instances_per_row gives 4'):
    _dynamic(folder, pattern='packed-*', max_instances_per_row=4)
  with pytest.raises(ValueError, match='one instance per row, but data.max_instances_per_row '
                     'is 3'):
    _dynamic(unmasked_dir[0], max_instances_per_row=3)


def test_a_host_without_examples_is_told_the_fix_its_share_needs(tmp_path):
  pretraining_records.write(tmp_path / 'one-0.tfrecord', [_static_row(0)])
  # One file for two hosts: both read it and keep alternate records, so host 1 gets none.
  with pytest.raises(ValueError, match=r"host 1 has no examples to read from .*one-\*.*every "
                     r'host reads these\): write at least one record per host'):
    _pretrain(tmp_path, 'one-*', global_batch_size=2, process_index=1, process_count=2)
  pretraining_records.write(tmp_path / 'one-1.tfrecord', [])  # Two files: one each.
  with pytest.raises(ValueError, match=r"host 1 has no examples .*one-1.tfrecord\): give every "
                     'host a file that holds records'):
    _pretrain(tmp_path, 'one-*', global_batch_size=2, process_index=1, process_count=2)
