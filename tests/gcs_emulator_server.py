"""gcp-storage-emulator as tensorstore (orbax's array writer) needs it: `python
tests/gcs_emulator_server.py start --host=... --port=... --in-memory` (its usual arguments).

The emulator's media downloads lack the `x-goog-generation` header that GCS sends and that
tensorstore reads to know which version of an object it got (orbax's save of a checkpoint to
gs:// fails with "Malformed StorageGeneration" otherwise); this adds it, then runs the
emulator's own main. tests/gcs_emulator.py starts it for the tests.

Its multipart upload parser (Python's email package) also drops a content's last byte when it is
a carriage return: gcsfs ends the content with `\n--==0==--`, and the parser takes the `\r\n` as
the line break before the boundary. A TensorBoard events file whose last CRC byte is 0x0d (1 in
256) then lost its last record. The uploads are parsed exactly here instead, as GCS does.
"""

from http import HTTPStatus
import json
import re
import sys

from gcp_storage_emulator import server
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

_read_data = server._read_data  # pylint: disable=protected-access


def multipart_related(body: bytes, content_type: str) -> list[tuple[dict, bytes]]:
  """The parts of a multipart/related body, each (headers, content) byte for byte: the line
  break before a boundary is the one the body itself uses after its first boundary (gcsfs: LF,
  others CRLF), never a byte of the content."""
  boundary = re.search(r'boundary="?([^";]+)"?', content_type).group(1).encode()
  delimiter = b'--' + boundary
  first = body.index(delimiter) + len(delimiter)
  newline = b'\r\n' if body[first:first + 2] == b'\r\n' else b'\n'
  parts = []
  for chunk in body[first + len(newline):].split(newline + delimiter):
    if chunk.startswith(b'--'):  # The closing delimiter.
      break
    chunk = chunk.removeprefix(newline)
    head, _, content = chunk.partition(newline + newline)
    headers = dict(line.split(b':', 1) for line in head.split(newline) if b':' in line)
    parts.append(({k.strip().decode().lower(): v.strip().decode() for k, v in headers.items()},
                  content))
  return parts


def _read_data_exactly(request_handler, query):
  content_type = request_handler.headers.get('Content-Type') or ''
  if not content_type.startswith('multipart/related'):
    return _read_data(request_handler, query)
  body = server._decode_raw_data(  # pylint: disable=protected-access
      server._read_raw_data(request_handler), request_handler)  # pylint: disable=protected-access
  (_, meta), (headers, content) = multipart_related(body, content_type)[:2]
  return {'meta': json.loads(meta), 'content': content,
          'content-type': headers.get('content-type', 'application/octet-stream')}


server._read_data = _read_data_exactly  # pylint: disable=protected-access



if __name__ == '__main__':
  from gcp_storage_emulator import __main__ as emulator  # pylint: disable=g-import-not-at-top
  sys.exit(emulator.main())
