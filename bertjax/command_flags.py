"""A command's flags as absl reads them, said as a user acts on them: a flag it does not take
names those it does, a usage error is one line, a text flag that took the next word or a flag
given twice is said, a --flagfile that cannot be read is one line. Every bertjax command's
app.run takes flags_parser; bertjax.main and the launchers read flag files with
unreadable_flagfile before ml_collections does (on import, with a traceback).
"""

import os
import re
import sys

from absl import app
from absl import flags
from absl import logging

from bertjax import console
from bertjax import log_file


def usage_said(main, prefix: str = 'error: ', code: int = 1):
  """`main` with its usage errors said as its other errors are, one line (`prefix` first),
  not after the command's whole help (absl prints the help, then the message); exit `code`."""
  def run(argv):
    try:
      return main(argv)
    except app.UsageError as e:
      console.fail(f'{prefix}{e} (--helpshort lists the flags)', code)
  return run


# absl's line for a required flag left out.
_REQUIRED = r'flag --(\w+)=None: Flag --\1 must have a value other than None\.'


def flags_parser(prefix: str = 'error: ', code: int = 1):
  """app.run's flags_parser for a command: a flag it does not take is one line naming the flags
  it does (absl's suggestion named its own logging flags: --workdir to export was 'Did you
  mean: log_dir ?'); any other flag error is absl's one line, with `prefix`; exit `code`."""
  def parse(argv):
    console.COMMAND.set()
    if unreadable := unreadable_flagfile(argv[1:]):
      console.fail(f'{prefix}{unreadable}', code)
    try:
      argv = flags.FLAGS(argv)
      log_file.open_from_flags()
      return argv
    except ValueError as e:  # --log_dir's.
      console.fail(f'{prefix}{e} (--helpshort lists the flags)', code)
    except flags.Error as e:
      said, hint = ' '.join(str(e).split()), '--helpshort lists the flags'
      if unknown := re.match(r"Unknown command line flag '([^']+)'(?:\. Did you mean: "
                             r'([\w, ]+) \?)?', said):
        own = sorted(f.name for f in flags.FLAGS.get_key_flags_for_module(sys.argv[0]))
        meant = [n for n in (unknown[2] or '').replace(' ', '').split(',') if n in own]
        said = (f'unknown flag --{unknown[1]}'
                + (f' (did you mean --{meant[0]}?)' if meant else '')
                + f': this command takes {", ".join(f"--{name}" for name in own)}')
        hint = '--helpshort describes them'
      elif re.fullmatch(f'(?:{_REQUIRED} ?)+', said):  # mark_flags_as_required's, each.
        names = [f'--{name}' for name in re.findall(_REQUIRED, said)]
        said = f'{" and ".join(names)} {"is" if len(names) == 1 else "are"} required: pass ' + (
            'it' if len(names) == 1 else 'them')
      console.fail(f'{prefix}{said} ({hint})', code)
  return parse


def refuse_arguments(argv, flags_hint: str):
  """A command's words after its flags are a usage error that names its flags: read as nothing,
  `predict --workdir=RUN in.txt` would wait on standard input instead. Then check_flags."""
  if flag := next((w for w in argv[1:] if w.startswith('-') and w != '-'), None):
    raise app.UsageError(f"{flag} comes after '--', which ends the flags (what follows is read "
                         "as words): move it before the '--', or drop the '--'.")
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}: every input is a --flag '
                         f'({flags_hint}).')
  check_flags(sys.argv[1:])


def check_flags(words):
  """A text flag given no value takes the next word (absl's rule): `--workdir --step=best` ran a
  job in a folder named '--step=best'. Refused, naming both. A flag given twice keeps the last
  value (absl's rule too): said, since a launcher script's second override hides the first."""
  for name in flags.FLAGS:
    flag = flags.FLAGS[name]
    # A list flag (--format, --labels) takes the next word as its one item.
    value = (flag.value[0] if isinstance(flag.value, list) and len(flag.value) == 1 else
             flag.value)
    if flag.present and isinstance(value, str) and value.startswith('--'):
      raise app.UsageError(f'--{name} took the next word {value!r} as its value: give it '
                           f'one (--{name}=VALUE), or drop it.')
  for name in sorted({w.lstrip('-').partition('=')[0] for w in _flag_words(words)}):
    if name == 'flagfile' or name not in flags.FLAGS:  # absl reads every --flagfile.
      continue
    flag = flags.FLAGS[name]
    if isinstance(flag, flags.MultiFlag):  # Each value is kept.
      continue
    values = flag_values(words, name, boolean=flag.boolean)
    if len(set(values)) > 1:
      logging.warning('--%s is given %d times (%s): the last, %s, is used', name, len(values),
                      ', '.join(values), values[-1])


def _flag_words(words):
  for word in words:
    if word == '--':
      return
    if word.startswith('-') and len(word) > 1:
      yield word


def flag_values(argv, name: str, boolean: bool = False) -> list[str]:
  """The values given to the flag `name` in `argv`, in each form absl reads: --name=V, --name V,
  -name=V, -name V ('' for a last --name with nothing after it; a boolean flag's only in the
  =V form); '--' ends the flags."""
  values, args = [], iter(argv)
  for arg in args:
    if arg == '--':
      break
    flag, eq, value = arg.partition('=')
    if flag in (f'--{name}', f'-{name}') and (eq or not boolean):
      values.append(value if eq else next(args, ''))
  return values


def unreadable_flagfile(argv) -> str | None:
  """The one line for a --flagfile that cannot be read or is not UTF-8 text, else None: absl
  reads them with a traceback (config_flags on import, when --config is defined)."""
  for name in flag_values(argv, 'flagfile'):
    try:
      local = os.path.expanduser(name.strip())  # As absl names it: `~` expanded.
      with open(local, 'rb') as f:  # local: absl reads flag files from this machine.
        data = f.read()
      data.decode('utf-8')
    except OSError as e:
      return f'--flagfile={name} cannot be read ({e.strerror}): check the path.'
    except UnicodeDecodeError as e:
      line = data.count(b'\n', 0, e.start) + 1
      return (f'--flagfile={name} is not UTF-8 text (line {line}, byte {e.start}): re-encode '
              f'it, e.g. iconv -f latin1 -t utf-8 {name} > flags.txt')
  return None
