"""`bertjax.export --format=sentence_transformers`: `SentenceTransformer(dir)` (the real library,
offline) loads every export with no custom code and computes bertjax's embeddings, or a
sequence-level head's logits; the folder imports back with what it says."""

import json

import export_test
import finetune_runs
from flax import traverse_util
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pretrain_runs
import pytest
import saved_model_test
import sentence_transformers as st_library
import spm_runs

from bertjax import embed
from bertjax import export
from bertjax import files
from bertjax.interop import format_writers
from bertjax.interop import hf_checkpoint
from bertjax.interop import saved_model
from bertjax.interop import sentence_transformers
from bertjax.interop import sources
from bertjax.model import encoder_config
from bertjax.model import heads
from bertjax.pretraining_data import embedded

GOLDEN = saved_model_test.GOLDEN
GOLDEN_COSINE = saved_model_test.GOLDEN_COSINE
PAIRS = [('The king doth speak of his lord.', 'My heart is glad.'),
         ('Fair is foul, and foul is fair.', 'Hover.'),
         ('A horse!', 'A horse! My kingdom for a horse!')]
# Both texts longer than half of what fits: cut to an odd total, transformers' tokenizers keep
# one token more of the second text, BERT's _truncate_seq_pair (and bertjax) of the first.
BOTH_CUT = ('Fair is foul, and foul is fair.', 'Hover through the fog and filthy air.')
POOLING_KEYS = {'word_embedding_dimension', 'pooling_mode_cls_token', 'pooling_mode_mean_tokens',
                'pooling_mode_max_tokens', 'pooling_mode_mean_sqrt_len_tokens',
                'pooling_mode_weightedmean_tokens', 'pooling_mode_lasttoken', 'include_prompt'}


def load(directory) -> st_library.SentenceTransformer:
  return st_library.SentenceTransformer(str(directory), device='cpu')


def module_types(directory) -> list[str]:
  return [m['type'].rsplit('.', 1)[-1]
          for m in json.loads((directory / 'modules.json').read_text())]


def bertjax_embeddings(directory, sentences, max_seq_length):
  """bertjax's own embed job: mean-pooled, L2-normalised."""
  cfg, params, _ = hf_checkpoint.load(directory, with_heads=False,
                                      vocab_file=str(directory / 'vocab.txt'))
  return embed.embed_sentences(cfg, params, embed.load_tokenizer(directory), sentences,
                               max_seq_length=max_seq_length)


@pytest.fixture(scope='module')
def minilm_golden(minilm_dir):
  """bertjax's own embeddings of GOLDEN by MiniLM at 256 tokens (two tests compare with them)."""
  return bertjax_embeddings(minilm_dir, GOLDEN, 256)


def test_minilm_encodes_in_sentence_transformers_as_in_bertjax(minilm_dir, minilm_golden,
                                                               tmp_path):
  out = export.export(minilm_dir, 'sentence_transformers', tmp_path / 'st')
  model = load(out)
  assert model.max_seq_length == 256 and model.similarity_fn_name == 'cosine'
  theirs = model.encode(GOLDEN)
  ours = minilm_golden
  np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)
  cosine = model.similarity(theirs, theirs).numpy()
  np.testing.assert_allclose(cosine, ours @ ours.T, atol=1e-5, rtol=0)
  # Normalised: the dot product is the cosine, and both are the published values.
  np.testing.assert_allclose(theirs @ theirs.T, cosine, atol=1e-5, rtol=0)
  np.testing.assert_allclose(cosine, GOLDEN_COSINE, atol=1e-3, rtol=0)
  assert abs(theirs[0] @ theirs[1] - 0.666) < 1e-3 and abs(theirs[0] @ theirs[2] - 0.105) < 1e-3

  assert module_types(out) == ['Transformer', 'Pooling', 'Normalize']
  assert not (out / '2_Normalize').exists()  # Listed only, as the published model has it.
  pooling = json.loads((out / '1_Pooling' / 'config.json').read_text())
  assert set(pooling) == POOLING_KEYS and pooling['pooling_mode_mean_tokens']
  assert json.loads((out / 'sentence_bert_config.json').read_text())['max_seq_length'] == 256
  model_config = json.loads((out / 'config_sentence_transformers.json').read_text())
  assert model_config['prompts'] == {} and model_config['similarity_fn_name'] == 'cosine'

  # Imported back, it says what it is; its weights are the source's.
  back, original = sources.load(out), sources.load(minilm_dir)
  assert (back.kind, back.pooling, back.normalize, back.max_seq_length, back.embedding) == (
      'encoder', 'mean', True, 256, True)
  assert set(back.params) == set(original.params)
  for name, value in original.params.items():
    np.testing.assert_array_equal(back.params[name], value, err_msg=name)

  # The transformers export of an embedding model is a sentence-transformers model too.
  hf = export.export(minilm_dir, 'hf', tmp_path / 'hf')
  assert module_types(hf) == ['Transformer', 'Pooling', 'Normalize']
  as_hf = load(hf)
  assert as_hf.max_seq_length == 256
  np.testing.assert_allclose(as_hf.encode(GOLDEN), theirs, atol=1e-6, rtol=0)
  # Through the sentence-transformers export again, or the TF1 format: nothing is lost.
  again = export.export(hf, 'sentence_transformers', tmp_path / 'again')
  assert sorted(p.name for p in again.rglob('*')) == sorted(p.name for p in out.rglob('*'))
  tf1 = export.export(minilm_dir, 'tf1', tmp_path / 'tf1')
  back = export.export(tf1, 'sentence_transformers', tmp_path / 'from_tf1')
  for name in ('modules.json', 'sentence_bert_config.json', 'config_sentence_transformers.json',
               '1_Pooling/config.json'):
    assert (back / name).read_text() == (out / name).read_text(), name


def test_normalisation_is_the_sources_unless_asked(minilm_dir, tmp_path):
  """A plain BERT (no sentence-transformers files) gets sentence-transformers' own default,
  mean pooling without Normalize; --normalize adds it, --nonormalize drops the source's."""
  _, _, plain = export_test.random_bundle('pretraining', minilm_dir)
  (tmp_path / 'plain').mkdir()
  hf_checkpoint.save(plain, tmp_path / 'plain')
  batch = saved_model_test.ids_of(plain.vocab_file, GOLDEN)
  mean = saved_model.numpy_outputs(plain, batch)['mean_pooled_output']
  out = export.export(tmp_path / 'plain', 'sentence_transformers', tmp_path / 'st')
  assert module_types(out) == ['Transformer', 'Pooling']
  model = load(out)
  assert model.max_seq_length == 64  # 128 by default, cut to its position embeddings.
  np.testing.assert_allclose(model.encode(GOLDEN), mean, atol=1e-5, rtol=0)
  assert np.abs(np.linalg.norm(mean, axis=1) - 1).min() > 0.1  # Unnormalised: a real check.
  out = export.export(tmp_path / 'plain', 'sentence_transformers', tmp_path / 'normalised',
                      normalize=True, max_seq_length=32)
  assert module_types(out) == ['Transformer', 'Pooling', 'Normalize']
  model = load(out)
  assert model.max_seq_length == 32
  np.testing.assert_allclose(model.encode(GOLDEN),
                             mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-5)
  out = export.export(minilm_dir, 'sentence_transformers', tmp_path / 'unnormalised',
                      normalize=False)
  assert module_types(out) == ['Transformer', 'Pooling']
  assert sources.load(out).normalize is False
  with pytest.raises(ValueError, match='normalize=True adds .* fmt=tf1 of an encoder model does '
                     'not write'):
    export.export(minilm_dir, 'tf1', tmp_path / 'tf1', normalize=True)
  assert not (tmp_path / 'tf1').exists()


@pytest.fixture(scope='module')
def mean_pooled_classifier(minilm_dir, one_device_per_module, tmp_path_factory):  # pylint: disable=unused-argument
  """(workdir, sentences) of a classifier fine-tuned from MiniLM here with its own (mean)
  pooling: what a MiniLM fine-tune gives by default. Only the export's source: one step, on
  one device (and the module's later runs: sharding keeps its own tests)."""
  from bertjax.finetune import job  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('mean_sst2')
  data = finetune_runs.write_sst2(root / 'data', n_train=32, n_dev=16)
  config = finetune_runs.tiny_config(data, num_train_steps=1,
                                     **{'optimizer.learning_rate': 1e-3})
  config.init_from = str(minilm_dir)
  config.model_from_init = True
  job.train_and_evaluate(config, str(root / 'run'))
  sentences = [line.split('\t')[0] for line in (data / 'dev.tsv').read_text().splitlines()[1:]]
  return root / 'run', sentences


def logits_of(result, batch, pooling=None):
  """The bertjax module's logits of a Bundle's sequence-level head."""
  cfg = encoder_config.default_config(**result.config)
  pooling = pooling or result.pooling
  if result.kind == 'multiple_choice':
    module = heads.BertForMultipleChoice(cfg, pooling)
    batch = {k: v[:, None] for k, v in batch.items()}  # One choice per row.
  else:
    module = heads.BertForSequenceClassification(cfg, len(result.labels) or 1, pooling)
  tree = traverse_util.unflatten_dict(result.params, sep='/')
  return np.asarray(module.apply({'params': tree}, **batch)).reshape(len(batch['input_ids']), -1)


def test_a_mean_pooled_classifier_gives_its_logits_in_sentence_transformers(
    mean_pooled_classifier, tmp_path):
  workdir, sentences = mean_pooled_classifier
  result = sources.load(workdir)
  assert (result.kind, result.pooling, result.max_seq_length) == ('classification', 'mean', 16)
  with pytest.raises(ValueError, match='mean-pooled .* fmt=hf.* use fmt=saved_model or '
                     'fmt=sentence_transformers .*encode'):
    export.export(workdir, 'hf', tmp_path / 'hf')
  out = export.export(workdir, 'sentence_transformers', tmp_path / 'st')
  assert module_types(out) == ['Transformer', 'Pooling', 'Dense']
  model = load(out)
  assert model.max_seq_length == 16
  theirs = model.encode(sentences)
  batch = saved_model_test.ids_of(result.vocab_file, sentences, max_len=16)
  ours = logits_of(result, batch)
  assert theirs.shape == (len(sentences), 2)
  np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)
  probabilities = saved_model.numpy_outputs(result, batch)['probabilities']
  np.testing.assert_allclose(np.exp(theirs) / np.exp(theirs).sum(1, keepdims=True),
                             probabilities, atol=1e-6)
  # A real check: the [CLS] pooler would give other logits.
  assert np.abs(logits_of(result, batch, pooling='cls') - ours).max() > 1e-3
  lines = format_writers.loading_lines('sentence_transformers', out)
  assert f"  model = SentenceTransformer('{out}')" in lines
  assert lines[-1] == ('modules: Transformer -> Pooling (mean) -> Dense (384 -> 2, Identity); '
                       'max_seq_length 16')

  back = sources.load(out)  # The head comes back with its labels.
  assert (back.kind, back.labels, back.pooling, back.max_seq_length) == (
      'classification', result.labels, 'mean', 16)
  for name, value in result.params.items():
    np.testing.assert_array_equal(back.params[name], value, err_msg=name)


@pytest.mark.parametrize('kind, pooling', [('classification', 'cls'), ('classification', 'mean'),
                                           ('regression', 'mean'), ('multiple_choice', 'cls')])
def test_sentence_level_heads_score_text_pairs_as_bertjax(kind, pooling, minilm_dir, tmp_path):
  """encode() takes (text_a, text_b) tuples as [CLS] a [SEP] b [SEP] with segment ids, and cuts
  a pair too long for max_seq_length as BERT's scripts do (the longer text first)."""
  num_labels = {'classification': 3}.get(kind, 1)
  _, _, result = export_test.random_bundle('classification', minilm_dir, num_labels)
  result.kind, result.pooling, result.max_seq_length = kind, pooling, 14
  result.labels = tuple(f'L{i}' for i in range(num_labels)) if kind == 'classification' else ()
  sentence_transformers.save(result, tmp_path)
  dense = module_types(tmp_path).count('Dense')
  assert dense == (2 if pooling == 'cls' else 1)  # BERT's pooler, where the head reads it.
  theirs = load(tmp_path).encode(PAIRS)
  a, b = zip(*PAIRS, strict=True)
  batch = saved_model_test.ids_of(result.vocab_file, list(a), list(b), max_len=14)
  assert batch['input_mask'].sum(1).max() == 14  # Truncated: the policy is compared too.
  ours = logits_of(result, batch)
  np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)
  # A real check: without the segment ids the scores differ.
  assert np.abs(logits_of(result, {**batch, 'segment_ids': 0 * batch['segment_ids']})
                - ours).max() > 1e-4
  cut = saved_model_test.ids_of(result.vocab_file, [BOTH_CUT[0]], [BOTH_CUT[1]], max_len=14)
  tokenized = load(tmp_path).tokenize([BOTH_CUT])
  assert (int((cut['segment_ids'][0] == 0).sum()), int(tokenized['token_type_ids'][0].eq(0).sum())
          ) == (8, 7)  # [CLS] 6 [SEP] vs [CLS] 5 [SEP]: the documented difference.
  back = sources.load(tmp_path)
  assert (back.kind, back.pooling, back.labels) == (kind, pooling, result.labels)


@pytest.mark.parametrize('kind', ['span', 'tagging'])
def test_token_level_heads_are_refused_naming_the_formats_that_hold_them(kind, minilm_dir,
                                                                         tmp_path):
  _, _, result = export_test.random_bundle(kind, minilm_dir)
  with pytest.raises(ValueError, match='one vector per text.* use --format=hf or '
                     '(--format=tf1 or )?--format=saved_model'):
    format_writers.check(result, 'sentence_transformers')
  with pytest.raises(ValueError, match='one vector per text'):
    sentence_transformers.save(result, tmp_path)
  assert not list(tmp_path.iterdir())


def test_an_export_in_a_bucket_replaces_an_earlier_one_whole(minilm_dir, minilm_golden,
                                                            gcs_bucket, tmp_path):
  """--overwrite over an earlier export with a head: its Dense modules and bertjax_export.json
  are gone, and what is left loads as the new model (no 2_Normalize object either)."""
  _, _, classifier = export_test.random_bundle('classification', minilm_dir)
  (tmp_path / 'classifier').mkdir()
  hf_checkpoint.save(classifier, tmp_path / 'classifier')  # A [CLS]-pooled transformers one.
  url = files.join(gcs_bucket, 'exports', 'st')
  export.export(tmp_path / 'classifier', 'sentence_transformers', url)
  assert {'2_Dense/model.safetensors', '3_Dense/config.json', 'bertjax_export.json'} <= set(
      files.walk_files(url))
  with pytest.raises(FileExistsError, match='pass overwrite=True'):
    export.export(minilm_dir, 'sentence_transformers', url)
  export.export(minilm_dir, 'sentence_transformers', url, overwrite=True)
  written = set(files.walk_files(url))
  assert not [name for name in written if 'Dense' in name or 'Normalize' in name], written
  assert 'bertjax_export.json' not in written
  with files.local_copy(url) as local:
    model = load(local)
    assert [type(m).__name__ for m in model] == ['Transformer', 'Pooling', 'Normalize']
    np.testing.assert_allclose(model.encode(GOLDEN), minilm_golden, atol=1e-5, rtol=0)


def test_a_pre_training_run_exports_its_encoder_mean_pooled(tmp_path):
  """A bertjax pre-training run (its MLM and NSP heads dropped): sentence-transformers' own
  default for an encoder without metadata, mean pooling, at the run's sequence length."""
  from bertjax import pretrain  # pylint: disable=g-import-not-at-top
  # The run is only the export's source: TFRecords of 40 short documents of the embedded
  # corpus, by its vocab (the whole corpus's files take ~30 s of CPU to make).
  corpus = spm_runs.write_corpus(tmp_path / 'corpus.txt', 'train')
  data = spm_runs.make_data(tmp_path, corpus, vocab_file=str(embedded.vocab_path()))
  cfg = pretrain_runs.config(2, pretrain_runs.fields(
      {'data.train_files': data, 'data.eval_files': data,
       'data.vocab_file': str(embedded.vocab_path())},
      checkpoint__every_steps=2, max_eval_batches=1))
  pretrain.train_and_evaluate(cfg, str(tmp_path / 'run'))
  out = export.export(tmp_path / 'run', 'sentence_transformers', tmp_path / 'st')
  result = sources.load(tmp_path / 'run')
  assert result.kind == 'pretraining' and module_types(out) == ['Transformer', 'Pooling']
  model = load(out)
  assert model.max_seq_length == pretrain_runs.SEQ
  texts = ['the king doth speak of his lord', 'my heart is glad']
  batch = saved_model_test.ids_of(result.vocab_file, texts)
  np.testing.assert_allclose(model.encode(texts),
                             saved_model.numpy_outputs(result, batch)['mean_pooled_output'],
                             atol=1e-5, rtol=0)
