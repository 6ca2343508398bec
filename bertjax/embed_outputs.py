"""The embed job's outputs in its --workdir: embeddings.npy and similarity.txt, always one
run's pair or embeddings.npy alone.

A second embed on the same workdir at once is refused at its start; an output no embed wrote
(a user's file) is refused before any work; the new pair is written beside the earlier one
under hidden names first, so a full disk or a Ctrl-C leaves an earlier run's pair whole.
"""

import contextlib
import io
import os
import re

import numpy as np

from bertjax import console
from bertjax import files
from bertjax import output_lock

MATRIX_ROWS = 1000  # similarity.txt is written up to this many sentences (~7 MB of text).
OUTPUTS = ('embeddings.npy', 'similarity.txt')  # In --workdir, written in this order.


def write(workdir: str, vectors) -> list:
  """embeddings.npy and (up to MATRIX_ROWS sentences) similarity.txt in `workdir`; the
  summary's outputs."""
  n = len(vectors)
  embeddings = io.BytesIO()
  np.save(embeddings, vectors)
  # Read-only ones were refused before any work (embed._checked_workdir), under the lock since.
  written, similarity = (files.join(workdir, name) for name in OUTPUTS)
  table = None
  if n <= MATRIX_ROWS:
    text = io.StringIO()
    np.savetxt(text, vectors @ vectors.T, fmt='%.4f')
    table = text.getvalue()
  _replace_pair(workdir, embeddings.getvalue(), table)
  outputs = [('embeddings', written)]
  if table is not None:
    return outputs + [('similarities', similarity)]
  print(f'similarity.txt not written: {n} sentences make a {n} x {n} matrix (it is written up '
        f'to {MATRIX_ROWS}); the cosines are the dot products of embeddings.npy\'s unit vectors: '
        f'v = numpy.load({written!r}); v @ v.T')
  return outputs + [('similarities', f'not written (over {MATRIX_ROWS} sentences)')]


def _replace_pair(workdir: str, embeddings: bytes, table: str | None):
  """Each step leaves one run's pair or embeddings.npy alone: the earlier similarity.txt goes
  first, then each new file takes its place. Locally both are written in full first (hidden,
  beside their places), so a disk that cannot hold them replaces nothing; a bucket's object
  put is whole or nothing already."""
  written, similarity = (files.join(workdir, name) for name in OUTPUTS)
  if files.is_remote(workdir):
    files.remove(similarity)
    files.write_atomically(written, embeddings)
    if table is not None:
      files.write_atomically(similarity, table)
    return
  temps = {}  # Each new file's hidden name beside its place.
  try:
    with contextlib.ExitStack() as marked:  # Removed by a Ctrl-C meanwhile too.
      for path, data in ((written, embeddings), (similarity, table)):
        if data is not None:
          temps[path] = marked.enter_context(console.temporary(files.temporary_beside(path)))
          with open(temps[path], 'wb') as f:  # local: renamed into place below
            f.write(data.encode('utf-8') if isinstance(data, str) else data)
          if (mode := files.check_replaceable(path)) is not None:
            os.chmod(temps[path], mode)  # local: the replaced file's permissions kept
      files.remove(similarity)
      for path, temp in temps.items():
        os.replace(temp, path)  # local: the hidden file written above
  except OSError as e:  # The workdir named: the hidden file's name is not the user's.
    if e.errno is None:
      raise
    raise OSError(e.errno, e.strerror, workdir) from e
  finally:
    for temp in temps.values():
      with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)  # local: a write that failed leaves none


@contextlib.contextmanager
def held(workdir: str):
  """Held while the job may write `workdir`'s outputs: a second embed there at the same time
  is refused at its start (output_lock's lock beside embeddings.npy, for both), then outputs
  no earlier embed wrote. A local workdir this run made goes if left empty."""
  made, folder = '', workdir  # The outermost folder this run makes ('': none, or a URL).
  while not files.is_remote(folder) and not os.path.lexists(folder):  # local: not a URL
    made, folder = folder, os.path.dirname(folder)

  def remove_made():  # Empty folders only (rmdir): anything written in them meanwhile stays.
    with contextlib.suppress(OSError):
      folder = workdir
      while made and not os.rmdir(folder) and folder != made:  # local: this run made it
        folder = os.path.dirname(folder)
  # A Ctrl-C skips `finally` (console.exit_on_interrupt): at_interrupt runs it, after the lock's.
  busy = f'writing {" and ".join(OUTPUTS)} in {workdir}'
  try:
    with console.at_interrupt(remove_made), output_lock.held(
        files.join(workdir, OUTPUTS[0]), 'embed', busy, '--workdir'):
      _check_earlier_outputs(workdir)
      yield
  finally:
    remove_made()


def _check_earlier_outputs(workdir: str):
  """Refuses an output in `workdir` that no embed wrote (a user's file): embeddings.npy is
  np.save's [N, D] unit float vectors alone (header, first rows read), similarity.txt
  np.savetxt's cosines (first row read)."""
  for name, holds, check in zip(OUTPUTS, ('an .npy of unit vectors, [sentences, dimension]',
                                          "a cosine matrix, '%.4f' values from 1"),
                                (_unit_vectors, _cosines), strict=True):
    if files.exists(output := files.join(workdir, name)) and not check(output):
      raise FileExistsError(f'{output} was not written by embed (not {holds}): pass another '
                            '--workdir, or remove it.')


def _unit_vectors(path: str) -> bool:
  try:
    with files.open(path, 'rb') as f:
      version = np.lib.format.read_magic(f)
      shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                               else np.lib.format.read_array_header_2_0(f))
      if len(shape) != 2 or not all(shape) or fortran or dtype.kind != 'f' or (
          files.size(path) != f.tell() + shape[0] * shape[1] * dtype.itemsize):
        return False  # Another array, or one cut short or with more after it.
      first = np.frombuffer(f.read(min(shape[0], 8) * shape[1] * dtype.itemsize), dtype)
  except (ValueError, EOFError):  # Not an .npy (its magic, its header).
    return False
  return bool(np.all(np.abs(np.linalg.norm(first.reshape(-1, shape[1]), axis=1) - 1) < 1e-2))


def _cosines(path: str) -> bool:
  with files.open(path, 'rb') as f:  # A bucket's file object has readline() without a limit.
    first, newline, _ = f.read(1 << 20).partition(b'\n')
  return bool(re.fullmatch(rb'(0\.99\d\d|1\.00\d\d)( -?\d\.\d{4})*\n', first + newline))


