"""The commands run as a user runs them: a fresh Python process on the CPU, in a folder."""

import os
import pathlib
import signal
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def environ(**extra):
  env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'XLA_FLAGS')}
  return env | {'JAX_PLATFORMS': 'cpu', **extra}


def run(cwd, *args, timeout=120):
  return subprocess.run([sys.executable, *args], cwd=cwd, env=environ(), capture_output=True,
                        text=True, timeout=timeout, check=False)


def default_sigint():
  """Ctrl-C as a terminal delivers it, even where pytest itself runs with SIGINT ignored (a
  script that started it with `&`): the child starts with the default disposition (a preexec_fn)."""
  signal.signal(signal.SIGINT, signal.SIG_DFL)
