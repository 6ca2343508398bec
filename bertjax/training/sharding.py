"""The device mesh and the one table that maps logical axis names to mesh axes.

Model code names axes logically (`vocab, embed, heads, kv, mlp, layers` on parameters;
`batch, length, activation_embed` on activations). Only this file and the config name the mesh
axes `data` (pure data parallelism), `fsdp` (data parallelism with parameters, gradients and
optimizer state sharded, ZeRO-3 style) and `tensor` (Megatron-style tensor parallelism).
"""

from absl import logging
import flax.linen as nn
import jax
from jax.experimental import mesh_utils
import numpy as np

from bertjax import console
from bertjax import mesh_rules

# The axes, the default rules and their text form live in mesh_rules (pure Python: config_check
# reads them before JAX starts).
MESH_AXES = mesh_rules.MESH_AXES
RULES = mesh_rules.RULES
rules_to_text = mesh_rules.rules_to_text
parse_rules = mesh_rules.parse_rules


def mesh_shape(mesh_config, num_devices: int) -> tuple:
  """(data, fsdp, tensor) sizes from the config; one of them may be -1 = all remaining devices."""
  sizes = [int(mesh_config[axis]) for axis in MESH_AXES]
  asked = dict(zip(MESH_AXES, sizes, strict=True))
  if sizes.count(-1) > 1:
    raise ValueError(f'mesh {asked}: at most one axis may be -1.')
  if any(s == 0 or s < -1 for s in sizes):
    raise ValueError(f'mesh {asked}: sizes must be positive or -1.')
  known = int(np.prod([s for s in sizes if s != -1]))
  if -1 in sizes:
    if num_devices % known:
      raise ValueError(f'mesh {asked} does not divide {num_devices} '
                       'devices: choose axis sizes whose product divides the device count.')
    sizes[sizes.index(-1)] = num_devices // known
  if int(np.prod(sizes)) != num_devices:
    raise ValueError(f'mesh {asked} has {int(np.prod(sizes))} slots but '
                     f'there are {num_devices} devices: make the product equal, or set one '
                     'axis to -1.')
  return tuple(sizes)


def num_slices(devices) -> int:
  """TPU slices the devices span (multi-slice jobs: joined over the data center network)."""
  return len({getattr(d, 'slice_index', 0) for d in devices})


def device_grid(shape: tuple, devices) -> np.ndarray:
  """Devices laid out as a (data, fsdp, tensor) array. Within a slice the layout follows the
  ICI topology; across slices only `data` is split, so that the fsdp and tensor collectives
  (every layer) stay on ICI and just the gradient reduction crosses the slower DCN."""
  slices = num_slices(devices)
  if slices > 1:
    if shape[0] % slices:
      raise ValueError(f'mesh {dict(zip(MESH_AXES, shape, strict=True))} over {slices} slices: '
                       f'mesh.data must be a multiple of {slices} (only data parallelism '
                       'crosses slices); lower mesh.fsdp or mesh.tensor to fit one slice.')
    return mesh_utils.create_hybrid_device_mesh((shape[0] // slices, *shape[1:]),
                                                (slices, 1, 1), devices)
  try:  # Topology-aware placement (ICI rings on TPU); falls back for simulated/odd layouts.
    return mesh_utils.create_device_mesh(shape, devices)
  except (ValueError, NotImplementedError, AssertionError):
    return np.asarray(devices).reshape(shape)


def make_mesh(mesh_config, devices=None) -> jax.sharding.Mesh:
  """A (data, fsdp, tensor) mesh over all devices, laid out to follow the physical topology."""
  devices = jax.devices() if devices is None else devices
  # Auto axes: the model places its arrays by logical constraints (with_sharding_constraint),
  # which under Explicit axes would be assertions. Named, as the defaults change across jax
  # releases (jax 0.12's AbstractMesh defaults to Explicit).
  try:
    shape = mesh_shape(mesh_config, len(devices))
  except ValueError as e:
    raise console.Refused(str(e)) from None
  mesh = jax.sharding.Mesh(device_grid(shape, devices),
                           MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))
  logging.info('mesh %s over %d devices (%d hosts)', dict(mesh.shape), mesh.size,
               jax.process_count())
  return mesh


def data_parallel_size(mesh: jax.sharding.Mesh, rules=RULES) -> int:
  """How many ways the batch is split: the product of its mesh axes (data x fsdp by default)."""
  return int(np.prod([mesh.shape[axis] for axis in batch_axes(rules)]))


def logical_to_sharding(boxed_tree, mesh: jax.sharding.Mesh, rules=RULES):
  """NamedShardings for a tree whose leaves carry logical axis names (nn.Partitioned boxes)."""
  specs = nn.get_partition_spec(boxed_tree)
  return nn.logical_to_mesh_sharding(specs, mesh, rules)


def batch_sharding(mesh: jax.sharding.Mesh, rules=RULES) -> jax.sharding.NamedSharding:
  """How a batch's leading axis is split over the mesh."""
  spec = nn.logical_to_mesh_axes(('batch',), rules)
  return jax.sharding.NamedSharding(mesh, spec)


def check_divisible(global_batch_size: int, mesh: jax.sharding.Mesh, rules=RULES,
                    name: str = 'global_batch_size'):
  """Raises, before compiling, when the batch cannot be split evenly over the mesh; the error
  names the setting it checks (`name`: global_batch_size, eval_batch_size, ...)."""
  dp = data_parallel_size(mesh, rules)
  if global_batch_size % dp:
    split = ' x '.join(f'{a}={mesh.shape[a]}' for a in batch_axes(rules))
    raise ValueError(
        f'{name} {global_batch_size} is not divisible by the data-parallel size {dp} '
        f'(mesh {split}): use a multiple of {dp}, or move devices to the tensor axis.')
  if global_batch_size % jax.process_count():
    raise ValueError(f'{name} {global_batch_size} is not divisible by the '
                     f'{jax.process_count()} hosts.')


def batch_axes(rules=RULES) -> tuple:
  """The mesh axes a batch's leading dimension is split over (per the rules table)."""
  axes = nn.logical_to_mesh_axes(('batch',), rules)[0]
  return (axes,) if isinstance(axes, str) else tuple(axes)
