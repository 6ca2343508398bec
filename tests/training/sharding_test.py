"""Mesh construction, the logical-axis rules, and batch divisibility checks."""

import sys
import types

from absl import flags
from flax import linen as nn
import jax
import ml_collections
from ml_collections import config_flags
import numpy as np
import pytest

from bertjax import mesh_rules
from bertjax.model import heads
from bertjax.training import sharding
from configs import common


def mesh_config(data=1, fsdp=1, tensor=1):
  return ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor))


def test_mesh_shape_fills_minus_one():
  assert sharding.mesh_shape(mesh_config(data=-1), 8) == (8, 1, 1)
  assert sharding.mesh_shape(mesh_config(data=2, fsdp=-1, tensor=2), 8) == (2, 2, 2)
  with pytest.raises(ValueError, match='at most one axis may be -1'):
    sharding.mesh_shape(mesh_config(data=-1, fsdp=-1), 8)
  with pytest.raises(ValueError, match='has 6 slots but there are 8 devices'):
    sharding.mesh_shape(mesh_config(data=3, tensor=2), 8)
  with pytest.raises(ValueError, match='does not divide 8 devices'):
    sharding.mesh_shape(mesh_config(data=3, fsdp=-1), 8)


def test_make_mesh_on_8_devices():
  assert jax.device_count() == 8
  mesh = sharding.make_mesh(mesh_config(data=2, fsdp=2, tensor=2))
  assert dict(mesh.shape) == {'data': 2, 'fsdp': 2, 'tensor': 2}
  assert sharding.data_parallel_size(mesh) == 4


def test_param_shardings_follow_rules():
  cfg = common.model_config('tiny', vocab_size=512)
  mesh = sharding.make_mesh(mesh_config(data=2, fsdp=2, tensor=2))
  boxed = jax.eval_shape(lambda: heads.BertForPreTraining(cfg).init(
      jax.random.key(0), **heads.dummy_batch(1, 8, 2)))['params']
  shardings = sharding.logical_to_sharding(boxed, mesh)
  spec = lambda s: tuple(s.spec)  # noqa: E731
  assert spec(shardings['bert']['embeddings']['word_embeddings']['embedding']) == (
      'tensor', 'fsdp')
  assert spec(shardings['bert']['layers_0']['attention']['query']['kernel']) == (
      'fsdp', 'tensor', None)
  assert spec(shardings['bert']['layers_0']['mlp']['output']['kernel']) == ('tensor', 'fsdp')
  # Init directly into the shardings: no unsharded copy of the parameters ever exists.
  init = jax.jit(lambda: heads.BertForPreTraining(cfg).init(
      jax.random.key(0), **heads.dummy_batch(1, 8, 2))['params'], out_shardings=shardings)
  params = init()
  kernel = params['bert']['layers_0']['mlp']['intermediate']['kernel']
  assert kernel.value.sharding.spec == jax.sharding.PartitionSpec('fsdp', 'tensor')
  assert kernel.value.addressable_shards[0].data.shape == (64, 256)


def test_batch_divisibility_errors():
  mesh = sharding.make_mesh(mesh_config(data=2, fsdp=2, tensor=2))
  sharding.check_divisible(8, mesh)
  with pytest.raises(ValueError, match='not divisible by the data-parallel size 4'):
    sharding.check_divisible(6, mesh)
  assert tuple(sharding.batch_sharding(mesh).spec) == (('data', 'fsdp'),)


def test_rules_round_trip_through_one_flag_value(monkeypatch):
  text = sharding.rules_to_text()
  assert text.startswith('batch=data+fsdp,length=,activation_embed=,vocab=tensor,embed=fsdp')
  assert sharding.parse_rules(text) == sharding.RULES
  # What a user types on the command line reaches the config as that string.
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', None, 'config', flag_values=flag_values)
  argv = ['prog', '--config=configs/pretrain.py:size=tiny',
          '--config.mesh.rules=batch=data,embed=fsdp+tensor']
  monkeypatch.setattr(sys, 'argv', argv)  # config_flags reads its overrides from sys.argv.
  flag_values(argv)
  assert sharding.parse_rules(flag_values.config.mesh.rules) == (
      ('batch', 'data'), ('embed', ('fsdp', 'tensor')))
  with pytest.raises(ValueError, match="'embed=model' is not logical_name=mesh_axis"):
    sharding.parse_rules('batch=data,embed=model')
  # Blanks around a name or an axis are dropped, as the config check drops them.
  assert sharding.parse_rules(' batch = data + fsdp ,vocab =tensor') == (
      ('batch', ('data', 'fsdp')), ('vocab', 'tensor'))


def test_the_rules_name_every_logical_axis_the_model_carries_and_no_other(monkeypatch):
  """mesh.rules refuses a name outside mesh_rules.NAMES (it would shard nothing, unseen): those
  are exactly the names the pre-training model's parameters (layers scanned) and activations
  carry."""
  seen = set()
  constrain = nn.with_logical_constraint
  def recorded(x, names, *args, **kwargs):
    seen.update(name for name in names if name)
    return constrain(x, names, *args, **kwargs)
  monkeypatch.setattr(nn, 'with_logical_constraint', recorded)
  cfg = common.model_config('tiny', vocab_size=512, scan_layers=True)
  boxed = jax.eval_shape(lambda: heads.BertForPreTraining(cfg).init(
      jax.random.key(0), **heads.dummy_batch(1, 8, 2)))['params']
  specs = jax.tree.leaves(nn.get_partition_spec(boxed),
                          is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  seen.update(name for spec in specs for name in spec if name)
  assert seen == set(mesh_rules.NAMES)
  for rules, why in (('batch=data+data', 'names a mesh axis twice'),
                     ('emebd=fsdp', 'names emebd, which nothing in the model carries .*; did you '
                      'mean embed[?]'),
                     ('BATCH=data', 'names BATCH, .*; did you mean batch[?]'),
                     ('hidden=tensor', 'names hidden, .*; name one of those')):
    with pytest.raises(mesh_rules.RuleError, match=why):
      sharding.parse_rules(rules)


def test_batch_split_follows_the_rules():
  mesh = sharding.make_mesh(mesh_config(data=2, fsdp=2, tensor=2))
  rules = sharding.parse_rules('batch=data')
  assert sharding.data_parallel_size(mesh, rules) == 2
  sharding.check_divisible(6, mesh, rules)
  with pytest.raises(ValueError, match=r'data-parallel size 2 \(mesh data=2\)'):
    sharding.check_divisible(5, mesh, rules)


def _fake_devices(num, per_slice):
  return [types.SimpleNamespace(id=i, slice_index=i // per_slice, process_index=i // 2,
                                device_kind='fake', platform='cpu') for i in range(num)]


def test_across_slices_only_the_data_axis_is_split():
  grid = sharding.device_grid((4, 2, 1), _fake_devices(8, per_slice=4))
  slice_of = np.vectorize(lambda d: d.slice_index)(grid)
  # Each fsdp group (one data row) lives in one slice; the slices split the data rows.
  assert (slice_of == slice_of[:, :1, :]).all()
  assert slice_of[:, 0, 0].tolist() == [0, 0, 1, 1]
  assert sorted(d.id for d in grid.ravel()) == list(range(8))


def test_an_fsdp_axis_wider_than_a_slice_is_refused():
  with pytest.raises(ValueError, match='mesh.data must be a multiple of 2'):
    sharding.device_grid((1, 8, 1), _fake_devices(8, per_slice=4))


def test_one_slice_keeps_the_plain_layout():
  devices = _fake_devices(8, per_slice=8)
  assert sharding.num_slices(devices) == 1
  grid = sharding.device_grid((4, 2, 1), devices)
  assert [d.id for d in grid.ravel()] == list(range(8))
