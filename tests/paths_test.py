"""Paths are made absolute at the start of a job."""

import io
import os
import re
import shutil
import stat
import subprocess
import sys

import ml_collections
import pytest

from bertjax import paths
from bertjax import text_files
from bertjax.interop import init_from


def test_config_paths_become_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  config = ml_collections.ConfigDict({
      'init_from': 'runs/pre', 'seed': 3, 'name': 'relative/not/a/path',
      'data': {'train_files': 'a/train-*,gs://b/train-*', 'vocab_file': '~/v.txt',
               'eval_files': ''},
      'checkpoint': {'keep': 2}})
  config.lock()
  paths.absolute_config(config)
  assert config.init_from == str(tmp_path / 'runs/pre')
  assert config.data.train_files == f'{tmp_path}/a/train-*,gs://b/train-*'
  assert config.data.vocab_file.endswith('/v.txt') and not config.data.vocab_file.startswith('~')
  assert config.data.eval_files == '' and config.name == 'relative/not/a/path'
  assert config.checkpoint.keep == 2 and config.seed == 3


def test_a_relative_init_from_is_resolved(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  config = ml_collections.ConfigDict({'init_from': 'pre'})
  assert init_from.configured(config) == str(tmp_path / 'pre')
  assert paths.absolute('gs://bucket/dir') == 'gs://bucket/dir'


def test_read_text_lines_names_the_flag_and_the_fix(tmp_path):
  (tmp_path / 'ok.txt').write_text('a\nb ||| c\n', encoding='utf-8')
  assert text_files.read_text_lines(tmp_path / 'ok.txt') == ['a', 'b ||| c']
  with pytest.raises(FileNotFoundError, match='--input_file=.*none.txt does not exist'):
    text_files.read_text_lines(tmp_path / 'none.txt')
  (tmp_path / 'l1.txt').write_bytes('caf\xe9\n'.encode('latin-1'))
  with pytest.raises(ValueError, match='is not UTF-8 text .byte 3.: re-encode it'):
    text_files.read_text_lines(tmp_path / 'l1.txt')


# Characters str.splitlines() breaks at but that a user's line may hold (a JSON string, a CSV
# field, pasted text): none of them ends a line.
NOT_LINE_BREAKS = '\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e'


def test_split_lines_breaks_only_at_newline_cr_lf_and_cr():
  text = '\ufeffa' + NOT_LINE_BREAKS + 'b\r\nc\rd\n\ne\n'
  assert text_files.split_lines(text) == ['a' + NOT_LINE_BREAKS + 'b', 'c', 'd', '', 'e']
  assert text_files.split_lines('') == [] and text_files.split_lines('x') == ['x']
  assert text_files.split_lines('x\n\n') == ['x', ''] and text_files.split_lines('\ufeff') == []


def test_read_text_lines_keeps_one_line_per_line_and_drops_the_bom(tmp_path):
  path = tmp_path / 'in.txt'
  path.write_bytes(('\ufefffirst' + NOT_LINE_BREAKS + 'still first\r\nsecond\rthird\n')
                   .encode('utf-8'))
  assert text_files.read_text_lines(path) == ['first' + NOT_LINE_BREAKS + 'still first', 'second',
                                         'third']


def test_read_stdin_lines_is_utf8_with_the_same_rules(monkeypatch):
  data = '\ufeff{"text": "a\u2028b"}\nc\x0cd\n'.encode('utf-8')
  monkeypatch.setattr('sys.stdin', io.TextIOWrapper(io.BytesIO(data), encoding='latin-1'))
  assert text_files.read_stdin_lines() == ['{"text": "a\u2028b"}', 'c\x0cd']
  monkeypatch.setattr('sys.stdin', io.TextIOWrapper(io.BytesIO(b'caf\xe9\n')))
  with pytest.raises(ValueError, match=r'<stdin>:1 is not UTF-8 text \(byte 3\): re-encode it'):
    text_files.read_stdin_lines()


def test_blank_lines_are_named(tmp_path):
  assert text_files.check_no_blank_lines(['a', 'b'], 'in.txt') == ['a', 'b']
  with pytest.raises(ValueError, match=r'in.txt:2 is empty: one input per line \(remove blank'):
    text_files.check_no_blank_lines(['a', ' \t', 'b'], 'in.txt')
  # Blank lines at the end (an editor's) shift no output: dropped (pass AJ: refused).
  assert text_files.check_no_blank_lines(['a', 'b', '', ' '], 'in.txt') == ['a', 'b']


def test_an_existing_path_with_commas_is_one_path(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'my,data.csv').write_text('text,label\n')
  assert paths.split_list(' my,data.csv ') == ['my,data.csv']
  assert paths.absolute_list('my,data.csv') == str(tmp_path / 'my,data.csv')
  assert paths.absolute_list('a.csv, b.csv') == f'{tmp_path}/a.csv,{tmp_path}/b.csv'
  config = ml_collections.ConfigDict({'data': {'train_file': 'my,data.csv'}})
  assert paths.absolute_config(config).data.train_file == str(tmp_path / 'my,data.csv')
  # Made absolute once, it stays one path for every later reader.
  assert paths.split_list(config.data.train_file) == [str(tmp_path / 'my,data.csv')]


def test_pretraining_inputs_with_commas_in_a_name(tmp_path):
  (tmp_path / 'my,corpus.txt').write_text('a sentence.\n')
  (tmp_path / 'b.txt').write_text('b sentence.\n')
  assert paths.expand_input_patterns(str(tmp_path / 'my,corpus.txt')) == [
      str(tmp_path / 'my,corpus.txt')]
  assert paths.expand_input_patterns(f'{tmp_path}/b.txt,{tmp_path}/b.txt') == [
      str(tmp_path / 'b.txt')]


def test_a_folder_given_as_a_text_file_is_named_as_a_folder(tmp_path):
  with pytest.raises(IsADirectoryError, match='--input_file=.* is a folder'):
    text_files.read_text_lines(tmp_path)


@pytest.mark.parametrize('where', ['local', 'gcs'])
def test_an_output_file_ending_in_a_slash_is_refused(where, tmp_path, request):
  """`--output_file=gs://b/out/` would be put as an object named `out/` (a folder's marker to
  every GCS tool), a local one written as the file `out`: both are refused before any work."""
  root = str(tmp_path) if where == 'local' else request.getfixturevalue('gcs_bucket')
  with pytest.raises(IsADirectoryError, match=r'--output_file=.*/new/ names a folder'):
    paths.check_output_file(f'{root}/new/')
  assert paths.check_output_file(f'{root}/new/out.jsonl').endswith('/new/out.jsonl')


@pytest.mark.usefixtures('gcs_emulator')
def test_an_output_file_in_a_missing_bucket_is_refused():
  with pytest.raises(FileNotFoundError, match='^gs://no-such-bucket-xyz/o.jsonl: the bucket'):
    paths.check_output_file('gs://no-such-bucket-xyz/o.jsonl')


def test_a_file_url_is_a_local_path(tmp_path):
  """export --output=file:///... renamed its finished folder to the URL itself (failing after
  the work): the OS calls after absolute() take no URL."""
  assert paths.absolute(f'file://{tmp_path}/out') == f'{tmp_path}/out'
  assert paths.absolute(f'file://localhost{tmp_path}/out') == f'{tmp_path}/out'
  assert paths.absolute('gs://b/out') == 'gs://b/out'
  # Session 54's export pass: `file://` was the current folder; a host was read as a folder.
  with pytest.raises(ValueError, match='^file:// names no local path: write file:///ABSOLUTE'):
    paths.absolute('file://')
  with pytest.raises(ValueError, match='^file://server/share/out names the host server: a '
                     r'file:// URL here is a path on this machine'):
    paths.absolute('file://server/share/out')
  assert paths.absolute(f'FILE://{tmp_path}/out') == f'{tmp_path}/out'  # Schemes are case-blind.


def test_an_output_anywhere_inside_a_run_is_refused(tmp_path):
  """predict --output_file=RUN/predictions/step_8/sst2_dev.tsv overwrote the run's own
  predictions: only the output's folder and its parent were checked for a run."""
  run = tmp_path / 'run'
  (run / 'checkpoints').mkdir(parents=True)
  (run / 'config.json').write_text('{"job": "finetune"}')
  existing = run / 'predictions' / 'step_8' / 'sst2_dev.tsv'
  existing.parent.mkdir(parents=True)
  existing.write_text('guid\tlabel\tprediction\n')
  with pytest.raises(FileExistsError, match=f'sst2_dev.tsv exists in a bertjax run \\({run}\\)'):
    paths.check_output_file(existing)
  new = run / 'predictions' / 'step_8' / 'deeper' / 'new.jsonl'
  with pytest.raises(FileExistsError, match=f'new.jsonl would be in a bertjax run \\({run}\\)'):
    paths.check_output_file(new)
  assert existing.read_text() == 'guid\tlabel\tprediction\n'
  assert paths.check_output_file(tmp_path / 'beside' / 'out.jsonl') == str(
      tmp_path / 'beside' / 'out.jsonl')


def test_an_output_that_is_a_link_writes_the_file_it_points_to(tmp_path):
  """predict --output_file=o/link.jsonl replaced the link by a regular file and never wrote
  its target: the atomic write's rename landed on the link."""
  (tmp_path / 'data').mkdir()
  target = tmp_path / 'data' / 'target.jsonl'
  target.write_text('old\n')
  (tmp_path / 'o').mkdir()
  link = tmp_path / 'o' / 'link.jsonl'
  link.symlink_to('../data/target.jsonl')  # Relative: resolved from the link's folder.
  out = paths.check_output_file(link)
  assert out == str(target)
  paths.write_atomically(out, 'new\n')
  assert link.is_symlink() and target.read_text() == 'new\n'
  assert sorted(p.name for p in target.parent.iterdir()) == ['target.jsonl']  # No temp left.
  dangling = tmp_path / 'o' / 'dangling.jsonl'  # A link to a file not written yet: as `>`.
  dangling.symlink_to(tmp_path / 'data' / 'later.jsonl')
  paths.write_atomically(paths.check_output_file(dangling), 'x\n')
  assert dangling.is_symlink() and (tmp_path / 'data' / 'later.jsonl').read_text() == 'x\n'


def test_an_output_that_is_not_a_regular_file_is_refused(tmp_path):
  """--output_file=/dev/null (a fifo stands for a device here) was replaced by a regular file:
  as root, that damages /dev/null for every program."""
  fifo = tmp_path / 'fifo'
  os.mkfifo(fifo)
  link = tmp_path / 'link.jsonl'
  link.symlink_to(fifo)  # /dev/stdout is a link too.
  for given in (fifo, link):
    with pytest.raises(ValueError, match=f'^--output_file={given} is not a regular file '
                       r'\(a device, fifo or socket\): pass a file path\.$'):
      paths.check_output_file(given)
  assert stat.S_ISFIFO(os.stat(fifo).st_mode) and link.is_symlink()


def test_a_url_with_repeated_slashes_is_made_one_spelling(tmp_path, monkeypatch):
  """`--workdir=gs://b//ds` (`gs://b/` + `/ds`): the jobs hand the workdir, init_from and every
  path field to bertjax's files, orbax and TensorFlow as paths.absolute makes them, so all of
  them name gs://b/ds, as orbax does by itself; an output that is its input spelled otherwise
  is that input."""
  monkeypatch.chdir(tmp_path)
  assert paths.absolute('gs://b//ds') == 'gs://b/ds'
  assert paths.absolute('gs://b///runs//x/') == 'gs://b/runs/x/'  # Still a folder.
  config = ml_collections.ConfigDict({
      'init_from': 'gs://b//pre', 'data': {'train_files': 'gs://b//t/train-*,a//b.txt'}})
  paths.absolute_config(config)
  assert config.init_from == 'gs://b/pre'
  assert config.data.train_files == f'gs://b/t/train-*,{tmp_path}/a/b.txt'
  assert paths.same_path('gs://b//in.txt', 'gs://b/in.txt/')
  assert paths.each_file_once(['gs://b/x', 'gs://b//x']) == ['gs://b/x']
  given = f'memory://paths_test/{tmp_path.name}//in.txt'
  paths.write_atomically(given, 'a\n')
  with pytest.raises(FileExistsError, match='is the input it is made from'):
    paths.check_output_file(f'memory://paths_test/{tmp_path.name}/in.txt', inputs=(given,))


@pytest.mark.parametrize('where', ['local', 'gcs'])
def test_an_output_under_a_file_is_refused_before_any_work(where, tmp_path, request):
  """extract_features --output_file=gs://b/in.txt/f.jsonl (gs://b/in.txt a file) ran to its
  end and put the object, making in.txt a file and a folder at once; a local one failed only
  at its first write. Both are refused first, in the same line."""
  root = str(tmp_path) if where == 'local' else request.getfixturevalue('gcs_bucket')
  paths.write_atomically(f'{root}/in.txt', 'a\n')
  for output in (f'{root}/in.txt/f.jsonl', f'{root}/in.txt/sub/f.jsonl'):
    with pytest.raises(NotADirectoryError, match=f'^cannot write {output}: {root}/in.txt is a '
                                                 'file, not a directory: move that file aside, '
                                                 'or write elsewhere$'):
      paths.check_output_file(output)


def test_a_run_before_its_first_checkpoint_is_a_run(tmp_path):
  """Pass R: a run in a bucket has no checkpoints/ until its first save (object stores hold no
  empty folders): its config.json was taken for a transformers model's ('lacks vocab_size ...:
  not a BERT config'), and a tool could write into the run. Its config.json names its job."""
  from bertjax.interop import sources  # pylint: disable=g-import-not-at-top
  run, model = tmp_path / 'run', tmp_path / 'model'
  run.mkdir()
  model.mkdir()
  (run / 'config.json').write_text('{"job": "finetune", "model": {}}')
  (model / 'config.json').write_text('{"hidden_size": 8}')
  assert paths.is_run(str(run)) and not paths.is_run(str(model))
  assert sources.format_of(str(run)) == 'bertjax' and sources.format_of(str(model)) == 'hf'
  with pytest.raises(FileNotFoundError,
                     match=f'{run} holds no checkpoint: pass a run that saved one'):
    sources.load(str(run))
  # A run whose checkpoints were moved away (its evals recorded): not told to train it first.
  (run / 'checkpoints_saved.json').write_text('{"newest_step": 19}')
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'{run} records checkpoints up to step 19 (checkpoints_saved.json) but its checkpoints/ '
      'holds no checkpoint: its checkpoints were moved or deleted. Put them back')):
    sources.load(str(run))
  (run / 'checkpoints_saved.json').unlink()
  with pytest.raises(FileExistsError, match=f'would be in a bertjax run \\({run}\\)'):
    paths.check_output_file(str(run / 'out' / 'p.jsonl'))


def test_a_file_not_utf8_names_the_encoding_to_convert_from(tmp_path):
  """A UTF-16 or UTF-32 file (Notepad's 'Unicode', PowerShell's `>`) was told to convert from
  Latin-1; each is named by its byte-order mark, and Latin-1 stays the guess for the rest."""
  for encoding, name in (('latin-1', 'latin1'), ('utf-16', 'UTF-16'), ('utf-32', 'UTF-32')):
    path = tmp_path / f'{encoding}.txt'
    path.write_bytes('a line, café\nand another\n'.encode(encoding))
    said = (rf'{path}:1 is not UTF-8 text \(byte 11\)' if encoding == 'latin-1' else
            rf'{path} is {name} text, not UTF-8')  # Told by its first bytes.
    with pytest.raises(ValueError, match=rf'^{said}: re-encode it \(e\.g\. iconv -f {name} -t '
                       r'utf-8\)\.$'):
      text_files.read_text_lines(str(path))


@pytest.mark.parametrize('path, fix', [
    ('gs:/tmp/x', 'gs://tmp/x'), ('S3:/bucket/a', 'S3://bucket/a'),
    ('https:/host/f.txt', 'https://host/f.txt'), ('file:/tmp/x', 'file:///tmp/x')])
def test_a_url_missing_a_slash_is_refused_not_made_a_local_folder(path, fix, tmp_path,
                                                                  monkeypatch):
  """`gs:/tmp/x` was the local folder ./gs:/tmp/x in the current directory."""
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError, match=f'^{path} looks like a URL missing a slash: write {fix} '
                     rf'\(or ./{path} for a local folder\)$'):
    paths.absolute(path)
  with pytest.raises(ValueError, match='looks like a URL missing a slash'):
    paths.expand_input_patterns(path)
  assert paths.absolute(f'./{path}') == f'{tmp_path}/{path}'
  assert paths.absolute('gsx:/y') == f'{tmp_path}/gsx:/y'
  assert paths.absolute('gs://b/x') == 'gs://b/x'


@pytest.mark.parametrize('path, fix', [
    ('gs:bucket/run', 'gs://bucket/run'), ('S3:b', 'S3://b'),
    ('file:rel/x', 'rel/x (the path itself)')])
def test_a_url_missing_its_slashes_is_refused_not_made_a_local_folder(path, fix, tmp_path,
                                                                     monkeypatch):
  """Hostile pass of 2026-12-04: `gs:bucket/run` (and `--output=file:rel`) was the local folder
  ./gs:bucket/run."""
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError) as raised:
    paths.absolute(path)
  assert str(raised.value) == (f'{path} looks like a URL missing its slashes: write {fix} (or '
                               f'./{path} for a local folder)')
  assert paths.absolute(f'./{path}') == f'{tmp_path}/{path}'
  assert paths.absolute('gsx:y') == f'{tmp_path}/gsx:y'


def test_a_url_missing_a_slash_ends_a_command_in_one_line(tmp_path):
  done = subprocess.run([sys.executable, '-m', 'bertjax.export', '--from=gs:/b/run',
                         '--format=hf', '--output=out'], cwd=tmp_path, capture_output=True,
                        text=True, timeout=120, check=False,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert done.returncode == 1 and done.stderr.strip().splitlines()[-1] == (
      'error: gs:/b/run looks like a URL missing a slash: write gs://b/run (or ./gs:/b/run for a '
      'local folder)'), done.stderr
  assert not list(tmp_path.iterdir())


def test_a_windows_1252_file_is_told_to_convert_from_cp1252_at_its_line(tmp_path):
  """Pass AL: its curly quotes and euro sign (0x93, 0x94, 0x80) were told to convert from
  Latin-1, which reads them as invisible control characters: 'He said hi for 5'."""
  path = tmp_path / 'cp.txt'
  path.write_bytes(b'first line\nHe said \x93hi\x94 for \x805\n')
  with pytest.raises(ValueError, match=r'cp.txt:2 is not UTF-8 text \(byte 19\): re-encode it '
                     r'\(e\.g\. iconv -f cp1252 -t utf-8\)'):
    text_files.read_text_lines(str(path))


def test_a_utf8_file_with_one_stray_byte_is_not_told_cp1252():
  """Review: the bytes of a curly quote in UTF-8 (E2 80 9C) are not Windows-1252's."""
  data = 'café “hi”\n'.encode() + b'na\xefve\n'
  assert text_files.reencode_hint(data[:64], data) == 'e.g. iconv -f latin1 -t utf-8'
  assert text_files.reencode_hint(b'x', b'say \x93hi\x94') == 'e.g. iconv -f cp1252 -t utf-8'


def test_a_transformers_folder_with_an_empty_checkpoints_folder_is_still_a_model(tmp_path,
                                                                                 minilm_dir):
  """Notebook pass (session 34), 1: a run refused in a model folder left checkpoints/ there,
  and every tool then read the model as a run without checkpoints ('holds no checkpoint')."""
  from bertjax.interop import sources  # pylint: disable=g-import-not-at-top
  model = tmp_path / 'model'
  shutil.copytree(minilm_dir, model)
  (model / 'checkpoints').mkdir()
  assert not paths.is_run(str(model)) and sources.format_of(str(model)) == 'hf'
  assert sources.load(str(model)).config['hidden_size'] == 384
  (tmp_path / 'run' / 'checkpoints').mkdir(parents=True)  # A run's config.json (any fields).
  (tmp_path / 'run' / 'config.json').write_text('{"model": {}}')
  assert paths.is_run(str(tmp_path / 'run'))


def test_a_new_file_beside_a_models_files_is_refused_but_not_in_a_folder_below_it(tmp_path):
  """Review of 2026-12-01: the rule for a new file in a model's folder reached one level below
  it (`out/preds.jsonl` inside a cloned model repository)."""
  model = tmp_path / 'model'
  model.mkdir()
  (model / 'config.json').write_text('{}')
  (model / 'model.safetensors').write_bytes(b'')
  with pytest.raises(FileExistsError, match=r'new.jsonl would be in a transformers model'):
    paths.check_output_file(str(model / 'new.jsonl'))
  assert paths.check_output_file(str(model / 'out' / 'preds.jsonl')) == str(
      model / 'out' / 'preds.jsonl')


@pytest.mark.timeout(60)
def test_a_url_without_a_bucket_is_refused(tmp_path, monkeypatch):
  """Export hostile pass, session 53: --output=gs:// was cut to `gs:` (a local folder), and the
  loop that finds the folders an export makes walked up from it for ever at 100% CPU."""
  for url in ('gs://', 'gs:///', 's3://', 'memory://'):
    with pytest.raises(ValueError, match=f'^{re.escape(url)} names no bucket: write '
                       rf'{url.split(":")[0]}://BUCKET/FOLDER\.$'):
      paths.absolute(url)
  assert paths.absolute('gs://b/x') == 'gs://b/x'  # A bucket named: read as before.
  # Session 55's hostile pass: `gs:///b/x` (a bucket named '') reached the network.
  for url, fix in (('gs:///b/x', 'gs://b/x'), ('S3:////b', 'S3://b')):
    with pytest.raises(ValueError, match=f'^{re.escape(url)} names no bucket \\(a slash too '
                       f'many\\): write {re.escape(fix)}\\.$'):
      paths.absolute(url)
  from bertjax.interop import export_folder  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  with export_folder.made_folders_removed('gs:'):  # A relative path: it ends.
    pass


def test_a_workdir_is_said_without_its_trailing_slash(tmp_path):
  """A URL's trailing slash stayed (absolute() keeps an output file's, a folder's mark), so a
  job's summary said `TensorBoard gs://b/run/`; a local path's went already."""
  assert paths.absolute_workdir('gs://b/runs/x/') == 'gs://b/runs/x'
  assert paths.absolute_workdir('gs://b//runs//x//') == 'gs://b/runs/x'
  assert paths.absolute_workdir('gs://b/') == 'gs://b'
  assert paths.absolute_workdir(f'{tmp_path}/runs/x/') == f'{tmp_path}/runs/x'
