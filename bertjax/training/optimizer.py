"""BERT's optimisers with optax: AdamW and LAMB, warmup + decay, clipping, per-param rules.

Per-parameter policy is an ordered list of (regex, value) rules matched against the parameter's
path ('bert/layers_0/attention/query/kernel'); the first match wins.
"""

import re

import flax
import jax
import optax

# BERT decays every weight matrix and embedding, never LayerNorm parameters or biases.
WEIGHT_DECAY_RULES = (
    (r'layer_norm/(scale|bias)$', 0.0),
    (r'bias$', 0.0),  # Dense biases and the MLM output_bias.
    (r'.*', 1.0),
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


def learning_rate_schedule(config) -> optax.Schedule:
  """Linear warmup from 0 to the peak, then polynomial decay to end_learning_rate (power 1 =
  BERT's linear decay)."""
  warmup = optax.linear_schedule(0.0, config.learning_rate, config.warmup_steps)
  decay = optax.polynomial_schedule(
      init_value=config.learning_rate, end_value=config.end_learning_rate,
      power=config.decay_power, transition_steps=max(config.total_steps - config.warmup_steps, 1))
  return optax.join_schedules([warmup, decay], [config.warmup_steps])


def make(config) -> optax.GradientTransformation:
  """The optimiser config.name ('adamw' or 'lamb') with clipping and the decay mask.

  The mask is a function of the parameter tree, so the same optimiser initialises on boxed
  (logically annotated) parameters under jax.eval_shape and updates plain ones.
  """
  schedule = learning_rate_schedule(config)
  mask = weight_decay_mask
  if config.name == 'adamw':
    opt = optax.adamw(schedule, b1=config.b1, b2=config.b2, eps=config.eps,
                      weight_decay=config.weight_decay, mask=mask)
  elif config.name == 'lamb':
    opt = optax.lamb(schedule, b1=config.b1, b2=config.b2, eps=config.eps,
                     weight_decay=config.weight_decay, mask=mask)
  else:
    raise ValueError(f'optimizer.name={config.name!r} is unknown; valid: adamw, lamb.')
  if config.grad_clip_norm > 0:
    opt = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), opt)
  return opt
