"""A tokenizer from a checkpoint's vocab: a WordPiece vocab.txt or a SentencePiece .model.

`for_model` is the one place a model's recorded vocab file and casing become its tokenizer
(fine-tuning, predict, extract_features, embed): the kind of tokenizer is told from the file
itself, so a run's own copy of its vocab (<workdir>/vocab.txt, whichever the kind) reads right.
"""

import os

import numpy as np

from bertjax import compressed_text
from bertjax import files
from bertjax.text import sentencepiece_tokenizer
from bertjax.text import tokenizer

# SentencePiece's word-start mark: '▁the' starts a word, 'ing' continues one.
WORD_START = sentencepiece_tokenizer.WORD_START


def is_vocab(path) -> bool:
  """Whether the file at `path` (compressed or not) is a vocab, not text (is_vocab_head)."""
  try:
    with compressed_text.open_input(path) as (f, _):
      return is_vocab_head(f.read(4096))
  except (OSError, *compressed_text.DAMAGED_COMPRESSED):
    return False  # Read, and said, with the rest.


def is_vocab_head(head: bytes) -> bool:
  """Whether a file's first bytes are a vocab's, not text's (a glob over a corpus folder may
  match one): a SentencePiece model, or a WordPiece vocab.txt, whose first line is [PAD] and
  whose first lines are one token each (a text that opens with [PAD] has words after it)."""
  if sentencepiece_tokenizer.is_sentencepiece_model('', head):
    return True
  lines = head.split(b'\n')[:-1][:20]  # Whole lines only.
  return bool(lines) and lines[0].strip() == b'[PAD]' and all(
      line.strip() and len(line.split()) == 1 for line in lines)


def from_files(vocab_file=None, spm_model_file=None, do_lower_case=True, **kwargs):
  """A WordPiece FullTokenizer for a vocab file, or a SentencePieceTokenizer for a .model."""
  if (vocab_file is None) == (spm_model_file is None):
    raise ValueError('pass exactly one of vocab_file= (WordPiece vocab.txt, BERT) and '
                     'spm_model_file= (SentencePiece .model, ALBERT)')
  if spm_model_file is not None:
    return sentencepiece_tokenizer.SentencePieceTokenizer(spm_model_file,
                                                          do_lower_case=do_lower_case, **kwargs)
  return tokenizer.FullTokenizer(vocab_file, do_lower_case=do_lower_case, **kwargs)


def is_sentencepiece(vocab_file) -> bool:
  """Whether `vocab_file` (a path or URL that exists) is a SentencePiece model."""
  return sentencepiece_tokenizer.is_sentencepiece_model(vocab_file,
                                                        files.read_bytes(str(vocab_file)))


def load_vocab(vocab_file):
  """A vocab file's entries as an OrderedDict token -> id, whichever the kind: a vocab.txt's
  tokens or a SentencePiece model's pieces, so every size and id check holds for both."""
  path = os.fspath(vocab_file)
  tokenizer.require_vocab_file(path, f'vocab file {path!r} does not exist: pass the vocab.txt '
                               'or SentencePiece .model shipped with the checkpoint')
  data = files.read_bytes(path)
  if sentencepiece_tokenizer.is_sentencepiece_model(path, data):
    return sentencepiece_tokenizer.sentencepiece_vocab(path, data)[0]
  return tokenizer.read_vocab(path, data)


def pad_id(vocab_file, vocab: dict) -> int | None:
  """The id of `vocab_file`'s padding piece: a vocab.txt's [PAD], a SentencePiece model's own
  pad_id (--pad_id, whatever its piece's name); None where it has none (spm_train's default: id
  0 is then <unk>, a real token, not padding)."""
  if is_sentencepiece(vocab_file):
    path = str(vocab_file)
    pad = sentencepiece_tokenizer.sentencepiece_vocab(path, files.read_bytes(path))[1].pad_id()
    return pad if pad >= 0 else None
  return vocab.get('[PAD]')


def difference(first, second) -> str:
  """'' when two vocab files give the same ids (the same bytes, or a vocab.txt's same tokens in
  the same order whatever its line ends), else how they differ, in a few words."""
  first, second = str(first), str(second)
  if files.read_bytes(first) == files.read_bytes(second):
    return ''
  kinds = is_sentencepiece(first), is_sentencepiece(second)
  if kinds[0] != kinds[1]:
    return ('a SentencePiece model vs a WordPiece vocab' if kinds[0] else
            'a WordPiece vocab vs a SentencePiece model')
  if kinds[0]:  # Pieces, scores, normaliser: any other byte may tokenize otherwise.
    return 'two different SentencePiece models'
  a, b = list(load_vocab(first)), list(load_vocab(second))
  if a == b:
    return ''
  common = min(len(a), len(b))
  at = next((i for i in range(common) if a[i] != b[i]), common)
  if at == common:
    return f'{len(a)} vs {len(b)} entries'
  return f'id {at} is {a[at]!r} vs {b[at]!r}'


def for_model(vocab_file, do_lower_case: bool, vocab_name: str = '',
              max_chars_per_word: int = tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD, **kwargs):
  """The tokenizer a model was trained with, from the vocab file and casing its run or source
  records: SentencePiece for a SentencePiece model, else WordPiece; casing checked for both.
  `vocab_name`: how a WordPiece vocab's messages name it ('' for 'vocab file <path>');
  `max_chars_per_word`: WordPiece's longest word (longer: [UNK]), as the source's tokenizer
  sets it (hf_tokenizer_files.word_limit)."""
  vocab_file = str(vocab_file)
  files.require_file(vocab_file, f'vocab file {vocab_file!r} does not exist: pass the vocab.txt '
                     'or SentencePiece .model the model was trained with')
  if is_sentencepiece(vocab_file):
    return from_files(spm_model_file=vocab_file, do_lower_case=do_lower_case, **kwargs)
  return from_files(vocab_file=vocab_file, do_lower_case=do_lower_case, vocab_name=vocab_name,
                    max_input_chars_per_word=max_chars_per_word, **kwargs)


def check_input_tokens(tok, vocab_name: str = ''):
  """Refuses, in one line, a tokenizer whose vocab lacks [CLS] or [SEP] (every BERT input holds
  them), before any example is featurized (where it was a KeyError)."""
  name = vocab_name or getattr(tok, 'vocab_name', '') or f'vocab file {tok.vocab_file!r}'
  tokenizer.check_special_tokens(tok.vocab, name)


def check_word_starts(vocab: dict, masking: str, name: str, fix: str):
  """Refuses masking by words (`masking` other than 'wordpiece') with a SentencePiece model
  whose pieces end words ('the▁': --treat_whitespace_as_suffix) rather than start them: the
  '▁' word starts it reads words by are not there, so words ran into each other. `fix`: the
  setting that picks single pieces ('--masking=wordpiece')."""
  if masking == 'wordpiece' or any(p.startswith(WORD_START) and len(p) > 1 for p in vocab):
    return
  if any(p.endswith(WORD_START) and len(p) > 1 for p in vocab):
    raise ValueError(f'{name} ends its words with {WORD_START} (treat_whitespace_as_suffix) '
                     f'instead of starting them: masking={masking} finds words by their '
                     f'{WORD_START} starts; pass {fix}, or a model trained without '
                     'treat_whitespace_as_suffix')


def continuation_flags(vocab: dict, sentencepiece: bool) -> np.ndarray:
  """True per id for the pieces that continue a word (the ones whole-word masking keeps with
  the piece before): WordPiece's '##' pieces; for SentencePiece every piece but a word start
  ('▁...'), a control symbol ([CLS]) or a meta piece (<unk>): the one rule of static and
  dynamic masking."""
  continues = (sentencepiece_tokenizer.continues_word if sentencepiece
               else tokenizer.continues_word)
  flags = np.zeros(len(vocab), bool)
  for token, index in vocab.items():
    flags[index] = continues(token)
  return flags
