"""train_state.drawn_params: unrolled layers get the weights the scanned layout draws, taken
apart, so one seed starts a run from the same weights on every platform (the platforms'
defaults stack layers differently), with the logical axes of the unrolled model's own."""

import flax
import flax.linen as nn
import jax
import numpy as np
import pytest

from bertjax import pretrain_objective
from bertjax.model import heads
from bertjax.model import layer_stack
from bertjax.training import train_state
from configs import pretrain

SEQ = 32


def _model(scan, kind):
  config = pretrain.get_config(f'size=tiny,seq={SEQ}')
  config.model.scan_layers = scan
  if kind == 'pretraining':
    objective = pretrain_objective.objective(config)
    return objective.model, objective.init_inputs
  model = heads.BertForSequenceClassification(config.model, num_labels=3)
  batch = heads.dummy_batch(1, SEQ, 1)
  return model, {k: batch[k] for k in ('input_ids', 'input_mask', 'segment_ids')}


def _flat(tree):
  return flax.traverse_util.flatten_dict(nn.unbox(tree), sep='/')


@pytest.mark.parametrize('kind', ['pretraining', 'classification'])
def test_unrolled_layers_start_from_the_scanned_layouts_weights(kind):
  key = jax.random.PRNGKey(7)
  unrolled = _flat(train_state.drawn_params(*_model(False, kind)[:1], key,
                                            _model(False, kind)[1]))
  scanned = layer_stack.unstack_layers(_flat(train_state.drawn_params(
      _model(True, kind)[0], key, _model(True, kind)[1])))
  assert set(unrolled) == set(scanned) and any('layers_1/' in k for k in unrolled)
  for name, value in unrolled.items():
    np.testing.assert_array_equal(value, scanned[name], err_msg=name)
  assert not np.array_equal(unrolled['bert/layers_0/mlp/intermediate/kernel'],
                            unrolled['bert/layers_1/mlp/intermediate/kernel'])


@pytest.mark.parametrize('scan', [False, True, 'auto'])
def test_the_tree_and_its_logical_axes_are_the_models_own(scan):
  model, inputs = _model(scan, 'pretraining')
  key = jax.random.PRNGKey(0)
  own = flax.traverse_util.flatten_dict(jax.eval_shape(
      lambda: model.init(key, **inputs, deterministic=True)['params']), sep='/')
  drawn = flax.traverse_util.flatten_dict(jax.eval_shape(
      lambda: train_state.drawn_params(model, key, inputs)), sep='/')
  assert set(own) == set(drawn)
  for name, box in own.items():
    assert (drawn[name].names, drawn[name].value.shape) == (box.names, box.value.shape), name


@pytest.mark.parametrize('unroll', [1, 2])
def test_scanned_layers_are_the_models_own_draws_at_any_layers_per_trip(unroll):
  model, inputs = _model(True, 'pretraining')
  model.config.scan_unroll = unroll
  key = jax.random.PRNGKey(3)
  own = _flat(model.init(key, **inputs, deterministic=True)['params'])
  drawn = _flat(train_state.drawn_params(model, key, inputs))
  assert set(own) == set(drawn)
  for name, value in own.items():
    np.testing.assert_array_equal(value, drawn[name], err_msg=name)
