"""A corpus's text files read line by line, for the vocab learners: each file once, gzip, bzip2
or xz read decompressed (compressed_text.py), lines over a length skipped and counted, a few
lines that are not UTF-8 skipped and counted (a file mostly not UTF-8 refused: check_utf8, the
rule create_pretraining_data keeps), and a progress line over the bytes read.
"""

import collections
import itertools

from bertjax import compressed_text
from bertjax import files as files_lib
from bertjax import job_lines
from bertjax import paths
from bertjax import text_files

# Longer lines are skipped and counted: create_pretraining_data's --max_line_bytes default.
MAX_LINE_BYTES = 100_000
# A few lines that are not UTF-8 (a stray byte) are skipped and counted; a file with more than
# FEW_INVALID_UTF8_LINES of them that are over this share of its text lines is refused.
MAX_INVALID_UTF8_FRACTION = 0.01
FEW_INVALID_UTF8_LINES = 3
_TELL_EVERY_LINES = 4096  # How often read_lines says how far it read (a tell() each).


def input_files(patterns):
  """Expands comma-separated files and globs (a str or a list) into a list of files, each file
  once (paths.each_file_once: a link to a file listed already too, which would weigh double)."""
  if not isinstance(patterns, str):
    patterns = ','.join(patterns)
  return paths.expand_input_patterns(patterns)


class Skips:
  """Skipped lines by reason, the first place of each: text_input.Skips's interface (a later
  stage's, which learn_vocab passes)."""

  def __init__(self):
    self.counts, self.examples = collections.Counter(), {}

  def add(self, reason, place):
    self.counts[reason] += 1
    self.examples.setdefault(reason, [place])


def long_lines(skips, max_line_bytes, to: str) -> str:
  """'' or what is said of the lines skipped for their length (`to`: what a larger
  --max_line_bytes would do with them), by learn_vocab and create_pretraining_data alike."""
  if not (count := skips.counts.get('line_too_long', 0)):
    return ''
  return (f'{count} line(s) longer than --max_line_bytes={max_line_bytes} skipped (e.g. '
          f'{skips.examples["line_too_long"][0]}): pass a larger --max_line_bytes to {to}')


def skipped_lines(skips, max_line_bytes) -> str:
  """'' or what is said of the lines skipped: too long, or not UTF-8."""
  said = [long_lines(skips, max_line_bytes, 'learn from them')] if skips.counts.get(
      'line_too_long') else []
  if count := skips.counts.get('invalid_utf8', 0):
    said.append(f'{count} line(s) not UTF-8 skipped (e.g. {skips.examples["invalid_utf8"][0]}): '
                're-encode them as UTF-8 to learn from them')
  return '; '.join(said)


def is_blank(raw: bytes) -> bool:
  """A line of whitespace only: Unicode's too (U+3000, U+00A0 ...), as in the original."""
  stripped = raw.strip()
  if not stripped:
    return True
  if stripped.isascii():
    return False
  try:
    return not stripped.decode('utf-8').strip()
  except UnicodeDecodeError:
    return False


def check_utf8(path, lines: int, invalid: int, first: str, fix: str):
  """Refuses a file (or a dataset's text) whose lines are mostly not UTF-8 (another
  encoding): more than a few and over 1% of its text `lines`; fewer are skipped (a stray
  byte). `first`: the first bad line's place; `fix`: what to do."""
  if invalid > FEW_INVALID_UTF8_LINES and invalid > MAX_INVALID_UTF8_FRACTION * lines:
    raise ValueError(
        f'{path}: {invalid} of its {lines} text lines are not UTF-8 (e.g. {first}; the limit '
        f'is {MAX_INVALID_UTF8_FRACTION:.0%}): {fix}')


def _raw_lines(f, max_line_bytes):
  """(line, too_long) of a binary file; a too-long line is consumed in bounded pieces."""
  limit = -1 if max_line_bytes is None else max_line_bytes + 1
  while True:
    line = f.readline(limit)
    if not line:
      return
    if limit < 0 or len(line) <= max_line_bytes or line.endswith(b'\n'):
      yield line, False
      continue
    while line and not line.endswith(b'\n'):
      line = f.readline(1 << 20)
    yield b'', True


def read_lines(path, max_line_bytes=None, skips=None, progress=None):
  """Yields the lines of a UTF-8 text file (gzip, bzip2 or xz compressed: compressed_text.py),
  stripped; lines over `max_line_bytes` (None: no limit) are skipped, counted in `skips`
  (text_input.Skips or Skips). With `skips`, lines that are not UTF-8 are skipped and counted
  too, and the file refused at its end where they are too many (check_utf8); without, the
  first is refused. `progress(n)`, where given, is told every few thousand lines how many of
  the file's stored bytes were read (its files.size)."""
  text_lines, invalid, first = 0, 0, None
  with compressed_text.open_input(path) as (f, stored):
    lines = _raw_lines(text_files.UniversalLines(f), max_line_bytes)  # A lone CR ends one too.
    # Decoded line by line, so that an error names the line with the bad bytes.
    for number in itertools.count(1):
      try:
        raw, too_long = next(lines)
      except StopIteration:
        break
      except compressed_text.DAMAGED_COMPRESSED as e:  # Cut short, or a name on another format.
        raise ValueError(f'{path}:{number}: cannot be read ({e}): is it a whole compressed file? '
                         'Compress it again, or leave it out') from None
      if progress and not number % _TELL_EVERY_LINES:
        progress(stored.tell())
      # Text lines as create_pretraining_data counts them for check_utf8: not blank, too long
      # or not.
      text_lines += too_long or not is_blank(raw)
      if too_long:
        skips.add('line_too_long', f'{path}:{number}')
        continue
      try:
        line = raw.decode('utf-8')
      except UnicodeDecodeError as e:
        if skips is None:
          raise ValueError(
              f'{path}:{number}: not UTF-8 ({e.reason} at byte {e.start} of the line: '
              f'{raw[e.start:e.start + 4]!r}): re-encode the file as UTF-8 '
              f'({text_files.reencode_hint(raw[:64], raw)})') from None
        skips.add('invalid_utf8', f'{path}:{number}')
        invalid, first = invalid + 1, first or (f'{path}:{number}', raw)
        continue
      yield line.strip()
  if invalid:
    check_utf8(path, text_lines, invalid, first[0], 're-encode the file as UTF-8 '
               f'({text_files.reencode_hint(first[1][:64], first[1])}), or leave it out')


def lines_of(files, max_line_bytes=None, skips=None, job='learn_vocab'):
  """(path, line) of every line of `files`, in order (read_lines'), with `job`'s progress line
  over their stored bytes (job_lines.Progress: none for a short read)."""
  sizes = [files_lib.size(path) for path in files]
  progress = job_lines.Progress(job, sum(sizes) / (1 << 20), 'MiB of input read', rate_unit='MiB')
  before = 0
  for path, size in zip(files, sizes, strict=True):
    def told(done, before=before):
      progress.update((before + done) / (1 << 20))
    for line in read_lines(path, max_line_bytes, skips, told):
      yield path, line
    told(size)
    before += size
