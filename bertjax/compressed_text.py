"""Text input files as they are stored, read decompressed: gzip, bzip2 or xz, known by their
first bytes (a gzip file named plain.txt too) or else by their name; local or a URL (through
bertjax.files). What create_pretraining_data and learn_vocab read a corpus with."""

import bz2
import contextlib
import gzip
import io
import lzma
import re
import zlib

from bertjax import files

# Compressed inputs: (a pattern of their first bytes, name suffix, the decompressing reader
# over a binary file). The stdlib readers wrap the file object itself, so a gs:// input streams
# as a local one. The patterns go past the formats' magic numbers (gzip's method byte, bzip2's
# block size digit and first block's or end's signature) so that no text file matches one.
_COMPRESSED = ((re.compile(b'\x1f\x8b\x08'), '.gz',
                lambda f: gzip.GzipFile(fileobj=f, mode='rb')),
               (re.compile(b'BZh[1-9](1AY&SY|\x17rE8P\x90)'), '.bz2', bz2.BZ2File),
               (re.compile(b'\xfd7zXZ\x00'), '.xz', lzma.LZMAFile))
# Archives and compressions not read, by their first bytes: named where such a file is skipped.
_NOT_READ = ((b'PK\x03\x04', 'a zip archive'), (b'(\xb5/\xfd', 'zstd-compressed'),
             (b'\x04"M\x18', 'lz4-compressed'), (b"7z\xbc\xaf'\x1c", 'a 7z archive'))


def not_read(head: bytes) -> str:
  """'' or what a file of these first bytes is that is not read ('a zip archive', ...)."""
  return next((what for magic, what in _NOT_READ if head.startswith(magic)), '')


# What reading a compressed file cut short (EOFError) or damaged raises (bz2 says damage with a
# plain OSError, gzip with zlib.error where a changed byte breaks its deflate stream); of those,
# the errors that are the storage's or the network's, not the file's.
DAMAGED_COMPRESSED = (OSError, EOFError, lzma.LZMAError, zlib.error)
_NOT_DAMAGE = (ConnectionError, TimeoutError, PermissionError, FileNotFoundError)


@contextlib.contextmanager
def open_input(path):
  """(its text's bytes, the file as stored) of a text input file, local or a URL (a corpus,
  learn_vocab's input): decompressed when it is gzip, bzip2 or xz by its first bytes, or else by
  its name. The stored file's tell() is how far the reading is in what files.size counts (the
  progress line)."""
  with contextlib.ExitStack() as stack:
    stored = stack.enter_context(files.open(path, 'rb'))
    if files.is_remote(path):
      # fsspec's files read lines whole (no size limit): buffered, they take readline(limit).
      stored = stack.enter_context(io.BufferedReader(stored, 1 << 20))
    head = stored.read(10)
    stored.seek(0)
    reader = next((r for m, _, r in _COMPRESSED if m.match(head)), None) or next(
        (r for _, suffix, r in _COMPRESSED if str(path).endswith(suffix)), None)
    # The reader closes first; it leaves the stored file to the stack.
    yield (stack.enter_context(reader(stored)) if reader else stored), stored


def decompressed(path) -> bytes:
  """The whole text's bytes of a text input file (open_input's rule: decompressed when gzip,
  bzip2 or xz), as predict, embed, extract_features and fine-tuning's files read one; a
  compressed file cut short or damaged is one line saying so."""
  with open_input(path) as (f, stored):
    try:
      return f.read()
    except DAMAGED_COMPRESSED as e:
      if f is stored or isinstance(e, _NOT_DAMAGE):  # I/O or network errors are said as they are.
        raise
      raise ValueError(f'{path} cannot be read whole ({e}): is it a whole compressed file? '
                       'Fetch or compress it again') from None


def decompressed_stream(data: bytes, name: str) -> bytes:
  """A stream's bytes (standard input, a pipe: no name to go by), decompressed when gzip, bzip2
  or xz by their first bytes, as `zcat | ...` would; else as they are."""
  reader = next((r for m, _, r in _COMPRESSED if m.match(data[:10])), None)
  if reader is None:
    return data
  try:
    with reader(io.BytesIO(data)) as f:
      return f.read()
  except DAMAGED_COMPRESSED as e:
    raise ValueError(f'{name} cannot be read whole ({e}): is it a whole compressed stream? '
                     'Send it again') from None
