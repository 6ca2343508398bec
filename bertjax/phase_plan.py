"""Pre-training's plan as its config alone says it, in pure Python: the step its second phase
starts at, and the eval metrics a run reports. One rule each for the config's check before JAX
starts (config_check_jobs), the job (pretrain.py), a resume's checks and the best checkpoint's
ranking (training/).
"""

BEST_METRIC = 'mlm_accuracy'  # Eval metric that ranks checkpoints (keep_best, --step=best).


def phase2_start(num_train_steps: int, fraction: float) -> int | None:
  """The step pre-training's second phase starts at (phase2.fraction of num_train_steps, the
  last ones); None for one phase."""
  return round(num_train_steps * (1 - fraction)) if fraction else None


def eval_metric_names(nsp: bool) -> tuple[str, ...]:
  """The eval metrics a pre-training run reports, in the order a user would rank by."""
  return ('mlm_accuracy', 'mlm_loss') + (('nsp_accuracy', 'nsp_loss') if nsp else ())
