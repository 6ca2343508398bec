"""Models whose weights, head or tokenizer bertjax cannot hold are refused when read, not changed.

Each test builds a tiny transformers (or TF1) checkpoint of one such kind and checks the one
line that refuses it, or (sharded checkpoints, a transformers 5.x tokenizer.json without
vocab.txt) that it is read as transformers reads it.
"""

import dataclasses
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
import torch
import transformers

from bertjax import export
from bertjax.interop import export_folder
from bertjax.interop import hf_checkpoint
from bertjax.interop import hf_names
from bertjax.interop import init_from
from bertjax.interop import sources
from bertjax.interop import tf1_checkpoint
from bertjax.text import vocab_files

WORDS = ('the is was to of and in it he she they this that on for with film movie great dull '
         'weather lovely today sunny outside drove stadium').split()
VOCAB = (['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + list('abcdefghijklmnopqrstuvwxyz.,!?')
         + ['##' + c for c in 'abcdefghijklmnopqrstuvwxyz'] + WORDS)
VOCAB += [f'##x{i}' for i in range(128 - len(VOCAB))]  # 128 entries: no vocab padding.
CASED_VOCAB = VOCAB[:-4] + ['The', 'He', 'Lovely', 'WEATHER']
TEXTS = ['The weather is lovely today.', 'He drove to the stadium!', 'a']


def make(directory: pathlib.Path, cls: str = 'BertModel', tokenizer: dict | None = None,
         vocab: list = VOCAB, **config) -> torch.nn.Module:
  """A tiny random transformers `cls` with its vocab.txt and tokenizer files in `directory`."""
  directory.mkdir(parents=True, exist_ok=True)
  (directory / 'vocab.txt').write_text(''.join(f'{t}\n' for t in vocab))
  torch.manual_seed(0)
  hf_config = transformers.BertConfig(**{
      'vocab_size': len(VOCAB), 'hidden_size': 32, 'num_hidden_layers': 2,
      'num_attention_heads': 4, 'intermediate_size': 64, 'max_position_embeddings': 64,
      **config})
  model = getattr(transformers, cls)(hf_config).eval()
  with torch.no_grad():  # Non-zero biases and LayerNorm offsets, so that every tensor counts.
    for name, p in model.named_parameters():
      if name.endswith('bias') or 'LayerNorm' in name:
        p.add_(torch.randn_like(p) * 0.1)
  model.save_pretrained(str(directory))
  transformers.BertTokenizerFast(str(directory / 'vocab.txt'),
                                 **(tokenizer or {})).save_pretrained(str(directory))
  return model


def edit_json(path: pathlib.Path, **fields):
  path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


@pytest.fixture(scope='module')
def encoder_dir(tmp_path_factory) -> pathlib.Path:
  directory = tmp_path_factory.mktemp('encoder')
  make(directory)
  return directory


@pytest.mark.parametrize('field', ['is_decoder', 'add_cross_attention'])
def test_a_decoder_config_is_refused_by_its_field(field):
  hf_config = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=1,
                                      num_attention_heads=4, intermediate_size=64).to_dict()
  hf_names.config_from_hf(hf_config)  # The same config as an encoder is read.
  with pytest.raises(ValueError, match=f'config.json sets {field}: true'):
    hf_names.config_from_hf({**hf_config, field: True})


def test_a_bert_lm_head_model_is_refused(tmp_path):
  make(tmp_path, 'BertLMHeadModel', is_decoder=True)
  with pytest.raises(ValueError, match='is_decoder: true'):
    sources.load(tmp_path)


@pytest.mark.parametrize('tokenizer, field', [
    ({'do_lower_case': True, 'strip_accents': False}, 'strip_accents: false'),  # BETO uncased.
    ({'do_lower_case': False, 'strip_accents': True}, 'strip_accents: true'),
    ({'tokenize_chinese_chars': False}, 'tokenize_chinese_chars: false'),
])
def test_a_tokenizer_bertjax_cannot_reproduce_is_refused(tmp_path, tokenizer, field):
  make(tmp_path, tokenizer=tokenizer)
  with pytest.raises(ValueError, match=f'tokenizer_config.json sets {field}'):
    sources.load(tmp_path)
  with pytest.raises(ValueError, match=f'tokenizer_config.json sets {field}'):
    init_from.vocab_file(str(tmp_path))  # Where fine-tuning takes its tokenizer.
  with pytest.raises(ValueError, match=f'tokenizer_config.json sets {field}'):
    hf_checkpoint.load(tmp_path, with_heads=False)


def test_the_original_tokenizer_settings_are_read(encoder_dir, tmp_path):
  """strip_accents unset (or equal to the casing) and Chinese characters split: as bertjax."""
  assert sources.load(encoder_dir).do_lower_case
  make(tmp_path, tokenizer={'do_lower_case': False, 'strip_accents': False}, vocab=CASED_VOCAB)
  assert not sources.load(tmp_path).do_lower_case


def test_added_tokens_are_refused_not_taken_for_vocab_padding(tmp_path):
  model = make(tmp_path)
  tok = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
  tok.add_tokens([f'newword{i}' for i in range(8)])
  model.resize_token_embeddings(len(tok))  # 136 rows: a multiple of 8, as padding would be.
  model.save_pretrained(str(tmp_path))
  tok.save_pretrained(str(tmp_path))
  (tmp_path / 'vocab.txt').write_text(''.join(f'{t}\n' for t in VOCAB))  # Still 128 entries.
  for read in (sources.load, init_from.vocab_file):  # Export and embed; fine-tuning's vocab.
    with pytest.raises(ValueError, match=r"tokenizer adds 8 tokens past its 128-entry vocab "
                       r"\(ids 128\.\., e\.g\. 'newword0'"):
      read(str(tmp_path))


def test_rows_past_the_vocab_that_no_token_names_are_padding(encoder_dir, tmp_path):
  make(tmp_path, vocab=VOCAB[:120])  # 128 rows: 120 padded to a multiple of 8 (and of 64).
  result = sources.load(tmp_path)
  assert result.params['bert/embeddings/word_embeddings/embedding'].shape[0] == 128


def test_buffers_and_rows_no_token_names_are_not_weights(encoder_dir, tmp_path):
  """position_ids (a buffer older transformers saved) is skipped, not refused as unread."""
  from safetensors import numpy as st_numpy  # noqa: PLC0415
  for name in ('config.json', 'vocab.txt', 'tokenizer.json', 'tokenizer_config.json'):
    (tmp_path / name).write_bytes((encoder_dir / name).read_bytes())
  state = st_numpy.load_file(str(encoder_dir / 'model.safetensors'))
  state['embeddings.position_ids'] = np.arange(64)[None]
  st_numpy.save_file(state, str(tmp_path / 'model.safetensors'))
  assert sorted(sources.load(tmp_path).params) == sorted(sources.load(encoder_dir).params)


def test_an_untied_mlm_decoder_is_refused_when_read(tmp_path):
  model = make(tmp_path, 'BertForMaskedLM', tie_word_embeddings=False)
  with torch.no_grad():
    model.cls.predictions.decoder.weight.add_(1.0)
  model.save_pretrained(str(tmp_path))
  with pytest.raises(ValueError, match='cls.predictions.decoder.weight differs'):
    hf_checkpoint.read(tmp_path)


def test_a_multi_label_classifier_is_refused(tmp_path):
  make(tmp_path, 'BertForSequenceClassification', num_labels=3,
       problem_type='multi_label_classification')
  with pytest.raises(ValueError, match='problem_type: multi_label_classification'):
    sources.load(tmp_path)


def test_a_next_sentence_prediction_model_is_refused(tmp_path):
  make(tmp_path, 'BertForNextSentencePrediction')
  with pytest.raises(ValueError, match='names BertForNextSentencePrediction, whose head'):
    sources.load(tmp_path)


def test_a_classifier_without_architectures_is_refused(tmp_path):
  make(tmp_path, 'BertForSequenceClassification', num_labels=3)
  edit_json(tmp_path / 'config.json', architectures=None)
  with pytest.raises(ValueError, match=r'holds 2 weights .*\(encoder, 2 layers\) does not read, '
                     r'e\.g\. classifier\.bias, classifier\.weight'):
    sources.load(tmp_path)


def test_layers_past_the_config_are_refused(tmp_path):
  make(tmp_path, 'BertForPreTraining')
  edit_json(tmp_path / 'config.json', num_hidden_layers=1)
  with pytest.raises(ValueError, match=r'\(pretraining, 1 layers\) does not read, e\.g\. '
                     r'encoder\.layer\.1\.'):
    sources.load(tmp_path)
  with pytest.raises(ValueError, match=r'layers past the 1 its config.json describes, e\.g\. '
                     r'encoder\.layer\.1\.'):
    hf_checkpoint.load(tmp_path)  # init_from's reader.


def test_tf1_layers_past_the_config_are_refused(encoder_dir, tmp_path):
  tf1_checkpoint.save(sources.load(encoder_dir), tmp_path)
  assert tf1_checkpoint.load(tmp_path).config['num_layers'] == 2
  edit_json(tmp_path / 'bert_config.json', num_hidden_layers=1)
  with pytest.raises(ValueError, match=r'holds 16 weights .*\(encoder, 1 layers\) does not read, '
                     r'e\.g\. bert/encoder/layer_1/'):
    tf1_checkpoint.load(tmp_path)


def sentence_transformers_dir(directory: pathlib.Path, pooling: str, dense: bool = False):
  """A tiny encoder with sentence-transformers' module files (pooled by `pooling`)."""
  make(directory)
  modules = [{'idx': 0, 'name': '0', 'path': '',
              'type': 'sentence_transformers.models.Transformer'},
             {'idx': 1, 'name': '1', 'path': '1_Pooling',
              'type': 'sentence_transformers.models.Pooling'}]
  if dense:
    modules.append({'idx': 2, 'name': '2', 'path': '2_Dense',
                    'type': 'sentence_transformers.models.Dense'})
  (directory / 'modules.json').write_text(json.dumps(modules))
  (directory / '1_Pooling').mkdir()
  (directory / '1_Pooling' / 'config.json').write_text(json.dumps(
      {'word_embedding_dimension': 32, f'pooling_mode_{pooling}_tokens': True}))


@pytest.mark.parametrize('pooling, dense, said', [
    ('mean_sqrt_len', False, 'it pools by pooling_mode_mean_sqrt_len_tokens'),
    ('mean', True, 'it runs Dense after pooling'),
])
@pytest.mark.parametrize('fmt', ['hf', 'sentence_transformers'])
def test_sentence_transformers_modules_bertjax_does_not_compute_refuse_an_export(
    tmp_path, pooling, dense, said, fmt):
  sentence_transformers_dir(tmp_path / 'model', pooling, dense)
  assert said in sources.load(tmp_path / 'model').not_computed  # embed reads it, and warns.
  with pytest.raises(ValueError, match=f'cannot export: {said}'):
    export.export(tmp_path / 'model', fmt, tmp_path / 'out')
  assert not (tmp_path / 'out').exists()


def test_a_tf1_export_refuses_a_layer_norm_eps_it_cannot_hold(tmp_path):
  make(tmp_path / 'model', layer_norm_eps=1e-3)
  with pytest.raises(ValueError, match=r'layer_norm_eps=0\.001: .* fmt=tf1 cannot hold'):
    export.export(tmp_path / 'model', 'tf1', tmp_path / 'out')
  assert not (tmp_path / 'out').exists()


def read_weights(directory) -> dict:
  result = hf_checkpoint.read(directory)
  return result.params


@pytest.mark.parametrize('safe', [True, False])
def test_a_sharded_checkpoint_reads_as_the_whole_one(encoder_dir, tmp_path, safe):
  model = transformers.BertModel.from_pretrained(str(encoder_dir))
  if safe:
    model.save_pretrained(str(tmp_path), max_shard_size='20KB')
    assert (tmp_path / 'model.safetensors.index.json').exists()
  else:  # transformers 5.x writes no .bin: shards laid out as its 4.x wrote them.
    state = model.state_dict()
    names = sorted(state)
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
      shard = f'pytorch_model-0000{i + 1}-of-00002.bin'
      torch.save({n: state[n] for n in part}, tmp_path / shard)
      weight_map.update({n: shard for n in part})
    (tmp_path / 'pytorch_model.bin.index.json').write_text(json.dumps(
        {'metadata': {}, 'weight_map': weight_map}))
    (tmp_path / 'config.json').write_text((encoder_dir / 'config.json').read_text())
  assert not (tmp_path / 'model.safetensors').exists()
  for name in ('vocab.txt', 'tokenizer.json', 'tokenizer_config.json'):
    (tmp_path / name).write_bytes((encoder_dir / name).read_bytes())
  want, got = read_weights(encoder_dir), read_weights(tmp_path)
  assert sorted(got) == sorted(want)
  for name, value in want.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  _, params, report = hf_checkpoint.load(tmp_path, with_heads=False)  # init_from's reader.
  assert not report.initialised and params['embeddings']['word_embeddings']['embedding'].shape == (
      128, 32)


@pytest.mark.parametrize('lower', [True, False])
def test_a_tokenizer_json_without_vocab_txt_gives_the_vocab_and_casing(tmp_path, monkeypatch,
                                                                       lower):
  """transformers 5.x saves tokenizer.json and tokenizer_config.json only."""
  monkeypatch.setenv('BERTJAX_CACHE', str(tmp_path / 'cache'))
  vocab = VOCAB if lower else CASED_VOCAB
  make(tmp_path / 'model', tokenizer={'do_lower_case': lower}, vocab=vocab)
  (tmp_path / 'model' / 'vocab.txt').unlink()
  result = sources.load(tmp_path / 'model')
  assert pathlib.Path(result.vocab_file).read_text().splitlines() == vocab
  assert result.do_lower_case == lower
  assert init_from.vocab_file(str(tmp_path / 'model')) == result.vocab_file  # Same file again.
  from bertjax.text import vocab_files  # noqa: PLC0415
  ours = vocab_files.for_model(result.vocab_file, result.do_lower_case)
  theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / 'model'))
  texts = TEXTS + ['Café Lovely WEATHER']
  assert [ours.encode(t) for t in texts] == [
      theirs(t, add_special_tokens=False)['input_ids'] for t in texts]


def test_a_tokenizer_json_vocab_with_gaps_is_refused(encoder_dir, tmp_path, monkeypatch):
  monkeypatch.setenv('BERTJAX_CACHE', str(tmp_path / 'cache'))
  for name in ('config.json', 'model.safetensors', 'tokenizer_config.json'):
    (tmp_path / name).write_bytes((encoder_dir / name).read_bytes())
  tokenizer_json = json.loads((encoder_dir / 'tokenizer.json').read_text())
  tokenizer_json['model']['vocab']['##x0'] = 500
  (tmp_path / 'tokenizer.json').write_text(json.dumps(tokenizer_json))
  with pytest.raises(ValueError, match=r'does not number its 128 tokens 0\.\.127'):
    sources.load(tmp_path)


def test_a_tf1_config_with_an_unknown_activation_says_so(encoder_dir, tmp_path):
  tf1_checkpoint.save(sources.load(encoder_dir), tmp_path)
  edit_json(tmp_path / 'bert_config.json', hidden_act='tanh')
  with pytest.raises(ValueError, match=r"^hidden_act 'tanh' in \S+/bert_config.json is not "
                     'supported'):
    tf1_checkpoint.load(tmp_path)


def test_a_tf1_write_that_fails_names_the_output(encoder_dir, tmp_path, monkeypatch):
  from bertjax.text import fast_tokenizer  # noqa: PLC0415
  tf, _ = fast_tokenizer.import_tf()

  def refused(**_):  # A full disk: export_writers_test (said as every format says it).
    raise tf.errors.PermissionDeniedError(None, None, 'Permission denied')
  monkeypatch.setattr(tf.raw_ops, 'SaveV2', refused)
  with pytest.raises(OSError, match=re.escape(
      f'{tmp_path / "out"}: the checkpoint could not be written (PermissionDeniedError: '
      'Permission denied)')):
    tf1_checkpoint.save(sources.load(encoder_dir), tmp_path / 'out')


def test_a_tf1_export_of_the_tanh_gelu_says_the_original_refuses_it(tmp_path, caplog):
  make(tmp_path / 'model', hidden_act='gelu_new')
  export.export(tmp_path / 'model', 'tf1', tmp_path / 'out')
  assert json.loads((tmp_path / 'out' / 'bert_config.json').read_text())['hidden_act'] == 'gelu_new'
  assert "google-research/bert's modeling.py knows only gelu" in caplog.text


@pytest.mark.parametrize('limit', [100, 200])
def test_the_exported_tokenizer_json_splits_a_word_as_long_as_the_model_does(encoder_dir,
                                                                             tmp_path, limit):
  """A transformers folder's own limit (100, as transformers saved it), or the original BERT's
  200 of a model bertjax pre-trained: tokenizer.json carries the model's."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  bundle = dataclasses.replace(sources.load(encoder_dir), max_chars_per_word=limit)
  hf_checkpoint.save(bundle, tmp_path / 'out')
  theirs = tokenizers.Tokenizer.from_file(str(tmp_path / 'out' / 'tokenizer.json'))
  ours = vocab_files.for_model(encoder_dir / 'vocab.txt', True, max_chars_per_word=limit)
  for word in ('ab' * 30, 'ab' * (limit // 2), 'ab' * (limit // 2 + 1)):  # At the limit: pieces.
    assert theirs.encode(word, add_special_tokens=False).ids == ours.encode(word)
  assert ours.encode('ab' * (limit // 2 + 1)) == [ours.vocab['[UNK]']]
  assert ours.encode('ab' * (limit // 2)) != [ours.vocab['[UNK]']]


@pytest.mark.parametrize('fmt', ['hf', 'saved_model'])
def test_an_export_to_a_full_disk_is_one_line_and_replaces_nothing(encoder_dir, tmp_path, fmt):
  """The output on a 96 KiB tmpfs (a private mount namespace) that holds an earlier export."""
  if subprocess.run(['unshare', '-rm', 'true'], capture_output=True, check=False).returncode:
    message = 'unshare -rm (user and mount namespaces) is not permitted on this machine'
    if os.environ.get('CI', '').lower() == 'true':  # CI has them: it runs this test.
      pytest.fail(message)
    pytest.skip(message)
  disk, kept = tmp_path / 'disk', tmp_path / 'kept'
  disk.mkdir()
  export_cmd = shlex.join([sys.executable, '-m', 'bertjax.export', f'--from={encoder_dir}',
                           f'--format={fmt}', f'--output={disk}/out', '--overwrite'])
  earlier = (f'mkdir {disk}/out && echo earlier > {disk}/out/config.json && echo '
             f"'{{\"files\": [\"config.json\"]}}' > {disk}/out/{export_folder.MANIFEST}")
  script = (f'mount -t tmpfs -o size=96k tmpfs {disk} && {earlier} && {export_cmd}; rc=$?; '
            f'cp -a {disk}/. {kept}/; exit $rc')
  process = subprocess.run(['unshare', '-rm', 'sh', '-c', script], capture_output=True,
                           text=True, check=False, cwd=pathlib.Path(__file__).parents[2])
  assert process.returncode == 1, process.stderr[-3000:]
  assert re.search(rf'^error: the disk holding --output={disk}/out is full \(No space left on '
                   r'device\): nothing was replaced\. Free space .* or pass another --output\.$',
                   process.stderr, re.M), process.stderr[-3000:]
  assert 'Traceback' not in process.stderr
  assert (kept / 'out' / 'config.json').read_text() == 'earlier\n'
  assert sorted(p.name for p in kept.iterdir()) == ['out']


def test_a_models_file_given_for_its_folder_says_what_to_pass(tmp_path):
  """Pass T: a TF1 checkpoint's .index, or a config.json / weights file, was told to pass 'a
  bertjax workdir', never the prefix or the folder holding it."""
  (tmp_path / 'model.ckpt-20.index').write_bytes(b'x')
  (tmp_path / 'config.json').write_text('{}')
  with pytest.raises(ValueError, match=re.escape(
      f'{tmp_path}/model.ckpt-20.index is one file of a TF1 checkpoint: pass its prefix '
      f'{tmp_path}/model.ckpt-20 (or the folder')):
    sources.load(tmp_path / 'model.ckpt-20.index')
  with pytest.raises(ValueError, match=re.escape(
      f'{tmp_path}/config.json is a file: pass the folder that holds it ({tmp_path}): a '
      'transformers BERT directory')):
    sources.load(tmp_path / 'config.json')


def test_a_tf1_folder_without_its_config_names_the_missing_file(tmp_path):
  (tmp_path / 'bert_model.ckpt.index').write_bytes(b'x')
  (tmp_path / 'bert_model.ckpt.data-00000-of-00001').write_bytes(b'x')
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{tmp_path} holds a TF1 checkpoint (bert_model.ckpt.index) but no bert_config.json: put '
      'the bert_config.json it was trained with beside it')):
    sources.load(tmp_path)
  with pytest.raises(FileNotFoundError, match=re.escape(  # Fine-tuning's and pre-training's.
      f'{tmp_path} holds a TF1 checkpoint (bert_model.ckpt.index) but no bert_config.json')):
    init_from.model_config(str(tmp_path))


def test_a_tagger_saved_without_id2label_reads_transformers_label_names(tmp_path):
  """Pass T: transformers 5 leaves a default id2label out of config.json; such a
  BertForTokenClassification was refused ('its tagging head has 2 outputs but ... 0')."""
  make(tmp_path, 'BertForTokenClassification')
  assert 'id2label' not in json.loads((tmp_path / 'config.json').read_text())
  result = sources.load(tmp_path)
  assert (result.kind, result.labels, result.labels_named) == (
      'tagging', ('LABEL_0', 'LABEL_1'), False)


@pytest.mark.parametrize('model_max_length, want', [(48, 48), (512, 64), (None, 64), (1e30, 64)],
                         ids=['under_the_positions', 'past_them', 'unset', 'no_limit'])
def test_a_plain_folder_cuts_texts_where_its_tokenizer_does(encoder_dir, tmp_path,
                                                           model_max_length, want):
  """Pass AL's leftover: the loader recorded 128 for every plain transformers folder, so its
  SavedModel, sentence-transformers and ONNX exports cut texts at 128 tokens where the folder's
  own tokenizer reads up to its model_max_length (unset or transformers' "no limit": the position
  table), as SentenceTransformer, loading the same folder, reads it."""
  import sentence_transformers  # pylint: disable=g-import-not-at-top
  folder = shutil.copytree(encoder_dir, tmp_path / 'plain')
  settings = json.loads((folder / 'tokenizer_config.json').read_text())
  settings.pop('model_max_length', None)
  if model_max_length is not None:
    settings['model_max_length'] = model_max_length
  (folder / 'tokenizer_config.json').write_text(json.dumps(settings))
  theirs = sentence_transformers.SentenceTransformer(str(folder), device='cpu').max_seq_length
  assert sources.load(str(folder)).max_seq_length == theirs == want
  out = export.export(folder, 'sentence_transformers', tmp_path / 'st')
  assert json.loads((out / 'sentence_bert_config.json').read_text())['max_seq_length'] == want
  # An hf export keeps it (the position table was written, and embed of it cut elsewhere).
  out = export.export(folder, 'hf', tmp_path / 'hf')
  assert json.loads((out / 'tokenizer_config.json').read_text())['model_max_length'] == want
  assert sources.load(str(out)).max_seq_length == want


@pytest.mark.parametrize('text, said', [('{"do_lower_case": tr', 'is not JSON'),
                                        ('[512]', 'holds a JSON list, not the object')])
def test_a_damaged_tokenizer_config_is_one_error_naming_it(encoder_dir, tmp_path, text, said):
  """Hostile pass over the loader's reading of tokenizer_config.json: a file cut short gave
  json's bare 'Expecting value' without the file's name; a list, an AttributeError."""
  folder = shutil.copytree(encoder_dir, tmp_path / 'plain')
  (folder / 'tokenizer_config.json').write_text(text)
  with pytest.raises(ValueError, match=f'tokenizer_config.json {said}.*restore it from where '
                     'the model came from'):
    sources.load(str(folder))
