"""Several formats in one export (`--format=hf,tf1,...`): the model read once, each format in its
own folder as its single-format export writes it, every check before the first is written, and a
failure after one names what was written."""

import errno
import os
import re
import signal
import subprocess
import sys
import time

import commands
import pytest

from bertjax import export
from bertjax import output_lock
from bertjax.interop import format_writers
from bertjax.interop import sources


def _files(folder):
  return sorted(os.path.relpath(os.path.join(d, f), folder)
                for d, _, names in os.walk(folder) for f in names)


def test_each_format_is_its_single_exports_folder_from_one_read(fine_tuned_sst2, tmp_path,
                                                                 monkeypatch):
  workdir, _ = fine_tuned_sst2
  singles = {fmt: export.export(workdir, fmt, tmp_path / f'single_{fmt}') for fmt in
             ('hf', 'tf1')}
  reads = []
  load = sources.load
  monkeypatch.setattr(sources, 'load', lambda *a, **k: reads.append(a) or load(*a, **k))
  out = tmp_path / 'both'
  written = export.export_formats(workdir, 'hf,tf1', out)
  assert written == {'hf': out / 'hf', 'tf1': out / 'tf1'}  # Path objects for a Path output.
  assert len(reads) == 1
  assert sorted(os.listdir(out)) == ['hf', 'tf1']
  for fmt, single in singles.items():
    assert _files(out / fmt) == _files(single), fmt
  assert (out / 'hf' / 'model.safetensors').read_bytes() == (
      singles['hf'] / 'model.safetensors').read_bytes()
  for name in ('bert_model.ckpt.index', 'bert_config.json', 'vocab.txt'):
    assert (out / 'tf1' / name).read_bytes() == (singles['tf1'] / name).read_bytes(), name
  # Again into the same folder: refused without --overwrite, replaced with it.
  with pytest.raises(FileExistsError, match=r'output=.*both/hf exists and is not empty'):
    export.export_formats(workdir, ('hf', 'tf1'), out)
  assert export.export_formats(workdir, ('tf1', 'hf'), out, overwrite=True) == written
  # One format: its folder is --output itself, as export() writes it.
  assert export.export_formats(workdir, ['hf'], str(tmp_path / 'one')) == {
      'hf': str(tmp_path / 'one')}
  assert (tmp_path / 'one' / 'model.safetensors').exists()


@pytest.mark.parametrize('formats, options, error', [
    ('hf,hf', {}, r'formats=hf,hf names hf twice: name each format once'),
    ('hf,bogus', {}, r"formats='bogus' is unknown; valid: hf, tf1, saved_model"),
    ('', {}, r"formats='' names no format: pass one of hf, tf1"),
    ('hf,,tf1', {}, r'formats=hf,,tf1 holds an empty name'),
    ('hf,tf1', {'max_seq_length': 64}, r'tf1 keeps no length; drop it, or export tf1 by itself'),
    ('sentence_transformers,saved_model', {'normalize': True},
     r"formats=saved_model of a classification model does not write"),
    ('hf,tf1', {'labels': ('a', 'b', 'c')},
     r'labels=a,b,c names 3 classes but the model has 2: name each'),
])
def test_a_refusal_of_any_format_writes_none(fine_tuned_sst2, tmp_path, formats, options, error):
  workdir, _ = fine_tuned_sst2
  out = tmp_path / 'made' / 'for' / 'out'
  with pytest.raises(ValueError, match=error):
    export.export_formats(workdir, formats, out, **options)
  # Not even the folder of the formats, nor those above it made for its lock (--labels is
  # refused after the lock), nor a lock or hidden folder.
  assert os.listdir(tmp_path) == []


def test_a_link_into_a_missing_folder_is_refused(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  (tmp_path / 'out').mkdir()
  (tmp_path / 'out' / 'hf').symlink_to(tmp_path / 'unmounted' / 'disk' / 'hf')
  (tmp_path / 'single').symlink_to(tmp_path / 'unmounted' / 'disk' / 'single')
  for formats, out in (('hf,tf1', tmp_path / 'out'), ('hf', tmp_path / 'single')):
    link = out / 'hf' if ',' in formats else out
    with pytest.raises(FileNotFoundError, match=(
        rf'^output={link} is a link to {tmp_path}/unmounted/disk/\w+, whose folder '
        rf'{tmp_path}/unmounted/disk does not exist \(a disk not mounted\?\): make it, or '
        'remove the link.$')):
      export.export_formats(workdir, formats, out)
  assert sorted(os.listdir(tmp_path)) == ['out', 'single']  # Nothing made where they lead.
  assert os.listdir(tmp_path / 'out') == ['hf']


def test_a_taken_folder_of_one_format_is_refused_before_any_is_written(fine_tuned_sst2,
                                                                        tmp_path):
  workdir, _ = fine_tuned_sst2
  out = tmp_path / 'out'
  (out / 'tf1').mkdir(parents=True)
  (out / 'tf1' / 'notes.txt').write_text('mine')
  with pytest.raises(FileExistsError, match=r'output=.*out/tf1 exists and is not empty'):
    export.export_formats(workdir, 'hf,tf1', out)
  assert sorted(os.listdir(out)) == ['tf1'] and os.listdir(out / 'tf1') == ['notes.txt']
  (tmp_path / 'a_file').write_text('mine')
  with pytest.raises(FileExistsError, match=r'output=.*a_file is a file: several formats are '
                     'written into a folder'):
    export.export_formats(workdir, 'hf,tf1', tmp_path / 'a_file')
  assert (tmp_path / 'a_file').read_text() == 'mine'


def test_a_failure_after_the_first_format_names_what_was_written(fine_tuned_sst2, tmp_path,
                                                                 monkeypatch):
  workdir, _ = fine_tuned_sst2
  writer = format_writers.writer

  def full_disk(result, folder):
    raise OSError(errno.ENOSPC, 'No space left on device', folder)

  monkeypatch.setattr(format_writers, 'writer',
                      lambda fmt: full_disk if fmt == 'tf1' else writer(fmt))
  out, written = tmp_path / 'out', []
  with pytest.raises(OSError, match='No space left'):
    export._export(workdir, 'hf,tf1,saved_model', out, overwrite=False, vocab_file='',  # pylint: disable=protected-access
                   do_lower_case=None, max_seq_length=0, labels=(), normalize=None,
                   written=written)
  assert written == [('hf', str(out / 'hf'))]
  assert (out / 'hf' / 'model.safetensors').exists()
  assert sorted(os.listdir(out)) == ['hf']  # Nothing half-written of tf1, no lock left.
  error = export._disk_error(OSError(errno.ENOSPC, 'No space left on device'), written,  # pylint: disable=protected-access
                             str(out), 'hf,tf1,saved_model')
  line = export._written_first(written, error, 'hf,tf1,saved_model')  # pylint: disable=protected-access
  assert line == (f'error: the disk holding {out / "tf1"} is full (No space left on device): '
                  'nothing of tf1 was replaced. Free space (replacing an export needs room for '
                  'both until the old one is removed) or pass another --output. Written before '
                  f'it, complete: hf {out / "hf"}; the rest: --format=tf1,saved_model '
                  f'--output={out}.')
  everything = written + [('tf1', str(out / 'tf1'))]
  # A disk error after every format was written (reading one back) names --output.
  assert export._disk_error(OSError(errno.EACCES, 'Permission denied'), everything, str(out),  # pylint: disable=protected-access
                            'hf,tf1').startswith(f'error: --output={out} cannot be written')
  assert export._written_first(everything, 'interrupted.', 'hf,tf1') == (  # pylint: disable=protected-access
      f'interrupted. Every format was written before it, complete: hf {out / "hf"}, tf1 '
      f'{out / "tf1"}.')
  # One format left: its own folder, since one format is written into --output itself.
  assert export._written_first(written, 'error: x.', 'hf,tf1').endswith(  # pylint: disable=protected-access
      f'the rest: --format=tf1 --output={out / "tf1"}.')


def test_another_export_writing_one_of_the_folders_refuses_them_all(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  out = tmp_path / 'out'
  with output_lock.held(str(out / 'tf1'), 'export', f'writing {out / "tf1"}', '--output'):
    with pytest.raises(ValueError, match=r'another export run \(pid .*\) is writing .*out/tf1 '
                       r'now'):
      export.export_formats(workdir, 'hf,tf1', out)
    assert os.listdir(out) == ['.tf1.lock']  # Only the other's lock: no hf, no lock of ours.
  assert not out.exists()  # The folder the other's lock made, removed with it, empty.


def test_sigterm_during_the_second_format_keeps_the_first_and_says_so(fine_tuned_sst2,
                                                                        tmp_path):
  workdir, _ = fine_tuned_sst2
  out, log = tmp_path / 'out', tmp_path / 'stderr'
  process = subprocess.Popen(
      [sys.executable, '-m', 'bertjax.export', f'--from={workdir}', '--format=hf,saved_model',
       f'--output={out}'], cwd=tmp_path, env=commands.environ(), stdout=subprocess.DEVNULL,
      stderr=log.open('w'))
  deadline = time.time() + 240
  while not ((out / 'hf').is_dir() and list(out.glob('.saved_model.export-*'))):
    assert process.poll() is None, log.read_text()[-3000:]
    assert time.time() < deadline, log.read_text()[-3000:]
    time.sleep(0.05)
  process.send_signal(signal.SIGTERM)
  assert process.wait(timeout=60) == 143, log.read_text()[-3000:]
  assert log.read_text().strip().splitlines()[-1] == (
      'interrupted: the format in progress was not written (an export is renamed into place '
      f'only when complete). Written before it, complete: hf {out / "hf"}; the rest: '
      f'--format=saved_model --output={out / "saved_model"}.')
  assert sorted(os.listdir(out)) == ['hf']  # No half-written SavedModel, no lock.
  assert (out / 'hf' / 'model.safetensors').exists()


def test_an_export_or_a_link_between_format_folders_is_no_folder_of_formats(fine_tuned_sst2,
                                                                          tmp_path):
  workdir, _ = fine_tuned_sst2
  single = export.export(workdir, 'hf', tmp_path / 'single')
  before = _files(single)
  with pytest.raises(FileExistsError, match=r'output=.*single is an export itself: several '
                     'formats are written into a folder of their own'):
    export.export_formats(workdir, 'hf,tf1', single, overwrite=True)
  assert _files(single) == before
  (tmp_path / 'linked' / 'tf1').mkdir(parents=True)
  (tmp_path / 'linked' / 'hf').symlink_to('tf1')
  with pytest.raises(FileExistsError, match=r'formats=hf and tf1 would both be written to '
                     r'.*linked/tf1 \(a link in .*linked leads there\)'):
    export.export_formats(workdir, 'hf,tf1', tmp_path / 'linked')
  assert os.listdir(tmp_path / 'linked' / 'tf1') == []
  # A folder of several formats replaced by one format: each folder is named, not "not written
  # by bertjax.export".
  export.export_formats(workdir, 'hf,tf1', tmp_path / 'both')
  with pytest.raises(FileExistsError, match=r'output=.*both holds the exports of a command of '
                     r'several formats \(hf, tf1\): replace one with output=.*both/hf, or '
                     r"several with export_formats\(source, 'hf,tf1', '.*both', "
                     r'overwrite=True\)\.'):
    export.export(workdir, 'hf', tmp_path / 'both', overwrite=True)
  assert sorted(os.listdir(tmp_path / 'both')) == ['hf', 'tf1']
  # A folder of exports of other names is not one: the plain refusal.
  export.export(workdir, 'hf', tmp_path / 'mixed' / 'model_a')
  with pytest.raises(FileExistsError, match=r'output=.*mixed was not written by '
                     'bertjax.export'):
    export.export(workdir, 'hf', tmp_path / 'mixed', overwrite=True)


def test_an_export_of_one_format_into_the_folder_refuses_several_there(fine_tuned_sst2,
                                                                        tmp_path):
  """Its lock is the folder's own (beside it); the formats' are inside: both are taken."""
  workdir, _ = fine_tuned_sst2
  out = tmp_path / 'out'
  with output_lock.held(str(out), 'export', f'writing {out}', '--output'):
    with pytest.raises(ValueError, match=r'another export run \(pid .*\) is writing .*out now'):
      export.export_formats(workdir, 'hf,tf1', out)
  assert os.listdir(tmp_path) == []


def test_several_formats_go_into_a_folder_whose_parent_cannot_be_written(fine_tuned_sst2,
                                                                         tmp_path, monkeypatch):
  """Session 33's export pass, left then: the folder's lock, beside it, could not be made, so
  an existing folder one may write into was refused; no export of one format can replace it
  there (that needs its parent), so its lock is not needed."""
  workdir, _ = fine_tuned_sst2
  out = tmp_path / 'parent' / 'out'
  out.mkdir(parents=True)
  parent = str(tmp_path / 'parent')
  access = os.access
  monkeypatch.setattr(export.os, 'access', lambda p, m: False if str(p) == parent and
                      m == os.W_OK else access(p, m))
  lock_of = output_lock.held

  def no_lock_in_parent(output, *args, **kwargs):
    assert os.path.dirname(output) != parent, output  # The lock beside `out` would be there.
    return lock_of(output, *args, **kwargs)

  monkeypatch.setattr(output_lock, 'held', no_lock_in_parent)
  assert export.export_formats(workdir, 'hf,tf1', out) == {'hf': out / 'hf', 'tf1': out / 'tf1'}
  assert sorted(os.listdir(out)) == ['hf', 'tf1'] and os.listdir(parent) == ['out']


def test_formats_of_another_model_are_refused_beside_the_folders(fine_tuned_sst2, minilm_dir,
                                                                 tmp_path):
  """Hostile pass of 2026-12-04: hf,tf1 from one model, then hf,sentence_transformers
  --overwrite from another left the first's tf1/ beside the second's hf/. A format of the same
  model (the run's newest step again) is added beside the others."""
  workdir, _ = fine_tuned_sst2
  out = tmp_path / 'out'
  export.export_formats(workdir, 'hf,tf1', out)
  with pytest.raises(FileExistsError, match=re.escape(
      f'{out} holds tf1 exported from {workdir}/checkpoints/') + r'\d+: another model than .*, '
      r'so the folder would hold two models\. Write all its formats from this one '
      rf'\(formats=hf,sentence_transformers,tf1 output={out} overwrite=True\)'):
    export.export_formats(minilm_dir, 'hf,sentence_transformers', out, overwrite=True)
  assert sorted(os.listdir(out)) == ['hf', 'tf1']
  assert export.export_formats(workdir, 'hf,sentence_transformers', out, overwrite=True)
  assert sorted(os.listdir(out)) == ['hf', 'sentence_transformers', 'tf1']
  # One format into its folder there (DIR/hf) from another model: refused as well.
  with pytest.raises(FileExistsError, match=re.escape(f'{out} holds sentence_transformers '
                                                      f'exported from {workdir}/checkpoints/')):
    export.export(minilm_dir, 'hf', out / 'hf', overwrite=True)
