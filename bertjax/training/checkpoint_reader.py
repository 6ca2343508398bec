"""The one checked way a tool that only reads a run (predict, export, extract_features, eval,
init_from) loads its checkpoint: the same checks as training's restore, and nothing written.

A location (a local path or a URL: steps and meta items through bertjax.files, arrays through
orbax) is a workdir, its checkpoints/ folder or one checkpoints/<step>. The newest step is read
unless a step is named (`step=` or a step folder); `resolve_step` reads every reader's values:
'latest' (or None), 'best' (the step the run ranked best, as each eval step's meta item records
it) or a number. Every array is checked against the digest its meta item recorded. A newest step
that cannot be read (damaged bytes, a missing or truncated _METADATA, a digest that disagrees) is
skipped with a warning naming it and the previous one read; a step the user named is never
replaced. Nothing is moved aside: a reader may share the workdir with a live run (whose keep
policy may delete a step being read: the reader goes back to the newest). Only a reader's own
errors (memory, permissions, no network) stop the read. One step folder is read and checked by
checkpoint_step.py.
"""

import dataclasses
import json
import os
import re

from absl import logging

from bertjax import console
from bertjax import file_errors
from bertjax import files
from bertjax import paths
from bertjax.training import checkpoint
from bertjax.training import checkpoint_damage
from bertjax.training import checkpoint_step
from bertjax.training import ranking
from bertjax.training import run_files
from bertjax.training import step_names
from bertjax.training import workdir_lock

# Errors of the reader, not of the step's bytes: they stop the read (an older step would not
# be read any better). Anything else a step raises makes it unreadable to a reader.
_READER_ERRORS = (MemoryError, PermissionError, ConnectionError)

@dataclasses.dataclass
class Read:
  params: dict  # Host numpy, as saved.
  meta: dict  # The step's meta item: step, examples consumed, model config, digests.
  step: int
  directory: str  # The checkpoints/ folder (a local path or a URL).


def locate(path) -> tuple[str, int | None]:
  """(checkpoints folder, the step a step folder names or None) of a workdir / checkpoints
  folder / step folder."""
  path = os.fspath(path)
  if files.isfile(path):
    raise ValueError(_a_file(path))
  if files.isdir(files.join(path, 'checkpoints')):
    return files.join(path, 'checkpoints'), None
  step = files.name(path)
  if step.isdigit() and (files.isdir(files.join(path, 'state')) or
                         files.isdir(files.join(path, 'meta'))):
    return files.parent(path), int(step)
  return path, None


def _a_file(path: str) -> str:
  """What to pass instead of a model's file: its TF1 prefix, or the folder that holds it."""
  name = files.name(path)
  tf1 = re.fullmatch(r'(.+\.ckpt(?:-\d+)?)\.(?:index|meta|data-\d+-of-\d+)', name)
  if tf1:
    return (f'{path} is one file of a TF1 checkpoint: pass its prefix '
            f'{files.join(files.parent(path), tf1[1])} (or the folder, where it is the only one '
            'beside bert_config.json).')
  return (f'{path} is a file: pass the folder that holds it ({files.parent(path)}): a '
          'transformers BERT directory, an original TF checkpoint, or a bertjax workdir (its '
          'checkpoints/ or one checkpoints/<step>).')


def steps(directory) -> list[int]:
  """A checkpoints folder's complete steps, oldest first (checkpoint_damage.finished)."""
  return checkpoint_damage.finished(checkpoint.orbax_path(directory),
                                   run_files.checkpoint_steps(directory))


def tf1_without_config(folder: str) -> str | None:
  """The line for a folder holding a TF1 checkpoint but not the bert_config.json it is read
  with (a TF1 reader would take it for a model), else None."""
  indexes = files.glob(files.join(folder, '*.index')) if files.isdir(folder) else []
  if not indexes:
    return None
  return (f'{folder} holds a TF1 checkpoint ({files.name(indexes[0])}) but no bert_config.json: '
          'put the bert_config.json it was trained with beside it (extract_features also takes '
          '--bert_config_file=...).')


# How a step is named and parsed (step_names: no orbax, for the flag checks before JAX starts).
Asking, COMMAND_FLAGS, parse_step = (step_names.Asking, step_names.COMMAND_FLAGS,
                                     step_names.parse_step)


def _workdir_of(directory: str) -> str:
  """The run folder of a checkpoints folder (`directory` itself otherwise)."""
  return files.parent(directory) if files.name(directory) == 'checkpoints' else directory


def _no_checkpoint(directory: str, asking: Asking = COMMAND_FLAGS,
                   step=None) -> FileNotFoundError:
  """A run (or a checkpoints folder) that holds no checkpoint, said with the step asked of it."""
  said = f'{asking.said(step)}: ' if step is not None else ''
  aside = sorted(files.name(p) for p in files.glob(files.join(directory, '*.unreadable-*'))
                 ) if files.isdir(directory) else []
  if aside:
    return FileNotFoundError(f'{said}{directory} holds no readable checkpoint, only ones moved '
                             f'aside as unreadable ({", ".join(aside)}).')
  where = _workdir_of(directory)
  if files.is_remote(where) and not files.isdir(where):
    files.listdir(where)  # Raises the files layer's error: no such folder, or no such bucket.
  if tf1 := tf1_without_config(where):
    return FileNotFoundError(tf1)
  if lost := run_files.lost_checkpoints(where):  # Not 'train it first': that would start over.
    return FileNotFoundError(f'{said}{lost}')
  if export := _serving_export(where):
    return FileNotFoundError(f'{said}{where} is {export}, which bertjax does not read back: pass '
                             'the run it was exported from, or a transformers or TF1 export')
  if not paths.is_run(where) and not files.isdir(files.join(where, 'checkpoints')):
    # No run's folder at all: a model may lie one level down.
    below = _model_below(where)
    return FileNotFoundError(
        f'{said}{where} is not a model folder (no config.json with weights, no TF1 checkpoint, '
        f'no bertjax run\'s checkpoints/)' + (f': the model is in {below}, pass that' if below
                                                else ': pass the folder that holds one'))
  if holder := workdir_lock.live_holder(where):  # 'Train it first' to a run that trains now.
    return FileNotFoundError(f'{said}{where} holds no checkpoint yet: it is training now '
                             f'({holder}) and saves its first after checkpoint.every_steps '
                             'steps; wait for it, or pass a run that saved one.')
  return FileNotFoundError(f'{said}{where} holds no checkpoint: pass {asking.run} that saved '
                           'one (its checkpoints/<step> folders), or train it first.')


def _model_below(folder: str) -> str:
  """A subfolder of `folder` that holds a model or a run (an installed package's model/, the
  run beside an export), for a message; '' for none or several."""
  if not files.isdir(folder):
    return ''
  found = []
  for name in files.listdir(folder):
    sub = files.join(folder, name)
    if name.startswith('.') or not files.isdir(sub):
      continue
    if paths.is_run(sub) or files.isfile(files.join(sub, 'config.json')) or tf1_without_config(
        sub):
      found.append(sub)
  return found[0] if len(found) == 1 else ''


def _serving_export(folder: str) -> str:
  """'a SavedModel' or 'an ONNX export' for a folder export wrote in such a format, else ''."""
  if not files.isdir(folder):
    return ''
  names = files.listdir(folder)
  if 'saved_model.pb' in names:
    return 'a SavedModel'
  return 'an ONNX export' if any(name.endswith('.onnx') for name in names) else ''


def resumed_configs(workdir) -> list[tuple[int, str]]:
  """(step, path) of every config-resumed-at-<step>.json a resume of the run wrote, in order."""
  return sorted((int(files.name(p)[:-len('.json')].rsplit('-', 1)[-1]), p)
                for p in files.glob(files.join(workdir, 'config-resumed-at-*.json')))


def config_file_at(workdir, step: int) -> str:
  """The config the run ran with when it wrote checkpoint `step`: the config-resumed-at-M.json
  with the largest M below `step`, else config.json. (A resume that failed before its first
  checkpoint left one at M = `step`: it wrote nothing this run continues.)"""
  before = [p for at, p in resumed_configs(workdir) if at < step]
  return before[-1] if before else files.join(workdir, 'config.json')


def last_run_config(workdir) -> dict | None:
  """The config the run in `workdir` last ran with (a resume's own, else config.json)."""
  try:
    resumed = resumed_configs(workdir)
    return json.loads(files.read_text(resumed[-1][1] if resumed else
                                      files.join(workdir, 'config.json')))
  except (OSError, ValueError):
    return None


def best_step(directory, asking: Asking = COMMAND_FLAGS) -> int:
  """The step the run ranked best among the steps kept in a checkpoints folder (its evals'
  `ranking` in the meta items); ValueError saying what to do when it kept or ranked none."""
  available = steps(directory)
  if not available:
    raise _no_checkpoint(directory, asking, 'best')
  workdir = _workdir_of(directory)
  listed = ', '.join(map(str, available))
  run = last_run_config(workdir)
  kept = run.get('checkpoint', {}) if isinstance(run, dict) else {}
  if run is not None and not (kept.get('keep_best') or run.get('early_stopping_patience')):
    raise ValueError(
        f'{asking.said("best")}: {workdir} was trained with checkpoint.keep_best=0, so its best '
        f'checkpoint may have been deleted (it kept the newest {kept.get("keep", "few")}): pass '
        f'{asking.step}=latest or one of its steps ({listed}); train with '
        '--config.checkpoint.keep_best=1 to keep the best.')
  ranked = {}
  for step in available:
    try:
      standing = checkpoint_step.read_meta(files.join(directory, str(step))).get('ranking')
    except (ValueError, OSError) as e:  # The step cannot be read anyway: said, not ranked.
      logging.warning('step=best: checkpoint %s is left out of the ranking: %s',
                      files.join(directory, str(step)), e)
      continue
    if isinstance(standing, dict) and isinstance(standing.get('value'), (int, float)):
      ranked[step] = standing
  if not ranked:
    raise ValueError(f'{asking.said("best")}: no checkpoint in {directory} ({listed}) was saved '
                     f'at an eval, so none is ranked: pass {asking.step}=latest or a step number, '
                     'or train with evals (eval files, eval_every_steps) and '
                     'checkpoint.keep_best=1.')
  # The newest eval's metric and mode rank (a resumed run may have changed them).
  metric, mode = ranked[max(ranked)]['metric'], ranked[max(ranked)]['mode']
  same = [s for s in ranked if (ranked[s]['metric'], ranked[s]['mode']) == (metric, mode)]
  config = run if isinstance(run, dict) else {}

  def key(step, value):  # A two-phase run's best is of its last phase that evaluated.
    return ranking.phase_start(config, step), *ranking.rank(value, step, mode)

  best = max(same, key=lambda s: key(s, ranked[s]['value']))
  # Every eval was saved and recorded: a better eval than the kept ones is a lost best, never
  # to be swapped silently for another step.
  try:
    history = run_files.eval_history(workdir, up_to_step=max(available))
  except (OSError, ValueError) as e:  # The kept steps still rank; a lost best is not told.
    logging.warning('step=best: ranks the steps kept only, not the run\'s evals: %s', e)
    history = {}
  recorded, _ = ranking.since_best(history, metric, mode, config)
  if recorded is not None and recorded != best and (
      key(recorded, history[recorded][metric]) > key(best, ranked[best]['value'])):
    why = ('unreadable' if recorded in available else 'gone (deleted, or never kept: '
           'checkpoint.keep_best)')
    raise ValueError(
        f'{asking.said("best")}: the run\'s best eval by {metric} was step {recorded} '
        f'({history[recorded][metric]:.4g}, {run_files.EVAL_HISTORY}), but its checkpoint is '
        f'{why}; the best of the steps kept is {best} ({ranked[best]["value"]:.4g}): pass '
        f'{asking.step}={best} to read that one, or {asking.step}=latest.')
  logging.info('step=best: step %d of %s (%s %.4g, %s is better)', best, directory, metric,
               ranked[best]['value'], 'higher' if mode == 'max' else 'lower')
  boundary = ranking.phase_start(config, max(available))
  if ranking.phase_start(config, best) < boundary:
    logging.warning('step=best: step %d is of phase 1 (steps 0..%d): phase 2 has no eval to '
                    'rank; pass %s=latest for the model phase 2 trained', best, boundary,
                    asking.step)
  return best


def resolve_step(path, step, asking: Asking = COMMAND_FLAGS) -> int | None:
  """The step number a reader's `step` (None, 'latest', 'best', a number) names at `path`
  (None: the newest readable). A number the run does not have names the steps it does."""
  step = parse_step(step)
  directory, named = locate(path)
  if step is not None and named is not None and step != named:
    raise ValueError(f'{path} is step {named} but {asking.said(step)} was asked for: pass one of '
                     'them.')
  if step == 'best':
    return best_step(directory, asking)
  if step is None and named is None:
    _say_if_stopped_early(directory, asking)
  if step is not None:
    available = steps(directory)
    if not available:
      raise _no_checkpoint(directory, asking, step)
    if step not in available:
      if step in run_files.checkpoint_steps(directory):  # A bucket's step without its mark.
        raise FileNotFoundError(
            f'{asking.said(step)}: step {step} in {directory} is no finished save (being saved, '
            'or cut short: orbax has not marked it done); its finished steps: '
            f'{", ".join(map(str, available))}. Wait for the save, or pass one of them.')
      raise FileNotFoundError(f'{asking.said(step)}: {directory} has no checkpoint step {step}; '
                              f'its steps: {", ".join(map(str, available))}.')
  return step


def _say_if_stopped_early(directory, asking: Asking):
  """Where a run stopped early, stopped before it finished (preempted, interrupted, killed) or
  trains now, its newest step is not its result: says so."""
  workdir, available = _workdir_of(directory), steps(directory)
  live = False
  if available:
    live = workdir_lock.say_if_live(workdir, available[-1])
    run_files.say_newest_gone_to_reader(workdir, available[-1])
  run = last_run_config(workdir)
  if not available or not isinstance(run, dict) or live:
    return
  why = None
  if run.get('early_stopping_patience'):
    try:
      standing = checkpoint_step.read_meta(
          files.join(directory, str(available[-1]))).get('ranking') or {}
      history = run_files.eval_history(workdir, available[-1])
    except (OSError, ValueError):
      return  # What reads the step says what is wrong with it.
    metric, mode = standing.get('metric'), standing.get('mode')
    why = metric and ranking.early_stop(run, history, metric, mode, run['early_stopping_patience'])
    best = ranking.since_best(history, metric, mode, run)[0] if why else None
    if best is not None and best != available[-1]:
      logging.warning('%s stopped %s: %s=latest reads its last step, %d; %s=best reads step %d',
                      workdir, why, asking.step, available[-1], asking.step, best)
  total, saved = run.get('num_train_steps'), run_files.newest_saved(workdir)
  if (not why and isinstance(total, int) and not isinstance(total, bool)
      and available[-1] < total and (saved is None or saved <= available[-1])):  # Else its
    # newer steps were deleted, moved or found damaged: said above or as they were.
    console.warn_once('%s stopped at step %d of its %d, before it finished (preempted, '
                      'interrupted or killed), and its newest checkpoint is read: rerun its '
                      'command to finish it, or pass %s=%d to read this step without this '
                      'warning', workdir, available[-1], total, asking.step, available[-1])


def step_path(path, step, asking: Asking = COMMAND_FLAGS) -> str:
  """`path` (a workdir, checkpoints/ or a step folder), or its folder of `step` when one is
  named ('best', a number): what sources.load and init_from read. `asking`: how the messages
  name the step and the run."""
  if step == 'latest' and not files.isdir(files.join(path, 'checkpoints')):
    directory, named = locate(path)  # A step folder named with latest: read only if newest.
    available = steps(directory) if named is not None else []
    if available and named != available[-1]:
      raise ValueError(f'{asking.said(step)} reads a run\'s newest checkpoint (here step '
                       f'{available[-1]}), but {path} is its step {named}: drop {asking.step} '
                       f'to read step {named}, or pass the run\'s folder for its newest.')
  if parse_step(step) is None:
    if files.isdir(files.join(path, 'checkpoints')):  # A run's newest step is read.
      _say_if_stopped_early(files.join(path, 'checkpoints'), asking)
    return os.fspath(path)
  directory, named = locate(path)
  if not steps(directory):
    if paths.is_run(_workdir_of(directory)):
      raise _no_checkpoint(directory, asking, step)  # A run before its first save.
    raise ValueError(f'{asking.said(step)} names a checkpoint of a bertjax run, and {path} '
                     'holds none (no checkpoints/<step> folders): drop the step for another kind '
                     'of model.')
  resolved = resolve_step(path, step, asking)
  return os.fspath(path) if named is not None else files.join(directory, str(resolved))


def read(path, step: int | str | None = None) -> Read:
  """The params and meta of the newest readable step at `path` (or of `step` exactly: a
  number or 'best'; None or 'latest' = the newest)."""
  if step is not None:
    step = resolve_step(path, step)
  directory, named = locate(path)
  if step is not None and named is not None and step != named:
    raise ValueError(f'{path} is step {named} but step {step} was asked for: pass one of them.')
  step = named if step is None else step
  for _ in range(3):  # A step deleted while it was read: look again.
    available = steps(directory)
    if not available:
      raise _no_checkpoint(directory)
    if step is not None and step not in available:
      raise FileNotFoundError(f'{directory} has no checkpoint step {step}; its steps: '
                              f'{", ".join(map(str, available))}.')
    skipped = []
    for candidate in [step] if step is not None else reversed(available):
      step_dir = files.join(directory, str(candidate))
      try:
        params, meta = checkpoint_step.read_step(step_dir, candidate)
      except Exception as e:  # pylint: disable=broad-except  # Classified just below.
        unreachable = file_errors.unreachable(e)  # orbax's own client: no network.
        if not unreachable and _raced(directory, step_dir, available):
          break  # Deleted (or being deleted) by a live run's keep policy while we read it.
        if isinstance(e, _READER_ERRORS) or unreachable:
          raise RuntimeError(f'checkpoint {step_dir} could not be read ({type(e).__name__}: '
                             f'{str(e)[:300]}): fix the cause (permissions, memory, network) '
                             'and rerun.') from e
        why = f'{type(e).__name__}: {str(e)[:200]}'
        if step is not None:
          raise checkpoint_damage.DamagedCheckpointError(
              f'checkpoint {step_dir} cannot be read ({why}); its other steps: '
              f'{", ".join(str(s) for s in available if s != step) or "none"}') from None
        logging.warning('checkpoint %s cannot be read (%s): reading the previous step', step_dir,
                        why)
        skipped.append(candidate)
        continue
      if skipped:
        logging.warning('read step %d of %s: the newer step(s) %s cannot be read (nothing was '
                        'moved: the run that wrote them resolves them when it resumes)',
                        candidate, directory, skipped)
      checkpoint_step.check_same_run(directory, candidate, meta)
      return Read(params, meta, candidate, directory)
    else:
      raise checkpoint_damage.DamagedCheckpointError(
          f'none of the checkpoints {available} in {directory} can be read (see the warnings '
          'above): restore them from a copy, or use another run.')
  raise RuntimeError(f'the checkpoints in {directory} kept disappearing while they were read: '
                     'is a run with keep=1 saving there every few seconds? Read it later.')


def _raced(directory: str, step_dir: str, listed: list[int]) -> bool:
  """Whether a step that failed to read was deleted while it was read, or is being deleted:
  its folder is gone, or a step newer than all those `listed` appeared meanwhile (a live run
  saving there, whose keep policy removes an older step's files one by one)."""
  try:
    return not files.exists(step_dir) or max(steps(directory), default=0) > max(listed)
  except Exception:  # pylint: disable=broad-except  # No answer: classified as damage or not.
    return False
