"""A run's TensorBoard scalars read back as numbers: what notebooks plot and tests check."""

import collections

from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from bertjax import files
from bertjax.records import tfrecord


def read_scalars(workdir: str, tags=None) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} of the scalars the loop wrote to `workdir` (local or a URL, read
  through bertjax.files, without TensorFlow); all tags, or only `tags`. What TensorBoard shows
  (its purge_orphaned_data): the files are read in name order (the order they were opened), and
  a run's SessionLog START at step s (event_writer: a resumed run's first step) drops the
  scalars at steps s and later read before it, so the steps a killed run wrote after its
  checkpoint hold the resumed run's values, or none where it has not reached them again. A step
  written twice with no START between (files of an older writer) keeps its later value.
  Non-scalar summaries (text, hparams) are left out."""
  wanted = set(tags) if tags is not None else None
  scalars = collections.defaultdict(dict)
  for path in files.glob(files.join(workdir, 'events.out.tfevents.*')):
    for record in tfrecord.read_records(files.read_bytes(path)):
      event = event_pb2.Event.FromString(record)
      if event.session_log.status == event_pb2.SessionLog.START:
        for values in scalars.values():
          for step in [s for s in values if s >= event.step]:
            del values[step]
      for value in event.summary.value:
        if wanted is not None and value.tag not in wanted:
          continue
        if value.HasField('tensor'):
          array = tensor_util.make_ndarray(value.tensor)
          if array.ndim == 0 and array.dtype.kind in 'fiu':
            scalars[value.tag][event.step] = float(array)
        elif value.HasField('simple_value'):
          scalars[value.tag][event.step] = float(value.simple_value)
  return {tag: values for tag, values in scalars.items() if values}
