"""Whether a restored checkpoint is what was saved: array digests; damage told from other errors.

The meta item of every save records a digest of each array of the state (an order-sensitive sum
of its bits, computed on the device in any sharding), checked after each restore, so a flipped
bit is found even where the storage format has no checksum. An error is damage (the bytes are
not what was saved: restore falls back to the previous step) or not (permissions, memory, a
bug: the run stops with the checkpoints left where they are). A failed restore's reads that
orbax left pending are closed with its error, not printed as tracebacks when collected.
"""

import asyncio
import json
import posixpath
import urllib.parse

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
from orbax.checkpoint import path as ocp_path
import tensorstore as ts

from bertjax import files

# Messages of errors that mean damaged bytes (tensorstore's status codes among them), as
# opposed to errors of the reader (permissions, memory, a wrong path).
_DAMAGE_MARKERS = ('OUT_OF_RANGE', 'NOT_FOUND', 'DATA_LOSS', 'INVALID_ARGUMENT', 'does not exist',
                   'corrupt', 'Corrupt', 'checksum', 'truncated', 'Unexpected end', 'decode')


def finished(directory: str, found: list[int]) -> list[int]:
  """Of a checkpoints folder's numbered steps `found` (oldest first; `directory` as orbax names
  it: checkpoint.orbax_path), those whose save finished:
  all of a local folder's (orbax names a step only once it is whole, by a rename). In a bucket
  (no atomic rename) orbax writes a step under its number and marks it finished last, so only
  the newest steps can be mid-save: those newer than the newest marked one are left out (being
  saved, or cut short: no damage to warn of). Steps older than it are kept marked or not. With no
  mark at all, the steps are a run's copied up from a disk (whole, with their items' metadata)
  or a bucket run's first save in progress: the newest without their metadata are left out."""
  if not files.is_remote(directory) or not found:
    return found
  for index in range(len(found) - 1, -1, -1):  # Newest first: one look per step until a mark.
    if _marked(directory, found[index]):
      return found[:index + 1]
  whole = len(found)
  while whole and not _items_whole(directory, found[whole - 1]):
    whole -= 1
  return found[:whole]


def unmarked_whole(directory: str, found: list[int]) -> list[int]:
  """Of a bucket's numbered steps `found` (`directory` as finished's), those that hold their
  items' metadata but not orbax's mark of a finished save: a run copied up from a disk (which
  has no marks), never a save killed before its items were written. [] for a local folder."""
  if not files.is_remote(directory):
    return []
  return [step for step in found if _items_whole(directory, step) and not _marked(directory, step)]


def _items_whole(directory: str, step: int) -> bool:
  """Whether a step holds its items' metadata, which orbax writes once their arrays are."""
  return (files.exists(files.join(directory, str(step), 'state', '_METADATA'))
          and files.exists(files.join(directory, str(step), 'meta', 'metadata')))


def _marked(url: str, step: int) -> bool:
  """Whether orbax marked the bucket's step `url`/`step` as a finished save."""
  step_dir = epath.Path(posixpath.join(url.rstrip('/'), str(step)))
  try:
    return ocp_path.step.is_checkpoint_finalized(step_dir)
  except Exception as e:  # pylint: disable=broad-except  # epath's own errors: one line.
    raise OSError(f'cannot read {step_dir} ({type(e).__name__}: {str(e)[:200]})') from e


def closing_abandoned_reads(read):
  """`read` (a step's restore through orbax), which on failing closes the reads it left behind.

  orbax gathers a step's array reads with the read of its array metadata on an event loop of
  its own; when one fails it closes the loop with the others pending, and offers no way to
  cancel them. Each, collected later (when its TensorStore read ends, perhaps after the next
  step was restored), turned its close into an exception Python printed as 'Exception ignored
  in: <coroutine ...>' with a traceback and a TensorStore spec: ~60 lines per array shard, 1,000s
  after the one-line warning. Closed here, they end while the error is handled."""

  def read_or_close():
    try:
      read()
    except BaseException as e:
      _close_pending(e)
      raise

  return read_or_close


def _close_pending(error: BaseException):
  """Closes the coroutines of the tasks left pending on the closed event loops that `error`
  came through (orbax's run_until_complete, in its traceback)."""
  loops, seen = set(), 0
  while error is not None and seen < 10:
    tb = error.__traceback__
    while tb is not None:
      loops.update(v for v in tb.tb_frame.f_locals.values()
                   if isinstance(v, asyncio.AbstractEventLoop) and v.is_closed())
      tb = tb.tb_next
    error, seen = error.__cause__ or error.__context__, seen + 1
  closed = 0
  for loop in loops:
    for task in asyncio.all_tasks(loop):  # Pending ones only; a closed loop runs none.
      try:
        task.get_coro().close()  # Never started: no 'never awaited' warning either.
      except Exception:  # pylint: disable=broad-except  # orbax's read turns the close into one.
        pass
      closed += 1
  if closed:
    logging.debug('closed %d read(s) the failed restore left pending', closed)


class DamagedCheckpointError(ValueError):
  """A checkpoint's bytes are not what was saved."""


class MissingHostFolderError(DamagedCheckpointError):
  """A multi-host save lacks a host's folder, perhaps on that host's disk: a reader falls back
  to an older step; the run's own resume moves nothing and stops (it can be copied back)."""


def is_damage(error: BaseException) -> bool:
  """True when an error (or one it came from) says a checkpoint's bytes are damaged."""
  seen = 0
  while error is not None and seen < 10:
    if isinstance(error, (DamagedCheckpointError, FileNotFoundError, json.JSONDecodeError,
                          UnicodeDecodeError)):
      return True
    if isinstance(error, (PermissionError, MemoryError)):
      return False
    if any(marker in str(error) for marker in _DAMAGE_MARKERS):
      return True
    error, seen = error.__cause__ or error.__context__, seen + 1
  return False


def why_kept(error: Exception, directory, step: int) -> str | None:
  """Why a restore that failed with `error` stops the run with the step left where it is (a
  host's folder missing; an error that is not damage), or None for damage (moved aside)."""
  if isinstance(error, MissingHostFolderError):
    return (f'checkpoint step {step} in {directory} cannot be resumed: {error}. Nothing was '
            'moved: copy that folder back into it, or move the step aside (e.g. to '
            f'{step}.incomplete) to resume from the one before')
  if not is_damage(error):
    return (f'checkpoint step {step} in {directory} could not be restored '
            f'({type(error).__name__}: {str(error)[:300]}). Its files look intact, so nothing '
            'was moved: fix the cause (permissions, memory, the config) and rerun.')
  return None


def _digest(x):
  """A uint32 digest of an array's bits: sum of bits x an odd weight per position, mod 2^32."""
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
  bits = jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)  # 8 bytes: [..., 2].
  index = jnp.zeros(bits.shape, jnp.uint32)
  stride = 1
  for dim in reversed(range(bits.ndim)):
    index = index + jax.lax.broadcasted_iota(jnp.uint32, bits.shape, dim) * jnp.uint32(stride)
    stride = stride * bits.shape[dim] % (1 << 32)
  weight = index * jnp.uint32(2654435761) * jnp.uint32(2) + jnp.uint32(1)  # Odd: no bit lost.
  return jnp.sum(bits * weight, dtype=jnp.uint32)


_digests = jax.jit(lambda tree: jax.tree.map(_digest, tree))


def digests(state) -> dict:
  """{path: digest} of every array of a (sharded) state; the same for any sharding."""
  values = jax.device_get(_digests(state))
  return {jax.tree_util.keystr(path): int(v)
          for path, v in jax.tree_util.tree_flatten_with_path(values)[0]}


def check_restored(step: int, state, meta):
  """Raises DamagedCheckpointError when the meta or the arrays are not what was saved."""
  if not isinstance(meta, dict) or not all(
      isinstance(meta.get(k), int) for k in ('step', 'examples_consumed')):
    raise DamagedCheckpointError(f'its meta item lacks the step or the examples consumed: {meta}')
  if 'digests' in meta:
    found = digests(state)
    bad = sorted(k for k, v in meta['digests'].items() if found.get(k) != v)
    if bad:
      raise DamagedCheckpointError(f'{len(bad)} array(s) differ from what was saved (digest), '
                                   f'e.g. {bad[0]}')


def check_files_named(state: str):
  """Refuses a state whose OCDBT tree names files that are not there: above all a host's
  folder (ocdbt.process_<i>, what each process of a multi-host save writes, on its own disk
  where the run saved to one). tensorstore reads a missing file as empty, so orbax's read of
  it failed as 'Truncated Zstd-compressed stream', with tracebacks after. `state`: a local
  path, absolute (in a bucket each node read would be a request, and every host's part lands in
  the one bucket)."""
  base = f'file://{state}/'
  named = set()
  try:
    store = ts.KvStore.open(base).result()
    versions = ts.ocdbt.dump(store).result().get('versions') or []
    nodes = [versions[-1]['root']['location']] if versions else []
    while nodes:  # A node that cannot be read ends the walk: what it named so far is checked.
      for entry in ts.ocdbt.dump(store, nodes.pop()).result().get('entries', []):
        if 'location' in entry:  # An interior node's child.
          nodes.append(entry['location'])
        if 'location' in entry or 'indirect_value' in entry:
          # kind:base path:relative path:offset:length, the paths percent-encoded.
          _, folder, name = (entry.get('location') or entry['indirect_value']).split(':')[:3]
          named.add(urllib.parse.unquote(folder + name))
  except (ValueError, AttributeError, KeyError, IndexError, TypeError):
    pass  # An older tensorstore, another layout: orbax's reading judges what is not named.
  listed = {}
  for folder in {posixpath.dirname(f) for f in named}:
    try:
      listed[folder] = set(files.listdir(files.join(state, folder)))
    except (FileNotFoundError, NotADirectoryError):
      listed[folder] = set()
  missing = sorted(f for f in named if posixpath.basename(f) not in listed[posixpath.dirname(f)])
  hosts = sorted({f.split('/')[0] for f in missing if f.startswith('ocdbt.process_')
                  and not files.isdir(files.join(state, f.split('/')[0]))})
  if hosts:
    raise MissingHostFolderError(
        f'state/{", state/".join(hosts)} is missing: the checkpoint is incomplete (process '
        f'{", ".join(h[len("ocdbt.process_"):] for h in hosts)}\'s part of a multi-host save; '
        'left on that host\'s own disk?)')
  if missing:
    raise DamagedCheckpointError(
        f'{len(missing)} data file(s) its tree names are missing, e.g. state/{missing[0]}')
