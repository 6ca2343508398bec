"""BERT tokenization: the exact reference WordPiece path and its vocab files.

The WordPiece path reproduces google-research/bert's tokenization.py token for token (cleaning,
CJK splitting, lower-casing with NFD accent stripping, punctuation splitting, greedy
longest-match-first WordPiece), keeps its user-facing API (`FullTokenizer`, `load_vocab`, ...)
so scripts port unchanged, and adds HF's treatment of special tokens: `[MASK]` etc. written in
the text stay whole. It equals HF tokenizers' BertWordPieceTokenizer (given its limit of 100
characters a word) except where HF departs from the original: HF gives a word-final capital
sigma the non-final σ, and deletes private-use and unassigned code points. It needs no
TensorFlow; vocab files are read through bertjax.files (local or a URL); the in-graph fast
path is in `fast_tokenizer.py`, SentencePiece in `sentencepiece_tokenizer.py`, a vocab's casing
against do_lower_case in `vocab_casing.py`.
"""

import collections
import json
import os
import re
import unicodedata

from bertjax import files
from bertjax import text_files
from bertjax.text import vocab_casing

# Special tokens. By default they are text like any other when found in raw text ('[MASK]' ->
# '[', 'mask', ']'), as in the original BERT tokenizer, so raw text can never inject control
# tokens; pass never_split=SPECIAL_TOKENS for text meant to carry them (HF's behaviour).
SPECIAL_TOKENS = ('[UNK]', '[SEP]', '[PAD]', '[CLS]', '[MASK]')
# A word longer than this (in characters) becomes [UNK]; the original's value. HF uses 100.
DEFAULT_MAX_INPUT_CHARS_PER_WORD = 200
# The special tokens every BERT input is built with ([CLS] text [SEP]); pre-training adds [MASK].
INPUT_TOKENS = ('[CLS]', '[SEP]')
# A byte order mark some editors write at the start of a UTF-8 file: not part of the first token.
_BOM = '\ufeff'
# Per-word results are cached; the cache is dropped when it grows past this many words.
_CACHE_SIZE = 1 << 20
# WordPiece's mark of a piece that continues the word before it ('##ing').
CONTINUATION_PREFIX = '##'


def continues_word(piece: str) -> bool:
  """Whether a WordPiece piece continues the word before it (whole-word masking, span text)."""
  return piece.startswith(CONTINUATION_PREFIX)


def convert_to_unicode(text):
  """Returns `text` as str, decoding bytes as UTF-8; raises ValueError on invalid UTF-8."""
  if isinstance(text, str):
    return text
  if isinstance(text, (bytes, bytearray)):
    try:
      return bytes(text).decode('utf-8')
    except UnicodeDecodeError as e:
      raise ValueError(
          f'input text is not valid UTF-8 ({e.reason} at byte {e.start}: '
          f'{bytes(text)[e.start:e.start + 4]!r}): decode it with its real encoding and pass '
          'str') from None
  raise TypeError(f'expected str or UTF-8 bytes, got {type(text).__name__}')


def load_vocab(vocab_file):
  """Reads a WordPiece vocab file (one token per line; a local path or a URL such as gs://)
  into an OrderedDict token -> id; vocab_files.load_vocab also reads a SentencePiece model."""
  path = os.fspath(vocab_file)
  missing = (f'vocab file {path!r} does not exist: pass vocab_file= the vocab.txt shipped '
             'with the checkpoint (one WordPiece token per line)')
  require_vocab_file(path, missing)
  return read_vocab(path, files.read_bytes(path))


def require_vocab_file(path: str, missing: str):
  """Refuses a vocab path that is a folder (saying so) or no file (`missing`)."""
  if files.isdir(path):
    raise IsADirectoryError(f'vocab file {path!r} is a folder: pass the vocab.txt (or the '
                            'SentencePiece .model) in it')
  files.require_file(path, missing)


# A line of SentencePiece's .vocab: the piece, a tab, its score ('-7.28', '0').
_SPM_VOCAB_LINE = re.compile(rb'[^\t]*\t-?[0-9.]+(?:e[-+]?[0-9]+)?\r?')


def _is_json_object(data: bytes) -> bool:
  """Whether a file's bytes are one JSON object (a vocab.txt's first token may be '{')."""
  if data.lstrip()[:1] != b'{':
    return False
  try:
    return isinstance(json.loads(data), dict)
  except ValueError:
    return False


def is_sentencepiece_vocab_text(head: bytes) -> bool:
  """Whether a file's first bytes are SentencePiece's .vocab (spm_train writes it beside the
  .model): a piece, a tab and its score per line, text that is no model and no vocab.txt."""
  lines = head.split(b'\n')[:-1][:20]  # Whole lines only.
  return bool(lines) and all(_SPM_VOCAB_LINE.fullmatch(line) for line in lines)


def read_vocab(path, data: bytes):
  """A WordPiece vocab.txt's bytes as an OrderedDict token -> id (`path` names it in errors)."""
  path = os.fspath(path)
  if wide := text_files.wide_encoding(data[:4096]):  # NUL bytes too, but text: said as such.
    raise ValueError(f'vocab file {path!r} is {wide} text, not UTF-8: re-encode it '
                     f'({text_files.reencode_hint(data[:4096])} {path} > vocab.txt)')
  # A SentencePiece model holds NUL bytes (its float scores), which no vocab.txt has: refused
  # here rather than read as tokens by chance of its bytes decoding.
  if b'\x00' in data:
    raise ValueError(f'vocab file {path!r} is binary, not a WordPiece vocab.txt (a SentencePiece '
                     'model?): pass it as the SentencePiece model (create_pretraining_data '
                     '--spm_model_file; every other reader tells the two by their content)')
  if is_sentencepiece_vocab_text(data[:4096]):  # Its lines read as tokens have no [UNK].
    raise ValueError(f'vocab file {path!r} is a SentencePiece .vocab (pieces and scores), not '
                     'a WordPiece vocab.txt: pass the SentencePiece .model written beside it '
                     '(create_pretraining_data --spm_model_file; data.vocab_file takes it too)')
  if _is_json_object(data):  # tokenizer.json, config.json: read as lines, they have no [UNK].
    raise ValueError(f'vocab file {path!r} is JSON (a tokenizer.json or config.json?), not a '
                     'vocab.txt of one token per line: pass the vocab.txt beside it (or a '
                     'SentencePiece .model)')
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError as e:
    raise ValueError(
        f'vocab file {path!r} is not UTF-8 text ({e.reason} at byte {e.start}): it is '
        'corrupt or not a vocab file; pass the vocab.txt of a BERT checkpoint') from None
  text = text.removeprefix(_BOM)
  if not text.strip():
    raise ValueError(f'vocab file {path!r} is empty: pass the vocab.txt of a BERT checkpoint')
  lines = text.split('\n')
  if lines[-1] == '':  # The newline after the last token does not start another token.
    lines.pop()
  vocab = collections.OrderedDict()
  for index, line in enumerate(lines):
    # The original strips every token, so a stray '\r' or space never reaches the lookups.
    token = line.strip()
    if token in vocab:
      raise ValueError(
          f'vocab file {path!r} lists {token!r} twice (lines {vocab[token] + 1} and '
          f'{index + 1}): ids would be ambiguous; the file is damaged or was edited by hand')
    vocab[token] = index
  return vocab


def check_special_tokens(vocab, vocab_name: str, needed=INPUT_TOKENS):
  """Refuses a vocab that lacks special tokens `needed` to build model inputs, in one line
  naming it (`vocab_name`: 'vocab file ...') and every one it lacks."""
  missing = [t for t in needed if t not in vocab]
  if missing:
    raise ValueError(
        f'{vocab_name} has no {", ".join(missing)} entr{"y" if len(missing) == 1 else "ies"}, '
        f'which BERT builds its inputs with ({" ".join(needed)}): it is not a BERT vocab; pass '
        'the vocab.txt the checkpoint was trained with (a BERT vocab lists [PAD] [UNK] [CLS] '
        '[SEP] [MASK])')


def convert_by_vocab(vocab, items):
  """Maps each item through `vocab` (tokens to ids or ids to tokens)."""
  return [vocab[item] for item in items]


def whitespace_tokenize(text):
  """Splits on whitespace after stripping it from both ends."""
  return text.split()


# Google's released checkpoints, by the name of the folder holding bert_model.ckpt.
_UNCASED_CHECKPOINTS = ('uncased_L-24_H-1024_A-16', 'uncased_L-12_H-768_A-12',
                        'multilingual_L-12_H-768_A-12', 'chinese_L-12_H-768_A-12')
_CASED_CHECKPOINTS = ('cased_L-12_H-768_A-12', 'cased_L-24_H-1024_A-16',
                      'multi_cased_L-12_H-768_A-12')


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Raises ValueError when a known Google checkpoint's casing contradicts do_lower_case."""
  match = re.match(r'^.*?([A-Za-z0-9_-]+)/bert_model\.ckpt', os.fspath(init_checkpoint or ''))
  if match is None:
    return  # Not one of Google's checkpoints: vocab_casing's check still applies.
  name = match.group(1)
  if name in _UNCASED_CHECKPOINTS and not do_lower_case:
    raise ValueError(f'{name} is an uncased checkpoint but do_lower_case=False: pass '
                     'do_lower_case=True')
  if name in _CASED_CHECKPOINTS and do_lower_case:
    raise ValueError(f'{name} is a cased checkpoint but do_lower_case=True: pass '
                     'do_lower_case=False')


def _is_whitespace(char):
  if char in ' \t\n\r':
    return True
  return unicodedata.category(char) == 'Zs'


def _is_control(char):
  if char in '\t\n\r':  # Counted as whitespace, not as control characters.
    return False
  # Only Cc and Cf, as the original: HF's startswith('C') also drops private-use (Co) and
  # unassigned (Cn) code points, which the original keeps (they usually become [UNK]).
  return unicodedata.category(char) in ('Cc', 'Cf')


def _is_punctuation(char):
  cp = ord(char)
  # All non-alphanumeric ASCII counts, even '$', '^', '`' which Unicode files as symbols.
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith('P')


def ends_a_word(char) -> bool:
  """Whether the basic tokenizer ends a word at `char` (whitespace, punctuation, a CJK
  ideograph: the words WordPiece's length limit counts)."""
  return (char.isspace() or _is_whitespace(char) or _is_punctuation(char)
          or _is_chinese_char(ord(char)))


def _is_chinese_char(cp):
  # The CJK Unified Ideographs blocks only; Hangul, kana etc. are written with spaces already.
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
          or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
          or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class _CleanTable(dict):
  """str.translate table for the cleaning and CJK steps, filled one code point at a time."""

  def __missing__(self, cp):
    char = chr(cp)
    if cp == 0 or cp == 0xFFFD or _is_control(char):
      value = ''
    elif _is_whitespace(char):
      value = ' '
    elif _is_chinese_char(cp):
      value = f' {char} '
    else:
      value = cp
    self[cp] = value
    return value


_CLEAN_TABLE = _CleanTable()
_ASCII_NEEDS_CLEANING = re.compile('[\x00-\x1f\x7f]')


class BasicTokenizer:
  """Cleaning, CJK and punctuation splitting, optional lower-casing with accent stripping."""

  def __init__(self, do_lower_case=True, never_split=()):
    self.do_lower_case = do_lower_case
    self.never_split = tuple(never_split)
    # Longest first, so that of two special tokens sharing a prefix the longer one wins.
    alternatives = sorted(self.never_split, key=len, reverse=True)
    self._special = re.compile(
        '(' + '|'.join(re.escape(t) for t in alternatives) + ')') if alternatives else None

  def chunks(self, text):
    """Splits raw text into (is_special, piece): special tokens match anywhere, as in HF."""
    text = convert_to_unicode(text)
    if self._special is None or '[' not in text:
      return [(False, text)]
    parts = self._special.split(text)
    return [(i % 2 == 1, p) for i, p in enumerate(parts) if p]

  def clean(self, text):
    """Drops invalid and control characters, maps whitespace to ' ', spaces out CJK."""
    if text.isascii():
      return text.translate(_CLEAN_TABLE) if _ASCII_NEEDS_CLEANING.search(text) else text
    return text.translate(_CLEAN_TABLE)

  def split_token(self, token):
    """Lower-cases, strips accents and splits punctuation off one whitespace-free token."""
    if self.do_lower_case:
      token = token.lower()
      if not token.isascii():
        token = ''.join(c for c in unicodedata.normalize('NFD', token)
                        if unicodedata.category(c) != 'Mn')
    if token.isalnum():
      return [token]
    words, current = [], []
    for char in token:
      if _is_punctuation(char):
        if current:
          words.append(''.join(current))
          current = []
        words.append(char)
      else:
        current.append(char)
    if current:
      words.append(''.join(current))
    return words

  def tokenize(self, text):
    """Splits text into words (before WordPiece)."""
    words = []
    for is_special, piece in self.chunks(text):
      if is_special:
        words.append(piece)
        continue
      for token in self.clean(piece).split():
        words.extend(self.split_token(token))
    return words


class WordpieceTokenizer:
  """Greedy longest-match-first WordPiece, with `##` marking word continuations."""

  def __init__(self, vocab, unk_token='[UNK]',
               max_input_chars_per_word=DEFAULT_MAX_INPUT_CHARS_PER_WORD):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word
    # No piece is longer than the longest entry, so longer candidates need not be looked up.
    self._max_piece_chars = max((len(t) for t in vocab), default=0)

  def tokenize_word(self, word):
    """WordPiece of one word: its pieces, or [unk_token] if it cannot be covered."""
    n = len(word)
    if n > self.max_input_chars_per_word:
      return [self.unk_token]
    pieces, start = [], 0
    while start < n:
      end = min(n, start + self._max_piece_chars)
      while start < end:
        piece = word[start:end] if start == 0 else CONTINUATION_PREFIX + word[start:end]
        if piece in self.vocab:
          break
        end -= 1
      else:
        return [self.unk_token]
      pieces.append(piece)
      start = end
    return pieces

  def tokenize(self, text):
    """WordPiece of each whitespace-separated word of `text` (already basic-tokenized)."""
    text = convert_to_unicode(text)
    return [p for word in whitespace_tokenize(text) for p in self.tokenize_word(word)]


class FullTokenizer:
  """End-to-end WordPiece tokenizer: BasicTokenizer then WordpieceTokenizer."""

  def __init__(self, vocab_file, do_lower_case=True,
               max_input_chars_per_word=DEFAULT_MAX_INPUT_CHARS_PER_WORD,
               never_split=(), unk_token='[UNK]', check_casing=True, vocab_name='',
               casing_fix=None):
    self.vocab_file = os.fspath(vocab_file)
    # How messages name the vocab: the file, or where the user's folder holds it (a vocab
    # read from a tokenizer.json is written to a cache file the user never named).
    self.vocab_name = vocab_name or f'vocab file {self.vocab_file!r}'
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    if unk_token not in self.vocab:
      raise ValueError(
          f'{self.vocab_name} has no {unk_token!r} entry, which WordPiece emits '
          'for words it cannot cover: add it, or pass unk_token= the spelling your vocab uses')
    if check_casing:
      vocab_casing.validate_case_matches_vocab(self.vocab, do_lower_case, self.vocab_name,
                                               casing_fix)
    self.do_lower_case = do_lower_case
    self.max_input_chars_per_word = max_input_chars_per_word
    self.unk_token = unk_token
    # Special tokens missing from the vocab would only turn into [UNK]; splitting them is truer.
    self.never_split = tuple(t for t in never_split if t in self.vocab)
    self.basic_tokenizer = BasicTokenizer(do_lower_case, self.never_split)
    self.wordpiece_tokenizer = WordpieceTokenizer(self.vocab, unk_token,
                                                  max_input_chars_per_word)
    self._pieces_cache = {}
    self._ids_cache = {}

  def _token_pieces(self, token):
    pieces = self._pieces_cache.get(token)
    if pieces is None:
      if len(self._pieces_cache) > _CACHE_SIZE:
        self._pieces_cache.clear()
      pieces = [p for w in self.basic_tokenizer.split_token(token)
                for p in self.wordpiece_tokenizer.tokenize_word(w)]
      self._pieces_cache[token] = pieces
    return pieces

  def tokenize(self, text):
    """Text to WordPiece tokens."""
    tokens = []
    for is_special, piece in self.basic_tokenizer.chunks(text):
      if is_special:
        tokens.append(piece)
        continue
      for token in self.basic_tokenizer.clean(piece).split():
        tokens.extend(self._token_pieces(token))
    return tokens

  def encode(self, text):
    """Text to WordPiece ids (no [CLS]/[SEP] added)."""
    ids = []
    for is_special, piece in self.basic_tokenizer.chunks(text):
      if is_special:
        ids.append(self.vocab[piece])
        continue
      for token in self.basic_tokenizer.clean(piece).split():
        token_ids = self._ids_cache.get(token)
        if token_ids is None:
          if len(self._ids_cache) > _CACHE_SIZE:
            self._ids_cache.clear()
          token_ids = [self.vocab[p] for p in self._token_pieces(token)]
          self._ids_cache[token] = token_ids
        ids.extend(token_ids)
    return ids

  def convert_tokens_to_ids(self, tokens):
    """Tokens to ids; raises KeyError for a token not in the vocab, ValueError (one line naming
    the vocab) for a special token ([CLS], [SEP], ...) it lacks."""
    try:
      return convert_by_vocab(self.vocab, tokens)
    except KeyError as e:
      if e.args and e.args[0] in SPECIAL_TOKENS:
        check_special_tokens(self.vocab, self.vocab_name,
                             tuple(dict.fromkeys(INPUT_TOKENS + (e.args[0],))))
      raise

  def convert_ids_to_tokens(self, ids):
    """Ids to tokens; raises KeyError for an id not in the vocab."""
    return convert_by_vocab(self.inv_vocab, ids)

  @staticmethod
  def pieces_text(pieces) -> str:
    """Pieces back to text in normal_form's spelling ('##' pieces joined to their word): what
    SQuAD's decoding looks for in the original text (squad_answers.get_final_text)."""
    # run_squad.py's own rule, kept to the character: a '##' anywhere is dropped.
    text = ' '.join(pieces).replace(' ' + CONTINUATION_PREFIX, '')
    return ' '.join(text.replace(CONTINUATION_PREFIX, '').split())

  def normal_form(self, text) -> str:
    """`text` as the tokenizer sees it before WordPiece: cleaned, cased as the model, accents
    and punctuation split as BasicTokenizer does, words joined by single spaces."""
    return ' '.join(BasicTokenizer(self.do_lower_case, never_split=()).tokenize(text))
