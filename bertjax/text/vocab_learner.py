"""Learns a BERT WordPiece vocab.txt or an ALBERT-style SentencePiece model from text files.

WordPiece: words are counted after bertjax's exact BERT BasicTokenizer (the same cleaning,
punctuation splitting and lower-casing with accent stripping that `tokenizer.FullTokenizer`
applies), and HF `tokenizers`' WordPieceTrainer learns the pieces from those counts. Every
character of the corpus (up to `max_alphabet`, most frequent first) is in the vocab as a word
start, and as a `##` piece wherever it occurs inside a word, so WordPiece can cover every word
of the training text and its [UNK] rate there is 0 (only words over 200 characters, which BERT
always maps to [UNK], and characters past `max_alphabet` are not covered).

SentencePiece: `sentencepiece.SentencePieceTrainer` on text normalised as
`sentencepiece_tokenizer.SentencePieceTokenizer` normalises it, with ALBERT's ids: <pad> 0,
<unk> 1, then the control symbols [CLS] [SEP] [MASK].

Input files: one sentence per line and a blank line between documents (create_pretraining_data's
format), or any UTF-8 text; `.gz` files are read decompressed.
"""

import collections
import io
import itertools
import types
import unicodedata

from absl import logging

from bertjax import compressed_text
from bertjax import files as files_lib
from bertjax import paths
from bertjax.text import sentencepiece_tokenizer
from bertjax.text import tokenizer

# [PAD] must be id 0 (padding), the rest sit right after it as in HF's BertWordPieceTokenizer.
SPECIAL_TOKENS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
# ALBERT's 30k-clean.model: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4.
SPM_CONTROL_SYMBOLS = ('[CLS]', '[SEP]', '[MASK]')
SUBWORD_PREFIX = '##'


def input_files(patterns):
  """Expands comma-separated files and globs (a str or a list) into a list of files."""
  if not isinstance(patterns, str):
    patterns = ','.join(patterns)
  return paths.expand_input_patterns(patterns)


def _check_not_an_input(output_file, inputs):
  """Fails before the corpus is read when the output would overwrite a file of it."""
  if any(paths.same_path(output_file, p) for p in inputs):
    raise ValueError(f'--output_file={output_file} is one of the --input_file files: writing '
                     'it would lose that input; name another file')


def read_lines(path):
  """Yields the lines of a UTF-8 text file (gzip, bzip2 or xz compressed: compressed_text.py),
  stripped."""
  with compressed_text.open_input(path) as (f, _):
    lines = iter(paths.UniversalLines(f))  # A lone CR ends a line too, as in every tool.
    # Decoded line by line, so that an error names the line with the bad bytes.
    for number in itertools.count(1):
      try:
        raw = next(lines)
      except StopIteration:
        return
      except compressed_text.DAMAGED_COMPRESSED as e:  # Cut short, or a name on another format.
        raise ValueError(f'{path}:{number}: cannot be read ({e}): is it a whole compressed file? '
                         'Compress it again, or leave it out') from None
      try:
        line = raw.decode('utf-8')
      except UnicodeDecodeError as e:
        raise ValueError(
            f'{path}:{number}: not UTF-8 ({e.reason} at byte {e.start} of the line: '
            f'{raw[e.start:e.start + 4]!r}): re-encode the file as UTF-8 '
            f'({paths.reencode_hint(raw[:64])})') from None
      yield line.strip()


def count_words(files, do_lower_case=True):
  """Counts the words BERT's BasicTokenizer makes of every line of `files` (a Counter)."""
  # never_split=() so that a literal '[MASK]' in the text counts as its characters.
  basic = tokenizer.BasicTokenizer(do_lower_case, never_split=())
  # Whitespace tokens repeat a lot, so each distinct one is split (the slow part) only once.
  raw = collections.Counter()
  for path in files:
    for line in read_lines(path):
      if line:
        raw.update(basic.clean(line).split())
  words = collections.Counter()
  for token, count in raw.items():
    for word in basic.split_token(token):
      words[word] += count
  return words


def _alphabet(word_counts, max_alphabet):
  """The kept characters (most frequent first, ties by code point) and those seen mid-word."""
  char_counts, inner = collections.Counter(), set()
  for word, count in word_counts.items():
    for char in word:
      char_counts[char] += count
    inner.update(word[1:])
  ranked = sorted(char_counts, key=lambda c: (-char_counts[c], c))
  kept = sorted(ranked[:max_alphabet])
  return kept, [c for c in kept if c in inner]


def _repeated_words(word_counts, chunk_words=4096):
  """Text in which each word occurs its count times: how HF's trainer is fed counted words."""
  for word in sorted(word_counts):
    count = word_counts[word]
    while count > 0:
      n = min(count, chunk_words)
      yield ' '.join([word] * n)
      count -= n


def learn_wordpiece_vocab(word_counts, vocab_size, num_unused=0, min_frequency=2,
                          max_alphabet=1000,
                          max_word_chars=tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD):
  """A WordPiece vocab (list of exactly `vocab_size` tokens) learned from word counts.

  Order: [PAD] [UNK] [CLS] [SEP] [MASK], `num_unused` [unusedN], the characters, their `##`
  forms, then the learned pieces in the order the trainer made them (most frequent first).
  If the corpus runs out of pieces seen `min_frequency` times first, the vocab is filled up with
  more [unusedN] so that its size is still `vocab_size`.
  """
  # Imported here: only vocab learning needs it, not readers of this module's read_lines.
  import tokenizers  # pylint: disable=g-import-not-at-top
  words = collections.Counter(
      {w: c for w, c in word_counts.items() if c > 0 and len(w) <= max_word_chars})
  if not words:
    raise ValueError('the input has no words to learn a vocab from: are the files empty?')
  kept, inner = _alphabet(words, max_alphabet)
  reserved = len(SPECIAL_TOKENS) + num_unused
  needed = reserved + len(kept) + len(inner)
  if vocab_size < needed:
    raise ValueError(
        f'vocab_size={vocab_size} cannot hold the {len(SPECIAL_TOKENS)} special tokens, '
        f'{num_unused} [unusedN], the {len(kept)} characters of the corpus and their '
        f'{len(inner)} ##-forms ({needed} entries): raise vocab_size, or lower max_alphabet')
  # The ##-forms are passed as special tokens so that their ids are fixed up front: the trainer
  # otherwise numbers them in hash-map order, which breaks ties between equally frequent merges
  # differently on every run (the vocab would change from run to run).
  model = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token='[UNK]'))
  model.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  trainer = tokenizers.trainers.WordPieceTrainer(
      vocab_size=vocab_size - num_unused,
      min_frequency=min_frequency,
      show_progress=False,
      special_tokens=list(SPECIAL_TOKENS) + [SUBWORD_PREFIX + c for c in inner],
      # Passing exactly the kept characters with a limit of their number makes the trainer keep
      # those (it ranks the initial alphabet first) and drop the rest, without ties.
      initial_alphabet=kept,
      limit_alphabet=len(kept),
      continuing_subword_prefix=SUBWORD_PREFIX)
  model.train_from_iterator(_repeated_words(words), trainer)
  learned = [t for t, _ in sorted(model.get_vocab().items(), key=lambda item: item[1])]
  characters = kept + [SUBWORD_PREFIX + c for c in inner]
  missing = sorted(set(characters) - set(learned))
  if missing or len(learned) > vocab_size - num_unused:
    raise RuntimeError(f'the WordPiece trainer returned {len(learned)} tokens for vocab_size='
                       f'{vocab_size - num_unused}, missing {missing[:10]}: a tokenizers bug?')
  placed = set(SPECIAL_TOKENS).union(characters)
  pieces = [t for t in learned if t not in placed]
  vocab = (list(SPECIAL_TOKENS) + [f'[unused{i}]' for i in range(num_unused)] + characters
           + pieces)
  filler = vocab_size - len(vocab)
  if filler:
    logging.warning('only %d pieces occur %d+ times; filling the vocab with %d more [unusedN]',
                    len(pieces), min_frequency, filler)
  vocab += [f'[unused{i}]' for i in range(num_unused, num_unused + filler)]
  return vocab


def write_vocab(vocab, path):
  """Writes one token per line, UTF-8, '\\n' line ends (a local path or a URL, whole or not at
  all)."""
  files_lib.write_atomically(path, ''.join(token + '\n' for token in vocab))


def learn_wordpiece(patterns, output_file, vocab_size, do_lower_case=True, **kwargs):
  """Learns a WordPiece vocab from files/globs and writes it to `output_file`; returns it."""
  files = input_files(patterns)
  _check_not_an_input(output_file, files)
  words = count_words(files, do_lower_case)
  logging.info('%d files: %d words, %d distinct', len(files), sum(words.values()), len(words))
  vocab = learn_wordpiece_vocab(words, vocab_size, **kwargs)
  write_vocab(vocab, output_file)
  return vocab


def _spm_sentences(files, do_lower_case):
  """Non-empty lines, normalised as SentencePieceTokenizer does before it encodes."""
  # The tokenizer's own preprocess_text, so training and tokenization normalise alike; it only
  # reads these two attributes, and a tokenizer cannot be made before its model exists.
  options = types.SimpleNamespace(do_lower_case=do_lower_case, keep_accents=False)
  for path in files:
    for line in read_lines(path):
      if line:
        yield sentencepiece_tokenizer.SentencePieceTokenizer.preprocess_text(options, line)


# Characters that show nothing: spaces (U+00A0 too), controls, format characters (U+200B, U+FEFF).
_INVISIBLE = frozenset(('Zs', 'Zl', 'Zp', 'Cc', 'Cf'))


def _visible(text: str) -> bool:
  return any(unicodedata.category(c) not in _INVISIBLE for c in text)


def _until_visible(sentences) -> list:
  """The sentences taken from the iterator up to and including the first with a visible
  character (all of them when none has one: the input has no text)."""
  taken = []
  for sentence in sentences:
    taken.append(sentence)
    if _visible(sentence):
      break
  return taken


def check_output_name(model: str, output_file: str):
  """A binary SentencePiece model must not be named like a text vocab, nor the reverse; and
  a folder is no file name (in a bucket the vocab would be put as an object of the folder's
  name, beside its files), checked before the corpus is read."""
  files_lib.check_bucket(output_file)
  if output_file.endswith('/') or files_lib.isdir(output_file):
    example = files_lib.join(output_file.rstrip('/'),
                             'spm.model' if model == 'sentencepiece' else 'vocab.txt')
    raise ValueError(f'--output_file={output_file} is a folder: name the file to write, e.g. '
                     f'--output_file={example}')
  if model == 'sentencepiece' and not output_file.endswith('.model'):
    raise ValueError(f'--model=sentencepiece writes a binary SentencePiece model: name it '
                     f'.model (e.g. --output_file={output_file.rsplit(".", 1)[0]}.model), '
                     'which --spm_model_file= then takes')
  if model == 'wordpiece' and output_file.endswith('.model'):
    raise ValueError('--model=wordpiece writes a text vocab: name it vocab.txt (a .model is a '
                     'SentencePiece model)')


def learn_sentencepiece(patterns, output_file, vocab_size, do_lower_case=True,
                        model_type='unigram', character_coverage=1.0, input_sentence_size=0,
                        num_threads=1, seed=12345):
  """Learns an ALBERT-style SentencePiece model from files/globs and writes the .model file."""
  import sentencepiece  # pylint: disable=g-import-not-at-top
  files = input_files(patterns)
  _check_not_an_input(output_file, files)
  sentences = _spm_sentences(files, do_lower_case)
  leading = _until_visible(sentences)
  if not leading or not _visible(leading[-1]):
    raise ValueError(f'the input files {files} have no text to learn a SentencePiece model from')
  # Sampling (input_sentence_size > 0) and seeding both go through this generator.
  sentencepiece.set_random_generator_seed(seed)
  model = io.BytesIO()
  try:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=itertools.chain(leading, sentences),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        pad_piece='<pad>', unk_piece='<unk>',
        control_symbols=','.join(SPM_CONTROL_SYMBOLS),
        character_coverage=character_coverage,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        num_threads=num_threads,
        minloglevel=2)
  except RuntimeError as e:
    hint = ('vocab_size is below the characters the corpus needs (each is a piece): raise '
            'it, or lower character_coverage' if 'required_chars' in str(e) else
            'a "Vocabulary size too high" means the corpus is too small for vocab_size: lower '
            'it')
    raise ValueError(f'SentencePiece training failed: {e}; {hint}') from None
  files_lib.write_atomically(output_file, model.getvalue())
