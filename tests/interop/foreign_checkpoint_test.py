"""Checkpoints made elsewhere that are not quite BERT: refused in one line, or read and said.

A tensor inside the encoder that BERT has none of (relative positions, an adapter), a quantized
weight, custom modelling code (auto_map), a config field of the wrong type, a Git LFS pointer in
the weights' place, a TF1 folder holding several checkpoints: each was read silently wrong or
died in a traceback. Tensors outside the encoder (a custom head) are not read, and said so.
"""

import json
import logging
import re

import jax
import numpy as np
import pytest
from safetensors import numpy as st_numpy
import source_checks_test
import tf1_checkpoint_test
import torch
import transformers

from bertjax import embed
from bertjax.interop import hf_checkpoint
from bertjax.interop import init_from
from bertjax.interop import sources
from bertjax.interop import tf1_checkpoint

make, edit_json = source_checks_test.make, source_checks_test.edit_json


def readers(directory):
  """Both readers of a transformers folder: init_from's, and export / extract / embed's."""
  return (lambda: hf_checkpoint.load(directory, with_heads=False),
          lambda: sources.load(directory))


def add_tensors(directory, **tensors):
  path = directory / 'model.safetensors'
  state = st_numpy.load_file(str(path))
  st_numpy.save_file({**state, **tensors}, str(path), metadata={'format': 'pt'})


def test_a_tensor_inside_the_encoder_that_bert_has_none_of_is_refused(tmp_path):
  """A relative-position table was dropped and the model run without it."""
  make(tmp_path)
  add_tensors(tmp_path, **{'encoder.layer.0.attention.self.distance_embedding.weight':
                           np.ones((127, 8), np.float32)})
  for read in readers(tmp_path):
    with pytest.raises(ValueError, match=r'holds 1 tensors inside the encoder that BERT has none '
                       r'of, e\.g\. encoder\.layer\.0\.attention\.self\.distance_embedding'):
      read()


def test_a_tensor_outside_bert_is_not_read_and_said(tmp_path, caplog):
  make(tmp_path, 'BertForMaskedLM')  # No pooler: drawn, and said as such.
  add_tensors(tmp_path, **{'adapter.weight': np.ones((4, 4), np.float32)})
  with caplog.at_level(logging.WARNING):
    sources.load(tmp_path)
  said, = [r.getMessage() for r in caplog.records if 'adapter.weight' in r.getMessage()]
  assert "1 tensors are not BERT's and are not read" in said
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    read = init_from.read_params_and_source(str(tmp_path), with_heads=False)
  assert read.unused == ('adapter.weight', 'cls.predictions.bias',
                         'cls.predictions.transform.LayerNorm.bias',
                         'cls.predictions.transform.LayerNorm.weight',
                         'cls.predictions.transform.dense.bias',
                         'cls.predictions.transform.dense.weight')
  assert read.fresh == ('bert/pooler/bias', 'bert/pooler/kernel')
  assert any('holds no bert/pooler/bias, bert/pooler/kernel: they start at random'
             in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_quantized_weights_are_refused(tmp_path):
  """int8 weights were read as floats (42.0, -58.0, ...) and their scales dropped."""
  make(tmp_path)
  add_tensors(tmp_path, **{'encoder.layer.0.output.dense.weight': np.ones((32, 64), np.int8)})
  for read in readers(tmp_path):
    with pytest.raises(ValueError, match=r'stores 1 tensors as integers, e\.g\. '
                       r'encoder\.layer\.0\.output\.dense\.weight \(int8\): a quantized'):
      read()
  make(tmp_path / 'said')
  edit_json(tmp_path / 'said' / 'config.json',
            quantization_config={'quant_method': 'bitsandbytes', 'load_in_8bit': True})
  for read in readers(tmp_path / 'said'):
    with pytest.raises(ValueError, match='has a quantization_config: its weights are quantized'):
      read()


def test_custom_modelling_code_is_refused_by_its_auto_map(tmp_path):
  make(tmp_path)
  edit_json(tmp_path / 'config.json', auto_map={'AutoModel': 'bert_layers.BertModel'})
  for read in readers(tmp_path):
    with pytest.raises(ValueError, match=r'has an auto_map \(AutoModel\): its model is custom '
                       'code'):
      read()


@pytest.mark.parametrize('field, value', [
    ('hidden_size', 32.0), ('vocab_size', '128'), ('num_hidden_layers', None),
    ('max_position_embeddings', None), ('layer_norm_eps', None), ('hidden_act', ['gelu']),
    ('hidden_dropout_prob', 1.5), ('type_vocab_size', True)])
def test_a_config_field_of_the_wrong_type_is_one_line(tmp_path, field, value):
  """Each died in ml_collections, jit or the model build (TypeError, unhashable list, ...)."""
  make(tmp_path)
  edit_json(tmp_path / 'config.json', **{field: value})
  said = re.escape(f'config.json says {field}: {json.dumps(value)}, not ')
  for read in readers(tmp_path):
    with pytest.raises(ValueError, match=said):
      read()


def test_a_git_lfs_pointer_in_the_weights_place_says_to_pull(tmp_path):
  pointer = (b'version https://git-lfs.github.com/spec/v1\noid sha256:' + b'0' * 64
             + b'\nsize 90868376\n')
  make(tmp_path)
  (tmp_path / 'model.safetensors').write_bytes(pointer)
  for read in readers(tmp_path):
    with pytest.raises(ValueError, match=r'model\.safetensors is a Git LFS pointer .* run `git '
                       'lfs install && git lfs pull`'):
      read()
  (tmp_path / 'model.safetensors').unlink()
  (tmp_path / 'pytorch_model.bin').write_bytes(pointer)
  with pytest.raises(ValueError, match=r'pytorch_model\.bin is a Git LFS pointer'):
    sources.load(tmp_path)
  (tmp_path / 'pytorch_model.bin').unlink()
  (tmp_path / 'model.safetensors').mkdir()  # Was 'No such device (os error 19)... corrupt'.
  for read in readers(tmp_path):
    with pytest.raises(ValueError, match=r'model\.safetensors is a folder, not the weights file'):
      read()


def test_a_pickle_of_more_than_tensors_is_refused_without_torchs_advice(tmp_path):
  """torch's message advised weights_only=False, which runs the file's code."""
  make(tmp_path)
  (tmp_path / 'model.safetensors').unlink()
  torch.save({'embeddings.word_embeddings.weight': torch.zeros(2), 'note': object.__new__(
      transformers.BertConfig)}, tmp_path / 'pytorch_model.bin')
  with pytest.raises(ValueError) as raised:
    sources.load(tmp_path)
  assert 'holds objects besides tensors, which bertjax does not unpickle' in str(raised.value)
  assert 'weights_only' not in str(raised.value)


def test_embed_with_a_vocab_without_cls_is_one_line(tmp_path):
  make(tmp_path, vocab=['[PAD]', '[UNK]', '[CLX]', *source_checks_test.VOCAB[3:]])
  (tmp_path / 'tokenizer.json').unlink()
  with pytest.raises(ValueError, match=r'has no \[CLS\] entry, which BERT builds its inputs'):
    embed.Embedder.from_pretrained(tmp_path)


@pytest.fixture(scope='module')
def tf1_variables():
  config = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, intermediate_size=64,
                                   max_position_embeddings=64)
  torch.manual_seed(0)
  return tf1_checkpoint_test.original_names(transformers.BertModel(config).state_dict(), 1), config


def write_tf1(folder, variables, config):
  vocab = folder.parent / f'{folder.name}_vocab.txt'
  folder.parent.mkdir(parents=True, exist_ok=True)
  vocab.write_text(''.join(f'{t}\n' for t in source_checks_test.VOCAB))
  return tf1_checkpoint_test.write_with_tf_saver(variables, folder, config.to_dict(), vocab)


def test_tf1_tensors_that_are_not_berts_are_refused_inside_the_encoder_and_said_outside(
    tmp_path, tf1_variables, caplog):
  variables, config = tf1_variables
  write_tf1(tmp_path / 'inside', {
      **variables,
      'bert/encoder/layer_0/attention/self/relative_positions_embeddings': np.ones((8, 16),
                                                                                np.float32)},
      config)
  with pytest.raises(ValueError, match=r'holds 1 tensors inside the encoder \(bert/\) that BERT '
                     r'has none of, e\.g\. bert/encoder/layer_0/attention/self/relative_pos'):
    tf1_checkpoint.load(tmp_path / 'inside')
  write_tf1(tmp_path / 'outside', {**variables, 'adapter/kernel': np.ones((4, 4), np.float32)},
            config)
  with caplog.at_level(logging.WARNING):
    result = tf1_checkpoint.load(tmp_path / 'outside')  # Adam slots, global_step: not said.
  said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
  assert len(said) == 1 and "1 tensors are not BERT's and are not read" in said[0], said
  assert 'adapter/kernel' in said[0] and 'adam_m' not in said[0]
  assert 'adapter/kernel' in result.ignored


def test_a_tf1_folder_of_several_checkpoints_names_them_rather_than_pick_one(
    tmp_path, tf1_variables):
  """bert_model.ckpt was read beside a fine-tuned model.ckpt-5000, which TF would read."""
  variables, config = tf1_variables
  folder = write_tf1(tmp_path / 'run', variables, config)
  for suffix in ('index', 'data-00000-of-00001'):
    (folder / f'model.ckpt-5000.{suffix}').write_bytes(
        (folder / f'bert_model.ckpt.{suffix}').read_bytes())
  with pytest.raises(ValueError, match=r'holds 2 checkpoints \(bert_model\.ckpt\.index, '
                     r'model\.ckpt-5000\.index\): pass the prefix of the one to read, e\.g\. '
                     r'.*model\.ckpt-5000$'):
    tf1_checkpoint.load(folder)
  assert tf1_checkpoint.load(folder / 'model.ckpt-5000').source == str(folder / 'model.ckpt-5000')


def test_a_tf1_config_that_says_another_layer_norm_eps_is_refused(tmp_path, tf1_variables):
  variables, config = tf1_variables
  folder = write_tf1(tmp_path / 'eps', variables, config)
  edit_json(folder / 'bert_config.json', layer_norm_eps=1e-5)
  with pytest.raises(ValueError, match=r"says layer_norm_eps: 1e-05, which google-research/bert's "
                     'modeling.py does not read'):
    tf1_checkpoint.load(folder)
  edit_json(folder / 'bert_config.json', layer_norm_eps=1e-12)  # The one it fixes: read.
  assert tf1_checkpoint.load(folder).config['layer_norm_eps'] == 1e-12


def test_fine_tunings_report_counts_a_pooler_the_checkpoint_lacks_as_fresh(tmp_path):
  """From a BertForMaskedLM (no pooler) the run said 'loaded 39 encoder tensors', the pooler
  drawn at random among them, and 'its encoder tensors not used: none' beside a custom head."""
  make(tmp_path, 'BertForMaskedLM')
  add_tensors(tmp_path, **{'adapter.weight': np.ones((4, 4), np.float32)})
  _, encoder_params, _ = hf_checkpoint.load(tmp_path, with_heads=False)
  params = {'bert': encoder_params, 'classifier': {'kernel': np.zeros((32, 2), np.float32)}}
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  _, report = init_from.load_encoder(str(tmp_path), params,
                                     jax.tree.map(lambda _: device, params), 2)
  assert report['lacked'] == ['bert/pooler/bias', 'bert/pooler/kernel']
  assert not any(p.startswith('bert/pooler/') for p in report['loaded'])
  assert len(report['loaded']) == len(jax.tree.leaves(encoder_params)) - 2
  assert report['fresh'] == ['classifier/kernel']
  assert 'adapter.weight' in report['unused'] and 'cls.predictions.bias' in report['unused']


def test_tf1_tensors_under_a_prefix_are_named_with_it(tmp_path, tf1_variables):
  """Said as 'lacks the tensor ...: the checkpoint is incomplete'."""
  variables, config = tf1_variables
  folder = write_tf1(tmp_path / 'wrapped', {f'model/{k}': v for k, v in variables.items()},
                     config)
  with pytest.raises(ValueError, match=r"names its tensors under 'model/' \(model/bert/embeddings/"
                     r'word_embeddings, \.\.\.\).*without \'model/\''):
    tf1_checkpoint.load(folder)


def test_a_tf1_config_given_for_a_transformers_folder_says_to_drop_it(tmp_path):
  """Said as '... is not a TF1 BERT checkpoint'."""
  make(tmp_path / 'hf')
  (tmp_path / 'bert_config.json').write_text('{}')
  with pytest.raises(ValueError, match=r'is a transformers folder, whose config\.json describes '
                     r'it: drop --bert_config_file='):
    sources.load(tmp_path / 'hf', bert_config_file=str(tmp_path / 'bert_config.json'))


def test_a_wordpiece_of_another_continuation_prefix_is_refused(tmp_path):
  make(tmp_path)
  settings = json.loads((tmp_path / 'tokenizer.json').read_text())
  settings['model']['continuing_subword_prefix'] = '@@'
  (tmp_path / 'tokenizer.json').write_text(json.dumps(settings))
  for read in readers(tmp_path):
    with pytest.raises(ValueError, match='marks a word\'s continuing pieces with "@@", not BERT'):
      read()


@pytest.mark.parametrize('field, value, message', [
    # Read by the fast tokenizer (transformers 4, the tokenizers library) as written: words split
    # or cleaned otherwise than bertjax's tokenizer splits them, each read without a word.
    ('pre_tokenizer', {'type': 'Whitespace'}, r'pre_tokenizer is \{"type": "Whitespace"\}, not '
     "BERT's \\(BertPreTokenizer"),
    ('pre_tokenizer', {'type': 'Metaspace', 'replacement': '_', 'prepend_scheme': 'always',
                       'split': True}, 'pre_tokenizer is .*Metaspace'),
    ('pre_tokenizer', None, 'pre_tokenizer is null, not BERT'),
    ('normalizer.handle_chinese_chars', False, 'BertNormalizer sets handle_chinese_chars: false: '
     "bertjax's tokenizer, the original BERT's, splits Chinese characters"),
    ('normalizer.clean_text', False, 'BertNormalizer sets clean_text: false'),
    ('normalizer.strip_accents', False, r'BertNormalizer sets strip_accents: false \(lowercase '
     r'true\): .* strips accents exactly when it lower-cases'),
])
def test_a_tokenizer_json_that_splits_or_cleans_text_otherwise_is_refused(tmp_path, field, value,
                                                                          message):
  make(tmp_path)
  path = tmp_path / 'tokenizer.json'
  settings = json.loads(path.read_text())
  *parents, name = field.split('.')
  place = settings
  for parent in parents:
    place = place[parent]
  assert (settings['pre_tokenizer'], settings['normalizer']['type']) == (
      {'type': 'BertPreTokenizer'}, 'BertNormalizer')  # BERT's, which the folder had.
  place[name] = value
  path.write_text(json.dumps(settings))
  for read in readers(tmp_path):
    with pytest.raises(ValueError, match=message):
      read()


def test_a_tokenizer_json_that_splits_as_bert_does_is_read(tmp_path):
  make(tmp_path)
  path = tmp_path / 'tokenizer.json'
  settings = json.loads(path.read_text())
  settings['pre_tokenizer'] = {'type': 'Sequence', 'pretokenizers': [
      {'type': 'WhitespaceSplit'}, {'type': 'BertPreTokenizer'}]}
  settings['normalizer']['strip_accents'] = True  # Lower-cased: BERT strips accents too.
  path.write_text(json.dumps(settings))
  for read in readers(tmp_path):
    read()


def test_an_hf_export_keeps_the_fields_transformers_reads_that_bertjax_does_not_model(tmp_path):
  """pad_token_id 1 became 0 (transformers' training keeps that embedding row still) and
  classifier_dropout was dropped."""
  from bertjax import export  # pylint: disable=g-import-not-at-top
  make(tmp_path / 'hf', 'BertForSequenceClassification', num_labels=2, pad_token_id=1,
       classifier_dropout=0.25)
  out = export.export(tmp_path / 'hf', 'hf', tmp_path / 'out')
  written = json.loads((out / 'config.json').read_text())
  assert (written['pad_token_id'], written['classifier_dropout']) == (1, 0.25)
  model = transformers.BertForSequenceClassification.from_pretrained(str(out))
  assert model.bert.embeddings.word_embeddings.padding_idx == 1
  make(tmp_path / 'plain')  # Unset (null classifier_dropout): transformers' defaults, as before.
  written = json.loads((export.export(tmp_path / 'plain', 'hf', tmp_path / 'out2')
                        / 'config.json').read_text())
  assert written['pad_token_id'] == 0 and 'classifier_dropout' not in written
