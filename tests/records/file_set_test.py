"""Reading checks a pattern's files against the create_pretraining_data reports beside them."""

import hashlib
import json
import os

import pytest

from bertjax.records import file_set


def make_set(directory, sizes, name='train', vocab=b'[PAD]\n[UNK]\n'):
  """Fake shards of the given sizes and the report that lists them."""
  directory.mkdir(exist_ok=True)
  names = [f'{name}-{i:05d}-of-{len(sizes):05d}' for i in range(len(sizes))]
  for n, size in zip(names, sizes, strict=True):
    (directory / n).write_bytes(b'x' * size)
  report = {'tool': 'bertjax 0.1 create_pretraining_data',
            'output_files': [f'/somewhere/else/{n}' for n in names],  # Moved since: basenames.
            'output_bytes': dict(zip(names, sizes, strict=True)),
            'output_records': {n: size // 10 for n, size in zip(names, sizes, strict=True)},
            'vocab_size': 2, 'vocab_sha256': hashlib.sha256(vocab).hexdigest(),
            'settings': {'vocab_file': 'v.txt'}}
  (directory / f'{name}.json').write_text(json.dumps(report))
  return [str(directory / n) for n in names]


def test_a_complete_set_reads_with_record_counts_from_its_report(tmp_path):
  files = make_set(tmp_path, [100, 120])
  (tmp_path / '.create_pretraining_data-tmp-h-1-2').mkdir()  # A running creation's.
  (tmp_path / '.hidden-00000-of-00002').write_bytes(b'partial')
  checked = file_set.resolve(f'{tmp_path}/*')
  assert checked.files == files
  assert checked.record_counts == {files[0]: 10, files[1]: 12}
  # A subset the pattern selects is fine: only the shards the pattern names must exist.
  assert file_set.resolve(files[0]).files == files[:1]


def test_a_missing_shard_is_refused(tmp_path):
  files = make_set(tmp_path, [100, 120, 90])
  os.remove(files[1])
  with pytest.raises(ValueError, match=r'1 of the 3 shards .* are missing .*train-00001'):
    file_set.resolve(f'{tmp_path}/train-*')


def test_a_shard_that_disagrees_with_its_report_is_refused(tmp_path):
  files = make_set(tmp_path, [100, 120])
  with open(files[0], 'ab') as f:
    f.write(b'more')
  with pytest.raises(ValueError, match=r'has 104 bytes but .*recorded 100'):
    file_set.resolve(f'{tmp_path}/train-*')


def test_files_no_report_lists_are_refused_beside_a_report(tmp_path):
  make_set(tmp_path, [100, 120])
  (tmp_path / 'train-00000-of-00002.tmp-123-456').write_bytes(b'x' * 50)  # Old temp names.
  with pytest.raises(ValueError, match=r'1 file\(s\) match .* no report beside them lists'):
    file_set.resolve(f'{tmp_path}/train-*')


def test_unreported_files_of_another_folder_are_said_beside_a_checked_set(tmp_path,
                                                                         monkeypatch):
  """Hostile pass of session 36, 1: a SentencePiece set's shard copied without its report into
  another folder trained beside a WordPiece set as WordPiece ids, without a word (only the
  same folder's strays were refused). Read (the original tool's shards have no report), said."""
  import log_records  # noqa: PLC0415
  checked = make_set(tmp_path / 'wordpiece', [100, 120])
  (tmp_path / 'copied').mkdir()
  (tmp_path / 'copied' / 'spm-00000-of-00001').write_bytes(b'x' * 50)
  lines = log_records.recorded_warnings(monkeypatch, file_set)
  mixed = f'{tmp_path}/wordpiece/*,{tmp_path}/copied/*'
  assert len(file_set.resolve(mixed).files) == 3
  file_set.resolve(mixed)  # Read again (every epoch, eval): said once.
  assert lines == [f'1 file(s) of {mixed} have no create_pretraining_data report beside them '
                   f'({tmp_path}/copied/spm-00000-of-00001): they are read unchecked, while the '
                   'other files are checked against their reports (vocab, length, masking); a '
                   'set made with another vocab would train on wrong ids. Keep each set beside '
                   'its <output_file>.json to check it']
  assert file_set.resolve(f'{tmp_path}/copied/*').files == [
      str(tmp_path / 'copied' / 'spm-00000-of-00001')]  # Alone: read unchecked, as before.
  assert file_set.resolve(f'{tmp_path}/wordpiece/*').files == checked
  assert len(lines) == 1


def test_files_without_any_report_are_read_as_they_are(tmp_path):
  (tmp_path / 'a.tfrecord').write_bytes(b'x')
  checked = file_set.resolve(f'{tmp_path}/*.tfrecord')
  assert checked.files == [str(tmp_path / 'a.tfrecord')] and not checked.reports
  with pytest.raises(FileNotFoundError, match='no files match'):
    file_set.resolve(f'{tmp_path}/nothing-*')


def test_vocab_of_the_data_against_the_model(tmp_path):
  vocab = tmp_path / 'vocab.txt'
  vocab.write_bytes(b'[PAD]\n[UNK]\n')
  other = tmp_path / 'other.txt'
  other.write_bytes(b'[PAD]\n[MASK]\n')
  make_set(tmp_path / 'd', [10])
  checked = file_set.resolve(f'{tmp_path}/d/train-*')
  file_set.check_vocab(checked, model_vocab_size=2, vocab_file=str(vocab))
  file_set.check_vocab(checked, model_vocab_size=128, vocab_file=None)  # Padded rows.
  with pytest.raises(ValueError, match=r'2-entry vocab .* vocab_size=1: set data.vocab_file'):
    file_set.check_vocab(checked, model_vocab_size=1, vocab_file=None)
  with pytest.raises(ValueError, match=r'made with another vocab .*the ids would mean other'):
    file_set.check_vocab(checked, model_vocab_size=2, vocab_file=str(other))


def test_a_pattern_of_several_that_matches_nothing_is_refused_not_read_as_none(tmp_path):
  """`data/wiki/train-*,data/bookz/train-*` (a typo in one) trained on the wiki half without a
  word; a folder, or a report alone, named no shard either (an IndexError at the first record)."""
  files = make_set(tmp_path / 'books', [100])
  with pytest.raises(FileNotFoundError, match=r"'.*/bookz/train-\*' of .* matches no file: "
                     'check the path and the glob, or leave it out'):
    file_set.resolve(f'{tmp_path}/books/train-*,{tmp_path}/bookz/train-*')
  with pytest.raises(FileNotFoundError, match=r"/books' is a folder: name its shards, e.g. "
                     r"'.*/books/train-\*'"):
    file_set.resolve(f'{tmp_path}/books')
  with pytest.raises(FileNotFoundError, match=r'/books/train.json\' of .* matches '
                     'create_pretraining_data reports only .* no shard: name the shards they '
                     r"list, e.g. '.*/books/train-\*'"):
    file_set.resolve(f'{tmp_path}/books/train.json,{files[0]}')
  assert file_set.resolve(f'{tmp_path}/books/train*').files == files  # Its report beside: read.


def _as_written_before_masking(directory, name, do_whole_word_mask):
  """The report as b03777a (2026-11-24, before --masking) wrote its settings: the original's
  do_whole_word_mask and no masking."""
  path = directory / f'{name}.json'
  report = json.loads(path.read_text())
  report['settings'] = {'vocab_file': 'v.txt', 'static_masking': True, 'masked_lm_prob': 0.15,
                        'do_whole_word_mask': do_whole_word_mask}
  path.write_text(json.dumps(report))


def test_an_older_reports_whole_word_masks_are_its_masking(tmp_path):
  """Files made by b03777a's create_pretraining_data --do_whole_word_mask were read by a run of
  config.data.masking=wordpiece (the default) without a word, which its config.json recorded
  as what trained; they are refused as whole_word files of a newer report are."""
  make_set(tmp_path, [100], name='whole')
  _as_written_before_masking(tmp_path, 'whole', do_whole_word_mask=True)
  whole = file_set.resolve(f'{tmp_path}/whole-*')
  with pytest.raises(ValueError, match=r'holds the masks it was made with \(whole_word, '
                     r'masked_lm_prob 0.15\).*--config.data.masking=whole_word'):
    file_set.check_masking(whole, masking='wordpiece', masked_lm_prob=0.15)
  file_set.check_masking(whole, masking='whole_word', masked_lm_prob=0.15)
  make_set(tmp_path, [100], name='pieces')
  _as_written_before_masking(tmp_path, 'pieces', do_whole_word_mask=False)
  file_set.check_masking(file_set.resolve(f'{tmp_path}/pieces-*'), masking='wordpiece',
                         masked_lm_prob=0.15)
  with pytest.raises(ValueError, match=r'was made with --masking=wordpiece.*with '
                     r'--masking=whole_word: make the eval files'):
    file_set.check_made_alike(whole, file_set.resolve(f'{tmp_path}/pieces-*'),
                              ('data.train_files', 'data.eval_files'))
