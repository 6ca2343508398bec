"""An export's manifest, written last into its folder: the format, the source and every file
(its size, and the sha256 of the small ones).

export_writing writes it and export_folder asks it what an --overwrite may replace; the readers
(sources, init_from, embed) ask it whether an export is whole: one cut short, or a file of it
edited since, is refused, not read as the model's.
"""

import json
import os
from typing import NamedTuple

from bertjax import files
from bertjax.training import run_files

# Written last into every export: the files it wrote. --overwrite replaces a folder only when it
# holds this manifest and nothing else than the files it lists (never a model downloaded by
# hand, a run, or a user's notes added to an export).
MANIFEST = run_files.EXPORT_MANIFEST


def listed(folder: str) -> set | None:
  """The files an earlier export's manifest in `folder` lists; None without a readable one."""
  names = (read(folder) or {}).get('files')  # One parse of the manifest, read()'s.
  if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
    return None
  return set(names)


def read(folder: str) -> dict | None:
  """An earlier export's manifest in `folder`; None without a readable one."""
  try:
    manifest = json.loads(files.read_text(files.join(folder, MANIFEST)))
  except (FileNotFoundError, IsADirectoryError, NotADirectoryError, ValueError):
    return None
  return manifest if isinstance(manifest, dict) else None


def format_of(folder: str) -> str | None:
  """The format an earlier export's manifest in `folder` records; None without one."""
  return (read(folder) or {}).get('format')


# Every file of an export is recorded by its size and sha256. A read checks the files up to this
# size (vocabularies, tokenizer.json, configs) by their sha256: one replaced or edited after the
# export is refused, not read as the model's; larger ones (weights) by their size, which costs
# no read (a read checks a folder more than once: init_from, embed). --overwrite checks all.
DIGESTED_BYTES = 8 << 20


def text(fmt: str, source: str, written, in_progress: bool = False, local: str = '',
         record: dict | None = None) -> str:
  """The manifest of an export of `fmt` from `source` whose files are `written` (relative
  names); with `local`, the folder they are in, each file's size and sha256; `record`: what
  more to record (the model's labels; several_formats: written beside others by one export,
  for export_folder.check_one_model)."""
  manifest = {'format': fmt, 'source': source, 'files': sorted(written), **(record or {})}
  if in_progress:  # An upload cut short: every file there is listed, so --overwrite replaces it.
    manifest['in_progress'] = True
  if local:  # name -> [bytes, sha256 or None], from the local folder the export was written to.
    manifest['written'] = {}
    for name in sorted(written):
      path = os.path.join(local, *name.split('/'))  # local temp
      size = os.path.getsize(path)  # local temp
      manifest['written'][name] = [size, files.sha256(path)]
  return json.dumps(manifest, indent=1) + '\n'


def write(folder: str, fmt: str, source: str, record: dict | None = None):
  """The manifest of a complete export in local `folder` (the temporary folder it was written
  to), every file made as readable as the rest."""
  written = files.walk_files(folder)
  files.write_atomically(os.path.join(folder, MANIFEST),
                         text(fmt, source, written, local=folder, record=record))
  mask = _umask()
  for name in written:  # Some writers (safetensors) create 0600 files: as readable as the rest.
    path = os.path.join(folder, *name.split('/'))  # local temp
    os.chmod(path, os.stat(path).st_mode | (0o644 & ~mask))  # local temp


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def check_exists(path, missing: str):
  """Raises FileNotFoundError(missing) unless `path` (or the TF1 prefix it names) exists; for a
  URL whose bucket does not exist (or cannot be seen) the error names the URL and the bucket.
  An export cut short is refused (check_complete)."""
  path = os.fspath(path)
  if not (files.exists(path) or files.exists(f'{path}.index')):
    files.check_exists(path, missing)
  check_complete(path)


def check_complete(path):
  """Refuses an export whose upload was cut short (its manifest still says in progress: its
  folder may hold two exports' files mixed, which would load without an error), or one of whose
  files was replaced or edited since. `path`: the folder, or a TF1 prefix in it."""
  path = os.fspath(path)
  folder = path if files.isdir(path) else files.parent(path) or '.'  # A TF1 prefix: its folder.
  manifest = read(folder)
  if manifest is None:  # Not an export, or a manifest that says nothing readable.
    return
  rerun = 'rerun the export that writes it, with --overwrite'
  if all(isinstance(manifest.get(k), str) for k in ('source', 'format')):  # As exports write.
    rerun += (f': python -m bertjax.export --from={manifest["source"]} '
              f'--format={manifest["format"]} --output={folder} --overwrite')
  if manifest.get('in_progress'):
    raise ValueError(f'{folder} is an export cut short (its {MANIFEST} says in '
                     f'progress: its files may be two exports\' mixed): {rerun}.')
  if changed := _changed(folder, manifest.get('written')):
    raise ValueError(f'{changed}: it was replaced, edited or damaged since the export, and would '
                     f'be read as the model\'s own; restore it, or {rerun} (a model saved over '
                     f'the export on purpose, e.g. by save_pretrained: delete {folder}/{MANIFEST} '
                     'and it is read as any folder of its kind).')


_NOT_READ = object()


class Change(NamedTuple):
  """A file of an export that is not as its manifest records it (changes())."""
  name: str  # Relative to the export's folder; MANIFEST for a record that cannot be read.
  kind: str  # 'gone', 'bytes', 'sha256' or 'damaged'.
  sizes: tuple[int, int] | None = None  # For 'bytes': (now, written).


def changes(folder: str, written=_NOT_READ, full: bool = False):
  """A Change for each file of the export in `folder` that is not as its manifest records it:
  kind 'gone', 'bytes' (sizes: now, written) or 'sha256' (none for exports before 2026-12-02,
  which record no sizes); Change(MANIFEST, 'damaged') for a record that cannot be read.
  `written`: the manifest's record, read when not given. `full`: the sha256 of files past
  DIGESTED_BYTES too (exports before 2026-12-04 record none)."""
  if written is _NOT_READ:
    written = (read(folder) or {}).get('written')
  if written is None:  # Older exports (or no manifest): nothing recorded to compare.
    return
  try:
    records = sorted((name, int(size), digest) for name, (size, digest) in written.items())
  except (AttributeError, TypeError, ValueError):  # Edited by hand: nothing can be told.
    yield Change(MANIFEST, 'damaged')
    return
  for name, size, digest in records:
    path = files.join(folder, *name.split('/'))
    if not files.exists(path):
      yield Change(name, 'gone')
    elif (now := files.size(path)) != size:
      yield Change(name, 'bytes', (now, size))
    elif digest and (full or size <= DIGESTED_BYTES) and files.sha256(path) != digest:
      yield Change(name, 'sha256')


def _changed(folder: str, written) -> str:
  """The first file of an export that is not as its manifest records it ('' for none)."""
  for change in changes(folder, written):
    path = files.join(folder, *change.name.split('/'))
    if change.kind == 'damaged':
      return f'{path}\'s record of the files written cannot be read (edited by hand?)'
    if change.kind == 'gone':
      return f'{path}, a file of this export, is gone'
    if change.kind == 'bytes':
      now, size = change.sizes
      return f'{path} holds {now} bytes where the export wrote {size}'
    return f'{path} is not the file the export wrote (its sha256 differs from {MANIFEST}\'s)'
  return ''
