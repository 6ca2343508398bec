"""How a run's evals rank (bertjax/training/ranking.py), without a run: NaN, unreachable
patience. (best_checkpoint_test runs jobs on one device for the rest.)"""

import best_checkpoint_test

from bertjax.training import checkpoint_reader
from bertjax.training import ranking

kept_steps, _save_ranked = best_checkpoint_test.kept_steps, best_checkpoint_test._save_ranked  # pylint: disable=protected-access


def test_an_eval_of_nan_ranks_last_for_keep_best_step_best_and_early_stopping(tmp_path):
  """Hostile pass of session 35, 1: NaN compares neither way, so orbax's sort kept the NaN step
  as the best, deleted the real best, and --step=best read the NaN model without a word."""
  nan = float('nan')
  _save_ranked(tmp_path, {1: 0.5, 2: nan, 3: 0.6})
  assert kept_steps(tmp_path) == {1, 3}
  assert checkpoint_reader.resolve_step(tmp_path, 'best') == 1
  for mode, values in (('min', {1: 0.5, 2: nan, 3: 0.6}), ('max', {1: 0.5, 2: nan, 3: 0.4}),
                       ('max', {1: nan, 2: 0.5, 3: 0.4})):
    history = {step: {'loss': value} for step, value in values.items()}
    best = 2 if values[1] != values[1] else 1
    assert ranking.since_best(history, 'loss', mode) == (best, 3 - best), (mode, values)


def test_patience_that_no_run_of_its_evals_can_reach_is_said(caplog):
  """Hostile pass of session 35, 7: patience 3 on a run with one eval ended as if none were set,
  without a word."""
  ranking.warn_if_patience_unreached(3, 100, 4)
  assert ('early_stopping_patience=3 counts evals without an improvement, but this run '
          'evaluates 1 time(s) (every 100 of 4 steps): it cannot stop early') in caplog.text
  caplog.clear()
  for patience, every, steps in ((3, 1, 4), (0, 100, 4), (2, 0, 4)):
    ranking.warn_if_patience_unreached(patience, every, steps)
  assert 'early_stopping_patience' not in caplog.text
