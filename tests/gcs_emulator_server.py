"""gcp-storage-emulator as tensorstore (orbax's array writer) needs it: `python
tests/gcs_emulator_server.py start --host=... --port=... --in-memory` (its usual arguments).

The emulator's media downloads lack the `x-goog-generation` header that GCS sends and that
tensorstore reads to know which version of an object it got (orbax's save of a checkpoint to
gs:// fails with "Malformed StorageGeneration" otherwise); this adds it, then runs the
emulator's own main. `running()` serves it for a block with the environment gcs_emulator.py
sets (tests whose processes write orbax checkpoints to the emulator override the
`gcs_emulator` fixture with it).
"""

import contextlib
from http import HTTPStatus
import os
import socket
import subprocess
import sys
import time

from gcp_storage_emulator.handlers import objects

_download = objects.download


def _download_with_generation(request, response, storage, *args, **kwargs):
  _download(request, response, storage, *args, **kwargs)
  if response.status not in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT):
    return
  try:
    obj = storage.get_file_obj(request.params['bucket_name'], request.params['object_id'])
  except Exception:  # pylint: disable=broad-except  # Not found: the 404 stands.
    return
  response['x-goog-generation'] = str(obj['generation'])
  response['x-goog-metageneration'] = str(obj.get('metageneration', 1))


objects.download = _download_with_generation  # Before the server's routes are built.



@contextlib.contextmanager
def running():
  """Serves the patched emulator on 127.0.0.1 for the block; yields its environment (also set
  in os.environ, restored after)."""
  import gcs_emulator  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  process = subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, os.path.abspath(__file__), 'start', '--host=127.0.0.1', f'--port={port}',
       '--in-memory'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 30
  while True:
    try:
      socket.create_connection(('127.0.0.1', port), timeout=1).close()
      break
    except OSError:
      if time.time() > deadline or process.poll() is not None:
        process.kill()
        raise RuntimeError('the patched gcp-storage-emulator did not start within 30 s')
      time.sleep(0.2)
  url = f'http://127.0.0.1:{port}'
  env = {'STORAGE_EMULATOR_HOST': url, 'TENSORSTORE_GCS_HTTP_URL': url,
         'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'emulator', 'EPATH_USE_TF': 'false',
         'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false'}
  saved = {k: os.environ.get(k) for k in gcs_emulator.ENV_NAMES}
  from etils.epath import gpath  # pylint: disable=g-import-not-at-top
  from bertjax import files  # pylint: disable=g-import-not-at-top

  def clear_caches():
    gpath._is_tf_installed.cache_clear()  # pylint: disable=protected-access
    files._filesystem.cache_clear()  # pylint: disable=protected-access
    files._REACHED.clear()  # pylint: disable=protected-access

  os.environ.update(env)
  clear_caches()
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
    clear_caches()


if __name__ == '__main__':
  from gcp_storage_emulator import __main__ as emulator  # pylint: disable=g-import-not-at-top
  sys.exit(emulator.main())
