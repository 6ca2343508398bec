"""How a run's evals rank: which way a metric is better, ties, and a two-phase run's phases.

One rule for the best checkpoint that a run keeps (checkpoint.manager's keep_best), the one a
reader takes for --step=best (checkpoint_reader.best_step) and the one early stopping counts
from (loop.py): a better value ranks higher, a tie goes to the earlier step, and a later
phase's eval ranks above an earlier phase's. The loop records each eval here (the run's
eval_history.json, the standing its checkpoint keeps) and asks whether to stop early.
"""

from absl import logging

from bertjax import metric_direction
from bertjax import phase_plan
from bertjax.training import run_files


def rank(value, step: int, mode: str) -> tuple:
  """A sort key, larger = better: the better value, and among equal values the earlier step
  (a later tie is no improvement, for keep_best, --step=best and early stopping alike)."""
  if value is None or value != value:  # NaN ranks last (it compares neither way: as the best,
    return (float('-inf'), -step)       # it would have the best checkpoint deleted).
  return (value if mode == 'max' else -value, -step)


def phase_start(config, step: int) -> int:
  """The first step of the phase whose eval ran after `step` steps (`config`: a ConfigDict or
  a run's config.json): pre-training's second phase (phase2.fraction > 0, pretrain.phases'
  boundary) starts there, every other run and phase at 0.

  The rule of a two-phase run's best: evals rank only against evals of their own phase (the
  phases evaluate other data: another length, another unigram baseline), and a later phase's
  above an earlier's. So the best is the best eval of the last phase that evaluated: phase 1's
  until phase 2 has an eval, then phase 2's (the final model's phase), whatever phase 1 scored.
  """
  boundary = phase_plan.phase2_start(config.get('num_train_steps', 0),
                                     (config.get('phase2') or {}).get('fraction') or 0) or 0
  return boundary if 0 < boundary < step else 0


def since_best(history: dict[int, dict], metric: str, mode: str,
               config=None) -> tuple[int | None, int]:
  """(the best step, the evals after it) of an eval history ranked by `metric` in `mode`,
  a later phase's evals above an earlier's (phase_start; `config` None: one phase)."""
  steps = sorted(s for s in history if metric in history[s])
  if not steps:
    return None, 0
  best = max(steps, key=lambda s: (phase_start(config, s) if config is not None else 0,
                                   *rank(history[s][metric], s, mode)))
  return best, sum(s > best for s in steps)


def check_best_metric(metric: str, names, mode: str = ''):
  """Refuses a best metric that is not among the eval metrics `names` (any when () or None),
  and a best_mode against the way the metric is known to be better (loss or mse with max,
  an accuracy, F1, exact match or correlation with min)."""
  if names and metric not in names:
    raise ValueError(f'config.checkpoint.best_metric={metric!r} is not an eval metric of this '
                     f'job; valid: {", ".join(names)}.')
  why, fix = metric_direction.contradiction(metric, mode)
  if why:
    raise ValueError(f'config.checkpoint.best_mode={mode!r}: {why}; {fix}.')


def early_stop(config, history: dict, metric: str, mode: str, patience: int) -> str:
  """Why the run stops early after the evals in `history` ('' = it goes on)."""
  best_step, waited = since_best(history, metric, mode, config)
  if not patience or waited < patience:
    return ''
  return (f'early: {metric} did not improve for {waited} evaluation{"s" * (waited > 1)} after '
          f'step {best_step}, its best ({history[best_step][metric]:.4g})')


def resumed_end(config, history: dict, earlier: dict, default_metric: str, metric: str,
                mode: str, patience: int) -> tuple[str, str, str]:
  """(why a resumed run has ended early or '', the best metric and mode it ranked by): as the
  run last ran (`earlier`, its config; the job's default metric where it named none), whatever
  the rerun's config asks, and only where this config's patience and metric agree (patience
  added to an interrupted run, or more of it, trains on to its next eval)."""
  kept = earlier.get('checkpoint') or {}
  ran = (kept.get('best_metric') or default_metric) if earlier else metric
  ran_mode = metric_direction.best_mode(ran, kept.get('best_mode') or '') if earlier else mode
  ended = early_stop(config, history, ran, ran_mode, earlier.get('early_stopping_patience') or 0)
  agreed = ended and early_stop(config, history, metric, mode, patience)
  return (ended if agreed else ''), ran, ran_mode


def warn_if_patience_unreached(patience: int, every_steps: int, total_steps: int):
  """Says when a run of `total_steps`, evaluated every `every_steps` and at its end, makes too
  few evals for `patience` ever to stop it (the run then ends as if none were set)."""
  evals = -(-total_steps // every_steps) if every_steps > 0 else 0
  if patience and every_steps > 0 and evals <= patience:
    logging.warning('early_stopping_patience=%d counts evals without an improvement, but this '
                    'run evaluates %d time(s) (every %d of %d steps): it cannot stop early; '
                    'lower the patience or eval_every_steps', patience, evals, every_steps,
                    total_steps)


def record(config, eval_metrics: dict, step: int, history: dict, workdir, metric: str, mode: str,
           patience: int) -> tuple[dict | None, str]:
  """Records step's eval in the run's history: (the ranking its checkpoint keeps, or None
  without metrics; why early stopping ends the run, or ''). An eval of a two-phase run's second
  phase records where that phase starts: it ranks above the first's (phase_start)."""
  if not eval_metrics:
    return None, ''
  check_best_metric(metric, sorted(eval_metrics))  # Before this step is saved.
  history[step] = eval_metrics
  run_files.record_eval(workdir, history)
  standing = {'metric': metric, 'mode': mode, 'value': eval_metrics[metric]}
  if start := phase_start(config, step):
    standing['phase_start'] = start
  return standing, early_stop(config, history, metric, mode, patience)


def kept_best(keep_best: int, earlier: dict) -> int:
  """keep_best, or the run's earlier one where that kept more (early stopping keeps 1): the
  resumed manager's first save would delete the best checkpoints the run kept."""
  before = (earlier.get('checkpoint') or {}).get('keep_best') or 0
  before = max(before, 1 if earlier.get('early_stopping_patience') else 0)
  if before > keep_best:
    logging.warning('checkpoint.keep_best=%d would delete the best checkpoint(s) this run kept '
                    '(it ran with keep_best=%d or early stopping): they are kept (keep_best=%d); '
                    'copy or export what you need, then delete their step folders to free them',
                    keep_best, before, before)
  return max(keep_best, before)


def best_of(config, done: int, history: dict, metric: str, mode: str, keep_best: bool) -> dict:
  """Outcome's best_step and best (metric, value) from the recorded evals, if any; a note when
  a two-phase run at `done` steps has its best in phase 1 (phase 2 had no eval to rank)."""
  best_step = since_best(history, metric, mode, config)[0] if keep_best else None
  if best_step is None:
    return {}
  earlier = phase_start(config, best_step) < phase_start(config, done)
  return dict(best_step=best_step, best=(metric, history[best_step][metric]),
              best_note=', of phase 1: phase 2 has no eval' if earlier else '')
