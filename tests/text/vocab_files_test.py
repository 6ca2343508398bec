"""vocab_files.load_vocab reads either kind of vocab, told by the file; tokenizer.load_vocab reads
a WordPiece vocab.txt only and refuses a SentencePiece model instead of reading its bytes."""

import pytest

from bertjax.text import sentencepiece_tokenizer
from bertjax.text import tokenizer
from bertjax.text import vocab_files

WORDS = ('the cat sat on the mat', 'a dog ran in the park', 'birds sing at dawn every day')


@pytest.fixture(scope='module')
def spm_model(tmp_path_factory):
  sentencepiece = pytest.importorskip('sentencepiece')
  prefix = tmp_path_factory.mktemp('spm') / 'spm'
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(WORDS * 50), model_prefix=str(prefix), vocab_size=30,
      model_type='unigram', pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], minloglevel=2)
  return prefix.with_suffix('.model')


def test_a_sentencepiece_model_gives_its_pieces_whatever_its_name(spm_model, tmp_path):
  pieces = sentencepiece_tokenizer.SentencePieceTokenizer(spm_model, check_casing=False).vocab
  assert list(pieces)[:5] == ['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]']
  # A run keeps its copy as <workdir>/vocab.txt whatever the kind: told by the bytes then.
  copy = tmp_path / 'vocab.txt'
  copy.write_bytes(spm_model.read_bytes())
  for path in (spm_model, copy):
    assert vocab_files.is_sentencepiece(path)
    assert vocab_files.load_vocab(path) == pieces
  with pytest.raises(ValueError, match='binary, not a WordPiece vocab.txt'):
    tokenizer.load_vocab(copy)


def test_a_wordpiece_vocab_reads_the_same_through_both(tmp_path):
  path = tmp_path / 'vocab.txt'
  path.write_text('[PAD]\n[UNK]\nthe\n##s\n')
  assert not vocab_files.is_sentencepiece(path)
  assert list(vocab_files.load_vocab(path).items()) == [('[PAD]', 0), ('[UNK]', 1), ('the', 2),
                                                        ('##s', 3)]
  assert vocab_files.load_vocab(path) == tokenizer.load_vocab(path)
  path.write_text('[PAD]\nthe\nthe\n')
  with pytest.raises(ValueError, match="lists 'the' twice"):
    vocab_files.load_vocab(path)
  with pytest.raises(FileNotFoundError, match='vocab.txt or SentencePiece .model'):
    vocab_files.load_vocab(tmp_path / 'missing.txt')


def test_a_damaged_model_is_named(tmp_path):
  pytest.importorskip('sentencepiece')
  path = tmp_path / 'broken.model'
  path.write_bytes(b'\n\x05hello\x00\x00')
  with pytest.raises(ValueError, match="broken.model' is not a SentencePiece model"):
    vocab_files.load_vocab(path)


def test_a_json_file_or_a_folder_given_as_the_vocab_says_so(tmp_path):
  """Pass AE: a tokenizer.json was read as lines and refused for lacking [UNK] ('pass
  unk_token='), a folder as 'does not exist'. A vocab.txt whose first token is '{' still reads."""
  (tmp_path / 'tokenizer.json').write_text('{"model": {"vocab": {"[UNK]": 0}}}')
  for load in (tokenizer.load_vocab, vocab_files.load_vocab):
    with pytest.raises(ValueError, match=r"tokenizer.json' is JSON \(a tokenizer.json or "
                       r'config.json\?\), not a vocab.txt of one token per line'):
      load(tmp_path / 'tokenizer.json')
    with pytest.raises(IsADirectoryError, match=f"vocab file '{tmp_path}' is a folder: pass the "
                       'vocab.txt'):
      load(tmp_path)
  (tmp_path / 'vocab.txt').write_text('{\n[UNK]\n}\n')
  assert list(vocab_files.load_vocab(tmp_path / 'vocab.txt')) == ['{', '[UNK]', '}']
