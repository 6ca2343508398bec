"""Pieces shared by every config: the size table, argument parsing, the model, optimizer, mesh,
checkpoint and logging blocks.

`get_config(arg)` files take an argument string such as `size=base,dtype=bfloat16`; the keys a
file accepts and their defaults are given by the file itself.
"""

import difflib

from absl import flags
import ml_collections

from bertjax.model import encoder_config
from bertjax.training import sharding

# layers, hidden, heads, mlp (intermediate). tiny..medium are the compact BERTs of Turc et al.
# (2019); base and large are the BERT paper's.
SIZES = {
    'tiny': dict(num_layers=2, hidden_size=128, num_heads=2, mlp_dim=512),
    'mini': dict(num_layers=4, hidden_size=256, num_heads=4, mlp_dim=1024),
    'small': dict(num_layers=4, hidden_size=512, num_heads=8, mlp_dim=2048),
    'medium': dict(num_layers=8, hidden_size=512, num_heads=8, mlp_dim=2048),
    'base': dict(num_layers=12, hidden_size=768, num_heads=12, mlp_dim=3072),
    'large': dict(num_layers=24, hidden_size=1024, num_heads=16, mlp_dim=4096),
}


# Config arguments that were renamed: given, they are refused with the new name.
RENAMED_ARGS = {'init': 'init_from', 'checkpoint': 'init_from'}


def did_you_mean(word: str, choices) -> str:
  """" (did you mean 'x'?)" for the choice closest to a mistyped `word`, else ''."""
  close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
  if not close and word.lower() in {str(c).lower() for c in choices}:
    close = [c for c in choices if str(c).lower() == word.lower()]
  return f' (did you mean {close[0]!r}?)' if close else ''


def parse_arg(arg, *, recipe=(), **defaults):
  """Parses `k=v,k=v` into a ConfigDict over `defaults`, values cast to the defaults' types.

  A value that is not of its default's type, or a key given twice, is refused naming the key:
  never read as something else. Whole numbers may be written as 1e5 or 100_000. The keys in
  `recipe` default to 0, which stands for the recipe's own value (the size's or the task's):
  given as 0, such a key is refused, since it would silently mean that value.
  """
  parsed = ml_collections.ConfigDict(defaults)
  if not arg:
    return parsed
  given = {}
  for item in arg.split(','):
    if not item:
      continue
    key, sep, value = item.partition('=')
    if not sep:
      raise ValueError(f'config argument {item!r} is not key=value (got {arg!r}).')
    if key not in defaults and RENAMED_ARGS.get(key) in defaults:
      raise ValueError(f'config argument {key!r} was renamed {RENAMED_ARGS[key]!r}: pass '
                       f'{RENAMED_ARGS[key]}={value}.')
    if key not in defaults:
      raise ValueError(f'unknown config argument {key!r}{did_you_mean(key, defaults)}; valid '
                       f'ones: {sorted(defaults)}; any field is set with --config.FIELD=VALUE.')
    if key in given:
      raise ValueError(f'config argument {key!r} is given twice ({key}={given[key]}, then '
                       f'{item}): pass it once.')
    given[key] = value
    parsed[key] = _cast(key, value, defaults[key])
    if key in recipe and parsed[key] == 0:
      raise ValueError(f'config argument {key}={value}: 0 stands for the recipe\'s own value '
                       f'here, so leave {key} out for that, or pass a positive {key}.')
  return parsed


def _cast(key, value, default):
  """`value` as the type of `default`, or a ValueError naming `key` and what it takes. A
  true/false value takes the words a --config.X=V bool flag takes (absl's parser)."""
  if default is None or isinstance(default, str):
    return value
  parse, kind = {bool: (flags.BooleanParser().parse, 'true or false'),
                 int: (_whole_number, 'a whole number')}.get(
                     type(default), (type(default), f'a {type(default).__name__}'))
  try:
    return parse(value)
  except ValueError:
    raise ValueError(f'config argument {key}={value!r}: {key} takes {kind} (default '
                     f'{default}).') from None


def _whole_number(value: str) -> int:
  """int(value), also for a whole number written as a float (1e5, 2.0)."""
  try:
    return int(value)
  except ValueError:
    number = float(value)
    if not number.is_integer():
      raise
    return int(number)


def model_config(size: str, **overrides) -> ml_collections.ConfigDict:
  """The encoder's hyper-parameters for one of SIZES; overrides set any field. The attention
  kernel and the layer stacking are 'auto': chosen by the platform the run lands on
  (bertjax/model/platform_defaults.py: GPU cudnn + unrolled, TPU/CPU xla + scanned from 12
  layers on); a value given here or on the command line is kept."""
  if size not in SIZES:
    raise ValueError(f'unknown model size {size!r}; valid sizes: {", ".join(SIZES)}.')
  return encoder_config.default_config(
      size=size, **{'attention_impl': 'auto', 'scan_layers': 'auto', **SIZES[size], **overrides})


# ---------------------------------------------------------------------------------------------
# Blocks every training config shares (pre-training and fine-tuning).


def optimizer_config(*, learning_rate: float, warmup_steps, total_steps,
                     name: str = 'adamw') -> ml_collections.ConfigDict:
  """BERT's AdamW (or LAMB) with linear warmup and polynomial decay."""
  o = ml_collections.ConfigDict()
  o.name = name  # 'adamw' (BERT) or 'lamb' (batch >= 4k, You et al. 2019).
  o.learning_rate = learning_rate  # Peak, reached at the end of warmup.
  o.end_learning_rate = 0.0  # Reached at total_steps.
  o.warmup_steps = warmup_steps  # Linear warmup from 0.
  o.total_steps = total_steps  # Decay ends here; 0 = at the run's last step (num_train_steps).
  o.decay_power = 1.0  # 1 = BERT's linear decay; LAMB papers use 1 too.
  # 'warmup_end': the decay runs from the peak at the warmup's end (transformers' schedule);
  # 'step_0': google-research/bert's, counted from step 0 (the peak never reached; each rate
  # after the warmup x(1 - warmup_steps/total_steps)).
  o.decay_from = 'warmup_end'
  o.b1 = 0.9
  o.b2 = 0.999
  o.eps = 1e-6  # BERT's; not optax's default 1e-8.
  # Adam's moments bias-corrected (the paper's Adam, optax's); false = google-research/bert's
  # AdamWeightDecayOptimizer, whose first updates are up to ~6x larger (the same state).
  o.bias_correction = True
  # LAMB's trust ratio on every parameter (the paper's Algorithm 2); false: not on the LayerNorm
  # parameters and biases weight decay skips (TF Addons', Model Garden's and ALBERT's LAMB).
  o.trust_ratio_everywhere = True
  o.weight_decay = 0.01  # Decoupled; never on LayerNorm or biases.
  o.grad_clip_norm = 1.0  # Global-norm clipping (BERT: 1.0); 0 = off.
  # Layer-wise learning-rate decay in (0, 1] (ELECTRA; fine-tuning: 0.8 Base, 0.9 Large); 1 =
  # off. Of L layers, layer i (0 = lowest) trains at lr * decay**(L - i), the embeddings at
  # lr * decay**(L + 1), the pooler and heads at lr.
  o.layer_decay = 1.0
  return o


def mesh_config() -> ml_collections.ConfigDict:
  """The device mesh and the logical-axis rules that map parameters and batches onto it."""
  m = ml_collections.ConfigDict()
  m.data = -1  # Pure data parallelism; -1 = all devices not used by other axes.
  m.fsdp = 1  # Params/grads/optimizer state sharded too (ZeRO-3): large models.
  m.tensor = 1  # Megatron tensor parallelism; must divide heads, mlp and vocab.
  # Logical axis -> mesh axes, `name=axis+axis` entries, first match wins; empty or absent =
  # replicated. Another layout is a flag, e.g. parameters replicated instead of fsdp-sharded:
  # --config.mesh.rules=batch=data+fsdp,vocab=tensor,heads=tensor,mlp=tensor
  m.rules = sharding.rules_to_text(sharding.RULES)
  return m


def checkpoint_config(*, every_steps: int, keep: int) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.every_steps = every_steps  # Async save period; also saved at every eval, the end, SIGTERM.
  c.keep = keep  # The last K are kept ...
  c.keep_best = 0  # ... plus the K best by best_metric (0 = none; --step=best needs 1).
  # The eval metric that ranks checkpoints (keep_best, --step=best) and early stopping; '' =
  # the job's main one (pre-training mlm_accuracy, fine-tuning the task's, e.g. accuracy).
  c.best_metric = ''
  # 'max' (higher is better) or 'min'; '' = 'min' for loss-like names. One against a metric's
  # known way (a loss with max, an accuracy or F1 with min) is refused.
  c.best_mode = ''
  return c


def add_logging(config, *, log_every_steps: int = 50):
  """Progress line, TensorBoard and MFU fields."""
  config.log_every_steps = log_every_steps  # Progress line and TensorBoard scalars.
  # Peak dense TFLOP/s per device for MFU; 0 = looked up from the device kind (TPU/GPU).
  config.peak_tflops = 0.0
  # A jax.profiler trace of this many steps (0 = none) into <workdir>/plugins/profile, for
  # TensorBoard's profile tab; it starts after step profile_start_step (past the compile).
  config.profile_steps = 0
  config.profile_start_step = 10
