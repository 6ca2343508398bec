"""The train step needs no TensorFlow: the model, heads, optimizer, sharding, train state, loop,
the pre-training objective and the benches that time and profile it (bench/train_bench.py,
bench/step_profile.py) import none (TensorFlow stays in the input pipeline and the export
paths), so the step compiles, is timed and is profiled on a machine without it."""

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

# Every module of the step's packages (a new one is held to it too), the objective, its config.
STEP_MODULES = sorted(
    ['bertjax.pretrain_objective', 'configs.pretrain']
    + ['.'.join(p.relative_to(REPO).with_suffix('').parts)
       for folder in ('model', 'training') for p in (REPO / 'bertjax' / folder).glob('*.py')])

# Imports the modules, then bench/step_profile.py (which imports bench/train_bench.py) as its own
# module with its flags not parsed (what a test or a notebook does), and prints which TensorFlow
# packages came with them.
SCRIPT = """
import importlib, importlib.util, sys
for name in {modules!r}:
  importlib.import_module(name)
spec = importlib.util.spec_from_file_location('step_profile', {bench!r})
spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tensorflow_datasets')))
"""


def _tensorflow_modules(modules) -> str:
  run = subprocess.run(
      [sys.executable, '-c', SCRIPT.format(modules=modules,
                                           bench=str(REPO / 'bench' / 'step_profile.py'))],
      capture_output=True, text=True, timeout=300, cwd=REPO)
  assert run.returncode == 0, run.stderr[-3000:]
  return run.stdout.strip().splitlines()[-1]


def test_the_step_and_its_benches_import_no_tensorflow():
  assert 'bertjax.training.train_state' in STEP_MODULES and len(STEP_MODULES) > 10
  assert _tensorflow_modules(STEP_MODULES) == '[]'


def test_the_check_sees_tensorflow_where_it_is():
  """The pre-training job reads its data with tf.data: the same check lists TensorFlow there
  (the test above could not fail otherwise)."""
  assert "'tensorflow'" in _tensorflow_modules(['bertjax.pretrain'])
