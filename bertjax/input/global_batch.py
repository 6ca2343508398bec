"""The one host/device boundary: each host's numpy batch -> global jax.Arrays over the mesh.

Each host reads its own rows (tf.data per host, or a fine-tuning task's rows); the arrays the
step receives span all hosts, sharded over the mesh axes the batch dimension is split over.
"""

import math

import jax
import numpy as np


def eval_rows(examples: int, batch_size: int, split: int) -> int:
  """The rows of an eval batch over `examples`: batch_size, or the fewest that hold them all, a
  multiple of `split` (the data-parallel devices and the hosts, whose lcm the caller passes):
  eval_batch_size=1000000 was a million rows of padding, out of memory at the first eval."""
  return min(batch_size, -(-examples // split) * split)


def make_global_batch(host_batch: dict, mesh: jax.sharding.Mesh, batch_axes) -> dict:
  """Turns this host's batch (numpy dict) into global jax.Arrays sharded over `batch_axes`.

  `batch_axes` names the mesh axes the batch dimension is split over (a name or a tuple, as in a
  PartitionSpec entry); the other mesh axes hold replicas. Hosts pass their own rows.
  """
  axes = (batch_axes,) if isinstance(batch_axes, str) else tuple(batch_axes)
  unknown = [a for a in axes if a not in mesh.shape]
  if unknown:
    raise ValueError(f'batch axes {unknown} are not mesh axes {tuple(mesh.shape)}')
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axes))
  data_parallel = math.prod(mesh.shape[a] for a in axes)
  # Distinct batch slices held on this host: one row per slice of a (data_parallel,) array.
  local_shards = len({index[0].start for index in
                      sharding.addressable_devices_indices_map((data_parallel,)).values()})
  rows = {name: np.shape(value)[0] for name, value in host_batch.items()}
  if len(set(rows.values())) != 1:
    raise ValueError(f'host batch arrays disagree on the batch size: {rows}')
  host_rows = next(iter(rows.values()))
  if host_rows % local_shards:
    sizes = 'x'.join(str(mesh.shape[a]) for a in axes)
    raise ValueError(
        f'the host batch of {host_rows} examples does not split over the {local_shards} batch '
        f'shards on this host (batch axes {axes} = {sizes} = data-parallel size '
        f'{data_parallel}): make global_batch_size a multiple of {data_parallel}')
  global_rows = host_rows // local_shards * data_parallel
  return {
      name: jax.make_array_from_process_local_data(
          sharding, value, (global_rows,) + np.shape(value)[1:])
      for name, value in host_batch.items()
  }
