"""Python entry points' errors name their keyword arguments, not the command's flags.

The checks behind `export.export`, `export.export_formats` and `Predictor.from_workdir` are the
commands' own, so their one-line errors say `--output=...` and `pass --overwrite`; called from a
notebook, the same line names `output=...` and `overwrite=True`. A line that gives a whole
command (`python -m bertjax.export ...`) keeps its flags: it is run as written.
"""

import contextlib
import re


@contextlib.contextmanager
def named(flags: dict):
  """Within it, an error's `--flag=` becomes `flags[flag]=`, and a bare `--flag` flags[flag] (give
  a bool flag as 'name=True')."""
  try:
    yield
  except (ValueError, TypeError, OSError) as error:
    text = str(error)
    if 'python -m' not in text:
      renamed = re.sub(r'--([a-z_]+)\b(=?)', lambda m: _keyword(flags, m), text)
      if renamed != text:
        error.args = (renamed,)  # The same exception, raised from where it was.
    raise


def _keyword(flags: dict, match: re.Match) -> str:
  flag, value = match.group(1), match.group(2)
  if flag not in flags:
    return match.group(0)
  keyword = flags[flag]
  return f'{keyword.partition("=")[0]}=' if value else keyword
