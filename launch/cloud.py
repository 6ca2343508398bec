"""What Cloud TPU offers (zones, VM images, slice shapes), and what the launchers (tpu_pod.py,
gke_jobset.py) share: the command runner, their usage checks, the job's --workdir and where its
config file lies, and what is refused in the job before a slice is booked (its flags, its
config's paths)."""

import math
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

from bertjax import command_flags
from bertjax import config_args
from bertjax import config_files
from bertjax import console
from bertjax import files
from bertjax import paths

# This checkout's configs/: what launch/Dockerfile copies into the image and tpu_pod.py copies to
# every worker (each config file imports configs.common).
CONFIGS = pathlib.Path(__file__).resolve().parents[1] / 'configs'

# Zones that host each TPU generation (cloud.google.com/tpu/docs/regions-zones, 2025).
ZONES = {
    'v4': ('us-central2-b',),
    'v5litepod': ('us-central1-a', 'us-south1-a', 'us-west1-c', 'us-west4-a', 'europe-west4-b',
                  'asia-southeast1-b'),
    'v5p': ('us-central1-a', 'us-east5-a', 'europe-west4-b'),
    'v6e': ('us-central1-b', 'us-east1-d', 'us-east5-a', 'us-east5-b', 'europe-west4-a',
            'asia-northeast1-b'),
}
# The TPU VM image of each generation (the base images; jax[tpu] is installed on top).
RUNTIMES = {'v4': 'tpu-ubuntu2204-base', 'v5litepod': 'v2-alpha-tpuv5-lite',
            'v5p': 'v2-alpha-tpuv5', 'v6e': 'v2-alpha-tpuv6e'}
# Accelerator type -> (hosts, libtpu topology for launch/aot_compile.py). v5e/v6e count chips
# (8 on one host up to 8, else 4 per host); v4/v5p count TensorCores (2 per chip, 4 chips/host).
SLICES = {
    **{f'v5litepod-{n}': (1 if n <= 8 else n // 4, f'v5e:{t}') for n, t in
       ((1, '1x1'), (4, '2x2'), (8, '2x4'), (16, '4x4'), (32, '4x8'), (64, '8x8'),
        (128, '8x16'), (256, '16x16'))},
    **{f'v6e-{n}': (1 if n <= 8 else n // 4, f'v6e:{t}') for n, t in
       ((1, '1x1'), (4, '2x2'), (8, '2x4'), (16, '4x4'), (32, '4x8'), (64, '8x8'),
        (128, '8x16'), (256, '16x16'))},
    **{f'v5p-{n}': (n // 8, f'v5p:{t}') for n, t in
       ((8, '2x2x1'), (16, '2x2x2'), (32, '2x2x4'), (64, '2x4x4'), (128, '4x4x4'),
        (256, '4x4x8'), (512, '4x8x8'))},
    **{f'v4-{n}': (n // 8, f'v4:{t}') for n, t in
       ((8, '2x2x1'), (16, '2x2x2'), (32, '2x2x4'), (64, '2x4x4'), (128, '4x4x4'),
        (256, '4x4x8'), (512, '4x8x8'))},
}
# What a launcher exits with when its restarts are spent on preemptions: bertjax.main's own.
PREEMPTED_EXIT = console.PREEMPTED_EXIT
# What a launcher exits with when it refuses its command line (a flag, the job's config, the
# workdir) before anything runs, as bertjax.main does: a scheduler must not retry it. A gcloud or
# kubectl call that fails exits 2; a run, its own status.
REFUSED_EXIT = console.REFUSED_EXIT


class Runner:
  """Runs (or, dry, prints) commands; every command is printed before it runs."""

  def __init__(self, dry_run: bool, dry_output: str = ''):
    self.dry_run = dry_run
    self.dry_output = dry_output  # What a captured command "prints" in a dry run.

  def __call__(self, cmd, *, check: bool = True, capture: bool = False):
    print(shlex.join(cmd), flush=True)
    if self.dry_run:
      return subprocess.CompletedProcess(cmd, 0, f'{self.dry_output}\n' if capture else None)
    # Captured: stderr too (gcloud's NOT_FOUND on each poll of a deleted slice), said on failure.
    pipe = subprocess.PIPE if capture else None
    result = subprocess.run(cmd, check=False, text=True, stdout=pipe, stderr=pipe)
    if check and result.returncode:
      raise RuntimeError(f'{cmd[0]} exited with {result.returncode}'
                         f'{f" ({said})" if (said := last_said(result)) else ""}: '
                         f'{shlex.join(cmd)}')
    return result


def last_said(result: subprocess.CompletedProcess) -> str:
  """A captured command's last line on stderr (gcloud's reason), '' where it said nothing."""
  lines = [line.strip() for line in (result.stderr or '').splitlines() if line.strip()]
  return lines[-1] if lines else ''


def devices(accelerator_type: str, num_slices: int = 1) -> int:
  """The JAX devices of `num_slices` slices of a type: its topology's chips (one device each,
  v4/v5p's two TensorCores included)."""
  _, topology = SLICES[accelerator_type]
  return math.prod(int(n) for n in topology.split(':')[1].split('x')) * num_slices


def check_for_slice(config, accelerator_type: str, num_slices: int = 1):
  """Refuses, before a slice is booked, a config that fails on a TPU slice of that size at its
  start: a GPU kernel (attention_impl=cudnn, as platform_defaults resolves it for 'tpu'), a mesh
  the slice's devices do not fill, or a batch its batch axes cannot split (sharding's own
  arithmetic: mesh_shape, the rules' batch axes)."""
  if config.job not in ('pretrain', 'finetune'):
    return  # The embed job has no mesh, nor a training batch.
  # pylint: disable=g-import-not-at-top  # Both import JAX.
  from bertjax.model import platform_defaults
  from bertjax.training import sharding
  training = config.job == 'pretrain' or config.get('mode', 'train_eval') == 'train_eval'
  platform_defaults.resolve(config.model, 'tpu', training=training)
  count = devices(accelerator_type, num_slices)
  where = f'{num_slices} x {accelerator_type} ({count} devices)'
  try:
    shape = dict(zip(sharding.MESH_AXES, sharding.mesh_shape(config.mesh, count), strict=True))
  except ValueError as e:
    raise ValueError(f'on {where}: {e}') from None
  if num_slices > 1 and shape['data'] % num_slices:  # As sharding.device_grid says it there.
    raise ValueError(f'on {where}: mesh {shape} over {num_slices} slices: mesh.data must be a '
                     f'multiple of {num_slices} (only data parallelism crosses slices); lower '
                     'mesh.fsdp or mesh.tensor to fit one slice: pass e.g. '
                     f'--config.mesh.data={num_slices} --config.mesh.fsdp=-1'
                     + (' --config.mesh.tensor=1' if config.mesh.tensor == -1 else ''))
  axes = sharding.batch_axes(sharding.parse_rules(config.mesh.rules))
  split = math.prod(shape[axis] for axis in axes)
  micro = config.global_batch_size // config.get('grad_accum_steps', 1)
  for name, value in (('global_batch_size', config.global_batch_size),
                      ('the micro-batch (global_batch_size / grad_accum_steps)', micro),
                      ('eval_batch_size', config.eval_batch_size)):
    if value % split:
      raise ValueError(f'{name}={value} cannot be split over the {split} batch shards of '
                       f'{where}, mesh {" x ".join(f"{a}={shape[a]}" for a in axes)}: pass a '
                       f'multiple of {split}, e.g. {max(split, value // split * split)}')


def local_paths_warning(launcher: str, config) -> str:
  """A warning naming the job's config fields that hold a path on this machine's disk (absolute,
  ~ or relative: a host reads a relative one from its own folder, a TPU VM's home or the image's
  /bertjax): the hosts of a slice (a TPU VM's, a pod's) read their own disks, where it is found
  only if mounted there too (gcsfuse, Filestore); '' when there is none."""
  local = [f'config.{name}={value}' for name, value in paths.path_fields(config)
           if any(not files.is_remote(p) for p in paths.split_list(value))]
  if not local:
    return ''
  return (f'{launcher}: warning: {", ".join(local)}: a path on this machine\'s disk, which the '
          "slice's hosts do not see (a relative one is read from a host's own folder: a TPU VM's "
          "home, the image's /bertjax): copy it to a bucket and pass gs://..., unless it is "
          'mounted at that path on every host')


# bertjax.main's own flags, besides absl's (--flagfile, --verbosity, ...): what the job's flags
# after -- may set (cloud_test.py compares them with bertjax.main's).
MAIN_FLAGS = ('config', 'workdir', 'step', 'coordinator_address', 'num_processes', 'process_id',
              'compilation_cache_dir', 'distributed_timeout_s')
_ABSL_FLAGS = ('flagfile', 'undefok', 'help', 'helpshort', 'helpfull', 'helpxml')
# bertjax.main's flags that a slice's hosts, or a JobSet's pods, find for themselves (from the TPU
# runtime's or JobSet's variables): one value given to every host is wrong on all but one.
SLICE_FLAGS = ('coordinator_address', 'num_processes', 'process_id')
# absl's: bertjax.main would print its help on every host and stop, the slice booked for nothing.
HELP_FLAGS = ('help', 'helpshort', 'helpfull', 'helpxml')


def job_flags(main_args) -> list[str]:
  """The job's flags with each --flagfile's lines in its place, read here as absl reads them
  (config_args.parse_flags): the checks see them, and the hosts, which lack the file, get them."""
  if missing := command_flags.unreadable_flagfile(main_args):
    raise ValueError(f'the job\'s {missing}')
  try:
    return flags.FLAGS.read_flags_from_files(list(main_args), force_gnu=False)
  except flags.Error as e:  # A --flagfile nested in one, unreadable; one with no name.
    raise ValueError(f'the job\'s flags (after --): {e}: check the path') from None


def _flag(word: str, config) -> tuple[str, bool]:
  """(the flag's name as absl defines it, whether it takes the next word as its value) of a
  word of the job's flags: --name, -name, --noname (a bool's false), --name=V."""
  name, eq, _ = word.lstrip('-').partition('=')
  field = name.removeprefix('no').removeprefix('config.') if name.startswith(
      ('config.', 'noconfig.')) else None
  if field is not None:  # A config field: a bool one's bare flag takes no value.
    node = config
    for key in field.split('.'):
      node = node.get(key) if hasattr(node, 'get') else None
    return 'config', not eq and not name.startswith('no') and not isinstance(node, bool)
  if name in MAIN_FLAGS:
    return name, not eq
  if name not in flags.FLAGS and name.startswith('no') and name[2:] in flags.FLAGS:
    return name[2:], False  # A bool's false (--nokeep).
  defined = flags.FLAGS[name] if name in flags.FLAGS else None
  return name, defined is not None and not eq and not defined.boolean


def check_job_flags(main_args):
  """Refuses what bertjax.main would refuse on every host once the slice is booked: a flag it
  does not define (a launcher's own flag after -- named as one), a word that is no flag, a
  --flagfile left unread (job_flags reads it: the hosts lack the file), a flag the hosts set for
  themselves (SLICE_FLAGS) and a help flag (HELP_FLAGS)."""
  spec = config_args.config_spec(main_args)
  try:
    config = config_files.load_config_file(spec) if spec else None
  except ValueError:
    return  # config_args.check_args says why it does not load.
  args = iter(main_args)
  for word in args:
    words = word == '--'  # bertjax.main's absl takes what follows as words, not flags.
    if words and (word := next(args, None)) is None:
      return
    if words and word == '--':
      raise ValueError("the job's flags (after --) hold '-- --': a '--' ends bertjax.main's "
                       "flags (what follows is read as words): drop both")
    if words and word.startswith('-') and word != '-':
      raise ValueError(f"the job's flags (after --) hold {word} after a second '--', which ends "
                       "bertjax.main's flags (what follows is read as words): drop that '--'")
    if words or not word.startswith('-') or word == '-':
      raise ValueError(f'the job\'s flags (after --) hold {word!r}, which is no flag: '
                       'bertjax.main takes flags only (a value goes with its flag, --flag=VALUE): '
                       'drop it')
    name, takes_value = _flag(word, config)
    if name in SLICE_FLAGS:
      raise ValueError(f'the job\'s {word}: each host of the slice finds its own (jax.distributed '
                       'reads the TPU runtime\'s, or JobSet\'s, variables), and one value for all '
                       'would be wrong on all but one: drop it')
    if name in HELP_FLAGS:
      raise ValueError(f'the job\'s {word} would print bertjax.main\'s help on every host and '
                       f'stop, the slice booked for nothing: drop it (python -m bertjax.main '
                       f'{word} prints it here)')
    if name == 'flagfile':
      raise ValueError(f'the job\'s {word} names a file on this machine, which the slice\'s '
                       'hosts do not hold: put its flags after -- instead')
    module = flags.FLAGS.find_module_defining_flag(name, '') if name in flags.FLAGS else ''
    if name not in MAIN_FLAGS + _ABSL_FLAGS and not module.startswith('absl.'):
      launcher = os.path.basename(module).removesuffix('.py').rpartition('.')[2]
      raise ValueError(f'--{name} is {launcher}\'s flag: put it before --' if launcher else
                       f'the job\'s {word}: bertjax.main has no flag --{name} (its flags: '
                       f'--{", --".join(MAIN_FLAGS)} and absl\'s): check its name')
    if takes_value:
      next(args, None)


def check_workdir(main_args, workdir: str):
  """Refuses a --workdir among the job's flags that differs from the launcher's --workdir:
  bertjax.main would take whichever came last, silently (launch/slurm_gpu.sbatch refuses it
  too); first, the words bertjax.main would refuse (check_job_flags)."""
  check_job_flags(main_args)
  for value in command_flags.flag_values(main_args, 'workdir'):
    if value != workdir:
      raise ValueError(f'the job\'s flags (after --) set --workdir={value}, the launcher\'s '
                       f'--workdir={workdir}: pass the run directory once, as the launcher\'s '
                       '--workdir (before --)')


def check_job(main_args, config):
  """Refuses, before a slice is booked, what bertjax.main (or the hosts' reads) would refuse from
  the job's loaded config: a --step for a job other than fine-tuning (main's own test, on
  config.job), and a path in the config (paths.path_fields: data files, vocab, init_from) that
  breaks check_bucket_path's rules, each of its comma-separated paths checked."""
  steps = command_flags.flag_values(main_args, 'step')
  try:
    config_args.check_step(config.job, steps[-1] if steps else None)
  except ValueError as e:
    raise ValueError(f'the job\'s {e}') from None
  check_paths(config)


def check_paths(config):
  """check_job's test of the config's paths (before config_check, which would name a path kept
  in a flagfile's quotes by a symptom: config_args.check_args(first=))."""
  for name, value in paths.path_fields(config):
    if not paths.split_list(value):
      continue  # config_check refuses it next, naming the field (holds only blanks or commas).
    _check_quotes(value, f'--config.{name}')  # The whole list's: a fix keeps every path.
    for path in paths.split_list(value):
      check_bucket_path(path, f'--config.{name}')


_QUOTES = '\'"'


def _check_quotes(value: str, flag: str):
  """Refuses an empty value (or one of blanks or quotes only: no path to fix), then quotes kept
  at a value's ends: a flagfile's line takes them as part of it."""
  what = "the run's folder" if flag == '--workdir' else 'the path'
  if not value.strip():  # Named as empty, not as quoted: ''[:1] is in any string.
    raise ValueError(f'{flag}={value} is empty: pass {what}, {flag}=gs://BUCKET/PATH')
  if not paths.split_list(value.strip().strip(_QUOTES)):  # "" or ",": a comma is no path.
    held = ('quotes and no path (a flagfile takes no shell quotes)'
            if value.strip()[:1] in _QUOTES else 'only commas, no path')
    raise ValueError(f'{flag}={value} holds {held}: pass {what}, {flag}=gs://BUCKET/PATH')
  if value.startswith(tuple(_QUOTES)) or value.endswith(tuple(_QUOTES)):
    raise ValueError(f'{flag}={value}: its quotes are part of the path (a flagfile takes no shell '
                     f'quotes): write {flag}={value.strip(_QUOTES)}')


def check_bucket_path(path: str, flag: str = '--workdir'):
  """Refuses a URL (`flag`'s value) that is no gs://BUCKET/...: a scheme misspelt (gs:/b, GS://b)
  or another store's (a launcher took it for a local path; the hosts read gs:// only), a gs://
  naming no bucket (gs://, gs:///runs) or one GCS would not name (uppercase, 1 or 2 characters);
  an empty value, and quotes kept at a path's ends (a flagfile's line takes them as part of the
  value): the run would fail only on the booked slice. A local path passes."""
  _check_quotes(path, flag)
  scheme = re.match(r'([A-Za-z][-+.\w]*):/+', path)
  if scheme and scheme[1] == 'file':
    return  # A local path (bertjax.files reads file:// as one).
  if scheme and not path.startswith('gs://'):
    if scheme[1].lower() not in ('gs', 'gcs'):  # Another store (s3://): no bucket to guess.
      raise ValueError(f'{flag}={path!r}: the launchers run on Google Cloud, where the slice\'s '
                       f'hosts share (and read) gs:// buckets only: pass {flag}=gs://BUCKET/path')
    raise ValueError(f'{flag}={path!r} is no gs:// URL (a bucket is gs://BUCKET/path, '
                     f'lowercase, two slashes): pass {flag}=gs://{path[scheme.end():]}')
  if not scheme:
    return
  bucket = path[len('gs://'):].partition('/')[0]
  if not re.fullmatch(r'[a-z0-9][-a-z0-9_.]*', bucket):
    raise ValueError(f'{flag}={path!r} names no bucket (lowercase letters, digits, -, _ '
                     f'and .): pass {flag}=gs://BUCKET/path')
  # GCS's rule: 3 to 63 characters (222 with dots, 63 between them), a letter or digit last.
  if not (3 <= len(bucket) <= (222 if '.' in bucket else 63) and bucket[-1].isalnum()
          and all(len(part) <= 63 for part in bucket.split('.'))):
    raise ValueError(f'{flag}={path!r}: GCS has no bucket named {bucket!r} (a bucket name is 3 '
                     f'to 63 characters, ending with a letter or digit): pass '
                     f'{flag}=gs://BUCKET/path')


def config_in_checkout(spec: str) -> str | None:
  """configs/<path>[:ARG] for the job's --config=FILE[:ARG] when FILE (from the current directory)
  lies in this checkout's configs/: where an image or a worker holds it, from the root of its
  own copy of the checkout; None when FILE lies elsewhere."""
  path, colon, arg = spec.partition(':')
  absolute = pathlib.Path(os.path.abspath(path)).resolve()
  if not absolute.is_relative_to(CONFIGS):
    return None
  return f'configs/{absolute.relative_to(CONFIGS).as_posix()}{colon}{arg}'


def check_on_worker(job_config: str, as_name: str, worker_args):
  """Loads the job's config as a worker will, before a slice is booked: in a home holding only
  configs/ and `job_config` as `as_name`, in a process that sees nothing of this machine's
  PYTHONPATH. A config from elsewhere that imports a module beside it (found here through
  PYTHONPATH or the current directory) would fail on every worker."""
  with tempfile.TemporaryDirectory() as home:
    shutil.copytree(CONFIGS, os.path.join(home, 'configs'))
    shutil.copy(job_config, os.path.join(home, as_name))
    script = 'import sys; from bertjax import config_args; config_args.check_args(sys.argv[1:])'
    loaded = subprocess.run([sys.executable, '-c', script, *worker_args], cwd=home, text=True,
                            capture_output=True, env={**os.environ, 'PYTHONPATH': ''},
                            check=False, timeout=300)
  if loaded.returncode:
    said = [line for line in loaded.stderr.strip().splitlines() if line.strip()]
    raise ValueError(f'--config={job_config} loads here but not on a worker, which holds only '
                     f'it and configs/ ({said[-1] if said else "no message"}): put what it '
                     'imports into it or into configs/')


def aot_command(accelerator_type: str, config_flags) -> list[str]:
  """launch.aot_compile for a slice's topology; `config_flags`: the job's --config flags
  (config_args.config_flags)."""
  return [sys.executable, '-m', 'launch.aot_compile',
          f'--topology={SLICES[accelerator_type][1]}', *config_flags]


def worker_job(main_args, worker_config: str) -> tuple[str, list[str]]:
  """(the config file to copy to every worker as ~/`worker_config`, '' for none; the job's
  flags as the workers run them, in their home). A --config=FILE in this checkout's configs/ is
  found there as configs/<path> (the launcher copies configs/); one from elsewhere is copied."""
  spec = config_args.config_spec(main_args)
  if spec is None:
    return '', list(main_args)  # config_args.check_args says what to pass.
  on_worker = config_in_checkout(spec)
  if on_worker is not None:
    return '', config_args.with_config_file(main_args, on_worker)
  path, colon, arg = spec.partition(':')
  return path, config_args.with_config_file(main_args, f'{worker_config}{colon}{arg}')


POLL_MAX_S = 3600  # --poll_seconds' bound: a look at least once an hour.


def check_poll_seconds(seconds: float):
  """Refuses a --poll_seconds that time.sleep cannot take, or that would leave a slice or JobSet
  unwatched for hours (nan, inf, 1e300: an error only once the slice is booked)."""
  if not 0 <= seconds <= POLL_MAX_S:  # nan fails both comparisons.
    raise app.UsageError(f'--poll_seconds={seconds}: pass a number of seconds from 0 to '
                         f'{POLL_MAX_S}')


def refuse_main_flags_before_separator(launcher: str, words):
  """Ends the launcher with one line when a word before its -- is bertjax.main's flag and none of
  the launcher's (--config=..., --config.X=V, --step): absl would say only 'Unknown command line
  flag'. Called before absl parses the command line (its flags defined)."""
  for word in words:
    if word == '--':
      return
    name = word.lstrip('-').partition('=')[0]
    name = name[2:] if name.startswith('noconfig.') else name
    if (word.startswith('-') and name not in flags.FLAGS
        and (name in MAIN_FLAGS or name.startswith('config.'))):
      refuse(launcher, f'{word} is bertjax.main\'s flag: put it after -- (the launcher\'s '
             f'flags go before --, the job\'s after: python -m launch.{launcher} --name=... -- '
             '--config=...)')


def refuse(launcher: str, message: str):
  """Ends a launcher that refuses its command line: one line, exit REFUSED_EXIT."""
  console.fail(f'{launcher}: error: {message}', REFUSED_EXIT)


def run_launcher(launcher: str, main):
  """A launcher's app.run, every refusal of its command line one line and REFUSED_EXIT: a job
  flag before -- (refuse_main_flags_before_separator), a flag absl refuses, a usage error.
  --help's 1 is absl's."""
  refuse_main_flags_before_separator(launcher, sys.argv[1:])  # Before absl's own error.
  prefix = f'{launcher}: error: '
  app.run(command_flags.usage_said(main, prefix, REFUSED_EXIT),
          flags_parser=command_flags.flags_parser(prefix, REFUSED_EXIT))


def check_usage(argv, words, required):
  """A launcher's usage errors, each one line (console.usage_said): a flag that took the next
  flag as its value, a required flag missing, a word before -- that no flag takes (absl's GNU
  parse leaves it in argv with the job's flags: it was taken for the job's, or sent on to
  bertjax.main). `words`: the command line (sys.argv[1:]); argv: absl's unparsed rest of it."""
  command_flags.check_flags(words)
  check_required(required)
  job = words[words.index('--') + 1:] if '--' in words else []
  if stray := argv[1:len(argv) - len(job)]:
    raise app.UsageError(f'unexpected arguments {stray}: the launcher takes --flags only; '
                         "bertjax.main's flags go after --")


def check_required(required):
  """A launcher's required flags, checked after console.check_flags (absl's own check runs
  first, and takes `--name --zone=Z` for a missing --zone): one usage line naming them.
  `required`: flag names, or a mapping of each to what to pass (else --NAME=VALUE)."""
  described = isinstance(required, dict)
  said = required if described else {name: f'--{name}=VALUE' for name in required}
  joined = '; ' if described else ' '
  missing = [name for name in said if flags.FLAGS[name].value is None]
  if missing:
    raise app.UsageError(f'--{", --".join(missing)} {"is" if len(missing) == 1 else "are"} '
                         f'required: pass {joined.join(said[name] for name in missing)}')
