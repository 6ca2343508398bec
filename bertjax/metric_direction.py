"""Which way a metric is better, read from its name: checkpoint.best_mode's default, and the
best_mode a run refuses (one that would keep, and early-stop on, its worst eval).

No JAX here: config_check refuses such a best_mode before any data is read (and a pod
launcher before it books a slice); the run's ranking (training/ranking.py) reads the same.
"""

# Metric names (or parts of them) where lower is better: best_mode's default.
LOSS_LIKE = ('loss', 'mse', 'perplexity', 'error')
# Those where higher is better, as every eval of a bertjax job reports them.
SCORE_LIKE = ('accuracy', 'f1', 'exact', 'pearson', 'spearman', 'mcc', 'matthews', 'precision',
              'recall')
MODES = ('max', 'min')


def known_mode(metric: str) -> str | None:
  """'min' for a loss-like name, 'max' for a score-like one, None where its name does not say
  (a count, SQuAD's null-odds `*_thresh`)."""
  name = metric.rsplit('/', 1)[-1].lower()
  if 'thresh' in name:
    return None
  if any(part in name for part in LOSS_LIKE):
    return 'min'
  return 'max' if any(part in name for part in SCORE_LIKE) else None


def best_mode(metric: str, mode: str = '') -> str:
  """'max' or 'min' for `metric`: `mode` when given, else its known way, else max."""
  return mode or known_mode(metric) or 'max'


def contradiction(metric: str, mode: str, known: str | None = None) -> tuple[str, str]:
  """('', '') or why `mode` goes against the way `metric` is better (`known`, else read from its
  name: loss or mse with max, an accuracy, F1, exact match or correlation with min), and what
  to set: one sentence for the config's check, the fine-tuning check and the run alike. With
  `known`, `metric` may be words that name it ("task mrpc's main metric, a score,")."""
  known = known or known_mode(metric)
  if not mode or not known or mode == known:
    return '', ''
  return (f'{metric} is better {"lower" if known == "min" else "higher"}, so the run would keep '
          '(and early-stop on) its worst eval',
          f"set it to {known!r}, or leave it '' (each metric's own way)")
