"""Original TF1 BERT checkpoints in and out.

The reference checkpoint is written by TensorFlow's own v1 Saver from the real all-MiniLM-L6-v2
weights under google-research/bert's variable names, spelled out here independently of the
importer's table; the importer must match transformers on the same weights.
"""

import json
import shutil

import hf_checkpoint_test
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
import torch
import transformers

from bertjax.interop import init_from
from bertjax.interop import tf1_checkpoint
from bertjax.model import encoder
from bertjax.model import encoder_config
from bertjax.model import heads
from bertjax.text import fast_tokenizer

SENTENCES = hf_checkpoint_test.SENTENCES


def original_names(hf_state: dict, num_layers: int) -> dict:
  """google-research/bert's variable name -> value, from a transformers state dict."""
  s = {k[len('bert.'):] if k.startswith('bert.') else k: v.numpy() for k, v in hf_state.items()}
  out = {
      'bert/embeddings/word_embeddings': s['embeddings.word_embeddings.weight'],
      'bert/embeddings/position_embeddings': s['embeddings.position_embeddings.weight'],
      'bert/embeddings/token_type_embeddings': s['embeddings.token_type_embeddings.weight'],
      'bert/embeddings/LayerNorm/gamma': s['embeddings.LayerNorm.weight'],
      'bert/embeddings/LayerNorm/beta': s['embeddings.LayerNorm.bias'],
      'bert/pooler/dense/kernel': s['pooler.dense.weight'].T,
      'bert/pooler/dense/bias': s['pooler.dense.bias'],
  }
  for i in range(num_layers):
    t, h = f'bert/encoder/layer_{i}/', f'encoder.layer.{i}.'
    pairs = {'attention/self/query': 'attention.self.query',
             'attention/self/key': 'attention.self.key',
             'attention/self/value': 'attention.self.value',
             'attention/output/dense': 'attention.output.dense',
             'intermediate/dense': 'intermediate.dense', 'output/dense': 'output.dense'}
    for tf_name, hf_name in pairs.items():
      out[f'{t}{tf_name}/kernel'] = s[f'{h}{hf_name}.weight'].T
      out[f'{t}{tf_name}/bias'] = s[f'{h}{hf_name}.bias']
    for tf_name, hf_name in (('attention/output/LayerNorm', 'attention.output.LayerNorm'),
                             ('output/LayerNorm', 'output.LayerNorm')):
      out[f'{t}{tf_name}/gamma'] = s[f'{h}{hf_name}.weight']
      out[f'{t}{tf_name}/beta'] = s[f'{h}{hf_name}.bias']
  if 'cls.predictions.bias' in s:
    out.update({
        'cls/predictions/transform/dense/kernel': s['cls.predictions.transform.dense.weight'].T,
        'cls/predictions/transform/dense/bias': s['cls.predictions.transform.dense.bias'],
        'cls/predictions/transform/LayerNorm/gamma':
            s['cls.predictions.transform.LayerNorm.weight'],
        'cls/predictions/transform/LayerNorm/beta': s['cls.predictions.transform.LayerNorm.bias'],
        'cls/predictions/output_bias': s['cls.predictions.bias'],
        'cls/seq_relationship/output_weights': s['cls.seq_relationship.weight'],
        'cls/seq_relationship/output_bias': s['cls.seq_relationship.bias'],
    })
  return out


def write_with_tf_saver(variables: dict, folder, hf_config: dict, vocab_file, slots=True):
  """A TF1 checkpoint as google-research/bert saves one: tf.compat.v1.train.Saver, with the Adam
  slots and global_step that run_pretraining.py leaves beside the weights."""
  tf, _ = fast_tokenizer.import_tf()
  folder.mkdir(parents=True, exist_ok=True)
  graph = tf.Graph()
  with graph.as_default():
    tf_vars = [tf.compat.v1.get_variable(name, initializer=tf.constant(value))
               for name, value in variables.items()]
    if slots:
      for name, value in list(variables.items())[:3]:
        tf_vars.append(tf.compat.v1.get_variable(f'{name}/adam_m', initializer=value * 0))
        tf_vars.append(tf.compat.v1.get_variable(f'{name}/adam_v', initializer=value * 0))
      tf_vars.append(tf.compat.v1.train.get_or_create_global_step())
    saver = tf.compat.v1.train.Saver(tf_vars)
    with tf.compat.v1.Session(graph=graph) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, str(folder / 'bert_model.ckpt'), write_meta_graph=False)
  (folder / 'bert_config.json').write_text(json.dumps({
      'attention_probs_dropout_prob': 0.1, 'hidden_act': 'gelu', 'hidden_dropout_prob': 0.1,
      'hidden_size': hf_config['hidden_size'], 'initializer_range': 0.02,
      'intermediate_size': hf_config['intermediate_size'],
      'max_position_embeddings': hf_config['max_position_embeddings'],
      'num_attention_heads': hf_config['num_attention_heads'],
      'num_hidden_layers': hf_config['num_hidden_layers'], 'type_vocab_size': 2,
      'vocab_size': hf_config['vocab_size']}))
  shutil.copy(vocab_file, folder / 'vocab.txt')
  return folder


@pytest.fixture(scope='module')
def minilm_tf1(minilm_dir, tmp_path_factory):
  ref = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
  hf_config = json.loads((minilm_dir / 'config.json').read_text())
  folder = write_with_tf_saver(original_names(ref.state_dict(), 6),
                               tmp_path_factory.mktemp('tf1') / 'minilm', hf_config,
                               minilm_dir / 'vocab.txt')
  return folder, ref


def test_tf1_import_matches_transformers(minilm_dir, minilm_tf1):
  folder, ref = minilm_tf1
  result = tf1_checkpoint.load(folder)
  assert result.kind == 'encoder' and result.do_lower_case
  assert set(result.ignored) >= {'global_step', 'bert/embeddings/word_embeddings/adam_m'}
  cfg = encoder_config.default_config(**result.config)
  batch = hf_checkpoint_test.hf_batch(minilm_dir, SENTENCES, SENTENCES[::-1])
  tree = init_from.read_params(folder, with_heads=False)['bert']
  seq, pooled = encoder.BertEncoder(cfg).apply({'params': tree}, **batch)
  with torch.no_grad():
    out = ref(**hf_checkpoint_test.torch_inputs(batch))
  np.testing.assert_allclose(np.asarray(seq), out.last_hidden_state.numpy(), atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(pooled), out.pooler_output.numpy(), atol=1e-5, rtol=0)
  # The prefix works as well as the folder, and init_from reads the architecture and vocab.
  assert tf1_checkpoint.load(folder / 'bert_model.ckpt').params.keys() == result.params.keys()
  assert init_from.model_config(str(folder))['num_layers'] == 6
  assert init_from.vocab_file(str(folder / 'bert_model.ckpt')) == str(folder / 'vocab.txt')


def test_tf1_import_with_heads_matches_transformers_pretraining(minilm_dir, tmp_path):
  config = transformers.BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=128)
  torch.manual_seed(0)
  ref = transformers.BertForPreTraining(config).eval()
  folder = write_with_tf_saver(original_names(ref.state_dict(), 2), tmp_path / 'pt',
                               config.to_dict(), minilm_dir / 'vocab.txt')
  result = tf1_checkpoint.load(folder)
  assert result.kind == 'pretraining'
  cfg = encoder_config.default_config(**result.config)
  tree = init_from.read_params(folder, with_heads=True)
  batch = hf_checkpoint_test.hf_batch(minilm_dir, SENTENCES, SENTENCES[::-1])
  positions = np.tile(np.arange(1, 6, dtype=np.int32), (len(SENTENCES), 1))
  mlm, nsp = heads.BertForPreTraining(cfg).apply({'params': tree}, **batch,
                                                 masked_lm_positions=positions)
  with torch.no_grad():
    out = ref(**hf_checkpoint_test.torch_inputs(batch))
  ref_mlm = np.take_along_axis(out.prediction_logits.numpy(), positions[..., None], axis=1)
  np.testing.assert_allclose(np.asarray(mlm), ref_mlm, atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(nsp), out.seq_relationship_logits.numpy(), atol=1e-5,
                             rtol=0)


def test_tf1_round_trip_is_bit_identical(minilm_tf1, tmp_path):
  folder, _ = minilm_tf1
  result = tf1_checkpoint.load(folder)
  out = tmp_path / 'out'
  out.mkdir()
  tf1_checkpoint.save(result, out)
  tf, _ = fast_tokenizer.import_tf()
  before = tf.train.load_checkpoint(str(folder / 'bert_model.ckpt'))
  after = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(out)))
  weights = {n for n in before.get_variable_to_shape_map() if n not in result.ignored}
  assert set(after.get_variable_to_shape_map()) == weights
  for name in weights:
    np.testing.assert_array_equal(after.get_tensor(name), before.get_tensor(name), err_msg=name)
  assert json.loads((out / 'bert_config.json').read_text()) == json.loads(
      (folder / 'bert_config.json').read_text())


def test_tf1_bad_input_names_the_tensor(minilm_dir, tmp_path):
  config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=64)
  torch.manual_seed(0)
  variables = original_names(transformers.BertModel(config).state_dict(), 2)
  missing = dict(variables)
  del missing['bert/encoder/layer_1/output/dense/kernel']
  folder = write_with_tf_saver(missing, tmp_path / 'missing', config.to_dict(),
                               minilm_dir / 'vocab.txt', slots=False)
  with pytest.raises(ValueError, match='lacks the tensor bert/encoder/layer_1/output/dense/kernel'):
    tf1_checkpoint.load(folder)

  folder = write_with_tf_saver(variables, tmp_path / 'shape', config.to_dict(),
                               minilm_dir / 'vocab.txt', slots=False)
  wrong = json.loads((folder / 'bert_config.json').read_text())
  wrong['intermediate_size'] = 96
  (folder / 'bert_config.json').write_text(json.dumps(wrong))
  with pytest.raises(ValueError, match='intermediate/dense/kernel in .* has shape'):
    tf1_checkpoint.load(folder)

  folder = write_with_tf_saver(variables, tmp_path / 'vocab', config.to_dict(),
                               minilm_dir / 'vocab.txt', slots=False)
  (folder / 'vocab.txt').write_text('[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n')
  with pytest.raises(ValueError, match='vocab file .* has 5 entries but .* 30522 rows'):
    tf1_checkpoint.load(folder)

  (folder / 'bert_model.ckpt.data-00000-of-00001').write_bytes(b'\0' * 100)
  with pytest.raises(ValueError, match='incomplete or damaged'):
    tf1_checkpoint.load(folder)


def test_nvidia_padded_vocab_is_accepted(minilm_dir, tmp_path):
  """NVIDIA pads the 30,522-entry vocab to 30,528 embedding rows."""
  config = transformers.BertConfig(vocab_size=30528, hidden_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, intermediate_size=64)
  variables = original_names(transformers.BertModel(config).state_dict(), 1)
  folder = write_with_tf_saver(variables, tmp_path / 'nv', config.to_dict(),
                               minilm_dir / 'vocab.txt', slots=False)
  result = tf1_checkpoint.load(folder)
  assert result.params['bert/embeddings/word_embeddings/embedding'].shape[0] == 30528
  assert result.vocab_entries() == 30522


def test_a_bert_config_file_without_the_models_shape_is_one_line(minilm_dir, tmp_path):
  """--bert_config_file={} (or a bertjax run's config.json) gave KeyError 'vocab_size'."""
  config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=64)
  torch.manual_seed(0)
  folder = write_with_tf_saver(original_names(transformers.BertModel(config).state_dict(), 2),
                               tmp_path / 'tf1', config.to_dict(), minilm_dir / 'vocab.txt',
                               slots=False)
  config_file = tmp_path / 'config.json'
  for text, missing in (('{}', 'vocab_size, hidden_size, num_hidden_layers, num_attention_heads, '
                               'intermediate_size'),
                        (json.dumps({'job': 'pretrain', 'model': config.to_dict()}),
                         'vocab_size, hidden_size, num_hidden_layers, num_attention_heads, '
                         'intermediate_size'),
                        (json.dumps({k: v for k, v in config.to_dict().items()
                                     if k != 'num_attention_heads'}), 'num_attention_heads')):
    config_file.write_text(text)
    with pytest.raises(ValueError, match=rf'^{config_file} lacks {missing}: not a BERT '
                       r'config \(it sets .*\); pass the bert_config.json released with the '
                       'checkpoint'):
      tf1_checkpoint.load(folder / 'bert_model.ckpt', config_file=config_file)


def test_a_folder_whose_config_is_given_apart_is_read(minilm_tf1, tmp_path):
  """Pass T: --init_checkpoint=FOLDER --bert_config_file=CONFIG (the config kept elsewhere, as
  the original scripts allow) said the folder needed a bert_config.json."""
  import shutil  # pylint: disable=g-import-not-at-top
  folder, _ = minilm_tf1
  bare = tmp_path / 'bare'
  shutil.copytree(folder, bare)
  (bare / 'bert_config.json').rename(tmp_path / 'config.json')
  result = tf1_checkpoint.load(bare, config_file=tmp_path / 'config.json')
  assert result.params.keys() == tf1_checkpoint.load(folder).params.keys()
