"""A job's command line (--config=FILE[:ARG] and --config.X=V) loaded as bertjax.main loads it.

Where a job is launched (launch/tpu_pod.py, launch/gke_jobset.py) its config is loaded as
bertjax.main's --config flag loads it, then config_check.check()ed, before anything is booked;
a mistyped, renamed or replaced field is named with its closest valid names or its new name
(bertjax.main shows the same line for a flag it cannot parse).
"""

import json
import re
import sys

from bertjax import command_flags
from bertjax import config_check
from bertjax import config_files
from bertjax import console
from bertjax import files
from bertjax import job_config
from bertjax import log_file
from bertjax.pretraining_data import masking
from bertjax.training import step_names

# Fields that were renamed (removed under their old name): pre-training's checkpoint.init_from,
# fine-tuning's init, feature extraction's checkpoint.
RENAMED_FIELDS = {'checkpoint.init_from': 'init_from', 'init': 'init_from',
                  'checkpoint': 'init_from'}
# Fields replaced by a field of another kind: (what to pass instead, what the new field holds).
REPLACED_FIELDS = {'data.whole_word_masking': (
    'data.masking=whole_word', f'data.masking is one of {", ".join(masking.STRATEGIES)}')}


def unknown_field(config, args) -> str | None:
  """'unknown config field X; closest valid names: ...' for the first --config.X in `args` that
  `config` lacks, else None."""
  import difflib  # pylint: disable=g-import-not-at-top
  names = job_config.field_paths(config, sections=True)
  for i, arg in enumerate(args):
    if arg == '--':  # absl: what follows is an argument, not a flag (ml_collections reads a
      # --config.X there all the same: 'AttributeError: "'X'"' for a field it lacks).
      if later := next((a for a in args[i + 1:] if _config_flag(a)), None):
        return (f"{later} comes after '--', which ends the flags: move it before the '--', or "
                "drop the '--'.")
      break
    name = arg.lstrip('-').partition('=')[0]
    if (re.fullmatch(r'(no)?config\..*', name, re.S)
        and not re.fullmatch(r'(no)?config(\.[^.]+)+', name)):  # An empty name: absl's bare
      # SyntaxError. (A misspelt one, max-seq-length, is told its closest names below.)
      return f'{arg} names no config field: write --config.FIELD=VALUE, e.g. --config.seed=5.'
    flag = _config_flag(arg)
    if flag is not None and flag[0]:
      field = flag[0]
      if field in REPLACED_FIELDS and field not in names:
        replacement, holds = REPLACED_FIELDS[field]
        return f'config.{field} was replaced: use --config.{replacement} (in {arg}; {holds}).'
      if field in RENAMED_FIELDS and field not in names:
        return (f'config.{field} was renamed: use --config.{RENAMED_FIELDS[field]} (in {arg}; '
                'the same field in every job).')
      if field not in names:
        close = difflib.get_close_matches(field, names, n=3, cutoff=0.5)
        listed = (f'closest valid names: {", ".join(close)}' if close else
                  f'valid top-level fields: {", ".join(sorted(n for n in names if "." not in n))}')
        return f'unknown config field {field!r} (in {arg}); {listed}'
  return None


def ignored_override(config, overrides) -> str | None:
  """The line refusing a --config.X=V (`overrides`: the fields given, as config_flags records
  them) that the job would not apply, or apply otherwise than it reads, else None:
  - model.size: the size is the argument string's size= (the override would only relabel);
  - a fine-tuning's task: task= in the argument string picks the task's recipe (length, rate,
    epochs, batch, windows), which an override would leave at the other task's;
  - a fine-tuning's architecture (model.num_layers, hidden_act, ...) from init_from without
    size=: the shape is init_from's (or the resumed run's) whatever was given."""
  from bertjax.interop import init_from  # pylint: disable=g-import-not-at-top  # jax, orbax.
  fields = set(overrides)
  if 'model.size' in fields:
    return ('config.model.size is the argument string\'s size= (e.g. --config=configs/'
            f'{config.job}.py:size=base), which sets the whole shape: pass it there.')
  if config.job != 'finetune':
    return None
  if 'task' in fields:
    return (f'--config.task={config.task}: the task is the argument string\'s task= (e.g. '
            f'--config=configs/finetune.py:task={config.task}), which also picks its recipe '
            '(length, learning rate, epochs, batch): pass it there.')
  architecture = sorted(f for f in fields if f.startswith('model.')
                        and f[len('model.'):] in init_from.ARCHITECTURE_FIELDS)
  if architecture and config.get('model_from_init', False) and config.get('init_from'):
    return (f'--config.{architecture[0]}={config.model[architecture[0][len("model."):]]} is not '
            'applied: without size= a fine-tuning takes the model\'s shape from init_from (or '
            'from the run it resumes). Drop it, or pass size= in the argument string to set the '
            'shape (it must fit init_from\'s checkpoint).')
  return None


def load_config(spec: str):
  """The ConfigDict of `--config=path.py[:arg]`, loaded as config_flags does."""
  path, _, arg = spec.partition(':')
  return config_files.load_file(path, arg)


def config_spec(argv) -> str | None:
  """FILE[:ARG] of the --config=FILE[:ARG] in `argv`, None without one. Raises ValueError for
  a repeated --config=: absl would keep the last file yet register the --config.X overrides
  against the first, so a second file is refused rather than half-applied."""
  specs = command_flags.flag_values(argv, 'config')
  if len(specs) > 1:
    raise ValueError(f'--config= is given {len(specs)} times ({", then ".join(specs)}): pass '
                     'one --config=FILE[:ARG], and change its fields with --config.X=V.')
  return specs[0] if specs else None


# A --config flag as absl and config_flags read it: one or two dashes, then `config` (the file)
# or `config.FIELD` (an override; `noconfig.FIELD` sets a bool field false), then `=VALUE` or not.
_CONFIG_FLAG = re.compile(r'--?(?P<no>no)?config(?:\.(?P<field>[^=]+))?(?P<value>=.*)?', re.S)


def _config_flag(arg: str) -> tuple[str, str | None, bool] | None:
  """(field, '' for the file flag itself; the value after '=', or None; whether it is the
  --noconfig.FIELD form) of a --config flag in any of absl's forms, else None."""
  match = _CONFIG_FLAG.fullmatch(arg)
  if match is None or (match['no'] and not match['field']):
    return None
  value = match['value']
  return match['field'] or '', value[1:] if value is not None else None, bool(match['no'])


def _is_bool_field(config, field: str) -> bool:
  node = config
  for key in field.split('.'):
    try:
      node = node[key]
    except (KeyError, AttributeError, TypeError):
      return False
  return isinstance(node, bool)


def config_flags(argv, config) -> list[str]:
  """bertjax.main's --config and --config.X flags among `argv`, each as one argument, read as
  absl reads them: `--config FILE` and `--config.X V` take the argument after them (so become
  --config=FILE and --config.X=V), a bool field's bare --config.X or --noconfig.X takes none;
  other flags, and whatever follows '--', are left out. `config` (the file's ConfigDict) says
  which fields are bools."""
  flags_, args = [], iter(argv)
  for arg in args:
    if arg == '--':
      break
    flag = _config_flag(arg)
    if flag is None:
      continue
    field, value, negated = flag
    name = f'--{"no" if negated else ""}config{"." + field if field else ""}'
    if value is None and not negated and not (field and _is_bool_field(config, field)):
      value = next(args, None)  # None: absl's 'Missing value' when the flags are parsed.
    flags_.append(name if value is None else f'{name}={value}')
  return flags_


def with_config_file(argv, spec: str) -> list[str]:
  """`argv` with its --config=FILE[:ARG] (in whichever absl form) replaced by --config=`spec`:
  the job's flags for a machine that holds the file elsewhere."""
  result, args = [], iter(argv)
  for arg in args:
    if arg == '--':
      result.extend([arg, *args])
      break
    flag, eq, _ = arg.partition('=')
    if flag in ('--config', '-config'):
      if not eq:
        next(args, None)
      arg = f'--config={spec}'
    result.append(arg)
  return result


def config_field_error(argv) -> str | None:
  """'unknown config field X; closest valid names: ...' for a mistyped --config.X in bertjax.main's
  `argv`, config_spec's line for a second --config=, else None (also when its --config does not
  load: the original error is shown then)."""
  try:
    spec = config_spec(argv)
  except ValueError as e:
    return str(e)
  if spec is None:
    return None
  try:
    config = load_config(spec)
  except Exception:  # pylint: disable=broad-except  # Then the original error is shown.
    return None
  return unknown_field(config, argv)


# What a field's default's type takes, for absl's parse error of a --config.X=VALUE.
_TAKES = {bool: 'true or false', int: 'a whole number', float: 'a number'}


def bad_tuple(error: str) -> str | None:
  """The one line for ml_collections' error on a tuple field's value it cannot parse (its advice,
  `--flag '"It\\'s sunny"'`, is no valid shell): the quoting that is, else None."""
  match = re.match(r'flag --config\.([\w.]+)=(.*?): Error while parsing string: .* as tuple',
                   error, re.S)
  if not match:
    return None
  field, value = match[1], match[2]
  example = re.sub(r'([\\"$`])', r'\\\1', repr(value))  # A Python text, in bash's "...".
  also = (', or a file of them: --config.input_file=FILE (one per line)'
          if field == 'sentences' else '')
  return (f'--config.{field}={value} is not a tuple: config.{field} takes quoted texts, each '
          f'quoted again for the shell, e.g. --config.{field}="({example},)" (bash){also}')


def bad_value(error: str, argv) -> str | None:
  """The one line for absl's error on a --config.X=VALUE its field's type does not parse
  ('invalid literal for int() ...'): the field, the value and what it takes, else None."""
  match = re.match(r'flag --config\.([\w.]+)=(.*?): ', error, re.S)
  if not match or not (spec := config_spec(argv)):
    return None
  try:
    default = load_config(spec)
    for key in match[1].split('.'):
      default = default[key]
  except Exception:  # pylint: disable=broad-except  # absl's own line is shown then.
    return None
  takes = _TAKES.get(type(default))
  if takes is None:
    return None
  example = str(default).lower() if isinstance(default, bool) else default
  return (f'--config.{match[1]}={match[2]!r} is not {takes}: config.{match[1]} takes {takes} '
          f'(the config gives {example}); pass e.g. --config.{match[1]}={example}.')


def parse_flags(argv):
  """absl's flag parsing (app.run's flags_parser) for bertjax.main and launch.aot_compile: a
  mistyped config field, a second --config=FILE or any flag error is one FATAL line, exit
  console.REFUSED_EXIT (the command would be refused again: a scheduler must not restart it)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  console.COMMAND.set()
  expanded = argv
  try:
    # The lines of any --flagfile in place, as absl reads them: a mistyped field there is
    # named as it is on the command line (else absl's repr of an AttributeError).
    expanded = flags.FLAGS.read_flags_from_files(argv, force_gnu=False)
    spec = config_spec(expanded)
    if spec is not None:  # Else config_flags' own parse wraps any error of the file (an empty
      # --config= too) in its traceback.
      config_files.load_config_file(spec)
    parsed = flags.FLAGS(argv)
  except config_files.ConfigFileError as e:
    print(f'FATAL Flags parsing error: {e}', file=sys.stderr)
  except flags.Error as e:
    group = re.match(r'flag --config\.([\w.]+)=.*as a ConfigDict', str(e), re.S)
    if group and (spec := config_spec(expanded)):  # ml_collections': 'malformed node ...'.
      field = group[1]
      names = [n for n in job_config.field_paths(load_config(spec), sections=True)
               if n.startswith(f'{field}.')]
      print(f'FATAL Flags parsing error: config.{field} is a group of fields, not a value: set '
            f'one with --config.{field}.NAME=VALUE ({", ".join(names)})', file=sys.stderr)
    elif (line := bad_tuple(str(e)) or without_config_file(expanded, str(e))) is not None:
      print(f'FATAL Flags parsing error: {line}', file=sys.stderr)
    elif (line := bad_value(str(e), expanded)) is not None:
      print(f'FATAL Flags parsing error: {line}', file=sys.stderr)
    else:
      print(f'FATAL Flags parsing error: {e}\nPass --helpshort or --helpfull to see help on '
            'flags.', file=sys.stderr)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    message = config_field_error(expanded) or f'{type(e).__name__}: {e}'
    print(f'FATAL Flags parsing error: {message}', file=sys.stderr)
  else:
    try:
      log_file.open_from_flags()
      return parsed
    except ValueError as e:
      print(f'FATAL Flags parsing error: {e}', file=sys.stderr)
  sys.exit(console.REFUSED_EXIT)


def without_config_file(argv, error: str) -> str | None:
  """The line for a --config.FIELD given with no --config=FILE (absl: "Unknown command line flag
  'config.mode'. Did you mean: config ?"): the file to pass, with a fine-tuning run's task as
  its --workdir's config.json names it; None for any other error."""
  unknown = re.match(r"Unknown command line flag '(?:no)?config\.([\w.]+)'", error)
  # --config left out altogether (absl: "flag --config=None: Flag --config must have a value
  # other than None."), as in a resume given only --workdir.
  missing = re.match(r'flag --config=None: Flag --config must have a value other than None', error)
  if (unknown is None and missing is None) or command_flags.flag_values(argv[1:], 'config'):
    return None
  workdir = (command_flags.flag_values(argv[1:], 'workdir') or [''])[-1]
  try:
    recorded = json.loads(files.read_text(files.join(workdir, 'config.json'))) if workdir else {}
    task, size = recorded.get('task'), (recorded.get('model') or {}).get('size')
  except (OSError, ValueError, AttributeError):
    task = size = None
  if isinstance(task, str) and task:
    example = f'--config=configs/finetune.py:task={task} (the task {workdir}/config.json names)'
  elif isinstance(size, str) and size and 'task' not in recorded:  # A pre-training run's.
    example = f'--config=configs/pretrain.py:size={size} (the size {workdir}/config.json names)'
  else:
    example = ('--config=configs/finetune.py:task=TASK (a fine-tuning run: the task its '
               'config.json names) or --config=configs/pretrain.py:size=SIZE')
  if unknown is None:
    return (f'--config=FILE is required, a resume\'s too (--workdir holds the run\'s state, not '
            f'its config file): pass the one the run started with, e.g. {example}, and its '
            '--config.* fields (config.json records the values).')
  return (f'--config.{unknown[1]} sets a field of the config a --config=FILE loads, and none is '
          f'given: pass one before it, e.g. {example}.')


def check_args(main_args, first=None) -> object:
  """Loads the config of bertjax.main's `main_args` (--config=FILE[:ARG] and --config.X=V, as
  its --config flag does) and checks it; returns the ConfigDict. Raises ValueError with one line
  for a missing --config, a file that does not load, an unknown field, a value of the wrong
  type or out of range. `first(config)`, a launcher's check of the values as written (a path
  keeping a flagfile's quotes), runs before config_check, whose line would name a symptom."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags as ml_config_flags  # pylint: disable=g-import-not-at-top
  spec = config_spec(main_args)
  if not spec:
    raise ValueError('the job has no --config=configs/<file>.py[:args]: pass bertjax.main\'s '
                     'flags after --, e.g. -- --config=configs/pretrain.py:size=base')

  def parse(args):
    values = flags.FlagValues()
    argv = ['bertjax.main', *args]
    holder = ml_config_flags.DEFINE_config_file('config', None, '', flag_values=values,
                                                lock_config=True, sys_argv=argv)
    values(argv)
    return holder.value, ml_config_flags.get_override_values(values['config'])

  base = config_files.load_config_file(spec)
  config_files.check_job_config(base, spec)
  job_flags = config_flags(main_args, base)
  if (unknown := unknown_field(base, job_flags)) is not None:
    raise ValueError(unknown)
  try:
    config, overrides = parse(job_flags)
  except Exception as e:  # pylint: disable=broad-except  # A value of the wrong type.
    raise ValueError("the job's --config flags do not parse: "
                     f'{config_files.one_line(e)}') from None
  if first:
    first(config)
  config_check.check(config)
  job_config.check_fields(config)  # A copied config file's field of its own.
  if (ignored := ignored_override(config, overrides)) is not None:
    raise ValueError(ignored)
  return config


def check_step(job: str, step):
  """Refuses a --step (None: not given) with a job that reads no checkpoint: only fine-tuning's
  eval and predict do; and one the readers refuse (an empty `--step=`, an unset variable, or
  -1, Best, 12.0) by their own rule. bertjax.main and the launchers (before a slice is booked)
  ask it, before JAX starts."""
  if step not in (None, '') and job != 'finetune':
    raise ValueError(f'--step={step} picks the checkpoint a fine-tuning run evaluates or predicts '
                     f'with (--config.mode=eval or predict); job={job} reads none: drop it '
                     '(bertjax.export and extract_features take --step too).')
  step_names.parse_step(step, text=True)


def refuse_unnamed_folder(value, flag: str, outputs: str, otherwise: str):
  """Refuses an empty or `-` folder flag where leaving it out writes nothing (embed's --workdir,
  checked by bertjax.main before JAX and by the job): `outputs` are files, `otherwise` what
  leaving the flag out does."""
  if value is not None and str(value).strip() in ('', '-'):
    raise ValueError(f'{flag}={value} names no folder ({outputs} are files, not written to '
                     f'standard output): pass a folder, or leave {flag} out to {otherwise}.')
