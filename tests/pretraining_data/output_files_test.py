"""create_pretraining_data never loses a file at its outputs (session 56's hostile pass): a file
no set made here claims (a user's notes, a stray shard) is replaced only with --overwrite,
another set's report never; a set that cannot be put in place whole (an immutable shard, a full
disk) leaves the earlier set as it was, not a mix of both under the new report."""

import dataclasses
import errno
import gzip
import json
import re
import subprocess
import sys

import hostile_creation_test
import pytest

from bertjax.pretraining_data import shard_outputs
from bertjax.pretraining_data import writer

SETTINGS = hostile_creation_test.SETTINGS
corpus = hostile_creation_test.corpus  # The fixture: 40 Shakespeare documents.


def create(corpus, output, minilm_dir, settings=SETTINGS, **kwargs):
  return hostile_creation_test.create(corpus, output, str(minilm_dir / 'vocab.txt'), settings,
                                      **kwargs)


def _files(folder):
  return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_file_no_set_claims_is_replaced_only_with_overwrite(corpus, minilm_dir, tmp_path):
  (tmp_path / 'notes.txt').write_text('mine')
  (tmp_path / 'e.json').write_text('{"my": "config"}')
  with pytest.raises(ValueError, match=rf'^output {tmp_path}/notes.txt exists and is no shard of '
                     rf'a set made here \({tmp_path}/notes.txt.json does not list it\): writing '
                     'it would lose that file; pass --overwrite to replace it, or another '
                     '--output_file$'):
    create(corpus, tmp_path / 'notes.txt', minilm_dir)
  with pytest.raises(ValueError, match=rf'^{tmp_path}/e.json, where this set\'s report goes, '
                     'exists and is no report of create_pretraining_data: .*pass --overwrite'):
    create(corpus, tmp_path / 'e', minilm_dir)
  assert _files(tmp_path) == {'notes.txt': b'mine', 'e.json': b'{"my": "config"}'}
  create(corpus, tmp_path / 'train', minilm_dir, num_output_shards=2)
  create(corpus, tmp_path / 'train', minilm_dir, num_output_shards=2)  # Its own: remade.
  before = _files(tmp_path)
  # Another set's report as an output: never, --overwrite or not (its shards left unchecked).
  for overwrite in (False, True):
    with pytest.raises(ValueError, match=rf'^output {tmp_path}/train.json is the report of a set '
                       'of 2 shards: writing over it would leave them unchecked'):
      create(corpus, tmp_path / 'train.json', minilm_dir, overwrite=overwrite)
  assert _files(tmp_path) == before
  create(corpus, tmp_path / 'notes.txt', minilm_dir, overwrite=True)
  assert (tmp_path / 'notes.txt').read_bytes() != b'mine'


@pytest.mark.parametrize('error, said', [
    (OSError(errno.EPERM, 'Operation not permitted'), r'Operation not permitted: the set could '
     r'not be put in place, and the earlier files there are as they were; make that folder '
     r'writable'),
    (OSError(errno.ENOSPC, 'No space left on device'), r'the disk is full writing .*No shard was '
     r'written')])
def test_a_set_put_in_place_part_way_leaves_the_earlier_set_as_it_was(
    corpus, minilm_dir, tmp_path, monkeypatch, error, said):
  """The hostile pass: an immutable second shard left the first shard new, the second old and
  the new report over both (the earlier set lost, the new one refused), with a raw errno."""
  create(corpus, tmp_path / 'train', minilm_dir, num_output_shards=2)
  before = _files(tmp_path)
  put = shard_outputs._put_in_place

  def failing(staged, destination):
    if destination.endswith('-00001-of-00002'):
      raise OSError(error.errno, error.strerror, staged, None, destination)
    put(staged, destination)
  monkeypatch.setattr(shard_outputs, '_put_in_place', failing)
  with pytest.raises(ValueError, match=said):
    create(corpus, tmp_path / 'train', minilm_dir, num_output_shards=2, overwrite=True,
           settings=dataclasses.replace(SETTINGS, dupe_factor=2))  # Another set, replacing.
  assert _files(tmp_path) == before  # The shards, the report; no temporary folder left.
  # A first set that fails so: nothing of it left.
  with pytest.raises(ValueError, match=said):
    create(corpus, tmp_path / 'new', minilm_dir, num_output_shards=2)
  assert _files(tmp_path) == before


def test_a_glob_over_the_outputs_folder_reads_its_text_only(corpus, minilm_dir, tmp_path):
  """The hostile pass: `--input_file='dir/*'` read the vocab learned into dir/ as a document
  (7 documents of 6, [UNK] 3.5%), and the same command run again was refused ('output
  dir/train-00000-of-00002 is the input'), its own earlier shard taken for text."""
  (tmp_path / 'a.txt').write_bytes(corpus.read_bytes())
  (tmp_path / 'vocab.txt').write_bytes((minilm_dir / 'vocab.txt').read_bytes())
  settings = SETTINGS

  def make():
    return writer.create(f'{tmp_path}/*', str(tmp_path / 'train'), settings,
                         vocab_file=str(tmp_path / 'vocab.txt'), random_seed=7, num_workers=1,
                         num_output_shards=2)
  first = make()
  alone = writer.create(str(tmp_path / 'a.txt'), str(tmp_path / 'alone'), settings,
                        vocab_file=str(tmp_path / 'vocab.txt'), random_seed=7, num_workers=1)
  assert first['counts']['documents'] == alone['counts']['documents'] == 40
  assert first['skipped']['counts'] == {'vocab_file': 1}
  shards = {p: (tmp_path / p).read_bytes() for p in ('train-00000-of-00002',
                                                     'train-00001-of-00002')}
  again = make()  # Its earlier shards and report matched: skipped, the same set remade.
  assert again['counts'] == first['counts']
  assert {p: (tmp_path / p).read_bytes() for p in shards} == shards
  with pytest.raises(ValueError, match=rf'^output {tmp_path}/a.txt is the input'):
    writer.create(f'{tmp_path}/*', str(tmp_path / 'a.txt'), settings,
                  vocab_file=str(tmp_path / 'vocab.txt'), overwrite=True)


def test_overwrite_replaces_a_set_of_another_shard_count(corpus, minilm_dir, tmp_path):
  """The hostile pass: --overwrite over a set of 2 shards with 3 said 'Remove that set', the
  flag that asks for it given."""
  create(corpus, tmp_path / 'train', minilm_dir, num_output_shards=2)
  before = _files(tmp_path)
  with pytest.raises(ValueError, match=r'is the report of another set of shards, still there .* '
                     'Pass --overwrite to replace that set'):
    create(corpus, tmp_path / 'train', minilm_dir, num_output_shards=3)
  assert _files(tmp_path) == before
  report = create(corpus, tmp_path / 'train', minilm_dir, num_output_shards=3, overwrite=True)
  assert sorted(_files(tmp_path)) == ['train-00000-of-00003', 'train-00001-of-00003',
                                      'train-00002-of-00003', 'train.json']
  assert sum(report['output_records'].values()) == sum(
      json.loads(before['train.json'])['output_records'].values())


def test_a_file_of_blank_lines_is_said_as_such(minilm_dir, tmp_path):
  """The hostile pass: 'no instances: the input has no usable sentences ()'."""
  (tmp_path / 'blank.txt').write_text('\n\n  \n\n')
  with pytest.raises(ValueError, match=r'^no instances: the input has no usable sentences \(its '
                     r'lines hold no text\)$'):
    create(tmp_path / 'blank.txt', tmp_path / 'out', minilm_dir)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['blank.txt']


def test_overwrite_replaces_only_what_a_report_of_its_own_lists_here(corpus, minilm_dir,
                                                                     tmp_path):
  """Second hostile pass (session 56): --overwrite removed whatever a JSON of another tool
  listed at <prefix>.json (a folder, the corpus), and the shards of the folder a report was
  copied from; a user's file put where a listed shard was got replaced on a rerun."""
  victim = tmp_path / 'victim'
  victim.mkdir()
  (victim / 'a.txt').write_text('mine')
  out = tmp_path / 'out'
  out.mkdir()
  (out / 't.json').write_text(json.dumps({'tool': 'my-exporter 2.0',
                                          'output_files': [str(victim), str(corpus)]}))
  with pytest.raises(ValueError, match=r't.json, where this set\'s report goes, exists and is no '
                     'report of create_pretraining_data'):
    create(corpus, out / 't', minilm_dir, num_output_shards=2)
  create(corpus, out / 't', minilm_dir, num_output_shards=2, overwrite=True)
  assert (victim / 'a.txt').read_text() == 'mine' and corpus.exists()
  # A copied folder: its report lists the first folder's shards.
  copy = tmp_path / 'copy'
  copy.mkdir()
  for path in out.iterdir():
    (copy / path.name).write_bytes(path.read_bytes())
  before = _files(out)
  for overwrite in (False, True):
    with pytest.raises(ValueError, match=rf'^{copy}/t.json is the report of another set of '
                       rf'shards, still there \(2 not among .*e.g. {out}/t-00000-of-00002\): .*'
                       r'Remove that set .*--overwrite replaces only a local set whose report was '
                       'written there'):
      create(corpus, copy / 't', minilm_dir, num_output_shards=3, overwrite=overwrite)
  assert _files(out) == before
  # The same command in the copy, with its shard count: its own shards, matched by name beside
  # its report as the readers match them, are remade.
  create(corpus, copy / 't', minilm_dir, num_output_shards=2)
  assert _files(out) == before and sorted(_files(copy)) == sorted(before)
  # A shard of another size than the report's (a user's file put there): --overwrite leaves it.
  (out / 't-00001-of-00002').write_text('notes')
  with pytest.raises(ValueError, match='Remove that set'):
    create(corpus, out / 't', minilm_dir, num_output_shards=3, overwrite=True)
  assert (out / 't-00001-of-00002').read_text() == 'notes'


INTERRUPTED = '''
import sys
from bertjax import console
from bertjax.pretraining_data import instances, shard_outputs, writer
put, calls = shard_outputs._put_in_place, []
def put_in_place(staged, destination):
  calls.append(destination)
  if len(calls) == 2:  # The report is in place, a shard not yet: Ctrl-C.
    console.interrupted(lambda: f'interrupted; whole: {shard_outputs.PUT_IN_PLACE}')
    if sys.argv[4] == 'error':
      raise PermissionError(1, 'Operation not permitted', destination)
  put(staged, destination)
shard_outputs._put_in_place = put_in_place
writer.create(sys.argv[1], sys.argv[2], instances.Settings(
    max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2), vocab_file=sys.argv[3],
    random_seed=7, num_workers=1, num_output_shards=2, overwrite=True)
print('not reached')
'''


@pytest.mark.parametrize('then', ['', 'error'])
def test_an_interrupt_while_the_set_is_put_in_place_waits_for_it(corpus, minilm_dir, tmp_path,
                                                                 then):
  """Second hostile pass: Ctrl-C as the set was put in place removed the temporary folder that
  held the earlier set's shards, moved aside, before they could be put back: the earlier set
  lost, and the line said 'no shard was written (... an earlier set there is kept)'."""
  create(corpus, tmp_path / 't', minilm_dir, num_output_shards=2)
  before = _files(tmp_path)
  done = subprocess.run([sys.executable, '-c', INTERRUPTED, str(corpus), str(tmp_path / 't'),
                         str(minilm_dir / 'vocab.txt'), then], capture_output=True, text=True,
                        timeout=300, check=False)
  assert done.returncode == 130 and 'not reached' not in done.stdout, done.stderr[-2000:]
  last = done.stderr.strip().splitlines()[-1]
  if then == 'error':  # Undone first: the earlier set as it was.
    assert last == 'interrupted; whole: []' and _files(tmp_path) == before
  else:  # Put in place whole: the new set, read by its report.
    assert last == f"interrupted; whole: ['{tmp_path}/t.json']"
    after = _files(tmp_path)
    assert sorted(after) == sorted(before) and after != before
    report = json.loads(after['t.json'])
    assert report['settings']['dupe_factor'] == 2 and all(
        report['output_bytes'][name] == len(after[name]) for name in report['output_bytes'])


def test_any_vocab_a_glob_matches_is_skipped_and_text_that_opens_like_one_is_read(
    corpus, minilm_dir, tmp_path):
  """Second hostile pass: a second vocab in the glob (another run's, a gzipped copy) was read as
  a document; a text whose first lines are the special tokens, then prose, stays text."""
  vocab = (minilm_dir / 'vocab.txt').read_bytes()
  (tmp_path / 'a.txt').write_bytes(corpus.read_bytes())
  (tmp_path / 'old_vocab.txt').write_bytes(vocab)
  (tmp_path / 'vocab.txt.gz').write_bytes(gzip.compress(vocab))
  alone = writer.create(str(tmp_path / 'a.txt'), str(tmp_path / 'alone'), SETTINGS,
                        vocab_file=str(minilm_dir / 'vocab.txt'), random_seed=7, num_workers=1)
  report = writer.create(f'{tmp_path}/*', str(tmp_path / 'out' / 'train'), SETTINGS,
                         vocab_file=str(minilm_dir / 'vocab.txt'), random_seed=7, num_workers=1)
  assert report['skipped']['counts']['vocab_file'] == 2
  assert report['counts']['documents'] == alone['counts']['documents']
  prose = tmp_path / 'prose'
  prose.mkdir()
  (prose / 'fake.txt').write_text('[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n' + ''.join(
      f'the lord is my shepherd and line {i} of prose .\n' for i in range(30)))
  read = writer.create(str(prose / '*'), str(tmp_path / 'prose_set'), SETTINGS,
                       vocab_file=str(minilm_dir / 'vocab.txt'), random_seed=7, num_workers=1)
  assert read['counts']['documents'] == 1 and 'vocab_file' not in read['skipped']['counts']


def test_a_folder_in_a_shards_place_is_named_not_the_prefix(tmp_path):
  """Hostile pass of 2026-12-04: a folder zz-00000-of-00001 beside --output_file=zz
  --num_output_shards=1 was told as `--output_file=zz is a folder`, which it is not."""
  from bertjax import create_pretraining_data  # noqa: PLC0415  # Its flags: only this test.
  (tmp_path / 'zz-00000-of-00001').mkdir()
  with pytest.raises(IsADirectoryError, match=re.escape(
      f'{tmp_path}/zz-00000-of-00001 of --output_file={tmp_path}/zz is a folder')):
    create_pretraining_data.check_paths(str(tmp_path / 'zz'), 1)
  (tmp_path / 'yy').mkdir()  # The named file itself: named as the flag.
  with pytest.raises(IsADirectoryError, match=re.escape(
      f'--output_file={tmp_path}/yy is a folder')):
    create_pretraining_data.check_paths(str(tmp_path / 'yy'), 0)
