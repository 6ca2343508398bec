"""A run's TensorBoard scalars read back as numbers: what notebooks plot and tests check."""

import collections
import difflib

from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from bertjax import files
from bertjax.records import tfrecord


def read_scalars(workdir: str, tags=None) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} of the scalars the loop wrote to `workdir` (local or a URL, read
  through bertjax.files, without TensorFlow); all tags, or only `tags` (one tag or several). What
  TensorBoard shows (its purge_orphaned_data): the files are read in name order (the order they
  were opened), and a run's SessionLog START at step s (event_writer: a resumed run's first step)
  drops the scalars at steps s and later read before it, so the steps a killed run wrote after
  its checkpoint hold the resumed run's values, or none where it has not reached them again. A
  step written twice with no START between (files of an older writer) keeps its later value.
  Non-scalar summaries (text, hparams) are left out.
  A missing workdir, a file, or a folder with no event files is refused (a typo or the run's
  checkpoints/ read as {}), and so is a tag no file holds in a section (train/, eval/) the files
  hold tags of: the loop writes a section's tags together, so that is a typo. A tag of a section
  not written yet (eval/ before a live run's first evaluation) is left out, as before."""
  paths = _event_files(workdir)
  wanted = None if tags is None else {tags} if isinstance(tags, str) else set(tags)
  scalars, held = collections.defaultdict(dict), set()
  for path in paths:
    for record in tfrecord.read_records(files.read_bytes(path)):
      event = event_pb2.Event.FromString(record)
      if event.session_log.status == event_pb2.SessionLog.START:
        for values in scalars.values():
          for step in [s for s in values if s >= event.step]:
            del values[step]
      for value in event.summary.value:
        if value.HasField('tensor'):
          array = tensor_util.make_ndarray(value.tensor)
          if array.ndim != 0 or array.dtype.kind not in 'fiu':
            continue
          number = float(array)
        elif value.HasField('simple_value'):
          number = float(value.simple_value)
        else:
          continue
        held.add(value.tag)
        if wanted is None or value.tag in wanted:
          scalars[value.tag][event.step] = number
  _check_tags(workdir, wanted or set(), held)
  return {tag: values for tag, values in scalars.items() if values}


def _event_files(workdir) -> list[str]:
  """The TensorBoard event files in `workdir`, in name order; refuses a path that is no run's."""
  if files.isfile(workdir):
    raise ValueError(f'{workdir} is a file: pass the workdir of a run (the folder its '
                     'TensorBoard events are in)')
  paths = files.glob(files.join(workdir, 'events.out.tfevents.*'))
  if not paths:
    files.check_exists(workdir, f'{workdir} does not exist: pass the workdir of a run')
    raise FileNotFoundError(f'{workdir} holds no TensorBoard events (events.out.tfevents.*): '
                            "pass a run's workdir, which holds them")
  return paths


def _check_tags(workdir, wanted: set, held: set):
  """Refuses a wanted tag no file holds in a section the files hold tags of."""
  sections = {tag.split('/')[0] for tag in held}
  for tag in sorted(wanted - held):
    if tag.split('/')[0] in sections:
      close = difflib.get_close_matches(tag, held, n=3, cutoff=0.5)
      raise ValueError(f'the events of {workdir} hold no scalar {tag!r}: pass one of its '
                       f'{len(held)} tags (closest: {", ".join(close) or "none"})')
