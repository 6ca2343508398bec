"""bertjax.files: one set of operations and error messages for local paths and URLs, checked on
a local folder, fsspec's in-memory file system and a real GCS API served locally."""

import hashlib
import os
import socket
import subprocess
import sys
import time

import pytest

from bertjax import file_errors
from bertjax import files
from bertjax import object_store
from bertjax import processes


@pytest.fixture(params=['local', 'memory', 'gcs'])
def root(request, tmp_path):
  if request.param == 'local':
    return str(tmp_path)
  if request.param == 'memory':  # Its "bucket" made first: a test run alone finds it too.
    files.write_atomically('memory://files_test/.bucket', b'')
    return f'memory://files_test/{tmp_path.name}'
  return request.getfixturevalue('gcs_bucket')


def test_write_read_list_and_remove(root):
  files.write_atomically(files.join(root, 'd', 'a.txt'), 'héllo\n')
  files.write_atomically(files.join(root, 'd', 'e', 'b.bin'), b'\xff\x00')
  assert files.read_text(files.join(root, 'd', 'a.txt')) == 'héllo\n'
  assert files.read_bytes(files.join(root, 'd', 'e', 'b.bin')) == b'\xff\x00'
  assert files.isdir(files.join(root, 'd')) and not files.isfile(files.join(root, 'd'))
  assert files.isfile(files.join(root, 'd', 'a.txt'))
  assert files.size(files.join(root, 'd', 'a.txt')) == len('héllo\n'.encode())
  assert files.listdir(files.join(root, 'd')) == ['a.txt', 'e']
  assert [files.name(p) for p in files.glob(files.join(root, 'd', '*.txt'))] == ['a.txt']
  assert files.walk_files(files.join(root, 'd')) == ['a.txt', 'e/b.bin']
  with files.open(files.join(root, 'd', 'a.txt')) as f:
    assert f.read() == 'héllo\n'
  with files.open(files.join(root, 'w.txt'), 'w') as f:
    f.write('one\n')
  assert files.read_text(files.join(root, 'w.txt')) == 'one\n'
  files.copy(files.join(root, 'd', 'a.txt'), files.join(root, 'copy.txt'))
  assert files.read_text(files.join(root, 'copy.txt')) == 'héllo\n'
  files.remove(files.join(root, 'copy.txt'))
  assert not files.exists(files.join(root, 'copy.txt'))
  files.rmtree(files.join(root, 'd'))
  assert not files.exists(files.join(root, 'd'))


@pytest.mark.parametrize('end', [b'\r', b'\r\r', b'\n', b'\r\n', b'\x00', b''])
def test_bytes_come_back_whole_whatever_they_end_with(root, end):
  """Every byte, the last one too: the bucket tests' emulator once dropped a final \r (its
  multipart parser), which cut the last record of 1 in 256 TensorBoard event files."""
  data = bytes(range(256)) + end
  files.write_atomically(files.join(root, 'b.bin'), data)
  assert files.read_bytes(files.join(root, 'b.bin')) == data
  with files.open(files.join(root, 'o.bin'), 'wb') as f:
    f.write(data)
  assert files.read_bytes(files.join(root, 'o.bin')) == data


def test_a_files_version_changes_when_it_is_rewritten_even_at_the_same_size(root):
  path = files.join(root, 'v', 'a.bin')
  files.write_atomically(path, b'one')
  first = files.version(path)
  assert first and first == files.version(path)
  time.sleep(0.01)  # Past the modification time's resolution (a local file's: nanoseconds).
  files.write_atomically(path, b'two')
  assert files.version(path) not in ('', first)
  assert files.sha256(path) == hashlib.sha256(b'two').hexdigest()
  with pytest.raises(FileNotFoundError, match='nothing.bin'):
    files.version(files.join(root, 'v', 'nothing.bin'))


def test_errors_name_the_path_as_given(root):
  missing = files.join(root, 'nope.txt')
  with pytest.raises(FileNotFoundError, match=f'^{missing} does not exist'):
    files.read_bytes(missing)
  files.write_atomically(files.join(root, 'd', 'bad.txt'), b'ok \xc3\x28')
  with pytest.raises(ValueError, match=r'bad.txt is not UTF-8 text \(byte 3\): re-encode it'):
    files.read_text(files.join(root, 'd', 'bad.txt'))
  with pytest.raises(IsADirectoryError):
    files.read_bytes(files.join(root, 'd'))


def test_a_file_to_write_ending_in_a_slash_is_refused(root):
  """`--output_file=gs://b/vocab/` would otherwise become an object named `vocab/`."""
  for write in (lambda p: files.write_atomically(p, 'x'), lambda p: files.open(p, 'w')):
    with pytest.raises(IsADirectoryError, match=r'out/ ends in /: name the file to write'):
      write(files.join(root, 'out/'))
  assert not files.exists(files.join(root, 'out'))


def test_writing_over_a_local_folder_names_the_folder(tmp_path):
  with pytest.raises(IsADirectoryError, match=f'^{tmp_path} is a folder: name the file'):
    files.write_atomically(str(tmp_path), 'x')
  assert not os.listdir(tmp_path)


def _killed_mark() -> str:
  """processes.mark() of a process of this host that was killed (SIGKILL: no clean-up ran)."""
  child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
  started = processes.start_ticks(child.pid)
  child.kill()
  child.wait()
  return f'{socket.gethostname()}-{child.pid}.{started}'


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
  """SIGKILL leaves a writer's hidden temporary file (a killed extract_features: a whole
  output's size); the next write of that file removes it. A live writer's (this process, as
  another writer of it would be), another host's (a shared disk) and another file's stay."""
  killed = tmp_path / f'.out.jsonl.{_killed_mark()}.tmp'
  live = tmp_path / f'.out.jsonl.{processes.mark()}.tmp'
  elsewhere = tmp_path / f'.out.jsonl.{socket.gethostname()}x-1.1.tmp'
  other_file = tmp_path / f'.other.jsonl.{_killed_mark()}.tmp'
  for path in (killed, live, elsewhere, other_file):
    path.write_text('half')
  temp = files.temporary_beside(str(tmp_path / 'out.jsonl'))
  assert temp == str(live)
  assert not killed.exists()
  assert elsewhere.exists() and other_file.exists() and live.exists()
  live.unlink()
  files.write_atomically(str(tmp_path / 'other.jsonl'), 'whole')
  assert sorted(os.listdir(tmp_path)) == sorted([elsewhere.name, 'other.jsonl'])


def test_local_copy_and_staged_folder(root, tmp_path):
  files.write_atomically(files.join(root, 'src', 'x', 'y.txt'), 'y')
  with files.local_copy(files.join(root, 'src')) as local:
    assert os.path.isdir(local)
    with open(os.path.join(local, 'x', 'y.txt'), encoding='utf-8') as f:
      assert f.read() == 'y'
  with files.staged_folder(files.join(root, 'out')) as local:
    with open(os.path.join(local, 'z.txt'), 'w', encoding='utf-8') as f:
      f.write('z')
  assert files.read_text(files.join(root, 'out', 'z.txt')) == 'z'
  if not files.is_remote(root):
    return  # a local folder is written in place (its writers use write_atomically)
  # A failed block uploads nothing.
  with pytest.raises(RuntimeError):
    with files.staged_folder(files.join(root, 'failed')) as local:
      with open(os.path.join(local, 'z.txt'), 'w', encoding='utf-8') as f:
        f.write('z')
      raise RuntimeError('boom')
  assert not files.exists(files.join(root, 'failed', 'z.txt'))


def test_missing_bucket_is_named(gcs_emulator):  # pylint: disable=unused-argument
  with pytest.raises(FileNotFoundError,
                     match=r'^gs://no-such-bucket-xyz/run/config.json: the bucket '
                           r'gs://no-such-bucket-xyz does not exist'):
    files.read_text('gs://no-such-bucket-xyz/run/config.json')
  with pytest.raises(FileNotFoundError, match=r'^gs://no-such-bucket-xyz/out.txt: the bucket'):
    files.check_bucket('gs://no-such-bucket-xyz/out.txt')  # Before a writer's work.
  files.check_bucket('/no/such/local/folder/out.txt')  # Local paths: nothing to check.


@pytest.mark.usefixtures('gcs_emulator')
def test_a_missing_buckets_root_is_named_as_the_bucket():
  """`export --output=gs://typo` was refused only at its first put, named by that object's URL
  (gs://typo/.bertjax_export_manifest.json): the bucket given is named, once, before any work."""
  for url in ('gs://no-such-bucket-xyz', 'gs://no-such-bucket-xyz/'):
    with pytest.raises(FileNotFoundError, match=r'^the bucket gs://no-such-bucket-xyz does not '
                                                r'exist or these credentials cannot see it'):
      files.check_bucket(url)
  with pytest.raises(FileNotFoundError, match=r'^the bucket gs://no-such-bucket-xyz does not'):
    files.listdir('gs://no-such-bucket-xyz')


def test_a_url_with_repeated_slashes_is_the_one_place_orbax_writes(root):
  """`--workdir=gs://b//ds` (`gs://b/` + `/ds`): fsspec alone put config.json, results and events
  under objects named `b//ds/...` while orbax put checkpoints under `b/ds/`, and nothing found
  the run again. Every spelling is one place, as a local path's // is."""
  given = root + '//ds//d/a.txt'
  files.write_atomically(given, 'one\n')
  with files.open(root + '//ds/w.txt', 'w') as f:
    f.write('two\n')
  assert files.read_text(files.join(root, 'ds', 'd', 'a.txt')) == 'one\n'
  assert files.read_text(root + '/ds//w.txt') == 'two\n'
  assert files.walk_files(root) == ['ds/d/a.txt', 'ds/w.txt']  # No object named `/ds/...`.
  assert files.listdir(root + '//ds') == ['d', 'w.txt']
  assert files.isfile(root + '/ds//d//a.txt') and files.isdir(root + '//ds//d/')
  assert [files.name(p) for p in files.glob(root + '//ds//d/*.txt')] == ['a.txt']
  files.remove(root + '//ds//w.txt')
  assert not files.exists(files.join(root, 'ds', 'w.txt'))
  if files.is_remote(root):
    protocol, rest = root.split('://', 1)
    assert files.normalised(f'{root}//ds///') == f'{protocol}://{rest}/ds/'  # Still a folder.
  assert files.normalised('https://host//x?u=http://y') == 'https://host//x?u=http://y'


def test_a_file_under_a_file_is_refused_alike(root):
  """gs://b/in.txt/f.jsonl with gs://b/in.txt a file was put, making in.txt a file and a folder
  at once; a disk refuses it. Every writer refuses it in the same line, and writes nothing."""
  files.write_atomically(files.join(root, 'in.txt'), 'kept\n')
  folder = files.join(root, 'in.txt')
  writes = {files.join(folder, 'f.jsonl'): lambda p: files.write_atomically(p, 'x'),
            files.join(folder, 'd', 'o.jsonl'): lambda p: files.open(p, 'w').close(),
            files.join(folder, 'logs'): files.makedirs,
            files.join(folder, 'shard'): files.check_bucket if files.is_remote(root) else (
                files.check_folders)}
  for path, write in writes.items():
    with pytest.raises(NotADirectoryError,
                       match=f'^cannot write {path}: {folder} is a file, not a directory: move '
                       'that file aside, or write elsewhere$'):
      write(path)
  with pytest.raises(NotADirectoryError, match=f'^cannot write {folder}: {folder} is a file'):
    files.makedirs(folder)
  assert files.read_text(folder) == 'kept\n' and files.walk_files(root) == ['in.txt']


def test_the_folders_of_a_url_are_asked_about_once(monkeypatch, gcs_bucket):
  """A run puts its event file and lock again every few seconds, a writer its shards one by one:
  the folders above a URL are asked about (one isfile each) at its first write only."""
  fs, _ = files.object_store.client(gcs_bucket)
  asked = []
  isfile = fs.isfile
  monkeypatch.setattr(fs, 'isfile', lambda p: asked.append(p) or isfile(p))
  bucket = gcs_bucket[len('gs://'):]
  files.write_atomically(f'{gcs_bucket}/run/events/a', 'x')
  assert asked == [f'{bucket}/run/events', f'{bucket}/run']
  asked.clear()
  for _ in range(3):
    files.write_atomically(f'{gcs_bucket}/run/events/a', 'x')
  files.write_atomically(f'{gcs_bucket}/run/config.json', '{}')
  with files.open(f'{gcs_bucket}/run/results.json', 'w') as f:
    f.write('{}')
  assert not asked
  files.write_atomically(f'{gcs_bucket}/run/checkpoints/1', '{}')
  assert asked == [f'{bucket}/run/checkpoints']


def test_a_scheme_without_its_client_names_the_url(monkeypatch):
  """s3:// with s3fs missing says which package to install; a scheme fsspec does not know (a
  typo) says to check the URL, not to install something; both name the URL as given."""
  from fsspec.registry import known_implementations  # pylint: disable=g-import-not-at-top
  monkeypatch.setitem(known_implementations, 'nos3',
                      {'class': 'no_such_module_xyz.S3', 'err': 'Install s3fs to access S3'})
  with pytest.raises(ValueError, match=r'^nos3://b/in.txt: nos3:// paths need a file system '
                                       r'client: install the fsspec package'):
    files.read_text('nos3://b/in.txt')
  with pytest.raises(ValueError, match=r'^g://b/in.txt: g:// is not a file system fsspec knows: '
                                       r'check the URL'):
    files.exists('g://b/in.txt')


def test_a_glob_in_a_bucket_skips_hidden_names_as_on_a_disk(gcs_bucket, tmp_path):
  """fsspec's glob matched `.corpus.txt.lock`: learn_vocab read its own lock object as text."""
  for folder in (gcs_bucket, str(tmp_path)):
    files.write_atomically(f'{folder}/c/a.txt', 'a')
    files.write_atomically(f'{folder}/c/.vocab.txt.lock', '{}')
    assert [files.name(p) for p in files.glob(f'{folder}/c/*')] == ['a.txt'], folder
    assert [files.name(p) for p in files.glob(f'{folder}/c/.*.lock')] == ['.vocab.txt.lock']


def test_hdfs_without_a_jvm_is_one_line_not_a_hundred_dlopen_lines(monkeypatch):
  """pyarrow's libhdfs without Java: its OSError listed every libjvm path it tried (~14 KB)."""
  import fsspec  # pylint: disable=g-import-not-at-top

  def no_jvm(protocol, **_):
    raise OSError('Unable to load libjvm\n' + 'dlopen(/usr/lib/jvm/x/libjvm.so) failed\n' * 99)

  monkeypatch.setattr(fsspec, 'filesystem', no_jvm)
  object_store.filesystem.cache_clear()
  try:
    with pytest.raises(ValueError) as e:
      files.exists('hdfs://nn:8020/corpus/in.txt')
    assert str(e.value) == (
        "hdfs://nn:8020/corpus/in.txt: hdfs:// paths need Hadoop's client on this machine, which "
        'pyarrow could not start (Unable to load libjvm): set JAVA_HOME, HADOOP_HOME and '
        'CLASSPATH (`hadoop classpath --glob`), or copy the files to a local disk or a bucket.')
    with pytest.raises(OSError, match='Unable to load'):  # Another scheme's OSError is its own.
      files.exists('memory://b/in.txt')
  finally:
    object_store.filesystem.cache_clear()


def test_no_network_is_one_line_within_a_minute(tmp_path):
  """A gs:// URL with the service unreachable (a closed local port stands for no network)."""
  env = dict(os.environ, STORAGE_EMULATOR_HOST='http://127.0.0.1:9')
  start = time.time()
  result = subprocess.run(
      [sys.executable, '-c', 'from bertjax import files\n'
       'try:\n  files.read_text("gs://some-bucket/run/config.json")\n'
       'except ConnectionError as e:\n  print("ERROR", e)\n'],
      env=env, capture_output=True, text=True, timeout=120, check=True)
  assert time.time() - start < 60
  line = [x for x in result.stdout.splitlines() if x.startswith('ERROR')]
  assert len(line) == 1 and 'gs://some-bucket/run/config.json' in line[0], result.stdout
  assert 'cannot be reached' in line[0]




def test_the_network_gone_mid_command_is_said_not_taken_for_no_such_file():
  """fsspec's isfile and isdir answer False to any error: with the network gone after the
  command's first reach (a closed port; gcsfs' back-off cut to nothing), a run's folder was no
  folder and a file missing ('does not exist'), and a checkpoint read so was called damaged."""
  env = dict(os.environ, STORAGE_EMULATOR_HOST='http://127.0.0.1:9')
  code = ('import asyncio\nfrom bertjax import files, object_store\n'
          'object_store.REACHED.add("gs")\nsleep = asyncio.sleep\n'
          'async def quick(delay, *args, **kwargs):\n  await sleep(0)\n'
          'asyncio.sleep = quick\n'
          'url = "gs://some-bucket/run/config.json"\n'
          'for ask in (files.isdir, files.isfile, files.listdir, files.read_text, files.open):\n'
          '  try:\n    print("ANSWER", ask.__name__, ask(url))\n'
          '  except OSError as e:\n    print("ERROR", ask.__name__, type(e).__name__, e)\n')
  result = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
  lines = [x for x in result.stdout.splitlines() if x.startswith(('ANSWER', 'ERROR'))]
  assert len(lines) == 5, (result.stdout, result.stderr[-2000:])
  for line in lines:
    assert line.split(' ', 3)[::2] == ['ERROR', 'ConnectionError'], lines
    assert line.split(' ', 3)[3].startswith('gs://some-bucket/run/config.json: the storage '
                                            'service cannot be reached'), lines


def test_a_storage_server_that_never_answers_is_one_line_not_a_hang(tmp_path):
  """A service that takes the connection and sends nothing (gcsfs' default: no time limit at
  all) held a tool for good without a word. Here the limit is cut to 0.3 s and gcsfs' back-off
  between its tries (~30 s) to nothing."""
  server = socket.socket()
  server.bind(('127.0.0.1', 0))
  server.listen(16)
  held = []
  import threading  # pylint: disable=g-import-not-at-top
  threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(64)],
                   daemon=True).start()
  env = dict(os.environ, STORAGE_EMULATOR_HOST=f'http://127.0.0.1:{server.getsockname()[1]}')
  code = ('import asyncio\nfrom bertjax import files, object_store\n'
          'object_store.STALL_S = 0.3\nsleep = asyncio.sleep\n'
          'async def quick(delay, *args, **kwargs):\n  await sleep(0)\n'
          'asyncio.sleep = quick\n'
          'try:\n  files.read_text("gs://some-bucket/run/config.json")\n'
          'except ConnectionError as e:\n  print("ERROR", e)\n')
  try:
    result = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True,
                            text=True, timeout=120, check=True)
  finally:
    server.close()
  line = [x for x in result.stdout.splitlines() if x.startswith('ERROR')]
  assert len(line) == 1, (result.stdout, result.stderr[-2000:])
  assert line[0].startswith('ERROR gs://some-bucket/run/config.json: the storage service cannot '
                            'be reached'), line
  assert 'no answer (no data for 0.3 s) on each of its tries' in line[0], line


def test_the_clients_errors_become_one_set():
  """What gcsfs raises for no permission (403 as OSError 'Forbidden', 401 as HttpError) and for
  a service that keeps failing (5xx, aiohttp) turns into the layer's messages."""
  import gcsfs.retry  # pylint: disable=g-import-not-at-top
  url = 'gs://bucket/run/config.json'
  for error in (OSError(f'Forbidden: {url}\nno access'),
                gcsfs.retry.HttpError({'code': 401, 'message': 'Unauthorized'})):
    described = file_errors.describe(error, url)
    assert isinstance(described, PermissionError)
    assert str(described).startswith(f'{url}: no permission: check the bucket name, your '
                                     'credentials')
  for error in (gcsfs.retry.HttpError({'code': 503, 'message': 'Service Unavailable'}),
                TimeoutError('timed out')):
    described = file_errors.describe(error, url)
    assert isinstance(described, ConnectionError)
    assert str(described).startswith(f'{url}: the storage service cannot be reached')
  local = file_errors.describe(PermissionError(13, 'denied'), '/data/x')
  assert str(local) == ('/data/x: no permission: check its owner and mode (ls -l) or write '
                        'elsewhere.')
  other = ValueError('a bug')
  assert file_errors.describe(other, url) is other


def test_a_replaced_file_keeps_its_permissions_and_a_read_only_one_is_refused(tmp_path):
  """Pass AL: a 600 output came back 644 after a run replaced it; a 444 one was replaced."""
  private = tmp_path / 'private.jsonl'
  private.write_text('old\n')
  private.chmod(0o600)
  files.write_atomically(str(private), 'new\n')
  assert private.read_text() == 'new\n' and private.stat().st_mode & 0o777 == 0o600
  private.chmod(0o444)
  with pytest.raises(PermissionError, match=r'private.jsonl is read-only \(mode 444\): make it '
                     r'writable \(chmod u\+w\) to replace it, or write elsewhere'):
    files.write_atomically(str(private), 'newer\n')
  assert private.read_text() == 'new\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['private.jsonl']


def test_a_link_is_replaced_as_a_link_whatever_its_targets_permissions(tmp_path):
  """Review: the read-only check followed a link (a git-annex or DVC output) that the write
  replaces as a link, leaving its target as it was."""
  target = tmp_path / 'annexed'
  target.write_text('object\n')
  target.chmod(0o444)
  link = tmp_path / 'out.txt'
  link.symlink_to(target)
  files.write_atomically(str(link), 'new\n')
  assert not link.is_symlink() and link.read_text() == 'new\n'
  assert target.read_text() == 'object\n'


def test_a_byte_that_is_not_utf8_is_named_by_its_line_whatever_the_line_breaks(tmp_path):
  """Lines ended by a lone \\r were all line 1 in the error (split_lines breaks at \\r too)."""
  from bertjax import text_files  # pylint: disable=g-import-not-at-top
  for ending in (b'\n', b'\r\n', b'\r'):
    path = tmp_path / f'bad{len(ending)}{ending[-1]}.txt'
    path.write_bytes(ending.join([b'ok', b'fine', b'\xff bad', b'']))
    with pytest.raises(ValueError, match=r'\.txt:3 is not UTF-8 text'):
      text_files.read_text_lines(path)
