"""Record counts of data files without a report, kept in the run's workdir across restarts.

Files another tool made (google-research/bert's shards) come without create_pretraining_data's
report of their record counts, so training reads each whole once to count it: minutes for a
large set, at every start. The counts are kept in <workdir>/record_counts.<host>.json, keyed
by each file's path and version (files.version: size and modification time, a bucket object's
generation), so a restart counts only the files that are new or were rewritten. Each host writes
its own file and reads every host's (a restart on another number of hosts shares files out
differently). A damaged or edited cache file is ignored: its files are counted again.
"""

import concurrent.futures
import json

import jax

from bertjax import files

_PREFIX = 'record_counts'


def _key(path: str, version: str) -> str:
  return f'{path}|{version}'


def _entries(path: str) -> dict[str, int]:
  try:
    entries = json.loads(files.read_text(path))
  except (ValueError, OSError):
    return {}
  if not isinstance(entries, dict):
    return {}
  return {k: v for k, v in entries.items()
          if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def _own(workdir: str) -> str:
  return files.join(workdir, f'{_PREFIX}.{jax.process_index()}.json')


def known(workdir: str, paths) -> tuple[dict[str, int], dict[str, str]]:
  """({path: count} of `paths` the cache holds at their current version, {path: version})."""
  paths = list(paths)
  kept = files.glob(files.join(workdir, f'{_PREFIX}.*.json'))  # One per host that counted.
  with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:  # A request each in a bucket.
    versions = dict(zip(paths, pool.map(files.version, paths), strict=True))
    cached = {}
    for entries in pool.map(_entries, kept):
      cached |= entries
  return ({path: cached[_key(path, v)] for path, v in versions.items()
           if v and _key(path, v) in cached}, versions)


def keep(workdir: str, counts: dict[str, int], versions: dict[str, str]):
  """Adds `counts` (path -> records, at `versions`) to this host's cache file."""
  own = _own(workdir)
  entries = _entries(own) if files.exists(own) else {}
  entries |= {_key(path, versions[path]): n for path, n in counts.items() if versions.get(path)}
  files.write_atomically(own, json.dumps(entries, indent=0, sort_keys=True))
