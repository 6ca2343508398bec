"""The notebooks in launch/notebooks run top to bottom at the smoke size CI selects with
BERTJAX_SMOKE=1 (the only change), and are stored without outputs."""

import json
import os
import pathlib
import signal
import sys

import nbclient
import nbformat
import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / 'launch' / 'notebooks'
NAMES = ('quickstart', 'finetune_predict_export', 'tpu_pretrain')


def read(name):
  return nbformat.read(NOTEBOOKS / f'{name}.ipynb', as_version=4)


def test_all_notebooks_are_listed():
  assert sorted(p.stem for p in NOTEBOOKS.glob('*.ipynb')) == sorted(NAMES)


@pytest.mark.parametrize('name', NAMES)
def test_stored_without_outputs(name):
  notebook = read(name)
  nbformat.validate(notebook)
  for cell in notebook.cells:
    if cell.cell_type == 'code':
      assert cell.outputs == [] and cell.execution_count is None, (name, cell.source[:60])
  assert 'widgets' not in notebook.metadata


def _stop_tensorboards(logdir_root):
  """%tensorboard starts a server that outlives the kernel: stop the ones this test started."""
  from tensorboard import manager  # pylint: disable=g-import-not-at-top
  for info in manager.get_all():
    if str(logdir_root) in info.logdir:
      try:
        os.kill(info.pid, signal.SIGTERM)
      except ProcessLookupError:
        pass


def _kernel_spec(tmp_path) -> str:
  """A kernel of this interpreter (a system-wide `python3` spec may name another Python)."""
  spec = tmp_path / 'jupyter' / 'kernels' / 'bertjax-test'
  spec.mkdir(parents=True)
  (spec / 'kernel.json').write_text(json.dumps({
      'argv': [sys.executable, '-m', 'ipykernel_launcher', '-f', '{connection_file}'],
      'display_name': 'bertjax tests', 'language': 'python'}))
  return str(tmp_path / 'jupyter')


def execute(name, tmp_path, monkeypatch, devices=None):
  """The notebook after running every cell in a fresh kernel started in its folder; `devices`
  simulated CPU devices in that kernel (None: the test session's 8)."""
  monkeypatch.setenv('BERTJAX_SMOKE', '1')
  if devices:
    monkeypatch.setenv('XLA_FLAGS', f'--xla_force_host_platform_device_count={devices}')
  monkeypatch.setenv('TMPDIR', str(tmp_path))  # The notebooks' workdirs are under tempdir.
  monkeypatch.setenv('JUPYTER_PATH', _kernel_spec(tmp_path))
  notebook = read(name)
  client = nbclient.NotebookClient(notebook, timeout=600, kernel_name='bertjax-test',
                                   resources={'metadata': {'path': str(NOTEBOOKS)}})
  try:
    client.execute()
  finally:
    _stop_tensorboards(tmp_path)
  return notebook


def outputs(notebook, kind):
  """Every output of `kind` ('stream' text or a MIME type such as 'image/png'), in order."""
  found = []
  for cell in notebook.cells:
    for output in cell.get('outputs', []):
      if kind == 'stream' and output.output_type == 'stream' and output.name == 'stdout':
        found.append(output.text)
      elif kind in output.get('data', {}):
        found.append(output.data[kind])
  return found


def test_quickstart(tmp_path, monkeypatch):
  # One device, as a Colab CPU runtime has (the TPU notebook below runs on all 8).
  notebook = execute('quickstart', tmp_path, monkeypatch, devices=1)
  text = ''.join(outputs(notebook, 'stream'))
  assert 'eval: MLM accuracy' in text, text
  assert 'pretrain finished in ' in text, text  # The job's summary line reaches the notebook.
  assert len(outputs(notebook, 'image/png')) == 1  # The loss and accuracy plot.
  assert outputs(notebook, 'text/html'), 'TensorBoard was not shown'
  assert list((tmp_path / 'bertjax_quickstart' / 'checkpoints').glob('6'))


def test_finetune_predict_export(tmp_path, monkeypatch):
  # One device, as a Colab CPU runtime has (the TPU notebook below runs on all 8).
  notebook = execute('finetune_predict_export', tmp_path, monkeypatch, devices=1)
  text = ''.join(outputs(notebook, 'stream'))
  # The notebook itself asserts that transformers gives bertjax's probabilities.
  assert 'largest difference from bertjax' in text, text
  assert (tmp_path / 'bertjax_bbc_hf' / 'config.json').exists()


def test_tpu_pretrain_prints_the_mesh_over_all_devices(tmp_path, monkeypatch):
  notebook = execute('tpu_pretrain', tmp_path, monkeypatch)
  text = ''.join(outputs(notebook, 'stream'))
  import jax  # pylint: disable=g-import-not-at-top  # The test's devices are the kernel's.
  assert f"mesh: {{'data': {jax.device_count()}, 'fsdp': 1, 'tensor': 1}}" in text, text
  assert "checkpoints: ['2', '4']" in text, text


@pytest.mark.parametrize('name', NAMES)
def test_on_colab_the_setup_cell_installs_once_cloned_and_a_rerun_does_not_clone_again(
    name, tmp_path, monkeypatch):
  """Colab: the notebook alone in /content (on sys.path), bertjax not installed. The setup cell
  clones and installs it; run again (a rerun, a restarted runtime), it finds its clone instead
  of cloning over it, and still installs while pip has not (the cloned folder `bertjax` is
  importable by name alone: it must not pass for the installed package)."""
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  content = tmp_path / 'content'
  content.mkdir()
  monkeypatch.chdir(content)
  calls = []

  def run(command, check=False):
    calls.append(command)
    if command[:2] == ['git', 'clone']:
      if (content / 'bertjax').exists():  # What git does: exit status 128.
        raise subprocess.CalledProcessError(128, command)
      (content / 'bertjax' / 'configs').mkdir(parents=True)
      (content / 'bertjax' / 'configs' / 'pretrain.py').touch()
      (content / 'bertjax' / 'bertjax').mkdir()
    return subprocess.CompletedProcess(command, 0)

  version = importlib.metadata.version

  def not_installed(distribution):
    if distribution == 'bertjax':
      raise importlib.metadata.PackageNotFoundError(distribution)
    return version(distribution)

  monkeypatch.setattr(subprocess, 'run', run)
  monkeypatch.setattr(importlib.metadata, 'version', not_installed)
  monkeypatch.setattr(sys, 'path', [str(content), *sys.path])
  setup = next(cell.source for cell in read(name).cells
               if cell.cell_type == 'code' and cell.source.startswith('# Setup. On Colab'))
  setup = setup.replace("'https://github.com/YOUR-ORG/bertjax'",
                        "'https://github.com/example-org/bertjax'")
  install = [sys.executable, '-m', 'pip', 'install', '-q', '-e', str(content / 'bertjax')]
  for _ in range(2):
    scope = {}
    exec(compile(setup, f'{name} setup', 'exec'), scope)  # pylint: disable=exec-used
    assert scope['CHECKOUT'] == content / 'bertjax'
  assert calls == [['git', 'clone', '-q', '--depth=1', 'https://github.com/example-org/bertjax',
                    'bertjax'], install, install]
