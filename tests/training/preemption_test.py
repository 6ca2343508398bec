"""SIGTERM (a preempted VM, ~30 s of grace) during an eval or a save: the run saves that step and
exits there, not after one more step and a second save (pass of 2026-12-02: 52 s late)."""

import signal
import threading

import loop_test
import pytest

from bertjax import console
from bertjax import pretrain as pretrain_job
from bertjax import pretrain_eval
from bertjax.pretraining_data import embedded
from bertjax.training import loop
from bertjax.training import progress


@pytest.mark.parametrize('during', ['eval', 'save'])
def test_sigterm_during_an_eval_or_a_save_saves_that_step_and_exits(loop_corpus, tmp_path,
                                                                    monkeypatch, during):
  monkeypatch.setattr(console, '_PREEMPTED', threading.Event())  # Process-wide otherwise.
  config = loop_test.e2e_config(loop_corpus, steps=8)
  config.eval_every_steps = 4 if during == 'eval' else 0
  config.checkpoint.every_steps = 4
  if during == 'eval':
    run = pretrain_eval.Evaluator.run

    def evaluate(self, params, step):
      signal.raise_signal(signal.SIGTERM)
      return run(self, params, step)

    monkeypatch.setattr(pretrain_eval.Evaluator, 'run', evaluate)
  else:
    save = loop._save  # pylint: disable=protected-access

    def save_then_signal(mngr, *args, **kwargs):
      save(mngr, *args, **kwargs)
      signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(loop, '_save', save_then_signal)
  ended = []  # The summary's Outcome (a preempted one exits the process as it is said).
  monkeypatch.setattr(progress, 'summary', lambda job, seconds, outcome, *a, **k: ended.append(
      outcome))
  pretrain_job.train_and_evaluate(config, str(tmp_path))
  outcome, = ended
  assert outcome.stopped == 'preempted at step 4: rerun the same command to resume'
  assert loop_test.checkpoint_steps(tmp_path) == [4]


@pytest.fixture(scope='module')
def loop_corpus(tmp_path_factory):
  """loop_test's corpus (made once per session: the same folder and settings)."""
  return embedded.pretraining_files(
      tmp_path_factory.getbasetemp() / 'embedded-corpus', max_seq_length=loop_test.E2E_SEQ,
      max_predictions_per_seq=loop_test.E2E_PREDICTIONS, dupe_factor=1)
