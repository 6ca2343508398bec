"""Paths made absolute once, at the start of a job: a relative path would mean another place
to orbax (which refuses relative paths), to worker processes and after a `cd` in a notebook.

Remote paths (gs://, s3://, ...) are only normalised (files.normalised: gs://b//x is gs://b/x, as
orbax names it); `~` is expanded.
"""

import contextlib
import copy
import errno
import json
import os
import re
import stat

from bertjax import files
from bertjax import processes

# Config fields that hold paths (comma-separated lists allowed): *_file(s), *_dir, init_from.
_PATH_FIELD = re.compile(r'(_files?|_dir|^init_from)$')


# Schemes whose `SCHEME:/x` or `SCHEME:x` is a URL missing its slashes, not a local folder
# `SCHEME:` or `SCHEME:x`.
_URL_SCHEMES = ('gs', 'gcs', 's3', 'hdfs', 'http', 'https', 'az', 'abfs', 'abfss', 'file')
_SLASHLESS_URL = re.compile(rf'^({"|".join(_URL_SCHEMES)}):(?!//)', re.IGNORECASE)


def absolute_workdir(workdir) -> str:
  """absolute() of a job's workdir as Python passes it (a str or a Path object), a URL's
  trailing slash dropped as a local path's is (`gs://b/run/` was printed and joined as such:
  `TensorBoard gs://b/run/`); None or '' refused in one line."""
  if not isinstance(workdir, (str, os.PathLike)) or not os.fspath(workdir):
    raise ValueError(f"workdir={workdir!r}: pass the run's folder (a path, or a gs:// URL).")
  path = absolute(os.fspath(workdir))
  return path.rstrip('/') if files.is_remote(path) else path


def absolute(path: str) -> str:
  """An absolute local path (a file:// URL becomes one: the OS calls on it take no URL); a
  remote URL normalised (files.normalised: what bertjax's files, orbax and TensorFlow then name
  is one place); '' unchanged. `gs:/x` (a URL missing a slash) is refused: it would be a local
  folder named `gs:`."""
  if _SLASHLESS_URL.match(path):
    scheme, rest = path.split(':', 1)
    missing = 'a slash' if rest.startswith('/') else 'its slashes'
    if scheme.lower() != 'file':
      fix = f'{scheme}://{rest.lstrip("/")}'
    else:  # file:///x: no host, a local path; `file:x` names a relative one.
      fix = f'{scheme}://{rest}' if rest.startswith('/') else f'{rest} (the path itself)'
    raise ValueError(f'{path} looks like a URL missing {missing}: write {fix} (or ./{path} for '
                     'a local folder)')
  if path[:len('file://')].lower() == 'file://':  # Schemes are case-blind: FILE:// too.
    host, slash, rest = path[len('file://'):].partition('/')
    if not slash:  # `file://` was the current folder.
      raise ValueError(f'{path} names no local path: write file:///ABSOLUTE/PATH (or the path '
                       'itself).')
    if host not in ('', 'localhost'):
      raise ValueError(f'{path} names the host {host}: a file:// URL here is a path on this '
                       'machine (file:///PATH, or file://localhost/PATH); mount the other '
                       'machine\'s folder and pass its local path.')
    path = '/' + rest
  elif not path or '://' in path:
    scheme, rest = path.split('://', 1) if path else ('', '')
    if path and not rest.strip('/'):  # `gs://`: cut to `gs:` by a caller, a local folder.
      raise ValueError(f'{path} names no bucket: write {scheme}://BUCKET/FOLDER.')
    if rest.startswith('/'):  # `gs:///b/x`: a bucket named '' (the client asks the network).
      raise ValueError(f'{path} names no bucket (a slash too many): write '
                       f'{scheme}://{rest.lstrip("/")}.')
    return files.normalised(path) if path else path
  return os.path.abspath(os.path.expanduser(path))


def cache_root() -> str:
  """This machine's folder for what bertjax derives and keeps (compiled programs, vocabs read
  from a tokenizer.json): BERTJAX_CACHE when set, else ~/.cache/bertjax."""
  return os.environ.get('BERTJAX_CACHE') or os.path.join(os.path.expanduser('~'), '.cache',
                                                          'bertjax')


def split_list(paths: str) -> list[str]:
  """The paths (or globs) of a comma-separated setting; a value that names an existing local
  file or folder as a whole (`my,data.csv`) is that one path, commas and all."""
  whole = paths.strip()
  if whole and '://' not in whole and files.exists(os.path.expanduser(whole)):
    return [whole]
  return [p.strip() for p in paths.split(',') if p.strip()]


def absolute_list(paths: str) -> str:
  """Each of comma-separated paths (or globs) made absolute; an existing path holding commas
  stays one path."""
  return ','.join(absolute(p) for p in split_list(paths))


def own_copy(config):
  """A job's own copy of the caller's ConfigDict: a job makes its paths absolute and settles its
  'auto' fields in it, which in the caller's (a notebook's, reused after os.chdir or for a
  second run) would silently carry the first run's folder and choices into the next."""
  return copy.deepcopy(config)


def path_fields(config, prefix: str = '') -> list[tuple[str, str]]:
  """(dotted name, value) of every path field of a ConfigDict (nested) that is set."""
  found = []
  for key in list(config.keys()):
    value = config[key]
    if hasattr(value, 'keys'):
      found += path_fields(value, f'{prefix}{key}.')
    elif isinstance(value, str) and value and _PATH_FIELD.search(key):
      found.append((f'{prefix}{key}', value))
  return found


def absolute_config(config):
  """Every path field of a ConfigDict (nested) made absolute, in place; returns the config."""
  for name, value in path_fields(config):
    *parents, key = name.split('.')
    node = config
    for parent in parents:
      node = node[parent]
    with node.ignore_type():
      node[key] = absolute_list(value)
  return config


def check_lengths(path: str, shown: str, room: int = 0):
  """Refuses a local `path` (`shown` in the message) with a name longer than its file system
  takes, or a path that leaves fewer than `room` bytes for what is written inside it: checked
  first, as a write failed only at its end, renaming its whole output into place."""
  path = os.path.abspath(path)  # local only
  existing = path
  while not os.path.isdir(existing):  # local only: the folder whose file system is asked
    existing = os.path.dirname(existing)
  limits = []
  for name, default in (('PC_NAME_MAX', 255), ('PC_PATH_MAX', 4096)):
    try:
      limits.append(os.pathconf(existing, name))  # local only
    except (OSError, ValueError):
      limits.append(default)
  longest_name, longest = limits
  for name in path.split(os.sep):
    if (size := len(name.encode('utf-8', 'surrogateescape'))) > longest_name:
      raise ValueError(f'{shown}: the name {name[:24]}... is {size} bytes long, past the '
                       f'{longest_name} a file name may have on this file system: pass a '
                       'shorter name.')
  if (size := len(path.encode('utf-8', 'surrogateescape'))) + room > longest:
    raise ValueError(f'{shown[:60]}... is {size} bytes long: ' +
                     ('with the files written inside it, ' if room else '') +
                     f'past the {longest} a path may have here; pass a shorter path.')


def special_kind(path: str) -> str | None:
  """What local `path` is when it exists (through its links) as neither a folder nor a regular
  file: 'a FIFO', 'a socket', 'a device', or 'not a folder' for another kind (none on Linux). A
  write would replace it by a regular file (as root, /dev/null for every program). None for
  anything else, a URL too."""
  if files.is_remote(path):
    return None
  try:
    mode = os.stat(path).st_mode  # local only
  except (OSError, ValueError):  # Nothing there (a dangling link too), as os.path.exists says.
    return None
  if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
    return None
  return ('a FIFO' if stat.S_ISFIFO(mode) else 'a socket' if stat.S_ISSOCK(mode) else
          'a device' if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else 'not a folder')


def check_output_file(output, flag: str = 'output_file', inputs=(), shown: str = '') -> str:
  """The absolute --`flag` path (or URL), refused before any work when writing it would lose
  something: one of the `inputs` it was read from, a folder, a file that is not a regular one
  (a device such as /dev/null, a fifo, a socket: the atomic write would replace it by a regular
  file), any path inside a bertjax run (at any depth: a run's files are written by the run
  alone) or a run's checkpoints/, an existing file of a model's folder (or of a subfolder of
  it: sentence-transformers' 1_Pooling/), or a new file beside a model's files.

  A local symbolic link comes back as the file it points to: the atomic write (a temp file
  renamed into place) then replaces that file, beside it, rather than the link itself.
  `shown` names the output in the errors (default: --`flag`=`output`)."""
  if not str(output or '').strip():  # Else a temp file is written in the folder above.
    raise ValueError(f'{shown or f"--{flag}"} is empty: name the file to write.')
  out = absolute(str(output))
  shown = shown or f'--{flag}={output}'
  if str(output).endswith(('/', os.sep)):  # A bucket would store an object named `folder/`.
    raise IsADirectoryError(f'{shown} names a folder (it ends in /): name the file '
                            'to write.')
  files.check_bucket(out)
  files.check_folders(out)  # Under a file: refused before any work (a URL's asked once).
  if files.isdir(out) and not files.isfile(out):
    raise IsADirectoryError(f'{shown} is a folder: name the file to write.')
  if not files.is_remote(out):
    check_lengths(out, shown)
    # Through its links (/dev/stdout is one to a terminal or a pipe), before resolving them:
    # a pipe's link resolves to no path at all.
    if special_kind(out):
      raise ValueError(f'{shown} is not a regular file (a device, fifo or socket): '
                       'pass a file path.')
    if os.path.islink(out):
      out = os.path.realpath(out)
  for source in inputs:
    if source and same_path(out, str(source)):
      raise FileExistsError(f'{shown} is the input it is made from: writing it would '
                            'lose the input; name another file.')
  parts = (out.split('://', 1)[1].split('/') if files.is_remote(out)
           else os.path.realpath(out).split(os.sep))
  if 'checkpoints' in parts[:-1]:
    raise FileExistsError(f'{shown} is inside a run\'s checkpoints/: write it '
                          'elsewhere (checkpoints are only written by their run).')
  files.check_replaceable(out)  # Read-only: refused now, not after the work.
  exists = files.exists(out)
  if (run := _run_around(_resolved(out))) is not None:
    raise FileExistsError(f'{shown} {"exists" if exists else "would be"} in a bertjax '
                          f'run ({run}): tools that read a run never write into it; write it '
                          'elsewhere.')
  folder = files.parent(_resolved(out))
  if (model := model_folder(folder)) is not None:
    if exists:
      raise FileExistsError(f'{shown} exists in {model[1]} ({model[0]}): writing it '
                            'would damage that model; name a new file.')
    if model[0] == folder:  # A new file beside its files (a subfolder of one is the user's).
      # One added there (features beside the weights they came from) travels with every copy
      # of the model, and an export's --overwrite then refuses the folder.
      raise FileExistsError(f'{shown} would be in {model[1]} ({model[0]}): a model\'s folder '
                            'holds its own files only; write it beside the folder.')
  return out


def refuse_dash(value, flag: str, kind: str, why: str, example: str):
  """Refuses `-` where a tool writes a file or folder by name, not to a standard stream (as
  predict and extract_features read it): it would make a `kind` named '-' in the current
  folder. `why` says what is written; `example` a value to pass."""
  if str(value).strip() == '-':
    raise ValueError(f"{flag}=- would write a {kind} named '-' ({why}): name the {kind}, e.g. "
                     f'{flag}={example}')


def refuse_compressed_name(output: str, shown: str):
  """Refuses a text output named as compressed (`.gz`, `.bz2`, `.xz`): it would be plain text
  under that name, which every reader of it (zcat, bertjax's own) refuses as damaged."""
  name = files.name(str(output)).lower()
  if name.endswith(('.gz', '.bz2', '.xz')):
    plain = name[:name.rindex('.')]
    raise ValueError(f'{shown} names a compressed file, but the output is written as plain text: '
                     f'name it {plain} (and compress it after), or leave --output_file out and '
                     f'pipe the standard output: ... | gzip > {files.name(str(output))}.')


def refuse_existing(output: str, overwrite: bool, shown: str, flag: str = '--output_file'):
  """An existing `output` (an empty one too: a file made by hand is its user's) is replaced
  only with --overwrite: every tool that writes one file says so alike. Called with the
  output's lock held, so that no other run's file appears between the check and the write."""
  if not overwrite and files.exists(output):
    raise FileExistsError(f'{shown} exists: pass --overwrite to replace it, or another {flag}.')


def write_error(e: OSError, output: str | None, flag: str = '--output_file') -> str:
  """One line for an OSError met writing the file `output` (its temporary file beside it, or
  the rename into place) or standard output (None): a full disk, or a file or folder that
  cannot be written; '' for another error, or one about another file (stdout's has no name)."""
  kept = 'nothing was written (a file already there is kept)'
  if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) and (output or not e.filename):
    # Redirected standard output (`> out.jsonl`) is written as it comes, not whole.
    where, kept = (output, kept) if output else ('standard output', 'what it got is cut short')
    return (f'the disk holding {where} is full ({e.strerror}): {kept}; free space there or '
            f'pass an {flag} on another disk.')
  name = os.path.basename(os.fspath(e.filename or ''))
  ours = output and (name == os.path.basename(output) or name.startswith(
      processes.hidden_prefix(os.path.basename(output))))
  if ours and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
    return f'cannot write {output} ({e.strerror}): {kept}; pass another {flag}.'
  return ''


def check_output_folder(folder, names, flag: str = 'workdir', inputs=()) -> str:
  """The absolute --`flag` folder, refused before any work when writing `names` into it would
  lose something (one of the `inputs` too), as check_output_file refuses an output file (in its
  words), or when it is the folder of a model (a transformers model, a TF1 checkpoint, a
  SavedModel) or inside one."""
  out = absolute(str(folder))
  if (model := model_folder(_resolved(out))) is not None:  # Said of the folder, not of a file.
    raise FileExistsError(f'--{flag}={folder} is in {model[1]} ({model[0]}): tools that read a '
                          'model never write into it; pass a folder of its own.')
  for name in names:
    check_output_file(files.join(out, name), flag, inputs=inputs,
                      shown=f'{name} in --{flag}={folder}')
  return out


def in_checkpoints(path: str) -> tuple[str, list[str]] | None:
  """(the run, the names from its checkpoints/ down to `path`: [] for checkpoints/ itself,
  ['6'] for step 6, ['6', 'state'] inside it) where absolute `path` is a run's checkpoints/
  folder or inside it, else None: what a --workdir there is (never a run of its own: the run's
  checkpointer deletes the steps it no longer keeps, and what is in them)."""
  up = files.folders_up(path.rstrip('/'))
  for at, folder in enumerate(up):
    if files.name(folder) == 'checkpoints' and is_run(files.parent(folder)):
      return files.parent(folder), [files.name(below) for below in reversed(up[:at])]
  return None


def is_run(folder) -> bool:
  """Whether `folder` is a bertjax run's workdir: its config.json beside checkpoints/, or, before
  the first checkpoint (a bucket has no empty checkpoints/ folder), a config.json that is a
  run's (it names its job), not a transformers model's."""
  config = files.join(folder, 'config.json')
  if not files.isfile(config):
    return False
  try:
    fields = json.loads(files.read_text(config))
  except (OSError, ValueError):  # Not JSON: no model's either.
    fields = None
  if files.isdir(files.join(folder, 'checkpoints')):
    # Unless a transformers model's (model_type): a run refused there once left checkpoints/.
    return not (isinstance(fields, dict) and 'model_type' in fields)
  return isinstance(fields, dict) and 'job' in fields


def _run_around(path: str) -> str | None:
  """The bertjax run that `path` (resolved) lies in, at any depth; else None."""
  folder = files.parent(path)
  while folder:
    if is_run(folder):
      return folder
    parent = files.parent(folder)
    if parent == folder or (files.is_remote(folder) and '/' not in folder.split('://', 1)[1]):
      return None  # The root, or a bucket (gs://b).
    folder = parent
  return None


def _resolved(path: str) -> str:
  return path if files.is_remote(path) else os.path.realpath(path)


def same_path(a: str, b: str) -> bool:
  """Whether two paths (local, resolved; or URLs, a trailing / ignored) name one file."""
  return file_key(a) == file_key(b)


def file_key(path: str) -> str:
  """One name per file: a local path resolved (links, `.`, `..`), a URL normalised, without a
  trailing /."""
  path = os.fspath(path)
  return (files.normalised(path).rstrip('/') if files.is_remote(path)
          else os.path.realpath(absolute(path)))


def model_folder(folder: str) -> tuple[str, str] | None:
  """(folder, what it is) for `folder` or its parent when it holds a transformers model, an
  original TF1 checkpoint or a SavedModel; else None (a bertjax run: _run_around)."""
  for candidate in (folder, files.parent(folder)):
    if not candidate:
      continue
    def inside(*names, c=candidate):
      return files.join(c, *names)
    if files.isfile(inside('config.json')) and any(  # Its weights, whole or sharded.
        files.exists(inside(n + end)) for n in ('model.safetensors', 'pytorch_model.bin')
        for end in ('', '.index.json')):
      return candidate, 'a transformers model'
    # A bert_config.json alone (a user's copy) is no checkpoint: its variables' index is.
    if files.isfile(inside('bert_config.json')) and files.glob(inside('*.index')):
      return candidate, 'an original TF1 checkpoint'
    if files.isfile(inside('saved_model.pb')):
      return candidate, 'a SavedModel'
  return None


def write_atomically(path, text: str | bytes):
  """Writes a file whole or not at all (see files.write_atomically): local or a URL."""
  files.write_atomically(str(path), text)


def expand_input_patterns(patterns) -> list[str]:
  """Files of comma-separated paths and globs (local or URLs such as gs://), in the order given
  (each glob sorted, each file once). A folder named (not a glob's match, which is skipped and
  said as the other unusable inputs are) is refused: read as nothing, its text would be left
  out without a word."""
  found = []
  for pattern in split_list(patterns):  # An existing `my,corpus.txt` is one file.
    matches = files.glob(pattern if files.is_remote(pattern) else os.path.expanduser(pattern))
    if matches and not any(c in pattern for c in '*?[') and files.isdir(matches[0]):
      folder = pattern.rstrip('/') or pattern
      raise IsADirectoryError(f'--input_file names the folder {folder}, and a folder is not '
                              f'read: pass the files in it, e.g. {folder}/*.txt (or {folder}/* '
                              'for all of them)')
    if not matches and pattern == '-':
      raise FileNotFoundError('--input_file=- : standard input is not read here; save the text '
                              'to a file and pass its path')
    if not matches:
      absolute(pattern)  # `gs:/b/x` matched no local file: said to be a URL missing a slash.
      raise FileNotFoundError(f'--input_file pattern {pattern!r} matched no files')
    found.extend(matches)
  if not found:
    raise ValueError('--input_file is empty: pass comma-separated files or globs')
  return each_file_once(found)


def each_file_once(file_paths) -> list[str]:
  """`file_paths` with each file once, as first spelled, however else it is spelled (a/x,
  ./a/x, a symbolic or hard link to it): a file read twice would silently weigh double."""
  found = {}
  for path in file_paths:
    key = file_key(path)
    if not files.is_remote(key):
      with contextlib.suppress(OSError):
        stat = os.stat(key)  # local: hard links share its inode
        if stat.st_nlink > 1 and stat.st_ino:  # Some FUSE mounts give every file inode 0.
          key = (stat.st_dev, stat.st_ino)
    found.setdefault(key, path)
  return list(found.values())
