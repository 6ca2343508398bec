"""A user's text files read as every tool reads them: as UTF-8, broken into lines at \n, \r\n
and \r only (split_lines), and refused with what to do where they are no UTF-8 text: gzip, a
binary file, UTF-16/32 or another encoding, each named by its bytes (Latin-1, Windows-1252).
"""

import io
import os
import re
import shlex
import sys
import unicodedata

import bertjax
from bertjax import compressed_text
from bertjax import files

# The first bytes of a file read to tell text from binary (NUL bytes) and UTF-16 from UTF-8.
HEAD_BYTES = 1 << 16


def split_lines(text: str) -> list[str]:
  """The lines of a user's text as they wrote them: broken at \\n, \\r\\n and \\r only, a
  leading byte order mark (U+FEFF) removed, no empty last line after a final line break.

  Every tool reads a user's lines with this, never str.splitlines(), which also breaks at
  U+2028, U+2029, U+0085, form feed, \\x1c-\\x1e...: characters that may sit inside one line
  (a JSON string, a CSV field) and would shift every later line.
  """
  if text.startswith('\ufeff'):
    text = text[1:]
  if '\r' in text:
    text = text.replace('\r\n', '\n').replace('\r', '\n')
  lines = text.split('\n')
  if lines[-1] == '':
    lines.pop()
  return lines


class UniversalLines:
  """A binary file read line by line as `split_lines` breaks text (at \\n, \\r\\n or a lone
  \\r, each given back as \\n), still as bytes, so that the caller decodes and counts each line
  itself: io's universal newlines over latin-1, which maps every byte to one character and
  back, so `readline(limit)` still counts bytes."""

  def __init__(self, binary_file):
    self._text = io.TextIOWrapper(binary_file, encoding='latin-1', newline=None)

  def readline(self, limit: int = -1) -> bytes:
    return self._text.readline(limit).encode('latin-1')

  def __iter__(self):
    return (line.encode('latin-1') for line in self._text)


def without_blank_end(lines) -> list[str]:
  """`lines` without the blank (whitespace-only) ones at their end: an editor's, which shift no
  output of a tool that gives one per line."""
  lines = list(lines)
  while lines and not lines[-1].strip():
    lines.pop()
  return lines


def check_no_blank_lines(lines, source: str) -> list[str]:
  """`lines` without the blank ones at their end (an editor's: no output shifts), or an error
  naming the first blank (whitespace-only) one before: tools that give one output per input line
  read no blank lines (every later output would shift)."""
  lines = without_blank_end(lines)
  for number, line in enumerate(lines, 1):
    if not line.strip():
      raise ValueError(f'{source}:{number} is empty: one input per line (remove blank lines).')
  return lines


def wide_encoding(head: bytes) -> str | None:
  """'UTF-32' or 'UTF-16' (by a byte-order mark), 'UTF-32LE', 'UTF-32BE', 'UTF-16LE' or
  'UTF-16BE' (no mark: iconv then needs the byte order) when a file's first bytes are text in
  that encoding (Windows tools write it: Notepad's 'Unicode', PowerShell's `>`); else None.
  Without a mark, NULs on one side of the pairs (ASCII: beside each letter; CJK: in its line
  breaks, spaces and digits, and in a few characters, 一 U+4E00, 　U+3000, 가 U+AC00) must make
  text: every character below U+0100 printable or a line's spacing (U+0000 never), all but 5%
  text (no control, unassigned or private-use character), past 80 characters a space, a line
  break or a punctuation mark among them, and its first 64 characters in a few scripts (numbers
  read as characters spread over dozens of Unicode's pages). Of two readings, the one with fewer
  such characters and fewer of Latin-1's letters wins (emoji's low surrogates hold NULs too)."""
  if head.startswith((b'\xff\xfe\x00\x00', b'\x00\x00\xfe\xff')):
    return 'UTF-32'
  if head.startswith((b'\xff\xfe', b'\xfe\xff')):
    return 'UTF-16'
  if len(head) < 8:
    return None
  for codec in 'UTF-32LE', 'UTF-32BE':
    try:
      if _reads_as_text(head[:len(head) // 4 * 4].decode(codec)):
        return codec
    except UnicodeDecodeError:  # Above U+10FFFF: not UTF-32.
      pass
  pairs = len(head) // 2
  if _scattered_nuls(head, pairs) and _utf8_with_stray_nuls(head):
    return None  # UTF-8 text with a stray NUL or several: no UTF-16 (iconv would garble it).
  fits = []
  for codec, high in (('UTF-16LE', head[1:2 * pairs:2]), ('UTF-16BE', head[0:2 * pairs:2])):
    text = head[:2 * pairs].decode(codec, 'replace').removesuffix('\ufffd')  # May be cut.
    if 0 in high and _reads_as_text(text):
      # Of text that reads in both orders (emoji: their low surrogates hold NULs too), the
      # wrong one holds more characters that are no text, or Latin-1's letters (U+0080-00FF)
      # where the right one has surrogate pairs; then the side of the NULs.
      fits.append((-_not_text(text), -sum('\x80' <= c <= '\xff' for c in text),
                   high.count(0), codec))
  return max(fits)[-1] if fits else None


def _scattered_nuls(head: bytes, pairs: int) -> bool:
  """Whether `head`'s NULs are too few, or too scattered, for UTF-16 without a mark: under
  10% of its bytes, or on both sides of its byte pairs with neither side NUL in half its pairs
  (UTF-16's NULs are all on one side, but for a few ideographs such as 一 U+4E00, and on every
  pair of ASCII text). A short UTF-8 file with a few NULs had been told to be UTF-16."""
  if head.count(0) < 0.1 * len(head):
    return True
  sides = head[0:2 * pairs:2].count(0), head[1:2 * pairs:2].count(0)
  return min(sides) > 0 and max(sides) < 0.5 * pairs


def _utf8_with_stray_nuls(head: bytes) -> bool:
  """Whether `head` is UTF-8 text but for a few NULs: its bytes without them decode, and they
  are not kana in UTF-16 without a mark (hiragana U+3041-307F is ASCII bytes beside 0x30: 'B0D0',
  its NULs only in line breaks), the one UTF-16 text whose bytes are ASCII but for its NULs."""
  try:
    text = head.replace(b'\x00', b'').decode('utf-8')
  except UnicodeDecodeError:
    return False
  kana = max(head[0::2].count(0x30), head[1::2].count(0x30)) >= 0.4 * max(len(head) // 2, 1)
  return bool(text) and (not text.isascii() or not kana)


def text_but_nuls(head: bytes) -> bool:
  """Whether a file's first bytes, which hold NULs and which wide_encoding reads as no UTF-16/32
  (its callers asked it first), are UTF-8 text but for them (a scrape's stray NULs: no control
  character else), not a binary file."""
  return (b'\x00' in head and _utf8_with_stray_nuls(head) and
          not _NOT_TEXT_BELOW_0100.search(head.replace(b'\x00', b'').decode('utf-8')))


def _not_text(text: str) -> int:
  """Characters that no text holds: control (but a line's spacing), unassigned, private."""
  return sum(c not in _SPACING and unicodedata.category(c) in ('Cc', 'Cn', 'Co') for c in text)


def _reads_as_text(text: str) -> bool:
  # Spaces and format characters (U+3000, NBSP, ZWNJ) are text, though not printable to Python.
  # Past a line's length, text holds a space, a line break or a comma somewhere, and it is
  # written in a few scripts; binary read as UTF-16/32 (protobuf, arrays of token ids) seldom
  # does either (of 300 random arrays of 75 int32 token ids below 30522, 171 read as UTF-32LE
  # text without the pages' rule, none with it; of 300 bytes of protobuf, 86 and 5 as UTF-16).
  return ('\ufffd' not in text and not _NOT_TEXT_BELOW_0100.search(text) and
          _not_text(text) <= 0.05 * len(text) and
          (len(text) < _RUN or any(c in _BREAKS for c in text)) and
          len({_script_page(c) for c in text[:64] if c >= '\u0100'}) <= _PAGES)


def _script_page(c: str) -> int:
  """The 256-character page of c, the CJK ideographs (U+3400-9FFF) and Hangul syllables
  (U+AC00-D7FF) one page each: text is written in a few scripts, whereas numbers read as
  UTF-16/32 (token ids, say) spread over dozens of pages."""
  code = ord(c)
  return 0x34 if 0x3400 <= code < 0xa000 else 0xac if 0xac00 <= code < 0xd800 else code >> 8


_SPACING = '\t\n\r\f\v'
# Past _RUN characters, text holds one of _BREAKS (a space, a line break, a comma or a full stop,
# CJK's among them); its first 64 characters from U+0100 up lie in at most _PAGES pages.
_RUN, _PAGES = 80, 8
_BREAKS = ' \t\n\u3000,.;:!?|\u3001\u3002\uff0c\uff0e\uff01\uff1f\uff1a\uff1b'
# A character below U+0100 that no text holds: a control character but a line's spacing.
_NOT_TEXT_BELOW_0100 = re.compile('[\x00-\x08\x0e-\x1f\x7f-\x9f]')


def reencode_hint(head: bytes, data: bytes = b'') -> str:
  """How to re-encode a file that is not UTF-8 (e.g. iconv ...), by its first bytes: from
  UTF-16 or UTF-32 where wide_encoding sees them; from Windows-1252 where the bytes of `data`
  (the file, or a part of it) that are not UTF-8 hold one of 0x80-0x9F (its quotes, dashes and
  euro sign, which Latin-1 reads as invisible control characters); else from Latin-1."""
  wide = wide_encoding(head)
  if wide:
    return f'e.g. iconv -f {wide} -t utf-8'
  undecoded = (data or head).decode('utf-8', 'surrogateescape')  # A byte not UTF-8: U+DC80 + b.
  return f'e.g. iconv -f {"cp1252" if _C1.search(undecoded) else "latin1"} -t utf-8'


def not_text(name: str, head: bytes) -> str:
  """An error for a file that no encoding makes text, by its first bytes (gzip, or NUL bytes
  outside UTF-16/32); '' for one that may be text in another encoding."""
  if head.startswith(b'\x1f\x8b'):
    return f'{name} is gzip-compressed, not text: decompress it first (gunzip -k {name}).'
  if what := compressed_text.not_read(head):  # zstd, lz4, zip, 7z: named, not 'NUL bytes'.
    return (f'{name} is {what}, which is not read (gzip, bzip2 and xz are): decompress it '
            'first, or pipe it in decompressed.')
  if b'\x00' in head and not wide_encoding(head):
    first = head.index(0)
    if text_but_nuls(head):
      return (f'{name} holds NUL bytes (the first at byte {first}, line '
              f'{lines_before(head, first) + 1}) in what is otherwise UTF-8 text: remove them '
              f"(e.g. tr -d '\\000' < {shlex.quote(name)} > clean.txt) and pass that file.")
    return (f'{name} holds NUL bytes (the first at byte {first}): a binary file, not '
            'text; pass a text file.')
  return ''


def check_utf8_head(name: str, data: bytes):
  """Refuses a file whose first 64 KiB (create_pretraining_data's look) show it is no UTF-8
  text even where its bytes decode as UTF-8: gzip, a NUL byte outside UTF-16/32 (a binary
  file), or UTF-16/32 text (ASCII in UTF-16 without a mark decodes, a NUL between letters)."""
  head = data[:HEAD_BYTES]
  if error := not_text(name, head):
    raise ValueError(error)
  if wide := wide_encoding(head):
    raise ValueError(f'{name} is {wide} text, not UTF-8: re-encode it ({reencode_hint(head)}).')


_C1 = re.compile('[\udc80-\udc9f]')  # Bytes 0x80-0x9F that are not part of UTF-8.


def json_error(e) -> str:
  """A json.JSONDecodeError said as a line's reader says it: what is wrong and at which column
  (json's own message for a raw tab ends in a dangling 'at', and names no fix)."""
  what = e.msg.removesuffix(' at')
  if what == 'Invalid control character':
    what += ' (a raw tab or line break inside a string: write it as \\t or \\n)'
  return f'{what} at column {e.colno}'


def read_stdin_lines() -> list[str]:
  """The lines of standard input, read as UTF-8 whatever the locale (split_lines' rules); gzip,
  bzip2 or xz decompressed (`cat in.txt.gz | ...`)."""
  if 'stdin' in bertjax.CLOSED_STREAMS:  # Read as empty, the error would blame the inputs.
    raise ValueError('standard input is closed (started with <&-), where the inputs were to be '
                     'read: pass them as a file, or pipe them in (cat inputs.txt | ...).')
  return _utf8_lines(compressed_text.decompressed_stream(sys.stdin.buffer.read(), '<stdin>'),
                     '<stdin>')


def lines_before(data: bytes, end: int) -> int:
  """The line breaks in data[:end] by split_lines' rules (\\n, \\r\\n, a lone \\r): an error at
  byte `end` is on line lines_before + 1."""
  return data[:end].replace(b'\r\n', b'\n').replace(b'\r', b'\n').count(b'\n')


def _utf8_lines(data: bytes, name: str) -> list[str]:
  """split_lines of a file's or a stream's bytes (standard input, a pipe, a device), decoded as
  UTF-8, or an error naming the encoding to convert from."""
  check_utf8_head(name, data)  # Later NUL bytes are dropped by the tokenizer, as in a corpus.
  try:
    return split_lines(data.decode('utf-8'))
  except UnicodeDecodeError as e:
    line = lines_before(data, e.start) + 1
    raise ValueError(f'{name}:{line} is not UTF-8 text (byte {e.start}): re-encode it '
                     f'({reencode_hint(data[:64], data)}).') from None


def read_text_lines(path, flag: str = 'input_file') -> list[str]:
  """The lines of a UTF-8 text file (local or a URL) given by --`flag` (split_lines' rules), or
  an error saying what to do."""
  path = str(path)
  if files.isdir(path) and not files.isfile(path):
    raise IsADirectoryError(f'--{flag}={path} is a folder: name the text file to read.')
  if not files.is_remote(path) and os.path.exists(path) and not os.path.isfile(path):  # local
    # A pipe or a device (/dev/stdin, <(cmd)): read as a stream, as cat reads it.
    with open(path, 'rb') as stream:  # local: a pipe or device, not a URL
      return _utf8_lines(compressed_text.decompressed_stream(stream.read(), path), path)
  files.require_file(path, f'--{flag}={path} does not exist.')
  # A .gz, .bz2 or .xz text decompressed, as the corpus tools read one.
  return _utf8_lines(compressed_text.decompressed(path), path)
