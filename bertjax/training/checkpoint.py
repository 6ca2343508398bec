"""The one checkpoint policy: resume from the workdir, else `init_from`, else start fresh.

Checkpoints are orbax CheckpointManager steps under <workdir>/checkpoints/<step>, each with two
items: `state` (the TrainState: params, optimizer state, step, dropout RNG) and `meta` (JSON:
the step, the number of training examples consumed, which is the data position, the model
config and the mesh that wrote it). Saves are asynchronous; the manager keeps the last
`keep` steps plus the `keep_best` best by eval MLM accuracy.

Restoring reads each array straight into the sharding the current mesh asks for, so a run may
resume on a different mesh shape. A newest checkpoint that cannot be read (half-written, a file
missing or truncated) is moved aside to <step>.unreadable-<time> with a warning and the previous
one is used; nothing is deleted. When none is readable the run stops with an error, and so do
later runs in that workdir: never a silent fresh start.
"""

import json
import pathlib
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from bertjax.interop import hf_checkpoint

BEST_METRIC = 'mlm_accuracy'  # Eval metric that ranks checkpoints for keep_best.


def checkpoint_dir(workdir) -> str:
  return str(pathlib.Path(workdir) / 'checkpoints') if '://' not in str(workdir) else (
      str(workdir).rstrip('/') + '/checkpoints')


def manager(workdir, config, best_metric: str = BEST_METRIC) -> ocp.CheckpointManager:
  """An orbax manager for <workdir>/checkpoints following config.checkpoint.

  `best_metric` (higher is better) ranks checkpoints for keep_best.
  """
  policies = [ocp.checkpoint_managers.LatestN(n=config.checkpoint.keep)]
  if config.checkpoint.keep_best:
    policies.append(ocp.checkpoint_managers.BestN(
        get_metric_fn=lambda metrics: metrics[best_metric], n=config.checkpoint.keep_best,
        keep_checkpoints_without_metrics=False))
  options = ocp.CheckpointManagerOptions(
      # Only every N steps (orbax would also save the first step of a run by default); the
      # loop forces the last step and preemption saves.
      save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(
          config.checkpoint.every_steps),
      preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
      enable_async_checkpointing=True,
      cleanup_tmp_directories=True)  # Leftovers of a save killed mid-write.
  return ocp.CheckpointManager(checkpoint_dir(workdir), item_names=('state', 'meta'),
                               options=options)


def save(mngr: ocp.CheckpointManager, step: int, state, meta: dict, *, metrics=None,
         force: bool = False) -> bool:
  """Starts an async save of `state` and `meta` at `step` (every_steps apart unless force)."""
  return mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                 meta=ocp.args.JsonSave(meta)),
                   metrics=metrics, force=force)


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
  """(state, meta) of the newest readable checkpoint, or None when there is none.

  `abstract_state` holds jax.ShapeDtypeStructs with the shardings to restore into.
  """
  steps = sorted(mngr.all_steps(), reverse=True)
  for step in steps:
    _check_params_fit(mngr, step, abstract_state.params)
    try:
      restored = mngr.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
    except Exception as e:  # pylint: disable=broad-except  # Any read error means unusable.
      logging.warning('checkpoint step %d in %s cannot be read (%s: %s); falling back to the '
                      'previous one', step, mngr.directory, type(e).__name__, str(e)[:300])
      _move_aside(mngr, step)
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


def _state_metadata(path):
  """The saved state's tree of array metadata (shape, dtype), read without the arrays."""
  metadata = ocp.StandardCheckpointer().metadata(path)
  return metadata.item_metadata.tree if hasattr(metadata, 'item_metadata') else metadata


def _check_params_fit(mngr: ocp.CheckpointManager, step: int, abstract_params):
  """Raises when a readable checkpoint holds a different model than the config asks for.

  A changed config is not corruption: without this check its checkpoints would be moved aside.
  """
  try:
    saved = _state_metadata(mngr.directory / str(step) / 'state')['params']
    saved = {k: tuple(v.shape) for k, v in _flatten(dict(saved)).items()}
  except Exception:  # pylint: disable=broad-except  # Unreadable metadata: restore decides.
    return
  wanted = {k: tuple(v.shape) for k, v in _flatten(dict(abstract_params)).items()}
  if saved == wanted:
    return
  differ = sorted(set(saved) ^ set(wanted)) or sorted(k for k in wanted if saved[k] != wanted[k])
  example = differ[0]
  raise ValueError(
      f'checkpoint {mngr.directory}/{step} holds a different model than the config '
      f'({len(differ)} parameters differ, e.g. {example}: checkpoint {saved.get(example)} vs '
      f'config {wanted.get(example)}): resume with the config that wrote it '
      '(<workdir>/config.json), or use another --workdir (init_from for a new model).')


def _flatten(tree, prefix=''):
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_flatten(value, f'{prefix}{key}/'))
    else:
      out[f'{prefix}{key}'] = value
  return out


def _read_params(path: pathlib.Path):
  """Parameters (numpy tree) from a transformers dir, a workdir, its checkpoints/ or one step."""
  # A bertjax workdir holds a config.json too (the run's config), next to checkpoints/.
  if (path / 'config.json').exists() and not (path / 'checkpoints').is_dir():
    _, params, report = hf_checkpoint.load(path, with_heads=True)
    logging.info('init_from %s (transformers): %s', path, report.summary())
    return params
  if (path / 'checkpoints').is_dir():
    path = path / 'checkpoints'
  if not (path / 'state').is_dir():
    steps = sorted(int(p.name) for p in path.iterdir() if p.name.isdigit()) if path.is_dir() else []
    if not steps:
      raise FileNotFoundError(
          f'init_from={path}: neither a transformers BERT dir (config.json) nor a bertjax '
          'workdir / checkpoints dir / checkpoint step (with a state/ item).')
    path = path / str(steps[-1])
  # Read without a target: arrays come back as host numpy, whatever mesh wrote them.
  tree = _state_metadata(path / 'state')
  target = jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), tree['params'],
                        is_leaf=lambda m: hasattr(m, 'shape'))
  restored = ocp.PyTreeCheckpointer().restore(
      path / 'state', args=ocp.args.PyTreeRestore(
          item={'params': target},
          restore_args={'params': jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray),
                                               target)},
          partial_restore=True))
  logging.info('init_from %s (bertjax checkpoint)', path)
  return restored['params']


def load_params(init_from: str, abstract_params, shardings):
  """Parameters from `init_from` placed into `shardings`; the check is by name and shape.

  Every parameter of the model must be present with the model's shape; extra tensors in the
  checkpoint are reported and ignored. Returns (params, report lines).
  """
  loaded = _flatten(_read_params(pathlib.Path(init_from)))
  params = _place(loaded, abstract_params, shardings, f'init_from={init_from}',
                  missing_hint='is it a BERT of this architecture (scan_layers must match for '
                  'bertjax checkpoints)?',
                  shape_hint='set the model size / vocab_size of the checkpoint.')
  unused = sorted(set(loaded) - set(_flatten(dict(abstract_params))))
  if unused:
    logging.warning('init_from: %d checkpoint tensors unused: %s', len(unused), unused[:10])
  return params, unused


def _place(loaded: dict, abstract_tree, shardings, source: str, *, missing_hint: str,
           shape_hint: str):
  """`abstract_tree` filled from the flat `loaded` dict (checked by name and shape), placed
  into `shardings`."""
  wanted = _flatten(dict(abstract_tree))
  missing = sorted(set(wanted) - set(loaded))
  if missing:
    raise ValueError(f'{source} lacks {len(missing)} parameters of the model, e.g. '
                     f'{missing[:3]}: {missing_hint}')
  bad = [f'{k}: checkpoint {tuple(np.shape(loaded[k]))} vs model {tuple(wanted[k].shape)}'
         for k in wanted if tuple(np.shape(loaded[k])) != tuple(wanted[k].shape)]
  if bad:
    raise ValueError(f'{source} does not fit the config ({len(bad)} shapes differ, e.g. '
                     f'{bad[:3]}): {shape_hint}')
  flat_shardings = _flatten(dict(shardings))
  placed = {k: jax.device_put(np.asarray(loaded[k], wanted[k].dtype), flat_shardings[k])
            for k in wanted}
  return jax.tree.map(lambda _, path: placed[path], dict(abstract_tree),
                      _paths_tree(dict(abstract_tree)))


def _paths_tree(tree, prefix=''):
  return {k: _paths_tree(v, f'{prefix}{k}/') if isinstance(v, dict) else f'{prefix}{k}'
          for k, v in tree.items()}


def write_json(path, payload: dict):
  """Atomically writes a JSON file (process 0 only)."""
  if jax.process_index() == 0:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + '.tmp')
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
# Fine-tuning: the encoder from a pre-trained checkpoint, the head fresh.

ARCHITECTURE_FIELDS = ('vocab_size', 'hidden_size', 'num_layers', 'num_heads', 'mlp_dim',
                       'max_position_embeddings', 'type_vocab_size', 'hidden_act',
                       'layer_norm_eps')


def _step_dir(path: pathlib.Path) -> pathlib.Path:
  """A bertjax workdir / checkpoints dir / step dir -> the newest step dir."""
  if (path / 'checkpoints').is_dir():
    path = path / 'checkpoints'
  if (path / 'state').is_dir():
    return path
  steps = sorted(int(p.name) for p in path.iterdir() if p.name.isdigit()) if path.is_dir() else []
  if not steps:
    raise FileNotFoundError(
        f'init={path}: neither a transformers BERT dir (config.json + model.safetensors) nor a '
        'bertjax workdir / checkpoints dir / checkpoint step (with a state/ item).')
  return path / str(steps[-1])


def _is_transformers_dir(path: pathlib.Path) -> bool:
  return (path / 'config.json').exists() and not (path / 'checkpoints').is_dir()


def init_model_config(init: str) -> dict:
  """The architecture fields (ARCHITECTURE_FIELDS) of the encoder in `init`."""
  path = pathlib.Path(init)
  if not path.exists():
    raise FileNotFoundError(f'init={init} does not exist: pass a transformers BERT dir or a '
                            'bertjax workdir / checkpoint.')
  if _is_transformers_dir(path):
    cfg = hf_checkpoint.config_from_hf(json.loads((path / 'config.json').read_text()))
  else:
    step = _step_dir(path)
    meta_dir = step / 'meta'
    meta_files = sorted(meta_dir.glob('*')) if meta_dir.is_dir() else []
    cfg = None
    for meta_file in meta_files:
      try:
        cfg = json.loads(meta_file.read_text())['model']
        break
      except (ValueError, KeyError, IsADirectoryError):
        continue
    if cfg is None:
      raise ValueError(f'{step} has no readable meta item with the model config: set '
                       'config.model (a size) to load it.')
  return {k: cfg[k] for k in ARCHITECTURE_FIELDS}


def init_vocab_file(init: str) -> str | None:
  """The vocab.txt saved with a transformers checkpoint, if any."""
  path = pathlib.Path(init)
  if _is_transformers_dir(path) and (path / 'vocab.txt').exists():
    return str(path / 'vocab.txt')
  return None


def init_pooling(init: str) -> str | None:
  """'mean' or 'cls' when `init` is a sentence-transformers dir that says so (1_Pooling/)."""
  if not init or not (config_file := pathlib.Path(init) / '1_Pooling' / 'config.json').exists():
    return None
  pooling = json.loads(config_file.read_text())
  if pooling.get('pooling_mode_mean_tokens'):
    return 'mean'
  if pooling.get('pooling_mode_cls_token'):
    return 'cls'
  return None


def _read_encoder(path: pathlib.Path) -> dict:
  """Flat {'layers_0/...': array} (or stacked 'layers/...') encoder params of a checkpoint."""
  if _is_transformers_dir(path):
    _, params, report = hf_checkpoint.load(path, with_heads=False)
    logging.info('init %s (transformers): %s', path, report.summary())
    return _flatten(params)
  params = _read_params(_step_dir(path))
  if 'bert' not in params:
    raise ValueError(f'init={path}: its parameters have no `bert` encoder.')
  return _flatten(params['bert'])


def _convert_layer_layout(loaded: dict, wanted: dict, num_layers: int) -> dict:
  """Stacks per-layer tensors (layers_i/...) into nn.scan's layers/... or the reverse."""
  stacked_wanted = any(k.startswith('layers/') for k in wanted)
  stacked_loaded = any(k.startswith('layers/') for k in loaded)
  if stacked_wanted == stacked_loaded:
    return loaded
  out = {k: v for k, v in loaded.items() if not k.startswith('layers')}
  if stacked_wanted:
    suffixes = {k.split('/', 1)[1] for k in loaded if k.startswith('layers_0/')}
    for suffix in suffixes:
      out[f'layers/{suffix}'] = np.stack([loaded[f'layers_{i}/{suffix}']
                                          for i in range(num_layers)])
  else:
    for key, value in loaded.items():
      if key.startswith('layers/'):
        for i in range(value.shape[0]):
          out[f'layers_{i}/{key.split("/", 1)[1]}'] = value[i]
  return out


def load_encoder(init: str, params, shardings, num_layers: int):
  """`params` with the `bert` subtree replaced by the encoder in `init`, placed in `shardings`.

  The task head (everything outside `bert`) keeps its fresh initialisation. Returns (params,
  report) where report lists the loaded, fresh and unused parameter names.
  """
  wanted = _flatten(dict(params['bert']))
  loaded = _convert_layer_layout(_read_encoder(pathlib.Path(init)), wanted, num_layers)
  encoder = _place(loaded, params['bert'], shardings['bert'], f'init={init}',
                   missing_hint='is it a BERT checkpoint?',
                   shape_hint='leave the size empty to take the checkpoint\'s shape.')
  fresh = sorted(k for k in _flatten(dict(params)) if not k.startswith('bert/'))
  report = {'loaded': sorted(f'bert/{k}' for k in wanted), 'fresh': fresh,
            'unused': sorted(set(loaded) - set(wanted))}
  return {**params, 'bert': encoder}, report
