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
format), or any UTF-8 text; `.gz` files are read decompressed. Lines longer than
`max_line_bytes` are skipped and counted, as create_pretraining_data skips them (SentencePiece
itself drops every sentence longer than its max_sentence_length without a word).
"""

import collections
import io
import itertools
import random
import types
import unicodedata

from absl import logging

from bertjax import files as files_lib
from bertjax import paths
from bertjax.text import corpus_lines
from bertjax.text import sentencepiece_tokenizer
from bertjax.text import tokenizer
from bertjax.text import vocab_casing
from bertjax.text import vocab_coverage
from bertjax.text import vocab_files

# [PAD] must be id 0 (padding), the rest sit right after it as in HF's BertWordPieceTokenizer.
SPECIAL_TOKENS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
# ALBERT's 30k-clean.model: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4.
SPM_CONTROL_SYMBOLS = ('[CLS]', '[SEP]', '[MASK]')
SUBWORD_PREFIX = '##'
# The largest vocab learned: a bigger one is a typo (the WordPiece trainer aborts the process
# allocating it), not a vocab any model embeds.
MAX_VOCAB_SIZE = 1_000_000
MAX_LINE_BYTES = corpus_lines.MAX_LINE_BYTES
# SentencePiece's longest sentence (its trainer_interface.cc).
SPM_MAX_LINE_BYTES = 1 << 30


def _check_not_an_input(output_file, inputs):
  """Fails before the corpus is read when the output would overwrite a file of it (a vocab
  which the glob matches is no text of it: resolve_inputs drops it)."""
  if any(paths.same_path(output_file, p) for p in inputs):
    raise ValueError(f'--output_file={output_file} is one of the --input_file files: writing '
                     'it would lose that input; name another file')


def check_new_output(output_file, overwrite: bool):
  """Fails before the corpus is read when `output_file` exists and `overwrite` is not given."""
  paths.refuse_existing(output_file, overwrite, f'--output_file={output_file}')


def resolve_inputs(patterns, output_file, overwrite: bool = True) -> list:
  """The files of `patterns`, refused where the output would overwrite one of them or (without
  `overwrite`) an existing file."""
  files = corpus_lines.input_files(patterns)
  vocabs = [path for path in files if vocab_files.is_vocab(path)]
  for path in vocabs:  # A rerun's own output, or another vocab beside the text.
    logging.warning('%s is a vocab, not text: it is not read', path)
  files = [path for path in files if path not in vocabs]
  _check_not_an_input(output_file, files)
  check_new_output(output_file, overwrite)
  return files


def count_words(files, do_lower_case=True, max_line_bytes=None, skips=None):
  """Counts the words BERT's BasicTokenizer makes of every line of `files` (a Counter); lines
  over `max_line_bytes` are skipped, counted in `skips`."""
  # never_split=() so that a literal '[MASK]' in the text counts as its characters.
  basic = tokenizer.BasicTokenizer(do_lower_case, never_split=())
  # Whitespace tokens repeat a lot, so each distinct one is split (the slow part) only once.
  raw = collections.Counter()
  for _, line in corpus_lines.lines_of(files, max_line_bytes, skips):
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
  more [unusedN] so that its size is still `vocab_size`; refused where that filler would be more
  than half the vocab and `vocab_size` is above the smallest multiple of 128 that holds the rest.
  """
  # Imported here: only vocab learning needs it, not readers of this module's read_lines.
  import tokenizers  # pylint: disable=g-import-not-at-top
  check_vocab_size(vocab_size)
  words = collections.Counter(
      {w: c for w, c in word_counts.items() if c > 0 and len(w) <= max_word_chars})
  if not words:
    raise ValueError('the input has no words to learn a vocab from: its files are empty, or '
                     'their lines blank')
  kept, inner = _alphabet(words, max_alphabet)
  vocab_coverage.check_alphabet(words, kept, max_alphabet)
  reserved = len(SPECIAL_TOKENS) + num_unused
  needed = reserved + len(kept) + len(inner)
  if vocab_size < needed:
    raise ValueError(
        f'vocab_size={vocab_size} cannot hold the {len(SPECIAL_TOKENS)} special tokens, '
        f'{num_unused} [unusedN], the {len(kept)} characters of the corpus and their '
        f'{len(inner)} ##-forms ({needed} entries): raise vocab_size'
        + (', or lower num_unused' if num_unused > len(kept) + len(inner) else
           ', or lower max_alphabet'))
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
  _check_filler(vocab_size, len(vocab), len(pieces), min_frequency)
  if filler:
    logging.warning('only %d pieces occur %d+ times; filling the vocab with %d more [unusedN]',
                    len(pieces), min_frequency, filler)
  vocab += [f'[unused{i}]' for i in range(num_unused, num_unused + filler)]
  return vocab


def check_vocab_size(vocab_size):
  if vocab_size > MAX_VOCAB_SIZE:
    raise ValueError(f'--vocab_size={vocab_size}: at most {MAX_VOCAB_SIZE:,} (BERT: 30522, '
                     'ALBERT: 30000)')


def _check_filler(vocab_size, entries, pieces, min_frequency):
  """Refuses a vocab that would be mostly [unusedN] filler: a vocab_size far above what the
  text gives (each filler row is an embedding never trained). Up to the first multiple of 128
  that holds the text's entries is kept, filled: a smaller size is not TPU-friendly."""
  fits = -(-entries // 128) * 128
  if vocab_size - entries <= vocab_size / 2 or vocab_size <= fits:
    return
  raise ValueError(
      f'the text gives {entries} vocab entries ({pieces} pieces seen {min_frequency}+ times '
      f'besides the special tokens and characters): vocab_size={vocab_size} would be '
      f'{vocab_size - entries} [unusedN] filler, more than half; pass --vocab_size={fits}'
      + (f' (at most {2 * entries})' if 2 * entries > fits else '')
      + ', more text, or a lower --min_frequency')


def write_vocab(vocab, path):
  """Writes one token per line, UTF-8, '\\n' line ends (a local path or a URL, whole or not at
  all)."""
  files_lib.write_atomically(path, ''.join(token + '\n' for token in vocab))


def learn_wordpiece(patterns, output_file, vocab_size, do_lower_case=True, *, files=None,
                    overwrite=True, max_line_bytes=MAX_LINE_BYTES, skips=None, **kwargs):
  """Learns a WordPiece vocab from files/globs and writes it to `output_file`; returns it.

  files: the inputs already expanded and checked (learn_vocab's), else those of `patterns`
  (resolve_inputs). overwrite: False refuses an existing `output_file`. Lines over
  `max_line_bytes` are skipped, counted in `skips` (text_input.Skips) and said."""
  check_vocab_size(vocab_size)
  files = resolve_inputs(patterns, output_file, overwrite) if files is None else files
  skips = corpus_lines.Skips() if skips is None else skips
  words = count_words(files, do_lower_case, max_line_bytes, skips)
  logging.info('%d file%s: %d words, %d distinct', len(files), 's' * (len(files) != 1),
               sum(words.values()), len(words))
  skipped = corpus_lines.skipped_lines(skips, max_line_bytes)
  if not words and skipped:
    raise ValueError(f'the input has no words to learn a vocab from: {skipped}')
  try:
    vocab = learn_wordpiece_vocab(words, vocab_size, **kwargs)
  except ValueError as e:  # Too little text: the lines skipped are part of why.
    raise ValueError(f'{e}; {skipped}' if skipped else str(e)) from None
  _check_casing_kept(vocab, do_lower_case)
  if skipped:
    logging.warning('%s', skipped)
  write_vocab(vocab, output_file)
  return vocab


def _check_casing_kept(vocab, do_lower_case: bool):
  """Refuses, before it is written, a vocab learned with do_lower_case=False that reads as
  uncased (text without capitals): every tool that reads it with --nodo_lower_case would
  refuse it (vocab_casing.validate_case_matches_vocab)."""
  if do_lower_case:
    return
  try:
    vocab_casing.validate_case_matches_vocab(vocab, False)
  except ValueError:
    raise ValueError('--nodo_lower_case, but the text has no upper-case letters, so the vocab '
                     'would read as uncased and the tools that use it with --nodo_lower_case '
                     'would refuse it: pass --do_lower_case (which also strips accents), or '
                     'learn from text that keeps its capitals') from None


def _spm_sentences(files, do_lower_case, max_line_bytes=None, skips=None):
  """Non-empty lines, normalised as SentencePieceTokenizer does before it encodes; lines over
  `max_line_bytes` (as read, or once normalised) skipped, counted in `skips`."""
  # The tokenizer's own preprocess_text, so training and tokenization normalise alike; it only
  # reads these two attributes, and a tokenizer cannot be made before its model exists.
  options = types.SimpleNamespace(do_lower_case=do_lower_case, keep_accents=False)
  for path, line in corpus_lines.lines_of(files, max_line_bytes, skips):
    if not line:
      continue
    sentence = sentencepiece_tokenizer.SentencePieceTokenizer.preprocess_text(options, line)
    # SentencePiece would drop it without a word; NFKD may lengthen a line.
    if max_line_bytes is not None and 4 * len(sentence) > max_line_bytes:
      size = len(sentence.encode('utf-8'))
      if size > max_line_bytes:
        skips.add('line_too_long', f'{path}: a line of {size} bytes once normalised')
        continue
    yield sentence


def sample_lines(lines, size: int, seed: int) -> list:
  """`size` of the lines (all when fewer), each equally likely, in their order: the same lines
  and seed give the same sample (SentencePiece's own sampling differs on every run)."""
  rng = random.Random(seed)
  kept = []
  for i, line in enumerate(lines):  # Reservoir sampling: one pass, `size` lines held.
    if i < size:
      kept.append((i, line))
    elif (j := rng.randrange(i + 1)) < size:
      kept[j] = (i, line)
  return [line for _, line in sorted(kept, key=lambda pair: pair[0])]


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
  paths.refuse_dash(output_file, '--output_file', 'file', 'a vocab is not written to standard '
                    'output', 'vocab.txt')
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


def check_not_json(output_file: str):
  """A vocab is not written over a report or a config (checked after paths.check_output_file,
  which names a run's or a model's file as such)."""
  if output_file.lower().endswith('.json'):
    raise ValueError(f'--output_file={output_file}: a .json is a report or a config, not a '
                     'vocab: name it vocab.txt')


def check_sentencepiece_settings(character_coverage=1.0, input_sentence_size=0, num_threads=1,
                                 max_line_bytes=MAX_LINE_BYTES):
  """Refuses, before any reading, what SentencePiece's trainer would refuse only after it (its
  trainer_interface.cc's bounds)."""
  if not 0.98 <= character_coverage <= 1:  # nan too.
    raise ValueError(f'--character_coverage={character_coverage}: SentencePiece takes 0.98 to 1 '
                     '(ALBERT: 0.99995; ~0.9995 for CJK)')
  if input_sentence_size < 0 or 0 < input_sentence_size <= 100:
    raise ValueError(f'--input_sentence_size={input_sentence_size}: pass 0 (every line) or 101 '
                     'or more lines to sample, as SentencePiece takes')
  if not 1 <= num_threads <= 1024:
    raise ValueError(f'--num_threads={num_threads}: SentencePiece takes 1 to 1024')
  if not 1 <= max_line_bytes <= SPM_MAX_LINE_BYTES:
    raise ValueError(f'--max_line_bytes={max_line_bytes}: SentencePiece takes lines of 1 to '
                     f'{SPM_MAX_LINE_BYTES} bytes')


def _spm_failed(error: RuntimeError) -> str:
  """SentencePiece's error, with what to do where it is known."""
  if 'required_chars' in str(error):
    return (f'SentencePiece training failed: {error}; vocab_size is below the characters the '
            'corpus needs (each is a piece): raise it, or lower character_coverage')
  if 'Vocabulary size too high' in str(error):
    return (f'SentencePiece training failed: {error}; the corpus is too small for vocab_size: '
            'lower it')
  return f'SentencePiece training failed: {error}'


def _counted(lines, read: list):
  """`lines`, counted in `read` ([count]) as they are read."""
  read.append(0)
  for line in lines:
    read[0] += 1
    yield line


def _then_training(sentences, vocab_size: int, failed: list, read=()):
  """The lines, then a line saying the training that follows them, which says nothing itself:
  the progress line counts the reading (console pass of 2026-12-02: 81.6%, ETA 0:00:01, then
  25 s of silence). An error of the reading (a file mostly not UTF-8) is kept in `failed`:
  SentencePiece's trainer gives it back wrapped in its own. `read`: [the lines read] where
  `sentences` is a sample of them."""
  count = 0
  try:
    for sentence in sentences:
      count += 1
      yield sentence
  except ValueError as e:
    failed.append(e)
    raise
  logging.info('learn_vocab: %s; SentencePiece now learns %d pieces from them (its trainer '
               'shows no progress)', f'{count} lines sampled of the {read[0]} read' if read else
               f'{count} lines read', vocab_size)


def learn_sentencepiece(patterns, output_file, vocab_size, do_lower_case=True,
                        model_type='unigram', character_coverage=1.0, input_sentence_size=0,
                        num_threads=1, seed=12345, *, files=None, overwrite=True,
                        max_line_bytes=MAX_LINE_BYTES, skips=None):
  """Learns an ALBERT-style SentencePiece model from files/globs and writes the .model file.

  input_sentence_size: train on that many lines sampled with `seed` (0: all). files,
  overwrite, max_line_bytes, skips: as learn_wordpiece's."""
  import sentencepiece  # pylint: disable=g-import-not-at-top
  check_vocab_size(vocab_size)
  check_sentencepiece_settings(character_coverage, input_sentence_size, num_threads,
                               max_line_bytes)
  files = resolve_inputs(patterns, output_file, overwrite) if files is None else files
  skips = corpus_lines.Skips() if skips is None else skips
  sentences = _spm_sentences(files, do_lower_case, max_line_bytes, skips)
  read = []  # With a sample: the lines read, for the line that says the training.
  if input_sentence_size:  # Sampled here, seeded: the same lines every run.
    sentences = iter(sample_lines(_counted(sentences, read), input_sentence_size, seed))
  leading = _until_visible(sentences)
  if not leading or not _visible(leading[-1]):
    skipped = corpus_lines.skipped_lines(skips, max_line_bytes)
    raise ValueError(f'the input files {files} have no text to learn a SentencePiece model from'
                     + (f': {skipped}' if skipped else ''))
  sentencepiece.set_random_generator_seed(seed)
  model, failed, sample = io.BytesIO(), [], []
  try:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=_then_training(vocab_coverage.sampled(
            itertools.chain(leading, sentences), sample), vocab_size, failed, read),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        pad_piece='<pad>', unk_piece='<unk>',
        control_symbols=','.join(SPM_CONTROL_SYMBOLS),
        character_coverage=character_coverage,
        # Every line given is used: longer ones were skipped (and said) above.
        max_sentence_length=max(max_line_bytes, 10),
        num_threads=num_threads,
        minloglevel=2)
  except RuntimeError as e:
    if failed:  # The reading's own error, not the trainer's.
      raise failed[0] from None
    skipped = corpus_lines.skipped_lines(skips, max_line_bytes)
    raise ValueError(_spm_failed(e) + (f'; {skipped}' if skipped else '')) from None
  _check_casing_kept(sentencepiece_tokenizer.sentencepiece_vocab(output_file, model.getvalue())[0],
                    do_lower_case)
  vocab_coverage.check_pieces(model.getvalue(), sample, character_coverage)
  if skipped := corpus_lines.skipped_lines(skips, max_line_bytes):
    logging.warning('%s', skipped)
  files_lib.write_atomically(output_file, model.getvalue())
