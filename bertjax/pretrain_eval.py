"""Pre-training's eval: MLM and NSP metrics over the held-out files, exactly once, per phase.

The loop calls `evaluator.run(params, step)` at its eval steps and does not know what it
computes (big_vision's evaluators); each phase with eval files has its own Evaluator at its
length, and the unigram baseline (always the most frequent target token) says what a model that
learned nothing would score.
"""

import dataclasses
import functools

from absl import logging
import jax
import numpy as np

from bertjax import job_lines
from bertjax import pretrain_objective
from bertjax.input import global_batch
from bertjax.input import input_pipeline
from bertjax.input import record_check
from bertjax.training import losses
from bertjax.training import sharding


def unigram_baseline(dataset, files) -> float:
  """MLM accuracy of always predicting the eval set's most frequent target token (`files`: the
  eval files, named by an error)."""
  counts = {}
  for batch in input_pipeline.host_batches(dataset, files):
    ids = batch['masked_lm_ids'][batch['masked_lm_weights'] > 0]
    for token, n in zip(*np.unique(ids, return_counts=True), strict=True):
      counts[int(token)] = counts.get(int(token), 0) + int(n)
  total = sum(counts.values())
  return max(counts.values()) / total if total else 0.0


@dataclasses.dataclass
class Evaluator:
  """MLM and NSP metrics over the whole eval set, exactly once, plus the unigram baseline."""

  make_dataset: functools.partial  # (process_index=, process_count=) -> tf.data.Dataset.
  eval_fn: object  # Jitted eval_step(params, batch).
  mesh: jax.sharding.Mesh
  batch_axes: tuple
  max_batches: int  # >= 0 caps the batches per eval.
  every_steps: int
  vocab_size: int
  files: object  # The eval files (a pattern or a FileSet), named by the errors.
  baseline: float | None = None

  def run(self, params, step: int) -> dict:
    if self.baseline is None:  # Over the batches the metrics see (max_batches caps both).
      whole = self.make_dataset(process_index=0, process_count=1)
      self.baseline = unigram_baseline(whole.take(self.max_batches) if self.max_batches >= 0
                                       else whole, self.files)
    outputs, dataset = [], self.make_dataset()
    known = int(dataset.cardinality())  # Negative: not known.
    total = None if known < 0 else known if self.max_batches < 0 else min(known, self.max_batches)
    progress = job_lines.Progress(f'eval at step {step}', total, 'batches')
    for i, host_batch in enumerate(input_pipeline.host_batches(dataset, self.files)):
      if 0 <= self.max_batches <= i:
        break
      record_check.check_ids(host_batch, self.vocab_size, self.files)
      batch = global_batch.make_global_batch(host_batch, self.mesh, self.batch_axes)
      outputs.append(self.eval_fn(params, batch))
      progress.update(i + 1)
    return losses.host_means(outputs) | {'unigram_baseline': self.baseline}


@dataclasses.dataclass
class PhasedEvaluator:
  """Each phase's evaluator, chosen by the step: an eval at a phase's last step uses its
  length and files (one phase: just that one's)."""

  evaluators: list  # (Phase, Evaluator) pairs, for the phases with eval files.
  every_steps: int

  def run(self, params, step: int) -> dict:
    for phase, evaluator in self.evaluators:
      if phase.holds(step):
        return evaluator.run(params, step)
    return {}

  def section(self, step: int) -> str:
    """TensorBoard's section of the eval at `step`: phase 2's its own (other files, another
    length: on one curve with phase 1's, the change of data would read as the model's)."""
    return 'eval_phase2' if any(phase.holds(step) and phase.first_step
                                for phase, _ in self.evaluators) else 'eval'


def evaluator(config, plan, masking, mesh, rules, model) -> PhasedEvaluator | None:
  """The eval of every phase with eval files (a warning for each without), or None."""
  # No in_shardings: the params and the batch arrive committed to their shardings.
  eval_fn = jax.jit(functools.partial(pretrain_objective.eval_step, model=model))
  evaluators = []
  for phase in plan:
    if phase.train_files is None:  # A phase the resumed run had finished: never read again.
      continue
    if not phase.eval_files:
      logging.warning('no eval files for steps %d..%d (data.eval_files / phase2.eval_files): '
                      'no eval there', phase.first_step, phase.end_step)
      continue
    make_eval_ds = functools.partial(
        input_pipeline.eval_dataset, phase.eval_files, global_batch_size=config.eval_batch_size,
        max_seq_length=phase.max_seq_length,
        max_predictions_per_seq=phase.max_predictions_per_seq, masking=masking,
        seed=config.seed, nsp=config.model.nsp,
        max_instances_per_row=config.data.max_instances_per_row,
        batch_multiple=sharding.data_parallel_size(mesh, rules))
    evaluators.append((phase, Evaluator(make_eval_ds, eval_fn, mesh, sharding.batch_axes(rules),
                                        config.max_eval_batches, config.eval_every_steps,
                                        config.model.vocab_size, phase.eval_files)))
  return PhasedEvaluator(evaluators, config.eval_every_steps) if evaluators else None
