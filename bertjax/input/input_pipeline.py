"""tf.data input pipelines for pre-training and eval: TFRecords -> host batches (numpy).

Reads TFRecords with the original google-research/bert feature spec. Each host reads its own
files (file i goes to host i % process_count; with fewer files than hosts every host reads all
files and keeps every process_count-th example) and yields numpy dicts of
global_batch_size // process_count examples: int32 ids, float32 weights, next_sentence_labels [B].

Resuming: the trainer checkpoints the number of global examples consumed (steps * global batch)
and passes it back as `start_example`. The read order is a pure function of the seed and the
record counts (read_order.py), so the pipeline seeks there instead of replaying: per epoch a
seeded file permutation, files dealt into `num_lanes` lanes read round-robin one record at a
time, and windows of `shuffle_window` records permuted by a seeded index shuffle. The cost of a
resume is a seek in at most num_lanes files plus reading one window; the cost of the design is
that mixing is window-local (plus lanes and file order) rather than a global shuffle, which
would need random access to single records (ArrayRecord-style files) and random reads on GCS.
Files are checked against the JSON reports beside them (file_set.py), whose record counts
are used; files without a report are counted once when the pipeline is built (a sequential
read of this host's files), or pass `record_counts` (path -> count). Every file's first record
is checked against the feature spec first (record_check.py).

Iterate with `dataset.as_numpy_iterator()`; `global_batch.make_global_batch` turns each batch
into global arrays. TF must not see the accelerators (main.py hides them before building the
pipeline). The order depends on the seed, the files and process_count: resuming on a different
number of hosts continues from the same example count, but in a different order.
"""

import dataclasses
import math

from absl import logging
import jax
import numpy as np
import tensorflow as tf

from bertjax.input import count_cache
from bertjax.input import global_batch
from bertjax.input import masking_tf
from bertjax.input import read_order
from bertjax.input import record_check
from bertjax.records import file_set


def _process(process_index, process_count, global_batch_size: int) -> tuple[int, int, int]:
  """(process index, process count, host batch size), checked."""
  index = jax.process_index() if process_index is None else process_index
  count = jax.process_count() if process_count is None else process_count
  if global_batch_size % count:
    raise ValueError(f'global_batch_size {global_batch_size} is not divisible by the {count} '
                     f'hosts: use a multiple of {count}')
  return index, count, global_batch_size // count


_SAID = set()  # The file sets whose share was said: an eval's, once, not at every eval.


def _host_share(files, process_index: int, process_count: int, log: bool = True,
                eval_set: bool = False):
  """This host's files and per-example sharding (shard_count, shard_index) within them. An
  eval set's fewer files than hosts is said as information: one pass per eval, and the
  embedded corpus's one eval file is not the user's to split."""
  log = log and (tuple(files), process_count) not in _SAID
  if log:
    _SAID.add((tuple(files), process_count))
  if len(files) >= process_count:
    if len(files) % process_count and log:
      logging.info('%d files over %d hosts: hosts read unequal shares, so their epochs end at '
                   'different steps', len(files), process_count)
    return files[process_index::process_count], 1, 0
  if log and eval_set:
    logging.info('the eval set has %d file(s) for %d hosts: every host reads all of it at each '
                 'eval and keeps every %d-th example', len(files), process_count, process_count)
  elif log:
    logging.warning('only %d file(s) for %d hosts: every host reads every file and keeps every '
                    '%d-th example; write at least one file per host to avoid the extra reading',
                    len(files), process_count, process_count)
  return files, process_count, process_index


def counted(file_pattern, spec: dict, *, masked: bool, every_host_file: bool, workdir=None):
  """The FileSet with the record counts of its files without a report filled in (this host's
  share, or `every_host_file` as the eval reads them), read now, and their first records
  checked: a damaged file is found before anything trains, not as its phase or first eval
  comes (steps since the last save lost), and a training share without examples too. The
  pipelines then read these counts instead of counting again. With a `workdir`, counts are
  kept there (count_cache): a restart reads only new or rewritten files whole."""
  checked = file_set.resolved(file_pattern)
  process_index, process_count = jax.process_index(), jax.process_count()
  mine, shard_count, shard_index = (checked.files, 1, 0) if every_host_file else _host_share(
      checked.files, process_index, process_count, log=False)
  unknown = [f for f in mine if f not in checked.record_counts]
  cached, versions = count_cache.known(workdir, unknown) if workdir and unknown else ({}, {})
  if len(cached) < len(unknown):
    logging.info('counting the records of %d file(s) of %s without a report (before training: '
                 'a damaged one is said now)%s', len(unknown) - len(cached), checked,
                 f'; {len(cached)} counted before' if cached else '')
  # The first record of each file counted here or before is checked (one record each: the
  # config may differ from the last start's); a report's files are checked as their pipeline
  # starts (at 10k files in a bucket, a pass over them all costs ~50 s).
  counts = checked.record_counts | (dict(zip(unknown, record_check.inspect_files(
      unknown, spec, masked=masked, record_counts=cached), strict=True)) if unknown else {})
  if workdir and len(cached) < len(unknown):
    count_cache.keep(workdir, {f: counts[f] for f in unknown if f not in cached}, versions)
  if not every_host_file and not read_order.examples_in_shard(sum(counts[f] for f in mine),
                                                              shard_count, shard_index):
    raise ValueError(_no_examples(process_index, file_pattern, mine, shard_count))
  return dataclasses.replace(checked, record_counts=counts)


def _no_examples(process_index: int, file_pattern, mine, shard_count: int) -> str:
  # With fewer files than hosts every host reads them all and keeps every shard_count-th
  # record: there, fewer records than hosts is what leaves a host without any.
  fix = ('write at least one record per host (or train on fewer hosts)' if shard_count > 1
         else 'give every host a file that holds records, or remove the empty files')
  return (f'host {process_index} has no examples to read from {str(file_pattern)!r} (its '
          f'share: {len(mine)} file(s), {", ".join(mine[:2])}{", ..." if len(mine) > 2 else ""}'
          f'{"; every host reads these" if shard_count > 1 else ""}): {fix}')


def _parse_batch(keys_B, serialized_B, *, spec, masking, max_predictions_per_seq, seed,
                 process_index, process_count):
  """Parses a batch of records to int32/float32 tensors and masks it when masking is dynamic."""
  parsed = tf.io.parse_example(serialized_B, spec)
  batch = {name: tf.cast(value, tf.float32 if value.dtype == tf.float32 else tf.int32)
           for name, value in parsed.items()}
  if 'next_sentence_labels' in batch and 'instance_starts' not in batch:
    batch['next_sentence_labels'] = tf.reshape(batch['next_sentence_labels'], [-1])  # [B]
  if masking is not None:
    # Keyed by the host and the stream position of the batch's first example: hosts draw
    # different masks, every epoch draws new ones, and a resumed run draws the same ones.
    seed_2 = tf.stack([tf.constant(seed, tf.int64), keys_B[0] * process_count + process_index])
    batch.update(masking_tf.mask_batch(batch['input_ids'], batch['input_mask'], config=masking,
                                       max_predictions_per_seq=max_predictions_per_seq,
                                       seed_2=seed_2))
  return batch


def _options() -> tf.data.Options:
  options = tf.data.Options()
  options.deterministic = True  # Order must be a function of the seed for exact resume.
  return options


def _plan_tensors(plan: read_order.EpochPlan) -> dict:
  """An EpochPlan as fixed-rank arrays (lanes padded with empty file names) for tf.data."""
  width = max(len(files) for files in plan.lane_files)
  lane_files = [[f.encode() for f in files] + [b''] * (width - len(files))
                for files in plan.lane_files]
  return {
      'epoch': np.int64(plan.epoch),
      'lane_files': np.array(lane_files, dtype=object),
      'lane_nfiles': np.array([len(f) for f in plan.lane_files], np.int64),
      'lane_skips': np.array(plan.lane_skips, np.int64),
      'first_window': np.int64(plan.first_window),
      'skip_in_window': np.int64(plan.skip_in_window),
  }


_PLAN_SIGNATURE = {
    'epoch': tf.TensorSpec([], tf.int64),
    'lane_files': tf.TensorSpec([None, None], tf.string),
    'lane_nfiles': tf.TensorSpec([None], tf.int64),
    'lane_skips': tf.TensorSpec([None], tf.int64),
    'first_window': tf.TensorSpec([], tf.int64),
    'skip_in_window': tf.TensorSpec([], tf.int64),
}


def _epoch_records(plan, *, seed, num_lanes, window, shard_count, shard_index, shuffle):
  """The serialized records one EpochPlan yields, in stream order."""
  lanes = tf.data.Dataset.from_tensor_slices(
      (plan['lane_files'], plan['lane_nfiles'], plan['lane_skips']))
  records = lanes.interleave(
      # TFRecordDataset's skip seeks past records without parsing them.
      lambda files, n, skip: tf.data.TFRecordDataset(
          files[:n], buffer_size=record_check.READ_BUFFER_BYTES).skip(skip),
      cycle_length=num_lanes, block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True)
  if shard_count > 1:
    records = records.shard(shard_count, shard_index)
  if shuffle:

    def shuffle_window(index, chunk):
      size = tf.shape(chunk, out_type=tf.int64)[0]
      order = tf.random.experimental.index_shuffle(
          tf.range(size), read_order.window_seed(seed, plan['epoch'], index), size - 1)
      return tf.gather(chunk, order)

    records = records.batch(window).enumerate(start=plan['first_window'])
    # One window in flight so the next is read while this one is consumed.
    records = records.map(shuffle_window).prefetch(1).unbatch()
  return records.skip(plan['skip_in_window'])


def pretrain_dataset(file_pattern, *, global_batch_size: int, max_seq_length: int,
                     max_predictions_per_seq: int, seed: int, start_example: int = 0,
                     masking: masking_tf.MaskingConfig | None = None, shuffle: bool = True,
                     num_lanes: int = 16, shuffle_window: int = 10_000, nsp: bool = True,
                     max_instances_per_row: int = 1, process_index=None, process_count=None,
                     record_counts=None) -> tf.data.Dataset:
  """This host's endless pre-training batches, from global example `start_example` on.

  `file_pattern`: comma-separated globs, or a file_set.FileSet resolved already (files and
  record counts checked against their reports). Static masking (`masking=None`) reads masked
  instances; a MaskingConfig reads unmasked ones
  and masks them per epoch. `nsp=False` reads no next_sentence_labels (MLM-only files have
  none; pair files' are ignored). `max_instances_per_row` > 1 reads packed rows
  (create_pretraining_data --pack; dynamic masking masks each packed row). Batch b of the
  stream holds global examples start_example + b * global_batch_size onwards, so resuming at a
  checkpointed example count yields exactly the batches an uninterrupted run would yield next.
  """
  process_index, process_count, host_batch = _process(process_index, process_count,
                                                      global_batch_size)
  if start_example % process_count:
    raise ValueError(f'start_example {start_example} is not divisible by the {process_count} '
                     'hosts: pass the checkpointed number of examples consumed')
  if not 0 <= seed < 1 << 31:
    raise ValueError(f'seed must be in [0, 2**31), got {seed}')
  if num_lanes < 1 or shuffle_window < 1:
    raise ValueError(f'num_lanes ({num_lanes}) and shuffle_window ({shuffle_window}) must be >= 1')
  masked = masking is None
  spec = record_check.feature_spec(max_seq_length, max_predictions_per_seq, masked=masked,
                                   nsp=nsp, max_instances_per_row=max_instances_per_row)
  checked = file_set.resolved(file_pattern)
  files, shard_count, shard_index = _host_share(checked.files, process_index, process_count)
  counts = record_check.inspect_files(
      files, spec, masked=masked, record_counts=checked.record_counts | dict(record_counts or {}))
  for path in [f for f, n in zip(files, counts, strict=True) if n == 0]:
    logging.warning('%s holds no records; skipping it', path)
  share = files
  files, counts = [f for f, n in zip(files, counts, strict=True) if n], [n for n in counts if n]
  length = read_order.examples_in_shard(sum(counts), shard_count, shard_index)
  if length == 0:
    raise ValueError(_no_examples(process_index, file_pattern, share, shard_count))
  logging.info('host %d reads %d files, %d examples per epoch, from example %d', process_index,
               len(files), length, start_example // process_count)

  plan_args = dict(seed=seed, num_lanes=num_lanes, window=shuffle_window if shuffle else 1,
                   shard_count=shard_count, shard_index=shard_index, shuffle=shuffle)
  plans = tf.data.Dataset.from_generator(
      lambda: map(_plan_tensors, read_order.epoch_plans(
          files, counts, start=start_example // process_count, **plan_args)),
      output_signature=_PLAN_SIGNATURE)
  records = plans.flat_map(lambda plan: _epoch_records(plan, **plan_args))
  batches = records.enumerate(start=start_example // process_count).batch(
      host_batch, drop_remainder=True)
  batches = batches.map(
      lambda keys, serialized: _parse_batch(
          keys, serialized, spec=spec, masking=masking,
          max_predictions_per_seq=max_predictions_per_seq, seed=seed,
          process_index=process_index, process_count=process_count),
      num_parallel_calls=tf.data.AUTOTUNE)
  return batches.prefetch(tf.data.AUTOTUNE).with_options(_options())


def _padding_record(spec: dict) -> bytes:
  """A record of zeros: no real tokens, no masked positions, so it adds nothing to metrics."""
  feature = {}
  for name, f in spec.items():
    if f.dtype == tf.float32:
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[0.0] * f.shape[0]))
    else:
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[0] * f.shape[0]))
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def eval_dataset(file_pattern, *, global_batch_size: int, max_seq_length: int,
                 max_predictions_per_seq: int, masking: masking_tf.MaskingConfig | None = None,
                 seed: int = 0, nsp: bool = True, max_instances_per_row: int = 1,
                 process_index=None, process_count=None,
                 record_counts=None, batch_multiple: int = 1) -> tf.data.Dataset:
  """Every eval example exactly once across hosts, in batches with an `example_weight` key.

  No shuffle, no repeat. The last batches are padded with zero records of example_weight 0 so
  that every host yields the same number of batches (len(dataset)) and collectives line up.
  A global_batch_size past the eval set is cut to the fewest rows that hold it, a multiple of
  `batch_multiple` (the data-parallel size) and the hosts (eval_batch_size=1000000 was a
  million rows of padding: out of memory).
  """
  process_index, process_count, host_batch = _process(process_index, process_count,
                                                      global_batch_size)
  masked = masking is None
  spec = record_check.feature_spec(max_seq_length, max_predictions_per_seq, masked=masked,
                                   nsp=nsp, max_instances_per_row=max_instances_per_row)
  checked = file_set.resolved(file_pattern)
  all_files = checked.files
  known = checked.record_counts | dict(record_counts or {})
  # Every host counts every file: all need the largest host's share to agree on a batch count.
  counts = record_check.inspect_files(all_files, spec, masked=masked, record_counts=known)
  counts = dict(zip(all_files, counts, strict=True))
  shares = [_host_share(all_files, i, process_count, log=i == process_index, eval_set=True)
            for i in range(process_count)]
  lengths = [read_order.examples_in_shard(sum(counts[f] for f in files), shard_count, index)
             for files, shard_count, index in shares]
  if rows := global_batch.eval_rows(max(lengths) * process_count, global_batch_size,
                                    math.lcm(batch_multiple, process_count)):
    host_batch = rows // process_count
  num_batches = max(-(-n // host_batch) for n in lengths)
  if num_batches == 0:
    raise ValueError(f'no eval examples in {str(file_pattern)!r}')
  files, shard_count, shard_index = shares[process_index]

  records = tf.data.TFRecordDataset(files, buffer_size=record_check.READ_BUFFER_BYTES)
  if shard_count > 1:
    records = records.shard(shard_count, shard_index)
  padding = num_batches * host_batch - lengths[process_index]
  records = records.map(lambda r: (r, 1.0)).concatenate(
      tf.data.Dataset.from_tensors((tf.constant(_padding_record(spec)), 0.0)).repeat(padding))

  def to_batch(keys, serialized_and_weight):
    serialized, weight = serialized_and_weight
    batch = _parse_batch(keys, serialized, spec=spec, masking=masking,
                         max_predictions_per_seq=max_predictions_per_seq, seed=seed,
                         process_index=process_index, process_count=process_count)
    batch['example_weight'] = weight
    return batch

  batches = records.enumerate().batch(host_batch, drop_remainder=True).map(
      to_batch, num_parallel_calls=tf.data.AUTOTUNE)
  batches = batches.apply(tf.data.experimental.assert_cardinality(num_batches))
  return batches.prefetch(tf.data.AUTOTUNE).with_options(_options())


def host_batches(dataset, files):
  """The dataset's batches as numpy; a damaged TFRecord file of `files` (a pattern or a
  FileSet) is a one-line error naming it, with what to do, not TensorFlow's DataLossError."""
  batches = dataset.as_numpy_iterator()
  while True:
    try:
      batch = next(batches)
    except StopIteration:
      return
    except tf.errors.DataLossError as e:
      raise ValueError(_damaged(files, record_check.reason(e.message))) from None
    yield batch


def _damaged(files, said: str) -> str:
  """What to do about a damaged TFRecord file of `files` (its read failed saying `said`): the
  file named where each file that could hold it reads again within FIND_DAMAGED_BYTES."""
  fix = 'remake it with create_pretraining_data, or leave it out of the pattern'
  sizes = record_check.could_hold(file_set.resolved(files).files, said)
  suspects, size = list(sizes), sum(sizes.values())

  def not_found(now: str) -> str:  # The read failed; no file fails now (`now`: a question).
    return (f'the data ({files}) held a damaged TFRecord record ({said}), yet {now} Rerun, '
            'and remake the data if it fails again')

  if not suspects:
    return not_found('none of its files is that large now: was one replaced or cut meanwhile?')
  if size <= record_check.FIND_DAMAGED_BYTES:
    logging.warning('the data (%s) holds a damaged TFRecord file (%s): reading its %d files '
                    'that could hold it (%.1f GiB) to name it', files, said, len(suspects),
                    size / (1 << 30))
    if damaged := record_check.find_damaged(suspects):
      return f'{damaged}, a TFRecord file of the data ({files}), is damaged ({said}): {fix}'
    return not_found('each of its files reads whole now: was one being written meanwhile, or '
                     'is its storage failing?')
  return (f'the data ({files}) holds a damaged TFRecord file ({said}; {len(suspects)} of its '
          f'files could hold it, {size / (1 << 30):.1f} GiB, too many to read again here to '
          'name it): remake the data with create_pretraining_data')
