"""BERT's optimisers with optax: AdamW and LAMB, warmup + decay, clipping, per-param rules,
layer-wise learning-rate decay.

Per-parameter policy is an ordered list of (regex, value) rules matched against the parameter's
path ('bert/layers_0/attention/query/kernel'); the first match wins.
"""

import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bertjax import console

# BERT decays every weight matrix and embedding, never LayerNorm parameters or biases.
WEIGHT_DECAY_RULES = (
    (r'layer_norm/(scale|bias)$', 0.0),
    (r'bias$', 0.0),  # Dense biases and the MLM output_bias.
    (r'.*', 1.0),
)

# Layer-wise learning-rate decay (ELECTRA, Clark et al. 2020): a parameter's depth, counted from
# the input. With L layers, depth d gets the rate lr * decay**(L + 1 - d): the embeddings
# (depth 0) decay**(L + 1), layer i (depth i + 1) decay**(L - i), the rest (depth L + 1: the
# pooler, task heads, MLM/NSP heads) lr itself.
LAYER_DECAY_RULES = (
    (r'^bert/embeddings/', 'embeddings'),  # Word, position, token type, their LayerNorm.
    (r'^bert/layers_\d+/', 'layer'),  # Unrolled layers: the index is in the name.
    # nn.scan (model.scan_layers): one array per weight, layer i at index i of its leading axis.
    (r'^bert/layers/', 'stacked'),
    (r'.*', 'top'),
)


def param_paths(tree):
  """The same tree with each leaf replaced by its '/'-joined path."""
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(tree), sep='/')
  return flax.traverse_util.unflatten_dict({k: k for k in flat}, sep='/')


def match_rules(tree, rules):
  """A tree of rule values: for each leaf, the value of the first regex matching its path."""
  compiled = [(re.compile(pattern), value) for pattern, value in rules]

  def first_match(path):
    for pattern, value in compiled:
      if pattern.search(path):
        return value
    raise ValueError(f'no rule matches parameter {path!r}: end the rules with (".*", default).')
  return jax.tree.map(first_match, param_paths(tree))


def weight_decay_mask(params, rules=WEIGHT_DECAY_RULES):
  """True where weight decay applies (rule value > 0)."""
  return jax.tree.map(lambda v: v > 0, match_rules(params, rules))


def _layer_index(path: str) -> int:
  return int(re.search(r'layers_(\d+)/', path).group(1))


def layer_decay_factors(tree, decay: float, rules=LAYER_DECAY_RULES):
  """A tree of constants (numpy, float32) that each leaf's update is multiplied by: decay**(L +
  1 - depth) per LAYER_DECAY_RULES, with L read from the tree (the unrolled layers' count or the
  stacked layers' leading axis). A stacked leaf's factor is [L, 1, ...], one per layer."""
  paths = param_paths(tree)
  kinds = flax.traverse_util.flatten_dict(match_rules(tree, rules), sep='/')
  # Leaves as flatten_dict sees them: arrays, ShapeDtypeStructs or boxed (nn.Partitioned).
  shapes = {path: np.shape(getattr(leaf, 'value', leaf)) for path, leaf in
            flax.traverse_util.flatten_dict(flax.core.unfreeze(tree), sep='/').items()}
  depths = {path: _layer_index(path) + 1 for path, kind in kinds.items() if kind == 'layer'}
  stacked = {shapes[path][0] for path, kind in kinds.items() if kind == 'stacked'}
  if not depths and not stacked:
    raise ValueError('optimizer.layer_decay needs the encoder\'s layers (parameters under '
                     'bert/layers_<i>/ or bert/layers/), and this model has none: set '
                     '--config.optimizer.layer_decay=1.0.')
  num_layers = max([*depths.values(), *stacked])

  def factor(path):
    kind, shape = kinds[path], shapes[path]
    if kind == 'stacked':
      depth = np.arange(1, shape[0] + 1).reshape((-1,) + (1,) * (len(shape) - 1))
    elif kind == 'embeddings':
      depth = 0
    elif kind == 'layer':
      depth = depths[path]
    else:
      depth = num_layers + 1
    # float64 powers, rounded once: the factor a hand computation gets.
    return np.asarray(np.float64(decay) ** (num_layers + 1 - depth), np.float32)

  return jax.tree.map(factor, paths)


def layer_decay_line(config) -> str:
  """A run's start line for its layer-wise decay: the extremes of its factors."""
  decay, num_layers = config.optimizer.layer_decay, config.model.num_layers
  return (f'layer-wise LR decay {decay:g}: embeddings x{decay ** (num_layers + 1):.3g}, top '
          f'layer x{decay:.3g}, pooler and heads x1 ({num_layers} layers)')


def scale_by_layer_decay(inner: optax.GradientTransformation,
                         decay: float) -> optax.GradientTransformation:
  """`inner` with its updates then multiplied by layer_decay_factors, as a learning rate would.

  The factors are trace-time constants built from the updates' paths and shapes, not state:
  the optimizer state is inner's own, so a checkpoint resumes with the decay on or off, and
  sharded updates multiply by a broadcast constant.
  """

  def update(updates, state, params=None, **extra_args):
    updates, state = inner.update(updates, state, params, **extra_args)
    factors = layer_decay_factors(updates, decay)
    return jax.tree.map(lambda u, f: u * f.astype(u.dtype), updates, factors), state

  return optax.GradientTransformationExtraArgs(inner.init, update)


def _past_total_steps(o, steps: int) -> str:
  """What steps o.total_steps + 1 to `steps` of a run train at, read from its schedule (step n
  trains at the schedule's rate n - 1): end_learning_rate after the decay, or, with a warmup
  longer than total_steps, a rate still rising to the peak (then the decay's one step)."""
  schedule, first = learning_rate_schedule(o), o.total_steps + 1

  def rate(step):
    return float(schedule(step - 1))

  if o.warmup_steps <= o.total_steps:  # The decay is over: its end value from here on.
    return f'steps {first} to {steps} train at optimizer.end_learning_rate={rate(steps):g}'
  # The step that trains at the peak: with decay_from=step_0 the warmup's last, then the decay
  # (over by now) takes over.
  peak = o.warmup_steps + (o.decay_from != 'step_0')
  if steps <= peak:
    return (f'optimizer.warmup_steps={o.warmup_steps} outlasts it: steps {first} to {steps} still '
            f'warm up (the learning rate is {rate(steps):.3g} at step {steps}), not at '
            f'optimizer.end_learning_rate={o.end_learning_rate:g}')
  return (f'optimizer.warmup_steps={o.warmup_steps} outlasts it: steps {first} to {peak} still '
          f'warm up to {rate(peak):.3g}, then steps {peak + 1} to {steps} train at '
          f'optimizer.end_learning_rate={rate(steps):g}')


def resolve_total_steps(config):
  """`config` (a training config) with optimizer.total_steps 0 set to num_train_steps, the
  default: the decay ends with the run. A total_steps of its own is kept, so that a run can
  train part of a longer schedule. Returns the config."""
  if not config.optimizer.total_steps:
    config.optimizer.total_steps = config.num_train_steps
  elif config.optimizer.total_steps < config.num_train_steps:
    console.warn_once(
        'config.optimizer.total_steps=%d ends the schedule before the run\'s %d '
        'steps: %s; set --config.optimizer.total_steps to 0 (the run\'s steps) or %d or more',
        config.optimizer.total_steps, config.num_train_steps,
        _past_total_steps(config.optimizer, config.num_train_steps), config.num_train_steps)
  return config


def for_run(config) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """(optimizer, learning-rate schedule) of a training config, its total_steps resolved first
  (resolve_total_steps): what the loop, the AOT check and the benches each build a step with."""
  resolve_total_steps(config)
  return make(config.optimizer), learning_rate_schedule(config.optimizer)


def learning_rate_schedule(config) -> optax.Schedule:
  """Linear warmup from 0 to the peak, then polynomial decay to end_learning_rate (power 1 =
  BERT's linear decay). decay_from='warmup_end' decays from the peak over the steps after the
  warmup (transformers' linear schedule); 'step_0' is google-research/bert's optimization.py:
  the decay counts from step 0 and the warmup replaces its first warmup_steps, so the peak is
  never reached and every later rate is (1 - warmup/total) of warmup_end's."""
  if config.total_steps <= 0:  # 0 = num_train_steps, which the optimizer's config lacks.
    raise ValueError(f'optimizer.total_steps={config.total_steps} is not resolved: pass the '
                     'training config through optimizer.resolve_total_steps first')
  warmup = optax.linear_schedule(0.0, config.learning_rate, config.warmup_steps)
  if config.decay_from == 'step_0':
    decay = optax.polynomial_schedule(
        init_value=config.learning_rate, end_value=config.end_learning_rate,
        power=config.decay_power, transition_steps=config.total_steps)
    warmup_steps = config.warmup_steps
    return lambda step: jnp.where(step < warmup_steps, warmup(step), decay(step))
  if config.decay_from != 'warmup_end':
    raise ValueError(f'optimizer.decay_from={config.decay_from!r} is unknown; valid: '
                     'warmup_end, step_0.')
  decay = optax.polynomial_schedule(
      init_value=config.learning_rate, end_value=config.end_learning_rate,
      power=config.decay_power, transition_steps=max(config.total_steps - config.warmup_steps, 1))
  return optax.join_schedules([warmup, decay], [config.warmup_steps])


def scale_by_uncorrected_adam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
  """optax.scale_by_adam without the bias correction of its moments: m / (sqrt(v) + eps), as
  google-research/bert's AdamWeightDecayOptimizer. Its state is optax's ScaleByAdamState, so a
  checkpoint resumes with optimizer.bias_correction on or off."""
  adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

  def update(updates, state, params=None):
    del params
    mu = optax.tree.update_moment(updates, state.mu, b1, 1)
    nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
    steps = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
    return steps, optax.ScaleByAdamState(count=optax.safe_increment(state.count), mu=mu, nu=nu)

  return optax.GradientTransformation(adam.init, update)


def _where_decayed(inner: optax.GradientTransformation, mask) -> optax.GradientTransformation:
  """`inner`'s updates where weight decay applies (`mask` of the parameters), the updates as
  they came elsewhere; inner's own state, so a checkpoint resumes with it or without it."""

  def update(updates, state, params=None):
    scaled, state = inner.update(updates, state, params)
    return jax.tree.map(lambda new, old, decayed: new if decayed else old, scaled, updates,
                        mask(params)), state

  return optax.GradientTransformation(inner.init, update)


def scale_by_layer_trust_ratio() -> optax.GradientTransformation:
  """optax.scale_by_trust_ratio (LAMB's ||w|| / ||update||) per weight of each layer, also where
  nn.scan (model.scan_layers) stacks a weight's layers into one array along its leading axis:
  optax's one ratio over all the layers was another optimizer than the unrolled model's."""
  inner = optax.scale_by_trust_ratio()

  def one(update, param):
    return inner.update(update, optax.EmptyState(), param)[0]

  def update(updates, state, params=None):
    return jax.tree.map(lambda u, p, kind: jax.vmap(one)(u, p) if kind == 'stacked' else one(u, p),
                        updates, params, match_rules(params, LAYER_DECAY_RULES)), state

  return optax.GradientTransformation(inner.init, update)


def make(config) -> optax.GradientTransformation:
  """The optimiser config.name ('adamw' or 'lamb') with clipping, the decay mask and layer-wise
  learning-rate decay.

  The mask is a function of the parameter tree, so the same optimiser initialises on boxed
  (logically annotated) parameters under jax.eval_shape and updates plain ones.
  """
  schedule = learning_rate_schedule(config)
  mask = weight_decay_mask
  if config.name not in ('adamw', 'lamb'):
    raise ValueError(f'optimizer.name={config.name!r} is unknown; valid: adamw, lamb.')
  # optax.adamw's and optax.lamb's chains, their parts chosen: each choice keeps the state.
  moments = (optax.scale_by_adam(b1=config.b1, b2=config.b2, eps=config.eps)
             if config.bias_correction else
             scale_by_uncorrected_adam(config.b1, config.b2, config.eps))
  trust = []
  if config.name == 'lamb':
    trust = [scale_by_layer_trust_ratio() if config.trust_ratio_everywhere
             else _where_decayed(scale_by_layer_trust_ratio(), mask)]
  opt = optax.chain(moments, optax.add_decayed_weights(config.weight_decay, mask), *trust,
                    optax.scale_by_learning_rate(schedule))
  if config.grad_clip_norm > 0:
    opt = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), opt)
  if config.layer_decay != 1.0:  # 1.0 (off) adds nothing: today's optimizer, bit for bit.
    # Last, on the whole update (weight decay included), as optax applies the learning rate.
    opt = scale_by_layer_decay(opt, config.layer_decay)
  return opt
