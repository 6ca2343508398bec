"""What a --workdir of job=finetune names, checked before anything of it is read: a run's
checkpoints/ (a step of them, a folder in a step) told as the run and its --step; a file, a
folder with no run (modes eval and predict); the checkpoint each host would read."""

from bertjax import files
from bertjax import paths
from bertjax.finetune import run_config
from bertjax.training import checkpoint_reader


def check(config, workdir: str, step=None):
  """Refuses a --workdir that is a file, or inside a run's checkpoints/ (`step`: --step)."""
  if workdir and files.exists(workdir) and not files.isdir(workdir):
    raise ValueError(f'--workdir={workdir} is a file: pass a directory (a new one to fine-tune, '
                     'or the run to evaluate or predict with).')
  _refuse_inside_a_run(config, workdir, step)


def _refuse_inside_a_run(config, workdir: str, step=None):
  """A --workdir inside a run's checkpoints/ (a step of them, a folder in a step) names the run
  and the flags that read it: it was taken for a new run (mode=eval: 'holds no checkpoint:
  fine-tune first'). A run in a run's other subfolder keeps apart from it. `step`: --step, where
  given (one that names another step is said, not replaced)."""
  if not workdir:
    return
  found = paths.in_checkpoints(paths.absolute(workdir))
  if found is None:
    return
  given, (run, below) = step, found
  step = below[0] if below else ''
  at_step = step.isdigit()
  if config.mode == 'train_eval':
    fix = f'pass --workdir={run} to resume it, or a new folder outside it to fine-tune anew'
  elif at_step and given is not None and str(given) != str(int(step)):
    fix = (f'pass --workdir={run} --step={given} (or --step={int(step)}, the step the workdir '
           'names)')
  else:
    fix = f'pass --workdir={run}' + (f' --step={int(step)}' if at_step else '')
  where = f'{"" if len(below) == 1 else "inside "}step {int(step)} of' if at_step else 'inside'
  raise ValueError(f'--workdir={workdir} is {where} the run {run}: {fix}.')


def check_has_checkpoint(workdir: str):
  """Refuses a --workdir of mode eval or predict that holds no fine-tuned checkpoint."""
  if not files.exists(workdir):
    raise FileNotFoundError(f'--workdir={workdir} does not exist: pass the folder of a '
                            'fine-tuning run, or fine-tune first (mode=train_eval) with this '
                            '--workdir.')
  if not run_config.has_checkpoint(workdir):
    raise FileNotFoundError(f'{workdir} holds no checkpoint: fine-tune first (mode=train_eval) '
                            'with this --workdir.')
  if not files.exists(files.join(workdir, 'config.json')):  # Else the data was asked for.
    raise FileNotFoundError(
        f'{workdir} holds checkpoints but not the config.json its run wrote (its task, labels, '
        'data and model, which eval and predict read): copy it back (a resumed run keeps '
        'config-resumed-at-<step>.json beside it too).')


def checkpoint_seen(workdir: str, step) -> tuple[str, int | None]:
  """The checkpoint this host would read in `workdir` for `step` (None: the newest), or why
  not, and its step: the hosts compare it before any of them reads anything else."""
  try:
    resolved = checkpoint_reader.resolve_step(workdir, step)
    if resolved is None:
      listed = checkpoint_reader.steps(files.join(workdir, 'checkpoints'))
      return (f'checkpoint {listed[-1]} (the newest)', listed[-1]) if listed else (
          'no checkpoint', None)
    return f'checkpoint {resolved}', resolved
  except Exception as e:  # pylint: disable=broad-except  Said, not raised, on this host alone.
    return f'{type(e).__name__}: {e}', None
