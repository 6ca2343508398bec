"""bertjax.export's refusal of --output=RUN for a fine-tuning run: the folder it suggests lies
beside the run, where an export may go (checked in-process on a folder laid out as a run)."""

import json
import os
import pathlib
import re
import socket
import stat
import subprocess
import sys

import pytest

from bertjax import processes
from bertjax.interop import export_folder
from bertjax.interop import export_manifest
from bertjax.interop import export_writing
from bertjax.interop import init_from
from bertjax.interop import sources


def _run(folder):
  (folder / 'checkpoints' / '12').mkdir(parents=True)
  (folder / 'config.json').write_text('{}')
  return folder


@pytest.mark.parametrize('source', ['run', 'run/checkpoints/12'])
def test_over_a_run_the_suggested_output_is_beside_the_run(tmp_path, source):
  run = _run(tmp_path / 'run')
  with pytest.raises(FileExistsError, match='never over or around it') as refused:
    export_folder.check(str(run), True, str(tmp_path / source))
  suggested = re.search(r'--output=(\S+)\.$', str(refused.value)).group(1)
  assert suggested == str(run) + '_export'
  assert os.path.dirname(suggested) == str(tmp_path)  # Beside the run, not inside it.
  export_folder.check(suggested, True, str(tmp_path / source))  # Which the check accepts.


def test_over_a_model_folder_the_suggested_output_is_beside_it(tmp_path):
  model = tmp_path / 'model'
  model.mkdir()
  (model / 'config.json').write_text('{}')
  with pytest.raises(FileExistsError, match=re.escape(f'--output={model}_export.')):
    export_folder.check(str(model), True, str(model))


_KILLED_MIDWAY = '''
import os, sys, time
from bertjax.interop import export_writing
from bertjax.interop import sources
def write_into(folder):
  open(os.path.join(folder, 'model.safetensors'), 'w').write('half')
  print('writing', flush=True)
  time.sleep(60)
export_writing.write(sys.argv[1], 'hf', 'src', write_into)
'''


def _dead_owner():
  """host-pid of a process that has ended."""
  process = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                           capture_output=True, text=True, check=True)
  return f'{socket.gethostname()}-{process.stdout.strip()}'


def _write(output, text, overwrite=False, meanwhile=lambda: None):
  def write_into(folder):
    (pathlib.Path(folder) / 'config.json').write_text(text)
    meanwhile()
  export_writing.write(str(output), 'hf', 'src', write_into, overwrite)


def test_an_export_killed_midway_leaves_nothing_the_next_one_keeps(tmp_path, caplog):
  output = tmp_path / 'out'
  process = subprocess.Popen([sys.executable, '-c', _KILLED_MIDWAY, str(output)],
                             stdout=subprocess.PIPE, text=True)
  assert process.stdout.readline() == 'writing\n'
  process.kill()  # SIGKILL: no clean-up of its own runs.
  process.wait()
  assert [p.name for p in tmp_path.iterdir()][0].startswith('.out.export-')
  _write(output, 'new')
  assert sorted(p.name for p in tmp_path.iterdir()) == ['out']
  assert (output / 'config.json').read_text() == 'new'
  assert 'what an export killed before it finished left behind' in caplog.text


def test_the_export_a_killed_one_was_replacing_goes_back_in_place(tmp_path):
  # Killed between its two renames: the earlier export aside, the new one complete but hidden.
  owner = _dead_owner()
  aside = tmp_path / f'.out.replaced-{owner}'
  aside.mkdir()
  (aside / 'config.json').write_text('earlier')
  (aside / export_folder.MANIFEST).write_text(json.dumps({'files': ['config.json']}))
  (tmp_path / f'.out.export-{owner}-1').mkdir()
  _write(tmp_path / 'elsewhere', 'other')  # Another output's export touches neither.
  assert not (tmp_path / 'out').exists() and aside.is_dir()
  export_folder.check(str(tmp_path / 'out'), overwrite=True)
  assert (tmp_path / 'out' / 'config.json').read_text() == 'earlier'  # Put back by the check.
  _write(tmp_path / 'out', 'new', overwrite=True)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['elsewhere', 'out']
  assert (tmp_path / 'out' / 'config.json').read_text() == 'new'


def test_the_put_back_export_is_the_earlier_one(tmp_path):
  owner = _dead_owner()
  aside = tmp_path / f'.out.replaced-{owner}'
  aside.mkdir()
  (aside / 'config.json').write_text('earlier')
  export_folder.recover(str(tmp_path), 'out')
  assert (tmp_path / 'out' / 'config.json').read_text() == 'earlier'


def test_a_running_exports_folder_is_left_alone(tmp_path):
  live = tmp_path / f'.out.export-{socket.gethostname()}-{os.getpid()}-1'
  other_host = tmp_path / '.out.export-elsewhere-1-1'
  live.mkdir()
  other_host.mkdir()
  _write(tmp_path / 'out', 'new')
  assert live.is_dir() and other_host.is_dir()


def test_a_killed_exports_folders_are_told_from_a_live_process_with_its_pid(tmp_path):
  # A restarted container: the export killed there was pid 1, and the rerun is pid 1 again. By
  # its pid alone the killed export looked alive, so the export it had moved aside was never
  # put back. Its folders now carry when the pid started.
  here = f'{socket.gethostname()}-{os.getpid()}'
  killed_owner = f'{here}.{int(processes.start_ticks(os.getpid())) - 100}'
  aside = tmp_path / f'.out.replaced-{killed_owner}'
  aside.mkdir()
  (aside / 'config.json').write_text('earlier')
  (tmp_path / f'.out.export-{killed_owner}-1').mkdir()
  live = tmp_path / f'.out.export-{processes.mark()}-2'
  live.mkdir()
  export_folder.recover(str(tmp_path), 'out')
  assert (tmp_path / 'out' / 'config.json').read_text() == 'earlier'
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted(['out', live.name])


def test_a_put_back_export_is_checked_as_one_in_place(tmp_path):
  aside = tmp_path / f'.out.replaced-{_dead_owner()}'
  aside.mkdir()
  (aside / 'config.json').write_text('earlier')
  (aside / 'MY_NOTES.txt').write_text('mine')  # Added by hand: no export may delete it.
  (aside / export_folder.MANIFEST).write_text(json.dumps({'files': ['config.json']}))
  with pytest.raises(FileExistsError, match='exists and is not empty: pass --overwrite'):
    export_folder.check(str(tmp_path / 'out'), overwrite=False)
  with pytest.raises(FileExistsError, match=r'holds files the earlier export did not write '
                     r'\(MY_NOTES.txt\)'):
    export_folder.check(str(tmp_path / 'out'), overwrite=True)
  assert (tmp_path / 'out' / 'MY_NOTES.txt').read_text() == 'mine'


def test_an_output_written_meanwhile_is_not_replaced_without_overwrite(tmp_path):
  output = tmp_path / 'out'
  export_folder.check(str(output), overwrite=False)
  with pytest.raises(FileExistsError, match='exists and is not empty'):
    _write(output, 'second', meanwhile=lambda: _write(output, 'first'))
  assert (output / 'config.json').read_text() == 'first'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['out']
  _write(output, 'third', overwrite=True, meanwhile=lambda: _write(output, 'x', overwrite=True))
  assert (output / 'config.json').read_text() == 'third'


def test_an_output_that_is_a_link_is_written_where_it_points(tmp_path):
  (tmp_path / 'big').mkdir()
  link = tmp_path / 'small' / 'out'
  link.parent.mkdir()
  link.symlink_to(tmp_path / 'big' / 'out')
  export_folder.check(str(link), overwrite=False)
  _write(link, 'new')
  assert link.is_symlink() and (tmp_path / 'big' / 'out' / 'config.json').read_text() == 'new'
  export_folder.check(str(link), overwrite=True)
  _write(link, 'again', overwrite=True)
  assert link.is_symlink() and (tmp_path / 'big' / 'out' / 'config.json').read_text() == 'again'
  assert sorted(p.name for p in link.parent.iterdir()) == ['out']
  assert sorted(p.name for p in (tmp_path / 'big').iterdir()) == ['out']


def test_an_output_under_a_file_is_one_line(tmp_path):
  (tmp_path / 'notes').write_text('mine')
  with pytest.raises(FileExistsError, match=r'--output=.*notes/sub/out is under .*notes, which '
                     'is a file: pass a directory path'):
    export_folder.check(str(tmp_path / 'notes' / 'sub' / 'out'), overwrite=False)
  assert (tmp_path / 'notes').read_text() == 'mine'


def test_a_local_export_cut_short_is_refused_by_the_readers(tmp_path):
  # A bucket's export cut short, copied down (gsutil cp -r): its manifest still in progress.
  hf, tf1 = tmp_path / 'hf', tmp_path / 'tf1'
  hf.mkdir()
  tf1.mkdir()
  (hf / 'config.json').write_text('{}')
  (tf1 / 'bert_model.ckpt.index').write_text('')
  for folder in (hf, tf1):
    (folder / export_folder.MANIFEST).write_text(json.dumps(
        {'format': folder.name, 'source': 'gs://b/src', 'files': [], 'in_progress': True}))
  for path, folder in ((hf, hf), (tf1, tf1), (tf1 / 'bert_model.ckpt', tf1)):
    with pytest.raises(ValueError, match=re.escape(
        f'{folder} is an export cut short (its {export_folder.MANIFEST} says in progress')
        + '.*' + re.escape(f'--from=gs://b/src --format={folder.name} --output={folder} '
                           '--overwrite.')):
      sources.format_of(str(path))
  with pytest.raises(ValueError, match='is an export cut short'):
    sources.load(str(tf1 / 'bert_model.ckpt'), bert_config_file=str(tmp_path / 'config.json'))
  # The training jobs' init_from (pre-training and fine-tuning) reads through init_from.
  for read in (init_from.model_config, init_from.read_params):
    with pytest.raises(ValueError, match=f'{hf} is an export cut short'):
      read(str(hf))
  (hf / export_folder.MANIFEST).write_text(json.dumps({'format': 'hf', 'files': []}))
  assert sources.format_of(str(hf)) == 'hf'  # Complete: read as before.


def test_a_mount_point_or_a_name_past_the_file_systems_limit_is_refused_first(tmp_path,
                                                                           monkeypatch):
  """Hostile pass of 2026-12-04: both failed only after the whole conversion, a mount point
  (a container's volume) with `[Errno 16] Device or resource busy` renaming it aside, a name of
  90 CJK characters (270 bytes) with a raw `[Errno 36]` naming a temporary folder."""
  volume = tmp_path / 'volume'
  volume.mkdir()
  ismount = os.path.ismount
  hf = tmp_path / 'several' / 'hf'  # A volume mounted at the hf folder of several formats.
  hf.mkdir(parents=True)
  monkeypatch.setattr(os.path, 'ismount', lambda p: p in (str(volume), str(hf)) or ismount(p))
  with pytest.raises(ValueError, match=re.escape(
      f'output={volume} is a mount point: an export is written beside its folder and renamed '
      f'into place, which a mount point cannot be; pass a folder inside it, e.g. '
      f'--output={volume}/model.')):
    export_folder.check(str(volume), True)
  export_folder.check(str(volume / 'model'), False)  # Inside it: fine.
  # The hf folder of several formats' --output: its name is fixed, so the way out differs.
  with pytest.raises(ValueError, match=re.escape(
      f'{hf}, the hf folder of --output={hf.parent}, is a mount point: an export is written '
      'beside its folder and renamed into place, which a mount point cannot be; export hf by '
      f'itself into a folder inside it (--format=hf --output={hf}/model), or pass another '
      '--output.')):
    export_folder.check(str(hf), True, folder=str(hf.parent))
  long = tmp_path / ('模' * 90) / 'hf'
  with pytest.raises(ValueError, match=r'the name 模{24}\.\.\. is 270 bytes long, past '
                     r'the 255 a file name may have on this file system: pass a shorter name'):
    export_folder.check(str(long), False)
  export_folder.check(str(tmp_path / ('模' * 85)), False)  # 255 bytes: taken.
  deep = os.path.join(str(tmp_path), *['d' * 200] * 20)  # 4,000 bytes: no room for the files.
  with pytest.raises(ValueError, match=r'is \d+ bytes long: with the files written inside it, '
                     r'past the 4096 a path may have here; pass a shorter path\.'):
    export_folder.check(deep, False)


def test_overwrite_refuses_an_export_whose_files_were_edited(tmp_path):
  """Hostile pass of 2026-12-04: --overwrite replaced an export whose config.json the user had
  edited, without a word, though its manifest records what it wrote. A file deleted since
  loses nothing: the rest is replaced."""
  out = tmp_path / 'out'
  _write(out, '{"a": 1}')
  assert export_folder.check(str(out), True) == {'config.json'}
  (out / 'config.json').write_text('{"a": 2}')  # Edited: same size, another sha256.
  with pytest.raises(FileExistsError, match=re.escape(
      f'output={out} holds files edited since the export wrote them (config.json: '
      f'{export_folder.MANIFEST} records other contents): --overwrite would lose the edits; '
      'move them out (the rest is replaced), or choose another directory.')):
    export_folder.check(str(out), True)
  with pytest.raises(FileExistsError, match='holds files edited since'):
    _write(out, '{"b": 3}', overwrite=True)
  assert (out / 'config.json').read_text() == '{"a": 2}'
  (out / 'config.json').unlink()  # Moved out: the rest is replaced.
  _write(out, '{"b": 3}', overwrite=True)
  assert (out / 'config.json').read_text() == '{"b": 3}'


def test_a_folder_of_formats_never_holds_two_models(tmp_path):
  """Hostile pass of 2026-12-04: hf,tf1 from one run, then hf,sentence_transformers --overwrite
  from another left the first run's tf1/ beside the second's hf/. A format of the same model is
  added beside the others."""
  out = tmp_path / 'both'
  for fmt in ('hf', 'tf1'):
    export_writing.write(str(out / fmt), fmt, str(tmp_path / 'a' / 'checkpoints' / '3'),
                         lambda folder: (pathlib.Path(folder) / 'x').write_text('x'))
  ours = [('hf', str(out / 'hf')), ('sentence_transformers', str(out / 'st'))]
  with pytest.raises(FileExistsError, match=re.escape(
      f'{out} holds tf1 exported from {tmp_path}/a/checkpoints/3 (now gone: moved?): another '
      f'model than {tmp_path}/b/checkpoints/7, so the folder would hold two models. Write all its '
      f'formats from this one (--format=hf,sentence_transformers,tf1 --output={out} '
      '--overwrite), or pass another --output.')):
    export_folder.check_one_model(ours, str(tmp_path / 'b' / 'checkpoints' / '7'), (), str(out))
  with pytest.raises(FileExistsError, match='holds tf1 exported from .*a/checkpoints/3 .*another'):
    export_folder.check_one_model(ours, str(tmp_path / 'a' / 'checkpoints' / '5'), (), str(out))
  export_folder.check_one_model(ours, str(tmp_path / 'a' / 'checkpoints' / '3'), (), str(out))
  export_folder.check_one_model(ours + [('tf1', str(out / 'tf1'))],
                                str(tmp_path / 'b' / 'checkpoints' / '7'), (), str(out))


def test_a_fifo_a_device_or_a_bind_mount_is_no_output(tmp_path, monkeypatch):
  """Session 54's second export pass: a FIFO, a socket or a device as --output (as root,
  /dev/null) was renamed aside and replaced by the export, exit 0; a bind mount (one file
  system: os.path.ismount misses it) failed after the whole conversion."""
  fifo = tmp_path / 'fifo'
  os.mkfifo(fifo)
  for formats in (1, 2):
    check = (lambda out: export_folder.check(out, True)) if formats == 1 else (
        lambda out: export_folder.check_folder_of_formats([('hf', f'{out}/hf'),
                                                           ('tf1', f'{out}/tf1')], out))
    with pytest.raises(FileExistsError, match=re.escape(
        f'output={fifo} is a FIFO: an export is a folder; pass a directory.')):
      check(str(fifo))
  with pytest.raises(FileExistsError, match='output=/dev/null is a device: an export is a '):
    export_folder.check('/dev/null', True)
  assert stat.S_ISFIFO(os.stat(fifo).st_mode)
  bound = tmp_path / 'bound'
  bound.mkdir()
  monkeypatch.setattr(export_folder, '_mount_points', lambda: {str(bound)})
  with pytest.raises(ValueError, match=f'output={bound} is a mount point'):
    export_folder.check(str(bound), True)


def test_the_kernels_mount_points_are_read(tmp_path):
  """/proc/self/mountinfo's mount points, its escapes read: the root is always one."""
  from bertjax.interop import export_folder as folder_lib  # pylint: disable=g-import-not-at-top
  if not os.path.exists('/proc/self/mountinfo'):
    pytest.skip('no /proc/self/mountinfo (not Linux)')
  assert '/' in folder_lib._mount_points()  # pylint: disable=protected-access


def test_one_format_into_a_folder_of_formats_holds_the_same_model(tmp_path):
  """Session 54's second pass: --format=hf --output=DIR/hf --overwrite from another run, beside
  DIR/tf1, left two models in DIR; so did other --labels for the same source."""
  out = tmp_path / 'both'
  for fmt in ('hf', 'tf1'):
    export_writing.write(str(out / fmt), fmt, str(tmp_path / 'a'),
                         lambda folder: (pathlib.Path(folder) / 'x').write_text('x'),
                         record={'labels': ['neg', 'pos'], 'several_formats': True})
  with pytest.raises(FileExistsError, match=re.escape(
      f'{out} holds tf1 exported from {tmp_path}/a (now gone: moved?): another model than '
      f'{tmp_path}/b, so the folder would hold two models. Write all its formats from this one '
      f'(--format=hf,tf1 --output={out} --overwrite), or pass another --output.')):
    export_folder.check_one_model([('hf', str(out / 'hf'))], str(tmp_path / 'b'), ('neg', 'pos'))
  with pytest.raises(FileExistsError, match=re.escape(
      f"{out} holds hf exported with the labels ['neg', 'pos'], not ['pos', 'neg']; tf1 exported "
      "with the labels ['neg', 'pos'], not ['pos', 'neg']: another model")):
    export_folder.check_one_model([('onnx', str(out / 'onnx'))], str(tmp_path / 'a'),
                                  ('pos', 'neg'))
  export_folder.check_one_model([('onnx', str(out / 'onnx'))], str(tmp_path / 'a'),
                                ('neg', 'pos'))  # The same model: added beside them.
  export_folder.check_one_model([('hf', str(out / 'model'))], str(tmp_path / 'b'))  # Not DIR/hf.
  # Exports kept side by side (~/models/hf of one model, ~/models/tf1 of another), each by an
  # export of one format: no folder of formats.
  side = tmp_path / 'models'
  export_writing.write(str(side / 'hf'), 'hf', str(tmp_path / 'a'),
                       lambda folder: (pathlib.Path(folder) / 'x').write_text('x'))
  export_folder.check_one_model([('tf1', str(side / 'tf1'))], str(tmp_path / 'b'))


def test_overwrite_compares_large_files_by_sha256_and_a_damaged_manifest_is_refused(
    tmp_path, monkeypatch):
  """Session 54's second pass: weights re-saved at the same size (past DIGESTED_BYTES, which
  readers compare by size) were replaced by --overwrite; a manifest whose record was edited
  turned the check off, and one that was no JSON was said to be missing."""
  monkeypatch.setattr(export_manifest, 'DIGESTED_BYTES', 4)
  out = tmp_path / 'out'
  _write(out, '{"a": 1}')  # 8 bytes: past the (patched) limit.
  (out / 'config.json').write_text('{"a": 2}')
  export_manifest.check_complete(out)  # A read compares its size: the same.
  with pytest.raises(FileExistsError, match=r'holds files edited since the export wrote them '
                     r'\(config\.json:'):
    export_folder.check(str(out), True)
  (out / 'config.json').write_text('{"a": 1}')
  manifest = out / export_folder.MANIFEST
  record = json.loads(manifest.read_text())
  record['written']['config.json'][0] = 'x'
  manifest.write_text(json.dumps(record))
  with pytest.raises(FileExistsError, match=re.escape(
      f'output={out}: its {export_folder.MANIFEST} is damaged, so what was edited since the '
      'export cannot be told')):
    export_folder.check(str(out), True)
  with pytest.raises(ValueError, match=r"record of the files written cannot be read \(edited by "):
    export_manifest.check_complete(out)
  manifest.write_text('{not json')
  with pytest.raises(FileExistsError, match=re.escape(
      f'output={out}: its {export_folder.MANIFEST} cannot be read (damaged?)')):
    export_folder.check(str(out), True)


def test_overwrite_refuses_a_link_to_a_folder_the_export_did_not_write(tmp_path):
  """Hostile pass of 2026-12-04: --overwrite removed a link to a folder a user had put in the
  export (files were refused; os.walk lists a link to a folder among the folders). An empty
  folder holds nothing to lose: replaced (a SavedModel export writes an empty assets/)."""
  output = tmp_path / 'out'
  _write(output, 'first')
  (tmp_path / 'dataset').mkdir()
  (tmp_path / 'dataset' / 'rows.csv').write_text('kept')
  (output / 'runs').mkdir()
  (output / 'runs' / 'data').symlink_to(tmp_path / 'dataset')
  (output / 'empty').mkdir()
  with pytest.raises(FileExistsError, match=re.escape(
      'holds files the earlier export did not write (runs/data/)')):
    _write(output, 'second', overwrite=True)
  assert (output / 'config.json').read_text() == 'first' and (output / 'runs' / 'data').is_symlink()
  (output / 'runs' / 'data').unlink()
  _write(output, 'second', overwrite=True)
  assert (output / 'config.json').read_text() == 'second' and not (output / 'empty').exists()
  assert (tmp_path / 'dataset' / 'rows.csv').read_text() == 'kept'
