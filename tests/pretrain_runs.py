"""Small pre-training runs shared by training/resume_test and training/multihost_loop_test.

One config (2 layers, hidden 64, sequences of 64 tokens, batch 16) given both as `--config.*`
flags for `python -m bertjax.main` in a subprocess and as a ConfigDict for in-process runs; the
embedded corpus as TFRecords, made once per session; checkpoints read back as numpy.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import pytest

from bertjax.pretraining_data import embedded
from configs import pretrain

REPO = pathlib.Path(__file__).resolve().parents[1]
SEQ, PREDICTIONS, BATCH = 64, 10, 16
# The resume and multi-host runs read packed rows (3 instances at most): exactness with packing
# on covers the unpacked case's code paths too.
PACK = 3
TIMEOUT_S = 300  # One run on 2 shared CPU cores; a run past this is hung, not slow.


def corpus_files(tmp_path_factory, max_instances_per_row: int = 1) -> dict:
  """Config fields naming the embedded corpus's TFRecords (made on the session's first call),
  packed `max_instances_per_row` to a row when more than 1."""
  # pretraining_files reuses files whose report records the same settings, so a second module
  # asking for the same folder gets the first one's files.
  folder = tmp_path_factory.getbasetemp() / 'embedded-corpus'
  train, eval_ = embedded.pretraining_files(folder, max_seq_length=SEQ,
                                            max_predictions_per_seq=PREDICTIONS, dupe_factor=1,
                                            max_instances_per_row=max_instances_per_row)
  return {'data.train_files': train, 'data.eval_files': eval_,
          'data.vocab_file': str(embedded.vocab_path()),
          'data.max_instances_per_row': max_instances_per_row}


def fields(corpus: dict, **extra) -> dict:
  """Dotted config field -> value for the small run; `extra` overrides (dots as '__')."""
  base = {
      'model.num_layers': 2, 'model.hidden_size': 64, 'model.num_heads': 2, 'model.mlp_dim': 128,
      'data.max_predictions_per_seq': PREDICTIONS,
      # A small window and few lanes: the first batch does not wait for 10k records.
      'data.shuffle_window': 64, 'data.num_lanes': 4,
      'checkpoint.every_steps': 3, 'checkpoint.keep': 10,  # Every checkpoint stays readable.
      'log_every_steps': 1,  # Every step is logged: the tests wait for a step's line.
      'max_eval_batches': 1,
  }
  return base | corpus | {k.replace('__', '.'): v for k, v in extra.items()}


def config(steps: int, config_fields: dict) -> ml_collections.ConfigDict:
  """The ConfigDict that `command(..., steps, config_fields)` gives bertjax.main."""
  cfg = pretrain.get_config(f'size=tiny,steps={steps},seq={SEQ},batch={BATCH}')
  return set_fields(cfg, config_fields)


def set_fields(cfg, config_fields: dict):
  """Sets dotted fields ('optimizer.learning_rate') of a ConfigDict; returns it."""
  for key, value in config_fields.items():
    *parents, leaf = key.split('.')
    node = cfg
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return cfg


def command(workdir, steps: int, config_fields: dict, *flags) -> list[str]:
  """`python -m bertjax.main` for the small run in `workdir`."""
  return [sys.executable, '-m', 'bertjax.main',
          f'--config=configs/pretrain.py:size=tiny,steps={steps},seq={SEQ},batch={BATCH}',
          *[f'--config.{k}={v}' for k, v in config_fields.items()], f'--workdir={workdir}',
          *flags]


def environment(devices: int, jax_cache) -> dict:
  """Env of a CPU-only subprocess with `devices` simulated devices.

  The persistent compilation cache lets every run after the first load the compiled steps
  instead of compiling them (seconds each on 2 shared cores); the executables are the same.
  Under pytest it is the session's one cache (tests/conftest.py), so that the commands of
  every test share it; `jax_cache` serves a caller outside a test session.
  """
  return dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2',
              XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}',
              JAX_COMPILATION_CACHE_DIR=os.environ.get('JAX_COMPILATION_CACHE_DIR',
                                                       str(jax_cache)),
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
              PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get('PYTHONPATH', '')]))


def start(cmd, log: pathlib.Path, env: dict) -> subprocess.Popen:
  """Starts `cmd` with stdout and stderr (absl logs) going to `log`."""
  with open(log, 'ab') as out:
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def log_tail(log: pathlib.Path, chars: int = 4000) -> str:
  return log.read_text(errors='replace')[-chars:]


def finish(process: subprocess.Popen, log: pathlib.Path, timeout: float = TIMEOUT_S) -> int:
  """Waits for `process` (killing it on timeout) and returns its exit code."""
  try:
    return process.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait()
    pytest.fail(f'{process.args[:3]} did not finish in {timeout}s:\n{log_tail(log)}')


def run(cmd, log: pathlib.Path, env: dict):
  """Runs `cmd` to completion; fails the test with its log when it exits non-zero."""
  returncode = finish(start(cmd, log, env), log)
  assert returncode == 0, f'exit code {returncode}:\n{log_tail(log)}'


def wait_for(predicate, process: subprocess.Popen, log: pathlib.Path, what: str,
             timeout: float = TIMEOUT_S):
  """Polls `predicate` while `process` runs; fails if it exits or times out first."""
  deadline = time.monotonic() + timeout
  while not predicate():
    if process.poll() is not None:
      pytest.fail(f'the run exited ({process.returncode}) before {what}:\n{log_tail(log)}')
    if time.monotonic() > deadline:
      process.kill()
      process.wait()
      pytest.fail(f'no {what} after {timeout}s:\n{log_tail(log)}')
    time.sleep(0.05)


def checkpoint_steps(workdir) -> list[int]:
  """Steps of the finalized checkpoints (orbax writes <step>.orbax-checkpoint-tmp first)."""
  folder = pathlib.Path(workdir) / 'checkpoints'
  if not folder.is_dir():
    return []
  return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def read_state(workdir, step: int) -> dict:
  """The TrainState of a checkpoint as a dict of host numpy arrays, whatever mesh wrote it."""
  path = pathlib.Path(workdir) / 'checkpoints' / str(step) / 'state'
  checkpointer = ocp.PyTreeCheckpointer()
  metadata = checkpointer.metadata(path)
  tree = metadata.item_metadata.tree if hasattr(metadata, 'item_metadata') else metadata
  restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree,
                              is_leaf=lambda m: hasattr(m, 'shape'))
  return checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=restore_args))


def read_meta(workdir, step: int) -> dict:
  return json.loads((pathlib.Path(workdir) / 'checkpoints' / str(step) / 'meta' / 'metadata')
                    .read_text())


def flat(tree) -> dict:
  """'params/bert/...' -> array, for leaf-by-leaf comparisons with the path in the message."""
  return {jax.tree_util.keystr(path, simple=True, separator='/'): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def assert_equal_leaves(got, want):
  """Bit-identical: every leaf (params, Adam moments, step, dropout key) exactly equal."""
  got, want = flat(got), flat(want)
  assert got.keys() == want.keys()
  different = [k for k in want if not np.array_equal(got[k], want[k])]
  assert not different, (f'{len(different)} of {len(want)} leaves differ, e.g. {different[:5]}; '
                         f'max |diff| {max(np.abs(got[k] - want[k]).max() for k in different)}')


# Same math, other summation orders (another mesh, or two hosts): a few steps leave the
# parameters within ~5e-8 and the Adam moments within ~1e-8 of each other, while each step
# moves parameters by up to ~lr (4e-4 at step 12); a wrong batch, key or moment is far outside.
PARAMS_TOLERANCE = dict(rtol=1e-5, atol=1e-6)
MOMENTS_TOLERANCE = dict(rtol=1e-5, atol=1e-7)  # Second moments go down to ~1e-5 and below.


def assert_close_leaves(got, want):
  """Parameters and Adam moments within the tolerances above; step and dropout key exact."""
  got, want = flat(got), flat(want)
  assert got.keys() == want.keys()
  for key in want:
    if want[key].dtype.kind != 'f':
      np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    else:
      tolerance = PARAMS_TOLERANCE if key.startswith('params/') else MOMENTS_TOLERANCE
      np.testing.assert_allclose(got[key], want[key], **tolerance, err_msg=key)
