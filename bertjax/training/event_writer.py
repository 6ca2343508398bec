"""TensorBoard event files for a workdir (local or a URL), written without TensorFlow.

An event file is a TFRecord file of `Event` protos (tensorboard's own proto classes): the first
names the file version, the second is a SessionLog START at the run's first step, each next one
holds a step's `Summary`. The START is what tells TensorBoard's Python reader (EventAccumulator,
`--load_fast=false`) a run resumed from a checkpoint: it drops what earlier files of the
workdir wrote from that step on (its purge_orphaned_data, as for TF Estimator's runs), so a
killed run's steps after its checkpoint, replayed by the resumed run, show once, with the
resumed run's values (its default reader ignores the START, and keeps a repeated step's last
value). A resumed run also moves the events after its start out of the earlier files, into a
run of their own (`_drop_replayed`): the default reader then shows each step once too.
TensorBoard reads these files as it reads tf.summary's; scalars go in as `simple_value`, which
it shows as scalars, and the hparams as the hparams plugin's session summary. TensorFlow's
import takes seconds (~4 s on 2 cores), a real share of a short fine-tuning that never touches
tf.data.

An object store (gs://...) cannot append: there the file's bytes are held in memory and the
whole object is put again at a flush (what TensorFlow's own GCS writer does), through
bertjax.files; a write flushes when FLUSH_S have passed since the last put, and close always
does, so TensorBoard follows the run within FLUSH_S. A failed put is retried at the next one.
Past ROLL_BYTES the writer goes on in a new file (as TensorFlow's writers roll theirs), so that a
put stays small over a long run.

EventWriter has the methods of clu's MetricWriter that the loop calls (write_scalars,
write_hparams, flush, close). Each write goes to the file at once: a few records per logged
step, so TensorBoard follows the run live. A full disk stops the events with a warning, never
the run, and leaves the file ending at a whole record.
"""

import itertools
import os
import socket
import time

from absl import logging
from google.protobuf import message
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.hparams import summary_v2 as hparams_summary

from bertjax import files
from bertjax.records import tfrecord

# Tells apart two writers opened in one second by one process; zero-padded, so that their names
# sort in the order they were opened (TensorBoard reads a run's files in name order).
_NUMBERS = itertools.count()
# A remote event file is put again at a write at most this often (and always at close).
FLUSH_S = 10.0
# A remote event file put past this size is closed and the writer goes on in a new one: one file
# put whole every FLUSH_S grew with the run (1M steps logged every 50: a ~6 MiB file put every
# 10 s by its end, ~50 GB a day, the loop waiting on each put).
ROLL_BYTES = 4 << 20


class EventWriter:
  """Appends events to a new events.out.tfevents.* file in `logdir` (made if missing), for a run
  that starts after `start_step` steps (0: a new run; a resumed run: its checkpoint's step)."""

  def __init__(self, logdir: str, start_step: int = 0):
    if start_step:
      _drop_replayed(logdir, start_step)
    self._logdir = logdir
    self.path = _new_path(logdir)
    self._remote = files.is_remote(logdir)
    self._failed = False
    if self._remote:
      self._data = bytearray()  # The whole file, put again at each flush.
      self._put_at = None  # time.monotonic() of the last put (None: never put).
      self._unput = False  # Bytes written since the last put.
    else:
      files.makedirs(logdir)
      # Unbuffered (files.open has no such mode): each record reaches the file at once, and a
      # failed write can be cut back.
      self._file = open(self.path, 'xb', buffering=0)  # pylint: disable=consider-using-with # local
      self._size = 0  # Bytes of whole records in the file.
    now = time.time()
    # Steps after start_step that earlier files hold are orphaned: this run writes them again.
    self._write([event_pb2.Event(wall_time=now, file_version='brain.Event:2'),
                 event_pb2.Event(wall_time=now, step=int(start_step) + 1,
                                 session_log=event_pb2.SessionLog(
                                     status=event_pb2.SessionLog.START))])

  def _put(self):
    """Puts the remote file's bytes as one object; a failure is retried at the next put."""
    try:
      files.write_atomically(self.path, bytes(self._data))
    except OSError as e:
      logging.warning('TensorBoard events could not be written to %s (%s): retrying at the '
                      'next write.', self.path, e)
      return
    self._put_at, self._unput = time.monotonic(), False

  def _write(self, events):
    """Appends whole records. A write that fails (a full disk) is cut back to the last whole
    record, so readers never meet half of one, and the run goes on without TensorBoard."""
    if self._failed:
      return
    data = memoryview(tfrecord.frame([e.SerializeToString() for e in events]))
    if self._remote:
      self._data += data
      self._unput = True
      if self._put_at is None or time.monotonic() - self._put_at >= FLUSH_S:
        self._put()
        if not self._unput and len(self._data) >= ROLL_BYTES:
          self._roll()
      return
    try:
      while data:
        data = data[self._file.write(data):]
    except OSError as e:
      self._failed = True
      try:
        self._file.truncate(self._size)
      except OSError:
        pass
      logging.warning('TensorBoard events could not be written to %s (%s): the run goes on '
                      'without them (checkpoints check their own space).', self.path, e)
      return
    self._size = self._file.tell()

  def _roll(self):
    """Goes on in a new remote file once this one is put whole (its name sorts after it)."""
    self.path = _new_path(self._logdir)
    self._data = bytearray(tfrecord.frame([event_pb2.Event(
        wall_time=time.time(), file_version='brain.Event:2').SerializeToString()]))
    self._unput = True

  def _summary(self, step: int, summary) -> event_pb2.Event:
    return event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary)

  def write_scalars(self, step: int, scalars):
    values = [summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
              for tag, value in scalars.items()]
    self._write([self._summary(step, summary_pb2.Summary(value=values))])

  def write_hparams(self, hparams):
    """The run's hyperparameters (str, bool, int or float values) for TensorBoard's HParams."""
    self._write([self._summary(0, hparams_summary.hparams_pb(dict(hparams)))])

  def flush(self):
    """Every local write is already in the file; a remote file is put now if it changed."""
    if self._remote and self._unput:
      self._put()

  def close(self):
    if self._remote:
      self.flush()
    else:
      self._file.close()


def _new_path(logdir: str) -> str:
  return files.join(logdir, f'events.out.tfevents.{int(time.time())}.{socket.gethostname()}.'
                            f'{os.getpid()}.{next(_NUMBERS):04d}.v2')


def _drop_replayed(logdir: str, start_step: int):
  """Moves the events after `start_step` out of `logdir`'s earlier event files, into
  `superseded/after_step_<start_step>.<time>/` beside them: the steps a resumed run trains
  again, which a killed run logged. TensorBoard's default reader ignores the START event and
  would show those points beside the resumed run's (at steps it logs at another interval,
  under a learning rate since changed); there they show as a run of their own (a divergence
  that killed the run stays in view), and nothing is lost if the resume fails. A file that
  cannot be read, copied or rewritten is left as it is, with a warning: never the run."""
  moved = 0
  # One folder per resume: a run killed twice after one checkpoint leaves two runs to show.
  side = files.join(logdir, 'superseded', f'after_step_{start_step}.{int(time.time())}')
  try:
    paths = files.glob(files.join(logdir, 'events.out.tfevents.*'))
  except OSError as e:
    paths = []
    logging.warning('TensorBoard: the event files in %s could not be listed (%s): its default '
                    'reader may show the steps after %d twice.', logdir, e, start_step)
  for path in paths:
    try:
      records = list(tfrecord.read_records(files.read_bytes(path)))
      events = [event_pb2.Event.FromString(r) for r in records]
      later = [r for r, e in zip(records, events, strict=True) if e.step > start_step]
      if later:  # The copy first: a failure between the two writes loses nothing.
        version = [r for r, e in zip(records, events, strict=True) if e.file_version][:1]
        files.write_atomically(files.join(side, files.name(path)),
                               tfrecord.frame(version + later))
        files.write_atomically(path, tfrecord.frame(
            [r for r, e in zip(records, events, strict=True) if e.step <= start_step]))
        moved += len(later)
    except (ValueError, OSError, message.DecodeError) as e:
      logging.warning('TensorBoard: %s could not be rewritten without the steps after %d, which '
                      'this run trains again (%s): TensorBoard\'s default reader may show both '
                      'runs\' points there.', path, start_step, e)
  if moved:
    logging.info('TensorBoard: %d earlier events after step %d, which this run trains again, '
                 'moved to %s', moved, start_step, side)


class NoWriter:
  """What processes other than 0 write: nothing."""

  def write_scalars(self, step, scalars):
    del step, scalars

  def write_hparams(self, hparams):
    del hparams

  def flush(self):
    pass

  def close(self):
    pass
