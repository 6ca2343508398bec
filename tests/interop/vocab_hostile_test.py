"""A checkpoint given with a vocab that is not its own is refused in one line naming the fix.

A hostile-user pass found: a vocab short of the embedding rows by a multiple of 8 taken for
padding (and the hf export cutting trained rows); one longer than the rows answered with an
override the job then refused; a folder's default casing reported as its setting; a vocab
without [CLS] a KeyError; a byte order mark read as part of the first token.
"""

import json
import pathlib

import pytest
import torch
import transformers

from bertjax.finetune import run_config
from bertjax.interop import bundle
from bertjax.interop import hf_tokenizer_files
from bertjax.interop import sources
from bertjax.text import tokenizer
from bertjax.text import vocab_files
from configs import finetune as finetune_config

WORDS = 'the weather is lovely today he drove to stadium film great dull'.split()
VOCAB = (['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + list('abcdefghijklmnopqrstuvwxyz.,!')
         + ['##' + c for c in 'abcdefghijklmnopqrstuvwxyz'] + WORDS)
VOCAB += [f'##x{i}' for i in range(96 - len(VOCAB))]  # 96 entries, as the model's rows.
CASED = VOCAB[:-4] + ['The', 'He', 'Lovely', 'Weather']


def write_vocab(path: pathlib.Path, tokens, prefix: str = '') -> pathlib.Path:
  path.write_text(prefix + ''.join(f'{t}\n' for t in tokens), encoding='utf-8')
  return path


def make(directory: pathlib.Path, vocab, rows: int = 96) -> pathlib.Path:
  """A tiny transformers BertModel (hidden 32, 2 layers) of `rows` rows with `vocab` beside it,
  and no tokenizer_config.json (its casing unrecorded)."""
  directory.mkdir(parents=True, exist_ok=True)
  torch.manual_seed(0)
  config = transformers.BertConfig(vocab_size=rows, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=64,
                                   max_position_embeddings=64)
  transformers.BertModel(config).eval().save_pretrained(str(directory))
  write_vocab(directory / 'vocab.txt', vocab)
  return directory


def finetune_config_for(init: pathlib.Path, **data):
  config = finetune_config.get_config('task=sst2')
  config.init_from = str(init)
  for key, value in data.items():
    config.data[key] = value
  return config


def test_padding_is_only_the_next_multiple_of_8_64_or_128():
  # NVIDIA's 30,528, 128's 30,592, Megatron's 128 x tensor parallelism 8: 30,720.
  assert bundle.padded_sizes(30522) == [30528, 30592, 30720]
  for entries, rows in ((30522, 30528), (30522, 30592), (30522, 30720), (120, 128), (96, 96)):
    assert not bundle.vocab_misfit(entries, rows), (entries, rows)
  for entries, rows in ((88, 96), (128, 136), (30000, 32000), (100, 96)):
    assert bundle.vocab_misfit(entries, rows), (entries, rows)


def test_a_bertjax_runs_own_padding_is_any_multiple_of_128(tmp_path):
  """A run pads its vocab to any multiple of 128 (train_state): its own config.json says so, a
  pre-training run's without a vocab digest (review: only fine-tuning records one)."""
  vocab = write_vocab(tmp_path / 'vocab.txt', VOCAB + [f'##y{i}' for i in range(4)])  # 100.
  run = tmp_path / 'run'
  run.mkdir()
  (run / 'config.json').write_text(json.dumps({'job': 'pretrain', 'model': {'vocab_size': 384}}))
  assert bundle.vocab_misfit(100, 384)  # Not another tool's padding...
  assert not bundle.misfit_at(str(run), str(vocab), 100, 384)  # ...but this run's own.
  (run / 'config.json').write_text(json.dumps({'job': 'finetune', 'model': {'vocab_size': 384},
                                               'data': {'vocab_sha256': 'f' * 64}}))
  assert bundle.misfit_at(str(run), str(vocab), 100, 384)  # Another vocab than the run's.


def test_a_short_vocab_that_is_not_padding_is_refused_not_cut(tmp_path):
  """88 entries for 96 rows: 8 trained rows, not padding (88's padding is 88, 128, ... rows)."""
  folder = make(tmp_path / 'short', VOCAB[:88])
  with pytest.raises(ValueError, match=r'has 88 entries but .* have 96 rows \(96 rows is not '
                     r'vocab padding of 88 entries \(that is 88 or 128 or 256 or 512 or 1024 '
                     r'rows\).*pass that one'):
    sources.load(folder)
  with pytest.raises(ValueError, match=r'^init_from=.* has 96 word-embedding rows but its vocab '
                     r"file '.*vocab.txt' has 88 entries .*--config.data.vocab_file="):
    run_config.resolve_model(finetune_config_for(folder), str(folder))
  # The hf export never cuts rows that are not padding (a caller that skipped check_vocab).
  full = sources.load(make(tmp_path / 'full', VOCAB))
  full.vocab_file = str(folder / 'vocab.txt')
  params = bundle.cut_vocab_padding(full)
  assert params['bert/embeddings/word_embeddings/embedding'].shape[0] == 96


def test_a_long_vocab_names_the_vocab_not_an_override_the_job_refuses(tmp_path):
  """100 entries for 96 rows said 'set --config.model.vocab_size=100', which the job refuses."""
  folder = make(tmp_path / 'long', VOCAB + ['w1', 'w2', 'w3', 'w4'])
  for config, which in ((finetune_config_for(folder), "its vocab file '"),
                        (finetune_config_for(folder, vocab_file=str(folder / 'vocab.txt')),
                         'config.data.vocab_file=')):
    with pytest.raises(ValueError) as e:
      run_config.resolve_model(config, str(folder))
    message = str(e.value)
    assert message.startswith(f'init_from={folder} has 96 word-embedding rows but {which}')
    assert 'has 100 entries (ids 96..99 have no embedding row)' in message
    assert 'pass --config.data.vocab_file=VOCAB' in message
    assert 'model.vocab_size' not in message and '\n' not in message


def test_a_folder_without_recorded_casing_takes_the_users(tmp_path):
  """No tokenizer_config.json: BertTokenizer's default (lower case) is not the folder's
  setting, so --config.data.do_lower_case=false stands (it was refused, saying 'its tokenizer:
  do_lower_case true')."""
  folder = make(tmp_path / 'cased', CASED)
  assert hf_tokenizer_files.recorded_lower_case(folder) == (None, '')
  run_config.check_casing(finetune_config_for(folder, do_lower_case=False), str(folder))
  with pytest.raises(ValueError, match=rf"^vocab file '{folder}/vocab.txt' is a cased vocab"):
    vocab_files.for_model(folder / 'vocab.txt', True)
  # A recorded casing still wins, and its message names the file that records it.
  (folder / 'tokenizer_config.json').write_text(json.dumps({'do_lower_case': True}))
  with pytest.raises(ValueError, match=r'was trained on lower-cased text \(.*tokenizer_config'
                     r'.json: do_lower_case true\)'):
    run_config.check_casing(finetune_config_for(folder, do_lower_case=False), str(folder))


def test_a_tokenizer_json_normalizer_says_the_casing(tmp_path, monkeypatch):
  """tokenizer.json alone (transformers 5.x saves no vocab.txt): its normalizer's lowercase is
  read, and messages name the folder's tokenizer.json, not this machine's cache copy."""
  monkeypatch.setenv('BERTJAX_CACHE', str(tmp_path / 'cache'))
  folder = make(tmp_path / 'json', CASED)
  transformers.BertTokenizerFast(str(folder / 'vocab.txt'), do_lower_case=False).save_pretrained(
      str(folder))
  (folder / 'tokenizer_config.json').unlink()
  (folder / 'vocab.txt').unlink()
  normalizer = json.loads((folder / 'tokenizer.json').read_text())['normalizer']
  assert normalizer['lowercase'] is False
  assert hf_tokenizer_files.recorded_lower_case(folder)[0] is False
  assert not hf_tokenizer_files.do_lower_case_of(folder)
  run_config.check_casing(finetune_config_for(folder, do_lower_case=False), str(folder))
  with pytest.raises(ValueError, match=r"was trained on cased text \(.*tokenizer.json's "
                     r'normalizer: lowercase false\) .*--config.data.do_lower_case=False\.$'):
    run_config.check_casing(finetune_config_for(folder), str(folder))
  cached = hf_tokenizer_files.vocab_beside(folder)
  name = hf_tokenizer_files.vocab_name(cached, folder)
  assert name == f'the vocab of {folder}/tokenizer.json'
  with pytest.raises(ValueError, match=rf'^the vocab of {folder}/tokenizer.json is a cased'):
    vocab_files.for_model(cached, True, vocab_name=name)


def test_a_vocab_without_cls_or_sep_is_one_line(tmp_path):
  """A vocab missing [CLS] was a KeyError '[CLS]' out of featurization."""
  path = write_vocab(tmp_path / 'vocab.txt', [t for t in VOCAB if t != '[CLS]'])
  tok = vocab_files.for_model(path, True)
  with pytest.raises(ValueError, match=rf"^vocab file '{path}' has no \[CLS\] entry, which BERT "
                     r'builds its inputs with .*pass the vocab.txt'):
    vocab_files.check_input_tokens(tok)
  with pytest.raises(ValueError, match=r"has no \[CLS\] entry"):
    tok.convert_tokens_to_ids(['[CLS]', 'the', '[SEP]'])
  with pytest.raises(KeyError):  # Any other token stays a KeyError, as documented.
    tok.convert_tokens_to_ids(['nosuchtoken'])
  path = write_vocab(tmp_path / 'none.txt', [t for t in VOCAB if t not in ('[CLS]', '[SEP]')])
  with pytest.raises(ValueError, match=r'has no \[CLS\], \[SEP\] entries'):
    vocab_files.check_input_tokens(vocab_files.for_model(path, True))


def test_a_byte_order_mark_is_not_part_of_the_first_token(tmp_path):
  """'\\ufeff[PAD]' made an uncased vocab look cased, and [PAD] missing."""
  path = write_vocab(tmp_path / 'vocab.txt', VOCAB, prefix='\ufeff')
  for read in (tokenizer.load_vocab, vocab_files.load_vocab):
    vocab = read(path)
    assert next(iter(vocab)) == '[PAD]' and vocab['[PAD]'] == 0 and len(vocab) == len(VOCAB)
  assert vocab_files.for_model(path, True).convert_tokens_to_ids(['[PAD]']) == [0]


def test_a_cased_folder_that_records_no_casing_reads_cased(tmp_path):
  """Pass T: a cased model saved without tokenizer_config.json could not be embedded (the
  default lower case against its cased vocab was refused, and embed has no casing setting):
  where nothing is recorded, the vocab's casing is the one its check accepts."""
  from bertjax import embed  # pylint: disable=g-import-not-at-top
  make(tmp_path, vocab=CASED)  # No tokenizer files beside vocab.txt.
  assert sources.load(tmp_path).do_lower_case is False
  tok = embed.load_tokenizer(tmp_path)
  assert tok.tokenize('The weather') == ['The', 'weather']  # Lower-cased: 'the'.
  embedder = embed.Embedder.from_pretrained(tmp_path)
  assert embedder.encode(['The weather']).shape == (1, 32)


def test_a_vocab_txt_its_tokenizer_json_numbers_otherwise_is_refused(tmp_path):
  """Matrix pass of 2026-12-02: an export's vocab.txt with two tokens swapped was read with exit
  0 (bertjax's ids for 'lovely' were 'dull''s) while transformers, reading the folder's
  tokenizer.json, kept the model's: one folder, two tokenizers."""
  folder = make(tmp_path / 'both', VOCAB)
  transformers.BertTokenizerFast(str(folder / 'vocab.txt')).save_pretrained(str(folder))
  assert hf_tokenizer_files.checked_vocab(folder) == f'{folder}/vocab.txt'  # They agree.
  swapped = list(VOCAB)
  a, b = swapped.index('lovely'), swapped.index('dull')
  swapped[a], swapped[b] = swapped[b], swapped[a]
  write_vocab(folder / 'vocab.txt', swapped)
  with pytest.raises(ValueError, match=(
      rf"^{folder}/vocab.txt and {folder}/tokenizer.json number the vocab differently \(2 ids "
      rf"differ; id {a}: 'dull' in vocab.txt, 'lovely' in tokenizer.json\): transformers reads")):
    hf_tokenizer_files.checked_vocab(folder)
  write_vocab(folder / 'vocab.txt', VOCAB + ['extra'])  # One more: 'nothing' at its id.
  with pytest.raises(ValueError, match=rf"\(1 id differ; id {len(VOCAB)}: 'extra' in vocab.txt, "
                     'nothing in tokenizer.json'):
    sources.load(folder)


def test_a_bertjax_run_is_fine_tuned_with_the_casing_its_data_was_made_with(tmp_path):
  """helper-176: a pre-training run recorded no casing, and fine-tuning from it read its text
  lower-cased whatever the data was made with (a cased vocab with few capitals passed the
  vocab's own check). Its config.json records data.do_lower_case (pretrain._record_casing)."""
  run = tmp_path / 'run'
  (run / 'checkpoints').mkdir(parents=True)
  (run / 'config.json').write_text(json.dumps({'job': 'pretrain', 'data': {}}))
  run_config.check_casing(finetune_config_for(run), str(run))  # An older run: the user's.
  (run / 'config.json').write_text(json.dumps({'job': 'pretrain',
                                               'data': {'do_lower_case': False}}))
  run_config.check_casing(finetune_config_for(run, do_lower_case=False), str(run))
  with pytest.raises(ValueError, match=(
      rf'^init_from={run}/checkpoints was trained on cased text \(its run\'s config.json: '
      r'data.do_lower_case\) but config.data.do_lower_case is True: pass '
      r'--config.data.do_lower_case=False\.$')):
    run_config.check_casing(finetune_config_for(run), str(run / 'checkpoints'))
