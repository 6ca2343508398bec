"""Who holds an output, as a hostile pass met it. With extract_features writing c.jsonl, a
predict on c.jsonl said `another predict run (pid N ...)`, N being extract_features' pid: the
lock records its holder's tool (the lock file's line, the bucket lock's record) and the refusal
names it; a lock of an older version, which recorded none, is `another run`. A killed
extract_features left its whole features file (51 MB seen) in the temporary folder, and no
later run removed it: its name now carries its writer, and a later run removes a dead one's."""

import errno
import fcntl
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from bertjax import extract_features
from bertjax import files
from bertjax import output_lock
from bertjax import processes
from bertjax import remote_lock

REFUSED = r' is writing .*c.jsonl now: wait for it to finish, or pass another --output_file$'


def test_a_local_lock_names_the_tool_that_holds_it(tmp_path):
  out = str(tmp_path / 'c.jsonl')
  with output_lock.held(out, 'extract_features', f'writing {out}'):
    with pytest.raises(ValueError, match=re.escape(
        f'another extract_features run (pid {os.getpid()} on {socket.gethostname()}, since ')
        + r'[^)]*\)' + REFUSED):
      with output_lock.held(out, 'predict', f'writing {out}'):
        pass
  assert os.listdir(tmp_path) == []  # The holder's lock is removed at its end.


def test_a_local_lock_of_an_older_version_names_no_tool(tmp_path):
  out = str(tmp_path / 'c.jsonl')
  with open(tmp_path / '.c.jsonl.lock', 'a+', encoding='utf-8') as lock:  # local: a test file
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    lock.write('pid 8073 on elsewhere, since 2024-01-02 03:04:05\n')  # What they wrote.
    lock.flush()
    with pytest.raises(ValueError, match=re.escape(
        'another run (pid 8073 on elsewhere, since 2024-01-02 03:04:05)') + REFUSED):
      with output_lock.held(out, 'predict', f'writing {out}'):
        pass


def test_a_bucket_lock_names_the_tool_that_holds_it(gcs_bucket, monkeypatch):
  monkeypatch.setattr(remote_lock, 'CONFIRM_S', 0.1)
  out = f'{gcs_bucket}/d/c.jsonl'
  with output_lock.held(out, 'extract_features', f'writing {out}'):
    assert json.loads(files.read_text(f'{gcs_bucket}/d/.c.jsonl.lock'))['tool'] == (
        'extract_features')
    with pytest.raises(ValueError, match=re.escape(
        f'another extract_features run (pid {os.getpid()} on {socket.gethostname()}, running ')
        + r'.*' + REFUSED):
      with output_lock.held(out, 'predict', f'writing {out}'):
        pass
  assert not files.exists(f'{gcs_bucket}/d/.c.jsonl.lock')
  # An older version's record, without the tool: `another run`.
  files.write_atomically(f'{gcs_bucket}/d/.c.jsonl.lock', json.dumps({
      'host': socket.gethostname(), 'pid': os.getpid(), 'since': time.time(), 'started': None,
      'lease_s': 120.0, 'token': 'old', 'renewed': time.time()}))
  with pytest.raises(ValueError, match=re.escape(f'another run (pid {os.getpid()} on ') + r'.*'
                     + REFUSED):
    with output_lock.held(out, 'predict', f'writing {out}'):
      pass


def test_a_killed_runs_features_in_the_temporary_folder_are_removed_by_the_next(
    minilm_dir, tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path / 'temp'))
  (tmp_path / 'temp').mkdir()
  temp = extract_features._temporary_beside(None)  # pylint: disable=protected-access
  assert os.path.basename(temp).startswith(f'bertjax_features-{processes.mark()}-')
  os.unlink(temp)  # local: a test file
  dead = subprocess.run([sys.executable, '-c', 'from bertjax import processes; '
                         'print(processes.mark())'], capture_output=True, text=True,
                        check=True).stdout.strip()  # Its process has ended.
  left = {name: tmp_path / 'temp' / f'bertjax_features-{mark}-a1b2_c3{ext}' for name, mark, ext in (
      ('dead', dead, '.jsonl'), ('live', processes.mark(), '.jsonl'),
      ('elsewhere', 'another-host-1.2', '.jsonl'), ('not ours', dead, '.txt'))}
  left['older'] = tmp_path / 'temp' / 'bertjax_features_a1b2c3.jsonl'  # Unmarked: whose?
  for path in left.values():
    path.write_text('{"linex_index": 0}\n')
  text = tmp_path / 'in.txt'
  text.write_text('The weather is lovely today.\n')
  assert extract_features.run(str(minilm_dir), str(text), '-').lines == 1
  assert capsys.readouterr().out.startswith('{"linex_index": 0, "features": [{"token": "[CLS]"')
  assert sorted(p.name for p in (tmp_path / 'temp').iterdir()) == sorted(
      p.name for name, p in left.items() if name != 'dead')


def test_a_disk_too_full_for_the_holders_line_leaves_no_lock_file(tmp_path, monkeypatch):
  """learn_vocab on a full disk left an empty `.vocab.txt.lock`: the holder's line, written
  after the flock, failed before the `finally` that removes the file."""

  class FullDisk:
    def __init__(self, f):
      self._f = f

    def __getattr__(self, name):
      return getattr(self._f, name)

    def __enter__(self):
      return self

    def __exit__(self, *exc):
      self._f.close()

    def flush(self):
      raise OSError(errno.ENOSPC, 'No space left on device')

  monkeypatch.setattr(output_lock, 'open', lambda *a, **k: FullDisk(open(*a, **k)),
                      raising=False)
  out = str(tmp_path / 'vocab.txt')
  with pytest.raises(OSError, match='No space left on device'):
    with output_lock.held(out, 'learn_vocab', f'writing {out}'):
      pass
  assert os.listdir(tmp_path) == []
  monkeypatch.undo()
  with output_lock.held(out, 'learn_vocab', f'writing {out}'):  # And the next run takes it.
    assert len(os.listdir(tmp_path)) == 1
