"""The embed job's outputs, as a hostile pass met them: embeddings.npy and similarity.txt that a
user made in --workdir were removed and replaced; two embeds on one workdir at once both ran;
--workdir=- wrote into a folder named `-`, and an explicitly empty --workdir= wrote nothing
without a word. Now a file no embed wrote is refused before any work, a second embed is refused
at its start, naming the first, and `-` and `` name no folder."""

import errno
import io
import os
import pathlib
import signal
import subprocess
import sys
import time

from commands import default_sigint
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax import console
from bertjax import embed
from bertjax import embed_outputs
from bertjax import files
from bertjax import output_lock
from configs import embed as embed_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOT_AN_NPY = r'not an .npy of unit vectors, \[sentences, dimension\]'
NOT_COSINES = "not a cosine matrix, '%.4f' values from 1"


def _config(minilm_dir, sentences=('The weather is lovely today.', 'He drove to the stadium.')):
  config = embed_config.get_config(f'init_from={minilm_dir}')
  with config.unlocked():
    config.sentences, config.max_seq_length = sentences, 16
  return config


@pytest.fixture
def loads(monkeypatch):
  """The models read: none, for a refusal before any work."""
  read = []
  monkeypatch.setattr(embed.Embedder, 'from_pretrained',
                      classmethod(lambda cls, *a, **k: read.append(a)))
  return read


def _npy(array) -> bytes:
  saved = io.BytesIO()
  np.save(saved, array)
  return saved.getvalue()


@pytest.mark.parametrize('name, content, why', [
    ('embeddings.npy', b'precious\n', NOT_AN_NPY),
    ('embeddings.npy', b'', NOT_AN_NPY),  # An empty file made by hand is its user's too.
    # A float array of the user's, not unit vectors; unit vectors with more after them.
    ('embeddings.npy', _npy(np.arange(8, dtype=np.float32).reshape(2, 4)), NOT_AN_NPY),
    ('embeddings.npy', _npy(np.full((2, 4), 0.5, np.float32)) + b'\0' * 16, NOT_AN_NPY),
    ('similarity.txt', b'precious\n', NOT_COSINES),
    ('similarity.txt', b'0.5000 0.1000\n', NOT_COSINES),  # Its first cosine is no 1.
])
def test_a_file_no_embed_wrote_is_refused_before_any_work(minilm_dir, tmp_path, loads, name,
                                                         content, why):
  workdir = tmp_path / 'w'
  workdir.mkdir()
  (workdir / name).write_bytes(content)
  with pytest.raises(FileExistsError, match=(
      rf'^{workdir}/{name} was not written by embed \({why}\): pass another --workdir, or '
      r'remove it.$')):
    embed.run(_config(minilm_dir), workdir)
  assert loads == [] and sorted(os.listdir(workdir)) == [name]  # Kept; no lock left.
  assert (workdir / name).read_bytes() == content


def test_an_earlier_embeds_pair_is_replaced_and_a_pair_with_a_users_file_is_not(minilm_dir,
                                                                               tmp_path):
  workdir = tmp_path / 'w'
  embed.run(_config(minilm_dir), workdir)
  three = ('a dog runs', 'the sun is out', 'it rains')
  vectors = embed.run(_config(minilm_dir, three), workdir)  # The first run's: replaced.
  np.testing.assert_array_equal(np.load(workdir / 'embeddings.npy'), vectors)
  assert np.loadtxt(workdir / 'similarity.txt').shape == (3, 3)
  (workdir / 'similarity.txt').write_text('my notes on these vectors\n')
  with pytest.raises(FileExistsError, match=rf'^{workdir}/similarity.txt was not written by '
                     'embed'):
    embed.run(_config(minilm_dir), workdir)
  assert (workdir / 'similarity.txt').read_text() == 'my notes on these vectors\n'
  np.testing.assert_array_equal(np.load(workdir / 'embeddings.npy'), vectors)  # Untouched.


@pytest.mark.parametrize('full_at', [1, 2])  # The new embeddings.npy, or similarity.txt.
def test_a_full_disk_replaces_nothing_of_an_earlier_embed(minilm_dir, tmp_path, monkeypatch,
                                                          full_at):
  """Matrix pass of 2026-12-02: the earlier similarity.txt was removed before the new
  embeddings.npy was written, so a disk that could not hold it left the earlier vectors alone,
  and the error line spoke of checkpoints and a resume."""
  workdir = tmp_path / 'w'
  embed.run(_config(minilm_dir), workdir)
  before = {p.name: p.read_bytes() for p in workdir.iterdir()}
  assert set(before) == {'embeddings.npy', 'similarity.txt'}
  opened = []

  def full_disk(path, mode='r', *args, **kwargs):
    opened.append(path)
    handle = open(path, mode, *args, **kwargs)  # pylint: disable=unspecified-encoding
    if len(opened) == full_at:
      handle.write(b'half')
      handle.close()
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    return handle

  monkeypatch.setattr(embed_outputs, 'open', full_disk, raising=False)
  with pytest.raises(OSError) as raised:
    embed.run(_config(minilm_dir, ('a dog runs', 'the sun is out', 'it rains')), workdir)
  assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(workdir))
  assert {p.name: p.read_bytes() for p in workdir.iterdir()} == before  # No hidden file left.
  # bertjax.main's line for it: main_test (its flags are bertjax.main's own process's).


def test_a_second_embed_on_the_same_workdir_meanwhile_is_refused_naming_the_first(
    minilm_dir, tmp_path, monkeypatch):
  workdir = tmp_path / 'w'
  said, real = [], embed.Embedder.from_pretrained

  def second_embed_meanwhile(cls, *args, **kwargs):  # While the first reads its model.
    with pytest.raises(ValueError) as refused:
      embed.run(_config(minilm_dir), workdir)
    said.append(str(refused.value))
    return real.__func__(cls, *args, **kwargs)

  monkeypatch.setattr(embed.Embedder, 'from_pretrained', classmethod(second_embed_meanwhile))
  embed.run(_config(minilm_dir), workdir)
  assert said[0].startswith(f'another embed run (pid {os.getpid()} on ')
  assert said[0].endswith(f') is writing embeddings.npy and similarity.txt in {workdir} now: '
                          'wait for it to finish, or pass another --workdir')
  assert sorted(os.listdir(workdir)) == ['embeddings.npy', 'similarity.txt']  # The first's.
  with output_lock.held(str(workdir / 'embeddings.npy'), 'predict', 'writing it'):
    with pytest.raises(ValueError, match=r'^another predict run \(pid '):  # Any tool's there.
      embed.run(_config(minilm_dir), workdir)


def test_a_dash_workdir_names_no_folder_and_a_refused_run_leaves_no_folder(minilm_dir, tmp_path,
                                                                           monkeypatch, loads):
  monkeypatch.chdir(tmp_path)
  for workdir in ('-', '', ' '):
    with pytest.raises(ValueError, match=rf'^--workdir={workdir} names no folder \(embeddings.npy '
                       r'and similarity.txt are files, not written to standard output\): pass a '
                       r'folder, or leave --workdir out to print the similarities only.$'):
      embed.run(_config(minilm_dir), workdir)
  (tmp_path / 'kept').mkdir()  # Empty, the user's: kept; the folders this run made are not.
  with pytest.raises(ValueError, match='config.sentences=\\(\\): holds no sentence'):
    embed.run(_config(minilm_dir, ()), tmp_path / 'kept' / 'a' / 'b')
  assert loads == [] and sorted(os.listdir(tmp_path)) == ['kept']
  assert os.listdir(tmp_path / 'kept') == []


def _main(minilm_dir, *flags):
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  return subprocess.run(
      [sys.executable, '-m', 'bertjax.main', f'--config=configs/embed.py:init_from={minilm_dir}',
       '--config.max_seq_length=16', "--config.sentences=('one', 'two')", *flags],
      capture_output=True, text=True, timeout=300, check=False, env=env, cwd=ROOT)


def test_the_command_refuses_a_users_file_and_an_empty_workdir_in_one_line(minilm_dir,
                                                                          tmp_path):
  """`echo precious > DIR/embeddings.npy` was replaced; `--workdir=` wrote nothing, exit 0."""
  (tmp_path / 'embeddings.npy').write_text('precious\n')
  for flag, says, code in (
      (f'--workdir={tmp_path}', f'error: {tmp_path}/embeddings.npy was not written by embed (not '
                                'an .npy of unit vectors', 1),
      # Refused as a command (78, before JAX starts: a scheduler does not restart it).
      ('--workdir=', 'error: --workdir= names no folder', console.REFUSED_EXIT),
      ('--workdir=-', 'error: --workdir=- names no folder', console.REFUSED_EXIT)):
    result = _main(minilm_dir, flag)
    assert result.returncode == code and 'Traceback' not in result.stderr, result.stderr[-2000:]
    assert says in result.stderr and 'cosine similarity' not in result.stdout
  assert (tmp_path / 'embeddings.npy').read_text() == 'precious\n'
  assert sorted(os.listdir(tmp_path)) == ['embeddings.npy']


def test_ctrl_c_before_anything_is_written_leaves_no_folder_and_says_so(minilm_dir, tmp_path):
  """A Ctrl-C ends the process without `finally` (console.exit_on_interrupt): the folders embed
  had made stayed, empty, and the last line said they held whole files."""
  (tmp_path / 'in.txt').write_text(''.join(f'sentence {i} of many.\n' for i in range(4000)))
  workdir = tmp_path / 'w' / 'x'
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  process = subprocess.Popen(
      [sys.executable, '-m', 'bertjax.main', f'--config=configs/embed.py:init_from={minilm_dir}',
       f'--config.input_file={tmp_path}/in.txt', f'--workdir={workdir}'],
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
      preexec_fn=default_sigint)
  for _ in range(1200):  # Its lock is taken before the model loads: nothing is written yet.
    if workdir.is_dir() and os.listdir(workdir) or process.poll() is not None:
      break
    time.sleep(0.05)
  process.send_signal(signal.SIGINT)
  _, err = process.communicate(timeout=120)
  assert process.returncode == 130, err[-2000:]
  assert err.strip().splitlines()[-1] == ('interrupted: nothing was written; rerun the same '
                                          'command to start again'), err[-2000:]
  assert os.listdir(tmp_path) == ['in.txt']


def test_an_earlier_embeds_pair_in_a_bucket_is_checked_and_replaced(gcs_bucket):
  """A rerun of embed on a --workdir in a bucket ended in a TypeError traceback (its check of
  the earlier similarity.txt read a line with a limit, which a bucket's file object has not)."""
  workdir = f'{gcs_bucket}/emb'
  vectors = np.eye(2, 4, dtype=np.float32)
  embed_outputs.write(workdir, vectors)
  embed_outputs._check_earlier_outputs(workdir)  # pylint: disable=protected-access
  embed_outputs.write(workdir, vectors[::-1])
  assert np.array_equal(np.load(io.BytesIO(files.read_bytes(f'{workdir}/embeddings.npy'))),
                        vectors[::-1])
  files.write_atomically(f'{workdir}/similarity.txt', 'my notes\n')
  with pytest.raises(FileExistsError, match=r'similarity.txt was not written by embed'):
    embed_outputs._check_earlier_outputs(workdir)  # pylint: disable=protected-access
