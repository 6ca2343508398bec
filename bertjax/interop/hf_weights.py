"""A transformers directory's weights as numpy arrays by name: model.safetensors (read without
torch; a local file is mapped) or pytorch_model.bin (torch, weights only), whole or sharded
(`*.index.json` names the shards), and the check that they can be read before any work.

Every file is read through bertjax.files, so a directory may be a URL as well as a local path.
"""

import io
import json
import os
import zipfile

import numpy as np

from bertjax import files
from bertjax.interop import hf_names

# transformers' names for a checkpoint saved whole, and for one split into shards (save_pretrained's
# max_shard_size) whose index maps each tensor to its shard file.
SAFETENSORS_FILE = 'model.safetensors'
BIN_FILE = 'pytorch_model.bin'
_INDEX_SUFFIX = '.index.json'


def _check_weights_file(path: str):
  """Refuses a folder, or a Git LFS pointer (a clone made without git-lfs: a few lines of text
  that every reader would call a corrupt file), in the weights' place."""
  if files.isdir(path) and not files.isfile(path):
    raise ValueError(f'{path} is a folder, not the weights file: put the file itself there '
                     '(as save_pretrained writes it).')
  if (size := files.size(path)) > 1024:
    return
  if files.read_bytes(path).startswith(b'version https://git-lfs'):
    raise ValueError(f'{path} is a Git LFS pointer ({size} bytes), not the weights: '
                     'the repository was cloned without git-lfs; run `git lfs install && git lfs '
                     'pull` in it, or download the file itself.')


def _read_safetensors(safetensors_file: str) -> dict:
  from safetensors import numpy as st_numpy  # pylint: disable=g-import-not-at-top
  _check_weights_file(safetensors_file)
  data = files.read_bytes(safetensors_file) if files.is_remote(safetensors_file) else None
  try:  # A local file is mapped, not read whole.
    return st_numpy.load(data) if data is not None else st_numpy.load_file(safetensors_file)
  except Exception as e:  # safetensors raises its own error types for truncated files.
    raise ValueError(f'{safetensors_file} could not be read ({e}): the file is corrupt or '
                     'truncated; download or save it again.') from e


def _read_bin(bin_file: str) -> dict:
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f'{bin_file} is a PyTorch pickle and needs torch to read: '
                      '`pip install torch`, or convert it to model.safetensors.') from e
  _check_weights_file(bin_file)
  try:
    state = torch.load(io.BytesIO(files.read_bytes(bin_file)), map_location='cpu',
                       weights_only=True)
  except Exception as e:  # pylint: disable=broad-except  # Zip and pickle errors of a cut file.
    if 'weights_only' in str(e):  # torch's advice (weights_only=False) would run its code.
      raise ValueError(f'{bin_file} holds objects besides tensors, which bertjax does not '
                       'unpickle (that could run code from the file): save the model again '
                       'with save_pretrained (model.safetensors).') from None
    raise ValueError(f'{bin_file} could not be read ({str(e).splitlines()[0]}): the file is '
                     'corrupt or truncated; download or save it again.') from None
  if not isinstance(state, dict) or not all(hasattr(v, 'numpy') for v in state.values()):
    raise ValueError(f'{bin_file} holds a {type(state).__name__}, not the tensors by name that '
                     'save_pretrained writes: point at a transformers BERT directory.')
  return {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in state.items()}


def _shards(index_file: str) -> tuple[dict, list]:
  """(weight_map, shard files) of a sharded checkpoint's index, every shard checked present."""
  try:
    weight_map = json.loads(files.read_text(index_file))['weight_map']
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f'{index_file} is not a transformers shard index (JSON with a weight_map): '
                     'download or save the checkpoint again.') from e
  directory = files.parent(index_file)
  shard_files = [files.join(directory, shard) for shard in sorted(set(weight_map.values()))]
  for shard_file in shard_files:
    if not files.exists(shard_file):
      raise FileNotFoundError(f'{shard_file}, a shard {index_file} lists, is missing: download '
                              'or save the checkpoint again.')
  return weight_map, shard_files


def _read_shards(index_file: str, read_one) -> dict:
  """The tensors of a sharded checkpoint: each shard its index's weight_map names, read once."""
  weight_map, shard_files = _shards(index_file)
  state = {}
  for shard_file in shard_files:
    state.update(read_one(shard_file))
  missing = sorted(set(weight_map) - set(state))
  if missing:
    raise ValueError(f'{index_file} lists {len(missing)} tensors its shards lack, e.g. '
                     f'{missing[:3]}: the checkpoint is incomplete; download or save it again.')
  return state


def _safetensors_whole(path: str) -> bool:
  """Whether a local safetensors file is as long as its header says (a download cut short is
  not), read from its header alone."""
  with open(path, 'rb') as f:  # local: the header of a file on this machine.
    head = f.read(8)
    length = int.from_bytes(head, 'little') if len(head) == 8 else -1
    try:
      header = json.loads(f.read(length)) if 0 < length < 100_000_000 else None
    except ValueError:
      return False
  if not isinstance(header, dict):
    return False
  ends = [v['data_offsets'][1] for k, v in header.items()
          if k != '__metadata__' and isinstance(v, dict) and 'data_offsets' in v]
  return os.path.getsize(path) == 8 + length + max(ends, default=0)  # local: as above


def _bin_whole(path: str) -> bool:
  """Whether a local pytorch_model.bin may be whole: a zip archive whose directory (at its end)
  reads, or a pickle of torch before 1.6 (the original BERT ports: read by torch.load too; its
  end is not marked, so a cut one is said when it is read)."""
  if zipfile.is_zipfile(path):
    return True
  with open(path, 'rb') as f:  # local: the first byte of a file on this machine.
    return f.read(1) == b'\x80'  # A pickle's protocol mark (a zip, cut or not, starts PK).


def check_weights(directory):
  """Refuses a transformers folder whose weights cannot be read, before any work: none there
  (a Flax-only folder), a shard its index lists missing, or a local model.safetensors or
  pytorch_model.bin (or shard) cut short (their headers and zip directory say), in the words
  the readers use."""
  directory = os.fspath(directory)
  for name, whole_file in ((SAFETENSORS_FILE, _safetensors_whole), (BIN_FILE, _bin_whole)):
    if files.exists(whole := files.join(directory, name)):
      weights = [whole]
    elif files.exists(index := files.join(directory, name + _INDEX_SUFFIX)):
      weights = _shards(index)[1]
    else:
      continue
    for path in weights:
      _check_weights_file(path)
      if not files.is_remote(path) and not whole_file(path):  # A URL's: said when it is read.
        raise ValueError(f'{path} could not be read (shorter than its header says, or not a '
                         'whole zip archive): the file is corrupt or truncated; download or save '
                         'it again.')
    return
  read_state_dict(directory)  # Raises: neither file.


def read_state_dict(directory: str) -> tuple[dict, str]:
  """(tensors by BertModel's names (hf_names.strip_prefix), the file read: the index if
  sharded)."""
  for name, read_one in ((SAFETENSORS_FILE, _read_safetensors), (BIN_FILE, _read_bin)):
    if files.exists(whole := files.join(directory, name)):
      return _floats(hf_names.strip_prefix(read_one(whole)), whole), whole
    if files.exists(index := files.join(directory, name + _INDEX_SUFFIX)):
      return _floats(hf_names.strip_prefix(_read_shards(index, read_one)), index), index
  raise FileNotFoundError(f'{directory} has neither model.safetensors nor pytorch_model.bin '
                          '(whole or sharded with an .index.json): point at a transformers BERT '
                          'directory (save_pretrained output).')


def _floats(state: dict, weights_file: str) -> dict:
  """`state`, refused where a weight is not floating point (int8 or 4-bit packed with scales
  beside it: a quantized checkpoint, whose numbers read as floats would be the model's no
  more); the integer buffers BertModel keeps (position_ids, token_type_ids) may be."""
  stored = sorted(f'{name} ({value.dtype})' for name, value in state.items()
                  if (np.issubdtype(value.dtype, np.integer) or value.dtype == np.bool_)
                  and not name.endswith(hf_names.BUFFERS))
  if stored:
    raise ValueError(f'{weights_file} stores {len(stored)} tensors as integers, e.g. '
                     f'{", ".join(stored[:3])}: a quantized checkpoint, which bertjax would read '
                     'as plain numbers; pass the checkpoint in float32, bfloat16 or float16.')
  return state
