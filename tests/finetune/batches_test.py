"""Fine-tuning batches: the example order, dynamic padding's length, and packed rows."""

import jax
import numpy as np
import pytest

from bertjax.finetune import batches
from bertjax.records import packing
from bertjax.training import sharding
from configs import common


def test_batch_indices_are_epoch_permutations():
  rows = np.concatenate([batches.batch_indices(s, 4, 10, seed=3) for s in range(5)])
  np.testing.assert_array_equal(np.sort(rows[:10]), np.arange(10))  # Epoch 0: each row once.
  np.testing.assert_array_equal(np.sort(rows[10:20]), np.arange(10))
  assert not np.array_equal(rows[:10], rows[10:20])  # Reshuffled per epoch.
  np.testing.assert_array_equal(batches.batch_indices(3, 4, 10, seed=3), rows[12:16])
  assert not np.array_equal(batches.batch_indices(0, 4, 10, seed=4), rows[:4])


def test_batch_length_is_the_longest_row_rounded_up():
  mask = np.zeros((3, 32), np.int32)
  mask[0, :5], mask[1, :11], mask[2, :3] = 1, 1, 1
  assert batches.batch_length(mask, 8) == 16
  assert batches.batch_length(mask, 0) == 32
  assert batches.batch_length(mask[:, None].repeat(2, 1), 4) == 12  # [B, C, L] choices.
  mask[1, :] = 1
  assert batches.batch_length(mask, 5) == 32  # Never past the features' length.


def features(lengths, seq=32, regression=False):
  """Classification-like features: row i holds tokens 100*i+1.. and label i (or i / 10)."""
  n = len(lengths)
  ids = np.zeros((n, seq), np.int32)
  mask = np.zeros((n, seq), np.int32)
  for i, length in enumerate(lengths):
    ids[i, :length] = 100 * i + 1 + np.arange(length)
    mask[i, :length] = 1
  segments = (np.arange(seq) >= 3).astype(np.int32) * mask
  labels = np.arange(n) / 10 if regression else np.arange(n)
  return {'input_ids': ids, 'input_mask': mask, 'segment_ids': segments,
          'label': labels.astype(np.float32 if regression else np.int32)}


@pytest.mark.parametrize('kind', ['classification', 'regression'])
def test_packed_rows_hold_every_example_once_with_its_target(kind):
  lengths = [5, 30, 12, 7, 20, 3, 9, 16, 11, 25]
  f = features(lengths, regression=kind == 'regression')
  examples = np.array([7, 2, 9, 0, 4, 1, 8, 3])  # A step's examples, in the step's order.
  rows, slots = batches.pack_rows(f, examples, kind, 3, rows_multiple=4)
  num_rows = len(rows['input_ids'])
  assert num_rows % 4 == 0 and num_rows < len(examples)
  assert rows['instance_starts'].shape == rows['label'].shape == (num_rows, 3)
  assert np.unique(slots).size == len(examples)
  flat_labels = rows['label'].reshape(-1)
  flat_weights = rows['example_weight'].reshape(-1)
  np.testing.assert_array_equal(flat_labels[slots], f['label'][examples])
  assert flat_weights[slots].tolist() == [1.0] * len(examples)
  assert flat_weights.sum() == len(examples)  # Empty slots and filler rows weigh 0.
  seen = []
  for r in range(num_rows):
    row = {k: rows[k][r] for k in ('input_ids', 'input_mask', 'segment_ids', 'instance_starts')}
    for n, instance in enumerate(packing.unpack_row(row)):
      slot = r * 3 + n
      if flat_weights[slot]:
        i = examples[list(slots).index(slot)]
        seen.append(i)
        for key in ('input_ids', 'input_mask', 'segment_ids'):
          np.testing.assert_array_equal(instance[key], f[key][i], err_msg=key)
      else:  # A filler row: a copy of the step's first example, never counted.
        np.testing.assert_array_equal(instance['input_ids'], f['input_ids'][examples[0]])
  assert sorted(seen) == sorted(examples.tolist())


def test_one_per_row_fills_a_short_eval_batch_at_weight_zero():
  f = features([5, 9, 3])
  mesh = _mesh(8, 1)
  layout = batches.Layout('classification', 8, 1, mesh)
  host, slots = batches.host_batch(f, np.array([2, 1]), layout, batch_size=8)
  assert slots is None
  assert host['input_ids'].shape == (8, 16)  # Cut to 9 tokens, rounded up to 8.
  assert host['example_weight'].tolist() == [1, 1] + [0] * 6
  np.testing.assert_array_equal(host['label'], [2, 1] + [0] * 6)


def test_an_eval_batch_past_the_features_is_cut_to_the_rows_that_hold_them():
  """Pass 33, item 14: eval_batch_size=1000000 over 100 features was a million rows of padding
  (out of memory); the cut batch gives the same outputs (padding rows weigh nothing)."""
  unpacked = batches.Layout('classification', 8, 1, _mesh(8, 1))
  assert batches.eval_rows(1_000_000, 100, unpacked) == 104  # 8 data-parallel devices.
  assert batches.eval_rows(64, 100, unpacked) == 64
  assert batches.eval_rows(64, 3, batches.Layout('classification', 8, 1, _mesh(2, 1, 4))) == 4
  packed = batches.Layout('classification', 8, 3, _mesh(8, 1))
  assert batches.eval_rows(1_000_000, 100, packed) == 1_000_000  # Rows as the examples fill.
  from bertjax.finetune import job  # noqa: PLC0415  (imports the jobs' modules)
  f = features([5, 9, 3])
  seen = []

  def predict_fn(params, arrays):
    del params
    seen.append(arrays['input_ids'].shape[0])
    return arrays['label'][:, None].astype(np.float32), {'loss': (np.float32(0), np.float32(1))}

  outputs, _ = job.predict(predict_fn, None, f, unpacked, 1_000_000)
  assert seen == [8]
  np.testing.assert_array_equal(outputs[:, 0], f['label'])


def test_packed_rows_split_over_the_mesh_and_come_back_in_order():
  lengths = [5, 30, 12, 7, 20, 3, 9, 16, 11, 25]
  f = features(lengths)
  mesh = _mesh(2, 2, 2)
  layout = batches.Layout('classification', 32, 3, mesh)
  assert layout.rows_multiple == 4  # data 2 x fsdp 2.
  examples = np.arange(10)[::-1]
  batch = batches.device_batch(f, examples, layout, batch_size=10)
  assert batch.arrays['input_ids'].shape[0] % 4 == 0
  # Outputs [R, N, ...] as the model gives them: here, each slot's label.
  outputs = np.asarray(batch.arrays['label'])[..., None].astype(np.float32)
  back = batches.example_outputs(batch, outputs, layout, 32)
  np.testing.assert_array_equal(back[:, 0], examples)


def test_packing_is_refused_for_span_and_choice_kinds_and_counts_below_one():
  mesh = _mesh(8, 1)
  for kind in ('span', 'multiple_choice'):
    with pytest.raises(ValueError, match=f'{kind} task cannot be packed'):
      batches.check_layout(batches.Layout(kind, 32, 2, mesh))
    batches.check_layout(batches.Layout(kind, 32, 1, mesh))  # One per row: fine.
  batches.check_layout(batches.Layout('tagging', 32, 2, mesh))
  with pytest.raises(ValueError, match='max_instances_per_row=0: it must be 1 or more'):
    batches.check_layout(batches.Layout('classification', 32, 0, mesh))
  with pytest.raises(ValueError, match='packed_rows_multiple_of=0: it must be 1 or more'):
    batches.check_layout(batches.Layout('classification', 32, 3, mesh, packed_rows_multiple_of=0))


def test_packing_that_cannot_save_work_on_the_mesh_is_said():
  """Packed rows come in multiples of the data-parallel devices: where even full rows round
  up to the batch, packing computes as many rows as one per row, each at max_seq_length."""
  one_per_row, packed = (batches.Layout('classification', 32, n, _mesh(8, 1),
                                        packed_rows_multiple_of=4) for n in (1, 4))
  assert one_per_row.words() == '' and batches.packing_gain(one_per_row, 8) == ''
  assert packed.words() == ', packed up to 4 per row (in multiples of 8 rows)'
  assert packed.fewest_rows(8) == 8 and packed.fewest_rows(64) == 16
  said = batches.packing_gain(packed, 8)
  assert said.startswith('data.max_instances_per_row=4 saves no work at global_batch_size=8 on '
                         'this mesh: packed rows come in multiples of 8 (8 data-parallel '
                         'devices, data.packed_rows_multiple_of=4), so a step still computes 8 '
                         'rows or more'), said
  assert 'global_batch_size several times 32' in said
  assert batches.packing_gain(packed, 32) == ''  # 8 rows of 4 at best: fewer than 32.
  assert batches.packing_gain(packed, 9) == ''  # 3 full rows round up to 8: fewer than 9.
  fewer_devices = batches.Layout('classification', 32, 3, _mesh(2, 2, 2))
  assert fewer_devices.fewest_rows(8) == 4 and batches.packing_gain(fewer_devices, 8) == ''
  assert batches.packing_gain(fewer_devices, 4) != ''


def _mesh(data, fsdp, tensor=1):
  config = common.mesh_config()
  config.data, config.fsdp, config.tensor = data, fsdp, tensor
  return sharding.make_mesh(config, jax.devices())
