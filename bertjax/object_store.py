"""URLs' file systems: the fsspec client of each scheme, a fast check that the service can be
reached, and a missing bucket told apart from a missing object.

bertjax/files.py is the one file-system layer every reader and writer uses; it asks this module
for the client of a URL (gs:// through gcsfs, s3:// through s3fs, memory:// ...), and for the
error to show when the bucket of a URL does not exist or these credentials cannot see it.
"""

import functools
import os
import posixpath
import re
import socket

# gcsfs' default file system asks the storage-control API for every bucket's layout first (for
# zonal buckets); without network that alone takes a minute. Opt back in by setting it to true.
os.environ.setdefault('GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT', 'false')

STORE_HINTS = {
    'gs': 'check the bucket name, your credentials (`gcloud auth application-default login`) '
          'and its IAM roles',
    's3': 'check the bucket name, your AWS credentials and the bucket policy',
}


STALL_S = 60  # Seconds without data that fail a request to gs:// (gcsfs tries each 6 times).


@functools.cache
def filesystem(protocol: str):
  """The fsspec file system of a URL scheme (one per process), or a ValueError saying which
  package to install."""
  import fsspec  # pylint: disable=g-import-not-at-top
  # No listings cache: another process (a live run, the other hosts) writes the same folders.
  options = {'use_listings_cache': False} if protocol in ('gs', 'gcs', 's3', 's3a') else {}
  try:
    if protocol in ('gs', 'gcs'):
      import aiohttp  # pylint: disable=g-import-not-at-top  # gcsfs' HTTP client.
      # gcsfs' default (requests_timeout=None) is no limit at all: a server that takes the
      # connection and never answers held a tool for good, without a word. No data for STALL_S
      # on a request fails it (a large upload, sending, is not cut short); gcsfs retries it.
      options['requests_timeout'] = aiohttp.ClientTimeout(sock_connect=30, sock_read=STALL_S)
    return fsspec.filesystem(protocol, **options)
  except ImportError as e:
    package = {'gs': 'gcsfs', 's3': 's3fs', 'az': 'adlfs', 'abfs': 'adlfs'}.get(protocol)
    hint = f'pip install {package}' if package else 'install the fsspec package for it'
    raise ValueError(f'{protocol}:// paths need a file system client: {hint}.') from e
  except ValueError as e:  # fsspec knows no such protocol: a typo more likely than a package.
    raise ValueError(f'{protocol}:// is not a file system fsspec knows: check the URL\'s '
                     'scheme (gs://, s3://, ...).') from e
  except OSError as e:  # hdfs://: pyarrow's libhdfs needs a JVM (its error: 100 dlopen lines).
    if protocol not in ('hdfs', 'viewfs'):
      raise
    said = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise ValueError(f'{protocol}:// paths need Hadoop\'s client on this machine, which pyarrow '
                     f'could not start ({said}): set JAVA_HOME, HADOOP_HOME and CLASSPATH '
                     '(`hadoop classpath --glob`), or copy the files to a local disk or a '
                     'bucket.') from None


REACHED = set()


def check_reachable(protocol: str, path: str):
  """A fast, clear error when gs:// has no network: the client would retry for a minute first.
  One TCP connection to the service (10 s at most), once per process."""
  if protocol not in ('gs', 'gcs') or protocol in REACHED:
    return
  endpoint = os.environ.get('STORAGE_EMULATOR_HOST', 'https://storage.googleapis.com')
  scheme, _, hostport = endpoint.partition('://')
  host, _, port = (hostport or scheme).rstrip('/').partition(':')
  port = int(port) if port else (80 if scheme == 'http' else 443)
  try:
    socket.create_connection((host, port), timeout=10).close()
  except OSError as e:
    raise ConnectionError(f'{path}: the storage service ({host}:{port}) cannot be reached: '
                          f'check the network and retry ({e}).') from None
  REACHED.add(protocol)


def normalised(path) -> str:
  """A URL with each run of slashes after its bucket made one (gs://b//runs//x is gs://b/runs/x;
  a trailing / stays one): the objects orbax and tensorstore write for it, and what // means in
  a local path. fsspec alone would put `b//runs/x` under names beginning with /, which no other
  tool reads: one run split between two spellings (`gs://b/` + `/runs/x` is a common one).
  http(s) URLs are kept as given: their path is the server's to read, a query may hold //."""
  path = os.fspath(path)
  protocol, rest = path.split('://', 1)
  if protocol in ('http', 'https'):
    return path
  bucket = rest.split('/', 1)[0]
  return f'{protocol}://{bucket}{re.sub("/{2,}", "/", rest[len(bucket):])}'


def client(path):
  """(fsspec file system, path as it knows it, normalised) for a URL."""
  path = os.fspath(path)
  protocol = path.split('://', 1)[0]
  check_reachable(protocol, path)
  try:
    fs = filesystem(protocol)
  except ValueError as e:  # Names the URL as given: a command may take several.
    raise ValueError(f'{path}: {e}') from e.__cause__
  return fs, fs._strip_protocol(normalised(path))  # pylint: disable=protected-access


# The folders (URLs) seen to be no object, nor any folder above them in their bucket: asked once
# per process, not at every put (a run puts its event file and its lock again every few seconds).
# An object another process puts at such a name later goes unseen, as it did before any check.
_FOLDERS_SEEN = set()


def object_at_or_above(folder: str) -> str | None:
  """The first of `folder` and the folders above it (up to its bucket, not included) that is an
  object (a put under it would make one name a file and a folder at once), else None; None too
  where the store cannot be asked (write-only credentials: the put decides)."""
  asked = []
  folder = folder.rstrip('/')
  while folder not in _FOLDERS_SEEN and '/' in folder.partition('://')[2]:  # Not the bucket.
    try:
      fs, stripped = client(folder)
      if fs.isfile(stripped):
        return folder
    except Exception:  # pylint: disable=broad-except  # Write-only credentials, and the like.
      return None
    asked.append(folder)
    folder = posixpath.dirname(folder)
  _FOLDERS_SEEN.update(asked)
  return None


def bucket_of(path) -> str:
  """The bucket's URL of an object's URL."""
  protocol, rest = os.fspath(path).split('://', 1)
  return f'{protocol}://{rest.split("/", 1)[0]}'


def missing_bucket(path) -> FileNotFoundError | None:
  """The error for a URL whose bucket does not exist (or these credentials cannot see), else
  None. A URL that is the bucket itself is named once, as the bucket (an export to a bucket's
  root would otherwise be checked only at its first put, named by that object's URL)."""
  path = os.fspath(path)
  if not path.split('://', 1)[1].strip('/'):
    return None
  bucket = bucket_of(path)
  try:
    fs, stripped = client(bucket)
    if fs.exists(stripped):
      return None
  except Exception:  # pylint: disable=broad-except  # The original error is reported instead.
    return None
  hint = STORE_HINTS.get(path.split('://', 1)[0], 'check the URL and your credentials')
  named = '' if bucket == path.rstrip('/') else f'{path}: '
  return FileNotFoundError(f'{named}the bucket {bucket} does not exist or these credentials '
                           f'cannot see it: {hint}.')
