"""BERT pre-training: pure step functions and the one loop that reads top to bottom.

  mesh -> data -> model and optimizer -> sharded init (eval_shape, then jit with out_shardings)
  -> resume / init_from / fresh -> loop (train_step, log, eval, checkpoint) -> wait for saves.

train_step is jitted once with explicit shardings and the state donated. Gradient accumulation
runs inside the step (lax.scan over micro-batches) with the loss normalised by the whole
batch's weights, so k micro-batches give the update of one k-times larger batch. Metrics are
(sum, weight) pairs kept on device and pulled to the host only at log steps.
"""

import functools
import json
import signal
import time
from typing import Any

from absl import logging
from clu import metric_writers
from clu import periodic_actions
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bertjax.input import input_pipeline
from bertjax.input import masking_tf
from bertjax.model import encoder
from bertjax.model import heads
from bertjax.pretraining_data import embedded
from bertjax.text import tokenizer
from bertjax.training import checkpoint
from bertjax.training import losses
from bertjax.training import optimizer as optimizer_lib
from bertjax.training import perf
from bertjax.training import sharding


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # Optimizer updates done.
  params: Any
  opt_state: Any
  rng: jax.Array  # Raw uint32[2] key; dropout keys are fold_in(rng, step).


# ---------------------------------------------------------------------------------------------
# Pure functions.


def _loss_fn(params, batch, rng, normalizers, *, model, deterministic):
  """Sum-form losses divided by the whole batch's weights (exact under accumulation)."""
  mlm_logits_BxPxV, nsp_logits_Bx2 = model.apply(
      {'params': params}, batch['input_ids'], batch['input_mask'], batch['segment_ids'],
      batch['masked_lm_positions'], deterministic=deterministic, rngs={'dropout': rng})
  metrics = losses.masked_lm(mlm_logits_BxPxV, batch['masked_lm_ids'],
                             batch['masked_lm_weights'])
  loss = metrics['mlm_loss'][0] / normalizers['mlm']
  if 'next_sentence_labels' in batch:
    metrics.update(losses.next_sentence(nsp_logits_Bx2, batch['next_sentence_labels'],
                                        batch.get('example_weight')))
    loss = loss + metrics['nsp_loss'][0] / normalizers['nsp']
  return loss, metrics


def _microbatches(batch, k):
  """[B, ...] -> [k, B/k, ...] with rows j, j+k, ... in micro-batch j, so that each device keeps
  its own rows (B/k per micro-batch spread over the whole mesh, no data movement)."""
  return jax.tree.map(lambda x: jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1),
                      batch)


def _normalizers(batch):
  """What each pre-training loss is divided by: the whole (not micro-) batch's weights."""
  return {'mlm': jnp.maximum(jnp.sum(batch['masked_lm_weights']), 1e-8),
          'nsp': jnp.float32(batch['input_ids'].shape[0])}


def train_step(state: TrainState, batch, *, model, tx, schedule, grad_accum_steps: int,
               loss_fn=_loss_fn, normalizers_fn=_normalizers):
  """One optimizer update on a global batch; returns (state, metrics as (sum, weight)).

  `loss_fn(params, batch, rng, normalizers, *, model, deterministic) -> (loss, metrics)` and
  `normalizers_fn(batch)` default to pre-training's; fine-tuning passes its own.
  """
  rng = jax.random.fold_in(state.rng, state.step)
  normalizers = normalizers_fn(batch)
  grad_fn = jax.value_and_grad(functools.partial(loss_fn, model=model, deterministic=False),
                               has_aux=True)
  if grad_accum_steps == 1:
    (loss, metrics), grads = grad_fn(state.params, batch, rng, normalizers)
  else:
    def accumulate(carry, xs):
      index, micro = xs
      (loss, metrics), grads = grad_fn(state.params, micro, jax.random.fold_in(rng, index),
                                       normalizers)
      return jax.tree.map(jnp.add, carry, (loss, metrics, grads)), None

    micro = _microbatches(batch, grad_accum_steps)
    first = jax.tree.map(lambda x: x[0], micro)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(
        lambda: (lambda out: (out[0][0], out[0][1], out[1]))(
            grad_fn(state.params, first, rng, normalizers))))
    (loss, metrics, grads), _ = jax.lax.scan(
        accumulate, zeros, (jnp.arange(grad_accum_steps), micro))
  grad_norm = optax.global_norm(grads)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  nonfinite = 1.0 - (jnp.isfinite(loss) & jnp.isfinite(grad_norm)).astype(jnp.float32)
  one = jnp.float32(1)
  metrics.update(loss=(loss, one), grad_norm=(grad_norm, one),
                 learning_rate=(schedule(state.step), one), nonfinite=(nonfinite, one))
  new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return new_state, metrics


def eval_step(params, batch, *, model):
  """Eval metrics of one batch as (sum, weight); padding examples weigh 0."""
  mlm_logits_BxPxV, nsp_logits_Bx2 = model.apply(
      {'params': params}, batch['input_ids'], batch['input_mask'], batch['segment_ids'],
      batch['masked_lm_positions'], deterministic=True)
  _, metrics = losses.pretraining(mlm_logits_BxPxV, nsp_logits_Bx2, batch)
  return metrics


# ---------------------------------------------------------------------------------------------
# Set-up.


def check_config(config, mesh, vocab_entries: int | None):
  """Raises before anything is compiled when the config cannot run on this mesh and data."""
  mcfg = config.model
  encoder.check_config(mcfg)
  dp = sharding.data_parallel_size(mesh)
  k = config.grad_accum_steps
  if k < 1 or config.global_batch_size % k:
    raise ValueError(f'global_batch_size {config.global_batch_size} is not divisible by '
                     f'grad_accum_steps {k}.')
  # The whole batch first, then the micro-batch with its own message: checking only the
  # micro-batch reported it as "global batch size".
  sharding.check_divisible(config.global_batch_size, mesh)
  if config.global_batch_size % (dp * k):
    raise ValueError(f'the micro-batch {config.global_batch_size // k} (global_batch_size / '
                     f'grad_accum_steps) is not divisible by the data-parallel size {dp}: '
                     'use fewer grad_accum_steps or a larger global_batch_size.')
  sharding.check_divisible(config.global_batch_size // k, mesh)  # Its split over hosts.
  sharding.check_divisible(config.eval_batch_size, mesh)
  if config.data.max_seq_length > mcfg.max_position_embeddings:
    raise ValueError(f'data.max_seq_length {config.data.max_seq_length} exceeds the position '
                     f'table (model.max_position_embeddings={mcfg.max_position_embeddings}).')
  if vocab_entries is not None and vocab_entries != mcfg.vocab_size:
    if vocab_entries > mcfg.vocab_size or mcfg.vocab_size % 128:
      raise ValueError(
          f'model.vocab_size={mcfg.vocab_size} but the vocab file has {vocab_entries} entries: '
          f'set --config.model.vocab_size={vocab_entries} (or pad it up to a multiple of 128, '
          'e.g. for tensor parallelism: padded rows are never targets).')
    logging.info('vocab of %d entries padded to %d rows', vocab_entries, mcfg.vocab_size)
  tensor, fsdp = mesh.shape['tensor'], mesh.shape['fsdp']
  for name in ('num_heads', 'mlp_dim', 'vocab_size'):
    if mcfg[name] % tensor:
      raise ValueError(f'model.{name}={mcfg[name]} is not divisible by mesh.tensor={tensor}: '
                       'choose a tensor size that divides it (pad vocab_size to a multiple of '
                       '128 if it is the vocab).')
  if mcfg.hidden_size % fsdp:
    raise ValueError(f'model.hidden_size={mcfg.hidden_size} is not divisible by '
                     f'mesh.fsdp={fsdp}.')
  if config.num_train_steps < 1:
    raise ValueError(f'num_train_steps={config.num_train_steps}: need at least 1.')


def data_files(config, workdir) -> tuple[str, str, str]:
  """(train pattern, eval pattern, vocab file); the embedded corpus's are made on first use."""
  data = config.data
  if data.train_files:
    return data.train_files, data.eval_files, data.vocab_file
  if data.eval_files or data.vocab_file:
    raise ValueError('data.eval_files / data.vocab_file are set but data.train_files is empty '
                     '(= the embedded corpus, which brings its own): set train_files too.')
  train, eval_ = embedded.pretraining_files(
      f'{workdir}/data', max_seq_length=data.max_seq_length,
      max_predictions_per_seq=data.max_predictions_per_seq, dupe_factor=data.dupe_factor,
      static_masking=not data.dynamic_masking)
  return train, eval_, str(embedded.vocab_path())


def masking_config(config, vocab_file):
  """The dynamic-masking settings (None for static masks read from the files)."""
  if not config.data.dynamic_masking:
    return None
  vocab = tokenizer.load_vocab(vocab_file)
  return masking_tf.MaskingConfig(
      vocab_size=len(vocab), mask_id=vocab['[MASK]'], cls_id=vocab['[CLS]'],
      sep_id=vocab['[SEP]'], pad_id=vocab.get('[PAD]', 0),
      masked_lm_prob=config.data.masked_lm_prob)


def _state_init(config, model, tx, dummy=None):
  """init(key) -> the TrainState with its parameters boxed with their logical axis names.

  `dummy`: the model's keyword inputs for tracing (default: a pre-training batch).
  """
  if dummy is None:
    dummy = heads.dummy_batch(1, config.data.max_seq_length,
                              config.data.max_predictions_per_seq)

  def init(key):
    variables = model.init(jax.random.fold_in(key, 0), **dummy, deterministic=True)
    params = variables['params']
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                      rng=jax.random.fold_in(key, 1))

  return init


def train_state_shapes(config, model, tx, mesh, dummy=None):
  """(abstract state, shardings) of the TrainState, traced only: no parameter is materialised."""
  boxed = jax.eval_shape(_state_init(config, model, tx, dummy), jax.random.PRNGKey(config.seed))
  shardings = sharding.logical_to_sharding(boxed, mesh)
  return abstract_state(nn.unbox(boxed), shardings), shardings


def create_train_state(config, model, tx, mesh, dummy=None):
  """(state, shardings): initialised directly into its shardings; no unsharded copy exists."""
  _, shardings = train_state_shapes(config, model, tx, mesh, dummy)
  init = _state_init(config, model, tx, dummy)
  state = jax.jit(lambda k: nn.unbox(init(k)), out_shardings=shardings)(
      jax.random.PRNGKey(config.seed))
  return state, shardings


def jit_train_step(config, model, tx, schedule, state_shardings, batch_shardings):
  """train_step jitted once with explicit shardings and the state donated."""
  return jax.jit(
      functools.partial(train_step, model=model, tx=tx, schedule=schedule,
                        grad_accum_steps=config.grad_accum_steps),
      in_shardings=(state_shardings, batch_shardings), out_shardings=(state_shardings, None),
      donate_argnums=0)


def abstract_state(state, shardings):
  """ShapeDtypeStructs with shardings: what a checkpoint is restored into."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      state, shardings)


def sum_metrics(metrics_list) -> dict:
  """Host-side sums of a list of (sum, weight) metric dicts."""
  host = jax.device_get(metrics_list)
  return {k: (float(sum(m[k][0] for m in host)), float(sum(m[k][1] for m in host)))
          for k in host[0]}


def means(summed: dict) -> dict:
  return {k: s / max(w, 1e-8) for k, (s, w) in summed.items()}


def evaluate(eval_fn, params, dataset, mesh, max_batches: int) -> dict:
  """Means over the eval set (every example once; max_batches >= 0 caps it)."""
  outputs = []
  for i, host_batch in enumerate(dataset.as_numpy_iterator()):
    if 0 <= max_batches <= i:
      break
    batch = input_pipeline.make_global_batch(host_batch, mesh, sharding.batch_axes())
    outputs.append(eval_fn(params, batch))
  return means(sum_metrics(outputs))


def unigram_baseline(dataset) -> float:
  """MLM accuracy of always predicting the eval set's most frequent target token."""
  counts = {}
  for batch in dataset.as_numpy_iterator():
    ids = batch['masked_lm_ids'][batch['masked_lm_weights'] > 0]
    for token, n in zip(*np.unique(ids, return_counts=True), strict=True):
      counts[int(token)] = counts.get(int(token), 0) + int(n)
  total = sum(counts.values())
  return max(counts.values()) / total if total else 0.0


class _Preemption:
  """SIGTERM (a preempted VM) asks for a save and a clean exit at the next step boundary.

  Multi-host, every host must stop at the same step: orbax's reached_preemption syncs that
  through jax.distributed's preemption service instead of a local signal handler.
  """

  def __init__(self, mngr):
    self._mngr = mngr
    self._requested = False
    self._previous = None
    if jax.process_count() == 1:
      self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    del frame
    logging.warning('signal %d: saving a checkpoint and exiting at the end of this step', signum)
    self._requested = True

  def reached(self, step: int) -> bool:
    if jax.process_count() > 1:
      return self._mngr.reached_preemption(step)
    return self._requested

  def close(self):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)


def _format_duration(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'


# ---------------------------------------------------------------------------------------------
# The loop.


def train_and_evaluate(config, workdir: str) -> dict:
  """Pre-trains per `config`, writing checkpoints and TensorBoard logs to `workdir`.

  Returns the last eval metrics (plus 'unigram_baseline') for tests and notebooks.
  """
  mesh = sharding.make_mesh(config.mesh)
  logging.info('mesh %s over %d devices (%d hosts)', dict(mesh.shape), mesh.size,
               jax.process_count())
  train_files, eval_files, vocab_file = data_files(config, workdir)
  vocab_entries = len(tokenizer.load_vocab(vocab_file)) if vocab_file else None
  check_config(config, mesh, vocab_entries)
  masking = masking_config(config, vocab_file) if config.data.dynamic_masking else None

  model = heads.BertForPreTraining(config.model)
  schedule = optimizer_lib.learning_rate_schedule(config.optimizer)
  tx = optimizer_lib.make(config.optimizer)
  # Outside the rules context: flax's DenseGeneral constrains its flat kernel at init with the
  # 3-axis names otherwise. out_shardings alone places the parameters.
  state, state_shardings = create_train_state(config, model, tx, mesh)
  logging.info('model: %s, %d parameters', config.model.size,
               encoder.param_count(state.params))

  mngr = checkpoint.manager(workdir, config)
  restored = checkpoint.restore_latest(mngr, abstract_state(state, state_shardings))
  if restored is not None:
    state, meta = restored
    if meta['examples_consumed'] != int(state.step) * config.global_batch_size:
      logging.warning('the checkpoint consumed %d examples but step x batch is %d: the global '
                      'batch size changed; data continues from example %d',
                      meta['examples_consumed'], int(state.step) * config.global_batch_size,
                      meta['examples_consumed'])
    examples_consumed = int(meta['examples_consumed'])
  else:
    examples_consumed = 0
    if config.checkpoint.init_from:
      params, _ = checkpoint.load_params(config.checkpoint.init_from, state.params,
                                         state_shardings.params)
      state = state.replace(params=params)
  start_step = int(state.step)

  # Written only now that the config is known to fit the workdir's checkpoints; a resumed run
  # keeps the first config.json and records its own next to it.
  writer = metric_writers.create_default_writer(workdir, just_logging=jax.process_index() > 0)
  if jax.process_index() == 0:
    writer.write_hparams({k: v for k, v in flax.traverse_util.flatten_dict(
        config.to_dict(), sep='.').items() if isinstance(v, (int, float, str, bool))})
    name = 'config.json' if restored is None else f'config-resumed-at-{start_step}.json'
    checkpoint.write_json(f'{workdir}/{name}', json.loads(config.to_json()))

  batch_size = config.global_batch_size
  train_ds = input_pipeline.pretrain_dataset(
      train_files, global_batch_size=batch_size, max_seq_length=config.data.max_seq_length,
      max_predictions_per_seq=config.data.max_predictions_per_seq, seed=config.seed,
      start_example=examples_consumed, masking=masking,
      num_lanes=config.data.num_lanes, shuffle_window=config.data.shuffle_window)
  make_eval_ds = None
  if eval_files:
    make_eval_ds = functools.partial(
        input_pipeline.eval_dataset, eval_files, global_batch_size=config.eval_batch_size,
        max_seq_length=config.data.max_seq_length,
        max_predictions_per_seq=config.data.max_predictions_per_seq, masking=masking,
        seed=config.seed)
  else:
    logging.warning('data.eval_files is empty: no eval')

  batch_shardings = sharding.batch_sharding(mesh)
  step_fn = jit_train_step(config, model, tx, schedule, state_shardings, batch_shardings)
  eval_fn = jax.jit(functools.partial(eval_step, model=model),
                    in_shardings=(state_shardings.params, batch_shardings))

  total_steps = config.num_train_steps
  flops_per_seq = perf.flops_per_sequence(config.model, config.data.max_seq_length,
                                          config.data.max_predictions_per_seq)
  peak = perf.peak_flops_per_device(config.peak_tflops)
  report_progress = periodic_actions.ReportProgress(
      num_train_steps=total_steps, writer=writer, every_steps=config.log_every_steps)
  preemption = _Preemption(mngr)
  baseline = None
  eval_metrics = {}
  pending = []  # Device metrics since the last host pull.
  checked_step = start_step  # Last step whose loss and grads were checked finite.
  timer = (time.perf_counter(), start_step)
  logging.info('training steps %d..%d, %d sequences of %d tokens per step', start_step,
               total_steps, batch_size, config.data.max_seq_length)
  train_iter = train_ds.as_numpy_iterator()
  try:
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
      for step in range(start_step, total_steps):
        with jax.profiler.StepTraceAnnotation('train', step_num=step):
          batch = input_pipeline.make_global_batch(next(train_iter), mesh, sharding.batch_axes())
          state, metrics = step_fn(state, batch)
        pending.append(metrics)
        done = step + 1
        report_progress(done)
        preempted = preemption.reached(done)
        is_last = done == total_steps
        will_save = is_last or preempted or mngr.should_save(done)
        do_eval = make_eval_ds is not None and (is_last or (
            config.eval_every_steps and done % config.eval_every_steps == 0))

        if done % config.log_every_steps == 0 or will_save or do_eval:
          summed = sum_metrics(pending)
          pending = []
          if summed['nonfinite'][0]:
            raise FloatingPointError(
                f'loss or gradients became NaN/Inf between steps {checked_step + 1} and {done} '
                f'(grad_norm {summed["grad_norm"][0]}); nothing after step {checked_step} was '
                'saved: lower the learning rate or resume with more warmup.')
          checked_step = done
          now = time.perf_counter()
          seconds, steps = now - timer[0], done - timer[1]
          timer = (now, done)
          scalars = {f'train/{k}': v for k, v in means(summed).items() if k != 'nonfinite'}
          steps_per_sec = steps / max(seconds, 1e-9)
          seq_per_sec = steps_per_sec * batch_size
          scalars |= {'train/sequences_per_sec': seq_per_sec,
                      'train/tokens_per_sec': seq_per_sec * config.data.max_seq_length}
          utilisation = perf.mfu(seq_per_sec, flops_per_seq, jax.device_count(), peak)
          if utilisation is not None:
            scalars['train/mfu'] = utilisation
          writer.write_scalars(done, scalars)
          logging.info(
              'step %d/%d: loss %.4f, mlm acc %.4f, nsp acc %.4f, lr %.2e, grad norm %.3f | '
              '%.2f steps/s, %.1f seq/s%s, ETA %s', done, total_steps, scalars['train/loss'],
              scalars['train/mlm_accuracy'], scalars.get('train/nsp_accuracy', float('nan')),
              scalars['train/learning_rate'], scalars['train/grad_norm'], steps_per_sec,
              seq_per_sec, f', MFU {utilisation:.1%}' if utilisation is not None else '',
              _format_duration((total_steps - done) / max(steps_per_sec, 1e-9)))

        if do_eval:
          with report_progress.timed('eval'):
            if baseline is None:
              baseline = unigram_baseline(make_eval_ds(process_index=0, process_count=1))
            eval_metrics = evaluate(eval_fn, state.params, make_eval_ds(), mesh,
                                    config.max_eval_batches)
          eval_metrics['unigram_baseline'] = baseline
          writer.write_scalars(done, {f'eval/{k}': v for k, v in eval_metrics.items()})
          logging.info('eval at step %d: %s', done, ', '.join(
              f'{k} {v:.4f}' for k, v in sorted(eval_metrics.items())))
          timer = (time.perf_counter(), done)  # Rates count training time only.

        if will_save:
          meta = {'step': done, 'examples_consumed': examples_consumed + (
              done - start_step) * batch_size, 'mesh': dict(mesh.shape),
                  'model': json.loads(config.model.to_json())}
          checkpoint.save(mngr, done, state, meta, force=is_last or preempted,
                          metrics={checkpoint.BEST_METRIC: eval_metrics[checkpoint.BEST_METRIC]}
                          if do_eval else None)
        if preempted and not is_last:
          logging.warning('preempted: saved step %d, exiting', done)
          break
  finally:
    mngr.wait_until_finished()
    preemption.close()
    writer.flush()
  return eval_metrics
