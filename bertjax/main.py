"""Entry point: `python -m bertjax.main --config=configs/<file>.py[:args] --workdir=DIR`.

Thin on purpose: flags and platform set-up here, the work in importable library functions.

Multi-host: run the same command on every host. On TPU pods (and SLURM/Open MPI clusters)
jax.distributed finds its peers by itself; elsewhere pass --coordinator_address=HOST:PORT
--num_processes=N --process_id=I (or the env variables JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES, JAX_PROCESS_ID). CPU-only processes use the gloo collectives.
"""

import collections
import errno
import os
import signal
import sys
import threading

if __name__ == '__main__':

  def _interrupted_early(signum, frame):
    """Ctrl-C while the modules and the config load: nothing has been written yet."""
    del signum, frame
    os.write(2, b'interrupted: nothing was written; rerun the same command to start\n')
    os._exit(130)  # pylint: disable=protected-access

  if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # nohup / `cmd &` ignore it.
    signal.signal(signal.SIGINT, _interrupted_early)

# accelerators: TF (used for tf.data only) must never grab the accelerators JAX is about to use.
from bertjax import accelerators  # noqa: E402
from bertjax import command_flags  # noqa: E402
from bertjax import config_args  # noqa: E402
from bertjax import config_check  # noqa: E402
from bertjax import config_files  # noqa: E402
from bertjax import console  # noqa: E402
from bertjax import job_config  # noqa: E402
from bertjax import malloc_tuning  # noqa: E402


def _accelerator_present() -> bool:
  """A GPU or TPU device node on this host (seen before any library starts)."""
  if os.environ.get('JAX_PLATFORMS', '').strip() == 'cpu':
    return False
  return accelerators.device_node_present()


_MALLOC_TUNED = False  # Set in __main__, below.

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

if __name__ == '__main__' and (_MISSING := command_flags.unreadable_flagfile(sys.argv[1:])):
  print(f'FATAL Flags parsing error: {_MISSING}', file=sys.stderr)
  sys.exit(console.REFUSED_EXIT)
_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'A config file and its argument string: configs/pretrain.py:size=base '
    '(pre-training), configs/finetune.py:task=mrpc,init_from=DIR (fine-tuning: GLUE, SQuAD, '
    'CoNLL or your own files), configs/embed.py:init_from=DIR (sentence embeddings). Each '
    "file's docstring lists its arguments (an unknown one names the closest); "
    '--config.FIELD=VALUE then sets one field, e.g. --config.optimizer.learning_rate=1e-4 (an '
    'unknown field lists the valid ones).', lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Where outputs (and checkpoints) are written.')
_STEP = flags.DEFINE_string(
    'step', None, 'job=finetune, --config.mode=eval or predict: the checkpoint to read: best (as '
    'the run ranked its evals; needs checkpoint.keep_best), latest (the default) or a step number.')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', os.environ.get('JAX_COORDINATOR_ADDRESS', ''),
    'HOST:PORT of process 0 for jax.distributed; empty = single process or auto-detected.')


def _env_int(name: str) -> int | None:
  """A whole-number environment variable's value (None: unset); a malformed one ends the
  program with one line naming it (int() raised a traceback at import)."""
  value = os.environ.get(name, '').strip()
  if not value:
    return None
  try:
    return int(value)
  except ValueError:
    sys.exit(f'error: the environment variable {name}={value!r} is not a whole number: set it '
             'to one, or unset it.')


_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', _env_int('JAX_NUM_PROCESSES') or None,
    'Processes in the job (with --coordinator_address).')
_PROCESS_ID = flags.DEFINE_integer(
    'process_id', _env_int('JAX_PROCESS_ID'),
    'This process (with --coordinator_address).')
_COMPILATION_CACHE = flags.DEFINE_string(
    'compilation_cache_dir', accelerators.default_compilation_cache_dir(),
    "JAX's persistent compilation cache: a rerun or resume loads its compiled steps from here "
    "instead of compiling them again ('' = off).")
_DISTRIBUTED_TIMEOUT = flags.DEFINE_integer(
    'distributed_timeout_s', 300, 'Seconds to wait for every process of a multi-host job to '
    'connect (with --coordinator_address or a detected cluster) before giving up.',
    lower_bound=1)
flags.mark_flags_as_required(['config'])

JOBS = ('pretrain', 'finetune', 'embed')


def _cluster_detected() -> bool:
  """True on a multi-host TPU slice (GKE's variables, or a TPU VM's metadata server), several
  slices (GKE multi-slice), or a SLURM / Open MPI job: jax configures itself from them."""
  hosts = os.environ.get('TPU_WORKER_HOSTNAMES', '')
  return (len([h for h in hosts.split(',') if h]) > 1
          or int(os.environ.get('MEGASCALE_NUM_SLICES', 1)) > 1
          or int(os.environ.get('SLURM_NTASKS', 1)) > 1
          or int(os.environ.get('OMPI_COMM_WORLD_SIZE', 1)) > 1
          or (not hosts and accelerators.tpu_vm_workers() > 1))


def initialize_distributed():
  """Starts jax.distributed when this is one process of several (before any JAX work)."""
  import jax  # pylint: disable=g-import-not-at-top
  if _COORDINATOR.value:
    if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
      raise app.UsageError('--coordinator_address needs --num_processes and --process_id.')
    # Only the CPU backend reads this: CPU-only processes then reduce over TCP.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    address, count, index = _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value
    kwargs = dict(coordinator_address=address, num_processes=count, process_id=index)
  elif _cluster_detected():
    address, count, index, kwargs = 'the detected cluster\'s coordinator', None, None, {}
  else:
    return
  timeout = _DISTRIBUTED_TIMEOUT.value
  who = f'process {index} of {count}' if count else 'this process'
  logging.info('%s: waiting up to %d s for %s processes at %s (--distributed_timeout_s)', who,
               timeout, count or 'all', address)
  sys.stderr.flush()
  problem = (f'{who} could not start the multi-host job at {address} within {timeout} s: check '
             f'that all {count or "the"} processes were started with the same '
             '--coordinator_address and --num_processes and distinct --process_id values, that '
             'none stopped before connecting (a refused command or file exits 78 first: its log '
             'says why), that process 0 runs on that host and its port is reachable from here '
             '(firewall), or raise --distributed_timeout_s')
  # jax's own timeout ends the process in C++ (a native stack dump, no Python exception): this
  # watchdog ends it first, with one line; jax's comes later as a backstop.
  started = threading.Event()

  def watchdog():
    if not started.wait(timeout):
      sys.stderr.flush()
      os.write(2, f'error: {problem}\n'.encode())
      os._exit(1)  # pylint: disable=protected-access

  threading.Thread(target=watchdog, name='distributed-watchdog', daemon=True).start()
  try:
    jax.distributed.initialize(**kwargs, initialization_timeout=timeout + 60)
  except Exception as e:  # pylint: disable=broad-except  # XlaRuntimeError, RuntimeError, ...
    raise DistributedStartError(f'{problem} ({type(e).__name__}: {_first_line(e)})') from e
  finally:
    started.set()


class DistributedStartError(RuntimeError):
  """jax.distributed did not come up: a peer never started, or the coordinator is unreachable."""


def _first_line(error: BaseException) -> str:
  text = str(error).strip()
  return text.splitlines()[0] if text else ''


def _job_module(name: str):
  """The job's module, imported with the C++ start-up lines of what it imports held back
  (a CUDA build of TensorFlow on a CPU host: 'failed call to cuInit'); shown if it fails."""
  import importlib  # pylint: disable=g-import-not-at-top
  with console.stderr_held():
    return importlib.import_module(name)


def _check_command():
  """Every config value, before JAX starts, any data is read or anything is compiled; and a
  stale image's configs/ (config_files.configs_check)."""
  try:
    config_files.configs_check(config_flags.get_config_filename(flags.FLAGS['config']))
    config_files.check_job_config(_CONFIG.value,
                                 config_flags.get_config_filename(flags.FLAGS['config']))
    config_check.check(_CONFIG.value)
    job_config.check_fields(_CONFIG.value)  # A copied config file's field of its own.
    _check_processes()
    _check_job_flags(_CONFIG.value.get('job'))
    cache = _COMPILATION_CACHE.value
    if '://' not in cache and os.path.isfile(os.path.expanduser(cache)):  # local: before JAX
      raise ValueError(f'--compilation_cache_dir={cache} is a file: pass a folder (made if '
                       "missing), or '' for no cache.")
    if (ignored := config_args.ignored_override(
        _CONFIG.value, config_flags.get_override_values(flags.FLAGS['config']))) is not None:
      raise ValueError(ignored)
  except ValueError as e:
    raise console.Refused(str(e)) from None


def _check_job_flags(job):
  """The job is known, and it gets the flags it reads: refused here (exit 78, so a scheduler
  does not restart it), not once JAX has started."""
  if job not in JOBS:
    raise ValueError(f'config.job={job!r} is unknown; valid: {", ".join(JOBS)}.')
  config_args.check_step(job, _STEP.value)
  if job in ('pretrain', 'finetune') and not _WORKDIR.value:
    outputs = 'checkpoints and logs' if job == 'pretrain' else 'checkpoints, logs and predictions'
    raise ValueError(f'--workdir is required: {outputs} go there.')
  if job == 'embed':  # Its own words (bertjax.embed imports JAX): no --workdir writes nothing.
    config_args.refuse_unnamed_folder(_WORKDIR.value, '--workdir',
                                      'embeddings.npy and similarity.txt',
                                      'print the similarities only')
  if job in ('pretrain', 'finetune'):
    from bertjax import paths  # pylint: disable=g-import-not-at-top  # As _run's, when needed.
    paths.refuse_dash(_WORKDIR.value, '--workdir', 'folder', 'a run\'s checkpoints and logs are '
                      'files, not a stream', 'runs/base')


def _check_processes():
  """--num_processes and --process_id: read with --coordinator_address only, and consistent."""
  count, index, address = _NUM_PROCESSES.value, _PROCESS_ID.value, _COORDINATOR.value
  if not address:
    if (count is not None or index is not None) and not _cluster_detected():
      raise ValueError('--num_processes and --process_id are read with '
                       '--coordinator_address=HOST:PORT (process 0\'s) only: pass it too, or '
                       'leave them out for a single process.')
    return
  host, _, port = address.rpartition(':')
  if not host or not port.isdigit():
    raise ValueError(f'--coordinator_address={address} is not HOST:PORT: pass process 0\'s host '
                     'and a free port, e.g. 10.0.0.2:1234.')
  if count is not None and count < 1:
    raise ValueError(f'--num_processes={count}: pass the number of processes in the job (1 or '
                     'more).')
  if count is not None and index is not None and not 0 <= index < count:
    raise ValueError(f'--process_id={index} is not one of the {count} processes: pass 0 to '
                     f'{count - 1}, distinct per process.')


def _run(argv):
  try:  # One line and exit 78, as the config's refusals (absl printed its whole help, exit 1).
    command_flags.refuse_arguments(argv, '--config=..., --workdir=...')
  except app.UsageError as e:
    raise console.Refused(str(e)) from None
  _check_command()
  console.install()
  accelerators.hide_from_tensorflow()
  accelerators.use_compilation_cache(_COMPILATION_CACHE.value)
  initialize_distributed()
  import jax  # pylint: disable=g-import-not-at-top

  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  hosts.watch_others()  # Another host's error stops this one too, at once.
  if jax.process_count() == 1:  # Several: jax.distributed's own SIGTERM notice, which the
    # loop's preemption check reads (a Python handler here would replace it).
    signal.signal(signal.SIGTERM, _stopped_outside_the_loop)
  if jax.default_backend() == 'cpu':
    logging.info('CPU backend: freed memory kept mapped for reuse (%s)',
                 'on' if _MALLOC_TUNED else 'off')
  # The jobs make the workdir and the config's paths absolute (notebooks call them directly).
  config, workdir = _CONFIG.value, _WORKDIR.value
  kinds = collections.Counter(d.device_kind for d in jax.devices())  # Not 256 names: their kinds.
  logging.info('JAX %s, process %d/%d, %d devices (%d local): %s', jax.__version__,
               jax.process_index(), jax.process_count(), jax.device_count(),
               jax.local_device_count(), ', '.join(f'{n} x {kind}' for kind, n in kinds.items()))
  logging.info('compiled programs cached in %s', _COMPILATION_CACHE.value or
               'nothing (--compilation_cache_dir is empty)')
  console.leave_the_progress_to_process_0(jax.process_index())
  if jax.process_count() > 1:  # Every host the same config and workdir, or none starts.
    from bertjax import paths  # pylint: disable=g-import-not-at-top
    from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
    hosts.check_same_command(paths.absolute_config(paths.own_copy(config)),
                             paths.absolute_workdir(workdir) if workdir else '',
                             step=_parsed_step(_STEP.value))
  step = None  # _check_command refused a --step of another job, and a missing --workdir.
  if _STEP.value is not None:
    from bertjax.training import checkpoint_reader  # pylint: disable=g-import-not-at-top
    step = checkpoint_reader.parse_step(_STEP.value, text=True)
  if config.job == 'pretrain':
    _job_module('bertjax.pretrain').train_and_evaluate(config, workdir)
  elif config.job == 'finetune':
    _job_module('bertjax.finetune.job').run(config, workdir, step=step)
  elif config.job == 'embed':
    _job_module('bertjax.embed').run(config, workdir)


def _parsed_step(value):
  """--step as the readers take it (latest, 08 and none the same), or the text a reader will
  refuse."""
  from bertjax.training import checkpoint_reader  # pylint: disable=g-import-not-at-top
  try:
    return checkpoint_reader.parse_step(value, text=True)
  except ValueError:
    return value


def main(argv):
  """Runs the job; an error the user acts on (bad input, a full disk, a busy workdir, NaN) ends
  with its message as the last line instead of a traceback (kept at --verbosity=1)."""
  from bertjax.training import checkpoint  # pylint: disable=g-import-not-at-top
  from bertjax.training import checkpoint_space  # pylint: disable=g-import-not-at-top
  from bertjax.training import hosts  # pylint: disable=g-import-not-at-top
  from bertjax.training import workdir_lock  # pylint: disable=g-import-not-at-top
  try:
    with console.at_interrupt(lambda: hosts.tell_stopped('interrupted', status=130,
                                                         interrupted=True)):
      _run(argv)
    hosts.exit_status(console.PREEMPTED_EXIT if console.preempted() else 0)
    if console.preempted():  # Saved and stopped: a scheduler must run it again, not end it.
      sys.exit(console.PREEMPTED_EXIT)
  except Exception as e:  # pylint: disable=broad-except  # Only those below; others re-raised.
    # The job whose outputs the line speaks of (none: flags unparsed, as main called from a
    # test, or a config of another program, refused).
    config = _CONFIG.value if flags.FLAGS.is_parsed() else None
    message = _storage_error(e, config)
    # Its error, for the other hosts of a multi-host job (which would wait for this one).
    hosts.tell_stopped((message or hosts.told(e)).strip().partition('\n')[0],
                       status=console.REFUSED_EXIT if isinstance(e, console.Refused) else 1)
    if message is None and not isinstance(e, (
        ValueError, FileNotFoundError, FileExistsError, PermissionError, ConnectionError,
        FloatingPointError, NotADirectoryError, IsADirectoryError,
        checkpoint_space.DiskFullError, checkpoint.RestoreError, workdir_lock.WorkdirInUseError,
        DistributedStartError)):
      raise
    if logging.get_verbosity() >= logging.DEBUG:
      raise
    sys.stderr.flush()
    console.fail(f'error: {message or e}\n(--verbosity=1 shows where it was raised)',
                 console.REFUSED_EXIT if isinstance(e, console.Refused) else 1)


# What to do when the disk refuses a write (the run's config, its lock, its logs, the workdir
# itself: checkpoint saving says its own DiskFullError).
_STORAGE_FIXES = {
    errno.ENOSPC: 'free space',
    errno.EDQUOT: 'free space (or raise the quota)',
    errno.EROFS: 'remount it writable',
    errno.EACCES: 'check its owner and mode (ls -l)',
}


def _writes(config) -> str | None:
  """What the job of `config` writes, for its last line: 'embed' (its two files), 'scores' (a
  fine-tuned run's eval or predict: a predictions/ folder), 'checkpoints' (a training run); None
  where no config was read (flags unparsed, a config of another program)."""
  if not hasattr(config, 'get'):
    return None
  if config.get('job') == 'embed':
    return 'embed'
  if config.get('job') == 'finetune' and config.get('mode', 'train_eval') != 'train_eval':
    return 'scores'
  return 'checkpoints'


def _storage_error(error: BaseException, config) -> str | None:
  """The one line for an OSError of a full, over-quota, read-only or forbidden disk: the path,
  the reason and what to do, and what of the job's outputs (`config`'s: _writes) is kept; None
  for any other error (other OSErrors keep their traceback)."""
  if not isinstance(error, OSError) or error.errno not in _STORAGE_FIXES:
    return None
  named = error.filename is not None and not isinstance(error.filename, int)  # Not an fd.
  # A write's error names no path (a flush, orbax's files): the folder the job writes in.
  workdir = _WORKDIR.value if flags.FLAGS.is_parsed() else None
  where = (f'{os.fsdecode(error.filename)}: ' if named else
           f'writing in {workdir}: ' if workdir else '')
  # Or elsewhere: for a scoring job, another --workdir holds no checkpoint to score.
  elsewhere = ('copy the run to a disk you can write (cp -r RUN NEW) and score it there '
               '(--workdir=NEW)' if _writes(config) == 'scores' else 'pass another --workdir')
  kept = {'embed': "an earlier embed's embeddings.npy and similarity.txt there are kept as they "
                   'were',
          'scores': 'the run is as it was, with no predictions/ folder half-written '
                    '(scored_folders)'}.get(
                        _writes(config), 'the checkpoints already written are kept and the run '
                        'resumes from the last one')
  return f'{where}{os.strerror(error.errno)}: {_STORAGE_FIXES[error.errno]} or {elsewhere}; {kept}'


def _latest_checkpoint(workdir: str) -> int | str | None:
  """The highest finished step in <workdir>/checkpoints (local or a URL; None: none yet), or
  why it could not be listed (the storage failing: what ended the run, often)."""
  from bertjax import files  # pylint: disable=g-import-not-at-top
  from bertjax.training import checkpoint_reader  # pylint: disable=g-import-not-at-top
  try:  # The readers' complete steps (a bucket's still being saved left out).
    steps = checkpoint_reader.steps(files.join(workdir, 'checkpoints'))
  except Exception as e:  # pylint: disable=broad-except  # OSError, gcsfs' and HTTP errors.
    return f'{type(e).__name__}: {_first_line(e)}'
  return max(steps, default=None)


def interrupted_message(config, workdir: str) -> str:
  """The one line a Ctrl-C ends with: where the run can be resumed from."""
  writes = _writes(config)
  if writes == 'embed' and workdir and ('://' in workdir or os.path.exists(  # local: see files
      os.path.join(workdir, 'embeddings.npy'))):  # local: a bucket's is not looked up at exit
    return (f'interrupted: {workdir} holds whole files only (embeddings.npy, and similarity.txt '
            'of the same sentences or none); rerun the same command to write them')
  if writes == 'embed' or not workdir:
    return 'interrupted: nothing was written; rerun the same command to start again'
  if writes == 'scores':
    if '://' in workdir:  # Uploaded file by file (scored_folders.writing).
      return (f'interrupted: {workdir} holds no half-written results, but for a predictions/ '
              'folder cut short while uploaded, whose scored_inputs.json says "complete": '
              'false; rerun the same command to write it')
    return (f'interrupted: {workdir} holds no half-written results (a predictions/ folder is put '
            'in place only when complete); rerun the same command to write them')
  step = _latest_checkpoint(workdir)
  where = f'{workdir}/checkpoints'
  if isinstance(step, str):
    return (f'interrupted: {where} could not be listed ({step}); once the storage answers, '
            'rerun the same command: it resumes from the last complete checkpoint there')
  if step is None:
    return (f'interrupted before the first checkpoint in {where}: rerun the same command to '
            'start again')
  at = f' (step {step})' if step is not None else ''
  return (f'interrupted: the last checkpoint in {where}{at} is intact; rerun the same command '
          'to resume from it')


def _stopped_outside_the_loop(signum, frame):
  """SIGTERM (a preemption, a scheduler's stop) while the job reads its data, compiles or
  writes its results: nothing half-written stays; the exit status 75 (console.PREEMPTED_EXIT)
  asks a scheduler to run it again, as after a save in the loop, which handles it there."""
  del signum, frame
  console.interrupted(lambda: _interrupt_message().replace('interrupted', 'stopped (SIGTERM)', 1),
                      console.PREEMPTED_EXIT)


def _interrupt_message() -> str:
  try:
    config, workdir = flags.FLAGS.config, flags.FLAGS.workdir
  except Exception:  # pylint: disable=broad-except  # The flags are not parsed yet.
    return 'interrupted before the run started: nothing was written; rerun the command'
  if workdir and '://' not in workdir:
    workdir = os.path.abspath(workdir)
  return interrupted_message(config, workdir)


if __name__ == '__main__':
  # On a CPU-only host glibc keeps freed memory mapped (malloc_tuning.keep_memory_mapped); set
  # before any thread or large allocation exists, i.e. before TensorFlow and XLA start.
  _MALLOC_TUNED = not _accelerator_present() and malloc_tuning.keep_memory_mapped()
  console.exit_on_interrupt(_interrupt_message)
  try:
    app.run(main, flags_parser=config_args.parse_flags)
  except KeyboardInterrupt:
    console.interrupted(_interrupt_message)
