"""How a run's evals rank: which way a metric is better, ties, and a two-phase run's phases.

One rule for the best checkpoint that a run keeps (checkpoint.manager's keep_best), the one a
reader takes for --step=best (checkpoint_reader.best_step) and the one early stopping counts
from (loop.py): a better value ranks higher, a tie goes to the earlier step, and a later
phase's eval ranks above an earlier phase's.
"""


# Metric names (or parts of them) where lower is better: best_mode's default.
LOSS_LIKE = ('loss', 'mse', 'perplexity', 'error')
MODES = ('max', 'min')


def best_mode(metric: str, mode: str = '') -> str:
  """'max' or 'min' for `metric`: `mode` when given, else 'min' for loss-like names."""
  if mode:
    return mode
  return 'min' if any(part in metric.rsplit('/', 1)[-1] for part in LOSS_LIKE) else 'max'


def rank(value, step: int, mode: str) -> tuple:
  """A sort key, larger = better: the better value, and among equal values the earlier step
  (a later tie is no improvement, for keep_best, --step=best and early stopping alike)."""
  if value is None:
    return (float('-inf'), -step)
  return (value if mode == 'max' else -value, -step)


def phase2_start(num_train_steps: int, fraction: float) -> int | None:
  """The step pre-training's second phase starts at (phase2.fraction of num_train_steps, the
  last ones); None for one phase. The one rule of the boundary: pretrain.phases, resume_checks
  and the best checkpoint's ranking read it here."""
  return round(num_train_steps * (1 - fraction)) if fraction else None


def phase_start(config, step: int) -> int:
  """The first step of the phase whose eval ran after `step` steps (`config`: a ConfigDict or
  a run's config.json): pre-training's second phase (phase2.fraction > 0, pretrain.phases'
  boundary) starts there, every other run and phase at 0.

  The rule of a two-phase run's best: evals rank only against evals of their own phase (the
  phases evaluate other data: another length, another unigram baseline), and a later phase's
  above an earlier's. So the best is the best eval of the last phase that evaluated: phase 1's
  until phase 2 has an eval, then phase 2's (the final model's phase), whatever phase 1 scored.
  """
  boundary = phase2_start(config.get('num_train_steps', 0),
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
