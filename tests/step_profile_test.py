"""bench/step_profile.py: the step's trace read back and laid out by part and kind of op.

It runs tiny on the CPU so that it cannot rot; the GPU's own op forms (cuBLAS and cuDNN custom
calls, Triton GEMM fusions) are checked on HLO text of the form XLA:GPU prints.
"""

import os
import pathlib
import re
import subprocess
import sys
import types

import jax
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'bench'))
import hlo_profile  # noqa: E402  (no side effects: bench/step_profile.py's reading)

# An XLA:GPU step's ops (shortened): cuDNN's fused attention with dropout, a cuBLAS GEMM, a
# Triton GEMM fusion, dropout bits fused into a GELU, the optimizer's update, a copy fusion.
GPU_HLO = '''HloModule jit_train_step, is_scheduled=true

%fused_gelu (p0: bf16[8,128,3072]) -> bf16[8,128,3072] {
  %p0 = bf16[8,128,3072]{2,1,0} parameter(0)
  %key = u32[2]{0} xor(%k, %k), metadata={op_name="jit(train_step)/jvp(BertForPreTraining)/bert/layers_3/Dropout_0/xor"}
  %bits = u32[8,128,3072]{2,1,0} xor(%k, %k), metadata={op_name="jit(train_step)/jvp(BertForPreTraining)/bert/layers_3/Dropout_0/xor"}
  ROOT %gelu = bf16[8,128,3072]{2,1,0} multiply(%p0, %p0), metadata={op_name="jit(train_step)/jvp(BertForPreTraining)/bert/layers_3/mlp/mul"}
}

%triton_gemm_computation (p0: bf16[1024,768], p1: bf16[768,3072]) -> bf16[1024,3072] {
  %p0 = bf16[1024,768]{1,0} parameter(0)
  %p1 = bf16[768,3072]{1,0} parameter(1)
  ROOT %dot.1 = bf16[1024,3072]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(train_step)/transpose(jvp(BertForPreTraining))/bert/layers_3/mlp/intermediate/dot_general"}
}

%fused_adam (p0: f32[768], p1: f32[768]) -> f32[768] {
  %p0 = f32[768]{0} parameter(0)
  %fold = u32[2]{0} shift-left(%p0, %p0), metadata={op_name="jit(train_step)/jvp(BertForPreTraining)/bert/layers_3/Dropout_0/shift_left"}
  %p1 = f32[768]{0} parameter(1)
  ROOT %add.9 = f32[768]{0} add(%p0, %p1), metadata={op_name="jit(train_step)/optimizer/add"}
}

%fused_bias_gelu (p0: bf16[1024,3072], p1: bf16[3072]) -> bf16[1024,3072] {
  %p0 = bf16[1024,3072]{1,0} parameter(0)
  %p1 = bf16[3072]{0} parameter(1)
  %b = bf16[1024,3072]{1,0} broadcast(%p1), dimensions={1}
  ROOT %add.2 = bf16[1024,3072]{1,0} add(%p0, %b), metadata={op_name="jit(train_step)/jvp(BertForPreTraining)/bert/layers_3/mlp/intermediate/add"}
}

%small_call (p: (f32[768], f32[768], f32[768], f32[768], f32[768], /*index=5*/f32[768])) -> f32[768] {
  %p = (f32[768]{0}, f32[768]{0}, f32[768]{0}, f32[768]{0}, f32[768]{0}, /*index=5*/f32[768]{0}) parameter(0)
  %e = f32[768]{0} get-tuple-element(%p), index=5
  ROOT %scale = f32[768]{0} multiply(%e, %e), metadata={op_name="jit(train_step)/optimizer/matmul_free_scale"}
}

%fused_copy (p0: bf16[768,3072]) -> bf16[3072,768] {
  %p0 = bf16[768,3072]{1,0} parameter(0)
  ROOT %transpose.4 = bf16[3072,768]{1,0} transpose(%p0), dimensions={1,0}
}

ENTRY %main (a: bf16[8,12,128,64], b: bf16[1024,768], c: bf16[768,3072], d: f32[768]) -> (bf16[8,12,128,64], u8[0]) {
  %a = bf16[8,12,128,64]{3,2,1,0} parameter(0)
  %b = bf16[1024,768]{1,0} parameter(1)
  %c = bf16[768,3072]{1,0} parameter(2)
  %d = f32[768]{0} parameter(3)
  %custom-call.7 = (bf16[8,12,128,64]{3,2,1,0}, u8[0]{0}) custom-call(%a, %a, %a), custom_call_target="__cudnn$fmhaSoftmaxDropout", backend_config={"cudnn_fmha_backend_config":{"dropout_rate":0.1,"seed":42}}, metadata={op_name="jit(train_step)/jvp(BertForPreTraining)/bert/layers_3/attention/dot_product_attention"}
  %cublas-gemm.2 = (bf16[1024,3072]{1,0}, s8[4194304]{0}) custom-call(%b, %c), custom_call_target="__cublas$lt$matmul", metadata={op_name="jit(train_step)/jvp(BertForPreTraining)/bert/layers_3/mlp/intermediate/dot_general"}
  %gemm_fusion = bf16[1024,3072]{1,0} fusion(%b, %c), kind=kCustom, calls=%triton_gemm_computation, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
  %loop_fusion = bf16[8,128,3072]{2,1,0} fusion(%a), kind=kLoop, calls=%fused_gelu
  %adam_fusion = f32[768]{0} fusion(%d, %d), kind=kLoop, calls=%fused_adam
  %copy_fusion = bf16[3072,768]{1,0} fusion(%c), kind=kLoop, calls=%fused_copy
  %gelu_fusion = bf16[1024,3072]{1,0} fusion(%gemm_fusion, %c), kind=kLoop, calls=%fused_bias_gelu
  %t = (f32[768]{0}, f32[768]{0}, f32[768]{0}, f32[768]{0}, f32[768]{0}, /*index=5*/f32[768]{0}) tuple(%d, %d, %d, %d, %d, /*index=5*/%d)
  %call.1 = f32[768]{0} call(%t), to_apply=%small_call
  ROOT %tuple = (bf16[8,12,128,64]{3,2,1,0}, u8[0]{0}) tuple(%a, %a)
}
'''  # noqa: E501  (HLO's lines as XLA prints them)


def test_gpu_ops_are_told_apart_by_kind_part_and_direction():
  instructions, computations = hlo_profile.parse_hlo(GPU_HLO)
  found = {name: (hlo_profile.kind(name, instructions, computations),
                  hlo_profile.part(source := hlo_profile.source(name, instructions,
                                                                  computations)),
                  hlo_profile.direction(source))
           for name in computations['main'] if instructions[name].opcode not in
           hlo_profile.CONTAINERS or name == 'call.1'}
  assert found == {
      'custom-call.7': ('attention kernel', 'attention', 'forward'),
      'cublas-gemm.2': ('matmul', 'mlp', 'forward'),
      # A fusion XLA made has no metadata of its own: its root's tells where it came from.
      'gemm_fusion': ('matmul', 'mlp', 'backward'),
      'loop_fusion': ('random bits', 'mlp', 'forward'),  # Dropout bits fused into the GELU.
      'adam_fusion': ('elementwise', 'optimizer', 'update'),  # A key's hash is no mask.
      'copy_fusion': ('copy/transpose', 'other', 'forward'),
      # A GEMM's consumer is no matmul; nor is an op whose name says 'matmul'.
      'gelu_fusion': ('elementwise', 'mlp', 'forward'),
      'call.1': ('elementwise', 'optimizer', 'update'),
  }, found
  # A computation whose header holds /*index=5*/ is its own, not its neighbour's tail.
  assert computations['small_call'] == ['p', 'e', 'scale'], computations['small_call']
  assert computations['fused_copy'] == ['p0', 'transpose.4'], computations['fused_copy']


def test_a_container_counts_only_where_nothing_inside_it_was_timed():
  instructions, computations = hlo_profile.parse_hlo(GPU_HLO)
  # XLA:CPU runs a small call as one thunk: its time is the call's.
  untimed = {'call.1': [4_000_000, 2]}
  _, per_kind, listed, _ = hlo_profile.attribute(untimed, instructions, computations, 2)
  assert per_kind == {'elementwise': 2.0} and listed[0][2] == 'call.1'
  # Where its inside was timed, the container would count that time twice.
  timed = {'call.1': [4_000_000, 2], 'scale': [3_000_000, 2]}
  _, per_kind, listed, _ = hlo_profile.attribute(timed, instructions, computations, 2)
  assert per_kind == {'elementwise': 1.5} and [op[2] for op in listed] == ['scale']


def _gpu_trace(xla_ops_line):
  """A GPU trace (XSpace text): the host's thunk-less plane, then the device's stream of
  kernels (a cuBLAS GEMM in two kernels, cuDNN's attention, a kernel of another program) and,
  with xla_ops_line, the line of XLA ops a trace may also carry over the same time."""
  def event(name, duration_us, op, module='jit_train_step'):
    return (f'events {{ metadata_id: {names[name]} offset_ps: 0 duration_ps: '
            f'{duration_us * 1000000} stats {{ metadata_id: 1 str_value: "{op}" }} '
            f'stats {{ metadata_id: 2 str_value: "{module}" }} }}')
  names = {'sm90_gemm': 10, 'splitk_reduce': 11, 'cudnn_fmha': 12, 'other': 13,
           'cublas-gemm.2': 14, 'custom-call.7': 15}
  stream = [event('sm90_gemm', 30, 'cublas-gemm.2'), event('splitk_reduce', 2, 'cublas-gemm.2'),
            event('cudnn_fmha', 50, 'custom-call.7'), event('other', 99, 'x', module='jit_init')]
  ops = [event('cublas-gemm.2', 33, 'cublas-gemm.2'), event('custom-call.7', 51, 'custom-call.7')]
  lines = [('Stream #7(Compute)', stream)] + ([('XLA Ops', ops)] if xla_ops_line else [])
  return ('planes { id: 1 name: "/host:CPU" lines { id: 1 name: "python" } }\n'
          'planes { id: 2 name: "/device:GPU:0" '
          + ''.join(f'lines {{ id: {i + 1} name: "{name}" timestamp_ns: 1000 {" ".join(evs)} }} '
                    for i, (name, evs) in enumerate(lines))
          + ''.join(f'event_metadata {{ key: {k} value {{ id: {k} name: "{n}" }} }} '
                    for n, k in names.items())
          + 'stat_metadata { key: 1 value { id: 1 name: "hlo_op" } } '
          'stat_metadata { key: 2 value { id: 2 name: "hlo_module" } } }')


@pytest.mark.parametrize('xla_ops_line, expected', [
    (False, {'cublas-gemm.2': [32000, 2], 'custom-call.7': [50000, 1]}),  # Kernels summed.
    (True, {'cublas-gemm.2': [33000, 1], 'custom-call.7': [51000, 1]}),  # That line alone.
])
def test_a_gpu_trace_is_timed_by_its_kernels_once_each(xla_ops_line, expected):
  data = jax.profiler.ProfileData.from_text_proto(_gpu_trace(xla_ops_line))
  times, where = hlo_profile.op_times(data, 'jit_train_step')
  assert (times, where) == (expected, '/device:GPU:0')


def _compile_trace():
  """A trace of an XLA:GPU compile (XSpace text), with the span names XLA gives: the Python
  thread waiting in jax's wrapper; the compiling thread (the client's compile, a pass pipeline
  holding a rewrite for Triton and the GEMM autotuner, which compiles a Triton candidate itself,
  then code generation: LLVM IR, IR to PTX, PTX to a cubin, and a cuDNN graph); a pool thread
  beside it compiling candidates while the autotuner runs, then part of the module's PTX."""
  def event(name, start_ms, ms):
    return (f'events {{ metadata_id: {names.setdefault(name, len(names) + 1)} '
            f'offset_ps: {start_ms * 10**9} duration_ps: {ms * 10**9} }}')
  names = {}
  python = [event('$stages.py:586 compile', 0, 100), event('backend_compile_and_load', 1, 98)]
  compiler = [event('PjRtStreamExecutorClient::Compile', 1, 98),
              event('HLO Transforms:jit_train_step', 2, 60),
              event('optimization (jit_train_step)', 2, 8),
              event('triton-gemm-rewriter', 3, 5),
              event('gemm-fusion-autotuner', 10, 40),
              event('TritonWrapper', 20, 30),  # A candidate kernel, compiled to be timed.
              event('GpuCompiler::CompileToBackendResult', 62, 36),
              event('CompileModuleToLlvmIr', 63, 10),
              event('Compiling IR:jit_train_step', 73, 10),
              event('PTX->CUBIN', 83, 5),
              event('CuDnnFusionCompiler', 88, 8)]
  beside = [event('TritonWrapper', 12, 6), event('Compiling IR:jit_train_step', 74, 9)]
  lines = [('python', python), ('XlaCompile', compiler), ('tf_xla_compile_pool', beside)]
  return ('planes { id: 1 name: "/host:CPU" '
          + ''.join(f'lines {{ id: {i + 1} name: "{name}" timestamp_ns: 1000 {" ".join(evs)} }} '
                    for i, (name, evs) in enumerate(lines))
          + ''.join(f'event_metadata {{ key: {k} value {{ id: {k} name: "{n}" }} }} '
                    for n, k in names.items()) + ' }')


def test_a_compile_trace_is_split_by_phase_on_the_compiling_thread():
  data = jax.profiler.ProfileData.from_text_proto(_compile_trace())
  per_phase, events = hlo_profile.compile_phases(data)
  # The compiling thread adds up to its span (98 ms), jax's waiting wrapper counts nowhere:
  # autotuning holds the Triton kernel it compiled, a rewrite for Triton is an HLO pass; the
  # pool's candidate kernel, compiled while the autotuner ran, is autotuning too.
  assert {p: [round(t, 6) for t in ms] for p, ms in per_phase.items()} == {
      'other': [2 + 3, 0],  # The client's and the backend's own time, outside the phases.
      'HLO passes': [60 - 8 - 40 + 8, 0],
      'autotuning': [40, 6],
      'code generation': [10 + 10 + 5, 9],
      'cuDNN graphs': [8, 0]}
  assert sum(ms for ms, _ in per_phase.values()) == pytest.approx(98)
  assert events[0] == (pytest.approx(30 + 6), 2, 'TritonWrapper', 'autotuning')
  assert (pytest.approx(19), 2, 'Compiling IR:jit_train_step', 'code generation') in events
  assert ('triton-gemm-rewriter', 'HLO passes') in {(e[2], e[3]) for e in events}
  assert not any(e[2].startswith(('$', 'backend_compile')) for e in events)


def test_spans_that_overlap_without_nesting_are_not_counted_twice():
  """A span that straddles its neighbour's end (merged from another tracer) leaves the next
  event outside the one already closed, and a parent loses only what lies inside it."""
  def span(name, start, end):
    return types.SimpleNamespace(name=name, start_ns=start, end_ns=end, duration_ns=end - start)
  a, b, c = span('A', 0, 100), span('B', 50, 110), span('C', 105, 108)
  assert [(e.name, [o.name for o in outer]) for e, outer in hlo_profile._nested([c, b, a])] == [
      ('A', []), ('B', ['A']), ('C', ['B'])]
  line = types.SimpleNamespace(name='XlaCompile', events=[a, b, c])
  data = types.SimpleNamespace(planes=[types.SimpleNamespace(name='/host:CPU', lines=[line])])
  per_phase, _ = hlo_profile.compile_phases(data)
  assert per_phase == {'other': [pytest.approx((50 + 57 + 3) / 1e6), 0.0]}


@pytest.mark.parametrize('op_name, expected', [
    ('jit(train_step)/jvp(BertForPreTraining)/bert/embeddings/layer_norm/mul', 'embeddings'),
    ('jit(train_step)/jvp(BertForPreTraining)/bert/layers_0/attention/Dropout_0/mul',
     'attention'),
    ('jit(train_step)/transpose(jvp(BertForPreTraining))/bert/layers_11/output_layer_norm/mul',
     'layer norms'),
    ('jit(train_step)/jvp(BertForPreTraining)/bert/layers_2/Dropout_0/select_n', 'dropout'),
    ('jit(train_step)/jvp(BertForPreTraining)/bert/layers/while/body/add', 'residual adds'),
    ('jit(train_step)/transpose(jvp(BertForPreTraining))/bert/while/body/closed_call',
     'layer scan'),
    ('jit(train_step)/jvp(BertForPreTraining)/mlm/layer_norm/mul', 'mlm head'),
    ('jit(train_step)/transpose(jvp())/reduce_sum', 'loss'),
    ('jit(train_step)/optimizer/sqrt', 'optimizer'),
    ('jit(train_step)/add', 'other'),
])
def test_parts_follow_the_name_stack(op_name, expected):
  assert hlo_profile.part(op_name) == expected


@pytest.mark.parametrize('scan', ['off', 'on'])
def test_the_cpu_step_is_profiled_by_part_kind_and_op(scan):
  env = dict(os.environ, XLA_FLAGS='', JAX_PLATFORMS='cpu', CUDA_VISIBLE_DEVICES='')
  run = subprocess.run(
      [sys.executable, 'bench/step_profile.py', '--sizes=tiny', '--batches=4', '--seq_len=32',
       '--vocab=512', '--steps=2', '--top=6', f'--scan_layers={scan}'],
      capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  out = run.stdout
  layers = 'unrolled' if scan == 'off' else 'scanned'
  assert out.startswith('# tiny/32 batch 4, float32, dropout 0.1, attention dropout 0.1; '
                        f'attention xla, layers {layers} (set): CPU defaults; cpu (cpu)'), out
  head = re.search(r'^step ([\d.]+) ms wall \(([\d.]+) ms traced\); ops ([\d.]+) ms \(\d+% '
                   r'of the traced wall; (\d+) ops, timed on /host:CPU; per update, over 2\)$',
                   out, re.M)
  assert head and float(head.group(1)) > 0 and int(head.group(4)) > 100, out
  ops_ms = float(head.group(3))
  parts = {m.group(1): [float(v) for v in m.groups()[1:]] for m in re.finditer(
      r'^  ([a-z ]+?) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)%$', out, re.M)}
  # The model's every part, the loss and the optimizer took time; the optimizer only updates,
  # the layers run forward and backward.
  assert {'embeddings', 'attention', 'mlp', 'layer norms', 'mlm head', 'nsp head', 'pooler',
          'loss', 'optimizer'} <= set(parts), out
  for name in ('attention', 'mlp', 'mlm head'):
    forward, backward, update, _, _ = parts[name]
    assert forward > 0 and backward > 0 and update == 0, (name, out)
  assert parts['optimizer'][:2] == [0, 0] and parts['optimizer'][2] > 0, out
  for name, (forward, backward, update, ms, _) in parts.items():
    assert ms == pytest.approx(forward + backward + update, abs=0.02), (name, out)
  assert sum(p[4] for p in parts.values()) == pytest.approx(100, abs=0.1 * len(parts)), out
  assert sum(p[3] for p in parts.values()) == pytest.approx(ops_ms, abs=0.01 * len(parts)), out
  kinds = dict(re.findall(r'^  (matmul|elementwise|reduction|random bits|copy/transpose) +'
                          r'([\d.]+) +[\d.]+%$', out, re.M))
  assert {'matmul', 'elementwise', 'random bits'} <= set(kinds), out
  assert ('layer scan' in parts) == (scan == 'on'), out  # nn.scan's slicing, its own part.
  top = re.findall(r'^  (\S+) +([\d.]+) +[\d.]+% +(\d+)  ([a-z /]+), (.+)$', out, re.M)
  assert len(top) == 6, out
  # A loop is timed through the ops inside it: the loop's own span would count them twice.
  assert not any(t[0].startswith(('while', 'call')) for t in top), out
  assert [float(t[1]) for t in top] == sorted((float(t[1]) for t in top), reverse=True), out
  # XLA's compile, traced: its compiling thread's phases add up to (nearly) its wall time.
  first = re.search(r'^compile: state [\d.]+ s, trace [\d.]+ s, lowering [\d.]+ s, XLA '
                    r'([\d.]+) s \(traced; [\d,]+ StableHLO lines\); XLA\'s compiling thread '
                    r'([\d.]+) s$', out, re.M)
  assert first and 0 < float(first.group(2)) <= float(first.group(1)) + 0.05, out
  phases = dict(re.findall(r'^  ([a-zA-Z ]+?) +([\d.]+) +[\d.]+% +[\d.]+$', out, re.M))
  assert {'HLO passes', 'code generation'} <= set(phases), out
  # Printed rounded: the thread to 0.1 s, each phase to 0.01 s.
  rounding = 0.05 + 0.005 * len(phases) + 1e-9
  assert sum(map(float, phases.values())) == pytest.approx(float(first.group(2)),
                                                           abs=rounding), out
  events = re.findall(r'^  (\S.*?) +([\d.]+) +(\d+)  (HLO passes|code generation|other|'
                      r'autotuning|cuDNN graphs)$', out, re.M)
  assert 0 < len(events) <= 10, out
