"""transformers folders a hostile user hands bertjax: both readers (hf_checkpoint.load for
init_from, hf_checkpoint.read for export, extract_features and embed) take them as transformers
does, or refuse them in one line; a model without BERT's pooler runs where nothing reads it."""

import dataclasses
import json

from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
from safetensors import numpy as st_numpy
import source_checks_test
import torch
import transformers

from bertjax import embed
from bertjax import extract_features
from bertjax.interop import hf_checkpoint
from bertjax.interop import saved_model
from bertjax.interop import sources
from bertjax.interop import tf1_checkpoint

make, edit_json = source_checks_test.make, source_checks_test.edit_json
TEXTS = source_checks_test.TEXTS


def readers(directory):
  """Both readers of a transformers folder, as init_from and export call them."""
  return (lambda: hf_checkpoint.load(directory, with_heads=True),
          lambda: hf_checkpoint.read(directory))


def rewrite_weights(directory, rename=lambda n: n, keep=lambda n: True):
  path = directory / 'model.safetensors'
  state = st_numpy.load_file(str(path))
  st_numpy.save_file({rename(n): v for n, v in state.items() if keep(n)}, str(path),
                     metadata={'format': 'pt'})


def test_old_gamma_beta_names_are_read_as_transformers_reads_them(tmp_path):
  """The original bert-base-uncased pytorch_model.bin: init_from reset every LayerNorm."""
  model = make(tmp_path / 'new', 'BertForPreTraining')
  old = tmp_path / 'old'
  make(old, 'BertForPreTraining')
  (old / 'model.safetensors').unlink()
  torch.save({n.replace('LayerNorm.weight', 'LayerNorm.gamma').replace(
      'LayerNorm.bias', 'LayerNorm.beta'): v for n, v in model.state_dict().items()},
             old / 'pytorch_model.bin')
  ref = transformers.BertForPreTraining.from_pretrained(str(old))  # transformers reads it.
  np.testing.assert_array_equal(ref.bert.embeddings.LayerNorm.weight.detach().numpy(),
                                model.bert.embeddings.LayerNorm.weight.detach().numpy())
  _, want, _ = hf_checkpoint.load(tmp_path / 'new')
  _, got, report = hf_checkpoint.load(old)
  assert not report.initialised and not report.unused, report.summary()
  np.testing.assert_array_equal(got['bert']['layers_1']['output_layer_norm']['scale'],
                                want['bert']['layers_1']['output_layer_norm']['scale'])
  np.testing.assert_array_equal(got['mlm']['layer_norm']['bias'], want['mlm']['layer_norm']['bias'])
  read = hf_checkpoint.read(old).params
  for name, value in hf_checkpoint.read(tmp_path / 'new').params.items():
    np.testing.assert_array_equal(read[name], value, err_msg=name)


def test_names_under_a_wrappers_prefix_are_refused_by_both_readers(tmp_path):
  """transformers loads none of `model.embeddings...` either; init_from started at random."""
  make(tmp_path)
  rewrite_weights(tmp_path, rename=lambda n: 'model.' + n)
  for reader in readers(tmp_path):
    with pytest.raises(ValueError, match=rf"^{tmp_path}/model.safetensors names its tensors "
                       r"under 'model.' \(model.embeddings.word_embeddings.weight, ...\), which "
                       r"transformers' BertModel does not load either .*: rename them"):
      reader()


def test_missing_encoder_tensors_are_refused_by_both_readers(tmp_path):
  """init_from initialised them at random and said so at INFO only."""
  make(tmp_path)
  rewrite_weights(tmp_path, keep=lambda n: 'token_type' not in n and 'pooler' not in n)
  for reader in readers(tmp_path):
    with pytest.raises(ValueError, match=rf"^{tmp_path}/model.safetensors lacks 1 of the "
                       r"encoder's tensors, e\.g\. embeddings\.token_type_embeddings\.weight: the "
                       'checkpoint is incomplete'):
      reader()


def test_a_missing_pooler_or_head_is_still_initialised_and_said(tmp_path):
  make(tmp_path, 'BertForMaskedLM')
  _, _, report = hf_checkpoint.load(tmp_path)
  assert sorted(report.initialised) == ['bert/pooler/bias', 'bert/pooler/kernel',
                                        'nsp/dense/bias', 'nsp/dense/kernel']


@pytest.mark.parametrize('cls', ['BertForMaskedLM', 'BertForQuestionAnswering'])
def test_a_model_without_a_pooler_runs_extract_features_and_embed(tmp_path, cls):
  """Both died in flax's ScopeParamNotFoundError '/pooler'."""
  model = make(tmp_path / 'model', cls)
  tok = transformers.BertTokenizerFast.from_pretrained(str(tmp_path / 'model'))
  enc = tok(TEXTS[:2], padding=True, return_tensors='pt')
  with torch.no_grad():
    want = model.bert(**enc).last_hidden_state.numpy()
  (tmp_path / 'in.txt').write_text('\n'.join(TEXTS[:2]) + '\n')
  extract_features.run(str(tmp_path / 'model'), str(tmp_path / 'in.txt'),
                       str(tmp_path / 'out.jsonl'), layers=(-1,), max_seq_length=32)
  lines = [json.loads(x) for x in (tmp_path / 'out.jsonl').read_text().splitlines()]
  for row, line in enumerate(lines):
    got = np.array([f['layers'][0]['values'] for f in line['features']])
    np.testing.assert_allclose(got, want[row, :len(got)], atol=1e-5)
  vectors = embed.Embedder.from_pretrained(tmp_path / 'model', pooling='mean').encode(TEXTS[:2])
  mask = enc['attention_mask'].numpy()[..., None]
  np.testing.assert_allclose(vectors, (want * mask).sum(1) / mask.sum(1), atol=1e-5)


def test_tf1_saved_model_and_sentence_transformers_refuse_a_model_without_a_pooler(tmp_path):
  """tf1 died in KeyError 'bert/pooler/kernel', saved_model in ScopeParamNotFoundError."""
  make(tmp_path / 'model', 'BertForMaskedLM')
  result = sources.load(tmp_path / 'model')
  for fmt, save in (('tf1', tf1_checkpoint.save), ('saved_model', saved_model.save)):
    with pytest.raises(ValueError, match=rf'^{tmp_path}/model has no pooler \(a masked-LM, span '
                       rf'or tagging model.*\): --format={fmt} carries one; use --format=hf '
                       r'or --format=onnx\.$'):
      save(result, tmp_path / fmt)
    assert not (tmp_path / fmt).exists()
  encoder_only = dataclasses.replace(result, kind='encoder', params=result.encoder_params())
  with pytest.raises(ValueError, match=r'has no pooler .* which the BertModel this export writes '
                     'carries: use --format=onnx'):
    hf_checkpoint.save(encoder_only, tmp_path / 'st')
  with pytest.raises(ValueError, match=r'carries one; use --format=onnx\.$'):  # hf refuses it.
    tf1_checkpoint.save(encoder_only, tmp_path / 'tf1')


@pytest.mark.parametrize('field, tensor, message', [
    ('max_position_embeddings', 'embeddings.position_embeddings.weight',
     r'\(64, 32\), but .*config.json implies \(128, 32\) \(max_position_embeddings=128, '
     r'hidden_size=32\)'),
    ('intermediate_size', 'encoder.layer.0.intermediate.dense.weight',
     r'\(64, 32\), but .*config.json implies \(128, 32\) \(hidden_size=32, '
     r'intermediate_size=128\)')])
def test_a_config_json_that_disagrees_with_the_weights_is_refused_when_read(tmp_path, field,
                                                                            tensor, message):
  """extract_features and embed died in ScopeParamShapeError; export --format=hf and tf1 wrote
  folders transformers refuses, and said "export finished"."""
  make(tmp_path)
  edit_json(tmp_path / 'config.json', **{field: 128})
  with pytest.raises(ValueError, match=rf'^{tensor} in {tmp_path}/model.safetensors has shape '
                     + message + ': fix config.json'):
    sources.load(tmp_path)
