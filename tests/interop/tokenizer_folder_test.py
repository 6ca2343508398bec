"""A transformers folder's tokenizer settings beyond vocab and casing, read as transformers reads
them: WordPiece's longest word (tokenizer.json's max_input_chars_per_word), kept by every reader
(embed, predict and extract_features of the folder, fine-tuning from it) and by the exports."""

import dataclasses
import json
import shutil

import log_records
import pytest
import source_checks_test
import tokenizers
import transformers

from bertjax import embed
from bertjax import export
from bertjax import inference
from bertjax.interop import hf_checkpoint
from bertjax.interop import hf_tokenizer_files
from bertjax.interop import init_from
from bertjax.interop import sources
from bertjax.interop import tf1_checkpoint

# MiniLM's tokenizer.json sets 100: a 150-character run (a hash, a long token) is one [UNK]
# there; the original BERT's 200 would split it into pieces.
LONG = 'a1b2c3d4e5' * 15
TEXTS = [f'the commit {LONG} fixed it', f'short {LONG[:90]} word', 'plain text']


def transformers_ids(folder, texts):
  tok = transformers.AutoTokenizer.from_pretrained(str(folder))
  return [tok(t)['input_ids'][1:-1] for t in texts]


def test_the_word_limit_of_tokenizer_json_is_read_as_transformers_reads_it(minilm_dir):
  want = transformers_ids(minilm_dir, TEXTS)
  assert want[0].count(100) == 1 and 100 not in want[1]  # [UNK] at 150, pieces at 90.
  bundle = hf_checkpoint.read(minilm_dir)
  assert bundle.max_chars_per_word == 100
  assert [inference.tokenizer(bundle, '').encode(t) for t in TEXTS] == want
  assert [embed.load_tokenizer(minilm_dir).encode(t) for t in TEXTS] == want
  assert init_from.word_limit(str(minilm_dir)) == 100


def file_ids(folder, texts):
  """The ids of the folder's tokenizer.json as the tokenizers library applies it (its own
  settings: transformers 5's BertTokenizer rebuilds the pipeline with its own 100)."""
  tok = tokenizers.Tokenizer.from_file(str(folder / 'tokenizer.json'))
  tok.no_padding()  # MiniLM's file pads and cuts to 128.
  tok.no_truncation()
  return [tok.encode(t).ids[1:-1] for t in texts]


@pytest.mark.parametrize('limit', [50, 300])
def test_the_export_writes_the_limit_it_read(minilm_dir, tmp_path, limit):
  """A transformers export of a folder tokenizes as the folder's tokenizer.json did (a limit
  other than 100 and 200 here), and as bertjax reads it back."""
  folder = tmp_path / 'model'
  shutil.copytree(minilm_dir, folder)
  settings = json.loads((folder / 'tokenizer.json').read_text())
  settings['model']['max_input_chars_per_word'] = limit
  (folder / 'tokenizer.json').write_text(json.dumps(settings))
  texts = [f'x {"q" * limit} y', f'x {"q" * (limit + 1)} y'] + TEXTS
  want = file_ids(folder, texts)
  assert want[0] != want[1] and 100 in want[1]  # [UNK] past the limit, pieces at it.
  bundle = sources.load(str(folder))
  assert [inference.tokenizer(bundle, '').encode(t) for t in texts] == want
  hf_checkpoint.save(bundle, tmp_path / 'out')
  assert file_ids(tmp_path / 'out', texts) == want
  back = sources.load(str(tmp_path / 'out'))
  assert back.max_chars_per_word == limit
  assert [inference.tokenizer(back, '').encode(t) for t in texts] == want


def test_a_folder_without_tokenizer_json_is_read_with_transformers_limit(minilm_dir, tmp_path):
  """transformers' BertTokenizer reads a bare vocab.txt with 100, not the original's 200."""
  folder = tmp_path / 'model'
  shutil.copytree(minilm_dir, folder)
  (folder / 'tokenizer.json').unlink()
  bundle = hf_checkpoint.read(folder)
  assert bundle.max_chars_per_word == 100
  assert [inference.tokenizer(bundle, '').encode(t) for t in TEXTS] == (
      transformers_ids(folder, TEXTS))


@pytest.mark.parametrize('value', ['100', 0, True, None])
def test_a_limit_that_is_no_count_is_refused(minilm_dir, tmp_path, value):
  folder = tmp_path / 'model'
  shutil.copytree(minilm_dir, folder)
  settings = json.loads((folder / 'tokenizer.json').read_text())
  settings['model']['max_input_chars_per_word'] = value
  (folder / 'tokenizer.json').write_text(json.dumps(settings))
  with pytest.raises(ValueError, match=r'tokenizer.json\'s WordPiece model sets '
                     r'max_input_chars_per_word: .*restore the file'):
    hf_checkpoint.read(folder)


def test_tokens_added_over_vocab_entries_are_refused(minilm_dir, tmp_path):
  """The relation-marker recipe: an [unused] slot renamed <e1> and added as a special token.
  transformers keeps it whole; bertjax's WordPiece would split it (< e ##1 >)."""
  folder = tmp_path / 'model'
  shutil.copytree(minilm_dir, folder)
  vocab = (folder / 'vocab.txt').read_text().splitlines()
  assert vocab[1] == '[unused0]'
  vocab[1] = '<e1>'
  (folder / 'vocab.txt').write_text(''.join(f'{t}\n' for t in vocab))
  settings = json.loads((folder / 'tokenizer.json').read_text())
  settings['model']['vocab'] = {t: i for i, t in enumerate(vocab)}
  settings['added_tokens'].append({**settings['added_tokens'][0], 'id': 1, 'content': '<e1>'})
  (folder / 'tokenizer.json').write_text(json.dumps(settings))
  tok = transformers.AutoTokenizer.from_pretrained(str(folder))
  assert 1 in tok('the <e1> marker')['input_ids']  # transformers reads it whole.
  with pytest.raises(ValueError, match=r"keeps 1 added tokens whole in any text \('<e1>' \(id "
                     r"1\)\), which bertjax's WordPiece tokenizer would split"):
    hf_checkpoint.read(folder)
  with pytest.raises(ValueError, match='keeps 1 added tokens whole'):
    init_from.vocab_file(str(folder))


def test_casing_only_tokenizer_json_records_is_read_so_and_said(tmp_path, monkeypatch):
  """No tokenizer_config.json, tokenizer.json's normalizer cased: transformers 5 lower-cases
  (its BertTokenizer's default), the file and the tokenizers library do not: bertjax reads it
  as the file says, and says once how to make every reader agree."""
  said = log_records.recorded_warnings(monkeypatch, hf_tokenizer_files)
  folder = tmp_path / 'model'
  source_checks_test.make(folder, tokenizer={'do_lower_case': False, 'strip_accents': False},
                          vocab=source_checks_test.CASED_VOCAB)
  (folder / 'tokenizer_config.json').unlink()
  text = 'The weather'
  file_tokens = tokenizers.Tokenizer.from_file(str(folder / 'tokenizer.json')).encode(text).tokens
  assert 'The' in file_tokens
  assert 'The' not in transformers.AutoTokenizer.from_pretrained(str(folder)).tokenize(text)
  bundle = hf_checkpoint.read(folder)
  assert not bundle.do_lower_case and 'The' in inference.tokenizer(bundle, '').tokenize(text)
  sources.load(str(folder))
  warned = [line for line in said if 'says cased text' in line]
  assert len(warned) == 1 and 'add a tokenizer_config.json with "do_lower_case": false' in (
      warned[0])


def test_a_tf1_export_keeps_the_word_limit(minilm_dir, tmp_path, monkeypatch):
  """bertjax_export.json carries it (google-research/bert's scripts read 200: said), and a TF1
  checkpoint with a transformers config.json beside it is read as TF1 by every reader."""
  said = log_records.recorded_warnings(monkeypatch, tf1_checkpoint)
  out = export.export(minilm_dir, 'tf1', tmp_path / 'tf1')
  assert any('reads a word of over 100 characters as [UNK]; google-research/bert' in line
             for line in said)
  assert sources.load(str(out)).max_chars_per_word == 100
  assert init_from.word_limit(str(out)) == 100
  shutil.copy(minilm_dir / 'config.json', out / 'config.json')  # Converted in place.
  assert sources.format_of(str(out)) == 'tf1' and not init_from.is_transformers_dir(str(out))
  assert init_from.word_limit(str(out)) == 100


def test_an_edited_recorded_limit_is_refused(tmp_path):
  run = tmp_path / 'run'
  (run / 'checkpoints').mkdir(parents=True)
  (run / 'config.json').write_text(json.dumps({'job': 'finetune',
                                               'data': {'max_chars_per_word': '100'}}))
  with pytest.raises(ValueError, match=r'run/config.json records data.max_chars_per_word "100", '
                     'not a positive whole number: it was edited'):
    init_from.word_limit(str(run))


@pytest.mark.parametrize('limit', [100, 200, 10**9])
def test_the_saved_models_graph_reads_long_words_as_bertjax(minilm_dir, limit):
  """The SavedModel's in-graph WordPiece counts a word's characters as the original does (its
  own limit counts bytes): at and past the limit in one- and two-byte scripts, beside
  punctuation and CJK, and a limit no word reaches."""
  from bertjax.interop import saved_model  # pylint: disable=g-import-not-at-top
  from bertjax.text import fast_tokenizer  # pylint: disable=g-import-not-at-top
  tf, tf_text = fast_tokenizer.import_tf()
  bundle = dataclasses.replace(sources.load(str(minilm_dir)), max_chars_per_word=limit)
  texts = ['a' * 100, 'a' * 101, f'x {"a" * 150}.{"b" * 5} y', 'привет' * 17,
           'привет' * 16 + 'пр', 'the café is 東京' + 'q' * 101 + '東', 'q' * 99 + 'é z', '',
           'a \ue000 b']
  graph = saved_model._Inputs(tf, tf_text, bundle, 128)  # pylint: disable=protected-access
  got = graph.tokenize(graph.clean(tf.constant(texts))).to_list()
  assert got == [inference.tokenizer(bundle, '').encode(t) for t in texts]
  assert (100 in got[1]) == (limit == 100)
