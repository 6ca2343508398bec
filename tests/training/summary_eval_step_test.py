"""The summary line of a run whose last eval was at an earlier step than the one it ended at
(progress.summary): the eval's figures say their step."""

import threading

from bertjax import console
from bertjax.training import progress

RESULTS = {'loss': 7.25, 'mlm_accuracy': 0.0635}


def _line(capsys, **fields) -> str:
  outcome = progress.Outcome(**{'eval_metrics': RESULTS, 'step': 8, 'total_steps': 8,
                                'train_loss': 9.287, 'eval_step': 8} | fields)
  progress.summary('pretrain', 3.0, outcome, '/runs/r', main_metric='mlm_accuracy')
  return capsys.readouterr().out.strip().splitlines()[-1]


def test_an_earlier_steps_eval_says_its_step(capsys, monkeypatch):
  """Hostile pass A, 5: a two-phase run whose phase 2 had no eval files ended on 'step 8/8,
  train loss 9.287, eval mlm_accuracy 0.06349', the eval being step 6's; a run preempted at
  step 7 alike."""
  monkeypatch.setattr(console, '_PREEMPTED', threading.Event())  # Process-wide otherwise.
  line = _line(capsys, eval_step=6)
  assert ': step 8/8, train loss 9.287, eval at step 6: mlm_accuracy 0.0635, loss 7.25; ' in line
  line = _line(capsys, step=7, eval_step=6,
               stopped='preempted at step 7: rerun the same command to resume')
  assert line.startswith('pretrain stopped (preempted at step 7: '), line
  assert 'step 7/8, train loss 9.287, eval at step 6: mlm_accuracy 0.0635, loss 7.25; ' in line


def test_an_eval_at_the_last_step_or_none_says_no_step(capsys):
  line = _line(capsys)
  assert ': step 8/8, train loss 9.287, eval mlm_accuracy 0.0635, loss 7.25; ' in line, line
  line = _line(capsys, eval_metrics={}, eval_step=None)
  assert ': step 8/8, train loss 9.287; checkpoints /runs/r/checkpoints (step 8)' in line, line
