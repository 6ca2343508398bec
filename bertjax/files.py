"""One file system for every path a user gives: local paths through the OS, URLs (gs://, s3://,
memory://, ...) through fsspec (gcsfs for gs://, s3fs for s3:// where installed), with one set
of error messages for a missing file, a missing bucket, no permission and no network.

Every reader and writer of bertjax outside the training loop's own clients (tf.data reads its
input files through TensorFlow's file systems; orbax writes checkpoints through etils.epath and
tensorstore) goes through these functions. Libraries that only take local paths (TensorFlow's
SavedModel and TF1 writers, transformers' folder readers) get one through `local_copy` (a
remote file or folder downloaded to a temporary folder) or `staged_folder` (written locally,
then uploaded whole once the block succeeds).

Object stores have no rename and no folders: an atomic write there is one object put (the
object appears whole or not at all); `makedirs` makes nothing; a "folder" exists when an object
lies under it, and a write under an object is refused as a disk refuses a file under a file.
A URL is read and written as orbax names it (`normalised`: gs://b//x is gs://b/x). Transient
errors (timeouts, 429, 5xx) are retried with backoff by the client library (gcsfs: 6 tries);
what still fails is reported in one line naming the URL as given (file_errors.py).
Which client serves a URL, whether its service can be reached and whether its bucket exists
are object_store.py's.
"""

import builtins
import contextlib
import glob as globlib
import hashlib
import os
import posixpath
import shutil
import stat
import tempfile

from bertjax import file_errors
from bertjax import object_store
from bertjax import processes


def is_remote(path) -> bool:
  """True for a URL (gs://, s3://, memory://, ...); False for a local path or file:// URL."""
  text = os.fspath(path) if not isinstance(path, str) else path
  return '://' in text and not text.startswith('file://')


def normalised(path) -> str:
  """A URL spelled as every client stores it (object_store.normalised: gs://b//x is gs://b/x);
  a local path unchanged (the OS reads // as /)."""
  return object_store.normalised(path) if is_remote(path) else os.fspath(path)


def _local(path) -> str:
  text = os.fspath(path)
  return text[len('file://'):] if text.startswith('file://') else text


def join(path, *parts) -> str:
  """`path`/`parts` joined with / for a URL, the OS separator for a local path."""
  path = os.fspath(path)
  return posixpath.join(path, *parts) if is_remote(path) else os.path.join(_local(path), *parts)


def parent(path) -> str:
  """The folder holding `path` (a URL stays a URL)."""
  path = os.fspath(path).rstrip('/') if is_remote(path) else os.fspath(path)
  return posixpath.dirname(path) if is_remote(path) else os.path.dirname(_local(path))


def name(path) -> str:
  """The last part of `path`."""
  path = os.fspath(path)
  return posixpath.basename(path.rstrip('/')) if is_remote(path) else os.path.basename(path)


def check_exists(path, missing: str):
  """Raises FileNotFoundError(`missing`) unless `path` exists; for a URL whose bucket does not
  exist (or cannot be seen) the error names the URL and the bucket instead."""
  if not exists(path):
    raise file_errors.missing_bucket(path) or FileNotFoundError(missing)


def require_file(path, missing: str):
  """Raises FileNotFoundError(`missing`) unless `path` is a file; for a URL whose bucket does
  not exist (or cannot be seen) the error names the URL and the bucket instead; for a local
  folder or device, `missing` says what it is instead of its 'does not exist' (a `missing`
  without those words, one that names the folder already, is raised as it is)."""
  if not isfile(path):
    if 'does not exist' in missing and not is_remote(path) and exists(path):
      what = 'is a folder, not a file' if isdir(path) else 'is no regular file (a device?)'
      raise FileNotFoundError(missing.replace('does not exist', what, 1))
    raise file_errors.missing_bucket(path) or FileNotFoundError(missing)


def check_bucket(path):
  """Raises check_exists' missing-bucket error for a URL whose bucket does not exist (or these
  credentials cannot see), or check_folders' for a URL under an object; nothing for a local path.
  Writers call it before any work: the put at the end would fail only after it, naming the
  object it put (or, under an object, succeed: see check_folders)."""
  error = file_errors.missing_bucket(path)
  if error is not None:
    raise error
  if is_remote(path):
    check_folders(path)


def check_folders(path):
  """Raises NotADirectoryError, in one line, when a folder above `path` is a file: locally the
  nearest one that exists; in a bucket any of them that is an object, which a put does not
  refuse: the name would become a file and a folder at once (gs://b/in.txt and
  gs://b/in.txt/out.jsonl), which no local copy can hold and tools read as one or the other."""
  if is_remote(path):
    _check_folders(path, parent(normalised(path)))
  else:
    _check_folders(path, os.path.dirname(os.path.abspath(_local(path))))


def _check_folders(path, folder: str):
  """check_folders of `path` from `folder` up (a URL's up to its bucket, not included)."""
  if not is_remote(path):
    while not os.path.exists(folder) and folder != os.path.dirname(folder):
      folder = os.path.dirname(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
      raise file_errors.under_a_file(path, folder)
    return
  above = object_store.object_at_or_above(folder)
  if above is not None:
    raise file_errors.under_a_file(path, above)


def _check_file_name(path):
  """Refuses to write a path ending in /: an object store would keep an object named `out/`
  (a folder's marker to its tools), a local rename would fail obscurely."""
  if os.fspath(path).endswith(('/', os.sep)):
    raise IsADirectoryError(f'{path} ends in /: name the file to write, not a folder.')


def open(path, mode='r', encoding='utf-8'):  # pylint: disable=redefined-builtin
  """A file object for `path`. Writing to a URL puts one object when the file is closed."""
  if 'b' in mode:
    encoding = None
  writes = bool(set(mode) & set('wax'))
  if writes:
    _check_file_name(path)
  if not is_remote(path):
    if 'r' in mode and os.path.isdir(_local(path)):
      raise IsADirectoryError(f'{path} is a folder: name a file.')
    with file_errors.reaching(path):
      try:
        return builtins.open(  # pylint: disable=consider-using-with
            _local(path), mode, encoding=encoding)
      except NotADirectoryError:
        if writes:
          check_folders(path)  # A file where a folder should be: said as in a bucket.
        raise
  if writes:
    check_folders(path)
  fs, stripped = object_store.client(path)
  with file_errors.reaching(path):
    if 'r' in mode and (kind := _kind(fs, stripped)) != 'file':
      if kind == 'directory':
        raise IsADirectoryError(f'{path} is a folder: name a file.')
      raise FileNotFoundError(stripped)
    return fs.open(stripped, mode, encoding=encoding)


def sha256(path) -> str:
  """The hex sha256 of a file, local or a URL, read in blocks (vocab digests)."""
  with open(path, 'rb') as f:
    return hashlib.file_digest(f, 'sha256').hexdigest()


def read_bytes(path) -> bytes:
  """The whole file."""
  if not is_remote(path):
    if os.path.isdir(_local(path)):
      raise IsADirectoryError(f'{path} is a folder: name a file.')
    with file_errors.reaching(path), builtins.open(_local(path), 'rb') as f:
      return f.read()
  fs, stripped = object_store.client(path)
  with file_errors.reaching(path):
    if _kind(fs, stripped) == 'directory':
      raise IsADirectoryError(f'{path} is a folder: name a file.')
    return fs.cat_file(stripped)


def read_text(path) -> str:
  """The whole file as UTF-8 text, or an error naming the file and the first bad byte."""
  data = read_bytes(path)
  try:
    return data.decode('utf-8')
  except UnicodeDecodeError as e:
    raise ValueError(f'{path} is not UTF-8 text (byte {e.start}): re-encode it.') from None


def write_atomically(path, data: str | bytes):
  """Writes a file whole or not at all: locally a temp file beside it renamed into place (two
  writers at once each write their own) with the replaced file's permissions (one its owner
  made read-only is refused, as a shell's `>` refuses it), remotely one object put."""
  _check_file_name(path)
  if isinstance(data, str):
    data = data.encode('utf-8')
  if is_remote(path):
    check_folders(path)
    fs, stripped = object_store.client(path)
    with file_errors.reaching(path):
      fs.pipe_file(stripped, data)
    return
  path = _local(path)
  if os.path.isdir(path):  # Else the rename's error names the temp file.
    raise IsADirectoryError(f'{path} is a folder: name the file to write.')
  try:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  except (FileExistsError, NotADirectoryError):
    check_folders(path)  # A file where a folder should be: said as in a bucket.
    raise
  mode = check_replaceable(path)
  from bertjax import console  # pylint: disable=g-import-not-at-top
  temp = temporary_beside(path)
  try:
    with console.temporary(temp):
      with builtins.open(temp, 'wb') as f:
        f.write(data)
      if mode is not None:
        os.chmod(temp, mode)
      os.replace(temp, path)
  finally:
    if os.path.exists(temp):
      os.unlink(temp)


def check_replaceable(path) -> int | None:
  """The permissions of the regular local file at `path` that a write would replace (None: no
  such file, a link, which is replaced as a link, or a URL); one its owner made read-only is
  refused, as a shell's `>` refuses it."""
  info = None if is_remote(path) or not os.path.lexists(_local(path)) else os.lstat(_local(path))
  if info is None or not stat.S_ISREG(info.st_mode):
    return None
  mode = stat.S_IMODE(info.st_mode)
  if not mode & stat.S_IWUSR:
    raise PermissionError(f'{path} is read-only (mode {mode:o}): make it writable (chmod u+w) '
                          'to replace it, or write elsewhere.')
  return mode


def temporary_beside(path) -> str:
  """A hidden local file beside local `path` to write it into before renaming it into place,
  named for this process (processes.mark: two writers at once each write their own). The ones
  writers of `path` killed on this host left (SIGKILL runs no clean-up) are removed first."""
  folder, name = os.path.split(os.path.abspath(_local(path)))
  prefix = processes.hidden_prefix(name)
  processes.remove_dead_writers(folder, prefix, '.tmp')
  return os.path.join(folder, f'{prefix}{processes.mark()}.tmp')


def _ask(path, local, method: str):
  """`local(path)` for a local path, else the client's `method` on the URL (errors described)."""
  if not is_remote(path):
    return local(_local(path))
  fs, stripped = object_store.client(path)
  with file_errors.reaching(path):
    return getattr(fs, method)(stripped)


def _kind(fs, stripped) -> str | None:
  """'file' or 'directory' as the store tells `stripped` (None: nothing there). fsspec's own
  isfile and isdir answer False to any error: with the network gone mid-command a run's folder
  was no folder and a file missing, and readers said so ('does not exist', a checkpoint without
  its meta item: damaged) instead of the storage service being unreachable."""
  try:
    return fs.info(stripped)['type']
  except FileNotFoundError:
    return None


def exists(path) -> bool:
  return _ask(path, os.path.exists, 'exists')


def isdir(path) -> bool:
  """A local folder, or a URL some object lies under (or a bucket)."""
  if not is_remote(path):
    return os.path.isdir(_local(path))
  fs, stripped = object_store.client(path)
  with file_errors.reaching(path):
    return _kind(fs, stripped) == 'directory'


def isfile(path) -> bool:
  if not is_remote(path):
    return os.path.isfile(_local(path))
  fs, stripped = object_store.client(path)
  with file_errors.reaching(path):
    return _kind(fs, stripped) == 'file'


def size(path) -> int:
  """The file's size in bytes."""
  return _ask(path, os.path.getsize, 'size')


def version(path) -> str:
  """What changes when the file is rewritten: locally its size, times and inode, in a
  bucket its size and generation (or ETag, ...); '' where the store tells none."""
  if not is_remote(path):
    # ctime too: a copy that keeps the mtime (cp -p, rsync -t) still changes it.
    return '{0.st_size}:{0.st_mtime_ns}:{0.st_ctime_ns}:{0.st_ino}'.format(os.stat(_local(path)))
  info = _ask(path, None, 'info')
  stamp = next((info[k] for k in ('generation', 'ETag', 'etag', 'mtime', 'LastModified',
                                  'updated', 'created') if info.get(k) not in (None, '')), None)
  return '' if stamp is None else f'{info.get("size")}:{stamp}'


def listdir(path) -> list[str]:
  """The names (not paths) directly in a folder, sorted."""
  if not is_remote(path):
    return sorted(os.listdir(_local(path)))
  fs, stripped = object_store.client(path)
  with file_errors.reaching(path):
    if _kind(fs, stripped) != 'directory':
      raise FileNotFoundError(stripped)
    return sorted(posixpath.basename(p.rstrip('/')) for p in fs.ls(stripped, detail=False)
                  if p.rstrip('/') != stripped.rstrip('/'))


def glob(pattern) -> list[str]:
  """The paths matching `pattern` (a URL's matches are URLs), sorted. A hidden name (.x)
  matches only a pattern that names it so, in a bucket as on a disk (fsspec's glob matched
  them: a lock object beside a corpus was read as its text)."""
  if not is_remote(pattern):
    return sorted(globlib.glob(_local(pattern)))
  fs, stripped = object_store.client(pattern)
  with file_errors.reaching(pattern):
    found = sorted(fs.unstrip_protocol(p) for p in fs.glob(stripped))
  if name(pattern).startswith('.'):
    return found
  return [path for path in found if not name(path).startswith('.')]


def walk_files(path) -> list[str]:
  """Every file under a folder, as paths relative to it (with /), sorted."""
  if not is_remote(path):
    root = _local(path)
    found = []
    for folder, _, names in os.walk(root):
      found += [os.path.relpath(os.path.join(folder, n), root).replace(os.sep, '/')
                for n in names]
    return sorted(found)
  fs, stripped = object_store.client(path)
  with file_errors.reaching(path):
    base = stripped.rstrip('/') + '/'
    return sorted(p[len(base):] for p in fs.find(stripped) if p.startswith(base))


def makedirs(path):
  """A local folder and its parents (an object store needs none, but refuses, as a disk does,
  one that is an object or lies under one: check_folders)."""
  if is_remote(path):
    _check_folders(path, normalised(path).rstrip('/'))  # The folder itself, then those above.
    return
  try:
    os.makedirs(_local(path), exist_ok=True)
  except (FileExistsError, NotADirectoryError):
    _check_folders(path, os.path.abspath(_local(path)))  # A file where a folder should be.
    raise


def remove(path):
  """Deletes one file (missing: nothing to do)."""
  with contextlib.suppress(FileNotFoundError):
    _ask(path, os.unlink, 'rm_file')


def rmtree(path):
  """Deletes a folder and everything under it (missing: nothing to do)."""
  if not is_remote(path):
    shutil.rmtree(_local(path), ignore_errors=False) if os.path.isdir(_local(path)) else None
    return
  fs, stripped = object_store.client(path)
  with file_errors.reaching(path), contextlib.suppress(FileNotFoundError):
    if fs.exists(stripped):
      fs.rm(stripped, recursive=True)


def copy(source, destination):
  """Copies one file; either side may be local or a URL."""
  if not is_remote(source) and not is_remote(destination):
    makedirs(parent(destination) or '.')
    shutil.copyfile(_local(source), _local(destination))
    return
  write_atomically(destination, read_bytes(source))


def copy_tree(source, destination):
  """Copies every file under folder `source` to the same place under `destination`."""
  for relative in walk_files(source):
    copy(join(source, *relative.split('/')), join(destination, *relative.split('/')))


@contextlib.contextmanager
def local_copy(path):
  """A local path holding what `path` holds: `path` itself when local, else the remote file
  or folder downloaded to a temporary folder (deleted after the block)."""
  if not is_remote(path):
    yield _local(path)
    return
  with tempfile.TemporaryDirectory(prefix='bertjax_download_') as temp:
    target = os.path.join(temp, name(path) or 'download')
    if isdir(path) and not isfile(path):
      copy_tree(path, target)
      os.makedirs(target, exist_ok=True)
    else:
      copy(path, target)
    yield target


@contextlib.contextmanager
def staged_folder(path):
  """A local folder to write `path`'s files into: `path` itself when local, else a temporary
  folder uploaded file by file to `path` once the block ends without error."""
  if not is_remote(path):
    os.makedirs(_local(path), exist_ok=True)
    yield _local(path)
    return
  with tempfile.TemporaryDirectory(prefix='bertjax_upload_') as temp:
    yield temp
    copy_tree(temp, path)


def folders_up(path, levels: int | None = None) -> list[str]:
  """`path` and the folders above it (at most `levels` of them): a URL's stop at its bucket."""
  found = [os.fspath(path)]
  while levels is None or len(found) <= levels:
    up = parent(found[-1]) or ('' if is_remote(path) else '.')  # 'run' is in '.'.
    if not up or up == found[-1] or (is_remote(path) and '://' not in up):
      break
    found.append(up)
  return found
