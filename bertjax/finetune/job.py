"""Fine-tuning: the pre-training loop's machinery (mesh, sharded init, step, checkpoints) on a task.

  task -> tokenizer and features (host numpy) -> model (encoder + fresh head) -> sharded init
  -> resume / load the encoder from `init` -> loop (train_step, log, eval per epoch, save)
  -> final eval: metrics and the predictions files each benchmark's scorer reads.

Task features fit in host memory, so the example order is a pure function of (seed, step): the
global batch of step s is rows [s*B, (s+1)*B) of the concatenated per-epoch permutations. A
resumed run needs only the step; hosts take their own slice of each global batch. Evaluation
pads the features to a multiple of the eval batch with weight-0 rows and gathers the outputs,
so every example is scored exactly once whatever the number of hosts.
"""

import functools
import json
import math
import pathlib
import time

from absl import logging
from clu import metric_writers
from clu import periodic_actions
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bertjax.finetune.tasks import registry as tasks_lib
from bertjax.input import input_pipeline
from bertjax.model import heads
from bertjax.pretraining_data import embedded
from bertjax.text import tokenizer as tokenizer_lib
from bertjax.training import checkpoint
from bertjax.training import loop as train
from bertjax.training import losses
from bertjax.training import optimizer as optimizer_lib
from bertjax.training import perf
from bertjax.training import sharding

MODEL_INPUTS = ('input_ids', 'input_mask', 'segment_ids')
TARGETS = {'classification': ('label',), 'regression': ('label',),
           'span': ('start_position', 'end_position'), 'tagging': ('label_ids', 'label_weights')}


# ---------------------------------------------------------------------------------------------
# Pure functions.


def _loss_fn(params, batch, rng, normalizers, *, model, deterministic, kind):
  """The task's summed loss divided by the whole batch's weight (exact under accumulation)."""
  outputs = model.apply({'params': params}, *(batch[k] for k in MODEL_INPUTS),
                        deterministic=deterministic, rngs={'dropout': rng})
  metrics = losses.finetuning(kind, outputs, batch)
  return metrics['loss'][0] / normalizers['loss'], metrics


def _normalizers(batch, *, kind):
  if kind == 'tagging':
    weight = jnp.sum(batch['label_weights'] * batch['example_weight'][:, None])
  else:
    weight = jnp.sum(batch['example_weight'])
  return {'loss': jnp.maximum(weight.astype(jnp.float32), 1e-8)}


def predict_step(params, batch, *, model, kind):
  """(outputs for every row, eval loss metrics) of one batch; padding rows weigh 0."""
  outputs = model.apply({'params': params}, *(batch[k] for k in MODEL_INPUTS),
                        deterministic=True)
  return outputs, losses.finetuning(kind, outputs, batch)


# ---------------------------------------------------------------------------------------------
# Set-up.


def resolve_model(config) -> tuple[ml_collections.ConfigDict, str]:
  """(model config, vocab file): the architecture from `init` unless a size was given."""
  model_cfg = ml_collections.ConfigDict(config.model.to_dict())
  vocab_file = config.data.vocab_file
  if config.init:
    arch = checkpoint.init_model_config(config.init)
    if config.model_from_init:
      model_cfg.update(arch)
      model_cfg.size = 'from-init'
    else:
      differ = {k: (arch[k], model_cfg[k]) for k in arch if arch[k] != model_cfg[k]}
      if differ:
        raise ValueError(
            f'init={config.init} does not fit config.model (size {model_cfg.size}): '
            + ', '.join(f'{k} {a} in the checkpoint vs {b}' for k, (a, b) in differ.items())
            + '. Leave size empty to take the checkpoint\'s shape.')
    vocab_file = vocab_file or checkpoint.init_vocab_file(config.init) or ''
  if not vocab_file:
    if model_cfg.vocab_size != embedded.VOCAB_SIZE:
      raise ValueError(f'no vocab file: set config.data.vocab_file (model.vocab_size is '
                       f'{model_cfg.vocab_size}; the embedded corpus vocab has '
                       f'{embedded.VOCAB_SIZE} entries).')
    vocab_file = str(embedded.vocab_path())
  return model_cfg, vocab_file


def resolve_pooling(config) -> str:
  if config.pooling != 'auto':
    return config.pooling
  return checkpoint.init_pooling(config.init) or 'cls'


def _resolved(config, model_cfg, num_train_steps):
  """An unlocked copy with the run-time fields filled in (steps, warmup, the model)."""
  cfg = ml_collections.ConfigDict(config.to_dict())
  cfg.model = model_cfg
  cfg.num_train_steps = num_train_steps
  cfg.pooling = resolve_pooling(config)
  cfg.optimizer.total_steps = num_train_steps
  cfg.optimizer.warmup_steps = int(config.optimizer.warmup_proportion * num_train_steps)
  return cfg


def num_steps(config, num_train_features: int) -> int:
  if config.num_train_steps:
    return config.num_train_steps
  return max(1, math.ceil(config.num_epochs * num_train_features / config.global_batch_size))


@functools.lru_cache(maxsize=2)  # The current epoch and the next: one draw per epoch.
def _epoch_permutation(seed: int, epoch: int, num_rows: int) -> np.ndarray:
  return np.random.default_rng([seed, epoch]).permutation(num_rows)


def batch_indices(step: int, batch_size: int, num_rows: int, seed: int) -> np.ndarray:
  """Rows of the global batch of `step`: a slice of the per-epoch permutations' concatenation."""
  positions = np.arange(step * batch_size, (step + 1) * batch_size)
  epochs = positions // num_rows
  out = np.empty(batch_size, np.int64)
  for epoch in np.unique(epochs):
    where = epochs == epoch
    out[where] = _epoch_permutation(seed, int(epoch), num_rows)[positions[where] % num_rows]
  return out


def _host_rows(global_rows: np.ndarray) -> np.ndarray:
  """This host's contiguous share of a global batch's rows."""
  per_host = len(global_rows) // jax.process_count()
  start = jax.process_index() * per_host
  return global_rows[start:start + per_host]


def _device_batch(features: dict, rows: np.ndarray, keys, weights: np.ndarray, mesh):
  host = {k: features[k][rows] for k in keys}
  host['example_weight'] = weights.astype(np.float32)
  return input_pipeline.make_global_batch(host, mesh, sharding.batch_axes())


def predict(predict_fn, params, features: dict, kind: str, batch_size: int, mesh):
  """(outputs for every feature row, in order, as host numpy; summed eval loss metrics)."""
  n = len(features['input_ids'])
  padded = -(-n // batch_size) * batch_size
  keys = MODEL_INPUTS + TARGETS[kind]
  outputs, metrics = [], []
  for start in range(0, padded, batch_size):
    global_rows = np.arange(start, start + batch_size)
    real = global_rows < n
    rows = _host_rows(np.where(real, global_rows, 0))
    batch = _device_batch(features, rows, keys, _host_rows(real), mesh)
    out, m = predict_fn(params, batch)
    outputs.append(np.asarray(jax.device_get(out)))  # Replicated: every host holds all rows.
    metrics.append(m)
  return np.concatenate(outputs)[:n], train.sum_metrics(metrics)


def _log_skips(split, skipped):
  if skipped:
    logging.warning('%s: skipped %d examples (%s)', split, sum(skipped.values()),
                    ', '.join(f'{k}: {v}' for k, v in sorted(skipped.items())))


# ---------------------------------------------------------------------------------------------
# The loop.


def train_and_evaluate(config, workdir: str) -> dict:
  """Fine-tunes per `config` in `workdir`; returns the final eval metrics (first eval split's
  names bare, others prefixed with their split) plus the skip counts."""
  mesh = sharding.make_mesh(config.mesh)
  logging.info('mesh %s over %d devices (%d hosts)', dict(mesh.shape), mesh.size,
               jax.process_count())
  task = tasks_lib.get_task(config.task, config.data, seed=config.seed)
  model_cfg, vocab_file = resolve_model(config)
  tok = tokenizer_lib.FullTokenizer(vocab_file, do_lower_case=config.data.do_lower_case)

  examples, skipped = task.read('train')
  _log_skips('train', skipped)
  train_features, _ = task.featurize(examples, tok, is_training=True)
  num_train = len(train_features['input_ids'])
  if num_train == 0:
    raise ValueError(f'task {task.name}: no training features (check config.data.data_dir).')
  eval_sets = {}
  for split in task.eval_splits:
    eval_examples, eval_skipped = task.read(split)
    _log_skips(split, eval_skipped)
    features, meta = task.featurize(eval_examples, tok, is_training=False)
    eval_sets[split] = (eval_examples, features, meta)
    skipped.update({f'{split}/{k}': v for k, v in eval_skipped.items()})

  total_steps = num_steps(config, num_train)
  cfg = _resolved(config, model_cfg, total_steps)
  train.check_config(cfg, mesh, len(tokenizer_lib.load_vocab(vocab_file)))
  steps_per_epoch = max(1, num_train // cfg.global_batch_size)
  logging.info('task %s (%s, pooling %s): %d train features, %s; %d steps (%.1f epochs of %d '
               'steps)', task.name, task.kind, cfg.pooling, num_train,
               ', '.join(f'{s} {len(f["input_ids"])}' for s, (_, f, _) in eval_sets.items()),
               total_steps, total_steps / steps_per_epoch, steps_per_epoch)

  model = heads.task_model(model_cfg, task.kind, len(task.labels), cfg.pooling)
  schedule = optimizer_lib.learning_rate_schedule(cfg.optimizer)
  tx = optimizer_lib.make(cfg.optimizer)
  dummy = {k: np.zeros((1, cfg.data.max_seq_length), np.int32) for k in MODEL_INPUTS}
  state, state_shardings = train.create_train_state(cfg, model, tx, mesh, dummy)

  mngr = checkpoint.manager(workdir, cfg, best_metric=task.main_metric)
  restored = checkpoint.restore_latest(mngr, train.abstract_state(state, state_shardings))
  if restored is not None:
    state, _ = restored
  elif config.init:
    params, report = checkpoint.load_encoder(config.init, state.params, state_shardings.params,
                                             model_cfg.num_layers)
    state = state.replace(params=params)
    logging.info('init %s: loaded %d encoder tensors; fresh (task head): %s; unused: %s',
                 config.init, len(report['loaded']), report['fresh'], report['unused'] or 'none')
  else:
    logging.warning('config.init is empty: fine-tuning a randomly initialised encoder')
  start_step = int(state.step)

  writer = metric_writers.create_default_writer(workdir, just_logging=jax.process_index() > 0)
  if jax.process_index() == 0:
    name = 'config.json' if restored is None else f'config-resumed-at-{start_step}.json'
    checkpoint.write_json(f'{workdir}/{name}', json.loads(cfg.to_json()))

  batch_shardings = sharding.batch_sharding(mesh)
  step_fn = jax.jit(
      functools.partial(train.train_step, model=model, tx=tx, schedule=schedule,
                        grad_accum_steps=cfg.grad_accum_steps,
                        loss_fn=functools.partial(_loss_fn, kind=task.kind),
                        normalizers_fn=functools.partial(_normalizers, kind=task.kind)),
      in_shardings=(state_shardings, batch_shardings), out_shardings=(state_shardings, None),
      donate_argnums=0)
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  predict_fn = jax.jit(functools.partial(predict_step, model=model, kind=task.kind),
                       in_shardings=(state_shardings.params, batch_shardings),
                       out_shardings=(replicated, replicated))

  def run_eval(step):
    results = {}
    for i, (split, (eval_examples, features, meta)) in enumerate(eval_sets.items()):
      outputs, summed = predict(predict_fn, state.params, features, task.kind,
                                cfg.eval_batch_size, mesh)
      metrics = {'loss': train.means(summed)['loss']}
      metrics.update(task.evaluate(outputs, features, meta, eval_examples))
      if jax.process_index() == 0:
        out_dir = pathlib.Path(workdir) / 'predictions' / f'step_{step}'
        task.write_predictions(outputs, features, meta, eval_examples, split, out_dir)
      writer.write_scalars(step, {f'{split}/{k}': v for k, v in metrics.items()})
      logging.info('eval %s at step %d: %s', split, step,
                   ', '.join(f'{k} {v:.4f}' for k, v in sorted(metrics.items())))
      results.update({k if i == 0 else f'{split}/{k}': v for k, v in metrics.items()})
    return results

  keys = MODEL_INPUTS + TARGETS[task.kind]
  eval_every = cfg.eval_every_steps or steps_per_epoch
  flops_per_seq = perf.flops_per_sequence(model_cfg, cfg.data.max_seq_length, 0)
  peak = perf.peak_flops_per_device(cfg.peak_tflops)
  report_progress = periodic_actions.ReportProgress(
      num_train_steps=total_steps, writer=writer, every_steps=cfg.log_every_steps)
  preemption = train._Preemption(mngr)  # pylint: disable=protected-access
  eval_metrics, pending = {}, []
  timer = (time.perf_counter(), start_step)
  ones = np.ones(cfg.global_batch_size // jax.process_count(), np.float32)
  try:
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
      for step in range(start_step, total_steps):
        rows = _host_rows(batch_indices(step, cfg.global_batch_size, num_train, cfg.seed))
        state, metrics = step_fn(state, _device_batch(train_features, rows, keys, ones, mesh))
        pending.append(metrics)
        done = step + 1
        report_progress(done)
        preempted = preemption.reached(done)
        is_last = done == total_steps
        do_eval = bool(eval_sets) and (is_last or done % eval_every == 0)
        will_save = is_last or preempted or do_eval or mngr.should_save(done)
        if done % cfg.log_every_steps == 0 or will_save:
          summed = train.sum_metrics(pending)
          pending = []
          if summed['nonfinite'][0]:
            raise FloatingPointError(f'loss or gradients became NaN/Inf before step {done}: '
                                     'lower the learning rate.')
          now = time.perf_counter()
          rate = (done - timer[1]) / max(now - timer[0], 1e-9)
          timer = (now, done)
          scalars = {f'train/{k}': v for k, v in train.means(summed).items()
                     if k != 'nonfinite'}
          scalars['train/sequences_per_sec'] = rate * cfg.global_batch_size
          utilisation = perf.mfu(rate * cfg.global_batch_size, flops_per_seq,
                                 jax.device_count(), peak)
          if utilisation is not None:
            scalars['train/mfu'] = utilisation
          writer.write_scalars(done, scalars)
          logging.info('step %d/%d (epoch %.2f): loss %.4f, lr %.2e | %.2f steps/s, %.1f seq/s'
                       '%s, ETA %s', done, total_steps, done / steps_per_epoch,
                       scalars['train/loss'], scalars['train/learning_rate'], rate,
                       rate * cfg.global_batch_size,
                       f', MFU {utilisation:.1%}' if utilisation is not None else '',
                       train._format_duration((total_steps - done) / max(rate, 1e-9)))  # pylint: disable=protected-access
        if do_eval:
          with report_progress.timed('eval'):
            eval_metrics = run_eval(done)
          timer = (time.perf_counter(), done)
        if will_save:
          meta = {'step': done, 'examples_consumed': done * cfg.global_batch_size,
                  'mesh': dict(mesh.shape), 'model': json.loads(model_cfg.to_json())}
          best = ({task.main_metric: eval_metrics[task.main_metric]}
                  if do_eval and task.main_metric in eval_metrics else None)
          checkpoint.save(mngr, done, state, meta, force=True, metrics=best)
        if preempted and not is_last:
          logging.warning('preempted: saved step %d, exiting', done)
          break
      if start_step == total_steps and eval_sets:  # Resumed a finished run: evaluate again.
        eval_metrics = run_eval(total_steps)
  finally:
    mngr.wait_until_finished()
    preemption.close()
    writer.flush()
  if jax.process_index() == 0 and eval_metrics:
    checkpoint.write_json(f'{workdir}/eval_results.json', eval_metrics)
  eval_metrics['skipped'] = sum(skipped.values())
  return eval_metrics


def run_predict(config, workdir: str, splits=None) -> list:
  """Writes predictions of the workdir's latest checkpoint (mode=eval: eval splits with metrics;
  mode=predict: the test split or data.predict_file). Returns the written paths."""
  mesh = sharding.make_mesh(config.mesh)
  task = tasks_lib.get_task(config.task, config.data, seed=config.seed)
  model_cfg, vocab_file = resolve_model(config)
  tok = tokenizer_lib.FullTokenizer(vocab_file, do_lower_case=config.data.do_lower_case)
  cfg = _resolved(config, model_cfg, 1)
  train.check_config(cfg, mesh, len(tokenizer_lib.load_vocab(vocab_file)))
  model = heads.task_model(model_cfg, task.kind, len(task.labels), cfg.pooling)
  tx = optimizer_lib.make(cfg.optimizer)
  dummy = {k: np.zeros((1, cfg.data.max_seq_length), np.int32) for k in MODEL_INPUTS}
  state, state_shardings = train.train_state_shapes(cfg, model, tx, mesh, dummy)
  mngr = checkpoint.manager(workdir, cfg)
  restored = checkpoint.restore_latest(mngr, state)
  if restored is None:
    raise FileNotFoundError(f'{workdir} holds no checkpoint: fine-tune first (mode=train_eval) '
                            'with this --workdir.')
  state, meta = restored
  batch_shardings = sharding.batch_sharding(mesh)
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  predict_fn = jax.jit(functools.partial(predict_step, model=model, kind=task.kind),
                       in_shardings=(state_shardings.params, batch_shardings),
                       out_shardings=(replicated, replicated))
  if splits is None:
    splits = task.eval_splits if config.mode == 'eval' else task.test_splits
  paths = []
  out_dir = pathlib.Path(workdir) / 'predictions' / f'{config.mode}_step_{meta["step"]}'
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    for split in splits:
      examples, skipped = task.read(split)
      _log_skips(split, skipped)
      features, feature_meta = task.featurize(examples, tok, is_training=False)
      outputs, _ = predict(predict_fn, state.params, features, task.kind,
                           cfg.eval_batch_size, mesh)
      if config.mode == 'eval':
        metrics = task.evaluate(outputs, features, feature_meta, examples)
        logging.info('eval %s: %s', split, ', '.join(f'{k} {v:.4f}' for k, v in
                                                     sorted(metrics.items())))
        checkpoint.write_json(out_dir / f'{split}_results.json', metrics)
      if jax.process_index() == 0:
        paths.append(task.write_predictions(outputs, features, feature_meta, examples, split,
                                            out_dir))
        logging.info('predictions for %s (%d examples) written to %s', split, len(examples),
                     paths[-1])
  mngr.close()
  return paths


def run(config, workdir: str):
  """bertjax.main's entry for job=finetune."""
  if config.mode == 'train_eval':
    return train_and_evaluate(config, workdir)
  if config.mode in ('eval', 'predict'):
    return run_predict(config, workdir)
  raise ValueError(f'config.mode={config.mode!r} is unknown; valid: train_eval, eval, predict.')



