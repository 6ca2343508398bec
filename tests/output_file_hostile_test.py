"""One output file, as a hostile pass over extract_features and learn_vocab met it: a read-only
or private file replaced as 644 (extract_features) or refused only after the work (learn_vocab);
an empty --output_file run to its end; names of 233-255 bytes failing on their temporary file;
two extract_features runs on one file both said done; the disk's errors naming the hidden
temporary file; gzip input told to re-encode; a vocab learned with --nodo_lower_case from text
without capitals refused by every tool after it; lines skipped as too long left out of the
error they caused."""

import bz2
import errno
import gzip
import io
import lzma
import os
import sys

import numpy as np
import pytest

from bertjax import export
from bertjax import extract_features
from bertjax import files
from bertjax import output_lock
from bertjax import paths
from bertjax import processes
from bertjax import text_files
from bertjax.finetune.tasks import user_formats
from bertjax.interop import sources
from bertjax.pretraining_data import text_input
from bertjax.text import tokenizer
from bertjax.text import vocab_casing
from bertjax.text import vocab_learner

LONG_NAME = 'f' * 245 + '.jsonl'  # 251 bytes: a valid name, its '.NAME.<pid>.tmp' is not.


@pytest.fixture
def text(tmp_path):
  path = tmp_path / 'in.txt'
  path.write_text('The weather is lovely today.\n')
  return path


def test_a_read_only_output_is_refused_first_and_a_private_one_stays_private(minilm_dir, text,
                                                                             tmp_path,
                                                                             monkeypatch):
  locked, private = tmp_path / 'locked.jsonl', tmp_path / 'private.jsonl'
  locked.write_text('keep\n')
  locked.chmod(0o444)
  loads = []
  monkeypatch.setattr(extract_features.sources, 'load', lambda *a, **k: loads.append(a))
  with pytest.raises(PermissionError, match=r'locked.jsonl is read-only \(mode 444\): make it '
                     r'writable \(chmod u\+w\)'):
    extract_features.run(str(minilm_dir), text, locked)
  assert loads == [] and locked.read_text() == 'keep\n'  # Before the model was read.
  with pytest.raises(ValueError, match=r'^--output_file is empty: name the file to write.$'):
    extract_features.run(str(minilm_dir), text, '')
  assert loads == [] and sorted(os.listdir(tmp_path)) == ['in.txt', 'locked.jsonl']
  monkeypatch.undo()
  private.write_text('secret\n')
  private.chmod(0o600)
  assert extract_features.run(str(minilm_dir), text, private, overwrite=True).lines == 1
  assert private.stat().st_mode & 0o777 == 0o600 and 'secret' not in private.read_text()


def test_a_name_near_the_limit_and_a_second_run_on_one_output(minilm_dir, text, tmp_path):
  long = tmp_path / LONG_NAME
  assert extract_features.run(str(minilm_dir), text, long).lines == 1
  assert sorted(os.listdir(tmp_path)) == sorted(['in.txt', LONG_NAME])  # No temp or lock left.
  out = tmp_path / 'out.jsonl'
  with output_lock.held(str(out), 'extract_features', f'writing {out}'):
    with pytest.raises(ValueError, match=r'another extract_features run \(pid .*\) is writing '
                       r'.*out.jsonl now: wait for it to finish, or pass another --output_file'):
      extract_features.run(str(minilm_dir), text, out)
  assert not out.exists()
  # The lock beside a name near the limit is one name, the same for every process.
  with output_lock.held(str(long), 'learn_vocab', 'writing it'):
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith('.lock')] == [
        processes.hidden_prefix(LONG_NAME) + 'lock']
  files.write_atomically(str(long), 'again\n')
  assert long.read_text() == 'again\n'


def test_the_disk_errors_name_the_output_not_the_temporary_file(tmp_path):
  out = str(tmp_path / 'out.jsonl')
  temp = files.temporary_beside(out)
  assert paths.write_error(PermissionError(errno.EPERM, 'Operation not permitted', temp, None,
                                           out), out) == (
      f'cannot write {out} (Operation not permitted): nothing was written (a file already there '
      'is kept); pass another --output_file.')
  assert paths.write_error(OSError(errno.ENOSPC, 'No space left on device'), out) == (
      f'the disk holding {out} is full (No space left on device): nothing was written (a file '
      'already there is kept); free space there or pass an --output_file on another disk.')
  # Another file's error (an input): not said as the output's.
  assert paths.write_error(PermissionError(errno.EACCES, 'Permission denied', '/x/in.txt'),
                           out) == ''


def test_compressed_or_binary_input_is_named_as_such(tmp_path, monkeypatch):
  # Compressed text is read as the corpus tools read it (predict, embed and extract_features
  # called a .bz2 or .xz a binary file, and told a .gz to be gunzipped: session 47's review).
  for name, compress in (('in.txt.gz', gzip.compress), ('in.bz2', bz2.compress),
                         ('in.txt.xz', lzma.compress), ('in.txt', gzip.compress)):
    packed = tmp_path / name
    packed.write_bytes(compress('héllo\nworld\n'.encode()))
    assert text_files.read_text_lines(str(packed)) == ['héllo', 'world']
    packed.write_bytes(compress(b'hello\n' * 1000)[:40])  # Cut short.
    with pytest.raises(ValueError, match=rf'^{packed} cannot be read whole \(.*\): is it a whole '
                       'compressed file[?] Fetch or compress it again$'):
      text_files.read_text_lines(str(packed))
  # A stream (standard input, a pipe) is decompressed by its first bytes, as zcat would (it was
  # told to `gunzip -k -`); one cut short is one line.
  for compress in (gzip.compress, bz2.compress, lzma.compress):
    monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(compress('héllo\n'.encode()))))
    assert text_files.read_stdin_lines() == ['héllo']
    monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(compress(b'x\n' * 999)[:30])))
    with pytest.raises(ValueError, match=r'^<stdin> cannot be read whole \(.*\): is it a whole '
                       'compressed stream[?] Send it again$'):
      text_files.read_stdin_lines()
  binary = tmp_path / 'model.bin'
  binary.write_bytes(b'\x08\x00\x00\x00\xff\xfe\x00\x01' * 8)
  with pytest.raises(ValueError,
                     match=r'holds NUL bytes \(the first at byte 1\): a binary file, not text'):
    text_files.read_text_lines(str(binary))
  wide = tmp_path / 'wide.txt'  # UTF-16 holds NUL bytes too: told its encoding instead.
  wide.write_bytes('hello\n'.encode('utf-16'))
  with pytest.raises(ValueError, match=r'iconv -f UTF-16'):
    text_files.read_text_lines(str(wide))


def test_token_ids_are_a_binary_file_and_text_in_many_scripts_is_utf16(tmp_path):
  # 300 bytes of int32 token ids read as UTF-32LE text (Latin, Greek, Hangul, CJK...): the file
  # was told to be converted from UTF-32LE with iconv, 171 times in 300 random arrays.
  ids = np.random.default_rng(0).integers(0, 30522, (40, 75), dtype=np.int32)
  told = [text_files.wide_encoding(row.tobytes()) for row in ids]
  assert told == [None] * len(ids), told
  binary = tmp_path / 'ids.bin'
  binary.write_bytes(ids[0].tobytes())
  with pytest.raises(ValueError, match=r'holds NUL bytes .*: a binary file, not text'):
    text_files.read_text_lines(str(binary))
  # Text naming a city in nine scripts is still told its encoding.
  line = ('Moscow (Russian: Москва; Greek: Μόσχα; Arabic: موسكو; Hebrew: מוסקבה; Japanese: '
          'モスクワ; Korean: 모스크바; Hindi: मास्को; Thai: มอสโก; Georgian: მოსკოვი)\n')
  for codec in 'UTF-16LE', 'UTF-16BE', 'UTF-32LE', 'UTF-32BE':
    assert text_files.wide_encoding((line * 3).encode(codec)) == codec


def test_bytes_that_decode_as_utf8_but_are_no_utf8_text_are_refused_as_the_corpus_tools_do(
    tmp_path):
  # NUL bytes are UTF-8: a binary file that decodes, or UTF-16 without a byte-order mark, was
  # read as text by predict, extract_features, embed and the fine-tuning files, where
  # create_pretraining_data and learn_vocab skip the file (text_input.usable_files).
  binary = tmp_path / 'weights.bin'
  binary.write_bytes(b'\x89WTS' + bytes(range(1, 100)) * 3 + b'\x00' * 8)
  # CJK without a mark: its NULs are in line breaks and spaces only (it was called binary).
  # Some common characters hold a NUL too: 一 U+4E00, the ideographic space U+3000, 가 U+AC00.
  # Without a mark the byte order is named (iconv's 'UTF-16' reads big-endian then: a
  # little-endian file came out garbled); a line alone, and UTF-32, are told too.
  texts = {'cjk_le.txt': ('中文文本。\n第二行 日本語\n', 'UTF-16LE'),
           'cjk_be.txt': ('한국어 텍스트\n第二行\n', 'UTF-16BE'),
           'cjk_common.txt': ('一つの文\u3000二つ目\n가나다 一二三\n第一行\n', 'UTF-16LE'),
           'one_line.txt': ('一行だけの文章です 2026', 'UTF-16BE'),
           'notepad.txt': ('first input\nsecond input\n', 'UTF-16LE'),
           'train.csv': ('sentence,label\ngood,pos\n', 'UTF-16BE'),
           'wide32.txt': ('一 line\n', 'UTF-32LE'),
           # Emoji (their low surrogates hold NULs: the other order was named) and spaces or
           # format characters Python calls unprintable (the file was called binary).
           'emoji.txt': ('😀❤🙏🎉👍🙏🙏😭❤🔥 😂😀', 'UTF-16LE'),
           'emoji_be.txt': ('😀🙏🔥 中文文本。\n', 'UTF-16BE'),
           'names.txt': ('山田　太郎\n佐藤　花子\n', 'UTF-16LE'),
           'persian.txt': ('می\u200cخواهم کتاب\u200cها را\n', 'UTF-16BE'),
           # Hiragana whose bytes are ASCII but for the line break's NUL (called binary: read
           # as UTF-8 with a stray NUL).
           'kana_le.txt': ('あいうえおかきくけこさしすせそ\n', 'UTF-16LE'),
           'kana_be.txt': ('あいうえおかきくけこさしすせそ\n', 'UTF-16BE')}
  for name, (text, codec) in texts.items():
    (tmp_path / name).write_bytes(text.encode(codec))
  # Binary heads with NUL bytes are no text in any order (a few called them UTF-16).
  binaries = {'elf': b'\x7fELF\x02\x01\x01\x00' + b'\x00' * 8 + b'\x03\x00>\x00\x01\x00\x00\x00',
              'pyc': b'\xa7\r\r\n\x00\x00\x00\x00' + b'\xe3\x00\x00\x00' * 4,
              'png': b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00',
              'ints': bytes(range(1, 40)) + b'\x00\x10\x00\x11',
              # Token ids as 16- or 32-bit integers: no space nor line break among them.
              'ids16': b''.join(i.to_bytes(2, 'little') for i in [101, 7592, 2088, 102] * 50),
              'ids32': b''.join(i.to_bytes(4, 'little') for i in [101, 7592, 2088, 102] * 50)}
  # UTF-8 text with stray NULs: told to remove them, not to convert from UTF-16 (iconv would
  # garble it) nor called a binary file.
  strays = {'stray': b'the king doth speak of his\x00 lord in the great hall\n' * 4,
              'stray_cjk': '東京は晴れ。明日も\x00晴れるでしょう\n'.encode() * 3,
              # Spaceless UTF-8 (CSV, JSON lines, base64) with a NUL beside a line break (called
              # UTF-16 by a rule that took spaces for text).
              'stray_csv': ''.join(f'{i},{i * 0.731:.4f},{i * 37 % 101},label_{i % 3}\n'
                                   for i in range(200)).encode().replace(b'\n', b'\n\x00', 1),
              'stray_jsonl': b'{"text":"abc","label":1}\x00\n' * 20,
              'stray_base64': b'QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=\x00\n' * 20,
              # A short file whose NULs are 10% of its bytes or more, on both sides of its byte
              # pairs (UTF-16's lie on one side): it was told to be UTF-16LE.
              'stray_short': b'hello\x00world\x00\nfoo\x00bar\n',
              'stray_dense': b'ab\x00cd\x00ef\x00gh\x00\nij\n'}
  for name, head in {**binaries, **strays}.items():
    (tmp_path / name).write_bytes(head)
  for read in (text_files.read_text_lines, user_formats.file_text):
    for name, (text, codec) in texts.items():
      path = tmp_path / name
      with pytest.raises(ValueError, match=rf'^{path} is {codec} text, not UTF-8: re-encode it '
                         rf'\(e\.g\. iconv -f {codec} -t utf-8\)\.$'):
        read(str(path))
      assert path.read_bytes().decode(codec) == text  # The hint's codec reads it whole.
    for name in binaries:
      with pytest.raises(ValueError, match=rf'^{tmp_path / name} holds NUL bytes .*: a binary '
                         'file, not text; pass a text file.$'):
        read(str(tmp_path / name))
    for name, head in strays.items():
      first = head.index(0)
      with pytest.raises(ValueError, match=rf'^{tmp_path / name} holds NUL bytes \(the first at '
                         rf'byte {first}, line {head[:first].count(10) + 1}\) in what is '
                         r"otherwise UTF-8 text: remove them \(e\.g\. tr -d '\\000' < "):
        read(str(tmp_path / name))
    with pytest.raises(ValueError, match=rf'^{binary} holds NUL bytes \(the first at byte 301\): '
                       'a binary file, not text; pass a text file.$'):
      read(str(binary))
  skips = text_input.Skips()
  assert not text_input.usable_files([str(binary), str(tmp_path / 'notepad.txt')], skips)
  assert skips.counts == {'binary_file': 2}
  skips = text_input.Skips()  # The corpus tools skip UTF-8 text with NULs, saying so.
  assert not text_input.usable_files([str(tmp_path / 'stray_short')], skips)
  assert skips.examples['binary_file'] == [
      f"{tmp_path / 'stray_short'} (NUL bytes in UTF-8 text, the first at byte 5: remove them "
      "(tr -d '\\000'))"]
  # Past the first 64 KiB (what every tool looks at), a NUL byte is read, as the corpus tools
  # read it, and dropped by the tokenizer.
  late = tmp_path / 'late.txt'
  late.write_bytes(b'a line of text\n' * 5000 + b'one with \x00 in it\n')
  lines = text_files.read_text_lines(str(late))
  assert len(lines) == 5001 and lines[-1] == 'one with \x00 in it'
  assert text_input.usable_files([str(late)], text_input.Skips()) == [str(late)]
  assert tokenizer.BasicTokenizer().tokenize(lines[-1]) == ['one', 'with', 'in', 'it']


def _lower_case_text(tmp_path):
  path = tmp_path / 'lower.txt'
  words = 'the king doth speak of his lord in the great hall and my heart is glad'.split()
  path.write_text('\n'.join(' '.join(words[i:] + words[:i]) for i in range(len(words))) * 20)
  return path


def test_a_vocab_learned_without_lower_casing_from_text_without_capitals_is_refused(tmp_path):
  lower = _lower_case_text(tmp_path)
  for learn, out, size in ((vocab_learner.learn_wordpiece, 'vocab.txt', 128),
                           (vocab_learner.learn_sentencepiece, 'spm.model', 36)):
    with pytest.raises(ValueError, match=r'^--nodo_lower_case, but the text has no upper-case '
                       r'letters, .* pass --do_lower_case \(which also strips accents\)'):
      learn(str(lower), str(tmp_path / out), size, do_lower_case=False)
    assert not (tmp_path / out).exists()
  # Lower-cased, the same text gives a vocab that reads as uncased, as it should.
  vocab = vocab_learner.learn_wordpiece(str(lower), str(tmp_path / 'vocab.txt'), 128)
  vocab_casing.validate_case_matches_vocab(vocab, True)


def test_a_vocab_of_a_script_without_case_reads_either_way(tmp_path):
  """Kana keep their voicing marks only without lower-casing (it strips accents)."""
  corpus = tmp_path / 'kana.txt'
  corpus.write_text('\n'.join('がぎぐげご東京大阪'[i:] + 'ざじずぜぞ'[:i] for i in range(5)) * 30)
  vocab = vocab_learner.learn_wordpiece(str(corpus), str(tmp_path / 'vocab.txt'), 128,
                                        do_lower_case=False, min_frequency=1)
  assert 'が' in vocab
  vocab_casing.validate_case_matches_vocab(vocab, False)
  with pytest.raises(ValueError, match='is an uncased vocab'):  # Lower-case letters, no capitals.
    vocab_casing.validate_case_matches_vocab(['[CLS]', 'the', 'king', '##s'], False)


def test_a_failure_names_the_lines_skipped_as_too_long(tmp_path):
  corpus = tmp_path / 'paragraphs.txt'
  corpus.write_text(('word ' * 400 + '\n') * 20 + 'the cat sat\nthe dog sat\n')
  with pytest.raises(ValueError, match=r'would be .* \[unusedN\] filler, .*; 20 line\(s\) longer '
                     r'than --max_line_bytes=1000 skipped \(e.g. .*paragraphs.txt:1\): pass a '
                     r'larger --max_line_bytes'):
    vocab_learner.learn_wordpiece(str(corpus), str(tmp_path / 'vocab.txt'), 1024,
                                  max_line_bytes=1000)
  assert not (tmp_path / 'vocab.txt').exists()


def test_standard_input_for_files_and_a_folder_for_bert_config_are_named(minilm_dir, tmp_path):
  with pytest.raises(FileNotFoundError, match=r'^--input_file=- : standard input is not read '
                     'here; save the text to a file and pass its path$'):
    paths.expand_input_patterns('-')
  export.export(minilm_dir, 'tf1', tmp_path / 'tf1')
  with pytest.raises(IsADirectoryError, match=rf'^{tmp_path} is a folder: name the '
                     r'bert_config.json in it'):
    sources.load(str(tmp_path / 'tf1' / 'bert_model.ckpt'), bert_config_file=str(tmp_path))


def test_a_file_skipped_as_binary_names_its_nul_byte(tmp_path):
  odd = tmp_path / 'odd.txt'
  odd.write_bytes(b'hello world\x00 there\n')
  skips = text_input.Skips()
  assert text_input.usable_files([str(odd)], skips) == []
  assert skips.described() == (f'1 binary_file (e.g. {odd} (NUL bytes in UTF-8 text, the first '
                               "at byte 11: remove them (tr -d '\\000')))")
  binary = tmp_path / 'weights.bin'
  binary.write_bytes(b'\x7fELF\x02\x01\x01\x00' + bytes(range(1, 40)))
  skips = text_input.Skips()
  assert text_input.usable_files([str(binary)], skips) == []
  assert skips.described() == (f'1 binary_file (e.g. {binary} (a NUL byte at byte 7, as binary '
                               'files have))')


def test_a_zstd_or_zip_input_is_named_not_called_binary(tmp_path):
  """Session 54's extract_features pass: a .zst input was 'holds NUL bytes: a binary file'
  (gzip, bzip2 and xz are read decompressed)."""
  for head, what in ((b'(\xb5/\xfd\x04\x00\x00hello', 'zstd-compressed'),
                     (b'PK\x03\x04\x14\x00\x00\x00', 'a zip archive')):
    assert text_files.not_text('in.zst', head) == (
        f'in.zst is {what}, which is not read (gzip, bzip2 and xz are): decompress it first, or '
        'pipe it in decompressed.')
  assert text_files.not_text('in.bin', b'ab\x00cd').startswith('in.bin holds NUL bytes')
