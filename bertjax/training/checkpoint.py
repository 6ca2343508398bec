"""The one checkpoint policy: resume from the workdir, else load `init_from`, else start fresh.

Checkpoints are orbax CheckpointManager steps under <workdir>/checkpoints/<step>, each with two
items: `state` (the TrainState: params, optimizer state, step, dropout RNG) and `meta` (JSON:
the step, the number of training examples consumed, which is the data position, the model
config and the mesh that wrote it). Saves are asynchronous; the manager keeps the last
`keep` steps plus the `keep_best` best by checkpoint.best_metric (default: the job's main eval
metric, pre-training's MLM accuracy, a task's own) in checkpoint.best_mode ('max' or 'min';
default: 'min' for loss-like names). An eval step's meta item records its rank (`ranking`: the
metric, mode and value), which readers use for --step=best; every eval's metrics are also kept
in <workdir>/eval_history.json (run_files.py), from which early stopping counts after a resume.

Restoring reads each array straight into the sharding the current mesh asks for, so a run may
resume on another mesh. The meta item records a digest of every array (checkpoint_damage.py),
checked after each restore: a flipped bit is found even where the format has no checksum. A
newest checkpoint whose bytes are damaged (half-written, a file missing or cut, a digest that
disagrees, a meta without its step) is moved aside to <step>.unreadable-<time> with a warning
and the previous one used; nothing is deleted. Any other restore error (permissions, memory, a
bug) stops the run, the checkpoints left where they are; with none readable, the run stops,
and so do later runs in that workdir: never a silent fresh start. A multi-host job's hosts
agree on each verdict and on a save's free space (hosts.worst).
"""

import contextlib
import functools
import os
import time

from absl import logging
import flax
import jax
from jax.experimental import multihost_utils
import orbax.checkpoint as ocp
import tensorstore as ts

from bertjax import file_errors
from bertjax import files
from bertjax.training import checkpoint_damage
from bertjax.training import checkpoint_space
from bertjax.training import hosts
from bertjax.training import ranking
from bertjax.training import read_retries
from bertjax.training import run_files


def orbax_path(path) -> str:
  """`path` as orbax's clients (etils.epath, tensorstore) name it: they know gs:// only, not
  gcsfs' alias gcs:// that bertjax.files takes; a local path absolute (a relative one failed
  every restore, which then read as a damaged checkpoint)."""
  path = str(path)
  if '://' not in path:
    return os.path.abspath(path)  # local: orbax takes local paths absolute.
  return 'gs://' + path[len('gcs://'):] if path.startswith('gcs://') else path


def checkpoint_dir(workdir) -> str:
  return orbax_path(files.join(str(workdir).rstrip('/') if files.is_remote(workdir) else workdir,
                               'checkpoints'))


def _ranked_only(best: ocp.checkpoint_managers.BestN, metric: str):
  """`best` over the steps whose metrics hold `metric` (saved at an eval); a step saved at no
  eval is never kept as a best (a run without evals would keep its first save forever). Steps
  without metrics (saved before orbax kept them) are kept, as BestN keeps them."""

  class RankedOnly(ocp.checkpoint_managers.PreservationPolicy):
    def should_preserve(self, checkpoints, *, context):
      ranked = [i for i, c in enumerate(checkpoints)
                if c.metrics is None or c.metrics.get(metric) is not None]
      kept = best.should_preserve([checkpoints[i] for i in ranked], context=context)
      chosen = {i for i, keep in zip(ranked, kept, strict=True) if keep}
      return [i in chosen for i in range(len(checkpoints))]

  return RankedOnly()


def manager(workdir, config, *, best_metric: str, mode: str = 'max',
            keep_best: int | None = None) -> ocp.CheckpointManager:
  """An orbax manager for <workdir>/checkpoints following config.checkpoint: the run's own,
  which writes, cleans and deletes there (a tool that only reads a run: checkpoint_reader).

  `best_metric` in `mode` ranks checkpoints for the `keep_best` best (None: the config's).
  """
  keep_best = config.checkpoint.keep_best if keep_best is None else keep_best
  policies = [ocp.checkpoint_managers.LatestN(n=config.checkpoint.keep)]

  def ranked(metrics):  # A later phase's eval first (ranking.phase_start), then rank's order.
    return (metrics.get('phase_start', 0),
            *ranking.rank(metrics.get(best_metric), metrics.get('step', 0), mode))

  if keep_best:
    # The step rides in the saved metrics so that ties go to the earlier step (get_metric_fn
    # sees the metrics only), and so does the first step of the eval's phase; a step saved
    # under another metric, or at no eval, is not ranked (LatestN alone keeps it).
    # Steps without metrics are kept: orbax reads a step's metrics back from its folder, and
    # runs saved before best_fn was set (below) have none there, so after a resume their best
    # would be deleted at the first save.
    policies.append(_ranked_only(ocp.checkpoint_managers.BestN(
        get_metric_fn=ranked, n=keep_best, keep_checkpoints_without_metrics=True), best_metric))
  options = ocp.CheckpointManagerOptions(
      # Set, orbax writes each save's metrics into its step folder, so that a resumed run
      # still ranks the steps saved before it (the preservation policy above decides).
      best_fn=ranked if keep_best else None,
      # Only every N steps (orbax would also save the first step of a run by default); the
      # loop forces the last step and preemption saves.
      save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(
          config.checkpoint.every_steps),
      preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
      # Leftovers of a save killed mid-write.
      cleanup_tmp_directories=True)
  directory = checkpoint_dir(workdir)
  if unmarked := checkpoint_damage.unmarked_whole(directory,
                                                  run_files.checkpoint_steps(directory)):
    # orbax takes a bucket's steps without its mark for a save killed midway, and deletes them
    # as it starts (cleanup_tmp_directories): a run copied up from a disk would lose them all.
    raise RestoreError(
        f'{directory} holds the steps {unmarked} without orbax\'s mark of a finished save in a '
        'bucket (commit_success.txt: a run copied up from a disk has none): orbax would delete '
        'them as it starts and the run would begin again from step 0. Mark each whole step '
        f'(gsutil cp /dev/null {directory}/<step>/commit_success.txt) to resume from it, or '
        'point --workdir elsewhere')
  return ocp.CheckpointManager(
      directory, options=options,
      item_handlers={'state': state_handler(), 'meta': ocp.JsonCheckpointHandler()})


def state_handler() -> ocp.PyTreeCheckpointHandler:
  """The handler of the `state` item: orbax's standard one, except that one process on CPU
  saves each replicated array whole.

  orbax's replica-parallel save has each replica of an array write a slice of it, which
  spreads the device-to-host copies over the replicas of a TPU host or a pod. On one CPU
  process every "device" is the same host memory: the slices parallelize nothing and cost a
  compile per array shape and device (2 to 5 s on the first save of a tiny BERT's state; two
  short training tests took 93 s without them, 142 s with). Either way each element is
  written once, and each reads the other's checkpoints (tests/training/checkpoint_test.py).
  Elsewhere orbax decides (it turns it off where JAX_PLATFORMS names a GPU).
  """
  handlers = {ty: ocp.type_handlers.get_type_handler(ty)
              for ty in ocp.type_handlers.supported_types()}
  if jax.process_count() == 1 and jax.default_backend() == 'cpu':
    # Keeps the default handler's array-metadata store (the attribute orbax itself reads).
    handlers[jax.Array] = ocp.type_handlers.ArrayHandler(
        use_replica_parallel=False,
        array_metadata_store=getattr(handlers[jax.Array], '_array_metadata_store', None))
  return ocp.PyTreeCheckpointHandler(
      # StandardCheckpointHandler's limits (PyTreeCheckpointHandler's default is none).
      save_concurrent_gb=96, restore_concurrent_gb=96,
      type_handler_registry=ocp.type_handlers.create_type_handler_registry(*handlers.items()))


class RestoreError(RuntimeError):
  """An intact checkpoint could not be restored (memory, permissions, another config): nothing
  was moved, and the message says what to change."""


def save(mngr: ocp.CheckpointManager, step: int, state, meta: dict, *, metrics=None,
         force: bool = False) -> bool:
  """Starts an async save of `state` and `meta` (plus the state's digests) at `step`
  (every_steps apart unless force), once the disk is known to hold it."""
  checkpoint_space.check_space(mngr, step, state)
  meta = meta | {'digests': checkpoint_damage.digests(state)}
  # A full disk, also the previous save's, as one error.
  with checkpoint_space.disk_full_as_one_error(mngr):
    return mngr.save(step, args=ocp.args.Composite(state=ocp.args.PyTreeSave(state),
                                                   meta=ocp.args.JsonSave(meta)),
                     metrics=metrics, force=force)


@contextlib.contextmanager
def closing(mngr: ocp.CheckpointManager):
  """Waits for the last save and closes the manager after the block; when the block fails,
  closes it quietly (a failed save would only repeat itself) and lets the error through."""
  try:
    yield mngr
  except BaseException:
    hosts.unwinding()  # Another host's stop does not cut the save's end short.
    try:
      mngr.close()
    except Exception:  # pylint: disable=broad-except
      logging.debug('closing the checkpoint manager after an error failed too', exc_info=True)
    raise
  wait(mngr)
  mngr.close()


def wait(mngr: ocp.CheckpointManager):
  """Waits for the async save in flight, reporting a full disk as one clear error."""
  with checkpoint_space.disk_full_as_one_error(mngr):
    mngr.wait_until_finished()


def _move_aside(mngr: ocp.CheckpointManager, step: int):
  """Renames an unreadable step directory so that it is neither resumed nor overwritten."""
  if jax.process_index() == 0:
    # mngr.directory is an epath: pathlib would mangle gs:// and cannot rename on GCS.
    path = mngr.directory / str(step)
    target = mngr.directory / f'{step}.unreadable-{int(time.time())}'
    path.rename(target)
    logging.warning('moved the unreadable checkpoint %s to %s (kept for inspection)', path, target)
  multihost_utils.sync_global_devices(f'bertjax-move-aside-{step}')
  mngr.reload()


def restore_latest(mngr: ocp.CheckpointManager, abstract_state):
  """(state, meta) of the newest readable checkpoint, or None when there is none: the run's
  own resume. `abstract_state` holds jax.ShapeDtypeStructs with the shardings to restore into.
  A newest step whose bytes are damaged is moved aside and the previous one read. The hosts of
  a multi-host job agree on each step's verdict, after the tree's check (each host reads it)
  and after the restore (each its own shards): one host's damage moves the step aside for all,
  another error on one host stops all. (A host failing inside orbax's restore, whose end is a
  barrier, leaves the others there until the job's timeout.)"""
  steps = sorted(mngr.all_steps(), reverse=True)
  # The same steps on every host, or their verdicts would pair other steps' (a stale listing).
  hosts.check_same_view(str(mngr.directory), f'checkpoint steps {steps}', fix=(
      'every host must list the same checkpoints (a listing behind on one host: rerun)'))
  for step in steps:
    _check_params_fit(mngr, step, abstract_state.params)
    _check_key_fits(mngr, step, getattr(abstract_state, 'rng', None))
    if not _agreed(mngr, step, functools.partial(check_tree, mngr.directory / str(step) / 'state')):
      continue
    restored = {}

    def restore(step=step, restored=restored):
      restored.update(mngr.restore(step, args=ocp.args.Composite(
          state=ocp.args.PyTreeRestore(
              abstract_state, restore_args=ocp.checkpoint_utils.construct_restore_args(
                  abstract_state)),
          meta=ocp.args.JsonRestore())))
      checkpoint_damage.check_restored(step, restored['state'], restored['meta'])

    if not _agreed(mngr, step, checkpoint_damage.closing_abandoned_reads(restore)):
      restored.clear()  # Not held while the previous step is read.
      continue
    meta = restored['meta']
    if int(meta['step']) != step:
      raise ValueError(f'checkpoint {mngr.directory}/{step} says step {meta["step"]}: it was '
                       'copied or renamed by hand; restore the original directory name.')
    logging.info('restored step %d from %s (%d examples consumed)', step, mngr.directory,
                 meta['examples_consumed'])
    return restored['state'], meta
  if steps:
    message = (f'none of the checkpoints {steps} in {mngr.directory} can be read: they were '
               'moved aside; delete them or point --workdir elsewhere to start fresh.')
    logging.error(message)  # One line in the log, whatever else is printing at exit.
    raise ValueError(message)
  # A restart after the error above (a job scheduler retrying) must not start fresh either.
  aside = sorted(p.name for p in mngr.directory.glob('*.unreadable-*'))
  if aside:
    raise ValueError(f'{mngr.directory} holds no readable checkpoint, only ones moved aside as '
                     f'unreadable ({", ".join(aside)}): repair or delete them, or point '
                     '--workdir elsewhere to start fresh.')
  return None


def check_tree(path):
  """Refuses a saved state whose OCDBT tree (its root manifest's data, checksummed) cannot be
  listed, or, on a local disk, one of whose chunks cannot be read (a data file cut short):
  orbax would fail on it too, but leave tensorstore calling into a closed event loop, printing
  hundreds of tracebacks after the error. The local read warms the page cache orbax then reads
  from; a bucket's chunks are not read twice (orbax's reading decides there)."""
  path = orbax_path(path)
  if not files.exists(files.join(path, 'manifest.ocdbt')):
    return  # Not OCDBT, or no manifest at all: orbax's own reading decides.
  remote = files.is_remote(path)
  base = path.rstrip('/') + '/' if remote else f'file://{os.path.abspath(path)}/'
  if not remote:  # A host's folder missing reads as a truncated chunk: named first.
    checkpoint_damage.check_files_named(path)
  try:
    store = ts.KvStore.open({'driver': 'ocdbt', 'base': base},
                            context=read_retries.context()).result()
    keys = store.list().result()
    if not remote:
      for read in [store.read(key) for key in keys]:
        read.result()
  except ValueError as e:  # tensorstore's errors: DATA_LOSS, NOT_FOUND, OUT_OF_RANGE, ...
    if remote and file_errors.unreachable(e):  # Its retries spent: no network.
      raise file_errors.describe(e, path) from None
    if remote and not any(m in str(e) for m in ('DATA_LOSS', 'checksum', 'Error decoding')):
      return  # Perhaps not damage (credentials this client lacks): orbax's reading decides.
    raise checkpoint_damage.DamagedCheckpointError(
        f'{path}: its tree cannot be read ({" ".join(str(e).split())[:600]})') from None


def _agreed(mngr: ocp.CheckpointManager, step: int, read) -> bool:
  """Whether `read()` of `step` went well on every host; False where a host found damage (the
  step is then moved aside for all); raises on every host where one failed otherwise."""
  error = None
  try:
    read()
  except Exception as e:  # pylint: disable=broad-except  # Classified just below.
    _check_same_structure(e, mngr.directory, step)
    error = e
  stop = checkpoint_damage.why_kept(error, mngr.directory, step) if error is not None else None
  verdict, host = hosts.worst(2 if stop else 1 if error is not None else 0)
  if verdict >= 2:
    raise RestoreError(stop or f'checkpoint step {step} in {mngr.directory} could not be '
                       f'restored on process {host}: nothing was moved; its error says what to '
                       'fix before a rerun.') from error
  if not verdict:
    return True
  why = (f'({type(error).__name__}: {" ".join(str(error).split())[:300]})' if error is not None
         else f'on process {host}')  # One line, whatever the library said.
  logging.warning('checkpoint step %d in %s cannot be read %s; falling back to the previous one',
                  step, mngr.directory, why)
  _move_aside(mngr, step)
  return False


def _check_same_structure(error: BaseException, directory, step: int):
  """Raises a one-line RestoreError when `error` is orbax's refusal of a state whose tree
  differs from the checkpoint's (another optimizer: adamw <-> lamb, clipping on or off)."""
  text = str(error)
  if 'tree structures do not match' not in text:
    return
  lines = [line.strip() for line in text.splitlines()[1:] if line.strip()]
  where = lines[0].rstrip(':') if lines else '?'
  raise RestoreError(
      f'checkpoint step {step} in {directory} holds another training state than this config '
      f'builds (they differ at {where}): the optimizer settings that shape its state '
      '(optimizer.name, optimizer.grad_clip_norm on or off, optimizer.layer_decay) must be the '
      "ones the run was written with (its config.json), or start another --workdir with "
      'init_from=<this workdir> to keep only its weights. Nothing was moved.') from None


def state_metadata(path):
  """The saved state's tree of array metadata (shape, dtype), read without the arrays."""
  check_tree(path)
  # Closed after use: an open checkpointer's background tasks print tracebacks at exit.
  with ocp.StandardCheckpointer() as checkpointer:
    metadata = checkpointer.metadata(orbax_path(path))
  if hasattr(metadata, 'item_metadata'):
    if metadata.item_metadata is None:  # orbax found no array metadata to read,
      if files.is_remote(path):  # or could not reach the bucket (its error logged, not raised):
        check_tree(path)  # said as such, not as damage that sends a reader to an older step.
      raise checkpoint_damage.DamagedCheckpointError(
          f'{path} has no readable array metadata (a file of the step is missing or damaged)')
    return metadata.item_metadata.tree
  return metadata


def _check_params_fit(mngr: ocp.CheckpointManager, step: int, abstract_params):
  """Raises when a readable checkpoint holds a different model than the config asks for.

  A changed config is not corruption: without this check its checkpoints would be moved aside.
  """
  try:
    saved = state_metadata(mngr.directory / str(step) / 'state')['params']
    saved = {k: tuple(v.shape) for k, v in flatten(saved).items()}
  except Exception:  # pylint: disable=broad-except  # Unreadable metadata: restore decides.
    return
  wanted = {k: tuple(v.shape) for k, v in flatten(abstract_params).items()}
  if saved == wanted:
    return
  differ = sorted(set(saved) ^ set(wanted)) or sorted(k for k in wanted if saved[k] != wanted[k])
  example = differ[0]
  raise ValueError(
      f'checkpoint {mngr.directory}/{step} holds a different model than the config '
      f'({len(differ)} parameters differ, e.g. {example}: checkpoint {saved.get(example)} vs '
      f'config {wanted.get(example)}): resume with the config that wrote it '
      '(<workdir>/config.json), or use another --workdir (init_from for a new model).')


def prng_settings() -> dict:
  """JAX's settings that decide the bits a key draws (the dropout masks of every step): saved in
  each step's meta, so that a resume under others is said (resume_checks.prng)."""
  return {'impl': str(jax.config.jax_default_prng_impl),
          'threefry_partitionable': bool(jax.config.jax_threefry_partitionable)}


# A raw key's width (uint32 words) -> the implementations that make it.
_KEY_IMPLS = {2: 'threefry2x32 (JAX\'s default)', 4: 'rbg or unsafe_rbg'}


def _check_key_fits(mngr: ocp.CheckpointManager, step: int, abstract_rng):
  """Refuses a resume under another JAX_DEFAULT_PRNG_IMPL whose keys have another width than
  the run's saved key (else orbax's 'Requested shape: (4,) is not compatible with the stored
  shape: (2,)', said as a restore that failed)."""
  if abstract_rng is None:
    return
  try:
    saved = tuple(state_metadata(mngr.directory / str(step) / 'state')['rng'].shape)
  except Exception:  # pylint: disable=broad-except  # Unreadable metadata: restore decides.
    return
  wanted = tuple(abstract_rng.shape)
  if saved == wanted or len(saved) != 1 or len(wanted) != 1:
    return
  saved_impl = _KEY_IMPLS.get(saved[0], f'a PRNG implementation of {saved[0]}-word keys')
  raise ValueError(
      f'checkpoint {mngr.directory}/{step} holds a PRNG key of {saved[0]} words ({saved_impl}) '
      f'and this process makes keys of {wanted[0]} (JAX_DEFAULT_PRNG_IMPL='
      f'{jax.config.jax_default_prng_impl}): resume with the PRNG implementation the run was '
      'trained with (set or unset JAX_DEFAULT_PRNG_IMPL, or jax_default_prng_impl, to match).')


def flatten(tree) -> dict:
  """{'a/b/c': leaf} of a nested dict of parameters."""
  return flax.traverse_util.flatten_dict(dict(tree), sep='/')


def restore_or_initialize(mngr: ocp.CheckpointManager, abstract, global_batch_size: int,
                          initialize, on_resume=None):
  """(state, examples consumed, resumed?) in the one order: resume the workdir's newest
  readable checkpoint into `abstract` (ShapeDtypeStructs with shardings; nothing is drawn
  first), else `initialize()` (init_from's weights, else fresh).

  The data position is the examples consumed, not step x batch: a resumed run may change the
  global batch size and still continue the data where it stopped.
  """
  restored = restore_latest(mngr, abstract)
  if restored is not None:
    state, meta = restored
    if on_resume is not None:  # The job's own checks of what the checkpoint records.
      on_resume(meta)
    consumed = int(meta['examples_consumed'])
    # Against the batch the checkpoint was written with (said once, at the resume that changes
    # it; every later resume repeated it); a checkpoint that records none, step x batch.
    saved_batch = meta.get('global_batch_size')
    if saved_batch is not None and saved_batch != global_batch_size:
      logging.warning('the global batch size changed from %d to %d: data continues from example '
                      '%d, where the checkpoint stopped', saved_batch, global_batch_size, consumed)
    elif saved_batch is None and consumed != int(state.step) * global_batch_size:
      logging.warning('the checkpoint consumed %d examples but step x batch is %d: the global '
                      'batch size changed; data continues from example %d', consumed,
                      int(state.step) * global_batch_size, consumed)
    return state, consumed, True
  return initialize(), 0, False


def abstract_state(state, shardings):
  """ShapeDtypeStructs with shardings: what a checkpoint is restored into."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      state, shardings)
