"""bertjax: BERT pre-training and fine-tuning in JAX/Flax, faithful to the paper, TPU-first."""

import importlib.abc
import importlib.util
import os
import sys
import time

__version__ = '0.1.0'
# When the package was first imported: a command's start (its summary's wall time, job_lines).
STARTED = time.perf_counter()


def _reopen_closed_standard_streams() -> frozenset[str]:
  """A command started with a standard stream closed (`>&-`, `<&-`, `2>&-`, a daemon's start)
  has it on /dev/null from here on, and the names of those it found closed. Left closed, Python
  makes sys.stdout None (an AttributeError at the first line printed), and the next file opened
  takes the free descriptor: what a C++ library writes to fd 2 would land in a checkpoint or an
  output file. Readers of a closed stream refuse it (text_files.read_stdin_lines, predict's
  stdout)."""
  closed = set()
  for fd, name, mode in ((0, 'stdin', os.O_RDONLY), (1, 'stdout', os.O_WRONLY),
                         (2, 'stderr', os.O_WRONLY)):
    try:
      os.fstat(fd)
      continue
    except OSError:
      closed.add(name)
    opened = os.open(os.devnull, mode)
    if opened != fd:
      os.dup2(opened, fd)
      os.close(opened)
    if getattr(sys, name) is None:  # Python's own for a stream closed at its start.
      stream = open(fd, 'r' if fd == 0 else 'w',  # pylint: disable=consider-using-with # local: fd
                    closefd=False, encoding='utf-8', errors='backslashreplace')
      setattr(sys, name, stream)
      setattr(sys, f'__{name}__', stream)
  return frozenset(closed)


# The standard streams this process started with closed (now on /dev/null).
CLOSED_STREAMS = _reopen_closed_standard_streams()


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


class _HeldTensorFlowStart(importlib.abc.MetaPathFinder):
  """TensorFlow writes C++ start-up lines to stderr as it loads ('All log messages before
  absl::InitializeLog() ...', 'oneDNN custom operations are on', 'Could not find cuda drivers',
  the CPU instruction notice, and a CUDA build's 'failed call to cuInit' on a CPU host): lines no
  user acts on, which TF_CPP_MIN_LOG_LEVEL no longer silences (TF 2.21 logs them through absl's
  C++ log). Wherever TensorFlow is first imported in this process (bertjax's input pipeline, an
  export, a user's own script or notebook), they are held and shown only if the import fails, or
  with absl's verbosity at DEBUG (--verbosity=1; console.stderr_held)."""

  def __init__(self):
    self.busy = False  # Looking TensorFlow up: the lookup below must not come back here.
    self.done = False  # Once per process.

  def find_spec(self, name, path, target=None):
    del path, target
    if name != 'tensorflow' or self.busy or self.done:
      return None
    self.busy = True
    try:  # Every other finder, in order (this one stays in sys.meta_path: no list edited).
      spec = importlib.util.find_spec(name)
    finally:
      self.busy = False
    if spec is None or spec.loader is None or not hasattr(spec.loader, 'exec_module'):
      return spec
    # Done only when TensorFlow is really imported: a lookup alone (importlib.util.find_spec,
    # etils' check for TensorFlow in an orbax read) runs no exec_module, and the import after
    # it is held too.
    finder, loader, kind = self, spec.loader, type(spec.loader)

    class Held(kind):  # The same loader, its exec_module under stderr_held.

      def exec_module(self, module):
        from bertjax import console  # pylint: disable=g-import-not-at-top
        finder.done = True
        try:
          with console.stderr_held():
            super().exec_module(module)
            # A CUDA build probes for a GPU when its devices are first listed ('failed call to
            # cuInit' on a CPU host): listed here, held too. set_visible_devices still works.
            try:
              module.config.list_physical_devices()
            except Exception:  # pylint: disable=broad-except  # Only for quiet: its own use says.
              pass
        finally:
          loader.__class__ = kind

    try:
      loader.__class__ = Held
    except TypeError:  # A loader whose class cannot change: TensorFlow imported as it is.
      pass
    return spec


# Its C++ runtime's INFO and WARNING lines, for the process (unless set: README, In Python).
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
if 'tensorflow' not in sys.modules and not any(  # By name: importlib.reload(bertjax) again.
    type(f).__name__ == _HeldTensorFlowStart.__name__ for f in sys.meta_path):
  sys.meta_path.insert(0, _HeldTensorFlowStart())
