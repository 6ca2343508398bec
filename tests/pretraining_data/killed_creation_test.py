"""kill -9 at random moments of the embedded corpus's data creation, then a rerun; and the
command killed (SIGKILL, SIGTERM) while its workers write: they end with it.

Between the kill and the rerun, the reader sees either the complete set or refuses it (never a
partial or mixed one); after the rerun the files are byte-identical to an uninterrupted run's,
so training reads the very same examples, and no temporary directory is left.
"""

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from bertjax.pretraining_data import embedded
from bertjax.pretraining_data import shard_outputs
from bertjax.records import file_set

ARGS = dict(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1)
SCRIPT = ('import sys; from bertjax.pretraining_data import embedded; '
          f'embedded.pretraining_files(sys.argv[1], **{ARGS!r})')


def contents(globs):
  """{file name: bytes} of what a reader would read (raises when it refuses the set)."""
  return {pathlib.Path(f).name: pathlib.Path(f).read_bytes()
          for pattern in globs for f in file_set.resolve(pattern).files}


def start(directory):
  return subprocess.Popen([sys.executable, '-c', SCRIPT, str(directory)],
                          start_new_session=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
  directory = tmp_path_factory.mktemp('reference')
  began = time.monotonic()
  assert start(directory).wait() == 0
  seconds = time.monotonic() - began
  globs = embedded.pretraining_files(directory, **ARGS)  # Reused as it is.
  return contents(globs), seconds


@pytest.mark.parametrize('trial', range(3))
def test_kill_at_a_random_moment_then_rerun(reference, tmp_path, trial):
  expected, seconds = reference
  rng = random.Random(trial)
  process = start(tmp_path)
  # Start-up (imports) takes about a third of the run; the files are written after it.
  time.sleep(seconds * rng.uniform(0.35, 1.0))
  os.killpg(process.pid, signal.SIGKILL)
  process.wait()
  globs = [str(tmp_path / f'{embedded.NAME}-64-10-static-{s}-*-of-*') for s in ('train', 'eval')]
  try:
    seen = contents(globs)
  except (ValueError, FileNotFoundError):
    seen = None  # Refused: a reader never trains on it.
  if seen is not None:
    assert seen.keys() <= expected.keys()
    for name, data in seen.items():
      assert data == expected[name], name
  assert contents(embedded.pretraining_files(tmp_path, **ARGS)) == expected
  assert not list(tmp_path.glob(shard_outputs.TEMP_DIR_PREFIX + '*'))


# The command itself, killed as schedulers kill it: SIGKILL or SIGTERM to its pid only (not its
# process group), while its two worker processes are writing.
CPD = [sys.executable, '-m', 'bertjax.create_pretraining_data',
       f'--input_file={embedded.corpus_path("eval")}', f'--vocab_file={embedded.vocab_path()}',
       '--num_output_shards=2', '--max_seq_length=64', '--max_predictions_per_seq=10',
       '--random_seed=3']


def _proc_stat(pid):
  """(state, parent pid) of a process, or None once it is gone."""
  try:
    with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
      fields = f.read().rsplit(')', 1)[1].split()
  except OSError:
    return None
  return fields[0], int(fields[1])


def _alive(pid):
  stat = _proc_stat(pid)
  return stat is not None and stat[0] != 'Z'  # A zombie has ended; only its exit status stays.


def _children(pid):
  return {int(d) for d in os.listdir('/proc') if d.isdigit() and (
      _proc_stat(int(d)) or ('', 0))[1] == pid}


def _start_mid_run(output, log, dupe_factor):
  """The command, once its workers run (dupe_factor makes it last minutes), its output in
  the file `log` (a pipe would stay open as long as the workers); (process, the pids of its
  children: the two workers and multiprocessing's resource tracker)."""
  with open(log, 'wb') as f:
    process = subprocess.Popen([*CPD, f'--output_file={output}', '--num_workers=2',
                                f'--dupe_factor={dupe_factor}', '--overwrite'], stdout=f, stderr=f)
  deadline = time.monotonic() + 60
  while time.monotonic() < deadline:
    kids = _children(process.pid)
    workers = [k for k in kids if 'spawn_main' in pathlib.Path(f'/proc/{k}/cmdline').read_text(
        errors='replace')] if kids else []
    parts = list(output.parent.glob(f'{shard_outputs.TEMP_DIR_PREFIX}*/*'))
    if len(workers) == 2 and parts:
      return process, kids
    assert process.poll() is None, log.read_text()
    time.sleep(0.05)
  process.kill()
  pytest.fail('the workers did not start within 60 s')


def _wait_gone(pids, seconds=10):
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline and any(_alive(p) for p in pids):
    time.sleep(0.05)
  left = [p for p in pids if _alive(p)]
  for pid in left:  # Not left running by a failing test.
    os.kill(pid, signal.SIGKILL)
  return left


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='PR_SET_PDEATHSIG, /proc')
def test_workers_end_with_a_killed_command(tmp_path):
  data = tmp_path / 'data'
  process, kids = _start_mid_run(data / 'train', tmp_path / 'log', dupe_factor=5000)
  os.kill(process.pid, signal.SIGKILL)  # As the OOM killer: no clean-up runs.
  process.wait()
  assert not _wait_gone(kids), 'worker processes outlived their killed parent'
  # Its temporary folder is the next run's to remove (a dead pid's); no shard was written.
  assert not list(data.glob('train*'))
  subprocess.run([*CPD, f'--output_file={data}/train', '--num_workers=1', '--dupe_factor=1'],
                 check=True, capture_output=True)
  assert not list(data.glob(shard_outputs.TEMP_DIR_PREFIX + '*'))


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='/proc')
def test_sigterm_cleans_up_and_keeps_the_earlier_set(tmp_path):
  data = tmp_path / 'data'
  subprocess.run([*CPD, f'--output_file={data}/train', '--num_workers=2', '--dupe_factor=1'],
                 check=True, capture_output=True)
  earlier = {p.name: p.read_bytes() for p in data.iterdir()}
  assert sorted(earlier) == ['train-00000-of-00002', 'train-00001-of-00002', 'train.json']
  process, kids = _start_mid_run(data / 'train', tmp_path / 'log', dupe_factor=5000)
  os.kill(process.pid, signal.SIGTERM)  # As Slurm, Kubernetes.
  assert process.wait(timeout=30) == 143, (tmp_path / 'log').read_text()
  assert not _wait_gone(kids), 'worker processes outlived their terminated parent'
  assert (tmp_path / 'log').read_text().strip().splitlines() == [
      'interrupted: no shard was written (a set is put in place only once all its shards are '
      'made; an earlier set there is kept); rerun the same command']
  assert {p.name: p.read_bytes() for p in data.iterdir()} == earlier  # No temp folder.
