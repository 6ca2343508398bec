"""Reading a jax.profiler trace of a compiled step: which op of its HLO each timed event is,
which part of the model and which kind of work that op is (bench/step_profile.py prints it).

No side effects on import (tests/step_profile_test.py imports it into the test process).
"""

import collections
import dataclasses
import glob
import math
import os
import re

import jax

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
# Ops that only hold others or move no data: a container counts only where the ops inside it
# were not timed one by one (XLA:CPU runs a small call as one thunk).
CONTAINERS = frozenset({'while', 'conditional', 'call', 'tuple', 'get-tuple-element',
                        'parameter', 'constant', 'bitcast'})
_MOVES = frozenset({'copy', 'transpose', 'bitcast', 'reshape', 'broadcast', 'parameter',
                    'slice', 'concatenate', 'dynamic-slice', 'dynamic-update-slice', 'pad',
                    'tuple', 'get-tuple-element', 'constant'})
_INSTRUCTION = re.compile(r'^\s+(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$')
_COMPUTATION = re.compile(r'^(?:ENTRY\s+)?%?([\w.\-]+)')
_COMMENT = re.compile(r'/\*.*?\*/')  # /*index=5*/ in long tuples.
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
    line = _COMMENT.sub('', line)
    if line[:1] not in ('', ' ', '}') and line.rstrip().endswith('{'):  # A computation opens.
      current = computations.setdefault(_COMPUTATION.match(line).group(1), [])
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
  transpose, reduction, custom call (another library's kernel) or elementwise."""
  op = instructions[name]
  inside = _inside(name, instructions, computations)
  opcodes = {op.opcode} | {i.opcode for i in inside}
  # What a custom call runs, and a fusion's backend kind (a Triton GEMM's '__triton_gemm'):
  # never operand names or metadata, which a GEMM's consumers share.
  targets = ' '.join(re.findall(r'custom_call_target="([^"]*)"', op.text) +
                     re.findall(r'"kind":"([^"]*)"', op.text) +
                     [t for i in inside for t in re.findall(r'custom_call_target="([^"]*)"',
                                                            i.text)]).lower()
  if 'fmha' in targets or 'dot_product_attention' in targets:
    return 'attention kernel'
  if opcodes & {'dot', 'convolution', 'ragged-dot'} or re.search(r'gemm|matmul|cublas',
                                                                   targets):
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
  return 'custom call' if op.opcode == 'custom-call' else 'elementwise'  # Unfused ops too.


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


def attribute(times, instructions, computations, steps):
  """Per update, from op_times' `times`: ({part: {direction: ms}}, {kind: ms}, [(ms, calls, op
  name, kind, jax name stack)] of every op counted, ms of timed ops the module does not name).
  A container (a while loop, a call) counts only where none of the ops inside it was timed."""
  per_part = collections.defaultdict(collections.Counter)
  per_kind, listed, unknown = collections.Counter(), [], 0.0
  for name, (ns, count) in times.items():
    ms = ns / steps / 1e6
    if name not in instructions:  # A thunk XLA added after the printed module.
      unknown += ms
      continue
    if instructions[name].opcode in CONTAINERS and any(
        inner in times for called in instructions[name].calls
        for inner in computations.get(called, ())):
      continue
    op_name = source(name, instructions, computations)
    op_kind = kind(name, instructions, computations)
    per_part[part(op_name)][direction(op_name)] += ms
    per_kind[op_kind] += ms
    listed.append((ms, count / steps, name, op_kind, op_name))
  return per_part, per_kind, listed, unknown


# Where an XLA compile's time goes, from the compiler's own trace events (TraceMe spans: its
# pass pipelines, passes, autotuners, code generation, on its threads). On the compiling thread
# an event takes the phase of the outermost span around it (the thread's name first) that names
# one, so a kernel compiled to try it while autotuning counts as autotuning; what no span names
# is 'HLO passes' under a pass pipeline (XLA:GPU's 'HLO Transforms:<module>' and '<pipeline>
# (<module>)', XLA:CPU's 'HLO passes ...'), else 'other'. A pass that rewrites HLO for a library
# or a kernel ('triton-gemm-rewriter', 'cudnn-norm-rewriter') names no phase. On the threads
# beside it, work done while the compiling thread autotunes or builds cuDNN graphs (candidate
# kernels compiled in a pool) takes that phase; other work takes its own spans' phase.
COMPILE_PHASES = (
    ('autotuning', r'autotun|algorithm.?picker'),
    ('cuDNN graphs', r'cudnn'),
    ('code generation', r'llvm|ptx|cubin|gpuasm|compiling ir|codegen|fusioncompiler|'
                        r'jitcompiler|emit|kernel|triton'),
)
_PIPELINE = re.compile(r'hlo passes|hlo transforms|pass pipeline|runhlopasses|optimizehlo|'
                       r' \([\w.\-]+\)$', re.I)
_REWRITE_PASS = re.compile(r'-(rewriter|converter|normalizer|canonicalizer)$', re.I)
# jax's own Python frames and its wrapper around the backend compile: they wait on the
# compiler's threads, so their time is not the compiler's work, and they name no phase.
_NOT_COMPILER = re.compile(r'^\$|^backend_compile')
_LENDING = ('autotuning', 'cuDNN graphs')  # Phases whose kernels other threads compile.


def _nested(events):
  """(event, [enclosing events, outermost first]) of one thread's events. Where spans overlap
  without nesting, an event's enclosing ones are those still open at its start."""
  stack = []
  for event in sorted(events, key=lambda e: (e.start_ns, -e.duration_ns)):
    stack = [e for e in stack if e.end_ns > event.start_ns]
    yield event, list(stack)
    stack.append(event)


def _phase(chain):
  """The phase of an event from its chain of names (thread, enclosing spans, its own)."""
  chain = [n for n in chain if not _NOT_COMPILER.search(n)]
  named = [n for n in chain if not _REWRITE_PASS.search(n)]
  for name in named:
    for phase, pattern in COMPILE_PHASES:
      if re.search(pattern, name, re.I):
        return phase
  return 'HLO passes' if any(_PIPELINE.search(n) for n in chain) else 'other'


def compile_phases(data):
  """From a trace of an XLA compile (ProfileData): ({phase: [ms on the compiling thread, ms on
  the threads beside it]}, [(ms, calls, event name, phase)]), in self time (an event's time less
  that of the events inside it on its thread). The compiling thread (the one whose compiler
  spans are longest) adds up to the compile's wall time, a span that waits on other threads
  counting as its own phase; the threads beside it (parallel code generation, autotuning) are
  busy time, which can pass the wall time."""
  threads = []
  for plane in data.planes:
    if not plane.name.startswith('/host:'):
      continue
    for line in plane.lines:
      nested = list(_nested(line.events))
      inner_ns = collections.Counter()
      for event, outer in nested:
        if outer:  # What of it lies inside its parent.
          inner_ns[id(outer[-1])] += min(event.end_ns, outer[-1].end_ns) - event.start_ns
      rows, extent_ns = [], 0
      for event, outer in nested:
        if _NOT_COMPILER.search(event.name):
          continue
        if not any(not _NOT_COMPILER.search(e.name) for e in outer):
          extent_ns += event.duration_ns  # An outermost compiler span of this thread.
        rows.append((event, _phase([line.name] + [e.name for e in outer] + [event.name]),
                     max(0, event.duration_ns - inner_ns[id(event)]) / 1e6))
      threads.append((extent_ns, rows))
  threads.sort(key=lambda t: -t[0])
  # The compiling thread's lending spans (autotuning, cuDNN graphs), outermost, as intervals.
  lending = [(e.start_ns, e.end_ns, phase) for e, phase, _ in (threads[0][1] if threads else ())
             if phase in _LENDING]
  per_phase = collections.defaultdict(lambda: [0.0, 0.0])
  per_event = collections.defaultdict(lambda: [0.0, 0])
  for i, (_, rows) in enumerate(threads):
    for event, phase, ms in rows:
      if i:
        phase = next((p for start, end, p in lending if start <= event.start_ns < end), phase)
      per_phase[phase][min(i, 1)] += ms
      per_event[event.name, phase][0] += ms
      per_event[event.name, phase][1] += 1
  return dict(per_phase), sorted(
      ((ms, n, name, phase) for (name, phase), (ms, n) in per_event.items()), reverse=True)
