"""sentence-transformers folders as SentenceTransformer reads them (the real library, offline, on
tiny local models): pooling in either config layout, do_lower_case, the 1.x layout (the model in
0_Transformer/) and a Dense bertjax does not run."""

import json
import pathlib

import finetune_runs
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import ml_collections
import numpy as np
import pytest
import sentence_transformers as st_library
import source_checks_test

from bertjax import embed
from bertjax import export
from bertjax.finetune import job as finetune
from bertjax.finetune import run_config
from bertjax.interop import init_from
from configs import embed as embed_config

# Capitals the cased vocab splits otherwise than their lower case ('The' is one token, 'the'
# another), so that lower-casing first changes the embeddings.
TEXTS = ['The weather is lovely today.', 'He drove to the stadium!', 'THE WEATHER', 'a']
TRANSFORMER = 'sentence_transformers.models.Transformer'
POOLING = 'sentence_transformers.models.Pooling'
NORMALIZE = 'sentence_transformers.models.Normalize'


def write_json(path: pathlib.Path, value):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(value))  # local: a test's tmp_path


def modules(*entries) -> list:
  return [{'idx': i, 'name': str(i), 'path': path, 'type': kind}
          for i, (kind, path) in enumerate(entries)]


def st_folder(directory: pathlib.Path, pooling_config: dict, *, lower: bool = False,
              model_path: str = '', normalize: bool = False) -> pathlib.Path:
  """A tiny cased BERT (in `model_path`) with sentence-transformers' files around it."""
  model = directory / model_path
  source_checks_test.make(model, vocab=source_checks_test.CASED_VOCAB,
                          tokenizer={'do_lower_case': False})
  write_json(model / 'sentence_bert_config.json', {'max_seq_length': 32, 'do_lower_case': lower})
  write_json(directory / '1_Pooling' / 'config.json', pooling_config)
  if model_path:  # sentence-transformers 1.x writes its version as the root's config.json.
    write_json(directory / 'config.json', {'__version__': '1.2.1'})
  entries = [(TRANSFORMER, model_path), (POOLING, '1_Pooling')]
  write_json(directory / 'modules.json', modules(*entries, *(
      [(NORMALIZE, '2_Normalize')] if normalize else [])))
  return directory


def encode_st(directory) -> np.ndarray:
  return st_library.SentenceTransformer(str(directory), device='cpu').encode(TEXTS)


LEGACY_MEAN = {'word_embedding_dimension': 32, 'pooling_mode_cls_token': False,
               'pooling_mode_mean_tokens': True}


@pytest.mark.parametrize('pooling_config, want', [
    ({'embedding_dimension': 32, 'pooling_mode': 'mean'}, 'mean'),  # 6.x
    (LEGACY_MEAN, 'mean'),  # 3.x-5.x
    ({'embedding_dimension': 32, 'pooling_mode': 'cls'}, 'cls'),
    ({'word_embedding_dimension': 32, 'pooling_mode_cls_token': True}, 'cls'),
])
def test_fine_tuning_pooling_auto_reads_either_layout(tmp_path, pooling_config, want):
  folder = st_folder(tmp_path / 'st', pooling_config)
  config = ml_collections.ConfigDict({'pooling': 'auto'})
  assert run_config.resolve_pooling(config, None, str(folder))[0] == want


def test_fine_tuning_pooling_auto_refuses_a_pooling_bertjax_lacks(tmp_path):
  folder = st_folder(tmp_path / 'st', {'embedding_dimension': 32, 'pooling_mode': 'max'})
  config = ml_collections.ConfigDict({'pooling': 'auto'})
  with pytest.raises(ValueError, match='pools by max.*set config.pooling=mean or cls'):
    run_config.resolve_pooling(config, None, str(folder))


@pytest.mark.parametrize('pooling_config', [
    {'embedding_dimension': 32, 'pooling_mode': 'max'},  # 6.x
    {'word_embedding_dimension': 32, 'pooling_mode_max_tokens': True},  # 3.x-5.x
], ids=['6.x', '3.x'])
def test_a_max_pooled_model_embeds_and_exports_as_sentence_transformers_runs_it(
    tmp_path, pooling_config):
  """Pass AL's leftover: a max-pooled model was embedded mean-pooled (with a warning) and
  refused by every export. Now its vectors are SentenceTransformer's, the padding of a short
  text in a batch never counts (its rows are -1e9 before the max), and the hf and
  sentence-transformers exports keep the pooling (SentenceTransformer loads them as the source)."""
  folder = st_folder(tmp_path / 'st', pooling_config, normalize=True)
  embedder = embed.Embedder.from_pretrained(folder)
  assert (embedder.pooling, embedder.normalize, embedder.not_computed) == ('max', True, '')
  theirs = encode_st(folder)
  np.testing.assert_allclose(embedder.encode(TEXTS), theirs, atol=1e-5)
  alone = np.concatenate([embedder.encode([text]) for text in TEXTS])  # No padding at all.
  np.testing.assert_allclose(alone, theirs, atol=1e-5)
  unnormalised = embed.Embedder.from_pretrained(folder, normalize=False).encode(TEXTS)
  assert np.abs(np.linalg.norm(unnormalised, axis=1) - 1).min() > 1e-2  # A real check above.
  for fmt in ('sentence_transformers', 'hf'):
    out = export.export(folder, fmt, tmp_path / fmt)
    written = json.loads((out / '1_Pooling' / 'config.json').read_text())
    assert written['pooling_mode_max_tokens'] and not written['pooling_mode_mean_tokens']
    np.testing.assert_allclose(encode_st(out), theirs, atol=1e-5)


def test_do_lower_case_lower_cases_the_text_as_sentence_transformers(tmp_path):
  folder = st_folder(tmp_path / 'st', LEGACY_MEAN, lower=True)
  ours = embed.Embedder.from_pretrained(folder).encode(TEXTS)
  np.testing.assert_allclose(ours, encode_st(folder), atol=1e-5)


def test_do_lower_case_is_kept_through_an_export(tmp_path):
  folder = st_folder(tmp_path / 'st', LEGACY_MEAN, lower=True)
  out = export.export(folder, 'sentence_transformers', tmp_path / 'out')
  assert json.loads((out / 'sentence_bert_config.json').read_text())['do_lower_case'] is True
  np.testing.assert_allclose(encode_st(out), encode_st(folder), atol=1e-5)
  for fmt in ('tf1', 'saved_model', 'onnx'):  # Their tokenizers would see the capitals.
    with pytest.raises(ValueError, match=f'lower-cases its text .* which fmt={fmt} cannot'):
      export.export(folder, fmt, tmp_path / fmt)
    assert not (tmp_path / fmt).exists()


def test_fine_tuning_refuses_a_model_that_lower_cases_first(tmp_path):
  """Review: fine-tuning's readers tokenize with the folder's cased tokenizer; the model was
  trained on lower-cased text."""
  from configs import finetune as finetune_config  # pylint: disable=g-import-not-at-top
  folder = st_folder(tmp_path / 'st', LEGACY_MEAN, lower=True)
  config = finetune_config.get_config('task=sst2')
  config.data.do_lower_case = False
  with pytest.raises(ValueError, match="lower-cases its text .*, which fine-tuning's readers do "
                     'not do'):
    run_config.check_casing(config, str(folder))


def test_a_1x_layout_reads_the_model_from_its_module_folder(tmp_path):
  root = st_folder(tmp_path / 'st', LEGACY_MEAN, model_path='0_Transformer', normalize=True)
  ours = embed.Embedder.from_pretrained(root).encode(TEXTS)
  np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
  np.testing.assert_allclose(ours, encode_st(root), atol=1e-5)


def test_the_transformer_folder_of_a_1x_layout_is_refused_naming_the_root(tmp_path):
  root = st_folder(tmp_path / 'st', LEGACY_MEAN, model_path='0_Transformer', normalize=True)
  with pytest.raises(ValueError, match=f'Transformer module of .*: pass {root}\\.$'):
    embed.Embedder.from_pretrained(root / '0_Transformer')


def test_the_summary_says_the_vectors_lack_the_dense(tmp_path, capsys):
  folder = st_folder(tmp_path / 'st', LEGACY_MEAN)
  write_json(folder / 'modules.json', modules(
      (TRANSFORMER, ''), (POOLING, '1_Pooling'), ('sentence_transformers.models.Dense',
                                                  '2_Dense')))
  write_json(folder / '2_Dense' / 'config.json', {'in_features': 32, 'out_features': 8,
                                                  'bias': True})
  config = embed_config.get_config(f'init_from={folder}')
  with config.unlocked():
    config.sentences = TEXTS[:2]
  assert embed.run(config, None).shape == (2, 32)
  last = capsys.readouterr().out.splitlines()[-1]
  assert ("dimension 32 (not SentenceTransformer's vectors: it runs Dense after pooling" in last
          and "where SentenceTransformer's are 8-dimensional" in last), last


def test_a_1x_layout_is_fine_tuned_from_its_root_with_its_pooling(tmp_path):
  """init_from= the root of a 1.x layout was refused (no checkpoints), and its module folder
  taken with [CLS] pooling where the root pools by mean."""
  root = st_folder(tmp_path / 'st', LEGACY_MEAN, model_path='0_Transformer', normalize=True)
  inner = root / '0_Transformer'
  assert init_from.model_config(str(root)) == init_from.model_config(str(inner))
  assert init_from.vocab_file(str(root)) == str(inner / 'vocab.txt')
  assert init_from.pooling(str(root)) == 'mean'
  with pytest.raises(ValueError, match=f'Transformer module of .*: pass {root}\\.$'):
    init_from.pooling(str(inner))
  config = finetune_runs.tiny_config(finetune_runs.write_sst2(tmp_path / 'sst2'),
                                     num_train_steps=1)
  config.init_from, config.model_from_init, config.data.do_lower_case = str(root), True, False
  finetune.train_and_evaluate(config, str(tmp_path / 'run'))
  run = json.loads((tmp_path / 'run' / 'config.json').read_text())
  assert run['pooling'] == 'mean' and run['model']['hidden_size'] == 32
  assert run['init_from_read'] == str(root)
