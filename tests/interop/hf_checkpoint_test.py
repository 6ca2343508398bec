"""Parity with transformers' PyTorch BERT on the same weights, and import error handling.

The models run jitted, as the commands run them: op by op, each primitive compiled on its own
(the file's tests took 22 s of CPU time on 2 cores, against 16 s).
"""

import json
import pathlib
import shutil
import subprocess
import sys

import jax
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
import torch
import transformers

from bertjax.interop import hf_checkpoint
from bertjax.interop import sources
from bertjax.model import encoder
from bertjax.model import heads

SENTENCES = [
    'The weather is lovely today.',
    "It's so sunny outside!",
    'He drove to the stadium.',
    'A man is playing a guitar on a stage in front of a large, cheering crowd at night.',
]


def hf_batch(directory, sentences, pairs=None):
  tok = transformers.BertTokenizerFast.from_pretrained(str(directory))
  enc = tok(sentences, pairs, padding=True, return_tensors='np')
  return {'input_ids': enc['input_ids'].astype(np.int32),
          'input_mask': enc['attention_mask'].astype(np.int32),
          'segment_ids': enc['token_type_ids'].astype(np.int32)}


def torch_inputs(batch):
  return dict(input_ids=torch.tensor(batch['input_ids'], dtype=torch.long),
              attention_mask=torch.tensor(batch['input_mask'], dtype=torch.long),
              token_type_ids=torch.tensor(batch['segment_ids'], dtype=torch.long))


@pytest.fixture(scope='module')
def minilm(minilm_dir):
  cfg, params, report = hf_checkpoint.load(minilm_dir, with_heads=False,
                                           vocab_file=minilm_dir / 'vocab.txt')
  return cfg, params, report


def test_minilm_matches_transformers(minilm_dir, minilm):
  cfg, params, report = minilm
  assert not report.initialised, report.summary()  # Encoder + pooler are all in the file.
  batch = hf_batch(minilm_dir, SENTENCES, SENTENCES[::-1])
  assert (batch['input_mask'] == 0).any() and (batch['segment_ids'] == 1).any()
  seq, pooled = jax.jit(encoder.BertEncoder(cfg).apply)({'params': params}, **batch)
  ref = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
  with torch.no_grad():
    out = ref(**torch_inputs(batch))
  mask = batch['input_mask'].astype(bool)
  ref_seq = out.last_hidden_state.numpy()
  # Padded positions are compared too: both models compute them the same way.
  np.testing.assert_allclose(np.asarray(seq)[mask], ref_seq[mask], atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(seq), ref_seq, atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(pooled), out.pooler_output.numpy(), atol=1e-5, rtol=0)


def test_minilm_sentence_embedding_golden(minilm_dir, minilm):
  from bertjax import embed  # noqa: PLC0415
  cfg, params, _ = minilm
  vectors = embed.embed_sentences(cfg, params, embed.load_tokenizer(minilm_dir), SENTENCES[:3])
  cosine = np.asarray(vectors @ vectors.T)
  golden = np.array([[1, .6660, .1046], [.6660, 1, .1411], [.1046, .1411, 1]])
  np.testing.assert_allclose(cosine, golden, atol=1e-3)


def random_pretraining_checkpoint(directory: pathlib.Path, prefix_bert=True):
  """A randomly initialised non-square transformers BertForPreTraining, saved to disk."""
  torch.manual_seed(0)
  hf_config = transformers.BertConfig(
      vocab_size=1000, hidden_size=96, num_hidden_layers=3, num_attention_heads=4,
      intermediate_size=200, max_position_embeddings=64, type_vocab_size=2)
  ref = transformers.BertForPreTraining(hf_config).eval()
  with torch.no_grad():  # Non-zero biases and LayerNorm affine, so that all of them are tested.
    for name, p in ref.named_parameters():
      if name.endswith('bias') or 'LayerNorm' in name:
        p.add_(torch.randn_like(p) * 0.1)
  ref.save_pretrained(str(directory))
  return ref


@pytest.mark.parametrize('scan_layers', [False, True])
def test_pretraining_heads_match_transformers(tmp_path, scan_layers):
  ref = random_pretraining_checkpoint(tmp_path)
  cfg, params, report = hf_checkpoint.load(tmp_path, scan_layers=scan_layers)
  assert not report.initialised, report.summary()
  rng = np.random.default_rng(0)
  ids = rng.integers(1, 1000, size=(3, 20)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 12:] = 0
  mask[2, 5:] = 0
  segments = (np.arange(20)[None] >= 8).astype(np.int32).repeat(3, 0) * mask
  positions = np.array([[1, 5, 19], [2, 3, 11], [0, 4, 4]], np.int32)
  mlm, nsp = jax.jit(heads.BertForPreTraining(cfg).apply)(
      {'params': params}, ids, mask, segments, positions)
  with torch.no_grad():
    out = ref(**torch_inputs({'input_ids': ids, 'input_mask': mask, 'segment_ids': segments}))
  ref_mlm = np.take_along_axis(out.prediction_logits.numpy(), positions[..., None], axis=1)
  np.testing.assert_allclose(np.asarray(mlm), ref_mlm, atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(nsp), out.seq_relationship_logits.numpy(), atol=1e-5,
                             rtol=0)


def test_import_without_heads_reports_them(tmp_path, minilm_dir):
  cfg, params, report = hf_checkpoint.load(minilm_dir, with_heads=True)
  assert sorted(report.initialised) == sorted([
      'mlm/transform/kernel', 'mlm/transform/bias', 'mlm/layer_norm/scale',
      'mlm/layer_norm/bias', 'mlm/output_bias', 'nsp/dense/kernel', 'nsp/dense/bias'])
  assert 'initialised fresh (7)' in report.summary()
  assert params['mlm']['transform']['kernel'].shape == (cfg.hidden_size, cfg.hidden_size)
  assert np.std(params['nsp']['dense']['kernel']) > 0.01  # Truly initialised, not zeros.


def test_import_bin_without_prefix(tmp_path):
  """pytorch_model.bin, BertModel names (no `bert.` prefix), no heads."""
  torch.manual_seed(1)
  hf_config = transformers.BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=48)
  ref = transformers.BertModel(hf_config).eval()
  torch.save(ref.state_dict(), tmp_path / 'pytorch_model.bin')
  hf_config.to_json_file(str(tmp_path / 'config.json'))
  cfg, params, report = hf_checkpoint.load(tmp_path, with_heads=False)
  assert not report.initialised
  ids = np.arange(1, 25, dtype=np.int32).reshape(2, 12)
  seq, _ = jax.jit(encoder.BertEncoder(cfg).apply)({'params': params}, ids, np.ones_like(ids),
                                                 np.zeros_like(ids))
  with torch.no_grad():
    want = ref(input_ids=torch.tensor(ids, dtype=torch.long)).last_hidden_state.numpy()
  np.testing.assert_allclose(np.asarray(seq), want, atol=1e-5, rtol=0)


def test_bad_checkpoints(tmp_path, minilm_dir):
  with pytest.raises(FileNotFoundError, match='does not exist'):
    hf_checkpoint.load(tmp_path / 'nope')
  with pytest.raises(FileNotFoundError, match='config.json not found'):
    hf_checkpoint.load(tmp_path)
  shutil.copy(minilm_dir / 'config.json', tmp_path / 'config.json')
  with pytest.raises(FileNotFoundError, match='neither model.safetensors'):
    hf_checkpoint.load(tmp_path)
  # A truncated safetensors file.
  data = (minilm_dir / 'model.safetensors').read_bytes()
  (tmp_path / 'model.safetensors').write_bytes(data[: len(data) // 3])
  with pytest.raises(ValueError, match='corrupt or truncated'):
    hf_checkpoint.load(tmp_path)
  # config.json that contradicts the weights' vocabulary.
  (tmp_path / 'model.safetensors').write_bytes(data)
  bad = json.loads((minilm_dir / 'config.json').read_text())
  bad['vocab_size'] = 30000
  (tmp_path / 'config.json').write_text(json.dumps(bad))
  with pytest.raises(ValueError, match='embeddings.word_embeddings.weight has 30522 rows'):
    hf_checkpoint.load(tmp_path)
  # A hidden size that does not fit the weights names the tensor.
  bad = json.loads((minilm_dir / 'config.json').read_text())
  bad['intermediate_size'] = 1024
  (tmp_path / 'config.json').write_text(json.dumps(bad))
  with pytest.raises(ValueError, match=r'layers_0/mlp/intermediate/\w+ \(from '
                     r'encoder.layer.0.intermediate.dense.\w+\) has shape'):
    hf_checkpoint.load(tmp_path, with_heads=False)


def test_vocab_file_mismatch(tmp_path, minilm_dir):
  vocab = tmp_path / 'vocab.txt'
  vocab.write_text('\n'.join(f'tok{i}' for i in range(100)) + '\n')
  with pytest.raises(ValueError, match='vocab file .* has 100 entries .* 30522 rows'):
    hf_checkpoint.load(minilm_dir, with_heads=False, vocab_file=vocab)


def test_scanned_import_equals_unscanned(minilm_dir, minilm):
  cfg, params, _ = minilm
  cfg_scan, params_scan, _ = hf_checkpoint.load(minilm_dir, with_heads=False, scan_layers=True)
  assert params_scan['layers']['attention']['query']['kernel'].shape[0] == cfg.num_layers
  batch = hf_batch(minilm_dir, SENTENCES)
  want, _ = jax.jit(encoder.BertEncoder(cfg).apply)({'params': params}, **batch)
  got, _ = jax.jit(encoder.BertEncoder(cfg_scan).apply)({'params': params_scan}, **batch)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=0)


def test_a_config_json_without_the_models_shape_or_not_json_is_one_line(tmp_path, minilm_dir):
  """{} gave KeyError 'vocab_size'; a malformed one 'Expecting , delimiter' naming no file."""
  folder = tmp_path / 'model'
  folder.mkdir()
  (folder / 'model.safetensors').symlink_to(minilm_dir / 'model.safetensors')
  shutil.copy(minilm_dir / 'vocab.txt', folder / 'vocab.txt')
  config_file = folder / 'config.json'
  for text, message in (
      ('{}', rf'^{config_file} lacks vocab_size, hidden_size, num_hidden_layers, '
             r'num_attention_heads, intermediate_size: not a BERT config .*; pass the '
             'config.json saved with the weights'),
      ('{"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, '
       '"num_attention_heads": 12}', rf'^{config_file} lacks intermediate_size: '),
      ('{"vocab_size": 30522 "hidden_size": 384}',
       rf'^{config_file} is not a transformers config \(JSON\) file: Expecting \',\' delimiter'),
      ('[]', rf'^{config_file} holds a JSON list, not an object')):
    config_file.write_text(text)
    for load in (sources.load, lambda d: hf_checkpoint.load(d, with_heads=False)):
      with pytest.raises(ValueError, match=message):
        load(str(folder))
  config_file.write_text('{}')  # The command line: one line, the file and the fields named.
  (tmp_path / 'in.txt').write_text('hello\n')
  proc = subprocess.run([sys.executable, '-m', 'bertjax.extract_features', f'--init={folder}',
                         f'--input_file={tmp_path / "in.txt"}',
                         f'--output_file={tmp_path / "o.jsonl"}'],
                        capture_output=True, text=True, check=False)
  assert proc.returncode == 1 and proc.stderr.startswith(f'error: {config_file} lacks '
                                                         'vocab_size, '), proc.stderr[-2000:]
  assert len(proc.stderr.splitlines()) == 1 and 'Traceback' not in proc.stderr
