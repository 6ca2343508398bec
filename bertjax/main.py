"""Entry point: `python -m bertjax.main --config=configs/<file>.py[:args] --workdir=DIR`.

Thin on purpose: flags and platform set-up here, the work in importable library functions.
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
flags.mark_flags_as_required(['config'])

JOBS = ('embed',)


def hide_accelerators_from_tf():
  """Keeps TensorFlow on the CPU so that it takes no GPU/TPU memory from JAX."""
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  tf.config.set_visible_devices([], 'GPU')
  tf.config.set_visible_devices([], 'TPU')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  hide_accelerators_from_tf()
  import jax  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  logging.info('JAX %s, process %d/%d, devices: %s', jax.__version__, jax.process_index(),
               jax.process_count(), jax.devices())
  if config.job not in JOBS:
    raise ValueError(f'config.job={config.job!r} is unknown; valid: {", ".join(JOBS)}.')
  if config.job == 'embed':
    from bertjax import embed  # pylint: disable=g-import-not-at-top
    embed.run(config, _WORKDIR.value)


if __name__ == '__main__':
  app.run(main)
