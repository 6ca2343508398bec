"""gcp-storage-emulator as tensorstore (orbax's array writer) needs it: `python
tests/gcs_emulator_server.py start --host=... --port=... --in-memory` (its usual arguments).

The emulator's media downloads lack the `x-goog-generation` header that GCS sends and that
tensorstore reads to know which version of an object it got (orbax's save of a checkpoint to
gs:// fails with "Malformed StorageGeneration" otherwise); this adds it, then runs the
emulator's own main. tests/gcs_emulator.py starts it for the tests.
"""

from http import HTTPStatus
import sys

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



if __name__ == '__main__':
  from gcp_storage_emulator import __main__ as emulator  # pylint: disable=g-import-not-at-top
  sys.exit(emulator.main())
