"""A checkpoint's disk space: a save the disk cannot hold is refused before it starts (every
host agreeing), and a full disk met by a save in the background is one error saying which
checkpoint is intact and what to do.
"""

import contextlib
import errno
import shutil

import jax
import orbax.checkpoint as ocp

from bertjax.training import hosts
from bertjax.training import run_files


class DiskFullError(OSError):
  """A checkpoint could not be written for lack of space; the previous ones are intact."""


def _is_disk_full(error: BaseException) -> bool:
  seen = 0
  while error is not None and seen < 10:
    if getattr(error, 'errno', None) == errno.ENOSPC or 'No space left on device' in str(error):
      return True
    error, seen = error.__cause__ or error.__context__, seen + 1
  return False


@contextlib.contextmanager
def disk_full_as_one_error(mngr: ocp.CheckpointManager):
  """Turns a full disk during a save (raised by the save or the next wait) into one error."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except  # Re-raised unless the disk is full.
    if not _is_disk_full(e):
      raise
    raise DiskFullError(f'the disk holding {mngr.directory} is full: a checkpoint could not be '
                        f'written. {_what_is_left(mngr)}') from None


def _what_is_left(mngr) -> str:
  try:  # The finished steps: a failed save never gets its final name.
    kept = run_files.checkpoint_steps(str(mngr.directory))
  except OSError:
    kept = []
  return ((f'The last complete one (step {kept[-1]}) is intact and a rerun resumes from it. '
           if kept else 'No complete checkpoint exists yet. ') +
          'Free space (or move the workdir to a larger disk) and rerun the same command.')


def check_space(mngr: ocp.CheckpointManager, step: int, state):
  """Refuses to start a save that the disk cannot hold (local disks; remote ones are not
  checked): a half-written save would only fail later, in the background."""
  directory = str(mngr.directory)
  if '://' in directory:
    return
  # The save in flight first (the next save would wait for it anyway): its bytes count. Its
  # failure on this host (a full disk) is told the others below, like a shortfall.
  try:
    with disk_full_as_one_error(mngr):
      mngr.wait_until_finished()
    failed = None
  except DiskFullError as e:
    failed = e
  need = sum(x.nbytes for x in jax.tree.leaves(state)) / jax.process_count()
  free = shutil.disk_usage(directory).free  # local disk (remote stores returned above)
  short = free < need * 1.05 + (4 << 20)
  # Every host's reading, or one host alone would stop while the others start the save.
  verdict, host = hosts.worst(int(short or failed is not None))
  if failed:
    raise failed
  if verdict:
    seen = (f'has {free / 2**20:.0f} MiB free, too little for the checkpoint of step {step}'
            if short else f'has too little free space for the checkpoint of step {step} as '
            f'process {host} reads it')
    raise DiskFullError(f'the disk holding {directory} {seen} (about {need / 2**20:.0f} MiB, '
                        f'plus 4 MiB to spare): not saved. {_what_is_left(mngr)}')
