"""The wheel tpu_pod installs on a slice's workers (tpu_vm.build_wheel): built by pip from a fresh
copy of the checkout the launcher belongs to (a stale build/ left out, whatever the current
folder), named as pip named it (pyproject's version), and refused before booking when pip built
none or several."""

import os
import pathlib
import subprocess
import tomllib
import zipfile

from pod_fakes import MAIN_ARGS
from pod_fakes import REPO
from pod_fakes import slice_
import pytest

from launch import cloud
from launch import tpu_pod
from launch import tpu_vm

PYPROJECT = '''[build-system]
requires = ["setuptools>=77", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "bertjax"
version = "9.9.9"
readme = "README.md"

[tool.setuptools.packages.find]
include = ["bertjax*"]
'''


def checkout(root: pathlib.Path) -> pathlib.Path:
  """A checkout of a small bertjax whose package says another version than pyproject's, with a
  stale build/ (setuptools' build/lib keeps a module deleted since) and a dist/ wheel of its own."""
  (root / 'bertjax').mkdir(parents=True)
  (root / 'pyproject.toml').write_text(PYPROJECT)
  (root / 'setup.cfg').write_text('[flake8]\nmax-line-length = 100\n')
  (root / 'README.md').write_text('# bertjax\n')
  (root / 'bertjax' / '__init__.py').write_text("__version__ = '0.1.0'\n")
  (root / 'build' / 'lib' / 'bertjax').mkdir(parents=True)
  (root / 'build' / 'lib' / 'bertjax' / 'deleted_since.py').write_text('STALE = True\n')
  (root / 'dist').mkdir()
  (root / 'dist' / 'bertjax-0.0.1-py3-none-any.whl').write_bytes(b'')
  return root


def test_the_wheel_is_the_one_pip_built_from_a_clean_copy_of_the_launchers_checkout(
    tmp_path, monkeypatch):
  """Hostile pass A: the wheel's name was guessed from bertjax.__version__ (pyproject's version
  differing, the scp failed once the slice was ACTIVE), and `pip wheel .` built the current
  folder, reusing its build/lib (a deleted module shipped)."""
  root = checkout(tmp_path / 'checkout')
  elsewhere = tmp_path / 'elsewhere'  # The current folder: not what is built.
  elsewhere.mkdir()
  monkeypatch.chdir(elsewhere)
  folder = tmp_path / 'wheel'
  folder.mkdir()
  wheel = tpu_vm.build_wheel(cloud.Runner(False), str(folder), root)
  assert pathlib.Path(wheel) == folder / 'bertjax-9.9.9-py3-none-any.whl'
  names = zipfile.ZipFile(wheel).namelist()
  assert 'bertjax/__init__.py' in names and 'bertjax/deleted_since.py' not in names, names
  assert not (root / 'bertjax.egg-info').exists() and os.listdir(elsewhere) == []


@pytest.mark.parametrize('built', [[], ['bertjax-1.0-py3-none-any.whl',
                                        'bertjax-2.0-py3-none-any.whl']])
def test_no_wheel_or_several_are_refused_before_booking(tmp_path, monkeypatch, built):
  monkeypatch.chdir(REPO)
  calls = []

  def run(cmd, **_):  # pip, building `built` into its --wheel-dir.
    calls.append(cmd)
    if 'wheel' in cmd:
      folder = next(a for a in cmd if a.startswith('--wheel-dir=')).partition('=')[2]
      for name in built:
        pathlib.Path(folder, name).write_bytes(b'')
    return subprocess.CompletedProcess(cmd, 0, 'ACTIVE\n')

  with pytest.raises(RuntimeError, match=rf'^pip wheel built {len(built)} bertjax wheels in '
                     rf'\S+ \({", ".join(built) or "none"}\), not one: see its output above, '
                     rf'mend {REPO}/pyproject.toml and run this again$'):
    tpu_pod.launch(slice_(), MAIN_ARGS, 'gs://bkt/runs/base', run=run, poll_s=0)
  assert len(calls) == 1 and calls[0][1:4] == ['-m', 'pip', 'wheel'], calls  # Nothing booked.


def test_the_copy_holds_what_pyproject_packages(tmp_path):
  """WHEEL_SOURCES follows pyproject.toml: the bertjax* packages and the readme it names."""
  pyproject = tomllib.loads((REPO / 'pyproject.toml').read_text())
  assert pyproject['tool']['setuptools']['packages']['find']['include'] == ['bertjax*']
  assert pyproject['project']['readme'] in tpu_vm.WHEEL_SOURCES
  assert tpu_vm.CHECKOUT == REPO
  wheel = tpu_vm.build_wheel(cloud.Runner(True), str(tmp_path))  # Dry: pip runs not.
  assert wheel == f'{tmp_path}/bertjax-{pyproject["project"]["version"]}-py3-none-any.whl'
  assert sorted(os.listdir(tmp_path / 'source')) == sorted(tpu_vm.WHEEL_SOURCES)
  assert not list((tmp_path / 'source').rglob('__pycache__'))


def test_a_checkout_that_cannot_be_copied_or_read_is_one_line_before_booking(tmp_path):
  """Review of 2026-12-01: an OSError of the copy, or a pyproject without a version, reached the
  user as a traceback (tpu_pod says ValueError and RuntimeError in one line)."""
  root = checkout(tmp_path / 'checkout')
  (root / 'pyproject.toml').write_text('[project]\nname = "bertjax"\n')  # A dynamic version.
  with pytest.raises(RuntimeError, match=rf"^cannot build the wheel of {root} in .* \(KeyError: "
                     r"'version'\): mend that, or pass --git_ref"):
    tpu_vm.build_wheel(cloud.Runner(True), str(tmp_path / 'dry'), root)
  (tmp_path / 'taken').mkdir()
  (tmp_path / 'taken' / 'source').write_text('')  # Where the copy goes: a file.
  with pytest.raises(RuntimeError, match=r'^cannot build the wheel of .* \(FileExistsError: '):
    tpu_vm.build_wheel(cloud.Runner(True), str(tmp_path / 'taken'), root)
