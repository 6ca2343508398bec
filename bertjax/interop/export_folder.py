"""An export's output folder: what --output may replace, and its manifest.

Several formats go into one folder, a folder each (targets, check_folder_of_formats).
check() refuses, before anything is read, an --output that would lose something; export_writing
puts an export there complete or not at all, calling check() again just before.
"""

import contextlib
import os
import re

from absl import logging

from bertjax import console
from bertjax import files
from bertjax import paths
from bertjax import processes
from bertjax.interop import export_manifest

# Written last into every export (export_manifest): --overwrite replaces a folder only when it
# holds this manifest and nothing else than the files it lists (never a model downloaded by
# hand, a run, or a user's notes added to an export).
MANIFEST = export_manifest.MANIFEST



def _normalised(path: str) -> str:
  """A URL without a trailing '/'; a local path absolute, links resolved (as the OS sees it)."""
  return path.rstrip('/') if files.is_remote(path) else os.path.realpath(path)


def _inside(path: str, folder: str) -> bool:
  """Whether normalised `path` lies under normalised `folder` (compared as strings)."""
  if files.is_remote(path) != files.is_remote(folder) or path == folder:
    return False
  separator = '/' if files.is_remote(path) else os.sep
  return path.startswith(folder.rstrip(separator) + separator)


def _run_around(path: str) -> str | None:
  """The bertjax run folder `path` (normalised) is or is inside, if any."""
  for folder in files.folders_up(path):
    if paths.is_run(folder):
      return folder
  return None


def _as_named(source: str) -> str:
  """A source as named, links unresolved (a run whose checkpoints/ is a link is found)."""
  return source.rstrip('/') if files.is_remote(source) else os.path.abspath(source)  # local


def _check_not_in_checkpoints(output, out, source, run):
  """Refuses an output in the source run's checkpoints/ where that is a link to a folder
  elsewhere (a run's pruning would delete an export in it: found under the link's target, not
  under the run)."""
  link = None if run is None or files.is_remote(run) else os.path.join(run, 'checkpoints')
  if link is None or not os.path.islink(link):  # local: else inside the run, refused below
    return
  checkpoints = os.path.realpath(link)  # local: the link's target
  if out == checkpoints or _inside(out, checkpoints):
    raise FileExistsError(f'--output={output} is inside {checkpoints}, the checkpoints of the '
                          f'source run {run} (its checkpoints/ links there), which the run '
                          f'prunes: pass e.g. --output={run}_export.')


def targets(formats: tuple[str, ...], output: str) -> list[tuple[str, str]]:
  """(format, folder) pairs: --output itself for one format, --output/<format> for several."""
  if len(formats) == 1:
    return [(formats[0], output)]
  return [(fmt, files.join(output, fmt)) for fmt in formats]


def check_folder_of_formats(targets: list[tuple[str, str]], output: str):
  """Refuses a folder of several formats that is a file, is an export itself, or whose format
  folders are one folder through links."""
  if len(targets) == 1:
    return
  if files.isfile(output):
    raise FileExistsError(f'--output={output} is a file: several formats are written into a '
                          'folder, one folder per format in it; pass a directory.')
  _check_not_special(output)
  if files.exists(files.join(output, MANIFEST)):
    raise FileExistsError(f'--output={output} is an export itself: several formats are written '
                          'into a folder of their own (one folder per format); pass another '
                          '--output.')
  if not files.is_remote(output):
    seen = {}
    for fmt, out in targets:
      real = os.path.realpath(out)  # local: links
      if real in seen:
        raise FileExistsError(f'--format={seen[real]} and {fmt} would both be written to '
                              f'{real} (a link in {output} leads there): pass another --output.')
      seen[real] = fmt


@contextlib.contextmanager
def made_folders_removed(output: str):
  """Removes, if the block fails or is interrupted, the folders of local `output` that it made
  and left empty: `output` itself (several formats are written into it) and the folders above
  it, made for its lock, which lies beside it."""
  top, path = None, output
  # local only; a relative path ('gs:', a URL cut to its scheme) would end at '' for ever.
  while not files.is_remote(output) and path and not os.path.lexists(path):
    top, path = path, os.path.dirname(path)

  def remove():
    folder = output
    while top and folder != os.path.dirname(top):
      with contextlib.suppress(OSError):  # Not empty (written meanwhile): kept.
        os.rmdir(folder)  # local: made by this export
      folder = os.path.dirname(folder)

  try:
    with console.at_interrupt(remove):  # A Ctrl-C or SIGTERM skips `except`.
      yield
  except BaseException:
    remove()
    raise


def _check_link(output: str):
  """Refuses a local `output` that is a link into a folder that is not there (a disk not
  mounted?): the export would make that folder where the link leads."""
  if not os.path.islink(output):  # local only
    return
  folder = os.path.dirname(os.path.realpath(output))  # local: the link's target's folder
  if not os.path.isdir(folder):  # local only
    raise FileNotFoundError(f'--output={output} is a link to {os.path.realpath(output)}, '
                            f'whose folder {folder} does not exist (a disk not mounted?): make '
                            'it, or remove the link.')


def _mount_points() -> set[str]:
  """The mount points the kernel lists for this process (bind mounts too, which
  os.path.ismount misses on one file system); empty where it lists none (another OS)."""
  try:
    with open('/proc/self/mountinfo', encoding='utf-8',  # local: the kernel's table
              errors='surrogateescape') as f:
      fields = [line.split() for line in f]
  except OSError:
    return set()
  # Field 5 is the mount point, its spaces and such written as octal escapes (\040).
  return {re.sub(r'\\([0-7]{3})', lambda m: chr(int(m[1], 8)), parts[4])
          for parts in fields if len(parts) > 4}


def _check_not_mount_point(output: str, folder: str | None):
  """Refuses a local `output` that is a mount point (a container's volume, a bind mount): an
  export is written beside its folder and renamed into place, and a mount point cannot be
  renamed. `folder`: the --output of several formats, `output` one format's folder in it."""
  real = os.path.realpath(output)  # local only
  if not (os.path.isdir(output)  # local only
          and (os.path.ismount(real) or real in _mount_points())):  # local only
    return
  inside = os.path.join(output, 'model')
  if folder is None:
    raise ValueError(f'--output={output} is a mount point: an export is written beside its '
                     'folder and renamed into place, which a mount point cannot be; pass a '
                     f'folder inside it, e.g. --output={inside}.')
  fmt = os.path.basename(output)
  raise ValueError(f'{output}, the {fmt} folder of --output={folder}, is a mount point: an '
                   'export is written beside its folder and renamed into place, which a mount '
                   f'point cannot be; export {fmt} by itself into a folder inside it '
                   f'(--format={fmt} --output={inside}), or pass another --output.')


def _check_not_special(output: str):
  """Refuses a local `output` that exists and is neither a folder nor a regular file (those
  are checked apart): a FIFO, a socket or a device (/dev/null) was renamed aside and replaced."""
  if kind := paths.special_kind(output):
    raise FileExistsError(f'--output={output} is {kind}: an export is a folder; pass a '
                          'directory.')


def check(output, overwrite: bool, source: str = '', folder: str | None = None):
  """Refuses, before anything is read or written, an --output that would lose something: the
  source itself, a folder inside or around it, a bertjax run or a folder inside one, or (without
  --overwrite) any non-empty folder; --overwrite replaces only what an earlier export wrote.
  Local paths and URLs alike (URLs compared as strings). Returns the files there (relative
  names, the manifest left out) that the export replaces: all listed by the earlier export.
  `folder`: the --output of several formats, `output` one format's folder in it."""
  output = os.fspath(output)
  _check_place(output, source, folder)
  return _replaceable(output, overwrite)


def _check_place(output: str, source: str, folder: str | None):
  """check()'s refusals of where `output` is, whatever it holds: under a file, too long a path,
  a mount point, a file, a FIFO or such, the source or around it, or in a run."""
  files.check_bucket(output)
  if not files.is_remote(output):
    above = os.path.dirname(os.path.abspath(output))  # local only
    while above != os.path.dirname(above) and not os.path.exists(above):  # local only
      above = os.path.dirname(above)  # local only
    if os.path.isfile(above):  # local only
      raise FileExistsError(f'--output={output} is under {above}, which is a file: pass a '
                            'directory path.')
  if not files.is_remote(output):
    # Room for what goes inside (a format's folder, its hidden lock and files).
    paths.check_lengths(output, f'--output={output}', room=300)
    _check_not_mount_point(output, folder)
  if not files.is_remote(output) and os.path.isdir(os.path.dirname(output)):  # local only
    _check_link(output)
    # What a killed export left beside it, first: an export put back is checked as any other.
    recover(*os.path.split(os.path.realpath(output)))  # local only
  if files.isfile(output):
    raise FileExistsError(f'--output={output} is a file: pass a directory.')
  _check_not_special(output)
  out = _normalised(output)
  if source:
    src = source if files.exists(source) else files.parent(source)  # A TF1 prefix: its folder.
    src = _normalised(src)
    if out == src or _inside(out, src) or _inside(src, out):
      where = 'is' if out == src else 'is inside' if _inside(out, src) else 'holds'
      # A run's step: beside the run (a folder inside a run is refused below), else the source.
      beside = _run_around(src) or _run_around(_as_named(source)) or src
      raise FileExistsError(f'--output={output} {where} the source {source}: an export is '
                            f'written beside its source, never over or around it; pass e.g. '
                            f'--output={beside}_export.')
    _check_not_in_checkpoints(output, out, source, _run_around(_as_named(source)))
  if (run := _run_around(out)) is not None:
    raise FileExistsError(f'--output={output} is {"" if run == out else "inside "}'
                          f'the bertjax run {run}: an export is never written into a run; '
                          'choose a directory outside it.')


def _replaceable(output: str, overwrite: bool) -> set:
  """check()'s refusals of what `output` holds: anything without `overwrite`; with it, all but
  an earlier export of one format as it wrote it. The files it holds (the manifest left out)."""
  if not files.isdir(output) or not files.listdir(output):
    return set()
  if not overwrite:
    raise FileExistsError(f'--output={output} exists and is not empty: pass --overwrite to '
                          'replace it, or choose another directory.')
  listed = export_manifest.listed(output)
  inside = sorted(name for name in files.listdir(output)
                  if listed is None and export_manifest.format_of(files.join(output, name)) == name)
  if inside:  # The folder of an export of several formats.
    several = (f', or several with --format={",".join(inside)} --output={output}'
               if len(inside) > 1 else '')
    raise FileExistsError(f'--output={output} holds the exports of a command of several formats '
                          f'({", ".join(inside)}): replace one with --output='
                          f'{files.join(output, inside[0])}{several}.')
  if listed is None and files.exists(files.join(output, MANIFEST)):
    raise FileExistsError(f'--output={output}: its {MANIFEST} cannot be read (damaged?), so what '
                          'the earlier export wrote cannot be told: --overwrite would delete '
                          'anything; move out what you keep and delete the folder, or choose '
                          'another directory.')
  if listed is None:
    raise FileExistsError(f'--output={output} was not written by bertjax.export (no {MANIFEST}): '
                          '--overwrite replaces only an earlier export; choose another '
                          'directory, or empty it yourself.')
  there = set(files.walk_files(output)) - {MANIFEST}
  extra = sorted(there - listed) + _linked_folders(output)
  if extra:
    raise FileExistsError(f'--output={output} holds files the earlier export did not write '
                          f'({", ".join(extra[:5])}): --overwrite would delete them; move them '
                          'out, or choose another directory.')
  _check_not_edited(output)
  return there


def _linked_folders(output: str) -> list[str]:
  """The links to folders in local `output`, as 'NAME/': a user's (an export writes no link;
  walk_files does not list them, as os.walk does not follow them), which replacing the export
  would delete. Empty folders hold nothing to lose (a SavedModel's assets/ is one)."""
  if files.is_remote(output):
    return []
  found = []
  for folder, names, _ in os.walk(output):  # local only; links to folders are not followed
    found += [os.path.relpath(os.path.join(folder, name), output).replace(os.sep, '/') + '/'
              for name in names if os.path.islink(os.path.join(folder, name))]  # local only
  return sorted(found)


def _check_not_edited(output: str):
  """Refuses an earlier export in `output` one of whose files was edited since (or whose record
  of them is damaged): --overwrite would lose the edit. A file gone loses nothing."""
  # Local weights too by their sha256 (readers check large files by size): a same-size save.
  changes = export_manifest.changes(output, full=not files.is_remote(output))
  if edited := [change.name for change in changes if change.kind != 'gone']:
    if edited == [MANIFEST]:
      raise FileExistsError(f'--output={output}: its {MANIFEST} is damaged, so what was edited '
                            'since the export cannot be told: --overwrite would lose any edit; '
                            'move out what you keep and delete the folder, or choose another '
                            'directory.')
    raise FileExistsError(f'--output={output} holds files edited since the export wrote them '
                          f'({", ".join(edited[:5])}: {MANIFEST} records other contents): '
                          '--overwrite would lose the edits; move them out (the rest is '
                          'replaced), or choose another directory.')


def check_one_model(targets: list[tuple[str, str]], source: str, labels=(),
                    folder: str | None = None):
  """Refuses a folder of formats that would hold two models: a format folder there that this
  export leaves (not one of `targets`) exported from another source or step than `source`, or
  with other labels than `labels` (the model read). `folder`: that of several formats; for one
  format, the folder above an --output named as its format (DIR/hf), where an export of several
  formats wrote the others (their manifests say so: folders of exports a user keeps side by
  side, ~/models/hf of one model and ~/models/tf1 of another, are no such folder). Formats of
  the same model are added beside them."""
  single = folder is None
  if single:
    (fmt, out), = targets
    if files.name(out) != fmt:
      return
    folder = files.parent(out)
  if not files.isdir(folder):
    return
  manifests = {name: export_manifest.read(files.join(folder, name))
               for name in sorted(files.listdir(folder))}
  manifests = {name: m for name, m in manifests.items() if m and m.get('format') == name}
  if single and not any(m.get('several_formats') for m in manifests.values()):
    return
  ours, there, others = {fmt for fmt, _ in targets}, set(), []
  for name, manifest in manifests.items():
    there.add(name)
    theirs = manifest.get('source')
    if name in ours:
      continue
    if not isinstance(theirs, str) or _normalised(theirs) != _normalised(source):
      moved = '' if not isinstance(theirs, str) or files.exists(theirs) else ' (now gone: moved?)'
      others.append(f'{name} exported from {theirs}{moved}')
    elif 'labels' in manifest and list(manifest['labels']) != list(labels):
      others.append(f'{name} exported with the labels {manifest["labels"]}, not {list(labels)}')
  if others:
    every = ','.join(sorted(ours | there))
    raise FileExistsError(f'{folder} holds {"; ".join(others)}: another model than {source}, '
                          'so the folder would hold two models. Write all its formats from this '
                          f'one (--format={every} --output={folder} --overwrite), or pass '
                          'another --output.')


def recover(parent: str, name: str):
  """What an export killed beside `name` left (SIGKILL skips every clean-up): the export it was
  replacing, renamed aside in the instant between its two renames, goes back in place; its
  half-written folder is removed. Both are said on the console."""
  output = os.path.join(parent, name)  # local only
  for entry in sorted(os.listdir(parent)):  # local only
    for kind in ('replaced', 'export'):
      prefix = f'{processes.hidden_prefix(name)}{kind}-'
      if not entry.startswith(prefix):
        continue
      owner = entry[len(prefix):]
      owner = owner.rsplit('-', 1)[0] if kind == 'export' else owner  # export-<owner>-<ns>
      if not processes.ended(owner):
        continue
      path = os.path.join(parent, entry)  # local only
      if kind == 'replaced' and not os.path.lexists(output):  # local only
        os.rename(path, output)  # local only
        logging.warning('%s: put back the export that an export killed while replacing it had '
                        'moved to %s.', output, entry)
        continue
      if not os.path.isdir(path) and not os.path.islink(path):  # local only
        continue  # Never an export's: left be (a FIFO or device an older export moved aside).
      if os.path.islink(path):  # local only
        os.unlink(path)  # local: the link, never what it points to.
      else:
        files.rmtree(path)
      logging.warning('removed %s: what an export killed before it finished left behind.', path)
