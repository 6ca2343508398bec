"""A client's error on a path, local or a URL, told as one a user can act on: a missing file or
bucket, no permission, no network, a write under a file; each in one line naming the path as
given.

bertjax/files.py reaches every path inside `reaching`, which turns the OS's and fsspec's errors
(gcsfs' HttpError, aiohttp's, a 403 as OSError 'Forbidden') into these; the stores' hints and
the missing-bucket check are object_store.py's.
"""

import contextlib
import os

from bertjax import object_store


def _is_remote(path) -> bool:
  """files.is_remote (imported when asked: files imports this module)."""
  from bertjax import files  # pylint: disable=g-import-not-at-top  (imports this)
  return files.is_remote(path)


def missing_bucket(path) -> FileNotFoundError | None:
  """object_store.missing_bucket's error for a URL; None for a local path."""
  return object_store.missing_bucket(path) if _is_remote(path) else None


def under_a_file(path, folder) -> NotADirectoryError:
  """The error for a write to `path` where `folder`, above it, is a file."""
  return NotADirectoryError(f'cannot write {path}: {folder} is a file, not a directory: move '
                            'that file aside, or write elsewhere')


def describe(error: BaseException, path) -> BaseException:
  """The error a user can act on for `error` raised while reaching `path` (the URL as given)."""
  path = os.fspath(path)
  protocol = path.split('://', 1)[0] if _is_remote(path) else ''
  hint = object_store.STORE_HINTS.get(protocol, 'check the URL and your credentials')
  code = getattr(error, 'code', None)
  text = str(error)
  if isinstance(error, FileNotFoundError):
    return missing_bucket(path) or FileNotFoundError(f'{path} does not exist.')
  if isinstance(error, PermissionError) or code in (401, 403) or text.startswith('Forbidden'):
    if not _is_remote(path):
      hint = 'check its owner and mode (ls -l) or write elsewhere'
    return PermissionError(f'{path}: no permission: {hint}.')
  if _unreachable(error):
    cause = text.splitlines()[0] if text else type(error).__name__
    if isinstance(error, TimeoutError) and _is_remote(path):  # fsspec's says nothing more.
      cause = f'{cause}: no answer (no data for {object_store.STALL_S} s) on each of its tries'
    return ConnectionError(f'{path}: the storage service cannot be reached (no network, or it '
                           f'keeps failing): check the network and retry ({cause}).')
  return error


def _unreachable(error: BaseException) -> bool:
  """Whether `error` says the storage service cannot be reached (or keeps failing)."""
  return (isinstance(error, (ConnectionError, TimeoutError))
          or type(error).__module__.startswith('aiohttp') or 'Cannot connect to host' in str(error)
          # tensorstore's (orbax's arrays), once its tries of a transient failure are spent.
          or 'retry attempts failed' in str(error)
          or getattr(error, 'code', None) in (429, 500, 502, 503, 504))


def unreachable(error: BaseException) -> bool:
  """Whether `error`, or one it came from, is describe's no-network kind: orbax reaches a
  bucket through its own client, whose errors no `reaching` described."""
  seen = 0
  while error is not None and seen < 10:
    if _unreachable(error):
      return True
    error, seen = error.__cause__ or error.__context__, seen + 1
  return False


@contextlib.contextmanager
def reaching(path):
  """Turns a client's errors on `path` into `describe`'s."""
  try:
    yield
  except (IsADirectoryError, NotADirectoryError, FileExistsError, UnicodeDecodeError):
    raise
  except Exception as e:  # pylint: disable=broad-except
    described = describe(e, path)
    if described is e:
      raise
    raise described from None
