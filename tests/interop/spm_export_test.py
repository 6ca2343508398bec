"""Exports of a model whose vocab is a SentencePiece model: a tiny pre-training run on
learn_vocab's model and a classifier fine-tuned from it (tests/spm_runs.py). transformers loads
the hf export offline with a tokenizer that gives bertjax's ids and a model that gives its
outputs; a format that cannot write the SentencePiece tokenizer faithfully refuses."""

import gzip
import itertools
import logging

from flax import traverse_util
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import onnx_export_test
import pytest
import saved_model_test
import sentencepiece
import spm_runs
import torch
import transformers

from bertjax import export
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import hf_sentencepiece
from bertjax.interop import init_from
from bertjax.interop import saved_model
from bertjax.interop import sources
from bertjax.interop import tf1_checkpoint
from bertjax.model import encoder_config
from bertjax.pretraining_data import embedded
from bertjax.text import sentencepiece_tokenizer
from bertjax.text import vocab_files
from bertjax.text import vocab_learner
from bertjax.training import kinds

# Casing, accents, digits and commas, CJK, full-width and ligatures, quotes, spaces, empty.
ODD_TEXTS = ['', 'The KING doth Speak', 'Café, naïve RÉSUMÉ; Ångström', '1895, 9,000 and 3.14',
             '日本語 中文 한국어', 'Ｆｕｌｌ ﬁne ½', "``so'' said   he\t\n", 'İ ß Ǆ straße',
             "o'er th' 22, x,y"]
PAIRS = [('The king doth speak', 'my heart'), ('sweet love', 'Fair is foul, and foul is fair')]


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp('spm_export')
  spm_model, pretrained = spm_runs.shared_pretrained(tmp_path_factory)
  classify, texts = spm_runs.classifier(pretrained, root / 'finetune', epochs=1)
  return {'spm_model': spm_model, 'pretrained': pretrained, 'classify': classify,
          'texts': texts}


@pytest.fixture(scope='module')
def classify_hf(runs, tmp_path_factory):
  """The classifier's transformers export (the tests that read it only read it)."""
  return export.export(runs['classify'], 'hf', tmp_path_factory.mktemp('classify_hf') / 'hf')


def bertjax_outputs(bundle, batch):
  """bertjax's own head outputs (a classifier's logits) for a batch, in float32."""
  cfg = encoder_config.default_config(**{**bundle.config, 'dtype': 'float32', 'scan_layers': False,
                                         'attention_impl': 'xla', 'remat_policy': 'none'})
  module = kinds.get(bundle.kind).head(cfg, len(bundle.labels), bundle.pooling)
  params = traverse_util.unflatten_dict(bundle.params, sep='/')
  return np.asarray(module.apply({'params': params}, batch['input_ids'], batch['input_mask'],
                                 batch['segment_ids'], deterministic=True))


def test_transformers_loads_the_tokenizer_and_classifier_with_bertjax_ids_and_outputs(
    runs, classify_hf):
  out = classify_hf
  assert (out / 'spiece.model').read_bytes() == runs['spm_model'].read_bytes()
  assert not (out / 'vocab.txt').exists()
  ours = vocab_files.for_model(runs['spm_model'], do_lower_case=True)
  theirs = transformers.AutoTokenizer.from_pretrained(str(out))
  assert type(theirs).__name__.startswith('AlbertTokenizer')
  for token, piece in (('cls', '[CLS]'), ('sep', '[SEP]'), ('mask', '[MASK]'), ('pad', '<pad>'),
                       ('unk', '<unk>')):
    assert getattr(theirs, f'{token}_token_id') == ours.vocab[piece], token
  for text in ODD_TEXTS + runs['texts']:
    assert theirs(text)['input_ids'] == [ours.vocab['[CLS]'], *ours.encode(text),
                                         ours.vocab['[SEP]']], text
  for a, b in PAIRS:
    enc = theirs(a, b)
    assert enc['input_ids'] == [2, *ours.encode(a), 3, *ours.encode(b), 3]
    assert enc['token_type_ids'] == [0] * (len(ours.encode(a)) + 2) + [1] * (
        len(ours.encode(b)) + 1)
  # The classifier's outputs from transformers' own tokenization equal bertjax's.
  model = transformers.BertForSequenceClassification.from_pretrained(str(out)).eval()
  texts = runs['texts'][:6] + ODD_TEXTS[1:4]
  enc = theirs(texts, padding=True, return_tensors='np')
  batch = {'input_ids': enc['input_ids'].astype(np.int32),
           'input_mask': enc['attention_mask'].astype(np.int32),
           'segment_ids': enc['token_type_ids'].astype(np.int32)}
  with torch.no_grad():
    logits = model(**{k: torch.tensor(v, dtype=torch.long) for k, v in enc.items()}).logits
  bundle = sources.load(str(runs['classify']))
  np.testing.assert_allclose(logits.numpy(), bertjax_outputs(bundle, batch), atol=1e-5, rtol=0)
  assert model.config.id2label == dict(enumerate(bundle.labels))
  # Read back, the export is a SentencePiece model again, with the same weights.
  back = sources.load(str(out))
  assert isinstance(vocab_files.for_model(back.vocab_file, back.do_lower_case),
                    sentencepiece_tokenizer.SentencePieceTokenizer)
  assert back.kind == 'classification' and back.labels == bundle.labels
  for name, value in bundle.params.items():
    np.testing.assert_array_equal(back.params[name], value)


def test_the_pretraining_run_exports_for_transformers(runs, tmp_path):
  out = export.export(runs['pretrained'], 'hf', tmp_path / 'hf')
  model = transformers.BertForPreTraining.from_pretrained(str(out))
  assert model.config.vocab_size == spm_runs.VOCAB
  # The casing check holds for SentencePiece: an uncased model is not exported cased.
  with pytest.raises(ValueError, match='is an uncased vocab .* drop do_lower_case=False'):
    export.export(runs['pretrained'], 'hf', tmp_path / 'cased', do_lower_case=False)


def test_a_cased_sentencepiece_tokenizer_keeps_its_casing_in_transformers(tmp_path):
  cased = tmp_path / 'cased.model'
  vocab_learner.learn_sentencepiece(str(embedded.corpus_path()), cased, 512,
                                    do_lower_case=False, input_sentence_size=5_000)
  bundle = bundle_lib.Bundle(config={'max_position_embeddings': 64}, params={}, kind='encoder',
                             vocab_file=str(cased), do_lower_case=False)
  hf_sentencepiece.write(bundle, str(tmp_path))
  theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
  ours = vocab_files.for_model(cased, do_lower_case=False)
  for text in ODD_TEXTS:
    assert theirs(text, add_special_tokens=False)['input_ids'] == ours.encode(text), text
  assert theirs('KING')['input_ids'] != theirs('king')['input_ids']


def test_a_bpe_sentencepiece_model_is_refused_for_transformers(tmp_path):
  bpe = tmp_path / 'bpe.model'
  vocab_learner.learn_sentencepiece(str(embedded.corpus_path()), bpe, 512, model_type='bpe',
                                    input_sentence_size=5_000)
  with pytest.raises(ValueError, match='not a unigram model .*AlbertTokenizer reads unigram'):
    hf_sentencepiece.build(str(bpe), do_lower_case=True)


def test_a_byte_fallback_sentencepiece_model_is_refused_for_transformers_naming_it(tmp_path):
  """Refused by the probes before, blaming 'a final Σ, or combining marks'."""
  model = tmp_path / 'bytes.model'
  with gzip.open(embedded.corpus_path(), 'rt', encoding='utf-8') as f:
    lines = [line.lower() for line in itertools.islice(f, 5_000) if line.strip()]
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_prefix=str(tmp_path / 'bytes'), vocab_size=512,
      byte_fallback=True, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], minloglevel=2)
  bundle = bundle_lib.Bundle(config={'max_position_embeddings': 64}, params={}, kind='encoder',
                             vocab_file=str(model), do_lower_case=True)
  with pytest.raises(ValueError,
                     match=r'as bytes \(byte_fallback\).*transformers would give other ids'):
    hf_sentencepiece.write(bundle, str(tmp_path))


def test_a_model_that_keeps_a_typed_word_start_is_refused_for_transformers(tmp_path):
  """A model without NFKC (--normalization_rule_name=identity) reads a '▁' typed in the text as
  a piece, where transformers' Metaspace splits words there: it passed the probes and was
  exported with a tokenizer that gave other ids for such text."""
  model = tmp_path / 'identity.model'
  with gzip.open(embedded.corpus_path(), 'rt', encoding='utf-8') as f:
    lines = [line.lower() for line in itertools.islice(f, 5_000) if line.strip()]
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_prefix=str(tmp_path / 'identity'), vocab_size=512,
      normalization_rule_name='identity', pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], minloglevel=2)
  bundle = bundle_lib.Bundle(config={'max_position_embeddings': 64}, params={}, kind='encoder',
                             vocab_file=str(model), do_lower_case=True)
  with pytest.raises(ValueError, match="other ids than bertjax for 'a \u2581b"):
    hf_sentencepiece.write(bundle, str(tmp_path))


def test_the_unknown_and_padding_pieces_are_the_models_own_for_transformers(tmp_path):
  """spm_train's default ids (<unk> 0, no pad piece) and a renamed unknown piece (--unk_piece)
  were refused, the export lacking '<pad>' or '<unk>' by name: transformers takes the model's
  own (no pad piece: the piece of id 0, which bertjax pads with). transformers 5's
  AlbertTokenizer takes id 1 for unknown text whatever the model's: a model whose <unk> is
  elsewhere (--pad_id=0 --unk_id=2) gave other ids than bertjax, silently."""
  with gzip.open(embedded.corpus_path(), 'rt', encoding='utf-8') as f:
    lines = [line.lower() for line in itertools.islice(f, 5_000) if line.strip()]
  shapes = {'default': ({}, '<unk>', '<unk>', 0),
            'oov': ({'unk_piece': '<oov>', 'pad_id': 0, 'unk_id': 1, 'bos_id': -1,
                     'eos_id': -1}, '<pad>', '<oov>', 0),
            'unk2': ({'pad_id': 0, 'unk_id': 2, 'bos_id': -1, 'eos_id': -1}, '<pad>', '<unk>', 0)}
  for name, (options, pad, unk, pad_id) in shapes.items():
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(tmp_path / name), vocab_size=512,
        control_symbols=['[CLS]', '[SEP]', '[MASK]'], minloglevel=2, **options)
    bundle = bundle_lib.Bundle(config={'max_position_embeddings': 64}, params={},
                               kind='encoder', vocab_file=str(tmp_path / f'{name}.model'),
                               do_lower_case=True)
    hf_sentencepiece.write(bundle, str(tmp_path / name))
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / name))
    ours = vocab_files.for_model(bundle.vocab_file, do_lower_case=True)
    assert (theirs.pad_token, theirs.unk_token, theirs.pad_token_id) == (pad, unk, pad_id)
    assert theirs.unk_token_id == ours.sp_model.unk_id()
    for text in ODD_TEXTS:
      assert theirs(text, add_special_tokens=False)['input_ids'] == ours.encode(text), text
    batch = theirs(['the king', 'the king doth speak'], padding=True)
    assert batch['input_ids'][0][-1] == pad_id and len(theirs) == 512


def test_a_model_with_albert_style_special_pieces_is_refused_saying_what_holds_it(tmp_path):
  """<cls> <sep> <mask> are not the [CLS] [SEP] [MASK] bertjax builds inputs with."""
  with gzip.open(embedded.corpus_path(), 'rt', encoding='utf-8') as f:
    lines = [line.lower() for line in itertools.islice(f, 5_000) if line.strip()]
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_prefix=str(tmp_path / 'albert'), vocab_size=512,
      control_symbols=['<cls>', '<sep>', '<mask>'], pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      minloglevel=2)
  bundle = bundle_lib.Bundle(config={'max_position_embeddings': 64}, params={}, kind='encoder',
                             vocab_file=str(tmp_path / 'albert.model'), do_lower_case=True)
  with pytest.raises(ValueError, match=r'lacks \[CLS\], \[SEP\], \[MASK\], which bertjax builds '
                     r'.*<cls> <sep> <mask> are not taken for them.*; no export format holds'):
    hf_sentencepiece.write(bundle, str(tmp_path / 'out'))


def test_tf1_keeps_the_model_file_beside_the_checkpoint_and_reads_back_equal(runs, tmp_path):
  out = export.export(runs['classify'], 'tf1', tmp_path / 'tf1')
  assert (out / 'spiece.model').read_bytes() == runs['spm_model'].read_bytes()
  assert not (out / 'vocab.txt').exists()
  bundle = sources.load(str(runs['classify']))
  back = tf1_checkpoint.load(str(out))
  assert back.vocab_file == str(out / 'spiece.model') and back.is_sentencepiece()
  assert (back.kind, back.labels, back.do_lower_case) == ('classification', bundle.labels, True)
  assert set(back.params) == set(bundle.params)
  for name, value in bundle.params.items():
    np.testing.assert_array_equal(back.params[name], value)
  # ALBERT's own name for the file reads too; two models beside it are ambiguous.
  (out / 'spiece.model').rename(out / '30k-clean.model')
  assert tf1_checkpoint.load(str(out)).vocab_file == str(out / '30k-clean.model')
  (out / 'other.model').write_bytes(runs['spm_model'].read_bytes())
  with pytest.raises(ValueError, match='holds 2 SentencePiece models'):
    tf1_checkpoint.load(str(out))


def spm_batch(tok, texts, pairs=None, max_len=128) -> dict:
  """[CLS] a [SEP] (b [SEP]) ids by bertjax's tokenizer, pairs truncated longest first."""
  rows, segs = [], []
  for i, text in enumerate(texts):
    a, b = tok.encode(text), (tok.encode(pairs[i]) if pairs else None)
    if b is None:
      rows.append([tok.vocab['[CLS]'], *a[:max_len - 2], tok.vocab['[SEP]']])
      segs.append([0] * len(rows[-1]))
      continue
    while len(a) + len(b) > max_len - 3:
      (a if len(a) > len(b) else b).pop()
    rows.append([tok.vocab['[CLS]'], *a, tok.vocab['[SEP]'], *b, tok.vocab['[SEP]']])
    segs.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
  width = max(map(len, rows))
  pad = lambda row: row + [0] * (width - len(row))  # noqa: E731
  return {'input_ids': np.array([pad(r) for r in rows], np.int32),
          'input_mask': np.array([pad([1] * len(r)) for r in rows], np.int32),
          'segment_ids': np.array([pad(s) for s in segs], np.int32)}


def test_saved_model_serves_raw_text_with_the_sentencepiece_tokenizer_in_the_graph(
    runs, tmp_path):
  paths = {name: str(export.export(runs[name], 'saved_model', tmp_path / name))
           for name in ('pretrained', 'classify')}
  texts = ODD_TEXTS + runs['texts']
  requests = {
      'text': (paths['pretrained'], 'serving_default', {'text': texts}),
      'pairs': (paths['pretrained'], 'pairs', {'text_a': [a for a, _ in PAIRS] + texts[:4],
                                               'text_b': [b for _, b in PAIRS] + texts[4:8]}),
      'classify': (paths['classify'], 'serving_default', {'text': texts}),
  }
  out = saved_model_test.serve(requests, tmp_path)  # TensorFlow alone: no jax, no bertjax.
  tok = vocab_files.for_model(runs['spm_model'], do_lower_case=True)
  pretrained = sources.load(str(runs['pretrained']))
  for name, pairs in (('text', None), ('pairs', requests['pairs'][2]['text_b'])):
    firsts = requests[name][2].get('text', requests[name][2].get('text_a'))
    batch = spm_batch(tok, firsts, pairs, pretrained.max_seq_length)
    np.testing.assert_array_equal(np.array(out[name]['input_mask']), batch['input_mask'])
    ours = saved_model.numpy_outputs(pretrained, batch)
    for key in ('sequence_output', 'pooled_output', 'mean_pooled_output'):
      np.testing.assert_allclose(np.array(out[name][key]), ours[key], atol=1e-5, rtol=0,
                                 err_msg=f'{name} {key}')
  classify = sources.load(str(runs['classify']))
  ours = saved_model.numpy_outputs(classify, spm_batch(tok, texts,
                                                       max_len=classify.max_seq_length))
  np.testing.assert_allclose(np.array(out['classify']['probabilities']),
                             ours['probabilities'], atol=1e-5, rtol=0)
  assert out['classify']['label'] == [classify.labels[i]
                                      for i in ours['probabilities'].argmax(-1)]


def test_saved_model_refuses_sentencepiece_answers_and_tags(tmp_path):
  spm_model = tmp_path / 'spm.model'
  vocab_learner.learn_sentencepiece(str(embedded.corpus_path()), spm_model, 512,
                                    input_sentence_size=5_000)
  for kind in ('span', 'tagging'):
    bundle = bundle_lib.Bundle(config={'max_position_embeddings': 64},
                               params={'bert/pooler/kernel': None}, kind=kind,  # As trained.
                               vocab_file=str(spm_model), do_lower_case=True,
                               labels=('O', 'X'), source='model')
    with pytest.raises(ValueError, match=f'is a {kind} model whose vocab .* is a SentencePiece '
                       'model: --format=saved_model holds SentencePiece models of '
                       'sentence-level kinds only'):
      saved_model.save(bundle, tmp_path / kind)
    assert not (tmp_path / kind).exists()
    # Every refusal names the formats that do hold it: never one that refuses it too (tf1
    # holds no tagging head, the SavedModel no SentencePiece one of these kinds).
    holders = {'span': ['hf', 'tf1', 'onnx'], 'tagging': ['hf', 'onnx']}[kind]
    assert bundle_lib.holders(bundle) == holders
    for fmt in ('saved_model', 'tf1', 'sentence_transformers'):
      if fmt in holders:
        continue
      with pytest.raises(ValueError) as refused:
        bundle_lib.check_holds(bundle, fmt)
        bundle_lib.check_tokenizer(bundle, fmt)
      assert str(refused.value).endswith(f'use --format={" or --format=".join(holders)}.'), (
          refused.value)


def test_a_transformers_export_reads_back_and_exports_again_to_tf1(runs, classify_hf, tmp_path):
  hf = classify_hf
  bundle = sources.load(str(runs['classify']))
  back = sources.load(str(hf))
  assert back.vocab_file == str(hf / 'spiece.model') and back.is_sentencepiece()
  # From the transformers folder on, as from the run: export reads its vocab and casing.
  out = export.export(str(hf), 'tf1', tmp_path / 'tf1')
  assert (out / 'spiece.model').read_bytes() == runs['spm_model'].read_bytes()
  again = tf1_checkpoint.load(str(out))
  assert (again.kind, again.labels, again.do_lower_case) == ('classification', bundle.labels, True)
  assert set(again.params) == set(bundle.params)
  for name, value in bundle.params.items():
    np.testing.assert_array_equal(again.params[name], value)
  ours = vocab_files.for_model(runs['spm_model'], do_lower_case=True)
  theirs = vocab_files.for_model(again.vocab_file, again.do_lower_case)
  for text in ODD_TEXTS + runs['texts']:
    assert theirs.encode(text) == ours.encode(text), text


def test_fine_tuning_from_the_tf1_export_equals_fine_tuning_from_the_run(runs, tmp_path):
  tf1 = export.export(runs['pretrained'], 'tf1', tmp_path / 'tf1')
  assert init_from.vocab_file(str(tf1)) == str(tf1 / 'spiece.model')
  classify, _ = spm_runs.classifier(tf1, tmp_path / 'finetune', epochs=1)
  ours, theirs = sources.load(str(runs['classify'])), sources.load(str(classify))
  assert theirs.is_sentencepiece() and theirs.labels == ours.labels
  # The same encoder and tokenizer, the same data and seed: the same fine-tuned weights.
  for name, value in ours.params.items():
    np.testing.assert_allclose(theirs.params[name], value, atol=1e-6, rtol=0, err_msg=name)
  # ALBERT's file name reads too; two models beside the checkpoint are ambiguous.
  (tf1 / 'spiece.model').rename(tf1 / '30k-clean.model')
  assert init_from.vocab_file(str(tf1)) == str(tf1 / '30k-clean.model')
  (tf1 / 'other.model').write_bytes(runs['spm_model'].read_bytes())
  with pytest.raises(ValueError, match='holds 2 SentencePiece models'):
    init_from.vocab_file(str(tf1))


def test_onnx_runs_the_sentencepiece_classifier_as_bertjax(runs, tmp_path):
  # The tokenizer outside the graph is the hf export's (AlbertTokenizer's files): its ids are
  # bertjax's, and onnxruntime's logits and probabilities equal bertjax's own at 1e-5.
  out = export.export(str(runs['classify']), 'onnx', tmp_path / 'onnx')
  assert (out / 'spiece.model').read_bytes() == runs['spm_model'].read_bytes()
  ours = vocab_files.for_model(runs['spm_model'], do_lower_case=True)
  texts = ODD_TEXTS + runs['texts'][:4]
  enc, _ = onnx_export_test.run_onnx(out, texts)
  for text, ids, mask in zip(texts, enc['input_ids'], enc['attention_mask'], strict=True):
    assert ids[mask == 1].tolist() == [ours.vocab['[CLS]'], *ours.encode(text),
                                       ours.vocab['[SEP]']], text
  onnx_export_test.assert_equal_outputs(sources.load(str(runs['classify'])), out, texts)


def test_sentence_transformers_encodes_the_pretraining_run_as_bertjax(runs, tmp_path):
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  out = export.export(runs['pretrained'], 'sentence_transformers', tmp_path / 'st')
  assert (out / 'spiece.model').read_bytes() == runs['spm_model'].read_bytes()
  model = SentenceTransformer(str(out), device='cpu')
  assert type(model.tokenizer).__name__.startswith('AlbertTokenizer')
  result = sources.load(str(runs['pretrained']))
  ours = vocab_files.for_model(runs['spm_model'], do_lower_case=True)
  texts = ODD_TEXTS + runs['texts'][:4]
  rows = [[ours.vocab['[CLS]'], *ours.encode(t)[:spm_runs.SEQ - 2], ours.vocab['[SEP]']]
          for t in texts]
  width = max(map(len, rows))
  batch = {'input_ids': np.array([r + [0] * (width - len(r)) for r in rows], np.int32),
           'input_mask': np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows],
                                  np.int32)}
  batch['segment_ids'] = np.zeros_like(batch['input_ids'])
  for text, row in zip(texts, rows, strict=True):  # Its own tokenization gives bertjax's ids.
    assert model.tokenize([text])['input_ids'][0].tolist() == row, text
  np.testing.assert_allclose(model.encode(texts),
                             saved_model.numpy_outputs(result, batch)['mean_pooled_output'],
                             atol=1e-5, rtol=0)
  back = sources.load(str(out))
  assert back.is_sentencepiece() and back.pooling == 'mean' and back.embedding


@pytest.mark.parametrize('symbols', ['user_defined_symbols', 'control_symbols'])
def test_typed_special_tokens_transformers_reads_otherwise_are_warned_of(tmp_path, caplog,
                                                                         symbols):
  """A cased model's [MASK] typed in a text: bertjax reads it as text, transformers' unigram model
  matches the piece even with split_special_tokens (a task model's setting), and no
  tokenizer.json keeps the ids while stopping the match. The export was silent about it."""
  with gzip.open(embedded.corpus_path(), 'rt', encoding='utf-8') as f:
    lines = [line for line in itertools.islice(f, 5_000) if line.strip()]
  said = {}
  for cased in (True, False):
    prefix = tmp_path / f'{symbols}-{cased}'
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines if cased else [line.lower() for line in lines]),
        model_prefix=str(prefix), vocab_size=512, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        minloglevel=2, **{symbols: ['[CLS]', '[SEP]', '[MASK]']})
    for kind in ('classification', 'encoder'):
      out = tmp_path / f'{cased}-{kind}'
      out.mkdir()
      bundle = bundle_lib.Bundle(config={'max_position_embeddings': 64}, params={}, kind=kind,
                                 vocab_file=f'{prefix}.model', do_lower_case=not cased)
      caplog.clear()
      with caplog.at_level(logging.WARNING):
        hf_sentencepiece.write(bundle, str(out))
      said[cased, kind] = [r.getMessage() for r in caplog.records if 'typed' in r.getMessage()]
      if kind == 'classification':  # What transformers itself reads, for the warning's truth.
        theirs = transformers.AutoTokenizer.from_pretrained(out, split_special_tokens=True)
        ours = vocab_files.from_files(spm_model_file=f'{prefix}.model',
                                      do_lower_case=not cased)
        text = hf_sentencepiece.TYPED_SPECIALS
        differs = theirs(text, add_special_tokens=False)['input_ids'] != ours.encode(text)
        assert differs == cased, (cased, theirs.tokenize(text), ours.tokenize(text))
  assert len(said[True, 'classification']) == 1, said
  assert 'reads [MASK], [SEP] or [CLS] typed in a text as those tokens' in said[
      True, 'classification'][0]
  # An encoder keeps transformers' default (typed [MASK] a mask); a lower-cased model reads alike.
  assert not said[True, 'encoder'] and not said[False, 'classification'], said
