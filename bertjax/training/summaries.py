"""A run's TensorBoard scalars read back as numbers: what notebooks plot and tests check."""

import collections

import tensorflow as tf


def read_scalars(workdir: str, tags=None) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} of the scalars the loop wrote to `workdir` (local or gs://); all tags,
  or only `tags`. A step written twice (a resumed run repeats steps after its checkpoint) keeps
  the later value, as TensorBoard shows it. Non-scalar summaries (text, hparams) are left out."""
  wanted = set(tags) if tags is not None else None
  scalars = collections.defaultdict(dict)
  for path in sorted(tf.io.gfile.glob(f'{workdir}/events.out.tfevents.*')):
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
      event = tf.compat.v1.Event.FromString(record)
      for value in event.summary.value:
        if wanted is not None and value.tag not in wanted:
          continue
        if value.HasField('tensor'):
          array = tf.make_ndarray(value.tensor)
          if array.ndim == 0 and array.dtype.kind in 'fiu':
            scalars[value.tag][event.step] = float(array)
        elif value.HasField('simple_value'):
          scalars[value.tag][event.step] = float(value.simple_value)
  return dict(scalars)
