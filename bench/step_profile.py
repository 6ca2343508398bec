"""Where bertjax's training step spends its time, op by op, on the device it runs on.

  python bench/step_profile.py [--sizes=base] [--batches=8] [--seq_len=128] [--dtype=float32] \
      [--scan_layers=config|on|off] [--attention_impl=config|...] [--attention_dropout=-1] \
      [--steps=4] [--top=15] [--trace_dir=DIR]

Issue 29's GPU question, where the BERT-Base/128 step's time goes (one GPU, ~4 min, most of it
compiling; needs what bench/train_bench.py needs less torch):
  python bench/step_profile.py --sizes=base --batches=256 --seq_len=128 --dtype=bfloat16 \
      --threads=16 --steps=10

It compiles train_state.train_step as bench/train_bench.py does (configs/pretrain.py's config,
'auto' settled for the platform, the mesh, the donated state), times --steps updates, then runs
--steps more under jax.profiler and reads the trace back itself (jax.profiler.ProfileData; no
TensorBoard needed). Each timed op of the trace is matched to the instruction of the compiled
step that ran, and through that instruction's metadata to the model code it came from. Per
update it prints:
  - the wall time, and the ops' time (a GPU's kernels, which run one after another on its
    stream; on the CPU, XLA's thunks, which may run side by side, so their sum can pass the
    wall time);
  - the time by part: embeddings, attention (projections, the kernel and its dropout), the MLP,
    the layer norms, hidden dropout, the residual adds, nn.scan's slicing where layers are
    scanned, the pooler, the MLM and NSP heads, the loss and the optimizer (clipping, AdamW),
    forward and backward apart (a fusion counts where its result's code is);
  - the time by kind of op: matmuls, the fused attention kernel, elementwise and reduction
    fusions, copies and transposes, random bits, collectives;
  - the --top ops, with their kind and the code they came from.
--trace_dir keeps the trace for TensorBoard's profile plugin or xprof. It takes
bench/train_bench.py's flags for the setting (--sizes, --batches, --seq_len, --max_predictions,
--vocab, --dtype, --scan_layers, --attention_impl, --attention_dropout, --steps, --threads); run
on one device. Not a test: figures only (tests/step_profile_test.py runs it tiny).
"""

import collections
import dataclasses
import glob
import math
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import train_bench  # noqa: E402  (its flags, config, batch and compiled step)

from bertjax.model import platform_defaults  # noqa: E402

_TOP = flags.DEFINE_integer('top', 15, 'How many of the costliest ops to list.')
_TRACE_DIR = flags.DEFINE_string('trace_dir', '', 'Keep the trace here (else a temporary '
                                 'folder, removed at the end).')

# A part of the step, by the model code an op comes from (its jax name stack: flax module
# names, the train step's 'optimizer' scope); the first match wins.
PARTS = (
    ('optimizer', r'(^|/)optimizer/'),
    ('loss', r'jvp\(\)'),  # Differentiated, but outside the model's modules.
    ('embeddings', r'/embeddings/'),
    ('attention', r'/attention/'),
    ('mlp', r'/mlp/'),
    ('layer norms', r'_layer_norm/'),
    ('dropout', r'/layers[^/]*/.*[Dd]ropout'),
    ('residual adds', r'/layers'),
    ('layer scan', r'/bert/while/'),  # nn.scan's slicing of stacked weights and activations.
    ('pooler', r'/pooler/'),
    ('mlm head', r'/mlm/'),
    ('nsp head', r'/nsp/'),
)
COLLECTIVES = frozenset({'all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all',
                         'collective-permute', 'all-reduce-start', 'all-gather-start',
                         'collective-permute-start'})
# Ops that only hold others (their bodies' ops are timed one by one) or move no data.
CONTAINERS = frozenset({'while', 'conditional', 'call', 'tuple', 'get-tuple-element',
                        'parameter', 'constant', 'bitcast'})
_MOVES = frozenset({'copy', 'transpose', 'bitcast', 'reshape', 'broadcast', 'parameter',
                    'slice', 'concatenate', 'dynamic-slice', 'dynamic-update-slice', 'pad',
                    'tuple', 'get-tuple-element', 'constant'})
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$')
_COMPUTATION = re.compile(r'^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$')
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')


@dataclasses.dataclass
class Instruction:
  opcode: str
  op_name: str  # The jax name stack it was traced under ('' where XLA made it up).
  calls: tuple  # The computations it runs (a fusion's body, a reduce's combiner).
  text: str  # The instruction's line, for its custom-call target and backend config.


def parse_hlo(hlo_text):
  """({instruction name: Instruction}, {computation name: its instruction names}) of an
  optimized HLO module's text (compiled.as_text())."""
  instructions, computations, current = {}, {}, None
  for line in hlo_text.splitlines():
    if (m := _COMPUTATION.match(line)) and '=' not in line.split('{')[0]:
      current = computations.setdefault(m.group(1), [])
      continue
    if current is None or not (m := _INSTRUCTION.match(line)):
      continue
    name, rest = m.groups()
    if rest.startswith('('):  # A tuple shape: skip to its closing parenthesis.
      depth = 0
      for i, c in enumerate(rest):
        depth += {'(': 1, ')': -1}.get(c, 0)
        if depth == 0:
          rest = rest[i + 1:]
          break
    else:
      rest = rest.split(' ', 1)[1] if ' ' in rest else ''
    opcode = re.match(r'\s*([\w\-]+)', rest)
    op_name = _OP_NAME.search(line)
    calls = re.findall(r'(?:calls|to_apply|body|condition)=%?([\w.\-]+)', line)
    calls += re.findall(r'%([\w.\-]+)', m.group(2).split('branch_computations={', 1)[1]) if (
        'branch_computations={' in line) else []
    instructions[name] = Instruction(opcode.group(1) if opcode else '',
                                     op_name.group(1) if op_name else '', tuple(calls), line)
    current.append(name)
  return instructions, computations


def _inside(name, instructions, computations, seen=None):
  """The instructions a fusion (or any op) runs inside it, nested calls included."""
  seen = set() if seen is None else seen
  out = []
  for called in instructions[name].calls:
    if called in seen:
      continue
    seen.add(called)
    for inner in computations.get(called, ()):
      out.append(instructions[inner])
      out += _inside(inner, instructions, computations, seen)
  return out


def source(name, instructions, computations):
  """The jax name stack of an op: its own metadata, else its body's root's (a fusion XLA made),
  else the first op_name inside it."""
  op = instructions[name]
  if op.op_name:
    return op.op_name
  for called in op.calls:
    body = computations.get(called, ())
    if body and instructions[body[-1]].op_name:
      return instructions[body[-1]].op_name
  return next((i.op_name for i in _inside(name, instructions, computations) if i.op_name), '')


def _elements(text):
  """How many elements an instruction's (first) result holds."""
  shape = re.search(r'=\s*\(?\w+\[([\d,]*)\]', text)
  return 0 if shape is None else math.prod(int(d) for d in shape.group(1).split(',') if d)


def kind(name, instructions, computations):
  """What sort of work an op is: matmul, attention kernel, collective, random bits, copy or
  transpose, reduction, elementwise (or its opcode)."""
  op = instructions[name]
  inside = _inside(name, instructions, computations)
  opcodes = {op.opcode} | {i.opcode for i in inside}
  targets = ' '.join(re.findall(r'custom_call_target="([^"]*)"', op.text) +
                     [t for i in inside for t in re.findall(r'custom_call_target="([^"]*)"',
                                                            i.text)]).lower()
  if 'fmha' in targets or 'dot_product_attention' in targets:
    return 'attention kernel'
  if opcodes & {'dot', 'convolution', 'ragged-dot'} or re.search(r'gemm|matmul|cublas',
                                                                   targets + op.text.lower()):
    return 'matmul'
  if opcodes & COLLECTIVES:
    return 'collective'
  # Dropout's mask bits are usually fused into the op that applies them: threefry's uint32
  # shifts and xors over an activation's shape (a key's own hashing, a few words, is not).
  if opcodes & {'rng', 'rng-bit-generator'} or any(
      i.opcode in ('xor', 'shift-left', 'shift-right-logical') and _elements(i.text) >= 1024
      and re.search(r'=\s*u32\[', i.text) for i in [op, *inside]):
    return 'random bits'
  if ({i.opcode for i in inside} if op.opcode == 'fusion' else {op.opcode}) <= _MOVES:
    return 'copy/transpose'
  if opcodes & {'reduce', 'reduce-window', 'scatter', 'select-and-scatter', 'sort'}:
    return 'reduction'
  if op.opcode == 'fusion' or inside:
    return 'elementwise'
  return op.opcode


def part(op_name):
  """The part of the step an op's jax name stack points to (PARTS), or 'other'."""
  return next((p for p, pattern in PARTS if re.search(pattern, op_name)), 'other')


def direction(op_name):
  """'update' (the optimizer), 'backward' (a transpose of the forward) or 'forward'."""
  if re.search(PARTS[0][1], op_name):
    return 'update'
  return 'backward' if 'transpose(' in op_name else 'forward'


def read_trace(trace_dir):
  """The newest trace under trace_dir (jax.profiler.ProfileData)."""
  paths = glob.glob(os.path.join(trace_dir, '**', '*.xplane.pb'), recursive=True)
  if not paths:
    raise SystemExit(f'the profiler wrote no trace under {trace_dir}')
  return jax.profiler.ProfileData.from_file(max(paths, key=os.path.getmtime))


def op_times(data, module, known=()):
  """({op name: [total ns, count]} of `module`'s ops in a trace (ProfileData), the planes they
  ran on): a GPU's (or TPU's) device planes where they hold XLA ops, else the host's (the
  CPU's thunks). An event names its op in its hlo_op stat (a GPU's kernels, the CPU's thunks),
  or, on a line of XLA ops, by its own name (one of `known`)."""

  def collect(planes):
    times, used = collections.defaultdict(lambda: [0, 0]), []
    for plane in planes:
      lines = list(plane.lines)
      # A GPU plane may also carry a line of the XLA ops' spans over its stream lines'
      # kernels: take that line alone, so that nothing is counted twice.
      lines = [line for line in lines if line.name == 'XLA Ops'] or lines
      for line in lines:
        for event in line.events:
          stats = dict(event.stats)
          op = stats.get('hlo_op', event.name if event.name in known else None)
          if op is not None and stats.get('hlo_module', module) == module:
            times[op][0] += event.duration_ns
            times[op][1] += 1
            used += [] if plane.name in used else [plane.name]
    return times, ', '.join(used)

  planes = list(data.planes)
  devices = [p for p in planes if p.name.startswith('/device:')]
  times, where = collect(devices) if devices else ({}, '')
  if not times:
    times, where = collect([p for p in planes if p.name.startswith('/host:')])
  if not times:
    raise SystemExit(f'the trace holds no timed op of {module} (on a GPU the profiler needs '
                     'CUPTI, the libcupti of the CUDA toolkit)')
  return dict(times), where


def _table(title, rows, total_ms, columns=()):
  """Prints rows (name, [ms per column...], ms) sorted by ms, with each one's share."""
  print(f'{title:<26}' + ''.join(f'{c:>10}' for c in columns) + f'{"ms":>10}{"share":>8}')
  for name, cells, ms in sorted(rows, key=lambda r: -r[2]):
    print(f'  {name:<24}' + ''.join(f'{c:>10.2f}' for c in cells) +
          f'{ms:>10.2f}{ms / total_ms:>8.1%}')


def profile(settings, steps, top, trace_dir):
  """Compiles, times and profiles one setting's step; prints its breakdown (module doc)."""
  config = train_bench.make_config(settings)
  device = jax.devices()[0]
  choice = platform_defaults.settle(config.model, device.platform)
  batch = train_bench.make_batch(settings['vocab'], settings['batch'], settings['seq'],
                                 settings['predictions'])
  compiled, state, device_batch, mesh, rules, _ = train_bench.bertjax_step(config, batch)
  hlo = compiled.as_text()
  module = re.match(r'HloModule\s+([\w.\-]+)', hlo).group(1)
  instructions, computations = parse_hlo(hlo)

  def run(state, n):
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
      for _ in range(n):
        state, metrics = compiled(state, device_batch)
      jax.block_until_ready((state, metrics))
    return state

  state = run(state, 2)  # Warm-up: allocator, autotuned kernels.
  start = time.perf_counter()
  state = run(state, steps)
  wall_ms = (time.perf_counter() - start) / steps * 1e3
  with jax.profiler.trace(trace_dir):
    state = run(state, steps)
  times, where = op_times(read_trace(trace_dir), module, instructions)

  per_part = collections.defaultdict(lambda: collections.Counter())
  per_kind, listed, unknown = collections.Counter(), [], 0
  for name, (ns, count) in times.items():
    if name not in instructions:  # An op of a thunk XLA added after the printed module.
      unknown += ns / steps / 1e6
      continue
    if instructions[name].opcode in CONTAINERS:
      continue
    ms = ns / steps / 1e6
    op_name = source(name, instructions, computations)
    op_kind = kind(name, instructions, computations)
    per_part[part(op_name)][direction(op_name)] += ms
    per_kind[op_kind] += ms
    listed.append((ms, count / steps, name, op_kind, op_name))
  ops_ms = sum(per_kind.values()) + unknown
  model = config.model
  print(f'# {settings["size"]}/{settings["seq"]} batch {settings["batch"]}, {model.dtype}, '
        f'dropout {model.dropout_rate}, attention dropout {model.attention_dropout_rate}; '
        f'{choice}; {device.device_kind} ({device.platform}), jax {jax.__version__}')
  print(f'step {wall_ms:.2f} ms wall; ops {ops_ms:.2f} ms ({ops_ms / wall_ms:.0%} of the wall; '
        f'{len(listed)} ops, timed on {where}; per update, over {steps})')
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
  sys.stdout.flush()


def main(argv):
  del argv
  sizes = train_bench._SIZES.value  # pylint: disable=protected-access
  batches = [int(b) for b in train_bench.per_size(train_bench._BATCHES.value, sizes, 'batches')]
  seq_lens = [int(s) for s in train_bench.per_size(train_bench._SEQ_LEN.value, sizes,
                                                   'seq_len')]
  steps, top, trace_dir = train_bench._STEPS.value, _TOP.value, _TRACE_DIR.value
  if steps < 1 or top < 0:
    raise SystemExit('--steps needs 1 or more updates to profile, --top 0 or more ops.')
  if trace_dir:  # Checked before anything compiles.
    if '://' in trace_dir:
      raise SystemExit(f'--trace_dir={trace_dir}: the profiler writes a local folder; copy it '
                       'to the bucket afterwards.')
    try:
      os.makedirs(trace_dir, exist_ok=True)
    except OSError as e:
      raise SystemExit(f'--trace_dir={trace_dir} cannot be written ({e}): give a writable '
                       'folder.') from None
  if len(jax.devices()) != 1:
    raise SystemExit(f'{len(jax.devices())} devices: run with one (drop '
                     '--xla_force_host_platform_device_count from XLA_FLAGS; '
                     'CUDA_VISIBLE_DEVICES=0).')
  jax.config.update('jax_enable_compilation_cache', False)  # As train_bench: no stale cache.
  for size, batch_size, seq in zip(sizes, batches, seq_lens, strict=True):
    settings = dict(size=size, batch=batch_size, seq=seq, vocab=train_bench._VOCAB.value,
                    dtype=train_bench._DTYPE.value,
                    predictions=train_bench._PREDICTIONS.value or 20 * seq // 128,
                    scan=train_bench._SCAN.value, attention=train_bench._ATTENTION.value,
                    attention_dropout=train_bench._ATTENTION_DROPOUT.value)
    if trace_dir:
      profile(settings, steps, top, os.path.join(trace_dir, f'{size}_{seq}'))
    else:
      with tempfile.TemporaryDirectory() as folder:
        profile(settings, steps, top, folder)


if __name__ == '__main__':
  app.run(main)
