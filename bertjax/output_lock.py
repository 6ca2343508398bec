"""One writer per output at a time: the second is refused at its start, naming the first.

An exclusive `fcntl.flock` on a hidden file beside the output (`.NAME.lock`), holding who took
it; removed at the end and by an interrupt's exit, and released by the kernel however the
holder dies (never stale). A URL (gs://, s3://) has no flock: there the lock is an object of the
same name with a lease (remote_lock.py), taken over once its holder is gone. A run's workdir has
its own lock (training/workdir_lock.py).

Either lock names the tool that holds it, so that a run of another tool on the same output is
told whose run it waits for ("another extract_features run" to a predict); one taken by an
older version, which recorded no tool, is "another run".
"""

import contextlib
import fcntl
import os
import pwd
import socket
import threading
import time

from bertjax import console
from bertjax import files
from bertjax import processes
from bertjax import remote_lock


@contextlib.contextmanager
def held(output: str, tool: str, busy: str, flag: str = '--output_file'):
  """Held while `tool` writes `output`: another run holding it refuses this one with
  `another HOLDER run (pid N on HOST, since T) is {busy} now: wait for it to finish, or pass
  another {flag}` (HOLDER: the tool that holds it, recorded in the lock; `busy`: what this one
  would do, e.g. 'writing vocab.txt')."""
  if files.is_remote(output):
    with _held_remote(output, tool, busy, flag):
      yield
    return
  folder = os.path.dirname(output)
  # The folders this run makes for its output: removed again where it ends with them empty (a
  # run refused by its checks, failed or interrupted leaves no empty tree behind).
  made = [p for p in files.folders_up(folder) if p not in ('', '.') and  # local: its folders
          not os.path.exists(p)]  # local: its folders
  files.makedirs(folder)
  try:
    with console.at_interrupt(lambda: _remove_if_empty(made)):
      with _held_local(output, folder, tool, busy, flag):
        yield
  finally:
    _remove_if_empty(made)


def _remove_if_empty(made: list[str]):
  """Removes the folders in `made` (the deepest first) while they are empty."""
  for path in made:
    try:
      os.rmdir(path)  # local: a folder this run made, empty
    except OSError:
      return


@contextlib.contextmanager
def _held_local(output: str, folder: str, tool: str, busy: str, flag: str):
  """held() for a local output whose `folder` exists: a flock on a hidden file beside it."""
  lock_path = os.path.join(folder, processes.hidden_prefix(os.path.basename(output)) + 'lock')
  # The lock file this run opened, for an interrupt that comes at any point (from the watcher
  # thread, the main thread going on meanwhile: `guard` keeps its removal and `finally`'s apart).
  opened, guard = [], threading.Lock()
  with contextlib.ExitStack() as stack:
    stack.enter_context(console.at_interrupt(lambda: _remove_if_free(lock_path, opened, guard)))
    for _ in range(3):  # A lock file removed by the run ending meanwhile: the next one's.
      try:
        lock = stack.enter_context(open(lock_path, 'a+', encoding='utf-8'))  # local: flock's
        opened[:] = [lock]
      except PermissionError as e:
        if os.path.exists(lock_path) and os.access(folder, os.W_OK):  # local: the lock file
          raise ValueError(
              f'cannot take {lock_path}, the lock of {output}: it is {_owner(lock_path)} '
              f'({e.strerror}): if no run is writing there now, remove it (or have it '
              f'removed), or pass another {flag}') from None
        raise ValueError(f'cannot write {output} ({e.strerror} in {folder}): pass another '
                         f'{flag}') from None
      except OSError as e:  # A read-only folder, before any work: named, not the hidden file.
        raise ValueError(f'cannot write {output} ({e.strerror} in {folder}): pass another '
                         f'{flag}') from None
      try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        lock.seek(0)
        holder, who = _holder(lock.read().strip())
        raise ValueError(_refusal(holder, who, busy, flag)) from None
      except OSError:  # A file system without locks (NFS without lockd, FUSE): unlocked.
        lock.close()
        with contextlib.suppress(OSError):
          os.remove(lock_path)  # local: the lock file just made
        yield
        return
      with contextlib.suppress(FileNotFoundError):
        if os.stat(lock_path).st_ino == os.fstat(lock.fileno()).st_ino:  # local: the lock file
          break
      lock.close()
    else:
      raise ValueError(f'the lock beside {output} keeps being replaced: is another run '
                       'starting there? Rerun when it is done.')
    try:  # The record written inside: a disk too full for it leaves no lock file behind.
      lock.seek(0)
      lock.truncate()
      # The tool last (`pid ...` first, as older versions read and wrote it): what a run of
      # another tool refused by this lock names (_holder).
      lock.write(f'pid {os.getpid()} on {socket.gethostname()}, since '
                 f'{time.strftime("%Y-%m-%d %H:%M:%S")}, by {tool}\n')
      lock.flush()
      yield
    finally:
      with guard:
        opened[:] = [None]  # Removed here: not by an interrupt that comes after.
        with contextlib.suppress(FileNotFoundError):
          os.remove(lock_path)  # local: the lock file, while it is held
        fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def _held_remote(output: str, tool: str, busy: str, flag: str):
  """held() for an output in a bucket: a lock object beside it, renewed while held."""
  if '/' not in output.rstrip('/').partition('://')[2]:  # Its lock would have no folder.
    raise ValueError(f'{flag}={output} is a bucket\'s root: pass a folder in it '
                     f'({flag}={output.rstrip("/")}/NAME)')
  folder, name = output.rstrip('/').rsplit('/', 1)
  lock = remote_lock.RemoteLock(f'{folder}/.{name}.lock')
  lock.record['tool'] = tool  # Put with the rest of the record: named to whoever it refuses.
  if (who := lock.acquire()) is not None:
    # The holder's record, read again for its tool (an older version's has none).
    holder = remote_lock.read_holder(lock.path) or {}
    raise ValueError(_refusal(str(holder.get('tool') or ''), who, busy, flag))
  try:  # Ctrl-C skips `finally`: a rerun on another host would wait out the lease.
    with console.at_interrupt(lock.release):
      yield
  finally:
    lock.release()


def _holder(text: str) -> tuple[str, str]:
  """(tool, who) of a lock file's line 'pid N on HOST, since T, by TOOL'; ('', line) of an
  older version's, which holds no tool ('pid N on HOST, since T')."""
  who, sep, tool = text.rpartition(', by ')
  if sep and tool.isidentifier() and who.startswith('pid '):
    return tool, who
  return '', text or '?'


def _refusal(holder: str, who: str, busy: str, flag: str) -> str:
  """The one line that refuses a run: the holder's tool (none known: 'another run'), who it is
  and what this run would do."""
  run = f'{holder} run' if holder else 'run'
  return (f'another {run} ({who}) is {busy} now: wait for it to finish, or pass another '
          f'{flag}')


def _remove_if_free(lock_path: str, opened: list, guard: threading.Lock):
  """At an interrupt (which skips `finally`): removes the lock file unless another run holds it.
  The signal may come between its creation and the lock, where the file is taken for this
  run's (another run's that has not locked it yet would be taken too: it is then refused)."""
  if not guard.acquire(timeout=1):
    return
  try:
    if opened == [None]:  # `finally` removed it.
      return
    lock = opened[0] if opened else open(lock_path, 'a+', encoding='utf-8')  # local: flock's
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # Already held by this run's: granted.
    except OSError:  # Another run's (or no flock here): kept.
      return
    if os.stat(lock_path).st_ino == os.fstat(lock.fileno()).st_ino:  # local: the lock file
      os.remove(lock_path)  # local: the lock file, held
  finally:
    guard.release()


def _owner(path: str) -> str:
  """Whose `path` is: 'USER\'s' (uid N where the name is unknown), 'yours (read-only)'."""
  try:
    uid = os.stat(path).st_uid  # local: the lock file
  except OSError:
    return "another run's"
  if uid == os.getuid():
    return 'yours (read-only)'
  try:
    return f"{pwd.getpwuid(uid).pw_name}'s"
  except KeyError:
    return f"uid {uid}'s"
