"""ALBERT's SentencePiece tokenization (sentencepiece_tokenizer.py) as TensorFlow ops, for a
SavedModel that takes raw strings: the same ids as bertjax's tokenizer.

The model runs in tensorflow-text's SentencepieceTokenizer fed the model's bytes (the same C++
library as the Python package, its own normaliser included); preprocess_text's steps run before
it as TF ops, each written to match Python's: str.split's whitespace, `` and '' as ", NFKD with
unicodedata.combining's marks dropped, str.lower (final sigma included); then ALBERT's
digit-comma rule on the pieces. The character classes are taken from this Python's unicodedata
when the graph is built, so the graph keeps the tables bertjax tokenized with.
"""

import functools
import sys
import unicodedata

from bertjax.text import sentencepiece_tokenizer

WORD_START = sentencepiece_tokenizer.WORD_START


# Word_Break MidLetter, MidNumLet and Single_Quote: case-ignorable besides the categories below.
_MID_WORD = frozenset(":.'\u00b7\u0387\u055f\u05f4\u2018\u2019\u2024\u2027\ufe13\ufe52"
                      '\ufe55\uff07\uff0e\uff1a')
_RULES = {
    'space': str.isspace, 'digit': str.isdigit, 'combining': unicodedata.combining,
    # What this Python's unicodedata has not assigned: ICU (tensorflow-text) may know it and
    # decompose or lower it where Python leaves it as it is.
    'unassigned': lambda c: unicodedata.category(c) == 'Cn',
    'cased': lambda c: c.islower() or c.isupper() or c.istitle(),
    'case_ignorable': lambda c: (c in _MID_WORD or unicodedata.category(c) in (
        'Mn', 'Me', 'Cf', 'Lm', 'Sk')),
}


@functools.cache
def _chars(name: str) -> str:
  """The inside of an RE2 class of the code points (surrogates aside) where Python's `name`
  rule holds, as ranges."""
  ranges, start = [], None
  for cp in range(sys.maxunicode + 2):
    held = cp <= sys.maxunicode and not 0xD800 <= cp <= 0xDFFF and bool(_RULES[name](chr(cp)))
    if held and start is None:
      start = cp
    elif not held and start is not None:
      ranges.append(f'\\x{{{start:X}}}-\\x{{{cp - 1:X}}}' if cp - 1 > start
                    else f'\\x{{{start:X}}}')
      start = None
  return ''.join(ranges)


class Tokenizer:
  """Strings [B] -> ragged int64 ids [B, (T)], as SentencePieceTokenizer.encode gives them."""

  def __init__(self, tf, tf_text, model: bytes, do_lower_case: bool, keep_accents=False):
    self.tf, self.tf_text = tf, tf_text
    self.do_lower_case, self.keep_accents = do_lower_case, keep_accents
    self.sp = tf_text.SentencepieceTokenizer(model=model, out_type=tf.string)
    vocab, sp_model = sentencepiece_tokenizer.sentencepiece_vocab('', model)
    typed = sentencepiece_tokenizer.typed_specials(sp_model, vocab)
    self.unk_piece = sp_model.IdToPiece(sp_model.unk_id())
    self.control = [p for p, control in typed.items() if control]
    self.user_defined = [p for p, control in typed.items() if not control]

  def preprocess(self, texts):
    """preprocess_text: collapse spaces, plain quotes, NFKD accent stripping, lower."""
    tf, space = self.tf, f'[{_chars("space")}]'
    texts = tf.strings.regex_replace(texts, f'^{space}+|{space}+$', '')
    texts = tf.strings.regex_replace(texts, f'{space}+', ' ')
    texts = tf.strings.regex_replace(texts, "``|''", '"')
    if self.keep_accents and not self.do_lower_case:
      return texts
    # regex_split and tf.strings.lower end a string at its first NUL: the text between NULs is
    # normalised apart (NUL is a starter, neither cased nor case-ignorable, so nothing crosses
    # it in Python either) and joined back with its NULs.
    between = tf.strings.split(texts, '\0')  # [B, (N)]
    # Characters this Python has not assigned stay as they are (ICU's tables may be newer):
    # the text is cut around them and only the other parts are normalised. A character
    # unknown to Python has no decomposition and combining class 0 there, so nothing moves
    # across a cut.
    unassigned = f'[{_chars("unassigned")}]+'
    parts = self.tf_text.regex_split(between.flat_values, unassigned, unassigned)  # [N, (S)]
    values = parts.flat_values
    known = ~tf.strings.regex_full_match(values, unassigned)
    values = tf.where(known, self._normalize(values), values)
    values = tf.strings.reduce_join(parts.with_flat_values(values), axis=1)
    values = tf.strings.join([values, tf.fill(tf.shape(values), '\0')])
    joined = tf.strings.reduce_join(between.with_flat_values(values), axis=1)
    return tf.strings.regex_replace(joined, '\\x00$', '')  # The NUL after the last part.

  def _normalize(self, texts):
    tf = self.tf
    if not self.keep_accents:
      texts = self.tf_text.normalize_utf8(texts, 'NFKD')
      texts = tf.strings.regex_replace(texts, f'[{_chars("combining")}]+', '')
    if self.do_lower_case:
      # str.lower's full mapping where ICU's simple one (tf.strings.lower) differs: İ, and a
      # capital sigma after a cased letter and not before one (case-ignorables skipped) is ς.
      cased, ignorable = f'[{_chars("cased")}]', f'[{_chars("case_ignorable")}]*'
      not_cased = f'[^{_chars("cased")}{_chars("case_ignorable")}]'
      final_sigma = f'({cased}{ignorable})Σ({ignorable}(?:{not_cased}|$))'
      texts = tf.strings.regex_replace(texts, final_sigma, '\\1ς\\2')
      texts = tf.strings.regex_replace(texts, '\u0130', 'i\u0307')
      texts = tf.strings.lower(texts, encoding='utf-8')
    return texts

  def pieces(self, texts):
    """Preprocessed texts -> ragged pieces, with ALBERT's digit-comma rule, and a special
    piece read from the text as text (SentencePieceTokenizer._typed_pieces): a control
    symbol's spelling as the unknown piece, a user-defined [MASK] as '[' and the pieces of
    'MASK]' (without a word start it did not have)."""
    tf = self.tf
    pieces = self._comma_pieces(texts)  # [B, (P)]
    if not self.control and not self.user_defined:
      return pieces
    flat = pieces.flat_values
    control, user_defined = (tf.reduce_any(flat[:, None] == tf.constant(names or [''])[None],
                                           axis=1) & bool(names)
                             for names in (self.control, self.user_defined))
    flat = tf.where(control, self.unk_piece, flat)
    length = tf.strings.length(flat, unit='UTF8_CHAR')
    rest = tf.strings.substr(flat, tf.ones_like(length), tf.maximum(length - 1, 0),
                             unit='UTF8_CHAR')
    cur = self._comma_pieces(rest)  # [N, (Q)]
    first = cur[:, :1].to_tensor(default_value='')[:, 0]
    trimmed = tf.strings.regex_replace(first, f'^{WORD_START}', '')
    keep = (tf.strings.length(trimmed) > 0) & (cur.row_lengths() > 0)
    head = tf.ragged.boolean_mask(trimmed[:, None], keep[:, None])  # [N, (0 or 1)]
    first_char = tf.strings.substr(flat, tf.zeros_like(length), tf.ones_like(length),
                                   unit='UTF8_CHAR')[:, None]
    spelt = tf.concat([tf.RaggedTensor.from_tensor(first_char), head, cur[:, 1:]], 1)
    rows = _choose_rows(tf, user_defined, spelt, tf.RaggedTensor.from_tensor(flat[:, None]))
    return pieces.with_flat_values(rows).merge_dims(1, 2)

  def _comma_pieces(self, texts):
    """Preprocessed texts -> ragged pieces, with ALBERT's digit-comma rule: a piece 'x9,' is
    re-encoded as the pieces of 'x9' (without a word start it did not have) and ','."""
    tf = self.tf
    pieces = self.sp.tokenize(texts)  # [B, (P)]
    flat = pieces.flat_values
    split = tf.strings.regex_full_match(flat, f'.*[{_chars("digit")}],')
    body = tf.strings.regex_replace(tf.strings.regex_replace(flat, ',$', ''), WORD_START, '')
    cur = self.sp.tokenize(body)  # [N, (Q)]
    first = cur[:, :1].to_tensor(default_value='')[:, 0]
    # The re-encoding adds a word start the piece did not have: drop it (and an empty piece).
    drop = (~tf.strings.regex_full_match(flat, f'{WORD_START}.*')
            & tf.strings.regex_full_match(first, f'{WORD_START}.*'))
    trimmed = tf.where(drop, tf.strings.regex_replace(first, f'^{WORD_START}', ''), first)
    keep = (tf.strings.length(trimmed) > 0) & (cur.row_lengths() > 0)
    head = tf.ragged.boolean_mask(trimmed[:, None], keep[:, None])  # [N, (0 or 1)]
    comma = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(flat)[0], 1], ','))
    kept = tf.RaggedTensor.from_tensor(flat[:, None])
    rows = _choose_rows(tf, split, tf.concat([head, cur[:, 1:], comma], 1), kept)  # [N, (R)]
    return pieces.with_flat_values(rows).merge_dims(1, 2)

  def tokenize(self, texts):
    """Raw strings [B] -> ragged int64 ids [B, (T)]."""
    return self.tf.cast(self.sp.string_to_id(self.pieces(self.preprocess(texts))),
                        self.tf.int64)


def _choose_rows(tf, which, a, b):
  """Row i of ragged `a` where which[i], else row i of ragged `b` (both with len(which) rows)."""
  index = tf.range(tf.shape(which, out_type=tf.int64)[0])
  order = tf.concat([tf.boolean_mask(index, which), tf.boolean_mask(index, ~which)], 0)
  stacked = tf.concat([tf.ragged.boolean_mask(a, which), tf.ragged.boolean_mask(b, ~which)], 0)
  return tf.gather(stacked, tf.math.invert_permutation(order))
