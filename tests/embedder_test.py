"""embed.Embedder, the Python API of sentence embeddings: what SentenceTransformer.encode gives
on the real MiniLM (its pooling, normalisation and length read from the folder), quietly."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
import torch
import transformers

from bertjax import embed
from bertjax import export
from bertjax import files

REPO = pathlib.Path(__file__).resolve().parents[1]
README = ['The weather is lovely today.', "It's so sunny outside!", 'He drove to the stadium.']


@pytest.fixture(scope='module')
def minilm(minilm_dir):
  return embed.Embedder.from_pretrained(minilm_dir)


def reference(directory, sentences, max_seq_length, pooling='mean'):
  """transformers' BertModel, pooled as sentence-transformers pools (its Pooling module)."""
  tok = transformers.BertTokenizerFast.from_pretrained(str(directory))
  model = transformers.BertModel.from_pretrained(str(directory)).eval()
  enc = tok(sentences, padding=True, truncation=True, max_length=max_seq_length,
            return_tensors='pt')
  with torch.no_grad():
    states = model(**enc).last_hidden_state
  if pooling == 'cls':
    return states[:, 0].numpy()
  mask = enc['attention_mask'][..., None].float()
  return ((states * mask).sum(1) / mask.sum(1)).numpy()


def test_the_readme_sentences_give_the_published_cosines(minilm):
  vectors = minilm.encode(README)
  assert vectors.shape == (3, 384) and vectors.dtype == np.float32
  np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
  cosine = vectors @ vectors.T
  assert cosine[0, 1] == pytest.approx(0.666, abs=1e-3)
  assert cosine[0, 2] == pytest.approx(0.105, abs=1e-3)


def test_minilm_reads_as_sentence_transformers_runs_it(minilm, minilm_dir):
  # all-MiniLM-L6-v2's folder: mean pooling, then Normalize, 256 tokens.
  assert (minilm.pooling, minilm.normalize, minilm.max_seq_length) == ('mean', True, 256)
  sentences = [*README, 'word ' * 400, 'x', '']  # Past 256 tokens: cut there; an empty text.
  want = reference(minilm_dir, sentences, 256)
  want /= np.linalg.norm(want, axis=1, keepdims=True)
  np.testing.assert_allclose(minilm.encode(sentences), want, atol=1e-5, rtol=0)


def test_a_plain_transformers_folder_is_mean_pooled_unnormalised(minilm_dir, tmp_path):
  plain = tmp_path / 'plain'
  shutil.copytree(minilm_dir, plain)
  shutil.rmtree(plain / '1_Pooling')
  for name in ('modules.json', 'sentence_bert_config.json'):
    (plain / name).unlink()
  embedder = embed.Embedder.from_pretrained(plain, max_seq_length=32)
  assert (embedder.pooling, embedder.normalize) == ('mean', False)
  # Pass AL: cut at 128 where SentenceTransformer reads the tokenizer's model_max_length (512).
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  theirs = SentenceTransformer(str(plain), device='cpu').max_seq_length
  assert embed.Embedder.from_pretrained(plain).max_seq_length == theirs == 512
  np.testing.assert_allclose(embedder.encode(README), reference(plain, README, 32), atol=1e-5,
                             rtol=0)
  cls = embed.Embedder.from_pretrained(plain, pooling='cls', max_seq_length=32)
  np.testing.assert_allclose(cls.encode(README), reference(plain, README, 32, pooling='cls'),
                             atol=1e-5, rtol=0)


def test_a_short_position_table_is_the_default_length(minilm_dir, tmp_path):
  # 64 positions: the default length 128 was refused ('between 3 and the model's 64').
  config = transformers.BertConfig.from_pretrained(minilm_dir)
  config.max_position_embeddings, config.num_hidden_layers = 64, 1
  transformers.BertModel(config).save_pretrained(tmp_path / 'short')
  shutil.copy(minilm_dir / 'vocab.txt', tmp_path / 'short' / 'vocab.txt')
  embedder = embed.Embedder.from_pretrained(tmp_path / 'short')
  assert embedder.max_seq_length == 64
  np.testing.assert_allclose(embedder.encode(README), reference(tmp_path / 'short', README, 64),
                             atol=1e-5, rtol=0)


def test_any_number_of_sentences_compiles_few_shapes(minilm, monkeypatch):
  shapes = []
  pooled = minilm._pooled
  monkeypatch.setattr(minilm, '_pooled', lambda p, b: shapes.append(b['input_ids'].shape) or
                      pooled(p, b))
  sentences = [' '.join(['word'] * n) for n in range(1, 40)]
  vectors = minilm.encode(sentences)
  one_by_one = np.concatenate([minilm.encode([s]) for s in sentences[:5]])
  np.testing.assert_allclose(vectors[:5], one_by_one, atol=1e-6)
  assert len(set(shapes)) <= 6, sorted(set(shapes))
  assert all(rows & (rows - 1) == 0 and length & (length - 1) == 0 for rows, length in shapes)


def test_what_a_user_gets_wrong_is_named(minilm, tmp_path):
  assert minilm.encode([]).shape == (0, 384)
  assert minilm.encode(iter(README[:2])).shape == (2, 384)
  with pytest.raises(ValueError, match='takes a list of sentences, got one str: pass'):
    minilm.encode(README[0])
  with pytest.raises(ValueError, match=r'sentence 2 is an int \(3\), not a string'):
    minilm.encode([README[0], 3])
  with pytest.raises(FileNotFoundError, match='does not exist: pass a transformers BERT folder'):
    embed.Embedder.from_pretrained(tmp_path / 'nothing')
  run = tmp_path / 'run'  # A bertjax workdir: its config.json is the run's, not a BertConfig.
  (run / 'checkpoints').mkdir(parents=True)
  (run / 'config.json').write_text('{"job": "finetune"}')
  with pytest.raises(FileNotFoundError, match='holds no checkpoint'):
    embed.Embedder.from_pretrained(run)
  with pytest.raises(ValueError, match='step=3 names a checkpoint of a bertjax run'):
    embed.Embedder.from_pretrained(embed.default_checkpoint(), step=3)
  with pytest.raises(ValueError, match=r"pooling='last'; valid: mean, cls, max"):
    embed.Embedder.from_pretrained(embed.default_checkpoint(), pooling='last')
  with pytest.raises(ValueError, match="max_seq_length=1024 must be between 3 and the model's 512 "
                     'positions: pass one in that range, or 0'):
    embed.Embedder.from_pretrained(embed.default_checkpoint(), max_seq_length=1024)


@pytest.mark.parametrize('argument, message', [
    # normalize='no' normalised (a string is true); a float length failed at encode in a slice;
    # a float batch ran; dtype='int8' was refused at the first encode, after the load.
    ({'normalize': 'no'}, "normalize='no': pass True or False."),
    ({'max_seq_length': 8.0}, "max_seq_length=8.0: pass a whole number, or None for the model's "
     'own length.'),
    ({'batch_size': 2.5}, 'batch_size=2.5: pass a whole number.'),
    ({'batch_size': True}, 'batch_size=True: pass a whole number.'),
    ({'batch_size': 0}, 'batch_size=0: at least 1.'),
    ({'dtype': 'int8'}, "dtype='int8'; valid: float32, bfloat16."),
    ({'batch_size': None}, 'batch_size=None: pass a whole number.'),
])
def test_an_argument_of_the_wrong_kind_is_refused_before_the_model_loads(
    minilm, argument, message, monkeypatch):
  monkeypatch.setattr(embed.sources, 'load', lambda *a, **k: pytest.fail('the model was loaded'))
  with pytest.raises(ValueError, match=f'^{re.escape(message)}$'):
    embed.Embedder.from_pretrained(embed.default_checkpoint(), **argument)
  if 'dtype' not in argument:  # The constructor refuses them too.
    kwargs = {'pooling': 'mean', 'normalize': True, 'max_seq_length': 16, 'batch_size': 4,
              **argument}
    message = message.replace(", or None for the model's own length.", '.')  # No model's own.
    with pytest.raises(ValueError, match=f'^{re.escape(message)}$'):
      embed.Embedder(minilm.model_config, minilm.params, minilm.tokenizer, **kwargs)
  # The constructor takes no model's own (None) for what from_pretrained reads from one.
  for argument, message in (({'pooling': None}, 'pooling=None; valid: mean, cls, max.'),
                            ({'max_seq_length': None}, 'max_seq_length=None: pass a whole '
                             'number.'), ({'normalize': None}, 'normalize=None: pass True or '
                                          'False.')):
    with pytest.raises(ValueError, match=f'^{re.escape(message)}$'):
      embed.Embedder(minilm.model_config, minilm.params, minilm.tokenizer, **argument)
  numpy_kinds = embed.Embedder(minilm.model_config, minilm.params, minilm.tokenizer,
                               normalize=np.bool_(True), max_seq_length=np.int64(16),
                               batch_size=np.int32(2))
  np.testing.assert_allclose(np.linalg.norm(numpy_kinds.encode(README[:3]), axis=1), 1, atol=1e-6)


def test_what_is_not_a_list_of_sentences_is_named(minilm):
  """None and 123 failed in list() with a raw TypeError; a dict embedded its keys, a set in an
  order the caller cannot match to its texts."""
  with pytest.raises(ValueError, match='takes a list of sentences, got None: pass a list'):
    minilm.encode(None)
  with pytest.raises(ValueError, match='takes a list of sentences, got an int: pass a list'):
    minilm.encode(123)
  with pytest.raises(ValueError, match=r'got a dict \(its keys would be embedded\): pass a list'):
    minilm.encode({'x': 1})
  with pytest.raises(ValueError, match=r'got a set \(its order is arbitrary.*\): pass a list'):
    minilm.encode(set(README))
  assert minilm.encode({'x': README[0]}.values()).shape == (1, 384)  # Views keep their order.


def test_a_plain_python_session_stays_quiet():
  code = ('from bertjax import embed; import json; e = embed.Embedder.from_pretrained(); '
          f'v = e.encode({README!r}); print(json.dumps((v @ v.T).tolist()))')
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=300, check=False, cwd=REPO, env=env)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stderr == ''
  assert json.loads(result.stdout)[0][1] == pytest.approx(0.666, abs=1e-3)
  # A notebook's console (console.notebook(): bertjax's INFO lines shown): loading stays quiet.
  cell = subprocess.run([sys.executable, '-c', 'from bertjax import console; console.notebook(); '
                         + code], capture_output=True, text=True, timeout=300, check=False,
                        cwd=REPO, env=env)
  assert cell.returncode == 0, cell.stderr[-2000:]
  assert cell.stderr == '' and len(cell.stdout.splitlines()) == 1, cell.stdout[-2000:]


def test_a_model_in_a_bucket_is_read_as_the_local_one(minilm, minilm_dir, gcs_bucket):
  files.copy_tree(str(minilm_dir), f'{gcs_bucket}/minilm')
  remote = embed.Embedder.from_pretrained(f'{gcs_bucket}/minilm')
  assert (remote.pooling, remote.normalize, remote.max_seq_length) == ('mean', True, 256)
  np.testing.assert_array_equal(remote.encode(README), minilm.encode(README))


def test_a_default_prompt_is_prepended_as_sentence_transformers_prepends_it(minilm_dir, tmp_path):
  """Pass AL: a model's default_prompt_name was read and never applied (cosine 0.87 to
  SentenceTransformer.encode's vectors)."""
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  prompted = tmp_path / 'prompted'
  shutil.copytree(minilm_dir, prompted)
  settings = prompted / 'config_sentence_transformers.json'
  settings.write_text(json.dumps({**json.loads(settings.read_text()), 'prompts': {
      'query': 'query: ', 'passage': 'passage: '}, 'default_prompt_name': 'query'}))
  embedder = embed.Embedder.from_pretrained(prompted)
  assert embedder.prompt == 'query: '
  want = SentenceTransformer(str(prompted), device='cpu').encode(README)
  np.testing.assert_allclose(embedder.encode(README), want, atol=1e-5, rtol=0)
  for fmt in ('tf1', 'sentence_transformers'):  # Kept by the exports that keep the prompts.
    out = export.export(prompted, fmt, tmp_path / fmt)
    assert embed.Embedder.from_pretrained(out).prompt == 'query: ', fmt
  settings.write_text(json.dumps({'prompts': {'query': 'q: '}, 'default_prompt_name': 'doc'}))
  with pytest.raises(ValueError, match=r"default_prompt_name 'doc' is not one of its prompts "
                     r"\('query'\): fix the file"):
    embed.Embedder.from_pretrained(prompted)
