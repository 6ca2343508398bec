"""A run's TensorBoard scalars read back as numbers: what notebooks plot and tests check."""

import collections

from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from bertjax import files
from bertjax.records import tfrecord


def read_scalars(workdir: str, tags=None) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} of the scalars the loop wrote to `workdir` (local or a URL, read
  through bertjax.files, without TensorFlow); all tags, or only `tags`. A step written twice (a
  resumed run repeats steps after its checkpoint) keeps the later value, as TensorBoard shows
  it. Non-scalar summaries (text, hparams) are left out."""
  wanted = set(tags) if tags is not None else None
  scalars = collections.defaultdict(dict)
  for path in files.glob(files.join(workdir, 'events.out.tfevents.*')):
    for record in tfrecord.read_records(files.read_bytes(path)):
      event = event_pb2.Event.FromString(record)
      for value in event.summary.value:
        if wanted is not None and value.tag not in wanted:
          continue
        if value.HasField('tensor'):
          array = tensor_util.make_ndarray(value.tensor)
          if array.ndim == 0 and array.dtype.kind in 'fiu':
            scalars[value.tag][event.step] = float(array)
        elif value.HasField('simple_value'):
          scalars[value.tag][event.step] = float(value.simple_value)
  return dict(scalars)
