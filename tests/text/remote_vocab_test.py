"""Vocab and SentencePiece files by URL (the GCS emulator): the same ids as from local files;
learn_vocab writes to a bucket; a missing vocab is named by its URL."""

import gzip
import itertools

import pytest

from bertjax import files
from bertjax.pretraining_data import embedded
from bertjax.text import sentencepiece_tokenizer
from bertjax.text import tokenizer
from bertjax.text import vocab_learner

TEXT = 'The quick brown fox, quoth the Bard, jumped over the lazy dog in 1611. Ångström!'


def test_a_gs_vocab_gives_the_ids_of_the_local_file(gcs_bucket):
  local = str(embedded.vocab_path())
  files.copy(local, f'{gcs_bucket}/model/vocab.txt')
  remote = tokenizer.FullTokenizer(f'{gcs_bucket}/model/vocab.txt', do_lower_case=True)
  assert remote.vocab == tokenizer.load_vocab(local)
  assert remote.encode(TEXT) == tokenizer.FullTokenizer(local, do_lower_case=True).encode(TEXT)


def test_a_missing_gs_vocab_is_named_by_its_url(gcs_bucket):
  with pytest.raises(FileNotFoundError, match=f"vocab file '{gcs_bucket}/nope/vocab.txt' does "
                     'not exist'):
    tokenizer.load_vocab(f'{gcs_bucket}/nope/vocab.txt')
  with pytest.raises(FileNotFoundError, match=f"SentencePiece model '{gcs_bucket}/x.model'"):
    sentencepiece_tokenizer.SentencePieceTokenizer(f'{gcs_bucket}/x.model')


def test_learn_vocab_refuses_a_folder_as_its_output(gcs_bucket, tmp_path):
  """Before the corpus is read: in a bucket the vocab became an object named like the folder,
  beside the folder's own files; locally the error named a temporary file."""
  files.write_atomically(f'{gcs_bucket}/text/a.txt', 'x')
  for folder in (f'{gcs_bucket}/text', f'{gcs_bucket}/new/', str(tmp_path)):
    with pytest.raises(ValueError, match=f'^--output_file={folder} is a folder: name the file '
                                         'to write, e.g. --output_file=.*/vocab.txt$'):
      vocab_learner.check_output_name('wordpiece', folder)
  assert files.listdir(gcs_bucket) == ['text']
  with pytest.raises(FileNotFoundError, match='^gs://no-such-bucket-xyz/v.txt: the bucket'):
    vocab_learner.check_output_name('wordpiece', 'gs://no-such-bucket-xyz/v.txt')


def test_learn_vocab_refuses_to_overwrite_its_input(gcs_bucket, tmp_path):
  """--output_file naming a corpus file that --input_file's glob matches was overwritten by the
  vocab, in a bucket and locally."""
  for root in (gcs_bucket, str(tmp_path)):
    corpus = files.join(root, 'text', 'a.txt')
    files.write_atomically(corpus, 'some words here\n')
    with pytest.raises(ValueError, match='is one of the --input_file files'):
      vocab_learner.learn_wordpiece(files.join(root, 'text', '*.txt'), corpus, 128)
    with pytest.raises(ValueError, match='is one of the --input_file files'):
      vocab_learner.learn_sentencepiece(corpus, corpus, 128)
    assert files.read_text(corpus) == 'some words here\n'


def test_learn_vocab_writes_to_a_bucket_and_sentencepiece_reads_it_back(gcs_bucket, tmp_path):
  corpus = tmp_path / 'corpus.txt.gz'
  with gzip.open(embedded.corpus_path('eval'), 'rt', encoding='utf-8') as f:
    lines = list(itertools.islice(f, 3000))
  files.write_atomically(f'{gcs_bucket}/text/corpus.txt.gz',
                         gzip.compress(''.join(lines).encode()))
  corpus.write_bytes(files.read_bytes(f'{gcs_bucket}/text/corpus.txt.gz'))
  # Input and output in the bucket; the same model as learned from and to local files.
  vocab_learner.learn_sentencepiece(f'{gcs_bucket}/text/*.gz', f'{gcs_bucket}/spm/m.model',
                                    200)
  vocab_learner.learn_sentencepiece(str(corpus), str(tmp_path / 'm.model'), 200)
  assert files.read_bytes(f'{gcs_bucket}/spm/m.model') == (tmp_path / 'm.model').read_bytes()
  remote = sentencepiece_tokenizer.SentencePieceTokenizer(f'{gcs_bucket}/spm/m.model')
  local = sentencepiece_tokenizer.SentencePieceTokenizer(str(tmp_path / 'm.model'))
  assert remote.encode(TEXT) == local.encode(TEXT) and len(remote.vocab) == 200
  words = vocab_learner.learn_wordpiece(f'{gcs_bucket}/text/corpus.txt.gz',
                                        f'{gcs_bucket}/wp/vocab.txt', 512)
  assert list(tokenizer.load_vocab(f'{gcs_bucket}/wp/vocab.txt')) == words
