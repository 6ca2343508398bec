"""SentencePiece tokenization (ALBERT's), with the WordPiece FullTokenizer's interface.

The model file is read through bertjax.files (local or a URL); special tokens written in the
text are text, never the special ids (typed_specials), unless never_split keeps them whole, as on
the WordPiece path (tokenizer.py).
"""

import collections
import os
import re
import unicodedata

from bertjax import files
from bertjax.text import tokenizer
from bertjax.text import vocab_casing

# SentencePiece's word-start mark: '▁the' starts a word, 'ing' continues one.
WORD_START = '\u2581'
# A byte piece (byte_fallback): one UTF-8 byte of a character outside the pieces.
_BYTE_PIECE = re.compile(r'<0x[0-9A-F]{2}>')


def _bytes_text(run: re.Match) -> str:
  """A run of byte pieces ('<0xE6><0x97><0xA5>') as the UTF-8 text it spells ('日')."""
  return bytes.fromhex(run.group(0).replace('<0x', '').replace('>', '')).decode(
      'utf-8', 'replace')


def continues_word(piece: str) -> bool:
  """Whether a SentencePiece piece continues the word before it: every piece but a word start
  ('▁...'), a control symbol ([CLS]) or a meta piece (<unk>); a byte piece continues (the
  '▁' or piece before it starts its word), so a character's bytes are masked together."""
  return not piece.startswith((WORD_START, '[', '<')) or bool(_BYTE_PIECE.fullmatch(piece))


def is_sentencepiece_model(path, data: bytes) -> bool:
  """Whether a vocab file is a SentencePiece model (binary) rather than a WordPiece vocab.txt.

  Told by the name (.model) or by the bytes, since a run keeps its copy as <workdir>/vocab.txt
  whatever the format: a serialized ModelProto opens with its first piece (field 1, b'\\n') and
  holds NUL bytes (its float scores and zero ids), which no vocab.txt has.
  """
  return os.fspath(path).endswith('.model') or (data[:1] == b'\n' and b'\x00' in data)


def sentencepiece_vocab(path, data: bytes):
  """A SentencePiece model's pieces as an OrderedDict piece -> id (its ids, in order)."""
  import sentencepiece  # pylint: disable=g-import-not-at-top  # Only SentencePiece needs it.
  model = sentencepiece.SentencePieceProcessor()
  try:
    model.LoadFromSerializedProto(data)
  except (OSError, RuntimeError) as e:
    head = data[:4096]
    if tokenizer.is_sentencepiece_vocab_text(head):
      raise ValueError(f'{os.fspath(path)!r} is a SentencePiece .vocab (pieces and scores as '
                       'text), not the model: pass the .model file written beside it') from None
    wordpiece = b'\0' not in head and b'\n' in head and b'[' in head  # A vocab.txt's lines.
    # A run's data.vocab_file is told by a .model name too: renaming is what reads it there.
    renamed = (' named vocab.txt, as data.vocab_file for a run (a .model name is read as '
               'SentencePiece)' if os.fspath(path).endswith('.model') else '')
    raise ValueError(f'{os.fspath(path)!r} is not a SentencePiece model'
                     + (f' but text, a WordPiece vocab.txt: pass it as --vocab_file{renamed}'
                        if wordpiece else f' ({e}): pass the .model file that spm_train (or '
                        'learn_vocab --model=sentencepiece) wrote')) from None
  return collections.OrderedDict(
      (model.IdToPiece(i), i) for i in range(model.GetPieceSize())), model


def typed_specials(sp_model, vocab) -> dict:
  """The pieces that must not come from the text as themselves, each to True for a control
  symbol, False for a user-defined piece: SentencePiece matches a user-defined [MASK] in the
  text (--user_defined_symbols=[CLS],[SEP],[MASK]), and spells an unknown run such as a cased
  '[MASK]' by its text, which reads as the control symbol's piece. Special tokens written in the
  text are text, as on the WordPiece path (never_split aside), so text never fakes [SEP] or
  [MASK]; other user-defined pieces are the user's own, matched as SentencePiece does."""
  typed = {p: True for p, i in vocab.items() if sp_model.IsControl(i)}
  typed.update((p, False) for p in tokenizer.SPECIAL_TOKENS
               if p in vocab and not sp_model.IsControl(vocab[p])
               and not sp_model.IsUnknown(vocab[p]))
  return typed


class SentencePieceTokenizer:
  """ALBERT-style SentencePiece tokenizer with the FullTokenizer interface."""

  def __init__(self, spm_model_file, do_lower_case=True, keep_accents=False,
               never_split=(), check_casing=True, casing_fix=None):
    path = os.fspath(spm_model_file)
    missing = (f'SentencePiece model {path!r} does not exist: pass spm_model_file= the .model '
               'file shipped with the checkpoint')
    files.require_file(path, missing)
    self.spm_model_file = path
    self.vocab_file = path  # FullTokenizer's name for the file its vocab came from.
    # From its bytes: the file may be a URL, which SentencePiece cannot open.
    self.vocab, self.sp_model = sentencepiece_vocab(path, files.read_bytes(path))
    if check_casing:  # As for a vocab.txt: upper-case pieces mean a cased model.
      vocab_casing.validate_case_matches_vocab(self.vocab, do_lower_case,
                                               f'SentencePiece model {path!r}', casing_fix)
    self.do_lower_case = do_lower_case
    self.keep_accents = keep_accents
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.unk_token = self.sp_model.IdToPiece(self.sp_model.unk_id())
    self.never_split = tuple(t for t in never_split if t in self.vocab)
    self._typed = typed_specials(self.sp_model, self.vocab)
    # never_split's special tokens written in the text are cut out first and kept whole, as on
    # the WordPiece path; any other is text (_typed_pieces).
    self._chunker = tokenizer.BasicTokenizer(do_lower_case, self.never_split)

  def preprocess_text(self, text):
    """ALBERT's normalisation: collapse spaces, plain quotes, NFKD accent stripping, lower."""
    text = ' '.join(text.strip().split()).replace('``', '"').replace("''", '"')
    if not self.keep_accents:
      text = ''.join(c for c in unicodedata.normalize('NFKD', text)
                     if not unicodedata.combining(c))
    return text.lower() if self.do_lower_case else text

  def _encode_pieces(self, text):
    pieces = []
    for piece in self.sp_model.EncodeAsPieces(text):
      if piece in self._typed:  # A special token written in the text: text, as in WordPiece.
        pieces.extend(self._typed_pieces(piece))
      # As ALBERT: keep a trailing comma after digits a separate piece ("9," -> "9", ",").
      elif len(piece) > 1 and piece[-1] == ',' and piece[-2].isdigit():
        cur = self.sp_model.EncodeAsPieces(piece[:-1].replace(WORD_START, ''))
        if piece[0] != WORD_START and cur[0][0] == WORD_START:
          cur = [cur[0][1:]] + cur[1:] if len(cur[0]) > 1 else cur[1:]
        pieces.extend(cur + [piece[-1]])
      else:
        pieces.append(piece)
    return pieces

  def _typed_pieces(self, piece):
    """A special piece SentencePiece read from the text (typed_specials) as text: a control
    symbol's spelling is an unknown run (SentencePiece's id for it is <unk>); a user-defined
    [MASK] is spelt by its first character and the model's pieces of the rest, continuing the
    word ('[' 'MA' 'SK]')."""
    if self._typed[piece]:
      return [self.unk_token]
    rest = self._encode_pieces(piece[1:])
    if rest and rest[0].startswith(WORD_START):  # The word started before the piece.
      rest = [rest[0][1:]] + rest[1:] if len(rest[0]) > 1 else rest[1:]
    return [piece[0]] + rest

  def tokenize(self, text):
    """Text to SentencePiece pieces."""
    tokens = []
    for is_special, piece in self._chunker.chunks(text):
      if is_special:
        tokens.append(piece)
      else:
        tokens.extend(self._encode_pieces(self.preprocess_text(piece)))
    return tokens

  def encode(self, text):
    """Text to ids (no [CLS]/[SEP] added)."""
    return self.convert_tokens_to_ids(self.tokenize(text))

  def convert_tokens_to_ids(self, tokens):
    """Pieces to ids; unknown pieces map to the unk id, as SentencePiece does."""
    return [self.sp_model.PieceToId(t) for t in tokens]

  def convert_ids_to_tokens(self, ids):
    """Ids to pieces."""
    return [self.sp_model.IdToPiece(int(i)) for i in ids]

  @staticmethod
  def pieces_text(pieces) -> str:
    """Pieces back to text in normal_form's spelling (a '▁' starts a word): what SQuAD's
    decoding looks for in the original text (squad_answers.get_final_text); byte pieces
    (byte_fallback) as the characters they spell."""
    text = re.sub(r'(?:<0x[0-9A-F]{2}>)+', _bytes_text, ''.join(pieces))
    return ' '.join(text.replace(WORD_START, ' ').split())

  def normal_form(self, text) -> str:
    """`text` as the pieces spell it: preprocess_text's casing and accents, then the model's
    own normalizer (NFKC by default; it writes spaces as '▁'), words joined by single spaces."""
    normalized = self.sp_model.normalize(self.preprocess_text(text))
    return ' '.join(normalized.replace(WORD_START, ' ').split())
