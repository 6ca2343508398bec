"""bertjax beside PyTorch in one process: PyPI's Linux torch ships triton, whose native library
crashes the process when loaded after TensorFlow's; bertjax loads it first (bertjax/__init__.py).
"""

import importlib.util
import os
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



def test_the_command_line_imports_no_jax_before_it_starts_the_hosts():
  """bertjax.main decides whether this is one host of several before any JAX work: importing
  jax sets TPU_SKIP_MDS_QUERY, and a TPU VM's peers then went unasked (a review's config_check
  import of training/ranking brought jax in at import: caught by main_test's metadata test)."""
  run = subprocess.run([sys.executable, '-c', 'import os, sys, bertjax.main; print(sorted(m for '
                        'm in sys.modules if m.split(".")[0] == "jax"), '
                        '"TPU_SKIP_MDS_QUERY" in os.environ)'],
                       capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != 'TPU_SKIP_MDS_QUERY'})
  assert run.returncode == 0, run.stderr
  assert run.stdout.strip() == '[] False', run.stdout


START_UP = ('InitializeLog', 'oneDNN', 'cuda drivers', 'cuInit', 'This TensorFlow binary')


def python(script, **env):
  import os  # pylint: disable=g-import-not-at-top
  return subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                        timeout=300, env={**os.environ, **env})


def test_tensorflow_imported_after_bertjax_writes_no_start_up_lines():
  """A plain script or notebook (no bertjax.main to hold stderr): TensorFlow's C++ start-up
  lines, which TF_CPP_MIN_LOG_LEVEL no longer silences, are held wherever it is first imported,
  bertjax's input pipeline or the user's own `import tensorflow`."""
  bare = python('import tensorflow as tf; tf.constant(1) + 1')
  assert any(line in bare.stderr for line in START_UP), (  # What is held: it is there to hold.
      f'this TensorFlow writes no start-up lines: {bare.stderr[-500:]}')
  for script in ('import bertjax.input.input_pipeline', 'import bertjax; import tensorflow',
                 'from bertjax import predict; import tensorflow_text'):
    run = python(script + '; import tensorflow as tf; tf.constant(1) + 1; '
                 'print(type(tf.__spec__.loader).__name__)')  # Its devices in use: cuInit.
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == 'SourceFileLoader', run.stdout  # Its own loader, restored.
    assert not [line for line in START_UP if line in run.stderr], (script, run.stderr[-2000:])


def test_a_failing_tensorflow_import_shows_what_it_wrote(tmp_path):
  fake = tmp_path / 'tensorflow'
  fake.mkdir()
  (fake / '__init__.py').write_text("import os\nos.write(2, b'libtensorflow.so: bad ELF\\n')\n"
                                    "raise ImportError('no TensorFlow here')\n")
  run = python('import bertjax\ntry:\n  import tensorflow\nexcept ImportError as e:\n'
               '  print(e)\n', PYTHONPATH=str(tmp_path))
  assert run.stdout.strip() == 'no TensorFlow here', run.stderr
  assert 'libtensorflow.so: bad ELF' in run.stderr
