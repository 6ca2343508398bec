"""Fine-tuning batches: which examples a step reads, and the rows they travel to the device in.

Task features fit in host memory, so the example order is a pure function of (seed, step): the
global batch of step s is examples [s*B, (s+1)*B) of the concatenated per-epoch permutations,
and a resumed run needs only the step. The B examples then go to the device one of two ways:

  one per row   cut to the batch's longest row rounded up to data.pad_to_multiple_of (dynamic
                padding, as users of transformers' tokenizers pad);
  packed        data.max_instances_per_row > 1 (the kinds marked packable): first-fit
                decreasing into rows of max_seq_length, each example its own instance
                (input_mask holds instance ids, instance_starts its [CLS], example_weight
                [rows, N]); sequence-level targets are [rows, N], per-token ones (tagging's)
                move with their tokens.

Either way a step's loss is the mean over the same B examples, so packing changes the cost,
not the recipe: global_batch_size stays examples per step. Every host builds the global rows
(the same arrays everywhere) and sends its contiguous share, so all agree on the shapes.
"""

import dataclasses
import functools
import math

import jax
import numpy as np

from bertjax.finetune import kinds
from bertjax.input import global_batch
from bertjax.records import packing
from bertjax.training import sharding


@functools.lru_cache(maxsize=2)  # The current epoch and the next: one draw per epoch.
def _epoch_permutation(seed: int, epoch: int, num_rows: int) -> np.ndarray:
  return np.random.default_rng([seed, epoch]).permutation(num_rows)


def batch_indices(step: int, batch_size: int, num_rows: int, seed: int) -> np.ndarray:
  """Examples of the global batch of `step`: a slice of the per-epoch permutations, joined."""
  return example_indices(step * batch_size, batch_size, num_rows, seed)


def example_indices(first: int, batch_size: int, num_rows: int, seed: int) -> np.ndarray:
  """Examples at positions first..first+batch_size of the stream of per-epoch permutations: a
  resumed run continues from the examples it consumed, whatever its batch size was."""
  positions = np.arange(first, first + batch_size)
  epochs = positions // num_rows
  out = np.empty(batch_size, np.int64)
  for epoch in np.unique(epochs):
    where = epochs == epoch
    out[where] = _epoch_permutation(seed, int(epoch), num_rows)[positions[where] % num_rows]
  return out


def host_rows(global_rows: np.ndarray) -> np.ndarray:
  """This host's contiguous share of a global batch's rows."""
  per_host = len(global_rows) // jax.process_count()
  start = jax.process_index() * per_host
  return global_rows[start:start + per_host]


def batch_length(input_mask: np.ndarray, multiple: int) -> int:
  """Tokens a batch needs: its longest row's, rounded up to `multiple` (0: the full length).
  Every host computes it from the global batch's rows, so all agree on the shape."""
  full = input_mask.shape[-1]
  if not multiple:
    return full
  used = np.flatnonzero(input_mask.reshape(-1, full).any(axis=0))
  longest = int(used[-1]) + 1 if used.size else 1
  return min(full, -(-longest // multiple) * multiple)


@dataclasses.dataclass(frozen=True)
class Layout:
  """How a run's examples become rows: kind, dynamic padding, packing, the mesh."""

  kind: str
  pad_to_multiple_of: int
  max_instances_per_row: int  # 1: one example per row.
  mesh: jax.sharding.Mesh
  rules: tuple = sharding.RULES
  packed_rows_multiple_of: int = 1
  grad_accum_steps: int = 1  # Training's micro-batches each take rows_multiple / this.

  @property
  def packed(self) -> bool:
    return self.max_instances_per_row > 1

  @property
  def rows_multiple(self) -> int:
    """Packed row counts are rounded up to this: every host and batch shard gets whole rows,
    and the counts a run meets (shapes to compile) are few; with grad_accum_steps, every
    micro-batch and its shards too."""
    return math.lcm(sharding.data_parallel_size(self.mesh, self.rules) * self.grad_accum_steps,
                    jax.process_count(), self.packed_rows_multiple_of)

  def words(self) -> str:
    """How the rows hold examples, for the start line ('' for one per row)."""
    if not self.packed:
      return ''
    return (f', packed up to {self.max_instances_per_row} per row (in multiples of '
            f'{self.rows_multiple} rows)')

  def fewest_rows(self, batch: int) -> int:
    """The fewest rows `batch` examples can be packed into: every row full, rounded up."""
    return -(-math.ceil(batch / self.max_instances_per_row) // self.rows_multiple
             ) * self.rows_multiple


def check_layout(layout: Layout):
  """Refuses counts below one, and packing for a kind that cannot be packed (kinds.py)."""
  for name in ('max_instances_per_row', 'packed_rows_multiple_of'):
    if getattr(layout, name) < 1:
      raise ValueError(f'data.{name}={getattr(layout, name)}: it must be 1 or more (1 = '
                       + ('one example per row).' if name == 'max_instances_per_row' else
                          'no rounding).'))
  if layout.packed and not kinds.get(layout.kind).packable:
    packable = ', '.join(k for k, v in kinds.KINDS.items() if v.packable)
    raise ValueError(f'data.max_instances_per_row={layout.max_instances_per_row}: a {layout.kind}'
                     f' task cannot be packed (kinds that can: {packable}); set it to 1.')


def packing_gain(layout: Layout, batch: int) -> str:
  """Why packing cannot save work at `batch` on this mesh ('' where it can): the rows are
  rounded up to layout.rows_multiple, and where even full rows round up to the batch, each step
  computes as many rows as one per row, every one at max_seq_length (dynamic padding's rows are
  as long as the batch's longest)."""
  if not layout.packed or layout.fewest_rows(batch) < batch:
    return ''
  parts = [f'{sharding.data_parallel_size(layout.mesh, layout.rules)} data-parallel devices',
           f'data.packed_rows_multiple_of={layout.packed_rows_multiple_of}']
  if layout.grad_accum_steps > 1:
    parts.append(f'grad_accum_steps={layout.grad_accum_steps}')
  if jax.process_count() > 1:
    parts.append(f'{jax.process_count()} hosts')
  return (f'data.max_instances_per_row={layout.max_instances_per_row} saves no work at '
          f'global_batch_size={batch} on this mesh: packed rows come in multiples of '
          f'{layout.rows_multiple} ({", ".join(parts)}), so a step still computes '
          f'{layout.fewest_rows(batch)} rows or more, each of max_seq_length; set '
          'data.max_instances_per_row=1 (dynamic padding), or a global_batch_size several '
          f'times {layout.rows_multiple * layout.max_instances_per_row}.')


@dataclasses.dataclass(frozen=True)
class Batch:
  """A global batch on the device, and where each example's outputs come back from."""

  arrays: dict
  slots: np.ndarray | None  # Packed: each example's index in the outputs' [rows * N] axis.
  spans: np.ndarray | None = None  # Packed: each example's (row, first token, tokens).


def pack_rows(features: dict, examples: np.ndarray, kind: str, max_instances: int,
              rows_multiple: int) -> tuple[dict, np.ndarray]:
  """(global packed rows of `examples`, each example's slot row * N + n): model inputs [R, L],
  instance_starts and example_weight [R, N], the kind's targets [R, N] or, per token, [R, L] at
  their tokens' places. The row count is rounded up to rows_multiple with copies of the first
  example at weight 0 (real tokens keep every attention kernel's softmax finite)."""
  full = features['input_ids'].shape[1]
  lengths = np.count_nonzero(features['input_mask'][examples], axis=1)
  rows = packing.first_fit(lengths, np.zeros_like(lengths), full, 0, max_instances,
                           decreasing=True)
  num_rows = -(-len(rows) // rows_multiple) * rows_multiple
  slots = np.empty(len(examples), np.int64)
  for r, row in enumerate(rows):
    slots[row] = r * max_instances + np.arange(len(row))
  rows += [[0]] * (num_rows - len(rows))
  packed = [packing.pack_row([{k: features[k][examples[i]] for k in kinds.MODEL_INPUTS}
                              for i in row], full, 0, max_instances, nsp=False) for row in rows]
  out = {k: np.stack([r[k] for r in packed]) for k in packed[0]}
  token_targets = kinds.get(kind).token_targets
  for key in kinds.get(kind).targets:
    values = features[key][examples]
    if key in token_targets:
      target = np.zeros((num_rows,) + values.shape[1:], values.dtype)
      for (r, start, length), value in zip(token_spans(out, slots, max_instances), values,
                                           strict=True):
        if np.any(value[length:]):
          raise ValueError(f'{key} of an example has values past its {length} tokens.')
        target[r, start:start + length] = value[:length]
      out[key] = target
      continue
    target = np.zeros((num_rows * max_instances,) + values.shape[1:], values.dtype)
    target[slots] = values
    out[key] = target.reshape((num_rows, max_instances) + values.shape[1:])
  weights = np.zeros(num_rows * max_instances, np.float32)
  weights[slots] = 1.0
  out['example_weight'] = weights.reshape(num_rows, max_instances)
  return out, slots


def token_spans(rows: dict, slots: np.ndarray, max_instances: int) -> np.ndarray:
  """Each packed example's (row, first token, tokens) [E, 3], from its slot and the rows'
  instance_starts and instance ids."""
  row, n = np.divmod(slots, max_instances)
  starts = rows['instance_starts'][row, n]
  lengths = np.count_nonzero(rows['input_mask'][row] == (n + 1)[:, None], axis=1)
  return np.stack([row, starts, lengths], axis=1)


def eval_rows(batch_size: int, n: int, layout: Layout) -> int:
  """The rows of an unpacked eval batch over `n` features: batch_size, or fewer where fewer
  rows, split over the data-parallel devices and the hosts, hold them all (packed rows are as
  many as the examples fill)."""
  if layout.packed:
    return batch_size
  split = math.lcm(sharding.data_parallel_size(layout.mesh, layout.rules), jax.process_count())
  return global_batch.eval_rows(n, batch_size, split)


def host_batch(features: dict, examples: np.ndarray, layout: Layout,
               batch_size: int) -> tuple[dict, np.ndarray | None]:
  """(the global batch of `examples` as host arrays, packed slots or None), cut to its length.
  Unpacked, a short last eval batch is filled to batch_size rows with example 0 at weight 0."""
  if layout.packed:
    host, slots = pack_rows(features, examples, layout.kind, layout.max_instances_per_row,
                            layout.rows_multiple)
  else:
    rows = np.zeros(batch_size, np.int64)
    rows[:len(examples)] = examples
    host = {k: features[k][rows] for k in kinds.batch_keys(layout.kind)}
    host['example_weight'] = (np.arange(batch_size) < len(examples)).astype(np.float32)
    slots = None
  length = batch_length(host['input_mask'], layout.pad_to_multiple_of)
  return kinds.trim(layout.kind, host, length), slots


def device_batch(features: dict, examples: np.ndarray, layout: Layout,
                 batch_size: int) -> Batch:
  """The global batch of `examples` on the device; this host sends its share of the rows."""
  host, slots = host_batch(features, examples, layout, batch_size)
  mine = {k: host_rows(v) for k, v in host.items()}
  arrays = global_batch.make_global_batch(mine, layout.mesh, sharding.batch_axes(layout.rules))
  spans = None if slots is None else token_spans(host, slots, layout.max_instances_per_row)
  return Batch(arrays, slots, spans)


def example_outputs(batch: Batch, outputs: np.ndarray, layout: Layout,
                    max_seq_length: int) -> np.ndarray:
  """Per-example outputs of a batch, in the order of its examples (per-token ones at the
  features' full length, zeros past the example's tokens)."""
  if batch.slots is not None and kinds.get(layout.kind).per_token:
    out = np.zeros((len(batch.spans), max_seq_length) + outputs.shape[2:], outputs.dtype)
    for i, (r, start, length) in enumerate(batch.spans):
      out[i, :length] = outputs[r, start:start + length]
    return out
  if batch.slots is not None:
    return outputs.reshape((-1,) + outputs.shape[2:])[batch.slots]
  return kinds.untrim(layout.kind, outputs, max_seq_length)
