"""bertjax: BERT pre-training and fine-tuning in JAX/Flax, faithful to the paper, TPU-first."""

import importlib.util
import sys

__version__ = '0.1.0'


def _load_triton_before_tensorflow():
  """PyPI's Linux torch ships triton, whose native library crashes the process (SIGSEGV, no
  message) when it is loaded after TensorFlow's (seen: TF 2.21, triton 3.7, Python 3.12):
  torch loads it lazily, e.g. when transformers builds a model, so a notebook that uses bertjax
  (TensorFlow) and then transformers would die. Loaded first, both work; it costs ~0.2 s, and
  only where triton is installed."""
  if 'tensorflow' in sys.modules or importlib.util.find_spec('triton') is None:
    return
  try:
    importlib.import_module('triton._C.libtriton')
  except Exception:  # pylint: disable=broad-except  # A broken triton is torch's concern.
    pass


_load_triton_before_tensorflow()
