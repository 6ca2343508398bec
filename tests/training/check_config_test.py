"""train_state.check_config: a batch, sequence length, vocab or model shape the mesh or the vocab
file cannot take is refused before anything is built, naming the field."""

import ml_collections
import pytest

from bertjax import console
from bertjax.training import sharding
from bertjax.training import train_state
from configs import pretrain

VOCAB = 512


def mesh_config(data=1, fsdp=1, tensor=1):
  return ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor))


@pytest.mark.parametrize('change, mesh, vocab_entries, message', [
    (dict(global_batch_size=12), dict(data=8), None,
     '^global_batch_size 12 is not divisible by the data-parallel size 8'),
    (dict(global_batch_size=32, grad_accum_steps=3), dict(data=8), None,
     'global_batch_size 32 is not divisible by grad_accum_steps 3'),
    (dict(global_batch_size=32, grad_accum_steps=8), dict(data=8), None,
     r'micro-batch 4 \(global_batch_size / grad_accum_steps\) is not divisible by the '
     'data-parallel size 8'),
    (dict(eval_batch_size=20), dict(data=8), None,
     '^eval_batch_size 20 is not divisible by the data-parallel size 8'),
    ({'data.max_seq_length': 64, 'model.max_position_embeddings': 32}, dict(data=8), None,
     r'max_seq_length 64 exceeds .*max_position_embeddings=32'),
    ({'model.vocab_size': VOCAB}, dict(data=8), 8192,
     'model.vocab_size=512 but the vocab file has 8192 entries'),
    ({'model.vocab_size': 8200}, dict(data=8), 8192,  # Larger, but not a 128-multiple pad.
     'model.vocab_size=8200 but the vocab file has 8192 entries'),
    ({'model.num_heads': 2}, dict(data=2, tensor=4), None,
     'model.num_heads=2 is not divisible by mesh.tensor=4'),
    ({'model.mlp_dim': 510}, dict(data=2, tensor=4), None,
     'model.mlp_dim=510 is not divisible by mesh.tensor=4'),
    ({'model.hidden_size': 60, 'model.num_heads': 4}, dict(fsdp=8), None,
     'model.hidden_size=60 is not divisible by mesh.fsdp=8'),
], ids=['batch', 'accum', 'micro-batch', 'eval-batch', 'positions', 'vocab-small',
        'vocab-unpadded', 'heads', 'mlp', 'fsdp-hidden'])
def test_check_config_errors(change, mesh, vocab_entries, message):
  config = pretrain.get_config('size=tiny,batch=32,seq=32')
  config.eval_batch_size = 32
  config.model.num_heads = 4  # tiny's 2 would not split over tensor=4.
  # The same config before the change passes on the same mesh: the error is the change's.
  train_state.check_config(config, sharding.make_mesh(mesh_config(**mesh)), vocab_entries)
  for key, value in change.items():
    parent, _, name = key.rpartition('.')
    (config[parent] if parent else config)[name] = value
  # Refused (exit 78 from bertjax.main, as its own checks): matrix pass of 2026-12-02, these
  # exited 1, which a scheduler may retry.
  with pytest.raises(console.Refused, match=message):
    train_state.check_config(config, sharding.make_mesh(mesh_config(**mesh)), vocab_entries)


def test_a_mesh_the_devices_cannot_fill_is_refused():
  with pytest.raises(console.Refused, match=r"mesh \{'data': 3, 'fsdp': 1, 'tensor': 1\} has 3 "
                     'slots but there are 8 devices'):
    sharding.make_mesh(mesh_config(data=3))


def test_check_config_accepts_vocab_padded_for_tensor_parallelism():
  config = pretrain.get_config('size=tiny,batch=32,seq=32,vocab=8320')  # 8192 rows + 128 pad.
  config.model.num_heads = 4
  train_state.check_config(config, sharding.make_mesh(mesh_config(data=2, tensor=4)), 8192)


def test_a_vocab_padded_far_past_its_entries_is_warned_of(monkeypatch):
  """Pass of 2026-12-01: a 1000-piece SentencePiece vocab trained on the default 8192 rows
  (vocab= left out) with an INFO line: 2.5x the parameters, 7192 dead classes in the softmax."""
  said = []
  monkeypatch.setattr(train_state.logging, 'warning', lambda msg, *a: said.append(msg % a))
  mesh = sharding.make_mesh(mesh_config(data=8))
  train_state.check_config(pretrain.get_config('size=tiny,batch=32,seq=32,vocab=1024'), mesh,
                           1000)  # A multiple of 128: said at INFO only.
  assert said == []
  train_state.check_config(pretrain.get_config('size=tiny,batch=32,seq=32'), mesh, 1000)
  assert said == [
      'model.vocab_size=8192 is 7192 rows past the vocab\'s 1000 entries: never targets, they '
      'share the MLM softmax (the loss starts near ln 8192 = 9.01, not ln 1000 = 6.91) and add '
      '927768 parameters; pass vocab=1000 in the config\'s argument string (or '
      '--config.model.vocab_size=1024, a multiple of 128)']


def test_pretraining_refuses_a_batch_the_mesh_cannot_split_before_making_the_corpus(tmp_path):
  """Hostile pass of 2026-12-01: the refusal came after the embedded corpus's TFRecords were made
  under the workdir (84 MB)."""
  from bertjax import pretrain as pretrain_job  # noqa: PLC0415  (imports TensorFlow)
  config = pretrain.get_config('size=tiny,steps=2,batch=12')  # 8 simulated devices: data=8.
  with pytest.raises(console.Refused, match='^global_batch_size 12 is not divisible by the '
                     'data-parallel size 8'):
    pretrain_job.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run' / 'data').exists()
  # Pass 33, item 4: a GPU kernel on the CPU mesh was refused in the loop, after the corpus.
  config = pretrain.get_config('size=tiny,steps=2')
  config.model.attention_impl = 'cudnn'
  with pytest.raises(ValueError, match='^model.attention_impl=cudnn is a GPU kernel and this run '
                     'is on cpu: use attention_impl=auto'):
    pretrain_job.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run' / 'data').exists()
