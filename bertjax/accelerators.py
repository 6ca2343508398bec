"""TensorFlow kept on the CPU beside JAX on the accelerators (jax #22070: TF otherwise takes
the GPU's memory, or the TPU itself). TF only reads files here (tf.data)."""

import os

from bertjax import console


def device_node_present() -> bool:
  """A GPU or TPU device node on this host (seen before any library starts)."""
  return any(os.path.exists(p) for p in ('/dev/nvidia0', '/dev/accel0', '/dev/vfio/0'))


def hide_from_tensorflow():
  """Makes TensorFlow see no GPU or TPU; call before JAX starts (main.py, the notebooks). On a
  host without one there is nothing to hide, and TensorFlow is not imported (seconds): jobs
  that never read through tf.data (fine-tuning, predicting) then run without it."""
  if not device_node_present():
    return
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')  # TF's C++ start-up lines.
  with console.stderr_held():  # A CPU-only TF probing for CUDA: shown only on failure.
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
    except ImportError:
      return
    tf.config.set_visible_devices([], 'GPU')
    tf.config.set_visible_devices([], 'TPU')
