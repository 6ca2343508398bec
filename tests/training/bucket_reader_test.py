"""Reading a run in a bucket while it trains (hostile pass of 2026-12-01): a step orbax was still
writing there (no atomic rename in a bucket: it marks a finished save last) was warned of as a
damaged checkpoint, and the run's lock object, which names its holder, went unread: no word that
the run trains now."""

import json
import socket
import time

import aiohttp
import log_records
import pytest

from bertjax import console
from bertjax import files
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader
from bertjax.training import checkpoint_step
from bertjax.training import read_retries
from bertjax.training import workdir_lock


def _saved(run: str, count: int):
  """A run in the bucket with `count` steps saved by orbax there (each marked finished)."""
  import checkpoint_test  # noqa: PLC0415  # Its tiny state.
  config = checkpoint_test.config()
  mngr = checkpoint.manager(run, config, best_metric='acc')
  for step in range(1, count + 1):
    checkpoint.save(mngr, step, checkpoint_test.make_state(step), {'step': step}, force=True)
    checkpoint.wait(mngr)
  mngr.close()
  files.write_atomically(files.join(run, 'config.json'), json.dumps(config.to_dict()))


def test_a_step_being_saved_in_a_bucket_is_left_out_not_warned_of(gcs_bucket, monkeypatch):
  run = f'{gcs_bucket}/run'
  _saved(run, 2)
  assert checkpoint_reader.steps(f'{run}/checkpoints') == [1, 2]
  # Step 3 as orbax leaves it midway: some of its files, no mark of a finished save.
  files.copy_tree(f'{run}/checkpoints/2', f'{run}/checkpoints/3')
  for name in files.glob(f'{run}/checkpoints/3/**/commit_success.txt') + files.glob(
      f'{run}/checkpoints/3/state/_METADATA'):
    files.remove(name)
  assert not files.glob(f'{run}/checkpoints/3/**/commit_success.txt')
  lines = log_records.recorded_warnings(monkeypatch, checkpoint_reader)
  assert checkpoint_reader.steps(f'{run}/checkpoints') == [1, 2]
  assert checkpoint_reader.read(run).step == 2 and lines == []
  # Asked for by its number, it is named as being saved, not as a step the run lacks.
  with pytest.raises(FileNotFoundError, match=r'--step=3: step 3 in .*/checkpoints is no '
                     r'finished save \(being saved, or cut short: orbax has not marked it '
                     r'done\); its finished steps: 1, 2. Wait for the save, or pass one of them.'):
    checkpoint_reader.resolve_step(run, 3)
  # A run copied up from a disk has no marks at all: every step of it holding its items'
  # metadata is whole; step 3 (none) is cut short or being saved.
  for name in files.glob(f'{run}/checkpoints/*/commit_success.txt'):
    files.remove(name)
  assert checkpoint_reader.steps(f'{run}/checkpoints') == [1, 2]
  files.copy(f'{run}/checkpoints/2/state/_METADATA', f'{run}/checkpoints/3/state/_METADATA')
  assert checkpoint_reader.steps(f'{run}/checkpoints') == [1, 2, 3]
  # Only the newest can be mid-save: an older unmarked step (copied up) is kept.
  files.write_atomically(f'{run}/checkpoints/2/commit_success.txt', '')
  assert checkpoint_reader.steps(f'{run}/checkpoints') == [1, 2]


def test_a_bucket_runs_first_save_in_progress_is_no_damage(gcs_bucket):
  """A bucket run's first step, orbax still writing it (no mark, no items' metadata yet), was
  read as a copied-up run's whole step and said damaged: it is no checkpoint yet."""
  run = f'{gcs_bucket}/run'
  _saved(run, 1)
  for name in files.glob(f'{run}/checkpoints/1/**/commit_success.txt') + files.glob(
      f'{run}/checkpoints/1/state/_METADATA'):
    files.remove(name)
  assert checkpoint_reader.steps(f'{run}/checkpoints') == []
  with pytest.raises(FileNotFoundError, match='no checkpoint'):
    checkpoint_reader.read(run)


def test_resuming_a_run_copied_up_without_marks_is_refused_not_started_over(gcs_bucket):
  """orbax takes a bucket's steps without its mark for saves killed midway: a run copied up
  from a disk lost every step as the resumed run's checkpoint manager started."""
  import checkpoint_test  # noqa: PLC0415
  run = f'{gcs_bucket}/run'
  checkpoint_test.save_steps(run)
  for name in files.glob(f'{run}/checkpoints/*/commit_success.txt'):
    files.remove(name)
  with pytest.raises(checkpoint.RestoreError, match=r'holds the steps \[1, 2\] without orbax\'s '
                     r'mark of a finished save .* orbax would delete them as it starts .* Mark '
                     r'each whole step \(gsutil cp /dev/null '):
    checkpoint_test.restore(run)
  assert files.exists(f'{run}/checkpoints/2/state/_METADATA')  # Nothing deleted.
  for step in (1, 2):  # Marked as the message says: resumed.
    files.write_atomically(f'{run}/checkpoints/{step}/commit_success.txt', '')
  assert checkpoint_test.restore(run)[1]['step'] == 2


def test_a_reader_says_a_run_in_a_bucket_trains_now(gcs_bucket, monkeypatch):
  run = f'{gcs_bucket}/run'
  _saved(run, 2)
  lock = files.join(run, workdir_lock.LOCK_NAME)
  lines = log_records.recorded_warnings(monkeypatch, console)
  monkeypatch.setattr(console, '_WARNED', set())
  checkpoint_reader.resolve_step(run, None)
  assert lines == [] and workdir_lock.live_holder(run) == ''
  holder = {'host': 'tpu-worker-0', 'pid': 4242, 'since': time.time() - 60, 'lease_s': 120.0,
            'renewed': time.time() - 10, 'token': 'x'}
  files.write_atomically(lock, json.dumps(holder))
  assert workdir_lock.live_holder(run) == 'pid 4242 on tpu-worker-0'
  checkpoint_reader.resolve_step(run, None)
  assert lines == [f'{run} is training now (pid 4242 on tpu-worker-0): its newest checkpoint '
                   'is read (step 2, or one saved since), not its final one']
  # A lease run out (a lost VM), or a holder of this host that is gone: no run trains there.
  files.write_atomically(lock, json.dumps(holder | {'renewed': time.time() - 600}))
  assert workdir_lock.live_holder(run) == ''
  files.write_atomically(lock, json.dumps(holder | {'host': socket.gethostname(),
                                                    'pid': 2**22 + 17}))
  assert workdir_lock.live_holder(run) == ''


def test_the_network_gone_while_a_step_is_read_stops_the_read_not_an_older_step(
    gcs_bucket, monkeypatch):
  """orbax reads a bucket through its own client: its no-network error (aiohttp's, as raised
  when the service went away mid-read) was taken for damage, so a reader went on to the older
  step (a prediction from the wrong step) or, with none left, said to restore the run from a
  copy."""
  run = f'{gcs_bucket}/run'
  _saved(run, 2)
  read_step = checkpoint_step.read_step

  def network_gone(step_dir, step):
    if step == 2:
      key = type('Key', (), {'host': '127.0.0.1', 'port': 9, 'ssl': True})()
      raise aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, 'Connect call failed'))
    return read_step(step_dir, step)

  monkeypatch.setattr(checkpoint_step, 'read_step', network_gone)
  with pytest.raises(RuntimeError, match=r'checkpoint .*/checkpoints/2 could not be read '
                     r'\(ClientConnectorError: Cannot connect to host 127.0.0.1:9 .*\): fix the '
                     r'cause \(permissions, memory, network\) and rerun'):
    checkpoint_reader.read(run)


@pytest.mark.timeout(120)
@pytest.mark.parametrize('gone', ['before the tree', "before orbax's metadata",
                                  'before the arrays'])
def test_the_network_gone_before_a_steps_arrays_is_one_line_not_minutes(gcs_bucket, monkeypatch,
                                                                          gone):
  """tensorstore (the state's tree and orbax's arrays) retried a bucket's request 32 times, its
  wait doubling to 32 s: with the network gone between a step's metadata and its arrays, a
  predict or an export waited some 15 minutes without a line (over 7 measured). A reader's
  tries end in about a minute (read_retries.READ_RETRIES; cut short here), in the no-network
  line, the older step not read."""
  run = f'{gcs_bucket}/run'
  _saved(run, 2)
  monkeypatch.setattr(read_retries, 'READ_RETRIES', {'max_retries': 2, 'initial_delay': '0.1s',
                                                   'max_delay': '0.2s'}, raising=False)
  with socket.socket() as closed:  # A port nothing listens on stands for the network gone.
    closed.bind(('127.0.0.1', 0))
    port = closed.getsockname()[1]
  url = f'http://127.0.0.1:{port}'  # tensorstore's endpoint only: the metadata are read.
  if gone == 'before the arrays':
    state_metadata = checkpoint.state_metadata

    def then_gone(path):
      tree = state_metadata(path)
      monkeypatch.setenv('TENSORSTORE_GCS_HTTP_URL', url)
      return tree
    monkeypatch.setattr(checkpoint, 'state_metadata', then_gone)
  else:
    monkeypatch.setenv('TENSORSTORE_GCS_HTTP_URL', url)
  if gone == "before orbax's metadata":  # Gone after the tree was listed: orbax logs its
    # error and finds no metadata, which was said as damage (the older step read).
    check_tree = checkpoint.check_tree
    listed = []
    monkeypatch.setattr(checkpoint, 'check_tree', lambda path: listed.append(path) or (
        check_tree(path) if len(listed) > 1 else None))
  start = time.time()
  with pytest.raises(RuntimeError, match=r'checkpoint .*/checkpoints/2 could not be read \(.*'
                     r'retry attempts failed.*\): fix the cause \(permissions, memory, '
                     r'network\) and rerun'):
    checkpoint_reader.read(run)
  assert time.time() - start < 60


@pytest.mark.parametrize('where', ['disk', 'bucket'])
def test_a_save_cut_short_is_said_alike_on_a_disk_and_in_a_bucket(gcs_bucket, tmp_path,
                                                                  monkeypatch, where):
  """A run killed while it saved its newest step: on a disk orbax's temporary folder is left
  (no step number), in a bucket the step without its mark. Both readers read the step before
  and say the run stopped before it finished (checked against a report that only the disk
  warned)."""
  run = f'{gcs_bucket}/run' if where == 'bucket' else str(tmp_path / 'run')
  _saved(run, 2)
  config = json.loads(files.read_text(files.join(run, 'config.json')))
  files.write_atomically(files.join(run, 'config.json'), json.dumps(config | {
      'num_train_steps': 5}))
  checkpoints = files.join(run, 'checkpoints')
  cut = files.join(checkpoints, '3' if where == 'bucket' else '3.orbax-checkpoint-tmp-17')
  files.copy_tree(files.join(checkpoints, '2'), cut)
  for name in files.glob(f'{cut}/**/commit_success.txt') + [files.join(cut, 'state',
                                                                        '_METADATA')]:
    files.remove(name)
  console.forget_warnings()
  lines = log_records.recorded_warnings(monkeypatch, console)
  assert checkpoint_reader.step_path(run, None) == run
  assert checkpoint_reader.read(run).step == 2
  assert lines == [f'{run} stopped at step 2 of its 5, before it finished (preempted, '
                   'interrupted or killed), and its newest checkpoint is read: rerun its command '
                   'to finish it, or pass --step=2 to read this step without this warning']
