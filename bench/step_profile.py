"""Where bertjax's training step spends its time, op by op, on the device it runs on.

  python bench/step_profile.py [--sizes=base] [--batches=8] [--seq_len=128] [--dtype=float32] \
      [--scan_layers=config|on|off] [--scan_unroll=1] [--attention_impl=config|...] \
      [--attention_dropout=-1] [--steps=4] [--top=15] [--compile_top=10] [--trace_dir=DIR]

Issue 29's GPU question, where the BERT-Base/128 step's time goes (one GPU, ~4 min, most of it
compiling; needs what bench/train_bench.py needs less torch):
  python bench/step_profile.py --sizes=base --batches=256 --seq_len=128 --dtype=bfloat16 \
      --threads=16 --steps=10

It compiles train_state.train_step as bench/train_bench.py does (configs/pretrain.py's config,
'auto' settled for the platform, the mesh, the donated state), times --steps updates, then runs
--steps more under jax.profiler and reads the trace back itself (jax.profiler.ProfileData; no
TensorBoard needed). Each timed op of the trace is matched to the instruction of the compiled
step that ran (bench/hlo_profile.py), and through that instruction's metadata to the model code
it came from. Per update it prints:
  - the wall time, untraced and traced (tracing slows a step), and the ops' time (a GPU's
    kernels, which run one after another on its stream; on the CPU, XLA's thunks, which may run
    side by side, so their sum can pass the wall time);
  - the time by part: embeddings, attention (projections, the kernel and its dropout), the MLP,
    the layer norms, hidden dropout, the residual adds, nn.scan's slicing where layers are
    scanned, the pooler, the MLM and NSP heads, the loss and the optimizer (clipping, AdamW),
    forward and backward apart (a fusion counts where its result's code is);
  - the time by kind of op: matmuls, the fused attention kernel, elementwise and reduction
    fusions, copies and transposes, random bits (the fusions making dropout's masks),
    collectives, other libraries' custom calls;
  - the --top ops, with their kind and the code they came from;
  - where the step's compile went (traced too, which slows it): building the state, jax's
    trace and lowering, then XLA's compile by phase, from the compiler's own trace events on
    its compiling thread (which add up to the compile's wall time): HLO passes, autotuning
    (GEMM and fusion autotuners, with the kernels they compile to try), code generation (LLVM,
    PTX), cuDNN graphs, other; the same phases' busy time on the threads beside it, and the
    --compile_top events (issue 29: the GPU compile takes 97-153 s where XLA:CPU takes 5-8 s).
--trace_dir keeps the traces for TensorBoard's profile plugin or xprof. It takes
bench/train_bench.py's flags for the setting (--sizes, --batches, --seq_len, --max_predictions,
--vocab, --dtype, --scan_layers, --scan_unroll, --attention_impl, --attention_dropout, --steps,
--threads); run on one device. Not a test: figures only (tests/step_profile_test.py runs it tiny).
"""

import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import flax.linen as nn  # noqa: E402
import hlo_profile  # noqa: E402
import jax  # noqa: E402
import jax_step  # noqa: E402  (the config, batch and compiled step)
import train_bench  # noqa: E402  (its flags)

from bertjax import console  # noqa: E402
from bertjax.model import platform_defaults  # noqa: E402

_TOP = flags.DEFINE_integer('top', 15, 'How many of the costliest ops to list.')
_TRACE_DIR = flags.DEFINE_string('trace_dir', '', 'Keep the traces here (else a temporary '
                                 'folder, removed at the end).')
_COMPILE_TOP = flags.DEFINE_integer('compile_top', 10, 'How many of the costliest compiler '
                                    'events to list.')

def _table(title, rows, total_ms, columns=()):
  """Prints rows (name, [ms per column...], ms) sorted by ms, with each one's share."""
  print(f'{title:<26}' + ''.join(f'{c:>10}' for c in columns) + f'{"ms":>10}{"share":>8}')
  for name, cells, ms in sorted(rows, key=lambda r: -r[2]):
    print(f'  {name:<24}' + ''.join(f'{c:>10.2f}' for c in cells) +
          f'{ms:>10.2f}{ms / total_ms:>8.1%}')


def print_compile(times, trace_dir, top):
  """Prints where XLA's compile of the step went (hlo_profile.compile_phases), per phase."""
  per_phase, events = hlo_profile.compile_phases(hlo_profile.read_trace(trace_dir))
  thread_ms = sum(ms for ms, _ in per_phase.values())
  print(f'compile: state {times["state"]:.1f} s, trace {times["trace"]:.1f} s, lowering '
        f'{times["lower"]:.1f} s, XLA {times["compile"]:.1f} s (traced; '
        f'{times["hlo_lines"]:,} StableHLO lines); XLA\'s compiling thread {thread_ms / 1e3:.1f} s')
  print(f'{"compile phase":<26}{"thread s":>10}{"share":>8}{"beside s":>10}')
  for phase, (ms, beside_ms) in sorted(per_phase.items(), key=lambda kv: -kv[1][0]):
    print(f'  {phase:<24}{ms / 1e3:>10.2f}{ms / max(thread_ms, 1e-9):>8.1%}'
          f'{beside_ms / 1e3:>10.2f}')
  if top:
    print(f'{f"top {top} compiler events":<50}{"s":>8}{"calls":>7}  phase')
  for ms, calls, name, phase in events[:top]:
    print(f'  {name[:48]:<48}{ms / 1e3:>8.2f}{calls:>7}  {phase}')


def profile(settings, steps, top, trace_dir, compile_top=0):
  """Compiles, times and profiles one setting's step; prints its breakdown (module doc)."""
  config = jax_step.make_config(settings)
  device = jax.devices()[0]
  choice = platform_defaults.settle(config.model, device.platform)
  batch = jax_step.make_batch(settings['vocab'], settings['batch'], settings['seq'],
                                 settings['predictions'])
  compile_dir = os.path.join(trace_dir, 'compile')
  compiled, state, device_batch, mesh, rules, first = jax_step.bertjax_step(
      config, batch, compile_trace_dir=compile_dir)
  hlo = compiled.as_text()
  module = re.match(r'HloModule\s+([\w.\-]+)', hlo).group(1)
  instructions, computations = hlo_profile.parse_hlo(hlo)

  def run(state, n):
    """(state, ms per update) of n updates."""
    start = time.perf_counter()
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
      for _ in range(n):
        state, metrics = compiled(state, device_batch)
      jax.block_until_ready((state, metrics))
    return state, (time.perf_counter() - start) / n * 1e3

  state, _ = run(state, 2)  # Warm-up: allocator, autotuned kernels.
  state, wall_ms = run(state, steps)
  step_dir = os.path.join(trace_dir, 'step')
  with jax.profiler.trace(step_dir):
    state, traced_ms = run(state, steps)
  times, where = hlo_profile.op_times(hlo_profile.read_trace(step_dir), module, instructions)
  per_part, per_kind, listed, unknown = hlo_profile.attribute(times, instructions,
                                                              computations, steps)
  ops_ms = sum(per_kind.values()) + unknown
  model = config.model
  print(f'# {settings["size"]}/{settings["seq"]} batch {settings["batch"]}, {model.dtype}, '
        f'dropout {model.dropout_rate}, attention dropout {model.attention_dropout_rate}; '
        f'{choice}; {device.device_kind} ({device.platform}), jax {jax.__version__}')
  # The ops are timed while traced, which slows a step: their share is of that wall time.
  print(f'step {wall_ms:.2f} ms wall ({traced_ms:.2f} ms traced); ops {ops_ms:.2f} ms '
        f'({ops_ms / traced_ms:.0%} of the traced wall; {len(listed)} ops, timed on {where}; '
        f'per update, over {steps})')
  _table('part', [(p, [d[k] for k in ('forward', 'backward', 'update')], sum(d.values()))
                  for p, d in per_part.items()], ops_ms, ('forward', 'backward', 'update'))
  _table('kind', [(k, [], ms) for k, ms in per_kind.items()], ops_ms)
  if unknown:
    print(f'  ops not in the printed module: {unknown:.2f} ms')
  if top:
    print(f'{f"top {top} ops":<34}{"ms":>8}{"share":>8}{"calls":>7}  kind, code')
  for ms, calls, name, op_kind, op_name in sorted(listed, reverse=True)[:top]:
    code = re.sub(r'^jit\(train_step\)/', '', op_name) or '(no source)'
    print(f'  {name[:32]:<32}{ms:>8.2f}{ms / ops_ms:>8.1%}{calls:>7.0f}  {op_kind}, '
          f'{code[:110]}')
  print_compile(first, compile_dir, compile_top)
  sys.stdout.flush()


def _writable(folder):
  """Exits, before anything compiles, unless the profiler can write under `folder`."""
  if '://' in folder:
    raise SystemExit(f'--trace_dir={folder}: the profiler writes a local folder; copy it to '
                     'the bucket afterwards.')
  try:
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
      pass
  except OSError as e:
    raise SystemExit(f'--trace_dir={folder} cannot be written ({e}): give a writable '
                     'folder.') from None


def main(argv):
  del argv
  console.install()  # Libraries' INFO lines (jax's backend probing) held, as bertjax.main does.
  steps, top, trace_dir = train_bench._STEPS.value, _TOP.value, _TRACE_DIR.value
  compile_top = _COMPILE_TOP.value
  if steps < 1 or top < 0 or compile_top < 0:
    raise SystemExit('--steps needs 1 or more updates to profile, --top and --compile_top 0 '
                     'or more.')
  if trace_dir:
    _writable(trace_dir)
  if len(jax.devices()) != 1:
    raise SystemExit(f'{len(jax.devices())} devices: run with one (drop '
                     '--xla_force_host_platform_device_count from XLA_FLAGS; '
                     'CUDA_VISIBLE_DEVICES=0).')
  jax.config.update('jax_enable_compilation_cache', False)  # As train_bench: no stale cache.
  for settings in train_bench.settings_per_size():
    name = f'{settings["size"]}_{settings["seq"]}'
    if trace_dir:
      profile(settings, steps, top, os.path.join(trace_dir, name), compile_top)
    else:
      with tempfile.TemporaryDirectory() as folder:
        profile(settings, steps, top, folder, compile_top)


if __name__ == '__main__':
  app.run(main)
