"""This host's processes as files name them: the mark a writer puts in its temporary names and
locks (host, pid and when the pid started), whether the process a mark names has ended, and
how those hidden names beside a file begin (hidden_prefix).

A killed process (SIGKILL, the OOM killer, a lost container) runs no clean-up: what it left is
told from a live writer's by its mark. The pid alone does not tell: a restarted container's
python is pid 1 again, so the mark carries the pid's start time too. A mark of another host (a
shared file system) is never taken for a dead one: this host cannot see its processes.
"""

import contextlib
import hashlib
import os
import shutil
import socket


def start_ticks(pid) -> str | None:
  """When process `pid` of this host started (clock ticks since boot, /proc/PID/stat's 22nd
  field); None where that cannot be read (not Linux, no such process)."""
  try:
    with open(f'/proc/{int(pid)}/stat', encoding='ascii') as f:  # local: the kernel's table
      return f.read().rpartition(')')[2].split()[19]
  except (OSError, ValueError, TypeError, IndexError):
    return None


def alive(pid, started: str | None = None) -> bool:
  """Whether process `pid` of this host runs, and is the one that started at `started` (when
  given and readable). A pid that is not one (junk) counts as alive: nothing is taken from it."""
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, ValueError, TypeError, OverflowError):  # Another user's, or junk.
    return True
  now = start_ticks(pid)
  return started is None or now is None or now == started


def mark() -> str:
  """This process as names carry it: host-pid.start (start empty where it cannot be read)."""
  return f'{socket.gethostname()}-{os.getpid()}.{start_ticks(os.getpid()) or ""}'


def ended(owner: str) -> bool:
  """Whether the process a mark() names was on this host and no longer runs. A mark without the
  start (host-pid, as older names were) goes by the pid alone."""
  host, _, process = owner.rpartition('-')
  pid, _, started = process.partition('.')
  if host != socket.gethostname() or not pid.isdigit():
    return False
  return not alive(pid, started or None)


# Bytes kept free after hidden_prefix for what follows it (a process mark, a time, a suffix).
_HIDDEN_ROOM = 128
_NAME_MAX = 255  # Bytes in one file name (ext4, xfs, tmpfs, ...).


def hidden_prefix(name: str) -> str:
  """'.NAME.', how the hidden files beside NAME (its temporary file, its lock) begin; for a
  NAME so long that the rest would pass the file-name limit, its first bytes and a hash of it
  (the same for every process)."""
  prefix = f'.{name}.'
  if len(prefix.encode('utf-8', 'surrogateescape')) + _HIDDEN_ROOM <= _NAME_MAX:
    return prefix
  digest = hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:16]
  head = name.encode('utf-8', 'surrogateescape')[:64].decode('utf-8', 'ignore')
  return f'.{head}~{digest}.'


def remove_dead_writers(folder: str, prefix: str, suffix: str, tail: str = '') -> list[str]:
  """Removes the files (or folders) of local `folder` named `prefix` + a writer's
  processes.mark() (+ `tail` and more: a random part) + `suffix` whose writer was killed on this
  host (SIGKILL runs no clean-up); a live writer's, another host's, and one not ours to remove
  (a shared temporary folder's, another user's) are kept. Returns the paths removed."""
  try:
    names = os.listdir(folder)  # local temp
  except OSError:
    return []
  removed = []
  for entry in names:
    if not (entry.startswith(prefix) and entry.endswith(suffix)):
      continue
    owner = entry[len(prefix):len(entry) - len(suffix)]
    owner = owner.rpartition(tail)[0] if tail else owner
    if owner and ended(owner):
      path = os.path.join(folder, entry)  # local temp, of a dead writer
      with contextlib.suppress(OSError):  # Gone meanwhile, or another user's.
        if os.path.isdir(path) and not os.path.islink(path):  # local temp: a folder it wrote
          shutil.rmtree(path)  # local temp
        else:
          os.unlink(path)  # local temp
        removed.append(os.path.join(folder, entry))  # local temp
  return removed
