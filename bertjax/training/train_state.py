"""The train state, the one train step any objective runs, and the state's sharded creation.

An Objective is what a job trains: the model, its loss and what the loss is normalised by.
Pre-training (bertjax/pretrain.py) and fine-tuning (bertjax/finetune/kinds.py) each build one;
train_step takes any. It is jitted once with explicit shardings and the state donated.
Gradient accumulation runs inside the step (lax.scan over micro-batches) with the loss
normalised by the whole batch's weights, so k micro-batches give the update of one k-times
larger batch. Metrics are (sum, weight) pairs kept on device.
"""

import dataclasses
import functools
import math
from typing import Any
from typing import Callable

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bertjax import console
from bertjax.model import attention
from bertjax.model import cudnn_dropout
from bertjax.model import encoder_config
from bertjax.model import layer_stack
from bertjax.model import platform_defaults
from bertjax.training import checkpoint
from bertjax.training import perf
from bertjax.training import sharding


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # Optimizer updates done.
  params: Any
  opt_state: Any
  rng: jax.Array  # Raw uint32[2] key; dropout keys are fold_in(rng, step).


@dataclasses.dataclass(frozen=True)
class Objective:
  """What a job trains.

  loss(model, params, batch, rng, normalizers, *, deterministic) -> (loss, metrics): the loss
    summed over the batch and divided by `normalizers` (the whole batch's weights, so that
    micro-batches add up exactly); metrics as (sum, weight) pairs.
  normalizers(batch) -> dict: what each summed loss is divided by.
  init_inputs: zero model inputs (keyword arguments) to initialise and trace the model with.
  """

  model: nn.Module
  loss: Callable[..., tuple[jax.Array, dict]]
  normalizers: Callable[[dict], dict]
  init_inputs: dict


def _warn_of_dead_rows(config, entries: int):
  """A pre-training model's vocab padded far past its vocab (a 1000-piece SentencePiece model
  on the default 8192 rows: vocab= left out): the rows are never targets, yet they share the
  MLM softmax and add parameters. Padding to a multiple of 128 (or 1024) stays under 10%."""
  rows = config.model.vocab_size
  if config.get('job') != 'pretrain' or config.get('init_from') or rows - entries <= entries // 10:
    return
  logging.warning(
      'model.vocab_size=%d is %d rows past the vocab\'s %d entries: never targets, they share the '
      'MLM softmax (the loss starts near ln %d = %.2f, not ln %d = %.2f) and add %d parameters; '
      'pass vocab=%d in the config\'s argument string (or --config.model.vocab_size=%d, a '
      'multiple of 128)', rows, rows - entries, entries, rows, math.log(rows), entries,
      math.log(entries), (rows - entries) * (config.model.hidden_size + 1), entries,  # Bias too.
      -(-entries // 128) * 128)


def check_config(config, mesh, vocab_entries: int | None, *, training: bool = True):
  """Raises console.Refused before anything is compiled when the config cannot run on this mesh
  and data."""
  try:
    _check_config(config, mesh, vocab_entries, training=training)
  except ValueError as e:
    raise console.Refused(str(e)) from None


def _check_config(config, mesh, vocab_entries: int | None, *, training: bool):
  mcfg = config.model
  encoder_config.check_config(mcfg)
  # A kernel named for another platform (attention_impl=cudnn on a CPU) here, before pre-training
  # makes its corpus; 'auto' settles in the loop, where a resumed checkpoint's layout is known.
  platform_defaults.resolve(mcfg, platform_defaults.platform_of(mesh), training=training)
  rules = sharding.parse_rules(config.mesh.rules)
  dp = sharding.data_parallel_size(mesh, rules)
  k = config.grad_accum_steps
  if k < 1 or config.global_batch_size % k:
    raise ValueError(f'global_batch_size {config.global_batch_size} is not divisible by '
                     f'grad_accum_steps {k}.')
  # The whole batch first, then the micro-batch with its own message: checking only the
  # micro-batch reported it as "global batch size". Each names the setting it checks.
  sharding.check_divisible(config.global_batch_size, mesh, rules)
  if config.global_batch_size % (dp * k):
    raise ValueError(f'the micro-batch {config.global_batch_size // k} (global_batch_size / '
                     f'grad_accum_steps) is not divisible by the data-parallel size {dp}: '
                     'use fewer grad_accum_steps or a larger global_batch_size.')
  sharding.check_divisible(config.global_batch_size // k, mesh, rules,  # Its host split.
                           'the micro-batch (global_batch_size / grad_accum_steps)')
  sharding.check_divisible(config.eval_batch_size, mesh, rules, 'eval_batch_size')
  if config.data.max_seq_length > mcfg.max_position_embeddings:
    raise ValueError(f'data.max_seq_length {config.data.max_seq_length} exceeds the position '
                     f'table (model.max_position_embeddings={mcfg.max_position_embeddings}): '
                     f'pass seq={mcfg.max_position_embeddings} or less in the argument string '
                     '(or --config.data.max_seq_length).')
  if vocab_entries is not None and vocab_entries != mcfg.vocab_size:
    if vocab_entries > mcfg.vocab_size or mcfg.vocab_size % 128:
      raise ValueError(
          f'model.vocab_size={mcfg.vocab_size} but the vocab file has {vocab_entries} entries: '
          f'set --config.model.vocab_size={vocab_entries} (or pad it up to a multiple of 128, '
          'e.g. for tensor parallelism: padded rows are never targets).')
    logging.info('vocab of %d entries padded to %d rows', vocab_entries, mcfg.vocab_size)
    _warn_of_dead_rows(config, vocab_entries)
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


def _microbatches(batch, k):
  """[B, ...] -> [k, B/k, ...] with rows j, j+k, ... in micro-batch j, so that each device keeps
  its own rows (B/k per micro-batch spread over the whole mesh, no data movement)."""
  return jax.tree.map(lambda x: jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1),
                      batch)


def train_step(state: TrainState, batch, *, objective: Objective, tx, schedule,
               grad_accum_steps: int):
  """One optimizer update on a global batch; returns (state, metrics as (sum, weight))."""
  rng = jax.random.fold_in(state.rng, state.step)
  normalizers = objective.normalizers(batch)
  grad_fn = jax.value_and_grad(
      functools.partial(objective.loss, objective.model, deterministic=False), has_aux=True)
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
  with jax.named_scope('optimizer'):  # Names its ops in profiles (bench/step_profile.py).
    grad_norm = optax.global_norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
  # The new weights too: an update past what float32 holds gives finite loss and gradients at
  # this step, and a NaN eval and a saved NaN checkpoint after it.
  finite = jax.tree.reduce(jnp.logical_and, jax.tree.map(lambda x: jnp.isfinite(x).all(), params),
                           jnp.isfinite(loss) & jnp.isfinite(grad_norm))
  nonfinite = 1.0 - finite.astype(jnp.float32)
  one = jnp.float32(1)
  metrics.update(loss=(loss, one), grad_norm=(grad_norm, one),
                 learning_rate=(schedule(state.step), one), nonfinite=(nonfinite, one))
  metrics.update(perf.real_tokens(batch))  # Padding counts as no work in the real-token rates.
  new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return new_state, metrics


def jit_train_step(config, objective: Objective, tx, schedule, state_shardings,
                   batch_shardings):
  """train_step jitted once with explicit shardings and the state donated; where cuDNN draws
  the attention dropout, compiled with its calls out of XLA's command buffers
  (model/cudnn_dropout.py)."""
  return jax.jit(
      functools.partial(train_step, objective=objective, tx=tx, schedule=schedule,
                        grad_accum_steps=config.grad_accum_steps),
      in_shardings=(state_shardings, batch_shardings), out_shardings=(state_shardings, None),
      donate_argnums=0, compiler_options=cudnn_dropout.compiler_options(config.model))


def _scanned(model_config) -> bool:
  """Whether the model stacks its layers (an 'auto' choice resolved as the encoder resolves it
  for a model built outside a run)."""
  if platform_defaults.is_auto(model_config.scan_layers):
    model_config = platform_defaults.resolve(model_config, attention.target_platform())[0]
  return bool(model_config.scan_layers)


def drawn_params(model, key, inputs):
  """The model's initial parameters, boxed with their logical axis names.

  Unrolled layers are drawn as the scanned layout draws them (the same model with
  scan_layers=True), then taken apart: one seed gives the same weights in either layout, which
  the platforms' defaults choose differently (model/platform_defaults.py), and the init compiles
  one layer's draws instead of each layer's (BERT-Base on 2 CPU cores: 5.2 s -> 3.1 s)."""
  config = model.config.copy_and_resolve_references()
  with config.ignore_type():  # An 'auto' field resolved to False holds a str type.
    config.scan_layers = True
    if 'scan_unroll' in config:  # The same draws, one layer's compiled.
      config.scan_unroll = 1
  drawn = model.clone(config=config).init(key, **inputs, deterministic=True)['params']
  if _scanned(model.config):
    return drawn
  return flax.traverse_util.unflatten_dict(
      layer_stack.unstack_layers(flax.traverse_util.flatten_dict(drawn, sep='/')), sep='/')


def _state_init(objective: Objective, tx):
  """init(key) -> the TrainState with its parameters boxed with their logical axis names."""

  def init(key):
    params = drawn_params(objective.model, jax.random.fold_in(key, 0), objective.init_inputs)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                      rng=jax.random.fold_in(key, 1))

  return init


def train_state_shapes(config, objective: Objective, tx, mesh, rules=sharding.RULES):
  """(abstract state, shardings) of the TrainState, traced only: no parameter is materialised."""
  boxed = jax.eval_shape(_state_init(objective, tx), jax.random.PRNGKey(config.seed))
  shardings = sharding.logical_to_sharding(boxed, mesh, rules)
  return checkpoint.abstract_state(nn.unbox(boxed), shardings), shardings


def create_train_state(config, objective: Objective, tx, mesh, rules=sharding.RULES,
                       loaded=None):
  """(state, shardings): initialised directly into its shardings; no unsharded copy exists.

  `loaded`: parameters already placed (init_from), a params tree whose other leaves are
  abstract (ShapeDtypeStructs). They go into the state as they are, and the init draws only the
  rest: XLA drops the random draws of what they replace, so a fine-tuning's init compiles and
  runs little more than its task head. The optimizer state is built from the final parameters.

  Called outside the logical-rules context: flax's DenseGeneral constrains its flat kernel at
  init with the 3-axis names otherwise. out_shardings alone places the parameters.
  """
  _, shardings = train_state_shapes(config, objective, tx, mesh, rules)
  init = _state_init(objective, tx)
  # Every leaf that is not abstract was loaded (host arrays too: never silently redrawn), and
  # goes in its sharding (a no-op for placed arrays), where the init's output reuses it.
  flat_shardings = checkpoint.flatten(shardings.params)
  given = {k: jax.device_put(v, flat_shardings[k])
           for k, v in checkpoint.flatten(loaded or {}).items()
           if not isinstance(v, jax.ShapeDtypeStruct)}

  def make(key, given):
    state = nn.unbox(init(key))
    if not given:
      return state
    params = flax.traverse_util.unflatten_dict(checkpoint.flatten(state.params) | given, sep='/')
    return state.replace(params=params, opt_state=tx.init(params))

  state = jax.jit(make, out_shardings=shardings, donate_argnums=1)(
      jax.random.PRNGKey(config.seed), given)
  return state, shardings
