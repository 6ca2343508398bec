"""Writing an export into its output folder whole or not at all.

write() checks the output again just before (export_folder.check: another export or a user may
have written there meanwhile): a local folder is written beside and renamed into place, a URL is
uploaded under a manifest that says it is in progress until the last file is there.
"""

import contextlib
import errno
import os
import tempfile
import time
from typing import Callable

from bertjax import console
from bertjax import files
from bertjax import processes
from bertjax.interop import export_folder
from bertjax.interop import export_manifest


def _upload(local: str, output: str, fmt: str, source: str, overwrite: bool, record=None):
  """Puts the export written in `local` at URL `output`, replacing an earlier export there: the
  output checked again as check() did at the start (another export or a user may have written
  there meanwhile), an in-progress manifest listing the old files and the new, then the files,
  then the old ones the new export lacks removed, and the complete manifest last. Only what the
  re-check found listed by an earlier export's manifest is ever removed. Cut short anywhere,
  the folder holds only files its manifest lists (a rerun with --overwrite replaces it)."""
  written = files.walk_files(local)
  manifest = files.join(output, export_manifest.MANIFEST)
  # An object store has no atomic rename (as _write_local's) nor a write-if-absent here: what
  # is written under `output` between the re-check's listing and the in-progress manifest
  # below (a few requests, nothing else in between) is not seen by it. A user's file written
  # then is kept (only what `old` names is removed) unless the export writes the same name; a
  # second export started then mixes its files with these. Once the manifest is there, another
  # export's check refuses the folder without --overwrite, and with it replaces this one.
  old = export_folder.check(output, overwrite)
  files.write_atomically(manifest,
                         export_manifest.text(fmt, source, old | set(written), in_progress=True))
  for name in written:
    files.copy(os.path.join(local, *name.split('/')), files.join(output, *name.split('/')))
  for name in sorted(old - set(written)):
    files.remove(files.join(output, *name.split('/')))
  files.write_atomically(manifest, export_manifest.text(fmt, source, written, local=local,
                                                        record=record))


def _write_remote(output: str, fmt: str, source: str, write_into: Callable[[str], None],
                  overwrite: bool, record=None):
  with tempfile.TemporaryDirectory(prefix='bertjax_export_') as local:  # local temp
    with console.temporary(local):  # Ctrl-C removes it too.
      write_into(local)
      _upload(local, output, fmt, source, overwrite, record)


def _write_local(output: str, fmt: str, source: str, write_into: Callable[[str], None],
                 overwrite: bool, record=None):
  """Writes into a hidden folder beside `output`, renamed into place when complete (a local
  rename is atomic; object stores have none, see _upload). What a killed export left beside
  `output` is cleared first (export_folder.recover). An `output` that is a link is written
  where it points (the link stays); one that appeared meanwhile (another export) is checked
  again, as check() would, before it is replaced."""
  output = os.path.realpath(output)  # local only
  parent, name = files.parent(output), files.name(output)
  files.makedirs(parent)
  export_folder.recover(parent, name)
  temp = files.join(parent,
                    f'{processes.hidden_prefix(name)}export-{processes.mark()}-{time.time_ns()}')
  try:
    with console.temporary(temp):  # Ctrl-C removes it: nothing half-written is left.
      files.makedirs(temp)  # Made once marked: an interrupt between the two would leave it.
      write_into(temp)
      export_manifest.write(temp, fmt, source, record)
    if files.exists(output):
      # Written meanwhile by another process: checked as at the start.
      export_folder.check(output, overwrite)
      old = files.join(parent, f'{processes.hidden_prefix(name)}replaced-{processes.mark()}')
      os.rename(output, old)  # local only: a rename, atomic (files has none: object stores)
      os.rename(temp, output)  # local only
      files.rmtree(old)
    else:
      os.rename(temp, output)  # local only
  finally:
    with contextlib.suppress(OSError):  # What failed is reported, not this clean-up.
      files.rmtree(temp)


def write(output: str, fmt: str, source: str, write_into: Callable[[str], None],
          overwrite: bool = False, record: dict | None = None):
  """Puts at `output` (absolute, a local path or a URL) the files `write_into(folder)` writes
  into an empty temporary folder, with the manifest that names `fmt`, `source` and every file;
  replaces what check(output, overwrite) let through. `record`: more for the manifest to
  record (the model's labels, whether it is one of several formats: check_one_model)."""
  if files.is_remote(output):
    _write_remote(output, fmt, source, write_into, overwrite, record)
  else:
    _write_local(output, fmt, source, write_into, overwrite, record)


def tf_disk_full(tf, e, folder: str) -> OSError | None:
  """TensorFlow's error `e` met writing an export into `folder`, as the OSError(ENOSPC) that
  export says for every format's full disk (naming --output, not TF's op or the temporary
  folder) when the disk is full: TF reports ENOSPC and EDQUOT as ResourceExhaustedError, and
  some file systems' messages say it outright. None for another error."""
  if isinstance(e, tf.errors.ResourceExhaustedError) or 'No space left' in e.message:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder))
  return None
