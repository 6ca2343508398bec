"""The one training loop: pre-training and fine-tuning both run it.

  mesh -> check the config -> sharded init (eval_shape, then jit with out_shardings) -> resume /
  init_from / fresh -> loop (train_step, log, eval, checkpoint, preemption) -> wait for saves
  -> the Outcome, which the job prints as its summary line once its workdir is released.

What differs between jobs comes in as a Job (model and loss, resumable global batches, an
evaluator, start-from weights, the progress line's words); what is common lives here: the
sharded state, the jitted donated step, progress and TensorBoard, MFU, the NaN check,
checkpoints and preemption.

The loop dispatches step N+1 before it reads step N's metrics, so the host never waits for the
device at a log step; it reads them at once only where it must (before an eval or a save, which
need step N's state before the next step donates it).
"""

import dataclasses
import functools
import itertools
import json
import math
import time
from typing import Callable
from typing import Iterator
from typing import Protocol

from absl import logging
import flax
import flax.linen as nn
import jax
import ml_collections
from orbax.checkpoint import multihost

from bertjax import files
from bertjax import metric_direction
from bertjax import paths
from bertjax.model import encoder
from bertjax.model import platform_defaults
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader
from bertjax.training import checkpoint_step
from bertjax.training import event_writer
from bertjax.training import hosts
from bertjax.training import optimizer as optimizer_lib
from bertjax.training import perf
from bertjax.training import preemption as preemption_lib
from bertjax.training import progress as progress_lib
from bertjax.training import ranking
from bertjax.training import resume_checks
from bertjax.training import run_files
from bertjax.training import sharding
from bertjax.training import train_state


class Evaluator(Protocol):
  """Evaluates parameters: `run(params, step)` returns metrics (and may write predictions),
  every `every_steps` steps, always at the last; with 0, where it has one, after each step
  `due(done)` names (fine-tuning's epoch ends: an epoch may end inside a step)."""

  every_steps: int

  def run(self, params, step: int) -> dict:
    ...


@dataclasses.dataclass(frozen=True)
class Job:
  """What a job hands the loop.

  batches(start_step, examples_consumed) -> an iterator of global batches from that position.
  load_weights(params, shardings) -> params: the start-from weights placed in `shardings` (None:
    start fresh). `params` comes abstract; what it returns still abstract (a task head) is drawn.
  describe(step, means) -> the progress line's part before '|' (the metrics a user watches).
  best_metric: the job's main eval metric: what ranks checkpoints (keep_best, --step=best) and
    early stopping unless config.checkpoint.best_metric names another.
  vocab_file: the vocab the run tokenizes with, copied beside its config.json.
  metric_names: the eval metrics the job computes, known before its first eval (a
    checkpoint.best_metric among none of them stops the run at its start); () = known only once
    the first eval has run (it stops there, before anything is saved).
  early_stopping_patience: evaluations without an improvement of the best metric after which
    the run stops (0 = never).
  remaining_flops(step) -> the FLOPs of the steps from `step` on, for the ETA where later steps
    cost more (two-phase pre-training's phase 2); None: each costs what the last ones did.
  order_per_process: whether batches() reads in an order that depends on the process count
    (pre-training: each host reads its own files), warned of when a resume has another.
  pipeline_starts: the steps at which batches() starts another input pipeline (phase 2's).
  """

  objective: train_state.Objective
  batches: Callable[[int, int], Iterator[dict]]
  evaluator: Evaluator | None
  load_weights: Callable | None
  describe: Callable[[int, dict], str]
  best_metric: str
  vocab_file: str = ''  # Kept in the workdir (run_files.RUN_VOCAB) once the run trains.
  metric_names: tuple = ()
  early_stopping_patience: int = 0
  remaining_flops: Callable[[int], float] | None = None
  order_per_process: bool = False
  pipeline_starts: tuple = ()


FIRST_STEP_BARRIER_S = 1800  # The processes' wait at the first step: the slowest's compile.
_first_steps = itertools.count()  # Barrier keys are used once: every process counts the same.


def _compile_together(step_fn, state, batch):
  """Several processes: each compiles the step, then all wait at one barrier before any runs
  it (gloo's rendezvous of a step's first collectives gives up after 30 s: a host whose compile
  or input came 30 s late failed the job)."""
  if jax.process_count() == 1:
    return
  step_fn.lower(state, batch).compile()  # jit's own cache: the step's first call reuses it.
  multihost.get_barrier_sync_fn()(key=f'bertjax-first-step-{next(_first_steps)}',
                                  timeout_ms=FIRST_STEP_BARRIER_S * 1000)


def _started(job: Job, step: int, state) -> float:
  """When `step` starts; at a pipeline start (no training) once the queued steps (training) end."""
  if step in job.pipeline_starts:
    jax.block_until_ready(state)
  return time.perf_counter()


def _compile_time(step_fn, state, batch, since: float) -> float:
  """Seconds of no training (out of the rates) before a new batch shape's step: its pipeline's
  start since `since`, and its compile once the queued steps (training) are done."""
  waited = time.perf_counter() - since
  jax.block_until_ready(state)  # The queued steps' work: training, in the rates.
  start = time.perf_counter()
  step_fn.lower(state, batch).compile()
  return waited + time.perf_counter() - start


def _start_records(config, workdir, job: Job, mesh, start_step: int, resumed: bool, *,
                   examples_consumed: int, schedule):
  """The run's records at its start, written by process 0 (an error there stops every host:
  the others would wait for it in the first step); returns the TensorBoard writer. A resume
  is checked against its records first."""
  with hosts.fail_together():
    if resumed:
      resume_checks.check(config, workdir, start_step, examples_consumed, schedule)
      run_files.note_saved(workdir)  # A run saved before the record existed, once it trains.
    if job.vocab_file:  # Before anything else is written: a resume with another vocab stops.
      run_files.keep_run_vocab(workdir, job.vocab_file)
    writer = _metric_writer(workdir, start_step)
    _write_config(config, workdir, writer, start_step if resumed else None, mesh)
  return writer


def _write_config(config, workdir, writer, resumed_at: int | None, mesh):
  """TensorBoard hparams and config.json; a resumed run keeps the first config.json and
  records its own next to it. Written only once the config is known to fit the checkpoints.
  The hparams hold the mesh's sizes (config.json what was asked: -1, all devices left)."""
  if jax.process_index() == 0:
    hparams = {k: v for k, v in flax.traverse_util.flatten_dict(
        config.to_dict(), sep='.').items() if isinstance(v, (int, float, str, bool))}
    writer.write_hparams({**hparams, **{f'mesh.{axis}': int(size)
                                        for axis, size in mesh.shape.items()}})
    name = 'config.json' if resumed_at is None else f'config-resumed-at-{resumed_at}.json'
    run_files.write_json(files.join(workdir, name), json.loads(config.to_json()))


def _ranking(config, job: Job) -> tuple[str, str, int]:
  """(best metric, its mode, keep_best): config.checkpoint's, else the job's main metric; early
  stopping keeps the best step at least (it is what the run hands on)."""
  metric = config.checkpoint.best_metric or job.best_metric
  ranking.check_best_metric(metric, job.metric_names, config.checkpoint.best_mode)
  if job.early_stopping_patience and job.evaluator is None:
    raise ValueError(f'config.early_stopping_patience={job.early_stopping_patience} counts '
                     'evaluations, but this run has no eval data: give it some (an eval file or '
                     'split), or set it to 0.')
  every = getattr(job.evaluator, 'every_steps', 0)
  ranking.warn_if_patience_unreached(job.early_stopping_patience, every, config.num_train_steps)
  keep_best = config.checkpoint.keep_best or (1 if job.early_stopping_patience else 0)
  return metric, metric_direction.best_mode(metric, config.checkpoint.best_mode), keep_best


def _evaluate(job: Job, params, step: int, writer) -> dict:
  start = time.perf_counter()
  metrics = job.evaluator.run(params, step)
  if not metrics:  # A phase without eval files (said at the start): nothing to show.
    return metrics
  # A job's evals of other data (pre-training's phase 2) go in their own section.
  section = getattr(job.evaluator, 'section', lambda step: 'eval')(step)
  writer.write_scalars(step, {f'{section}/{k}': v for k, v in metrics.items()})
  logging.info('eval at step %d%s: %s (%.1f s)', step,
               '' if section == 'eval' else f' ({section.replace("eval_", "")})',
               ', '.join(f'{k} {v:.4f}' for k, v in sorted(metrics.items())),
               time.perf_counter() - start)
  return metrics


def _save(mngr, config, mesh, state, step: int, consumed: int, standing: dict | None,
          record: str = '', run: str | None = None) -> str:
  """Saves `step` in the background with what a resume (examples consumed, mesh, model) and
  --step=best (its ranking) read back, unless `record` (the run's config file) is gone: the
  workdir moved. Returns the run's name (`run`: an earlier save's, so it is read once a run)."""
  workdir = files.parent(str(mngr.directory))
  # A save at no eval has metrics too (it ranks last): orbax keeps the steps that have none.
  metrics = {'step': step} | ({} if standing is None else {
      standing['metric']: standing['value'], 'phase_start': standing.get('phase_start', 0)})
  with hosts.fail_together():  # Process 0 writes it: an error there stops every host.
    if record and jax.process_index() == 0 and not files.exists(record):
      raise FileNotFoundError(  # Else orbax's NOT_FOUND tracebacks, and folders made anew there.
          f'{workdir} is gone (moved or deleted while the run trained: {files.name(record)}, '
          f'written at its start, is not there): step {step} is not saved; resume the run where '
          'it is now (--workdir=<its new place>), from the last step it holds.')
    run = run or checkpoint_step.run_for_save(workdir)  # Process 0's: it alone writes the meta.
    run_files.note_saved(workdir, run)  # What the saves before finished.
  meta = checkpoint_step.step_meta(config, mesh, step, consumed, standing, run)
  checkpoint.save(mngr, step, state, meta, force=True, metrics=metrics)
  logging.info('saving checkpoint %s/%d (in the background)', mngr.directory, step)
  return run


def _metric_writer(workdir, start_step: int):
  """TensorBoard on process 0 only (event_writer.py: without TensorFlow; a resumed run's marks
  its start, so TensorBoard drops the steps it replays); the console gets the progress line."""
  if jax.process_index() > 0:
    return event_writer.NoWriter()
  return event_writer.EventWriter(str(workdir), start_step)


def _saved_layout(mngr) -> bool | None:
  """Whether the newest readable checkpoint holds stacked (nn.scan) layers; None: none."""
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      params = checkpoint.state_metadata(mngr.directory / str(step) / 'state')['params']
    except Exception:  # pylint: disable=broad-except  # Unreadable: restore_latest decides.
      continue
    return platform_defaults.scanned_layout(params)
  return None


def _initial_state(config, job: Job, tx, mesh, rules, mngr):
  """(state, its shardings, examples consumed, resumed?): the workdir's checkpoint, else
  init_from's weights with only the rest drawn, else fresh (checkpoint.restore_or_initialize).
  A resumed run draws no initial values at all."""
  logging.info('--- model and optimizer')
  # model.attention_impl / scan_layers 'auto' settle here, once, before the model is first
  # traced: for the mesh's platform, keeping the layout of the checkpoint a resume reads. In
  # place: the job's objective and evaluator hold this config.model; config.json records it.
  packed = config.get('data', {}).get('max_instances_per_row', 1) > 1
  logging.info('%s', platform_defaults.settle(config.model, platform_defaults.platform_of(mesh),
                                              saved_scan=_saved_layout(mngr), packed=packed))
  abstract, shardings = train_state.train_state_shapes(config, job.objective, tx, mesh, rules)
  # The shape beside the size's name: model.size is a label, which --config.model.* fields
  # may have made another shape than its name says.
  m = config.model
  logging.info('model: %s (%d layers, hidden %d, %d heads, mlp %d), %d parameters', m.size,
               m.num_layers, m.hidden_size, m.num_heads, m.mlp_dim,
               encoder.param_count(abstract.params))

  def initialize():
    loaded = (job.load_weights(abstract.params, shardings.params)
              if job.load_weights is not None else None)
    return train_state.create_train_state(config, job.objective, tx, mesh, rules, loaded)[0]

  logging.info('--- restore')
  state, consumed, resumed = checkpoint.restore_or_initialize(
      mngr, abstract, config.global_batch_size, initialize,
      on_resume=functools.partial(resume_checks.on_resume, job.order_per_process))
  return state, shardings, consumed, resumed


def _nothing_to_do(workdir, step: int, total_steps: int, stopped: str,
                   best: dict) -> progress_lib.Outcome:
  """The Outcome of a run resumed at its end, past it (a config with fewer steps) or after it
  stopped early: its last recorded eval, at the step that eval ran."""
  eval_step, results = run_files.last_eval(workdir, step, total_steps)
  if step > total_steps and not stopped:  # The summary says the last eval's step, if any.
    stopped = (f"already at step {step}, past this config's {total_steps} steps: nothing to do"
               + ('; no eval was recorded' if eval_step is None else ''))
    logging.info('%s (raise num_train_steps, or the epochs, past %d to go on)', stopped, step)
    return progress_lib.Outcome(results, step, total_steps, None, eval_step, stopped, **best)
  logging.info('already at step %d of %d: nothing to do%s', step, total_steps,
               f' (stopped {stopped})' if stopped else ' (raise num_train_steps to go on)')
  return progress_lib.Outcome(results, step, total_steps, None, eval_step, stopped,
                              early_stopped=bool(stopped), **best)


def _finish_record(workdir, outcome: progress_lib.Outcome):
  """What a run that ended writes and a run interrupted right after its last save lacks: its
  last eval as eval_results.json (which the summary names) and the record of its saves.
  Process 0 writes them: an error there stops every host."""
  with hosts.fail_together():
    run_files.note_saved(workdir)
    results = files.join(workdir, 'eval_results.json')
    if outcome.eval_metrics and not files.exists(results):
      run_files.write_json(results, outcome.eval_metrics)


@dataclasses.dataclass
class _Boundary:
  """What the loop does between steps: evaluate, rank the eval, save, and decide whether the run
  stops (early stopping, preemption). Holds the run's evals: its history and the last one."""

  config: ml_collections.ConfigDict
  job: Job
  workdir: str
  mesh: jax.sharding.Mesh
  mngr: object
  writer: object
  progress: progress_lib.Progress
  history: dict
  ranking: tuple  # (best metric, its mode, keep_best): _ranking's.
  start_step: int
  examples_consumed: int
  eval_metrics: dict = dataclasses.field(default_factory=dict)
  eval_step: int | None = None
  record: str = ''  # The config file the run wrote at its start: gone, the workdir moved.
  run: str | None = None  # The run's name (run_files.run_id), once its first save read it.

  def after(self, state, done: int, metrics, preemption: preemption_lib.Preemption,
            cost: tuple[float, float], not_training: float) -> str:
    """After step `done` ran (its perf.step_cost, and the seconds since the last step that were
    no training: a compile, an input pipeline's start, a profiler trace's start and write):
    why the run stops there ('' = it goes on)."""
    evaluator, is_last = self.job.evaluator, done == self.config.num_train_steps
    preempted = preemption.reached(done)
    every = getattr(evaluator, 'every_steps', 0)
    due = (lambda d: d % every == 0) if every else getattr(evaluator, 'due', lambda d: False)
    do_eval = evaluator is not None and (is_last or due(done))
    will_save = is_last or preempted or do_eval or self.mngr.should_save(done)
    self.progress.step_done(done, metrics, cost, read_now=will_save,
                            not_training=not_training)
    ranked, stopped, began = None, '', time.perf_counter()
    if do_eval:
      evaluated = _evaluate(self.job, state.params, done, self.writer)
      if bad := [k for k, v in evaluated.items() if 'loss' in k and not math.isfinite(v)]:
        raise self.progress.nonfinite(  # Weights that give NaN: never saved, nor ranked.
            f'the eval at step {done} gave {bad[0]} {evaluated[bad[0]]}: the weights after it '
            f'give NaN/Inf (step {done} is not saved)')
      if evaluated:  # Empty in a phase without eval files: the last eval stays the last.
        self.eval_metrics, self.eval_step = evaluated, done
      metric, mode, _ = self.ranking
      # Process 0 writes the history: a write failing there (a bucket's error, a full disk)
      # stops every host, not process 0 alone with the others waiting in the next step.
      with hosts.fail_together():
        ranked, stopped = ranking.record(self.config, evaluated, done, self.history,
                                         self.workdir, metric, mode,
                                         self.job.early_stopping_patience)
    preempted = preempted or preemption.asked_since()  # During the eval: saved now.
    will_save = will_save or preempted
    if will_save:
      consumed = self.examples_consumed + (done - self.start_step) * self.config.global_batch_size
      self.run = _save(self.mngr, self.config, self.mesh, state, done, consumed, ranked,
                       self.record, self.run)
      self.progress.saved_step = done
      # The eval and the save's blocking part: no training, but the ETA's.
      self.progress.restart_timer(done, time.perf_counter() - began)
      preempted = preempted or preemption.asked_since()  # During the save: saved already.
    if is_last:
      return ''  # Early stopping at the last step: the run finished anyway.
    if stopped:
      logging.warning('stopped %s: saved step %d, exiting', stopped, done)
      return stopped
    if preempted:
      logging.warning('preempted: saved step %d, exiting', done)
      return f'preempted at step {done}: rerun the same command to resume'
    return ''

  def outcome(self, done: int, last_loss, stopped: str) -> progress_lib.Outcome:
    """How the run ended; its last eval is kept as eval_results.json."""
    if self.eval_metrics:
      run_files.write_json(files.join(self.workdir, 'eval_results.json'), self.eval_metrics)
    return progress_lib.Outcome(self.eval_metrics, done, self.config.num_train_steps, last_loss,
                                self.eval_step, stopped, early_stopped=stopped.startswith('early'),
                                **ranking.best_of(self.config, done, self.history, *self.ranking))


def run(config, workdir: str, mesh, job: Job, *, rules=sharding.RULES) -> progress_lib.Outcome:
  """Trains `job` per `config` in `workdir`; returns how it ended (the last eval metrics for
  tests and notebooks, the rest for the summary line)."""
  workdir = paths.absolute(workdir)  # orbax refuses relative paths.
  tx, schedule = optimizer_lib.for_run(config)  # total_steps resolved before config.json.
  metric, mode, keep_best = _ranking(config, job)
  if lost := run_files.lost_checkpoints(workdir):  # Before anything is written there.
    raise ValueError(lost)
  earlier = checkpoint_reader.last_run_config(workdir) or {}  # A resume's: what it ran with.
  if (kept := ranking.kept_best(keep_best, earlier)) > keep_best:
    keep_best = config.checkpoint.keep_best = kept  # config.json records what the run keeps.
  mngr = checkpoint.manager(workdir, config, best_metric=metric, mode=mode, keep_best=keep_best)
  state, state_shardings, examples_consumed, resumed = _initial_state(config, job, tx, mesh,
                                                                      rules, mngr)
  start_step, total_steps = int(state.step), config.num_train_steps
  # The evals up to the resumed step, as recorded: early stopping counts on from them.
  history = run_files.eval_history(workdir, start_step) if resumed else {}
  stopped, ran_metric, ran_mode = ranking.resumed_end(
      config, history, earlier, job.best_metric, metric, mode, job.early_stopping_patience)
  if resumed and (start_step >= total_steps or stopped):
    mngr.close()
    if changed := resume_checks.changed_fields(config, workdir, start_step):
      logging.warning('this run has ended, so this config trains nothing: its changes (%s) '
                      'take effect in another --workdir (or with more steps, from step %d)',
                      ', '.join(changed), start_step)
    outcome = _nothing_to_do(workdir, start_step, total_steps, stopped, ranking.best_of(
        config, start_step, history, ran_metric, ran_mode, keep_best))  # As --step=best reads.
    _finish_record(workdir, outcome)
    return outcome
  writer = _start_records(config, workdir, job, mesh, start_step, resumed,
                          examples_consumed=examples_consumed, schedule=schedule)

  batches = job.batches(start_step, examples_consumed)
  batch_shardings = sharding.batch_sharding(mesh, rules)
  step_fn = train_state.jit_train_step(config, job.objective, tx, schedule, state_shardings,
                                       batch_shardings)
  progress = progress_lib.Progress(config, job, writer, start_step,
                                   start_step if resumed else None)
  boundary = _Boundary(config, job, workdir, mesh, mngr, writer, progress, history,
                       (metric, mode, keep_best), start_step, examples_consumed)
  boundary.record = files.join(workdir, f'config-resumed-at-{start_step}.json' if resumed
                               else 'config.json')  # As _write_config names it.
  if resumed:  # Its last eval so far: a resumed run that runs none ends naming it.
    boundary.eval_step, boundary.eval_metrics = run_files.last_eval(workdir, start_step,
                                                                    total_steps)
  trace = progress_lib.Trace(config, workdir, start_step, total_steps)
  preemption = preemption_lib.Preemption(mngr)
  done, stopped, shapes = start_step, '', set()
  try:
    with checkpoint.closing(mngr), trace, jax.set_mesh(mesh), nn.logical_axis_rules(rules):
      for step in range(start_step, total_steps):
        trace.before(step)  # Its start: in trace.overhead(), not in `not_training`.
        started = _started(job, step, state)
        batch = next(batches)
        shape = tuple(sorted((k, v.shape) for k, v in batch.items()))
        if step == start_step:
          logging.info('--- loop: steps %d..%d, %s per step', step, total_steps,
                       progress_lib.batch_words(batch, config.global_batch_size))
          _compile_together(step_fn, state, batch)
        not_training = 0.0 if shape in shapes and step not in job.pipeline_starts else (
            _compile_time(step_fn, state, batch, started))
        shapes.add(shape)
        with jax.profiler.StepTraceAnnotation('train', step_num=step):
          state, metrics = step_fn(state, batch)
        done = step + 1
        trace.after(done, state)
        stopped = boundary.after(state, done, metrics, preemption,
                                 perf.step_cost(config.model, batch),
                                 not_training + trace.overhead())
        if stopped:
          break
  finally:
    preemption.close()
    writer.close()
  with hosts.fail_together():  # Process 0's records of the end, before the job's next step.
    run_files.note_saved(workdir)  # The last save, waited for by closing().
    outcome = boundary.outcome(done, progress.last_loss, stopped)
  return outcome
