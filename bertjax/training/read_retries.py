"""How a read of a checkpoint in a bucket retries: tensorstore's own retries (32 tries, the wait
doubling to 32 s) held a predict or an export some 15 minutes without a line where the network
went between a step's metadata and its arrays; a reader's retries end in about a minute, as gcsfs'
tries do for bertjax's own reads. A training's saves keep tensorstore's.
"""

import contextlib

import tensorstore as ts

# tensorstore's retries of a request to a bucket while a step is read.
READ_RETRIES = {'max_retries': 8, 'initial_delay': '1s', 'max_delay': '8s'}


def context() -> ts.Context:
  """A tensorstore context whose requests to a bucket retry as READ_RETRIES says."""
  return ts.Context({'gcs_request_retries': READ_RETRIES})


@contextlib.contextmanager
def bounded():
  """orbax's reads in the block retry a bucket's request as READ_RETRIES says. orbax takes no
  tensorstore context from its caller: the defaults it copies into each one hold the setting for
  the block (an orbax without them keeps tensorstore's retries)."""
  try:
    from orbax.checkpoint._src.serialization import tensorstore_utils  # pylint: disable=g-import-not-at-top
    defaults = [tensorstore_utils._BASE_TS_CONTEXT,  # pylint: disable=protected-access
                tensorstore_utils._DEFAULT_OCDBT_TS_CONTEXT]  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    defaults = []
  saved = [d.get('gcs_request_retries') for d in defaults]
  for default in defaults:
    default['gcs_request_retries'] = dict(READ_RETRIES)
  try:
    yield
  finally:
    for default, before in zip(defaults, saved, strict=True):
      if before is None:
        default.pop('gcs_request_retries', None)
      else:
        default['gcs_request_retries'] = before
