"""Paths made absolute once, at the start of a job: a relative path would mean another place
to orbax (which refuses relative paths), to worker processes and after a `cd` in a notebook.

Remote paths (gs://, s3://, ...) are kept as they are; `~` is expanded.
"""

import os
import pathlib
import re

# Config fields that hold paths (comma-separated lists allowed): *_file(s), *_dir, init_from
# and its old names.
_PATH_FIELD = re.compile(r'(_files?|_dir|^init_from|^init|^checkpoint)$')


def absolute(path: str) -> str:
  """An absolute local path; '' and remote URLs unchanged."""
  if not path or '://' in path:
    return path
  return os.path.abspath(os.path.expanduser(path))


def absolute_list(paths: str) -> str:
  """Each of comma-separated paths (or globs) made absolute."""
  return ','.join(absolute(p.strip()) for p in paths.split(',') if p.strip())


def absolute_config(config):
  """Every path field of a ConfigDict (nested) made absolute, in place; returns the config."""
  for key in list(config.keys()):
    value = config[key]
    if hasattr(value, 'keys'):
      absolute_config(value)
    elif isinstance(value, str) and value and _PATH_FIELD.search(key):
      with config.ignore_type():
        config[key] = absolute_list(value)
  return config


def read_text_lines(path, flag: str = 'input_file') -> list[str]:
  """The lines of a UTF-8 text file given by --`flag`, or an error saying what to do."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'--{flag}={path} does not exist.')
  try:
    return path.read_text('utf-8').splitlines()
  except UnicodeDecodeError as e:
    raise ValueError(f'{path} is not UTF-8 text (byte {e.start}): re-encode it.') from None
