"""bertjax's side of the train-step benches (bench/train_bench.py, bench/step_profile.py): the
benchmark's config and batch, and train_state.train_step compiled as the training loop compiles
it, with where its first step's time went; transformers' side is bench/torch_step.py. Imports
no TensorFlow (tests/no_tensorflow_step_test.py); import it after the bench has set its threads.
"""

import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))  # configs/, from any folder.
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from bertjax import pretrain_objective  # noqa: E402
from bertjax.training import optimizer as optimizer_lib  # noqa: E402
from bertjax.training import sharding  # noqa: E402
from bertjax.training import train_state  # noqa: E402
from configs import pretrain  # noqa: E402


def make_batch(vocab_size, batch_size, seq_len, predictions, seed=0):
  """A full-length pre-training batch with distinct, sorted masked positions per row."""
  rng = np.random.default_rng(seed)
  low = min(1000, vocab_size // 2)  # Above the special tokens.
  input_ids = rng.integers(low, vocab_size, (batch_size, seq_len)).astype(np.int32)
  segment_ids = np.zeros((batch_size, seq_len), np.int32)
  segment_ids[:, seq_len // 2:] = 1
  positions = np.stack([np.sort(rng.choice(np.arange(1, seq_len), predictions, replace=False))
                        for _ in range(batch_size)]).astype(np.int32)
  return dict(
      input_ids=input_ids, input_mask=np.ones((batch_size, seq_len), np.int32),
      segment_ids=segment_ids, masked_lm_positions=positions,
      masked_lm_ids=rng.integers(low, vocab_size, (batch_size, predictions)).astype(np.int32),
      masked_lm_weights=np.ones((batch_size, predictions), np.float32),
      next_sentence_labels=rng.integers(0, 2, (batch_size, 1)).astype(np.int32))


def _compile_trace_options():
  """The profiler's options for tracing a compile: the host's spans only (no Python frames; no
  device tracer where jax can turn it off, so autotuning times kernels as it does untraced)."""
  options = jax.profiler.ProfileOptions()
  options.python_tracer_level = 0
  if hasattr(options, 'device_tracer_level'):
    options.device_tracer_level = 0
  return options


def bertjax_step(config, batch, compile_trace_dir=''):
  """bertjax's train step compiled as the loop compiles it, with what it runs on: (compiled
  step, state, batch on the devices, mesh, rules, where the first step's time went: {'state':
  building the state (its init compiled and run), 'trace', 'lower', 'compile': the step's jax
  trace, its lowering and XLA's compile, in seconds; 'hlo_lines': the lowered step's StableHLO
  lines}). With compile_trace_dir, XLA's compile runs under jax.profiler, tracing there."""
  start = time.perf_counter()
  mesh = sharding.make_mesh(config.mesh)
  tx, schedule = optimizer_lib.for_run(config)
  objective = pretrain_objective.objective(config)
  rules = sharding.parse_rules(config.mesh.rules)
  state, state_shardings = train_state.create_train_state(config, objective, tx, mesh, rules)
  batch_shardings = sharding.batch_sharding(mesh, rules)
  step_fn = train_state.jit_train_step(config, objective, tx, schedule, state_shardings,
                                       batch_shardings)
  device_batch = jax.device_put(batch, batch_shardings)
  jax.block_until_ready((state, device_batch))
  times = {'state': time.perf_counter() - start}
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    start = time.perf_counter()
    traced = step_fn.trace(state, device_batch)
    times['trace'] = time.perf_counter() - start
    lowered = traced.lower()
    times['lower'] = time.perf_counter() - start - times['trace']
    with (jax.profiler.trace(compile_trace_dir, profiler_options=_compile_trace_options())
          if compile_trace_dir else contextlib.nullcontext()):
      start = time.perf_counter()  # The compile alone, not the profiler's start and stop.
      compiled = lowered.compile()
      times['compile'] = time.perf_counter() - start
  times['hlo_lines'] = lowered.as_text().count('\n')
  return compiled, state, device_batch, mesh, rules, times


def bertjax_runner(config, batch):
  """(a function running n train steps (state donated, kept across calls) and blocking, where
  the first step's time went (bertjax_step's))."""
  compiled, state, device_batch, mesh, rules, times = bertjax_step(config, batch)
  holder = {'state': state}

  def run(n):
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
      state, metrics = holder['state'], None
      for _ in range(n):
        state, metrics = compiled(state, device_batch)
      jax.block_until_ready((state, metrics))
      holder['state'] = state
    return float(metrics['loss'][0])
  return run, times


def make_config(s):
  """configs/pretrain.py's config for one benchmark setting (a plain dict, see main)."""
  config = pretrain.get_config(f'size={s["size"]},batch={s["batch"]},seq={s["seq"]},'
                               f'vocab={s["vocab"]},dtype={s["dtype"]}')
  with config.unlocked():
    config.data.max_predictions_per_seq = s['predictions']
    if s['scan'] != 'config':
      config.model.scan_layers = s['scan'] == 'on'
    config.model.scan_unroll = s['unroll']
    if s['attention'] != 'config':
      config.model.attention_impl = s['attention']
      if s['attention'] == 'dot_product_attention':  # No dropout in it (attention.py).
        config.model.attention_dropout_rate = 0.0
    if s['attention_dropout'] >= 0:
      config.model.attention_dropout_rate = s['attention_dropout']
  return config
