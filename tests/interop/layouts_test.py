"""layouts.names, the one walk over BERT's tensors: the transformers spelling names exactly
BertForPreTraining's own tensors, and every layout of both spellings turns their shapes into
ours and back unchanged."""

import flax.linen as nn
import jax
import numpy as np
import pytest
import torch
import transformers

from bertjax.interop import hf_names
from bertjax.interop import tf1_checkpoint
from bertjax.model import encoder_config
from bertjax.model import heads
from bertjax.training import checkpoint

# Non-square on purpose (3 heads of 4, an MLP of 20), so a wrong transpose or split shows.
LAYERS, HIDDEN, HEADS, MLP, VOCAB, SEQ = 2, 12, 3, 20, 50, 16


@pytest.fixture(scope='module')
def ours():
  """bertjax's BertForPreTraining parameter shapes, flat and unscanned (nothing initialised)."""
  config = encoder_config.default_config(num_layers=LAYERS, hidden_size=HIDDEN, num_heads=HEADS,
                                         mlp_dim=MLP, vocab_size=VOCAB,
                                         max_position_embeddings=SEQ, scan_layers=False)
  shapes = jax.eval_shape(lambda: heads.BertForPreTraining(config).init(
      jax.random.key(0), **heads.dummy_batch(1, SEQ, 2))['params'])
  return config, {k: v.shape for k, v in checkpoint.flatten(nn.unbox(shapes)).items()}


@pytest.fixture(scope='module')
def theirs():
  """transformers' BertForPreTraining tensors of the same sizes, named without `bert.`."""
  torch.manual_seed(0)
  model = transformers.BertForPreTraining(transformers.BertConfig(
      vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
      intermediate_size=MLP, max_position_embeddings=SEQ))
  return {k.removeprefix('bert.'): v.numpy() for k, v in model.state_dict().items()}


def test_the_transformers_spelling_is_bert_for_pre_trainings_own_names(ours, theirs):
  config, shapes = ours
  table = hf_names.names(config, 'pretraining')
  assert set(table) == set(shapes)
  named = {name for name, _ in table.values()}
  assert len(named) == len(table)
  # Left out: the decoder's weight and bias are the word embeddings and cls.predictions.bias
  # (tied); position_ids is a buffer.
  assert set(theirs) - named == {'cls.predictions.decoder.weight', 'cls.predictions.decoder.bias',
                                 'embeddings.position_ids'} & set(theirs)
  assert named <= set(theirs)
  for path, (name, layout) in table.items():
    mine = layout.to_ours(theirs[name])
    assert mine.shape == shapes[path], (path, name)
    np.testing.assert_array_equal(layout.to_theirs(mine), theirs[name])


def test_tf1_spells_the_same_tensors_in_tensorflows_layout(ours, theirs):
  config, shapes = ours
  hf, tf1 = hf_names.names(config, 'pretraining'), tf1_checkpoint.names(config, 'pretraining')
  assert tf1.keys() == hf.keys()
  assert len({name for name, _ in tf1.values()}) == len(tf1)
  for path, (name, layout) in tf1.items():
    torch_name, torch_layout = hf[path]
    value = torch_layout.to_ours(theirs[torch_name])  # Ours, from transformers' values.
    tf = layout.to_theirs(value)
    # TensorFlow keeps dense kernels [in, out] where torch keeps [out, in]; tables and vectors
    # are the same in both.
    expected = theirs[torch_name].T if name.endswith('/kernel') else theirs[torch_name]
    np.testing.assert_array_equal(tf, expected, err_msg=f'{path} -> {name}')
    np.testing.assert_array_equal(layout.to_ours(tf), value)
    assert name.startswith(('bert/', 'cls/')), name
