"""Findings of a hostile pass: the sentence-transformers export of a classifier tokenizes typed
special tokens as bertjax does; TensorFlow's start-up lines stay held after a mere lookup of
it; a checkpoint missing a host's folder is refused by name, with no tracebacks."""

import json
import shutil
import subprocess
import sys

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import saved_model_test
import sentence_transformers as st_library

from bertjax import console
from bertjax import export
from bertjax.interop import sources
from bertjax.training import checkpoint
from bertjax.training import checkpoint_damage
from bertjax.training import checkpoint_reader

# `[SEP]`, `[MASK]`... typed in a text are text to bertjax (split as any word).
TYPED = ['the king [SEP] doth [MASK] speak', '[CLS] my [PAD] heart [UNK] is glad']


def test_a_classifiers_sentence_transformers_tokenizer_splits_typed_special_tokens(
    fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  result = sources.load(workdir)
  out = export.export(workdir, 'sentence_transformers', tmp_path / 'st')
  hf = export.export(workdir, 'hf', tmp_path / 'hf')
  settings = [{k: json.loads((d / 'tokenizer_config.json').read_text())[k]
               for k in ('split_special_tokens', 'model_max_length')} for d in (out, hf)]
  assert settings[0] == settings[1] == {'split_special_tokens': True,
                                        'model_max_length': result.max_seq_length}
  want = saved_model_test.ids_of(result.vocab_file, TYPED, max_len=result.max_seq_length)
  got = st_library.SentenceTransformer(str(out), device='cpu').tokenize(TYPED)
  np.testing.assert_array_equal(got['input_ids'].numpy(), want['input_ids'])


START_UP = ('InitializeLog', 'oneDNN', 'cuda drivers', 'cuInit', 'This TensorFlow binary')


def python(script: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                        timeout=300, check=False)


def test_tensorflow_looked_up_before_its_import_still_writes_no_start_up_lines():
  """etils (orbax's paths) asks importlib.util.find_spec('tensorflow') before any import: the
  import after it is held too."""
  bare = python('import tensorflow as tf; tf.constant(1) + 1; '
                'print(type(tf.__spec__.loader).__name__)')
  if not any(line in bare.stderr for line in START_UP):  # A build that writes none: no test.
    pytest.skip(f'this TensorFlow writes no start-up lines: {bare.stderr[-300:]}')
  run = python("import importlib.util, bertjax; assert importlib.util.find_spec('tensorflow'); "
               'import tensorflow as tf; tf.constant(1) + 1; '
               'print(type(tf.__spec__.loader).__name__)')
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stdout.strip() == bare.stdout.strip(), run.stdout  # Its own loader, put back.
  assert not [line for line in START_UP if line in run.stderr], run.stderr[-2000:]


@flax.struct.dataclass
class State:
  params: dict
  step: jnp.ndarray


def save_steps(workdir, steps=(1, 2)):
  config = ml_collections.ConfigDict(
      {'checkpoint': {'keep': 5, 'keep_best': 0, 'every_steps': 1}})
  mngr = checkpoint.manager(workdir, config, best_metric='acc')
  for step in steps:
    # Random values: a constant array compresses into the tree's node (no data file).
    kernel = np.random.default_rng(step).normal(size=(64, 32))
    params = {'dense': {'kernel': jnp.asarray(kernel, jnp.float32)}}
    checkpoint.save(mngr, step, State(params, jnp.int32(step)),
                    {'step': step, 'examples_consumed': step * 4}, force=True)
  checkpoint.wait(mngr)
  mngr.close()
  return workdir / 'checkpoints'


READ = """
import sys
from bertjax.training import checkpoint_reader
try:
  checkpoint_reader.read(sys.argv[1], step=2)
except ValueError as e:
  print(e)
"""


def test_a_step_missing_a_hosts_folder_is_refused_by_name(tmp_path, caplog):
  """A multi-host save's ocdbt.process_<i> folder gone (left on that host's disk): tensorstore
  read its files as empty, 'Truncated Zstd-compressed stream', with tracebacks after."""
  directory = save_steps(tmp_path)
  host = directory / '2' / 'state' / 'ocdbt.process_0'
  assert host.is_dir()  # What orbax writes for each process, one here.
  shutil.rmtree(host)
  with pytest.raises(checkpoint_damage.DamagedCheckpointError,
                     match=r'checkpoints/2 cannot be read \(MissingHostFolderError: '
                     r'state/ocdbt.process_0 is missing: the checkpoint is incomplete \(process '
                     r"0's part of a multi-host save.*\); its other steps: 1$"):
    checkpoint_reader.read(tmp_path, step=2)
  assert checkpoint_reader.read(tmp_path).step == 1  # The newest readable one.
  assert 'state/ocdbt.process_0 is missing' in caplog.text
  run = subprocess.run([sys.executable, '-c', READ, str(tmp_path)], capture_output=True,
                       text=True, timeout=120, check=False)
  assert 'state/ocdbt.process_0 is missing' in run.stdout, run.stderr[-2000:]
  assert 'Traceback' not in run.stderr and 'Event loop is closed' not in run.stderr


def test_a_resume_of_a_step_missing_a_hosts_folder_names_it_and_moves_nothing(tmp_path):
  """The run's own resume of such a step warned 'Truncated Zstd-compressed stream' and moved it
  aside (and every older step, equally incomplete where the folders are on another disk)."""
  directory = save_steps(tmp_path)
  shutil.rmtree(directory / '2' / 'state' / 'ocdbt.process_0')
  config = ml_collections.ConfigDict(
      {'checkpoint': {'keep': 5, 'keep_best': 0, 'every_steps': 1}})
  mngr = checkpoint.manager(tmp_path, config, best_metric='acc')
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  abstract = State({'dense': {'kernel': jax.ShapeDtypeStruct((64, 32), jnp.float32,
                                                             sharding=sharding)}},
                   jax.ShapeDtypeStruct((), jnp.int32, sharding=sharding))
  with pytest.raises(checkpoint.RestoreError, match=(
      r'^checkpoint step 2 in .*checkpoints cannot be resumed: state/ocdbt.process_0 is '
      r'missing: the checkpoint is incomplete .*Nothing was moved: copy that folder back into '
      r'it, or move the step aside \(e.g. to 2.incomplete\) to resume from the one before$')):
    checkpoint.restore_latest(mngr, abstract)
  mngr.close()
  assert sorted(p.name for p in directory.iterdir()) == ['1', '2']


def test_a_closed_event_loop_reported_as_unraisable_is_held(monkeypatch):
  """tensorstore's callbacks into orbax's closed loop reach sys.unraisablehook, not
  sys.excepthook: a command's console holds them too (--verbosity=1 shows them)."""
  seen = []
  monkeypatch.setattr(sys, 'excepthook', sys.excepthook)
  monkeypatch.setattr(sys, 'unraisablehook', lambda args: seen.append(str(args.exc_value)))
  console.install()

  class Callback:
    def __init__(self, message):
      self.message = message

    def __del__(self):
      raise RuntimeError(self.message)

  Callback('Event loop is closed')
  Callback('something else')
  assert seen == ['something else']
