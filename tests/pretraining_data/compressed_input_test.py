"""create_pretraining_data reads gzip, bzip2 and xz input, known by its first bytes: a .bz2 or
.xz file was skipped as binary (and with a text file beside it the run succeeded without it),
and so was a gzip file not named .gz. A compressed file cut short is skipped as damaged when
that shows in its first 64 KiB, and fails the run past them, as a .gz always did. A pipe or a
folder given as the input is said as such."""

import bz2
import gzip
import itertools
import lzma
import os
import pathlib
import re

import pytest

from bertjax import compressed_text
from bertjax import files
from bertjax.pretraining_data import embedded
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import text_input
from bertjax.pretraining_data import writer

SETTINGS = instances.Settings(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=1)
COMPRESS = {'gz': gzip.compress, 'bz2': bz2.compress, 'xz': lzma.compress}


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """300 lines of the embedded eval corpus, as plain text."""
  path = tmp_path_factory.mktemp('compressed') / 'corpus.txt'
  with gzip.open(embedded.corpus_path('eval'), 'rt', encoding='utf-8') as f:
    path.write_text(''.join(itertools.islice(f, 300)), encoding='utf-8')
  return path


def create(input_file, output):
  return writer.create(str(input_file), str(output), SETTINGS,
                       vocab_file=str(embedded.vocab_path()), num_output_shards=1,
                       num_workers=1, random_seed=7, tokenizer='reference')


def shard_bytes(report):
  return pathlib.Path(report['output_files'][0]).read_bytes()


@pytest.mark.parametrize('kind', COMPRESS)
def test_compressed_input_writes_the_same_bytes_whatever_its_name(corpus, tmp_path, kind):
  plain = create(corpus, tmp_path / 'plain')
  packed = COMPRESS[kind](corpus.read_bytes())
  (tmp_path / f'c.txt.{kind}').write_bytes(packed)
  (tmp_path / 'named.txt').write_bytes(packed)  # Its first bytes say what it is.
  for name in (f'c.txt.{kind}', 'named.txt'):
    report = create(tmp_path / name, tmp_path / f'from-{name}')
    assert report['skipped']['counts'] == {}, name
    assert report['counts'] == plain['counts'], name
    assert shard_bytes(report) == shard_bytes(plain), name
  # Beside a text file it is read too, not dropped with a count in the summary.
  both = create(f'{corpus},{tmp_path / f"c.txt.{kind}"}', tmp_path / 'both')
  assert both['counts']['documents'] == 2 * plain['counts']['documents']
  assert both['skipped']['counts'] == {}


@pytest.mark.parametrize('kind', COMPRESS)
def test_a_compressed_file_cut_short_or_misnamed_is_a_counted_skip(tmp_path, kind):
  """As test_gzip_input_writes_the_same_bytes (create_pretraining_data_test.py) for .gz: a
  name on another format, or a file cut short, is said, not a crash nor 'binary_file'."""
  fake = tmp_path / f'fake.txt.{kind}'
  fake.write_bytes(b'not compressed at all\n')
  whole = COMPRESS[kind](b'a short text\n' * 100)
  cut = tmp_path / f'cut.txt.{kind}'
  cut.write_bytes(whole[:len(whole) // 2])
  unnamed = tmp_path / 'cut.txt'  # Known by its first bytes: cut short, not binary.
  unnamed.write_bytes(whole[:len(whole) // 2])
  skips = text_input.Skips()
  assert text_input.usable_files([str(fake), str(cut), str(unnamed)], skips) == []
  assert skips.as_dict()['counts'] == {'damaged_compressed_file': 3}
  assert [e.split(' ')[0] for e in skips.as_dict()['examples']['damaged_compressed_file']] == [
      str(fake), str(cut), str(unnamed)]


def test_a_gzip_file_with_a_changed_byte_is_said_damaged(tmp_path):
  """A changed byte in gzip's deflate stream raises zlib.error, which no reader caught: a raw
  traceback from predict, embed or fine-tuning's files, and a crash of the corpus tools."""
  data = bytearray(gzip.compress(b'hello world\n' * 1000))
  data[20] ^= 0xFF
  flipped = tmp_path / 'flipped.txt.gz'
  flipped.write_bytes(bytes(data))
  skips = text_input.Skips()
  assert text_input.usable_files([str(flipped)], skips) == []
  assert skips.as_dict()['counts'] == {'damaged_compressed_file': 1}
  with pytest.raises(ValueError, match=rf'^{flipped} cannot be read whole \(Error -3 while '
                     r'decompressing data: .*\): is it a whole compressed file\? Fetch or '
                     'compress it again$'):
    compressed_text.decompressed(flipped)
  with pytest.raises(ValueError, match=r'^<stdin> cannot be read whole \(Error -3 .*\): is it '
                     'a whole compressed stream[?] Send it again$'):
    compressed_text.decompressed_stream(bytes(data), '<stdin>')


@pytest.mark.parametrize('kind', ['gz', 'xz'])  # bzip2 decodes whole 900 KB blocks only.
def test_a_compressed_file_cut_past_its_first_64_kib_fails_the_run(corpus, tmp_path, kind):
  text = corpus.read_bytes() * (1 + (200 << 10) // corpus.stat().st_size)
  whole = COMPRESS[kind](text)
  cut = tmp_path / f'cut.txt.{kind}'
  cut.write_bytes(whole[:-12])  # Cut in its last bytes: all of its text but the end is there.
  (tmp_path / 'out').mkdir()
  # Said with what to do (session 36's hostile pass, 8).
  with pytest.raises(RuntimeError, match=rf'no shard written: worker 0: ValueError: {cut} is '
                     r'damaged \(Compressed file ended before the end-of-stream marker was '
                     r'reached\): fetch or compress it again, or leave it out of --input_file '
                     rf'\(while reading {cut}:\d+\)'):
    create(cut, tmp_path / 'out' / 'train')
  assert os.listdir(tmp_path / 'out') == []


def test_a_compressed_file_in_a_bucket_is_read(corpus):
  """Through fsspec's file object (memory:// stands for gs://): decompressed the same way, and
  the progress line's bytes are the compressed file's."""
  url = 'memory://compressed_input_test/c.txt.xz'
  files.write_atomically(url, lzma.compress(corpus.read_bytes()))
  skips, read = text_input.Skips(), []
  assert text_input.usable_files([url], skips) == [url]
  documents = list(text_input.raw_documents([url], 'lines', 100_000, skips, {}, read=read.append))
  local = list(text_input.raw_documents([str(corpus)], 'lines', 100_000, skips, {}))
  assert documents == local and documents
  assert read[-1] == files.size(url)


def test_a_pipe_or_a_folder_as_input_is_said_as_such(corpus, tmp_path):
  """A pipe (`<(zcat x)`) or a folder was skipped as `not_a_file`, which told no fix."""
  os.mkfifo(tmp_path / 'pipe')
  (tmp_path / 'in' / 'folder').mkdir(parents=True)
  with pytest.raises(ValueError, match=r'no readable text in --input_file=.*: 1 pipe_or_device '
                     r'\(e\.g\. .*pipe \(streams are not read: write the text to a file\)\)$'):
    create(tmp_path / 'pipe', tmp_path / 'out_pipe')
  report = create(f'{corpus},{tmp_path / "pipe"}', tmp_path / 'out')  # Beside a file: counted.
  assert report['skipped']['counts'] == {'pipe_or_device': 1}
  # A folder a glob matches is skipped and said with its fix.
  with pytest.raises(ValueError, match=r'no readable text in --input_file=.*: 1 folder '
                     r'\(e\.g\. .*folder \(pass the files in it: .*folder/\*\)\)$'):
    create(tmp_path / 'in' / '*', tmp_path / 'out_folder')


@pytest.mark.parametrize('named', ['folder', 'folder/'])
def test_a_folder_named_in_input_file_is_refused_not_skipped(corpus, tmp_path, named):
  """A folder named among --input_file's entries (`a.txt,somedir`) was only counted among the
  summary's skips: its text left out, no word said. It is refused, named, with what to pass (as
  learn_vocab refuses it: the same expansion)."""
  (tmp_path / 'folder').mkdir()
  (tmp_path / 'folder' / 'more.txt').write_bytes(corpus.read_bytes())
  with pytest.raises(IsADirectoryError, match=re.escape(
      f'--input_file names the folder {tmp_path}/folder, and a folder is not read: pass the '
      f'files in it, e.g. {tmp_path}/folder/*.txt (or {tmp_path}/folder/* for all of them)')):
    create(f'{corpus},{tmp_path}/{named}', tmp_path / 'out')
  assert not (tmp_path / 'out').exists()
  report = create(f'{corpus},{tmp_path}/folder/*.txt', tmp_path / 'out')  # As it says.
  assert report['skipped']['counts'] == {} and len(report['input_files']) == 2


def test_a_zip_or_zstd_file_is_named_as_such(corpus, tmp_path):
  """A .zip or .zst input was a bare `binary_file` (learn_vocab advised iconv)."""
  import zipfile  # noqa: PLC0415
  with zipfile.ZipFile(tmp_path / 'c.zip', 'w', zipfile.ZIP_DEFLATED) as z:
    z.write(corpus, 'corpus.txt')
  (tmp_path / 'c.zst').write_bytes(b'(\xb5/\xfd' + bytes(range(60)))  # zstd's magic number.
  for name, what in (('c.zip', 'a zip archive'), ('c.zst', 'zstd-compressed')):
    with pytest.raises(ValueError, match=re.escape(
        f'1 binary_file (e.g. {tmp_path / name} ({what}, which is not read: decompress it, or '
        'compress it with gzip, bzip2 or xz))')):
      create(tmp_path / name, tmp_path / f'out_{name}')
