"""One checkpoint step folder read and checked, for checkpoint_reader.py: its meta item (the
step, the model config, the digests), the files orbax's layout needs, and its params, each array
against the digest the meta item recorded. What cannot be read raises DamagedCheckpointError
(or the reader's own error); which step to read, and what to do then, is checkpoint_reader's.
"""

import json

import jax
import numpy as np
import orbax.checkpoint as ocp

from bertjax import files
from bertjax.training import checkpoint
from bertjax.training import checkpoint_damage


def read_meta(step_dir) -> dict:
  """The meta item of a step folder; DamagedCheckpointError when it has none readable."""
  meta_dir = files.join(step_dir, 'meta')
  names = files.listdir(meta_dir) if files.isdir(meta_dir) else []
  for name in names:
    try:
      meta = json.loads(files.read_text(files.join(meta_dir, name)))
    except (ValueError, IsADirectoryError, FileNotFoundError):
      continue
    if isinstance(meta, dict) and isinstance(meta.get('step'), int):
      return meta
  raise checkpoint_damage.DamagedCheckpointError(f'{step_dir} has no readable meta item (the step, '
                                          'the model config and the digests)')


def _check_state_files(state: str):
  """Refuses a state folder missing the files orbax's OCDBT layout reads: given one, orbax's
  read of it fails late and leaves tensorstore retrying in the background, printing tracebacks
  for as long as the process lives."""
  if not files.exists(files.join(state, '_METADATA')):
    raise checkpoint_damage.DamagedCheckpointError(f'{state} has no _METADATA file')
  folders = [state] + [files.join(state, name) for name in files.listdir(state)
                       if name.startswith('ocdbt.process_')]
  for folder in folders:
    data = files.join(folder, 'd')
    if files.exists(files.join(folder, 'manifest.ocdbt')) and not (
        files.isdir(data) and files.listdir(data)):
      raise checkpoint_damage.DamagedCheckpointError(f'{data} (its data files) is missing')


def read_step(step_dir: str, step: int) -> tuple[dict, dict]:
  """(params as host numpy, meta item) of step folder `step_dir`, which must be step `step`;
  DamagedCheckpointError for missing files or an array that differs from its digest."""
  meta = read_meta(step_dir)
  if meta['step'] != step:
    raise ValueError(f'checkpoint {step_dir} says step {meta["step"]}: it was copied or renamed '
                     'by hand; restore the original folder name.')
  state = files.join(step_dir, 'state')  # orbax reads a URL through etils.epath/tensorstore.
  _check_state_files(state)
  tree = checkpoint.state_metadata(state)
  # Without a target mesh: arrays come back as host numpy, whatever mesh wrote them.
  target = jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), tree['params'],
                        is_leaf=lambda m: hasattr(m, 'shape'))
  restored = ocp.PyTreeCheckpointer().restore(
      checkpoint.orbax_path(state), args=ocp.args.PyTreeRestore(
          item={'params': target},
          restore_args={'params': jax.tree.map(
              lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)},
          partial_restore=True))
  params = restored['params']
  saved = {k[len('.params'):]: v for k, v in meta.get('digests', {}).items()
           if k.startswith('.params')}
  if saved:
    found = checkpoint_damage.digests(params)
    bad = sorted(k for k, v in saved.items() if found.get(k) != v)
    if bad or set(found) != set(saved):
      raise checkpoint_damage.DamagedCheckpointError(
          f'{len(bad)} parameter array(s) differ from what was saved (digest), e.g. '
          f'{(bad or sorted(set(found) ^ set(saved)))[0]}')
  return params, meta
