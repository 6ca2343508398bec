"""launch/build_corpus.py's --output_dir (hostile pass A): an empty value is refused (it wrote
into the current folder), and a folder holding files a corpus build did not write is not
written into without --overwrite (its manifest.json and vocab.txt were replaced silently); its
own earlier corpus is rebuilt as before."""

import json
import os
import subprocess
import sys

from pod_fakes import REPO
import pytest

from launch import build_corpus

DOCUMENTS = [[f'Sentence {i} of document {d} , said the king .' for i in range(3)]
             for d in range(20)]


def build(output_dir, **kwargs):
  return build_corpus.build(DOCUMENTS, output_dir, vocab_size=100, eval_every=10, **kwargs)


def test_an_empty_output_dir_is_refused(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError, match=r'^--output_dir is empty: pass the folder to write the '
                     r'corpus to, or leave the flag out for .*/bertjax/pretraining_data/corpus$'):
    build('')
  done = subprocess.run([sys.executable, '-m', 'launch.build_corpus', '--output_dir='],
                        cwd=tmp_path, capture_output=True, text=True, timeout=120,
                        env={**os.environ, 'PYTHONPATH': str(REPO)})
  assert done.returncode == 1 and done.stderr.strip().startswith(
      'error: --output_dir is empty: pass the folder'), done.stderr
  assert len(done.stderr.strip().splitlines()) == 1 and os.listdir(tmp_path) == []
  # '-' names no stream here (a folder named '-' was made): refused as every writer by name does.
  with pytest.raises(ValueError, match=r"^--output_dir=- would write a folder named '-'"):
    build('-')
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('files', [{'vocab.txt': 'my\nvocab\n'},
                                   {'manifest.json': '{"name": "my_corpus"}\n',
                                    'notes.txt': 'mine\n'},
                                   {'manifest.json': 'not json\n'}])
def test_a_folder_of_files_not_built_here_is_refused_without_overwrite(tmp_path, files):
  for name, text in files.items():
    (tmp_path / name).write_text(text)
  with pytest.raises(ValueError, match=rf'^--output_dir={tmp_path} holds files that build_corpus '
                     r'did not write \(no manifest.json of a shakespeare_kjv corpus there\): pass '
                     r'a new or empty folder, or --overwrite to replace its manifest.json, '
                     r'vocab.txt and shakespeare_kjv.txt.gz, shakespeare_kjv_eval.txt.gz$'):
    build(tmp_path)
  assert {p.name: p.read_text() for p in tmp_path.iterdir()} == files  # Nothing replaced.
  manifest = build(tmp_path, overwrite=True)
  assert json.loads((tmp_path / 'manifest.json').read_text()) == manifest


def test_its_own_corpus_is_rebuilt_without_overwrite(tmp_path):
  build(tmp_path)
  (tmp_path / 'vocab.txt').write_text('stale\n')
  build(tmp_path)
  assert (tmp_path / 'vocab.txt').read_text().startswith('[PAD]\n')
  # A build stopped after its splits, before its vocab and manifest: its own files too.
  (tmp_path / 'vocab.txt').unlink()
  (tmp_path / 'manifest.json').unlink()
  build(tmp_path)
  assert sorted(os.listdir(tmp_path)) == ['manifest.json', 'shakespeare_kjv.txt.gz',
                                          'shakespeare_kjv_eval.txt.gz', 'vocab.txt']


def test_a_folder_of_other_files_gets_the_corpus_beside_them(tmp_path):
  """Review of 2026-12-01: a folder holding only a .gitkeep or notes was refused, though a
  build replaces none of them."""
  (tmp_path / '.gitkeep').write_text('')
  (tmp_path / 'notes.txt').write_text('mine\n')
  build(tmp_path)
  assert (tmp_path / 'notes.txt').read_text() == 'mine\n' and (tmp_path / '.gitkeep').exists()
  assert (tmp_path / 'manifest.json').exists()
