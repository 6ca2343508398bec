"""Pre-training text files -> tokenized documents: streaming, partitioned, bad input counted.

Two input formats, both with a blank (whitespace-only) line between documents (a line ends at
\n, \r\n or a lone \r, as in every tool: `text_files.split_lines`):
  lines: the original's, one sentence per line;
  text: one paragraph of running text per line, split into sentences by
        `corpora.split_sentences`.
Each file starts a new document (the original would run the last document of one file into the
first of the next when a file does not end with a blank line).

Documents are numbered in reading order across all files, and part `p` of `n` keeps documents
`p, p + n, p + 2n, ...`: every worker reads every file, but decodes, tokenizes and holds only
its own documents, so the work is balanced however the files are sized. Lines that cannot be
used are skipped and counted by reason, with the first few file:line examples: invalid UTF-8,
or longer than `max_line_bytes` (read in bounded pieces, never held whole); sentences without
a single token, or without a visible character (`has_text`: SentencePiece would make a '▁' of
a zero-width space), are counted as `no_tokens` (the examples are their text). A file whose
lines are mostly not UTF-8 is refused (writer.py), not skipped line by line. Whole
files are skipped when empty, binary (a NUL byte in the first 64 KiB) or compressed and cut
short or damaged within it.

gzip, bzip2 and xz files are read decompressed (compressed_text.py), known by their first bytes
(a gzip file named plain.txt too: its header's NULs would make it binary) or else by their name
(.gz, .bz2, .xz: one that is not such a file is skipped as damaged, not read as text).
"""

import collections
import contextlib
import functools
import itertools
import os
import stat
import unicodedata

import numpy as np

from bertjax import compressed_text
from bertjax import files as files_lib
from bertjax import paths as paths_lib
from bertjax import text_files
from bertjax.pretraining_data import corpora
from bertjax.records import file_set
from bertjax.text import corpus_lines
from bertjax.text import fast_tokenizer
from bertjax.text import vocab_files

INPUT_FORMATS = ('lines', 'text')
_EXAMPLES_PER_REASON = 5  # file:line examples kept per skip reason, for the report.
_READ_EVERY_LINES = 4096  # How often raw_documents says how far it read (a tell() each).

# A tokenized document: int32 token ids, and sentence boundaries into them: sentence j is
# tokens[bounds[j]:bounds[j + 1]], every sentence non-empty.
Document = collections.namedtuple('Document', ['tokens', 'bounds'])


class Skips:
  """Counts of skipped input by reason, with the first few places of each."""

  def __init__(self):
    self.counts = collections.Counter()
    self.examples = collections.defaultdict(list)
    # path -> [text lines read, of them not UTF-8]: a file mostly not UTF-8 is refused
    # (writer.py), a few bad lines are skipped. Not in the report; summed over the workers.
    self.file_lines = {}

  def add_file_lines(self, path, lines, invalid):
    tally = self.file_lines.setdefault(path, [0, 0])
    tally[0] += lines
    tally[1] += invalid

  def add(self, reason, place):
    """Counts one skip; `place` (file, file:line or text) is kept for the first few."""
    self.counts[reason] += 1
    if len(self.examples[reason]) < _EXAMPLES_PER_REASON:
      self.examples[reason].append(place)

  def merge(self, other):
    for reason, count in other['counts'].items():
      self.counts[reason] += count
      room = _EXAMPLES_PER_REASON - len(self.examples[reason])
      self.examples[reason].extend(other['examples'].get(reason, [])[:max(room, 0)])

  def described(self) -> str:
    """The skips in words: 'N reason (e.g. place), ...'."""
    return ', '.join(f'{count} {reason} (e.g. {self.examples[reason][0]})'
                     if self.examples.get(reason) else f'{count} {reason}'
                     for reason, count in sorted(self.counts.items()))

  def as_dict(self):
    return {'counts': dict(sorted(self.counts.items())),
            'examples': {k: v for k, v in sorted(self.examples.items()) if v}}


def usable_files(paths, skips, vocabs=()):
  """The paths worth reading; empty, binary and non-regular files, and vocabs (`vocabs`, the
  run's own, or any file that is one) are counted in `skips`."""
  usable = []
  for path in paths:
    if any(paths_lib.same_path(path, vocab) for vocab in vocabs):  # A glob over its folder.
      skips.add('vocab_file', f'{path} (the vocab, which the input glob matches: not read as '
                              'text)')
    elif not files_lib.isfile(path):
      if _is_stream(path):  # Read twice (its size, then a worker): a stream cannot be.
        skips.add('pipe_or_device', f'{path} (streams are not read: write the text to a file)')
      elif files_lib.isdir(path):
        skips.add('folder', f'{path} (pass the files in it: {path.rstrip("/")}/*)')
      else:
        skips.add('not_a_file', path)
    elif files_lib.size(path) == 0:
      skips.add('empty_file', path)
    else:
      with compressed_text.open_input(path) as (f, _):
        try:
          head = f.read(text_files.HEAD_BYTES)
        except compressed_text.DAMAGED_COMPRESSED as e:  # Cut short, or a name on another format.
          skips.add('damaged_compressed_file', f'{path} ({e})')
          continue
        # A shard set's report (small; its tool named in its first lines), read whole only
        # then: a corpus of large .json files is not read twice.
        if (path.endswith('.json') and b'create_pretraining_data' in head[:4096]
            and file_set.report_at(path) is not None):
          skips.add('data_report', f'{path} (the report of a create_pretraining_data set, not '
                                   'text: narrow --input_file to the text files)')
          continue
        if vocab_files.is_vocab_head(head):  # Another vocab beside the text (a rerun's).
          skips.add('vocab_file', f'{path} (a vocab, not text: narrow --input_file to the text '
                                  'files)')
          continue
        if compressed_text.not_read(head):
          skips.add('binary_file', f'{path} ({compressed_text.not_read(head)}, which is not '
                                   'read: decompress it, or compress it with gzip, bzip2 or xz)')
          continue
        if b'\x00' in head:
          first = head.index(0)
          if wide := text_files.wide_encoding(head):
            why = f'{wide} text? re-encode it as UTF-8: {text_files.reencode_hint(head)}'
          elif text_files.text_but_nuls(head):
            why = f"NUL bytes in UTF-8 text, the first at byte {first}: remove them (tr -d '\\000')"
          else:
            why = f'a NUL byte at byte {first}, as binary files have'
          skips.add('binary_file', f'{path} ({why})')
          continue
      usable.append(path)
  return usable


def _is_stream(path):
  """True for a local pipe, socket or device (`<(zcat x)`, /dev/stdin)."""
  if files_lib.is_remote(path):
    return False
  try:
    mode = os.stat(path).st_mode  # local: a bucket holds no streams
  except OSError:
    return False
  return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def _lines(f, max_line_bytes):
  """(line, too_long) of a binary file; a too-long line is consumed in bounded pieces."""
  while True:
    line = f.readline(max_line_bytes + 1)
    if not line:
      return
    if len(line) <= max_line_bytes or line.endswith(b'\n'):
      yield line, False
      continue
    while line and not line.endswith(b'\n'):
      line = f.readline(1 << 20)
    yield b'', True


def sentences_of(text: str, input_format: str) -> list[str]:
  """A stripped, non-empty line's sentences: the line itself ('lines'), or split ('text')."""
  return [text] if input_format == 'lines' else corpora.split_sentences(text)


def raw_documents(paths, input_format, max_line_bytes, skips, where, part=0, num_parts=1,
                  read=None, sizes=()):
  """Yields this part's documents as lists of sentence strings; `where` tracks file:line.
  read(n): told every few thousand lines the bytes of the files read so far (compressed where
  a file is: what files.size gives), for the command's progress line. `sizes`: each file's
  bytes when the run checked it; a file read to another size changed meanwhile (refused)."""
  if input_format not in INPUT_FORMATS:
    raise ValueError(f'input_format={input_format!r}: pass one of {INPUT_FORMATS}')
  index = 0  # Documents started so far, over all files: the partition key.
  before = 0  # Bytes of the files read whole.
  for i, path in enumerate(paths):
    where['path'] = path
    sentences, started, lines, invalid = [], False, 0, 0
    with _opened(path) as (f, stored):
      # Held: collected, its TextIOWrapper would close `f` before the tell() at the end.
      universal = text_files.UniversalLines(f)
      for line_number, (raw, too_long) in enumerate(_lines(universal, max_line_bytes), 1):
        where['line'] = line_number
        if read is not None and line_number % _READ_EVERY_LINES == 0:
          read(before + stored.tell())
        if not too_long and corpus_lines.is_blank(raw):
          if started:
            if sentences:
              yield sentences
            sentences, started = [], False
          continue
        if not started:
          started, mine = True, index % num_parts == part
          index += 1
        if not mine:
          continue
        lines += 1
        if too_long:
          skips.add('line_too_long', f'{path}:{line_number}')
          continue
        try:
          text = raw.decode('utf-8').strip()
        except UnicodeDecodeError:
          skips.add('invalid_utf8', f'{path}:{line_number}')
          invalid += 1
          continue
        sentences.extend(sentences_of(text, input_format))
      if sizes and stored.tell() != sizes[i]:
        raise ValueError(f'{path} changed while it was read ({sizes[i]} bytes when the run '
                         f'started, {stored.tell()} now): rerun once it is complete, or leave '
                         'it out of --input_file')
      _check_still_there(path, stored)
      before += stored.tell()  # At its end: the file's size.
      if read is not None:
        read(before)
    skips.add_file_lines(path, lines, invalid)
    if sentences:
      yield sentences


def _check_still_there(path, stored):
  """Refuses a local file read whole from a copy no longer at its path (removed, or replaced
  by a move: the data would name a file that holds other text now) or written meanwhile."""
  if files_lib.is_remote(path):
    return
  try:
    read = os.fstat(stored.fileno())  # local: the file as opened
  except (AttributeError, OSError, ValueError):
    return  # Not a file of this machine (a stream refused earlier).
  try:
    now = os.stat(path)  # local: what the path names now
  except FileNotFoundError:
    raise ValueError(f'{path} was removed while it was read: rerun once the input is in place, '
                     'or leave it out of --input_file') from None
  if (now.st_dev, now.st_ino, now.st_mtime_ns) != (read.st_dev, read.st_ino, read.st_mtime_ns):
    raise ValueError(f'{path} changed while it was read (replaced, or written to): rerun once it '
                     'is complete, or leave it out of --input_file')


@contextlib.contextmanager
def _opened(path):
  """compressed_text.open_input, its errors said with what to do: a file gone since the run
  checked it, or a compressed one cut short (read to its end only now)."""
  try:
    with compressed_text.open_input(path) as (f, stored):
      try:
        yield f, stored
      except compressed_text.DAMAGED_COMPRESSED as e:
        if f is stored:  # A plain file's read error (I/O, network) is said as it is.
          raise
        raise ValueError(f'{path} is damaged ({e}): fetch or compress it again, or leave it '
                         'out of --input_file') from None
  except FileNotFoundError:
    raise FileNotFoundError(f'{path} was deleted or moved while the run read its input: put it '
                            'back and rerun, or leave it out of --input_file') from None


class Encoder:
  """Batched text -> token ids, with the ids the instances need (specials, word pieces)."""

  def __init__(self, vocab_file=None, spm_model_file=None, do_lower_case=True, fast=True):
    self._fast = None
    if spm_model_file or not fast:
      # The reference WordPiece path needs no TensorFlow; SentencePiece has no fast path here.
      self.tokenizer = vocab_files.from_files(vocab_file, spm_model_file,
                                              do_lower_case=do_lower_case, never_split=())
      vocab = self.tokenizer.vocab
      # SentencePiece marks the start of a word, WordPiece the continuation.
      continuation = vocab_files.continuation_flags(vocab, bool(spm_model_file))
    else:
      # never_split=(): '[MASK]' written in the text is text, as in the original tokenizer.
      self._fast = fast_tokenizer.FastTokenizer(vocab_file, do_lower_case, never_split=())
      self.tokenizer = self._fast.reference
      tf = fast_tokenizer.import_tf()[0]

      def encode(texts):
        ids = self._fast.tf_tokenize(texts)
        return ids.flat_values, ids.row_splits, self._fast.tf_needs_reference(texts)

      self._tf = tf
      self._encode_fn = tf.function(encode, input_signature=[tf.TensorSpec([None], tf.string)],
                                    autograph=False)
      vocab = self.tokenizer.vocab
      continuation = vocab_files.continuation_flags(vocab, False)
    missing = [t for t in ('[CLS]', '[SEP]', '[MASK]') if t not in vocab]
    if missing:
      raise ValueError(f'the vocab has no {missing}: pre-training instances need [CLS], [SEP] '
                       'and [MASK]; pass the vocab of a BERT-style model')
    self.cls_id, self.sep_id, self.mask_id = (vocab[t] for t in ('[CLS]', '[SEP]', '[MASK]'))
    self.vocab_size = len(vocab)
    # The tokenizer's own: a SentencePiece model may call it otherwise (--unk_piece).
    self.unk_id = vocab.get(self.tokenizer.unk_token)
    self.continuation = continuation

  def encode_batch(self, texts):
    """Ids of every text: (flat int32 ids, row splits [len(texts) + 1])."""
    if self._fast is None:
      rows = [self.tokenizer.encode(t) for t in texts]
      lengths = np.fromiter(map(len, rows), np.int64, len(rows))
      flat = np.array(list(itertools.chain.from_iterable(rows)), np.int32)
      return flat, np.concatenate([[0], np.cumsum(lengths)])
    flat, splits, needs = (x.numpy() for x in self._encode_fn(self._tf.constant(texts)))
    flat = flat.astype(np.int32)
    routed = np.flatnonzero(needs)
    if routed.size:  # Rare lines the fast path cannot do exactly: rebuild with the reference.
      rows = np.split(flat, splits[1:-1])
      for i in routed.tolist():
        rows[i] = np.array(self.tokenizer.encode(texts[i]), np.int32)
      lengths = np.array([r.size for r in rows], np.int64)
      flat = np.concatenate(rows) if rows else flat
      splits = np.concatenate([[0], np.cumsum(lengths)])
    return flat, splits


def cached_encoder(vocab_file, spm_model_file, do_lower_case, fast=True):
  """One Encoder per process and vocab: building one takes a while (TF, the fast tokenizer).
  Keyed by the vocab's content, not only its path: a vocab learned again at the same path in
  the same process (a notebook) gets a new Encoder, never the old ids."""
  digest = (files_lib.sha256(vocab_file or spm_model_file) if (vocab_file or spm_model_file)
            else '')
  return _encoder(vocab_file, spm_model_file, do_lower_case, fast, digest)


@functools.lru_cache(maxsize=4)
def _encoder(vocab_file, spm_model_file, do_lower_case, fast, digest):
  del digest  # The cache key's.
  return Encoder(vocab_file or None, spm_model_file or None, do_lower_case, fast)


def has_text(text: str) -> bool:
  """Whether `text` holds a character other than spaces (Zs, tab, line ends), control and
  format characters (Cc, Cf: zero-width spaces and joiners, a byte-order mark), NUL and U+FFFD:
  what BERT's text cleaning removes (tokenizer.BasicTokenizer), so that a sentence without one
  has no WordPiece tokens."""
  for char in text:  # Normal text returns at its first character.
    if char in ' \t\n\r\x00\ufffd':
      continue
    if unicodedata.category(char) not in ('Zs', 'Cc', 'Cf'):  # BERT's whitespace: Zs.
      return True
  return False


def tokenized_documents(raw_docs, encoder, skips, where, batch_sentences=16384):
  """Documents of token ids from lists of sentences, tokenized in batches of sentences."""

  def flush(batch):
    texts = [s for doc in batch for s in doc]
    # A sentence of only invisible characters (U+200B, U+FEFF, controls) is no sentence: the
    # WordPiece path's text cleaning gives it no tokens, SentencePiece would give it '▁'.
    flat, splits = encoder.encode_batch([t if has_text(t) else '' for t in texts])
    for i in np.flatnonzero(np.diff(splits) == 0).tolist():
      skips.add('no_tokens', repr(texts[i][:40]))
    first = 0
    for doc in batch:
      doc_splits = splits[first:first + len(doc) + 1]
      first += len(doc)
      # Dropping repeated boundaries drops the sentences that have no tokens.
      bounds = np.unique(doc_splits - doc_splits[0])
      if bounds.size > 1:
        yield Document(flat[doc_splits[0]:doc_splits[-1]], bounds.tolist())

  batch, count = [], 0
  for doc in raw_docs:
    batch.append(doc)
    count += len(doc)
    if count >= batch_sentences:
      yield from flush(batch)
      batch, count = [], 0
  if batch:
    yield from flush(batch)

