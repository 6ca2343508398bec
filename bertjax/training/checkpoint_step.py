"""One checkpoint step folder: its meta item as the loop writes it (step_meta); and read and
checked, for checkpoint_reader.py: its meta item (the step, the model config, the digests), the
files orbax's layout needs, and its params, each array against the digest the meta item
recorded. What cannot be read raises DamagedCheckpointError (or the reader's own error); which
step to read, and what to do then, is checkpoint_reader's.
"""

import json
import uuid

import jax
import numpy as np
import orbax.checkpoint as ocp

from bertjax import files
from bertjax.training import checkpoint
from bertjax.training import checkpoint_damage
from bertjax.training import read_retries
from bertjax.training import run_files

# The fields of a fine-tuning run's config.data that decide its inputs beside max_seq_length,
# kept in each step's meta (interop/sources.py refuses a config.json that says otherwise).
RECORDED_TOKENIZATION = ('do_lower_case', 'max_chars_per_word', 'max_windows')


def step_meta(config, mesh, step: int, consumed: int, standing: dict | None,
              run: str | None = None) -> dict:
  """The meta item the loop saves with `step`: what a resume (examples consumed, mesh, model),
  --step=best (its ranking) and the readers of a fine-tuned model (its head, length and
  tokenization, against an edited config.json) read back; `run`, the run that saved it
  (run_files.run_id), for check_same_run."""
  return {'step': step, 'examples_consumed': consumed, 'mesh': dict(mesh.shape),
          **({'run': run} if run else {}),
          'global_batch_size': config.global_batch_size,  # A resume says a change once.
          'process_count': jax.process_count(),
          'prng': checkpoint.prng_settings(),  # What its dropout keys draw (resume_checks.prng).
          'epoch_orders': True,  # Each epoch in its own order (resume_checks.epoch_orders).
          'model': json.loads(config.model.to_json()),
          # A task's labels in head order: a config.json edited later cannot reorder them.
          **({'labels': list(config.labels)} if config.get('labels') else {}),
          **({'pooling': config.pooling} if config.get('pooling') else {}),  # As the head reads.
          **({'kind': config.kind} if config.get('task') and config.get('kind') else {}),
          # A fine-tuned model's input length and tokenization (predict reads them from
          # config.json: an edit there would change its inputs without a word).
          **({'max_seq_length': config.data.max_seq_length, 'task': config.task,
              'data': {k: config.data[k] for k in RECORDED_TOKENIZATION if k in config.data}}
             if config.get('task') else {}),
          **({} if standing is None else {'ranking': standing})}


def run_for_save(workdir) -> str:
  """The run the loop's saves name in their meta (run_files.run_id): the one recorded, else the
  newest step's that names one (its record deleted since, or rewritten without it by a bertjax
  from before the record, which resumed the run: its steps name none), else a new one,
  recorded by process 0."""
  if run := run_files.run_id(workdir):
    return run
  checkpoints = files.join(workdir, 'checkpoints')
  named = (_run_of(checkpoints, step) for step in reversed(run_files.checkpoint_steps(checkpoints)))
  run = next((run for run in named if run), None) or uuid.uuid4().hex[:16]
  run_files.name_run(workdir, run)
  return run


def check_same_run(directory, step: int, meta: dict | None = None):
  """Refuses step `step` of checkpoints folder `directory` (its `meta`, read here when None)
  where another run than the workdir's saved it: a step copied in from another run (another
  config or seed), or checkpoints/ swapped with another run's, was resumed or read as this
  run's without a word. A step or a run from before the record (no run in its meta or in
  run_files.SAVED) is not compared."""
  directory = str(directory).rstrip('/')
  if files.name(directory) != 'checkpoints':
    return
  saved = meta.get('run') if meta is not None else _run_of(directory, step)
  workdir = files.parent(directory)
  own = run_files.run_id(workdir) if saved else None
  if own is None or saved == own:
    return
  listed = run_files.checkpoint_steps(directory)
  others = [s for s in listed if s == step or _run_of(directory, s) not in (None, own)]
  ours = [s for s in listed if s not in others]
  then = (f'then step {ours[-1]}, this run\'s newest, is read' if ours else
          "this run's own steps are gone: put its checkpoints/ back")
  raise ValueError(
      f'{directory}/{step} was saved by another run than {workdir} (its meta names run '
      f'{saved}; {workdir}/{run_files.SAVED} names run {own}): copied in from another run (another '
      f'config or seed), or checkpoints/ swapped with another run\'s. Move step(s) '
      f'{", ".join(map(str, others))} out of {directory} ({then}); moved to a folder of its own '
      'under its number (DIR/9), a step is read as init_from=DIR/9 in another --workdir.')


def _run_of(directory: str, step: int) -> str | None:
  """The run a step's meta names (None: none recorded, or no readable meta)."""
  try:
    return read_meta(files.join(directory, str(step))).get('run')
  except (checkpoint_damage.DamagedCheckpointError, OSError):
    return None


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
  with read_retries.bounded():  # A network gone: an error in a minute, not 15.
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
