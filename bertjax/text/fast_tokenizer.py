"""Fast WordPiece: tensorflow-text's FastBertTokenizer, routed so that ids equal the reference.

FastBertTokenizer differs from BERT's tokenization.py on some input: its normaliser is
NFKC/case-folding flavoured (ß -> ss, ﬁ -> fi, full-width Ａ -> a, … -> ...), it turns control
characters into spaces where the original deletes them, it limits words in bytes rather than
characters, and it splits `[MASK]` written in the text. So a line takes the fast path only when
all of it is known to tokenize identically:

  a line goes to the reference path (`tf_needs_reference` is True) iff it contains a character
  outside `safe_code_points()`, a special token (`[MASK]`, ... as written), or a run of more than
  `max_input_chars_per_word` characters without a space, tab or newline.

`safe_code_points()` is a set of common Unicode blocks (Latin, Greek, Cyrillic, Hebrew, Arabic,
general punctuation, CJK, ...) minus the code points where the two tokenizers were found to
differ; tests/text/tokenizer_test.py proves the equality for every one of them, cased and uncased.
Control and format characters in those blocks are deleted in-graph before FastBertTokenizer, as
the original deletes them. TensorFlow is imported only when a FastTokenizer is built.
"""

import functools
import gc
import os
import re
import unicodedata

import numpy as np

from bertjax.text import tokenizer

# Blocks whose characters take the fast path, except _UNSAFE and unassigned code points.
_SAFE_BLOCKS = (
    (0x0000, 0x024F),  # ASCII, Latin-1 Supplement, Latin Extended-A and -B.
    (0x0250, 0x02AF),  # IPA Extensions.
    (0x0300, 0x036F),  # Combining Diacritical Marks.
    (0x0370, 0x03FF),  # Greek and Coptic.
    (0x0400, 0x052F),  # Cyrillic and Cyrillic Supplement.
    (0x0590, 0x06FF),  # Hebrew, Arabic.
    (0x1E00, 0x1EFF),  # Latin Extended Additional.
    (0x2000, 0x206F),  # General Punctuation.
    (0x20A0, 0x20CF),  # Currency Symbols.
    (0x2190, 0x22FF),  # Arrows, Mathematical Operators.
    (0x3000, 0x30FF),  # CJK Symbols and Punctuation, Hiragana, Katakana.
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs.
)
# Where FastBertTokenizer's normaliser differs in those blocks: compatibility forms it rewrites
# (ª ² ½ µ ß ĳ ǆ ſ ϐ ‥ … ‼ ∬ ...) and spacing accents it drops, and the Greek capital sigma,
# which Python lower-cases to final ς at the end of a word where FastBertTokenizer gives σ.
_UNSAFE = frozenset(
    '\u00A8\u00AA\u00AF\u00B2\u00B3\u00B4\u00B5\u00B8\u00B9\u00BA\u00BC\u00BD\u00BE\u00DF'
    '\u0132\u0133\u013F\u0140\u0149\u017F\u01C4\u01C5\u01C6\u01C7\u01C8\u01C9\u01CA\u01CB'
    '\u01CC\u01F1\u01F2\u01F3\u0345\u037A\u0384\u0385\u03A3\u03C2\u03D0\u03D1\u03D2\u03D3'
    '\u03D4\u03D5\u03D6\u03F0\u03F1\u03F2\u03F5\u03F9\u0675\u0676\u0677\u0678\u1E9A\u1E9B'
    '\u1E9E\u2011\u2017\u2024\u2025\u2026\u2033\u2034\u2036\u2037\u203C\u203E\u2047\u2048'
    '\u2049\u2057\u20A8\u222C\u222D\u222F\u2230\u3036\u3038\u3039\u303A\u309B\u309C\u309F'
    '\u30FF')
# RE2 allows at most 1000 repetitions, which bounds the long-word rule.
_MAX_RE2_REPEAT = 1000


def safe_code_points():
  """Code points whose lines may take the fast path (see the module docstring)."""
  return [cp for lo, hi in _SAFE_BLOCKS for cp in range(lo, hi + 1)
          if chr(cp) not in _UNSAFE and unicodedata.category(chr(cp)) != 'Cn']


def _is_dropped(cp):
  """Whether the reference deletes this character while cleaning the text."""
  char = chr(cp)
  return cp == 0 or (char not in '\t\n\r' and unicodedata.category(char) in ('Cc', 'Cf'))


def _re2_class(code_points):
  """An RE2 character class matching exactly `code_points`."""
  ranges, start, prev = [], None, None
  for cp in sorted(code_points):
    if start is not None and cp == prev + 1:
      prev = cp
      continue
    if start is not None:
      ranges.append((start, prev))
    start = prev = cp
  if start is not None:
    ranges.append((start, prev))
  return '[' + ''.join(f'\\x{{{a:x}}}' if a == b else f'\\x{{{a:x}}}-\\x{{{b:x}}}'
                       for a, b in ranges) + ']'


def import_tf():
  """Imports TensorFlow (quietly, without accelerators) and tensorflow-text; returns both."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  # Slow: only when needed.
  import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top

  try:
    # TF only feeds the host; the accelerators belong to JAX.
    tf.config.set_visible_devices([], 'GPU')
  except RuntimeError:  # TF was initialised already; its devices can no longer be changed.
    pass
  return tf, tf_text


@functools.cache
def word_break_class() -> str:
  """RE2 class of the characters at which the original's basic tokenizer ends a word
  (whitespace, punctuation, CJK ideographs): the words WordPiece's length limit counts."""
  return _re2_class(cp for cp in range(0x110000)
                    if not 0xD800 <= cp <= 0xDFFF and tokenizer.ends_a_word(chr(cp)))


def drop_pattern() -> str:
  """RE2 class of the control and format characters the original deletes (and
  FastBertTokenizer would turn into spaces): removed in-graph before it."""
  return _re2_class(cp for cp in safe_code_points() if _is_dropped(cp))


def whitespace_pattern() -> str:
  """RE2 class of the characters Python's str.split splits at (every one is below U+3001):
  where bertjax's predict splits a line into words."""
  return _re2_class(cp for cp in range(0x3001) if chr(cp).isspace())


class FastTokenizer:
  """WordPiece ids from tensorflow-text where that is exact, from the reference elsewhere."""

  def __init__(self, vocab_file, do_lower_case=True,
               max_input_chars_per_word=tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD,
               never_split=(), unk_token='[UNK]', check_casing=True):
    if not 0 < max_input_chars_per_word < _MAX_RE2_REPEAT:
      raise ValueError(f'max_input_chars_per_word={max_input_chars_per_word}: the fast path '
                       f'supports 1 to {_MAX_RE2_REPEAT - 1}; use tokenizer.FullTokenizer')
    self.reference = tokenizer.FullTokenizer(
        vocab_file, do_lower_case=do_lower_case, max_input_chars_per_word=max_input_chars_per_word,
        never_split=never_split, unk_token=unk_token, check_casing=check_casing)
    self.vocab = self.reference.vocab
    tf, tf_text = import_tf()
    self._tf = tf
    # Words in accepted lines have at most max_input_chars_per_word characters (longer runs are
    # routed), so a byte limit of 4 per character never turns a word into [UNK] here.
    self._fast = tf_text.FastBertTokenizer(
        vocab=list(self.vocab), suffix_indicator='##',
        max_bytes_per_word=4 * max_input_chars_per_word, token_out_type=tf.int64,
        unknown_token=unk_token, lower_case_nfd_strip_accents=do_lower_case)
    safe = safe_code_points()
    self._safe_pattern = _re2_class(safe) + '*'
    self._drop_pattern = drop_pattern()
    specials = ''.join(re.escape(t) + '|' for t in self.reference.never_split)
    self._route_pattern = f'(?s).*(?:{specials}[^ \\t\\n\\r]{{{max_input_chars_per_word + 1},}}).*'
    self._encode_fn = tf.function(
        self._encode_graph, input_signature=[tf.TensorSpec([None], tf.string)])

  def tf_needs_reference(self, texts):
    """Bool tensor, True for the lines that only the reference path tokenizes exactly."""
    tf = self._tf
    unsafe_chars = tf.logical_not(tf.strings.regex_full_match(texts, self._safe_pattern))
    return tf.logical_or(unsafe_chars, tf.strings.regex_full_match(texts, self._route_pattern))

  def tf_tokenize(self, texts):
    """In-graph ids, RaggedTensor [batch, (ids)]; exact where tf_needs_reference is False."""
    texts = self._tf.strings.regex_replace(texts, self._drop_pattern, '')
    return self._fast.tokenize(texts)

  def tf_tokenize_exact(self, texts):
    """In-graph ids for every line: routed lines go through the reference in a py_function."""
    tf = self._tf
    needs = self.tf_needs_reference(texts)
    fast_rows = tf.ragged.boolean_mask(self.tf_tokenize(texts), tf.logical_not(needs))

    def reference(routed):
      rows = [self.reference.encode(t) for t in routed.numpy()]
      flat = np.fromiter((i for r in rows for i in r), np.int64)
      return flat, np.array([len(r) for r in rows], np.int64)

    flat, lengths = tf.py_function(reference, [tf.boolean_mask(texts, needs)],
                                   [tf.int64, tf.int64])
    slow_rows = tf.RaggedTensor.from_row_lengths(tf.ensure_shape(flat, [None]),
                                                 tf.ensure_shape(lengths, [None]))
    # Fast rows then routed rows; gather puts each back at its line's position.
    order = tf.concat([tf.where(tf.logical_not(needs))[:, 0], tf.where(needs)[:, 0]], 0)
    rows = tf.concat([fast_rows, slow_rows], 0)
    return tf.gather(rows, tf.math.invert_permutation(order))

  def _encode_graph(self, texts):
    tf = self._tf
    # Each tensorflow-text op runs on one thread; independent shards run on several cores.
    shards = min(8, os.cpu_count() or 1)
    size = tf.size(texts, out_type=tf.int64)
    parts = [texts[i * size // shards:(i + 1) * size // shards] for i in range(shards)]
    ids = tf.concat([self.tf_tokenize(p) for p in parts], 0)
    needs = tf.concat([self.tf_needs_reference(p) for p in parts], 0)
    return ids.flat_values, ids.row_splits, needs

  def encode_batch(self, texts):
    """Ids of each text (no [CLS]/[SEP]), exact: the fast path where it is exact."""
    texts = [t if isinstance(t, str) else tokenizer.convert_to_unicode(t) for t in texts]
    if not texts:
      return []
    flat, splits, needs = (x.numpy() for x in self._encode_fn(self._tf.constant(texts)))
    flat, splits = flat.tolist(), splits.tolist()
    # Creating one list per line would trigger a garbage collection every few hundred lines,
    # each scanning everything allocated so far; none of these objects can form a cycle.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
      ids = [flat[a:b] for a, b in zip(splits[:-1], splits[1:], strict=True)]
    finally:
      if gc_was_enabled:
        gc.enable()
    for i in np.flatnonzero(needs).tolist():
      ids[i] = self.reference.encode(texts[i])
    return ids

  def encode(self, text):
    """Ids of one text (no [CLS]/[SEP])."""
    return self.encode_batch([text])[0]

  def convert_tokens_to_ids(self, tokens):
    """Tokens to ids; raises KeyError for a token not in the vocab."""
    return self.reference.convert_tokens_to_ids(tokens)

  def convert_ids_to_tokens(self, ids):
    """Ids to tokens; raises KeyError for an id not in the vocab."""
    return self.reference.convert_ids_to_tokens(ids)
