"""Sequence packing on the embedded corpus: padding, and real tokens trained per second.

  python bench/packing_bench.py [--size=tiny] [--seq=128] [--predictions=20] [--batch=64] \
      [--pack=3] [--steps=5] [--rounds=3] [--attention_impl=xla] [--dtype=float32]

Makes the embedded corpus's train TFRecords (dupe_factor 5, static masks, as
configs/pretrain.py's default run) one instance per row and packed --pack to a row (the same
instances: create_pretraining_data --pack), prints each set's rows and padding fraction, then
times pre-training updates (train_state's jitted step, as the loop runs it) on each set's own
batches from the input pipeline, interleaved round by round. Every row costs the same (attention
is dense over the row), so real tokens per second grow as the padding shrinks; the packed rows'
[B, L, L] attention mask is the cost on the other side. Figures are medians over rounds.
On a GPU: JAX_PLATFORMS=cuda python bench/packing_bench.py --size=base --batch=256 \
  --dtype=bfloat16 --attention_impl=cudnn. Not a test: figures only.
"""

import os
import sys
import tempfile
import time

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from bertjax import accelerators  # noqa: E402
from bertjax import pretrain  # noqa: E402
from bertjax.input import input_pipeline  # noqa: E402
from bertjax.pretraining_data import embedded  # noqa: E402
from bertjax.records import file_set  # noqa: E402
from bertjax.training import optimizer as optimizer_lib  # noqa: E402
from bertjax.training import sharding  # noqa: E402
from bertjax.training import train_state  # noqa: E402
from configs import pretrain as pretrain_config  # noqa: E402

_SIZE = flags.DEFINE_string('size', 'tiny', 'Model size (configs/pretrain.py).')
_SEQ = flags.DEFINE_integer('seq', 128, 'max_seq_length.')
_PREDICTIONS = flags.DEFINE_integer('predictions', 20, 'max_predictions_per_seq.')
_BATCH = flags.DEFINE_integer('batch', 64, 'Rows per update.')
_PACK = flags.DEFINE_integer('pack', 3, 'Most instances per packed row.')
_STEPS = flags.DEFINE_integer('steps', 5, 'Updates per round and set.')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
_ATTENTION = flags.DEFINE_string('attention_impl', 'xla', 'model.attention_impl.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'Compute dtype.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Where the TFRecords go ("": a temp dir).')


def make_config(pack: int):
  config = pretrain_config.get_config(f'size={_SIZE.value},batch={_BATCH.value},seq={_SEQ.value},'
                                      f'dtype={_DTYPE.value},pack={pack}')
  with config.unlocked():
    config.data.max_predictions_per_seq = _PREDICTIONS.value
    config.model.attention_impl = _ATTENTION.value
    if _ATTENTION.value != 'xla':
      config.model.attention_dropout_rate = 0.0
  return config


class Runner:
  """One data set's batches and a train state: `run(n)` times n updates."""

  def __init__(self, pack: int, data_dir: str):
    config = self.config = make_config(pack)
    train, _ = embedded.pretraining_files(
        data_dir, max_seq_length=_SEQ.value, max_predictions_per_seq=_PREDICTIONS.value,
        dupe_factor=config.data.dupe_factor, max_instances_per_row=pack)
    self.report, = file_set.resolve(train).reports.values()
    dataset = input_pipeline.pretrain_dataset(
        train, global_batch_size=_BATCH.value, max_seq_length=_SEQ.value,
        max_predictions_per_seq=_PREDICTIONS.value, seed=0, max_instances_per_row=pack)
    self.mesh = sharding.make_mesh(config.mesh)
    self.rules = sharding.parse_rules(config.mesh.rules)
    shardings = sharding.batch_sharding(self.mesh, self.rules)
    host_batches = list(dataset.take(_STEPS.value).as_numpy_iterator())
    self.real_tokens = np.mean([np.count_nonzero(b['input_mask']) for b in host_batches])
    self.instances = np.mean([b['next_sentence_weights'].sum() if pack > 1 else len(b['input_ids'])
                              for b in host_batches])
    self.batches = [jax.device_put(b, shardings) for b in host_batches]
    tx, schedule = optimizer_lib.for_run(config)
    objective = pretrain.objective(config)
    self.state, state_shardings = train_state.create_train_state(config, objective, tx,
                                                                 self.mesh, self.rules)
    self.step = train_state.jit_train_step(config, objective, tx, schedule, state_shardings,
                                           shardings)
    self.run(1)  # Compile.

  def run(self, n: int) -> float:
    start = time.perf_counter()
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      state, metrics = self.state, None
      for i in range(n):
        state, metrics = self.step(state, self.batches[i % len(self.batches)])
      jax.block_until_ready((state, metrics))
    self.state = state
    if not np.isfinite(float(metrics['loss'][0])):
      raise FloatingPointError('non-finite loss')
    return (time.perf_counter() - start) / n


def main(argv):
  del argv
  accelerators.hide_from_tensorflow()
  data_dir = _DATA_DIR.value or tempfile.mkdtemp(prefix='packing_bench-')
  runners = {'one per row': Runner(1, data_dir), f'packed ({_PACK.value})': Runner(_PACK.value,
                                                                                    data_dir)}
  times = {name: [] for name in runners}
  for _ in range(_ROUNDS.value):
    for name, runner in runners.items():
      times[name].append(runner.run(_STEPS.value))
  print(f'{_SIZE.value}, seq {_SEQ.value}, batch {_BATCH.value}, {_DTYPE.value}, attention '
        f'{_ATTENTION.value}, {jax.devices()[0].device_kind} x {jax.device_count()}')
  print(f'{"data":<14}{"instances":>10}{"rows":>9}{"padding":>9}{"step ms":>9}{"rows/s":>9}'
        f'{"inst/s":>9}{"real tok/s":>12}')
  rates = {}
  for name, runner in runners.items():
    counts = runner.report['counts']
    step = float(np.median(times[name]))
    rates[name] = runner.real_tokens / step
    print(f'{name:<14}{counts["instances"]:>10}{counts["rows"]:>9}'
          f'{runner.report["padding_fraction"]:>9.1%}{step * 1e3:>9.1f}{_BATCH.value / step:>9.1f}'
          f'{runner.instances / step:>9.1f}{rates[name]:>12.0f}')
  one, packed = rates.values()
  print(f'packed / one per row: {packed / one:.3f}x real tokens per second')


if __name__ == '__main__':
  app.run(main)
