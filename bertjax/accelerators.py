"""Process set-up before JAX compiles anything: TensorFlow kept on the CPU beside JAX on the
accelerators (jax #22070: TF otherwise takes the GPU's memory, or the TPU itself; TF only reads
files here, through tf.data), JAX's persistent compilation cache, and a TPU VM's peers (its
metadata server) for jax.distributed."""

import hashlib
import os
import platform

from bertjax import console
from bertjax import paths

_TPU_NODES = ('/dev/accel0', '/dev/vfio/0')


def device_node_present() -> bool:
  """A GPU or TPU device node on this host (seen before any library starts)."""
  return any(os.path.exists(p) for p in ('/dev/nvidia0', *_TPU_NODES))  # local: device nodes


def tpu_vm_workers(timeout_s: float = 5.0) -> int:
  """The hosts of the Cloud TPU slice this TPU VM belongs to, from its metadata server's
  worker-network-endpoints (what `gcloud ... tpu-vm ssh --worker=all` starts a command on); 1
  off a TPU VM or when the server does not say. A TPU VM sets no variable that names its peers
  (GKE does: TPU_WORKER_HOSTNAMES), yet every host of a pod slice must start jax.distributed:
  checkpoints and the hosts' barriers go through it."""
  if (not any(os.path.exists(p) for p in _TPU_NODES)  # local: device nodes
      or 'TPU_SKIP_MDS_QUERY' in os.environ):
    return 1
  import urllib.request  # pylint: disable=g-import-not-at-top
  server = os.environ.get('GCE_METADATA_IP', 'metadata.google.internal')
  request = urllib.request.Request(
      f'http://{server}/computeMetadata/v1/instance/attributes/worker-network-endpoints',
      headers={'Metadata-Flavor': 'Google'})
  try:
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
      endpoints = response.read().decode()
  except (OSError, ValueError):  # Not on GCE, or not a slice's VM: one host.
    return 1
  return max(1, len([e for e in endpoints.strip().split(',') if e.strip()]))


def hide_from_tensorflow():
  """Makes TensorFlow see no GPU or TPU; call before JAX starts (main.py, the notebooks). On a
  host without one there is nothing to hide, and TensorFlow is not imported (seconds): jobs
  that never read through tf.data (fine-tuning, predicting) then run without it."""
  if not device_node_present():
    return
  with console.stderr_held():  # A CPU-only TF probing for CUDA: shown only on failure.
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
    except ImportError:
      return
    tf.config.set_visible_devices([], 'GPU')
    tf.config.set_visible_devices([], 'TPU')


def default_compilation_cache_dir() -> str:
  """JAX_COMPILATION_CACHE_DIR when set, else <paths.cache_root()>/jax/<machine>: one folder per
  CPU model and feature set, so a home shared by several kinds of host (a cluster's login and
  compute nodes) never hands one an executable compiled for another's instruction set."""
  if os.environ.get('JAX_COMPILATION_CACHE_DIR'):
    return os.environ['JAX_COMPILATION_CACHE_DIR']
  try:
    with open('/proc/cpuinfo', encoding='utf-8', errors='replace') as f:  # local: /proc
      cpu = ''.join(sorted({line for line in f if line.startswith(('model name', 'flags'))}))
  except OSError:
    cpu = platform.processor()
  machine = f'{platform.machine()}-{hashlib.sha256(cpu.encode()).hexdigest()[:12]}'
  return os.path.join(paths.cache_root(), 'jax', machine)


def use_compilation_cache(directory: str):
  """Keeps compiled programs in `directory` (local or gs://), so a rerun, a resume or the next
  fine-tuning of the same shapes loads its train step instead of compiling it again (JAX keys
  each entry by the program, jaxlib, XLA flags and devices); '' turns the cache off. A later
  call (a notebook's set-up cell run again with another folder) takes effect from the next
  compilation; programs compiled before stay in memory."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental.compilation_cache import compilation_cache  # pylint: disable=g-import-not-at-top
  if directory and '://' not in directory:
    directory = os.path.abspath(os.path.expanduser(directory))
  on, folder = jax.config.jax_enable_compilation_cache, jax.config.jax_compilation_cache_dir
  if (bool(directory), directory or folder) == (on, folder):
    return
  if folder or not on:
    # JAX opens its cache at the first compilation and keeps it (and whether it is on) for the
    # process: without a reset a later folder was never used, and '' left the cache on.
    compilation_cache.reset_cache()
  jax.config.update('jax_enable_compilation_cache', bool(directory))
  if directory:
    jax.config.update('jax_compilation_cache_dir', directory)
