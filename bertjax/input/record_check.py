"""TFRecord files against the feature spec, before tf.data reads them: first records, counts.

A file made with other lengths, masking, packing or NSP than the config's fails here with the
setting to change, at the start of a run (pretrain.py checks each phase's first file before
anything is compiled), rather than as a parse error inside tf.data.
"""

import concurrent.futures
import re

from google.protobuf import message
import numpy as np
import tensorflow as tf

from bertjax import files as files_lib
from bertjax.records import example_encoding

_MASKED_FEATURES = ('masked_lm_positions', 'masked_lm_ids', 'masked_lm_weights')
_PER_INSTANCE = ('instance_starts', 'next_sentence_labels', 'next_sentence_weights')
READ_BUFFER_BYTES = 1 << 20  # Per open file; num_lanes of them per host.


def feature_spec(max_seq_length: int, max_predictions_per_seq: int, *, masked: bool = True,
                 nsp: bool = True, max_instances_per_row: int = 1) -> dict:
  """The original BERT TFRecord features as tf.io features: masked (static) instances, or
  unmasked ones, one per row or packed; the format itself is defined once, in
  example_encoding.feature_spec. Without NSP no labels are read (pair files' are ignored)."""
  spec = example_encoding.feature_spec(max_seq_length, max_predictions_per_seq,
                                       static_masking=masked,
                                       max_instances_per_row=max_instances_per_row)
  return {name: tf.io.FixedLenFeature(list(shape), tf.dtypes.as_dtype(dtype))
          for name, (shape, dtype) in spec.items()
          if nsp or name not in example_encoding.NSP_FEATURES}


def _named(which: str) -> tuple[str, str]:
  """(' (what the files are)', the config section of their lengths) for the config field that
  names the files, e.g. 'phase2.train_files'; ('', '') unnamed (an input pipeline's own)."""
  if not which:
    return '', ''
  section, _, field = which.partition('.')
  phase = "phase 2's " if section == 'phase2' else ''
  return f' ({phase}{field.replace("_files", "")} files, {which})', f'{section}.'


def _packing_mismatch(path, features, spec, which):
  """The error for packed rows read as one instance per row or the reverse, or None."""
  where, _ = _named(which)
  if ('instance_starts' in features) == ('instance_starts' in spec):
    return None
  if which.endswith('eval_files'):  # The train files, checked first, were read as the config.
    made = 'packed rows' if 'instance_starts' in features else 'one instance per row'
    return (f'{path}{where}: holds {made}, unlike the train files: make train and eval files '
            'alike, packed both (create_pretraining_data --pack) or neither')
  both = (' (both phases read it: make phase 2\'s files as phase 1\'s were made)'
          if which.startswith('phase2') else '')
  if 'instance_starts' in features:
    return (f'{path}{where}: holds packed rows (instance_starts: up to '
            f'{len(features["instance_starts"].int64_list.value)} instances per row), but '
            'data.max_instances_per_row is 1: set it to that number, or use files made without '
            f'--pack{both}')
  return (f'{path}{where}: holds one instance per row, but data.max_instances_per_row is '
          f'{spec["instance_starts"].shape[0]}: set it to 1, or make the files with '
          f'create_pretraining_data --pack{both}')


def _length_mismatch(path, name, found, wanted, spec, which):
  """The error for a feature of another length than the config's: the setting to change."""
  where, section = _named(which)
  setting = ('max_predictions_per_seq' if name in _MASKED_FEATURES else
             'max_instances_per_row' if 'instance_starts' in spec and name in _PER_INSTANCE
             else 'the original spec' if name == 'next_sentence_labels' else 'max_seq_length')
  if which.endswith('eval_files') and setting != 'the original spec':
    return (f'{path}{where}: feature {name!r} has {found} values, but the train files\' '
            f'{setting} gives {wanted}: make train and eval files alike (the same '
            'create_pretraining_data lengths and --pack)')
  if section and setting != 'the original spec':
    setting = f'{"data." if setting == "max_instances_per_row" else section}{setting}'
    return (f'{path}{where}: feature {name!r} has {found} values, but {setting} gives '
            f'{wanted}: set --config.{setting} to what these files were made with, or remake '
            'them')
  return (f'{path}: feature {name!r} has {found} values, but {setting} gives {wanted}: set '
          f'{setting} to what the files were made with, or remake them')


def _check_first_record(path: str, record: bytes, spec: dict, masked: bool, which: str = ''):
  """Raises a ValueError saying how a file's first record differs from the feature spec;
  `which` is the config field naming the files ('phase2.train_files'), for the message."""
  try:
    features = tf.train.Example.FromString(record).features.feature
  except message.DecodeError as e:
    raise ValueError(f'{path}: records are not tf.train.Example protos ({e})') from e
  if not masked and 'masked_lm_positions' in features:
    raise ValueError(f'{path}: holds masked instances (masked_lm_positions), but dynamic masking '
                     'reads unmasked ones: set --config.data.dynamic_masking=False to train on '
                     'their static masks, or make the files unmasked (create_pretraining_data '
                     '--nostatic_masking)')
  packing = _packing_mismatch(path, features, spec, which)
  if packing:
    raise ValueError(packing)
  for name, feature in spec.items():
    if name == 'next_sentence_labels' and name not in features:
      raise ValueError(f'{path}: has no next_sentence_labels: MLM-only data (made with '
                       'create_pretraining_data --nsp=false), but the model has an NSP head. '
                       'Set --config.model.nsp=False, or make the data with pairs (--nsp)')
    if masked and name == 'masked_lm_positions' and name not in features:
      raise ValueError(f'{path}: holds unmasked instances (made with --nostatic_masking), but '
                       'static masking reads masked ones: set --config.data.dynamic_masking=True '
                       'to mask them as they are read, or make the files with static masks')
    if name not in features:
      raise ValueError(f'{path}: has no feature {name!r} (it has {sorted(features)})')
    kind = 'float_list' if feature.dtype == tf.float32 else 'int64_list'
    if features[name].WhichOneof('kind') != kind:
      raise ValueError(f'{path}: feature {name!r} is a {features[name].WhichOneof("kind")}, '
                       f'expected {kind}')
    found, wanted = len(getattr(features[name], kind).value), feature.shape[0]
    if found != wanted:
      raise ValueError(_length_mismatch(path, name, found, wanted, spec, which))


class UnreadableFile(ValueError):
  """A file TensorFlow cannot read as TFRecords (damaged, truncated, or still being copied)."""


@tf.function(input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.bool)])
def _count_and_first(path, count_records):
  """A file's record count (-1 when not counted) and its first record (b'' when empty)."""
  records = tf.data.TFRecordDataset(path, buffer_size=READ_BUFFER_BYTES)
  first = records.take(1).reduce(tf.constant(b''), lambda _, record: record)
  # Counting batches, not records: a reduce step per record would cost 20x more (measured).
  count = tf.cond(
      count_records,
      lambda: records.batch(4096).reduce(
          np.int64(0), lambda n, batch: n + tf.shape(batch, out_type=tf.int64)[0]),
      lambda: np.int64(-1))
  return count, first


def _read_head(path: str, count_records: bool) -> tuple[int, bytes]:
  """(record count or -1, first record or b'') of a file, as a clear error when unreadable."""
  try:
    counted, first = _count_and_first(path, count_records)
  except tf.errors.OpError as e:
    raise UnreadableFile(f'{path}: not a readable TFRecord file ({reason(e.message)}): '
                         'recreate it with create_pretraining_data') from e
  return int(counted), first.numpy()


def reason(text: str) -> str:
  """The line of a TensorFlow error that says what is wrong ('truncated record at 99821'):
  a graph's error also carries where the op was defined (a stack of `File ...` lines) and the
  node it ran in, none of it about the file."""
  lines = [line.strip() for line in text.splitlines()]
  said = [line for line in lines if line and not line.startswith(
      ('Graph execution error', 'Detected at node', 'File "', '[['))]
  found = said[-1] if said else text.strip()
  # An iterator's error: `{{function_node ...}} corrupted record at 120763 name:`.
  found = re.sub(r"\s*\[\[.*?\]\]|\s*\[Op:[^\]]*\]|' failed with .*$|\{\{function_node "
                 r'[^}]*\}\}|\s+name:\s*$', '', found)
  return found.strip() or 'unreadable'


def _inspect_file(path: str, spec: dict, masked: bool, count: int | None) -> int:
  """Validates a file's first record against the spec and returns its record count."""
  counted, first = _read_head(path, count is None)
  if first:
    _check_first_record(path, first, spec, masked)
  return counted if count is None else count


def check_first_record(path: str, spec: dict, *, masked: bool = True, which: str = ''):
  """Checks one file's first record against `spec` without counting its records (a config
  check that runs before anything is compiled). `which`: the config field that names the
  files ('data.train_files', 'phase2.train_files', 'data.eval_files', ...), so an error names
  that phase's setting; eval files, checked after the train files, must be made alike."""
  _, first = _read_head(path, False)
  if first:
    _check_first_record(path, first, spec, masked, which)


def inspect_files(files, spec: dict, *, masked: bool = True, record_counts=None) -> list[int]:
  """Record counts of `files`, after checking each file's first record against `spec`."""
  known = dict(record_counts or {})

  def inspect(path):
    return _inspect_file(path, spec, masked, known.get(path))

  first = inspect(files[0])  # Traces _count_and_first once, before threads race to trace it.
  with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
    # TF releases the GIL while reading, so the other files are read in parallel.
    return [first] + list(pool.map(inspect, files[1:]))


# Read again on the error path only up to this much: past it the error names no file.
FIND_DAMAGED_BYTES = 64 << 30


def could_hold(files, said: str) -> dict[str, int]:
  """The `files` a read error saying `said` ('corrupted record at 99821': an offset in the
  damaged file) can have come from, with their sizes: those larger than the offset (a file gone
  since is none of them: it cannot be read again)."""
  at = re.search(r' at (\d+)', said)

  def size_of(path):
    try:
      return files_lib.size(path)
    except FileNotFoundError:
      return None

  # In parallel: on a bucket each size is a request, and a pattern may hold thousands of shards.
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(16, len(files)))) as pool:
    sizes = dict(zip(files, pool.map(size_of, files), strict=True))
  return {path: size for path, size in sizes.items()
          if size is not None and (not at or size > int(at.group(1)))}


def find_damaged(files) -> str | None:
  """The first of `files` TensorFlow cannot read whole (a record whose checksum fails, or one
  cut short), each read in parallel; None when each reads. A read of many files (lanes, hosts'
  shares) fails naming none of them: only that error path pays for this."""

  def damaged(path):
    try:
      _count_and_first(path, True)
    except tf.errors.DataLossError:
      return True
    except tf.errors.OpError:  # A file gone, a bucket's passing error: not damage.
      return False
    return False

  if not files or damaged(files[0]):  # The first traces the reader, before threads race to.
    return files[0] if files else None
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(files)))
  try:
    return next((path for path, bad in zip(files[1:], pool.map(damaged, files[1:]),
                                           strict=True) if bad), None)
  finally:
    pool.shutdown(cancel_futures=True)  # Found: the files after it are not read.


def check_ids(host_batch, vocab_size: int, files: str):
  """Refuses a batch with token ids the model has no embedding for (data of another vocab)."""
  top = max(int(np.max(host_batch['input_ids'])),
            int(np.max(host_batch.get('masked_lm_ids', 0))))
  if top >= vocab_size:
    raise ValueError(f'the data ({files}) holds token id {top} but the model has '
                     f'vocab_size={vocab_size}: the data was made with a larger vocab. Set '
                     'data.vocab_file and model.vocab_size to that vocab, or remake the data.')
