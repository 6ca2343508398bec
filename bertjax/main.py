"""Entry point: `python -m bertjax.main --config=configs/<file>.py[:args] --workdir=DIR`.

Thin on purpose: flags and platform set-up here, the work in importable library functions.

Multi-host: run the same command on every host. On TPU pods (and SLURM/Open MPI clusters)
jax.distributed finds its peers by itself; elsewhere pass --coordinator_address=HOST:PORT
--num_processes=N --process_id=I (or the env variables JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES, JAX_PROCESS_ID). CPU-only processes use the gloo collectives.
"""

import os

# TF (used for tf.data only) must never grab the accelerators JAX is about to use.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file (get_config(arg)).',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Where outputs (and checkpoints) are written.')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', os.environ.get('JAX_COORDINATOR_ADDRESS', ''),
    'HOST:PORT of process 0 for jax.distributed; empty = single process or auto-detected.')
_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', int(os.environ.get('JAX_NUM_PROCESSES', 0)) or None,
    'Processes in the job (with --coordinator_address).')
_PROCESS_ID = flags.DEFINE_integer(
    'process_id', int(os.environ['JAX_PROCESS_ID']) if 'JAX_PROCESS_ID' in os.environ else None,
    'This process (with --coordinator_address).')
flags.mark_flags_as_required(['config'])

JOBS = ('pretrain', 'finetune', 'embed')


def hide_accelerators_from_tf():
  """Keeps TensorFlow on the CPU so that it takes no GPU/TPU memory from JAX."""
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  tf.config.set_visible_devices([], 'GPU')
  tf.config.set_visible_devices([], 'TPU')


def _cluster_detected() -> bool:
  """True on a multi-host TPU slice or a SLURM / Open MPI job, which jax configures itself."""
  hosts = os.environ.get('TPU_WORKER_HOSTNAMES', '')
  return (len([h for h in hosts.split(',') if h]) > 1
          or int(os.environ.get('SLURM_NTASKS', 1)) > 1
          or int(os.environ.get('OMPI_COMM_WORLD_SIZE', 1)) > 1)


def initialize_distributed():
  """Starts jax.distributed when this is one process of several (before any JAX work)."""
  import jax  # pylint: disable=g-import-not-at-top
  if _COORDINATOR.value:
    if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
      raise app.UsageError('--coordinator_address needs --num_processes and --process_id.')
    # Only the CPU backend reads this: CPU-only processes then reduce over TCP.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(coordinator_address=_COORDINATOR.value,
                               num_processes=_NUM_PROCESSES.value,
                               process_id=_PROCESS_ID.value)
  elif _cluster_detected():
    jax.distributed.initialize()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  hide_accelerators_from_tf()
  initialize_distributed()
  import jax  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  logging.info('JAX %s, process %d/%d, %d devices (%d local): %s', jax.__version__,
               jax.process_index(), jax.process_count(), jax.device_count(),
               jax.local_device_count(), jax.devices())
  if config.job not in JOBS:
    raise ValueError(f'config.job={config.job!r} is unknown; valid: {", ".join(JOBS)}.')
  if config.job == 'pretrain':
    if not _WORKDIR.value:
      raise app.UsageError('--workdir is required: checkpoints and logs go there.')
    from bertjax import pretrain  # pylint: disable=g-import-not-at-top
    pretrain.train_and_evaluate(config, _WORKDIR.value)
  elif config.job == 'finetune':
    if not _WORKDIR.value:
      raise app.UsageError('--workdir is required: checkpoints, logs and predictions go there.')
    from bertjax.finetune import job  # pylint: disable=g-import-not-at-top
    job.run(config, _WORKDIR.value)
  elif config.job == 'embed':
    from bertjax import embed  # pylint: disable=g-import-not-at-top
    embed.run(config, _WORKDIR.value)


if __name__ == '__main__':
  app.run(main)
