"""A real GCS JSON API served on 127.0.0.1 (the gcp-storage-emulator package) for tests that
pass gs:// URLs through bertjax, in this process and in the processes it starts.

Who reaches it: bertjax.files through gcsfs (STORAGE_EMULATOR_HOST), orbax's metadata through
etils.epath's fsspec backend (EPATH_USE_TF=false: TensorFlow's GCS client has no endpoint
setting) and orbax's arrays through tensorstore (TENSORSTORE_GCS_HTTP_URL).
"""

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest
import two_processes

ENV_NAMES = ('STORAGE_EMULATOR_HOST', 'TENSORSTORE_GCS_HTTP_URL', 'GOOGLE_AUTH_TOKEN_FOR_TESTING',
             'EPATH_USE_TF', 'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT')



@contextlib.contextmanager
def running():
  """Serves the emulator (tests/gcs_emulator_server.py: with the header tensorstore reads) on
  127.0.0.1 for the block; yields its environment, set in os.environ and restored after."""
  port = two_processes.free_port()
  process = subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    'gcs_emulator_server.py'),
       'start', '--host=127.0.0.1', f'--port={port}', '--in-memory'],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 30
  while True:
    try:
      socket.create_connection(('127.0.0.1', port), timeout=1).close()
      break
    except OSError as error:
      if time.time() > deadline or process.poll() is not None:
        process.kill()
        raise RuntimeError('gcp-storage-emulator did not start within 30 s') from error
      time.sleep(0.2)
  url = f'http://127.0.0.1:{port}'
  env = {'STORAGE_EMULATOR_HOST': url, 'TENSORSTORE_GCS_HTTP_URL': url,
         'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'emulator', 'EPATH_USE_TF': 'false',
         'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false'}
  saved = {k: os.environ.get(k) for k in ENV_NAMES}
  os.environ.update(env)
  _clear_caches()
  try:
    yield env
  finally:
    process.kill()
    process.wait()
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
    _clear_caches()


def _clear_caches():
  """The clients bertjax and orbax chose for gs:// are cached per process: choose again."""
  from etils.epath import gpath  # pylint: disable=g-import-not-at-top

  from bertjax import object_store  # pylint: disable=g-import-not-at-top
  gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access
  object_store.filesystem.cache_clear()
  object_store.REACHED.clear()


@pytest.fixture(scope='session')
def gcs_emulator():
  """The emulator's environment (also in os.environ for the session)."""
  if importlib.util.find_spec('gcp_storage_emulator') is None:
    message = 'gcp-storage-emulator is not installed: pip install -e ".[test]"'
    if os.environ.get('CI', '').lower() == 'true':
      pytest.fail(message)
    pytest.skip(message)
  with running() as env:
    yield env


@pytest.fixture
def gcs_bucket(gcs_emulator):  # pylint: disable=redefined-outer-name,unused-argument
  """A new, empty bucket on the emulator: its gs:// URL."""
  import gcsfs  # pylint: disable=g-import-not-at-top
  bucket = f'test-{uuid.uuid4().hex[:12]}'
  gcsfs.GCSFileSystem(token='anon').mkdir(bucket)
  return f'gs://{bucket}'
