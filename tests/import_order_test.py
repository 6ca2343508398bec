"""bertjax beside PyTorch in one process: PyPI's Linux torch ships triton, whose native library
crashes the process when loaded after TensorFlow's; bertjax loads it first (bertjax/__init__.py).
"""

import importlib.util
import subprocess
import sys

import pytest

# What a notebook does: bertjax (which brings TensorFlow), then transformers builds a model
# (torch loads triton lazily there).
SCRIPT = """
import {first}
import tensorflow
import transformers
transformers.BertModel(transformers.BertConfig(num_hidden_layers=1, hidden_size=32,
                                               num_attention_heads=2, intermediate_size=64))
import triton._C.libtriton
print('alive')
"""


@pytest.mark.skipif(importlib.util.find_spec('triton') is None,
                    reason='triton is not installed (torch\'s CPU build): nothing to crash')
def test_tensorflow_then_torch_and_triton_in_one_process():
  run = subprocess.run([sys.executable, '-c', SCRIPT.format(first='bertjax')],
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 0 and run.stdout.strip() == 'alive', (run.returncode, run.stderr[-2000:])


def test_importing_bertjax_loads_neither_tensorflow_nor_jax_nor_torch():
  """Importing the package alone brings neither TensorFlow nor jax (a CLI's --help stays fast);
  with triton installed it adds only triton's native library."""
  run = subprocess.run([sys.executable, '-c', 'import sys, bertjax; print(sorted(m for m in '
                        'sys.modules if m.split(".")[0] in ("tensorflow", "jax", "torch")))'],
                       capture_output=True, text=True, timeout=120)
  assert run.returncode == 0, run.stderr
  assert run.stdout.strip() == '[]'
