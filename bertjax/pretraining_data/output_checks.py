"""What create_pretraining_data checks of its outputs before any work (and again before it puts
a set in place): a file there that no set made here claims, another set's report or shards that
a new report would leave unchecked, a prefix whose readers' glob would read two sets, an output
that cannot be written or is an input."""

import fnmatch
import os
import re

from bertjax import files as files_lib
from bertjax import paths as paths_lib
from bertjax.records import file_set


def _shard_prefix(report_path, listed):
  """The prefix of a set of N shards (`<prefix>-0000i-of-0000N`, its report `<prefix>.json`)
  from its report, or None for a list of files."""
  prefix = files_lib.name(report_path)[:-len('.json')]
  shard = re.compile(re.escape(prefix) + r'-\d{5}-of-\d{5}')
  if listed and all(shard.fullmatch(name) for name in listed):
    return prefix
  return None


def check_other_sets(outputs, report_file, prefix=None):
  """Fails before any work when this set would break or blur another set's report beside it:
  an output that another report lists (overwritten, both sets would be refused), or a prefix
  that overlaps another set's so that one's `<prefix>-*` glob, the readers' pattern, would
  read both sets (`train-*` also matching `train-eval-*`). `prefix`: this run's, with
  --num_output_shards."""
  ours = {}
  for out in outputs:
    ours.setdefault(files_lib.parent(out), set()).add(files_lib.name(out))
  ours_report = paths_lib.file_key(report_file)
  for directory, names in sorted(ours.items()):
    try:
      reports = file_set.reports_in(directory)
    except OSError:
      continue  # No folder yet (made later), or unreadable: nothing there to break.
    for report_path, report in sorted(reports.items()):
      if paths_lib.file_key(report_path) == ours_report:
        continue  # This set's own report: check_earlier_set.
      listed = [files_lib.name(p) for p in report['output_files'] if isinstance(p, str)]
      taken = sorted(names & set(listed))
      if taken:
        raise ValueError(
            f'{files_lib.join(directory, taken[0])} is a shard of the set that {report_path} '
            'lists: writing it would leave both sets unreadable; pick another --output_file')
      other = _shard_prefix(report_path, listed)
      mine = files_lib.name(prefix) if prefix and files_lib.parent(prefix) == directory else None
      clash = None
      if other is not None:
        clash = next((n for n in sorted(names) if fnmatch.fnmatchcase(n, f'{other}-*')), None)
      if clash:
        raise ValueError(
            f'{report_path}\'s shards are read as {other}-*, which would also match this '
            f'set\'s {files_lib.join(directory, clash)} (training on both sets): pick an '
            f'--output_file whose name does not start with "{other}-", e.g. '
            f'{other}_{clash[len(other) + 1:].split("-")[0]}, or write it to another folder')
      clash = mine and next((n for n in listed if fnmatch.fnmatchcase(n, f'{mine}-*')), None)
      if clash:
        raise ValueError(
            f'this set\'s shards would be read as {mine}-*, which also matches '
            f'{files_lib.join(directory, clash)} of the set that {report_path} lists '
            f'(training on both sets): pick another --output_file prefix, or write it to '
            'another folder')


def _set_here(report: dict, report_file: str) -> set:
  """The file keys of the shards `report` (at `report_file`) lists, by their paths and, as the
  readers match them, by their names beside it (a folder moved or copied whole)."""
  listed = [p for p in report.get('output_files', ()) if isinstance(p, str)]
  return ({paths_lib.file_key(p) for p in listed}
          | {paths_lib.file_key(files_lib.join(files_lib.parent(report_file), files_lib.name(p)))
             for p in listed})


def _replaceable(earlier: dict, report_file: str, kept: list) -> bool:
  """Whether --overwrite may remove `kept`, the earlier set's shards not among this run's
  outputs: a local set whose report was written at `report_file` (not copied or moved there),
  its shards beside it, named as its prefix names them and of the sizes it recorded (a user's
  file put there since is not its own)."""
  if files_lib.is_remote(report_file) or paths_lib.file_key(
      str(earlier.get('report_file', ''))) != paths_lib.file_key(report_file):
    return False
  sizes = earlier.get('output_bytes') if isinstance(earlier.get('output_bytes'), dict) else {}
  shard = re.compile(re.escape(files_lib.name(report_file)[:-len('.json')]) +
                     r'-\d{5}-of-\d{5}')
  folder = paths_lib.file_key(files_lib.parent(report_file))
  return all(paths_lib.file_key(files_lib.parent(p)) == folder
             and shard.fullmatch(files_lib.name(p))
             and sizes.get(files_lib.name(p)) == files_lib.size(p) for p in kept)


def check_earlier_set(outputs, report_file, overwrite: bool = False) -> list[str]:
  """Fails when the report would replace that of another set of shards that is still there
  (another shard count or list on the same prefix): those shards would be left without the
  report that their readers check them against. Before any work, and again before publishing.
  With `overwrite`, that set's shards are returned instead where _replaceable (publish moves
  them away with the rest of the set)."""
  earlier = file_set.report_at(report_file)
  if earlier is None:
    return []  # No report yet, or not one of ours (check_not_foreign): no shard of it checked.
  ours = {paths_lib.file_key(out) for out in outputs}
  beside = files_lib.parent(report_file)  # A shard there by name is one (a copied folder's).
  kept = [path for path in earlier['output_files'] if isinstance(path, str)
          and paths_lib.file_key(path) not in ours and paths_lib.file_key(
              files_lib.join(beside, files_lib.name(path))) not in ours
          and files_lib.exists(path)]
  if not kept:
    return []
  replaceable = _replaceable(earlier, report_file, kept)
  if replaceable and overwrite:
    return kept
  fix = ('Pass --overwrite to replace that set (its shards and report), or another '
         '--output_file.' if replaceable else
         'Remove that set (its shards and report) first, or pass another --output_file '
         '(--overwrite replaces only a local set whose report was written there, its shards '
         'beside it as it wrote them).')
  raise ValueError(
      f'{report_file} is the report of another set of shards, still there ({len(kept)} not '
      f'among this run\'s outputs, e.g. {kept[0]}): writing this set would leave them '
      f'unchecked. {fix}')


def check_not_foreign(outputs, report_file, overwrite: bool):
  """Fails before any work where an output is a file that no set made here claims (its report
  at `report_file` does not list it: a file of the user's, a stray shard), unless `overwrite`;
  and always where an output is another set's report (its shards would be left unchecked)."""
  earlier = file_set.report_at(report_file)
  ours = _set_here(earlier, report_file) if earlier else set()
  for path in outputs:
    if not files_lib.exists(path) or paths_lib.file_key(path) in ours:
      continue
    other = (file_set.report_at(path) if files_lib.size(path) <= _REPORT_BYTES_AT_MOST
             else None)  # A shard of gigabytes is no report: not read whole.
    if other is not None:
      raise ValueError(f'output {path} is the report of a set of {len(other["output_files"])} '
                       'shards: writing over it would leave them unchecked (every reader '
                       'refuses them); pick another --output_file')
    if not overwrite:
      raise ValueError(f'output {path} exists and is no shard of a set made here ({report_file} '
                       'does not list it): writing it would lose that file; pass --overwrite to '
                       'replace it, or another --output_file')
  if files_lib.exists(report_file) and earlier is None and not overwrite:
    raise ValueError(f'{report_file}, where this set\'s report goes, exists and is no report of '
                     'create_pretraining_data: writing it would lose that file; pass --overwrite '
                     'to replace it, or another --output_file')


_REPORT_BYTES_AT_MOST = 1 << 24  # A report of a million shards is smaller.


def check_outputs(outputs, report_file):
  """Fails before any input is read when an output cannot be written where it is asked for."""
  for path in [*outputs, report_file]:
    if files_lib.is_remote(path):
      files_lib.check_bucket(path)
      if files_lib.isdir(path) and not files_lib.isfile(path):
        raise ValueError(f'output {path} is a folder: give a file path (or, with '
                         '--num_output_shards, a prefix such as gs://bucket/dir/train)')
      continue
    if files_lib.isdir(path):
      raise ValueError(f'output {path} is a directory: give a file path (or, with '
                       '--num_output_shards, a prefix such as DIR/train)')
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not files_lib.exists(parent):
      parent = os.path.dirname(parent)
    if parent and not files_lib.isdir(parent):
      raise ValueError(f'cannot write {path}: {parent} is a file, not a directory')
    if parent and not os.access(parent, os.W_OK | os.X_OK):
      raise ValueError(f'cannot write {path}: no write permission in {parent}')


def check_not_inputs(outputs, inputs):
  """Fails before any work when an output would overwrite a file it is made from (a corpus
  file matched by --input_file's globs, the vocab)."""
  for path in outputs:
    for source in inputs:
      if source and paths_lib.same_path(path, source):
        raise ValueError(f'output {path} is the input {source}: writing it would lose that '
                         'input; name another file')
