"""Fine-tuning: a task's features, its kind's model and loss, handed to the one training loop.

  task (tasks/registry.py) -> tokenizer and features (host numpy; job_setup.py) -> batches.py
  (the examples of each step, cut or packed into rows) -> the kind's Objective (kinds.py:
  encoder + fresh head, loss) -> training/loop.run (eval per epoch writing the predictions each
  benchmark's scorer reads, encoder from init_from) -> the summary line. At the start, before
  any data is read, a line says which export formats will hold the head (export_formats.py).

Evaluation reads every example exactly once whatever the number of hosts: the last batch is
filled with weight-0 rows (or packed from the examples left) and the outputs are gathered.
"""

import dataclasses
import functools
import os
import time

from absl import logging
import flax.linen as nn
import jax
import numpy as np

from bertjax import console
from bertjax import files
from bertjax import job_config
from bertjax import job_lines
from bertjax import paths
from bertjax.finetune import batches
from bertjax.finetune import export_formats
from bertjax.finetune import job_setup
from bertjax.finetune import kinds
from bertjax.finetune import run_config
from bertjax.finetune import run_data
from bertjax.finetune import run_workdir
from bertjax.finetune import scored_folders
from bertjax.finetune.tasks import metric_names
from bertjax.finetune.tasks import registry
from bertjax.interop import init_from
from bertjax.interop import placement
from bertjax.interop import sources
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader
from bertjax.training import checkpoint_step
from bertjax.training import hosts
from bertjax.training import loop
from bertjax.training import losses
from bertjax.training import optimizer as optimizer_lib
from bertjax.training import progress
from bertjax.training import run_files
from bertjax.training import train_state
from bertjax.training import workdir_lock

# What a run's checkpoint that does not fit its own config.json means.
_EDITED_CONFIG = ("the run's config.json was edited or is another run's: restore the one the "
                  'run wrote.')

# ---------------------------------------------------------------------------------------------
# Evaluation.


def predict(predict_fn, params, features: dict, layout: batches.Layout, batch_size: int,
            job: str = 'eval'):
  """(outputs for every feature row, in order, as host numpy; eval loss metric means), with a
  progress line (`job`: its name) past job_lines.PROGRESS_SECONDS.

  Unpacked, a batch_size past the features is cut to the fewest rows that hold them all
  (eval_batch_size=1000000 over 100 features was a million rows of padding: out of memory)."""
  n = len(features['input_ids'])
  batch_size = batches.eval_rows(batch_size, n, layout)
  full = features['input_ids'].shape[-1]
  outputs, metrics = [], []
  progress = job_lines.Progress(job, n, 'features')
  for start in range(0, n, batch_size):
    examples = np.arange(start, min(start + batch_size, n))
    batch = batches.device_batch(features, examples, layout, batch_size)
    out, m = predict_fn(params, batch.arrays)
    # Replicated: every host holds all rows.
    out = np.asarray(jax.device_get(out))
    outputs.append(batches.example_outputs(batch, out, layout, full)[:len(examples)])
    metrics.append(m)
    progress.update(examples[-1] + 1)
  return np.concatenate(outputs), losses.host_means(metrics)


def jit_predict(s: job_setup.Setup):
  replicated = jax.sharding.NamedSharding(s.mesh, jax.sharding.PartitionSpec())
  return jax.jit(functools.partial(kinds.predict_step, model=s.objective.model, kind=s.task.kind),
                 out_shardings=(replicated, replicated))


@dataclasses.dataclass
class Evaluator:
  """Every eval split scored with the task's own metrics; predictions written per eval."""

  s: job_setup.Setup
  eval_sets: dict  # split -> (examples, features, meta).
  predict_fn: object
  layout: batches.Layout
  workdir: str
  every_steps: int  # 0: after the step that completes each epoch's examples (epochs).
  epochs: job_setup.Epochs

  def due(self, done: int) -> bool:  # With every_steps 0 (training/loop.py).
    return self.epochs.ends_at(done)

  def run(self, params, step: int) -> dict:
    """The first split's metrics bare, the others prefixed with their split."""
    results, task, cfg = {}, self.s.task, self.s.config
    for i, (split, (examples, features, meta)) in enumerate(self.eval_sets.items()):
      outputs, means = predict(self.predict_fn, params, features, self.layout,
                               cfg.eval_batch_size, f'eval {split} at step {step}')
      metrics = {'loss': means['loss'], **task.evaluate(outputs, features, meta, examples)}
      # Process 0 writes: an error there stops every host (not it alone, the others waiting).
      with hosts.fail_together():
        if jax.process_index() == 0:
          out_dir = files.join(self.workdir, 'predictions', f'step_{step}')
          task.write_predictions(outputs, features, meta, examples, split, out_dir)
      results.update({k if i == 0 else f'{split}/{k}': v for k, v in metrics.items()})
    return results


# ---------------------------------------------------------------------------------------------
# The jobs.


def train_and_evaluate(config, workdir: str) -> dict:
  """Fine-tunes per `config` in `workdir`; returns the final eval metrics (first eval split's
  names bare, others prefixed with their split) plus the skip counts. The console's last line
  is the run's summary."""
  try:
    return _finetune(config, workdir)
  finally:
    console.forget_warnings()  # The next run in this process (a notebook's) says them again.


def _finetune(config, workdir) -> dict:
  start = time.perf_counter()
  config, workdir = job_config.job_start(config, workdir, 'finetune')
  logging.info('%s', export_formats.statement(*job_setup.check_head(config, workdir)))
  with workdir_lock.locked(workdir):
    outcome, main_metric, skipped = _train_and_evaluate(config, workdir)
  outputs = [] if outcome.eval_step is None else [
      ('eval results', files.join(workdir, 'eval_results.json')),
      ('predictions', files.join(workdir, 'predictions', f'step_{outcome.eval_step}' if (
          not outcome.early_stopped) else f'step_{outcome.best_step}'))]
  progress.summary('finetune', time.perf_counter() - start, outcome, workdir,
               main_metric=main_metric, outputs=outputs,
               metrics=[('skipped examples', skipped)] if skipped else [])
  return outcome.eval_metrics | {'skipped': skipped}


def _eval_metric_names(task, evaluator) -> tuple:
  """The names the job's evals report, where its data decided them (the task's, its loss
  first; a later eval split's with the split as a prefix); () when the task name did."""
  if not task.metric_names or evaluator is None:
    return ()
  first = (metric_names.LOSS, *task.metric_names)
  later = list(evaluator.eval_sets)[1:]
  return first + tuple(f'{split}/{name}' for split in later for name in first)


def _set_up(config, workdir: str):
  """The job's set-up, its data read and featurized and its steps counted, checked (no
  collective: the caller runs it on every host together)."""
  s = job_setup.setup(config, workdir)
  cfg, task = s.config, s.task
  registry.check_files_to_predict(cfg.task, cfg.data)  # Not read by training: said now.
  rows_of = job_setup.layout(s)
  skipped = {}
  train_examples, train_features, _ = job_setup.featurized(s, 'train', True, skipped)
  cfg.data.train_features_sha256 = run_data.features_digest(train_features)
  run_data.check_training_features(cfg, workdir, cfg.data.train_features_sha256)
  if kinds.get(task.kind).example == 'texts':
    # Recorded in config.json: predict refuses a pair for a one-text model and the reverse.
    cfg.text_pairs = any(getattr(e, 'text_b', None) for e in train_examples)
  num_train = len(train_features['input_ids'])
  if num_train == 0:
    where = (f'config.data.train_file={cfg.data.train_file}' if cfg.data.get('train_file')
             else 'config.data.data_dir')
    raise ValueError(f'task {task.name}: no training features: check {where} (skipped rows, if '
                     'any, are counted above).')
  eval_sets = {split: job_setup.featurized(s, split, False, skipped)
               for split in task.eval_splits}
  run_data.record_held_out(cfg, eval_sets, task)
  total_steps = job_setup.num_steps(cfg, num_train, workdir)
  job_setup.set_steps(cfg, total_steps)
  train_state.check_config(cfg, s.mesh, len(s.tokenizer.vocab))
  return s, rows_of, train_features, eval_sets, total_steps, skipped


def _train_and_evaluate(config, workdir: str) -> tuple[progress.Outcome, str, int]:
  """(how the loop ended, the task's main metric, the examples skipped)."""
  with hosts.fail_together():  # Data one host cannot read stops every host at once.
    s, rows_of, train_features, eval_sets, total_steps, skipped = _set_up(config, workdir)
  cfg, task = s.config, s.task
  num_train = len(train_features['input_ids'])
  # Hosts that read other copies of the data would train on other rows, or hang in a step.
  hosts.check_same_view(workdir, f'train features {cfg.data.train_features_sha256} '
                        f'({num_train}), {total_steps} steps, eval ' + ', '.join(
                            f'{k} {run_data.features_digest(f)}' for k, (_, f, _) in
                            eval_sets.items()), what='the fine-tuning data', fix=(
                                'give every host the same data: a bucket, or a folder all the '
                                'hosts share'))
  # The examples the steps consume, as epochs: an epoch may end inside a step (job_setup.Epochs).
  counted = job_setup.Epochs(num_train, cfg.global_batch_size)
  logging.info('task %s (%s, pooling %s): %d train features, %s; %s%s, warmup %d', task.name,
               task.kind, cfg.pooling, num_train,
               ', '.join(f'{k} {len(f["input_ids"])}' for k, (_, f, _) in eval_sets.items()),
               counted.start_words(total_steps), rows_of.words(), cfg.optimizer.warmup_steps)
  if why := batches.packing_gain(rows_of, cfg.global_batch_size):
    logging.warning('%s', why)
  if cfg.optimizer.layer_decay != 1.0:
    logging.info('%s', optimizer_lib.layer_decay_line(cfg))

  # The data position is the examples consumed: a run resumed with another batch size goes on
  # from the example it stopped at (step x batch would skip or repeat examples).
  def step_examples(step):
    return batches.example_indices(counted.seen(step), cfg.global_batch_size, num_train,
                                   cfg.seed)

  def train_batches(start_step, examples_consumed):
    # Examples consumed minus start step x batch, set before the first batch (and before the
    # first progress line and eval, which count epochs in examples seen).
    counted.offset = examples_consumed - start_step * cfg.global_batch_size
    return (batches.device_batch(train_features, step_examples(step), rows_of,
                                 cfg.global_batch_size).arrays
            for step in range(start_step, total_steps))

  def load_weights(params, shardings):
    params, report = init_from.load_encoder(s.init_path, params, shardings,
                                            cfg.model.num_layers)
    with cfg.unlocked():  # config.json records the step read ('latest' and 'best' move).
      cfg.init_from_read = report['read']
    logging.info('init_from %s: loaded %d encoder tensors; fresh: the task head %s%s; its '
                 'tensors not read: %s (a head it has is not: the run trains its own)',
                 s.init_path, len(report['loaded']), report['fresh'],
                 f' and, not in it, {report["lacked"]}' if report['lacked'] else '',
                 report['unused'] or 'none')
    return params

  if not s.init_path:
    logging.warning('config.init_from is empty: fine-tuning a randomly initialised encoder')
  evaluator = (Evaluator(s, eval_sets, jit_predict(s), rows_of, workdir,
                         cfg.eval_every_steps, counted)
               if eval_sets else None)

  job = loop.Job(
      objective=s.objective, batches=train_batches, evaluator=evaluator,
      load_weights=load_weights if s.init_path else None,
      describe=lambda step, means: (f' (epoch {counted.at(step):.2f}): loss '
                                    f'{means["loss"]:.4f}, lr {means["learning_rate"]:.2e}'),
      best_metric=task.main_metric, metric_names=_eval_metric_names(task, evaluator),
      vocab_file=s.vocab_file, early_stopping_patience=cfg.early_stopping_patience)
  return (loop.run(cfg, workdir, s.mesh, job, rules=s.rules), task.main_metric,
          job_setup.skipped_total(skipped))


def _load(workdir: str, step, agreed: int | None):
  """The model of `step`: on several hosts the step they `agreed` on (a live run saving
  meanwhile would give a host listing again a newer one); one process lists again, so a step
  deleted meanwhile is skipped."""
  pinned = jax.process_count() > 1 and agreed is not None
  try:
    return sources.load(workdir, step=agreed if pinned else step)
  except (ValueError, OSError) as e:
    if not pinned or step not in (None, 'latest'):
      raise
    raise ValueError(f'the hosts read step {agreed}, the newest when they compared: {e} (a run '
                     'saving meanwhile may have deleted it; several hosts never fall back to an '
                     'earlier step on their own: pass --step=<an earlier step>)') from e


def _say_how_best_was_ranked(source, step, asked: str):
  """--step=best with a best_metric other than the run ranked by: the run's ranking is read."""
  ranked = (checkpoint_step.read_meta(source).get('ranking') or {}).get('metric')
  if checkpoint_reader.parse_step(step) == 'best' and ranked and asked not in ('', ranked):
    logging.warning('--step=best reads the step the run ranked best by %s, as it trained: '
                    'config.checkpoint.best_metric=%s ranks the evals of a run that trains '
                    'with it, not of a trained one', ranked, asked)


def _splits_read(task, mode: str, splits) -> tuple:
  """The splits mode=eval or mode=predict reads (`splits`, else the task's own), or why none."""
  if splits is None:
    splits = task.eval_splits if mode == 'eval' else task.test_splits
  if not splits and mode == 'predict' and task.name in registry.TOPIC_TASKS:
    raise ValueError(f'task {task.name} has no test split, only the eval examples it holds out '
                     'of its published files: score them with --config.mode=eval, or fine-tune '
                     'task=classification on your own files (train_file, test_file).')
  if not splits:
    raise ValueError(f'task {task.name} has no {"eval" if mode == "eval" else "test"} data: '
                     'set ' + ('config.data.eval_file' if mode == 'eval' else
                               'config.data.predict_file (or test_file)') + '.')
  return tuple(splits)


def run_predict(config, workdir: str, splits=None, step=None) -> list:
  """Writes predictions of the workdir's latest checkpoint, or of `step` ('best', 'latest' or a
  number: checkpoint_reader.resolve_step) (mode=eval: eval splits with metrics; mode=predict:
  the test split or data.predict_file). Returns the written paths; the console's last line is
  the summary."""
  start = time.perf_counter()
  job_config.check_for(config, 'finetune')
  config = paths.own_copy(config)
  workdir = paths.absolute_workdir(workdir)
  # Before anything of the workdir is read: a host that sees another folder would stop alone,
  # the others waiting for it in their first collective.
  seen, agreed = run_workdir.checkpoint_seen(workdir, step)
  hosts.check_same_view(workdir, seen)
  paths.absolute_config(config)
  # `--workdir=RUN --config.mode=eval` alone scores the run's own data as it was read.
  run = run_config.trained_run(workdir)  # Its config.json, read once (None: no run there).
  taken = run_data.follow_run_data(
      config, run, run and checkpoint_reader.last_run_config(workdir))  # Its latest resume's paths.
  if taken and jax.process_index() == 0:
    logging.info('reading the data as the run in %s records it: %s', workdir,
                 ', '.join(f'{key}={value}' for key, value in taken.items()))
  run_data.check_run_data_found(config, taken, workdir)
  if jax.process_index() == 0:
    run_data.warn_if_scoring_training_files(config, run)
  if config.mode == 'eval' and config.data.get('test_file') and jax.process_index() == 0:
    logging.warning('config.data.test_file=%s is not read by mode=eval, which scores the eval '
                    'split (mode=predict reads it)', config.data.test_file)
  if (config.mode == 'predict' and config.data.get('eval_file') and jax.process_index() == 0
      and config.data.eval_file != init_from.lookup(run or {}, 'data.eval_file')):
    # The run's own (its training flags passed again) is as expected; another one was meant
    # to be predicted, and the test split was, without a word (helper-173).
    logging.warning('config.data.eval_file=%s is not read by mode=predict, which predicts %s: '
                    'pass it as --config.data.predict_file to predict it, or score it with '
                    'mode=eval', config.data.eval_file,
                    f'config.data.predict_file={config.data.predict_file}'
                    if config.data.get('predict_file') else 'the test split')
  job_setup.check_head(config, workdir)  # Its export formats, from the config alone: first.
  # Before the data: a wrong --workdir was told as missing data.
  run_workdir.check_has_checkpoint(workdir)
  if config.mode == 'predict':  # A file to predict missing, or several: before the model loads.
    registry.check_files_to_predict(config.task, config.data, training=False)
  s = job_setup.setup(config, workdir)
  params, read_step = _read_model(s, workdir, step, agreed)
  splits = _splits_read(s.task, config.mode, splits)
  # Every split read first: its folder is chosen by what they hold too (scored_folders).
  read = {split: job_setup.featurized(s, split, False) for split in splits}
  run_data.check_held_out(s.config, run, read, workdir, s.task)
  out_dir, inputs = scored_folders.chosen(s.config, workdir, config.mode, read_step,
                                         {split: f for split, (_, f, _) in read.items()},
                                         [len(examples) for examples, _, _ in read.values()])
  scored, shown = _score(s, params, read, config.mode)
  written = []
  # Every host computed the same; one writes, and an error there stops every host. The folder
  # is put in place whole once every split is written (scored_folders.writing).
  with hosts.fail_together():
    if jax.process_index() == 0:
      with scored_folders.writing(out_dir, inputs) as into:
        for split, (outputs, metrics) in scored.items():
          examples, features, feature_meta = read[split]
          if metrics is not None:
            files.write_atomically(files.join(into, f'{split}_results.json'),
                                   run_files.json_text(metrics))
          path = s.task.write_predictions(outputs, features, feature_meta, examples, split, into)
          written.append(files.join(out_dir, os.path.relpath(path, into)))  # local temp
      for split, path in zip(scored, written, strict=True):
        logging.info('predictions for %s (%d examples) written to %s', split,
                     len(read[split][0]), path)
  if jax.process_index() == 0:
    kind = 'results and predictions' if config.mode == 'eval' else 'predictions'
    job_lines.summary(f'finetune {config.mode}', time.perf_counter() - start,
                      metrics=[('step', read_step), *shown], outputs=[(kind, out_dir)])
  return written


def _read_model(s: job_setup.Setup, workdir: str, step, agreed) -> tuple[dict, int]:
  """(the params of the run's checkpoint at `step`, placed on the mesh, its step number)."""
  cfg = s.config
  job_setup.set_steps(cfg, 1)
  train_state.check_config(cfg, s.mesh, len(s.tokenizer.vocab), training=False)
  abstract, shardings = train_state.train_state_shapes(cfg, s.objective,
                                                       optimizer_lib.make(cfg.optimizer), s.mesh,
                                                       s.rules)
  # The one loader of a model for reading (predict's, export's: interop/sources.load): digests
  # checked, the head's labels against config.json's, a live run's deletions told from damage,
  # nothing of the workdir written, cleaned or moved.
  model = _load(workdir, step, agreed)
  _say_how_best_was_ranked(model.source, step, cfg.checkpoint.best_metric)
  params = placement.place(
      placement.encoder_layout_of(model.params, checkpoint.flatten(abstract.params),
                                  model.source),
      abstract.params, shardings.params, model.source, missing_hint=_EDITED_CONFIG,
      shape_hint=_EDITED_CONFIG)
  return params, int(files.name(model.source))


def _score(s: job_setup.Setup, params, read: dict, mode: str) -> tuple[dict, list]:
  """({split: (outputs, metrics: mode=eval's, else None)}, the summary's (name, value) pairs)
  of the model on each split `read` holds (job_setup.featurized's)."""
  cfg, task = s.config, s.task
  predict_fn, rows_of = jit_predict(s), job_setup.layout(s)
  scored, shown = {}, []
  with jax.set_mesh(s.mesh), nn.logical_axis_rules(s.rules):
    for split, (examples, features, feature_meta) in read.items():
      outputs, means = predict(predict_fn, params, features, rows_of, cfg.eval_batch_size,
                               f'{mode} {split}')
      metrics = None
      if mode == 'eval':  # What the training run's evals report, its loss too.
        metrics = {'loss': means['loss'], **task.evaluate(outputs, features, feature_meta,
                                                          examples)}
        logging.info('eval %s: %s', split, ', '.join(f'{k} {v:.4f}' for k, v in
                                                     sorted(metrics.items())))
        shown += [(f'{split} {k}', metrics[k]) for k in sorted(
            metrics, key=lambda k: (k != task.main_metric, k))]
        if cfg.data.max_eval_examples >= 0:  # A part of the eval set: how much.
          # Not 'the first N': an eval file's is a fixed sample in file order (user_tasks).
          shown.append((f'{split} examples (max_eval_examples={cfg.data.max_eval_examples})',
                        len(examples)))
      else:
        shown.append((f'{split} examples', len(examples)))
      scored[split] = outputs, metrics
  return scored, shown


def run(config, workdir: str, step=None):
  """bertjax.main's entry for job=finetune; `step` (--step) picks the checkpoint of modes eval
  and predict."""
  run_workdir.check(config, workdir, step)
  if config.mode == 'train_eval':
    if step is not None:
      raise ValueError(f'--step={step} picks the checkpoint that --config.mode=eval or predict '
                       'reads: training resumes from the newest; drop --step.')
    return train_and_evaluate(config, workdir)
  if config.mode in ('eval', 'predict'):
    return run_predict(config, workdir, step=step)
  raise ValueError(f'config.mode={config.mode!r} is unknown; valid: train_eval, eval, predict.')
