"""Record counts of files without a report, kept in the workdir (bertjax/input/count_cache.py):
a restart reads no file whole again, a rewritten file is counted again, a damaged or edited cache
is ignored, and the first records are still checked against the config of the start."""

import json
import os

import pretraining_records
import pytest

from bertjax import files
from bertjax.input import input_pipeline
from bertjax.input import record_check

SEQ, PRED = 16, 4
SIZES = (5, 9, 3)


def _write(path, count, seq=SEQ):
  pretraining_records.write(path, [pretraining_records.static_row(i, seq, PRED)
                                   for i in range(count)])


@pytest.fixture
def data(tmp_path):
  folder = tmp_path / 'data'
  folder.mkdir()
  for j, size in enumerate(SIZES):
    _write(folder / f'part-{j}.tfrecord', size)
  return folder


@pytest.fixture
def reads(monkeypatch):
  """The files read whole (counted), in order."""
  read = []
  original = record_check._read_head

  def spy(path, count_records):
    if count_records:
      read.append(path.rsplit('/', 1)[-1])
    return original(path, count_records)

  monkeypatch.setattr(record_check, '_read_head', spy)
  return read


def _counted(data, workdir, seq=SEQ):
  spec = record_check.feature_spec(seq, PRED)
  checked = input_pipeline.counted(str(data / 'part-*'), spec, masked=True,
                                   every_host_file=False, workdir=str(workdir))
  return {path.rsplit('/', 1)[-1]: n for path, n in checked.record_counts.items()}


def test_a_restart_counts_only_new_or_rewritten_files(data, tmp_path, reads):
  workdir = tmp_path / 'run'
  expected = {f'part-{j}.tfrecord': n for j, n in enumerate(SIZES)}
  assert _counted(data, workdir) == expected
  assert sorted(reads) == sorted(expected)
  reads.clear()
  assert _counted(data, workdir) == expected  # The restart.
  assert reads == []
  _write(data / 'part-1.tfrecord', 4)  # Rewritten: another size.
  _write(data / 'part-3.tfrecord', 2)  # A new file.
  assert _counted(data, workdir) == expected | {'part-1.tfrecord': 4, 'part-3.tfrecord': 2}
  assert sorted(reads) == ['part-1.tfrecord', 'part-3.tfrecord']
  reads.clear()
  assert _counted(data, workdir)['part-1.tfrecord'] == 4
  assert reads == []
  assert [p.name for p in workdir.iterdir()] == ['record_counts.0.json']


def test_a_file_rewritten_at_the_same_size_is_counted_again(data, tmp_path, reads):
  workdir = tmp_path / 'run'
  _counted(data, workdir)
  reads.clear()
  path = data / 'part-0.tfrecord'
  stat = path.stat()
  path.write_bytes(path.read_bytes())
  if path.stat().st_mtime_ns == stat.st_mtime_ns:
    pytest.fail('the file system keeps no finer modification time than this test\'s rewrite')
  assert _counted(data, workdir)['part-0.tfrecord'] == SIZES[0]
  assert reads == ['part-0.tfrecord']


@pytest.mark.parametrize('cache', ['{"cut', '[1, 2]', '{"%s|%s": "9"}', '{"%s|%s": -1}'])
def test_a_damaged_or_edited_cache_is_counted_again(data, tmp_path, reads, cache):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  path = str(data / 'part-0.tfrecord')
  key = (path, files.version(path))
  (workdir / 'record_counts.0.json').write_text(cache % key if '%s' in cache else cache)
  assert _counted(data, workdir)['part-0.tfrecord'] == SIZES[0]
  assert 'part-0.tfrecord' in reads
  kept = json.loads((workdir / 'record_counts.0.json').read_text())
  assert kept[f'{key[0]}|{key[1]}'] == SIZES[0]


def test_counted_files_are_still_checked_against_the_starts_config(data, tmp_path, reads):
  workdir = tmp_path / 'run'
  _counted(data, workdir)
  with pytest.raises(ValueError, match='part-0.tfrecord'):
    _counted(data, workdir, seq=32)  # Another max_seq_length than the files'.


def test_a_workdir_in_a_bucket_keeps_the_counts(data, tmp_path, reads):
  files.write_atomically('memory://count_cache_test/.bucket', b'')
  workdir = f'memory://count_cache_test/{tmp_path.name}'
  _counted(data, workdir)
  reads.clear()
  assert _counted(data, workdir)['part-2.tfrecord'] == SIZES[2]
  assert reads == []
  assert files.listdir(workdir) == ['record_counts.0.json']
  # The bucket's cache is what is read (emptied there: every file is counted again, and kept).
  files.write_atomically(f'{workdir}/record_counts.0.json', b'{}')
  assert _counted(data, workdir)['part-2.tfrecord'] == SIZES[2]
  assert sorted(reads) == [f'part-{j}.tfrecord' for j in range(len(SIZES))]
  assert len(json.loads(files.read_text(f'{workdir}/record_counts.0.json'))) == len(SIZES)


def test_a_copy_that_keeps_the_modification_time_is_counted_again(data, tmp_path, reads):
  """Review of 2026-12-02: a same-size file copied over with its mtime kept (cp -p, rsync -t)
  kept its version, so its old count was used."""
  workdir = tmp_path / 'run'
  _counted(data, workdir)
  reads.clear()
  path = data / 'part-0.tfrecord'
  other = tmp_path / 'other.tfrecord'
  other.write_bytes(path.read_bytes())
  stat = path.stat()
  os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
  os.replace(other, path)  # The same bytes, size and mtime: another file.
  assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size
  assert _counted(data, workdir)['part-0.tfrecord'] == SIZES[0]
  assert reads == ['part-0.tfrecord']
