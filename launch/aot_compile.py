r"""Compiles the pre-training step for a TPU slice ahead of time, on any machine, before booking it.

  pip install -e ".[tpu]"   # libtpu, for its compiler; no TPU is needed
  python -m launch.aot_compile --topology=v5e:4x4 \
      --config=configs/pretrain.py:size=large,vocab=30592,seq=512,dtype=bfloat16 \
      --config.mesh.data=1 --config.mesh.fsdp=-1

It builds train_step exactly as the training loop does (train_state.train_state_shapes for the
state's shapes and shardings, train_state.jit_train_step, lowered under the same mesh and
rules), on abstract inputs (ShapeDtypeStructs with shardings) over the devices of a topology
description from libtpu, and compiles it with the TPU compiler: once per phase of the run
(pretrain.phases: with phase2.fraction > 0 phase 2 is its own compile, at phase2's length and
predictions), each on the batch the input pipeline gives (packed rows, pack=N, carry the
instances' starts and NSP labels). The config is checked first as bertjax.main checks it
(config_check); a fine-tuning or embedding config is refused (this compiles pre-training's
step). A config that cannot be sharded fails before anything is traced; one that does not fit
fails in the compiler with RESOURCE_EXHAUSTED. Each of those, and a flag or --topology refused,
exits 78 (bertjax.main's refusal: tpu_pod --aot_check refuses the launch on it); a crash, 1.
Printed per phase: the per-device memory
(arguments, outputs, temporaries, generated code) against the chip's HBM, XLA's FLOPs per device
against bertjax/training/perf.py's formula; then the shardings of the biggest parameters.

--topology=<gen>:<chips> is v4:2x2x4 (v4-32, 16 chips), v5e:4x4 (v5litepod-16), v5p:2x2x4,
v6e:4x4, ...: libtpu's names. --topology=cpu:N compiles for N simulated CPU devices instead (no
libtpu): the same sharding check, but the CPU compiler's memory figures, a rough guide only.

Expected (jax 0.10.2, libtpu 0.0.42.1; vocab 30592, bf16 compute, AdamW, batch 256; per device;
1-3 min per compile on 2 CPU cores; XLA's temporaries vary by a few % between runs):
  base,  seq 128, v4:2x2x4, data=16:   3.5 GiB of 32 GiB (the replicated state is 1.2 GiB)
  base,  seq 128, v5e:4x4,  fsdp=16:   1.8 GiB of 16 GiB
  large, seq 512, v4:2x2x4, fsdp=16:  25.0 GiB of 32 GiB
  large, seq 512, v5e:4x4,  fsdp=16:  does not fit (24.5 GiB of temporaries); 6.0 GiB with
                                      remat_policy=dots, 13.1 GiB with grad_accum_steps=2
XLA counts a loop's body once, so with scan_layers (base, large) its FLOPs are far too low;
--count_flops extrapolates from unrolled 1- and 2-layer copies: 1.03 x bertjax/training/perf.py's
formula for base with data=16 on v4, but ~0.8 with fsdp (the TPU compiler turns the
weight-gradient matmuls into windowed loops of its own) and ~0.4 with remat. The CPU compiler
gives 1.02-1.08. libtpu prints warnings about TPU_ACCELERATOR_TYPE / TPU_WORKER_HOSTNAMES:
harmless here.
With --config.model.attention_impl=splash --config.model.attention_dropout_rate=0 (the Pallas
kernel, compiled by Mosaic: the model traces it for the mesh's TPU devices), large, seq 512,
fsdp=16: v6e:4x4 21.1 GiB of 32 (xla attention: 28.4); v5e:4x4 does not fit (20.3 GiB of
temporaries; xla 27.5), 6.7 GiB with remat_policy=dots (xla 6.2).
Known: libtpu 0.0.42.1 crashes (SIGSEGV, a stack overflow in its convolution emitter) compiling
base at seq 128 with remat_policy dots or full; large at seq 512 with dots compiles.
"""

import os
import sys


def _simulated_cpu_devices(argv) -> int:
  """N of --topology=cpu:N (0 otherwise), read before jax is imported."""
  for i, arg in enumerate(argv):
    value = arg.partition('=')[2] if arg.startswith('--topology=') else (
        argv[i + 1] if arg == '--topology' and i + 1 < len(argv) else '')
    if value.startswith('cpu:') and value[4:].isdigit():
      return int(value[4:])
  return 0


if __name__ == '__main__':
  # The device count of the CPU backend is fixed when jax starts; libtpu is only a compiler
  # here, so no local accelerator is initialised either.
  if _simulated_cpu_devices(sys.argv):
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_'
                               f'device_count={_simulated_cpu_devices(sys.argv)}').strip()
  os.environ.setdefault('JAX_PLATFORMS', 'cpu')
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  if not __package__:  # `python launch/aot_compile.py`: import bertjax and configs from the repo.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import functools  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from bertjax import command_flags  # noqa: E402
from bertjax import config_args  # noqa: E402
from bertjax import config_check  # noqa: E402
from bertjax import console  # noqa: E402
from bertjax import job_config  # noqa: E402

# pretrain imports TensorFlow (its input pipeline): its C++ start-up lines (oneDNN, and a
# CUDA build probing for a GPU when its devices are first listed) are held back, shown only if
# this fails, as bertjax.main holds a job's.
with console.stderr_held():
  from bertjax import pretrain  # noqa: E402  # pylint: disable=g-import-not-at-top
  from bertjax.text import fast_tokenizer  # noqa: E402  # pylint: disable=g-import-not-at-top
  fast_tokenizer.import_tf()[0].config.list_physical_devices()
from bertjax.model import encoder  # noqa: E402
from bertjax.model import platform_defaults  # noqa: E402
from bertjax.records import example_encoding  # noqa: E402
from bertjax.training import optimizer as optimizer_lib  # noqa: E402
from bertjax.training import perf  # noqa: E402
from bertjax.training import sharding  # noqa: E402
from bertjax.training import train_state  # noqa: E402
from launch import cloud  # noqa: E402

if __name__ == '__main__' and (_MISSING := command_flags.unreadable_flagfile(sys.argv[1:])):
  print(f'FATAL Flags parsing error: {_MISSING}', file=sys.stderr)  # As bertjax.main says it.
  sys.exit(console.REFUSED_EXIT)
_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file (get_config(arg)).',
                                          lock_config=True)
_TOPOLOGY = flags.DEFINE_string(
    'topology', None, "TPU slice as libtpu names it ('v5e:4x4', 'v4:2x2x4', 'v5p:2x2x4', "
    "'v6e:4x4'), or 'cpu:N' for N simulated CPU devices (no libtpu needed).")
_TOP_PARAMS = flags.DEFINE_integer('top_params', 6, 'How many of the biggest parameters to list.')
_COUNT_FLOPS = flags.DEFINE_bool(
    'count_flops', False, 'With scan_layers or grad_accum_steps > 1, also compile unrolled 1- and '
    '2-layer copies of the step for XLA\'s FLOP count (it counts a loop body once); ~2x the time.')
flags.mark_flags_as_required(['config', 'topology'])

# Per TPU generation: libtpu's chip config (a v4 or v5p chip is one megacore device, as jax shows
# it on a real slice; 'default' would give one device per TensorCore) and HBM per chip in GiB.
TPU_CHIPS = {
    'v4': ('megacore', 32),
    'v5e': ('default', 16),
    'v5p': ('megacore', 95),
    'v6e': ('default', 32),
}
GIB = 2**30


def topology_devices(topology: str) -> tuple[list, int | None]:
  """(devices, HBM bytes per device or None for CPU) of 'v5e:4x4'-style names or 'cpu:N'."""
  generation, _, shape = topology.partition(':')
  if generation == 'cpu':
    if not shape.isdigit() or int(shape) < 1:
      raise ValueError(f'--topology={topology}: write cpu:N with N simulated devices, e.g. cpu:8.')
    devices = jax.devices('cpu')
    if len(devices) < int(shape):
      raise ValueError(
          f'--topology={topology} needs {shape} CPU devices but jax has {len(devices)}: set '
          f'XLA_FLAGS=--xla_force_host_platform_device_count={shape} before jax is imported '
          '(running this file does it).')
    return devices[:int(shape)], None
  if generation not in TPU_CHIPS or not shape:
    raise ValueError(f'--topology={topology}: use <generation>:<chips>, generation one of '
                     f'{", ".join(TPU_CHIPS)} (e.g. v5e:4x4, v4:2x2x4), or cpu:N.')
  chip_config, hbm_gib = TPU_CHIPS[generation]
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  # libtpu serves as a compiler only, opening no TPU: let several such processes run at once
  # (its lock file otherwise admits one per machine).
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
  try:
    description = topologies.get_topology_desc(topology_name=topology, platform='tpu',
                                               chip_config_name=chip_config)
  except Exception as e:  # libtpu missing, or a shape it does not know.
    said = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
    raise ValueError(
        f'--topology={topology}: libtpu cannot describe it ({said}): install libtpu (`pip '
        f'install -e ".[tpu]"`) and name a {generation} slice shape, or pass --topology=cpu:N '
        'to check the sharding without libtpu.') from e
  return list(description.devices), hbm_gib * GIB


def step_phases(config) -> list[pretrain.Phase]:
  """The run's phases as pretrain.phases plans them (one; two with phase2.fraction > 0), each a
  batch shape train_step is compiled for. Nothing is read or made: with the embedded corpus
  (data.train_files '') the plan is taken with placeholder file names, whose shapes are the
  same."""
  if not config.data.train_files:  # phases() would make the corpus's files under a workdir.
    config = config.copy_and_resolve_references()
    config.data.train_files = config.phase2.train_files = '<the embedded corpus>'
  return pretrain.phases(config, workdir='')


def abstract_batch(config, batch_sharding, phase: pretrain.Phase | None = None) -> dict:
  """The global batch train_step receives in `phase` (default: data's lengths), shapes only:
  the features input_pipeline reads (record_check.feature_spec: packed rows add instance_starts
  and next_sentence_weights, and hold a label per instance; no NSP, no labels) as int32 and
  float32, an unpacked row's one label as [B]; dynamic masking adds the masked_lm_* that static
  files hold, so the keys are the same."""
  length, predictions = ((phase.max_seq_length, phase.max_predictions_per_seq) if phase else
                         (config.data.max_seq_length, config.data.max_predictions_per_seq))
  instances = config.data.max_instances_per_row
  spec = example_encoding.feature_spec(length, predictions, static_masking=True,
                                       nsp=config.model.nsp, max_instances_per_row=instances)
  batch = {}
  for name, (shape, dtype) in spec.items():
    if name == 'next_sentence_labels' and instances == 1:
      shape = ()  # input_pipeline reshapes the one label per row to [B].
    batch[name] = jax.ShapeDtypeStruct(
        (config.global_batch_size, *shape), jnp.float32 if dtype == 'float32' else jnp.int32,
        sharding=batch_sharding)
  return batch


def settle_model(config, devices) -> str:
  """config.model's 'auto' fields (attention kernel, layer scan) chosen, in place, for the
  platform `devices` are, as the training loop chooses them at a run's start on that platform
  (model/platform_defaults.py); returns the statement of the choice."""
  return platform_defaults.settle(config.model, devices[0].platform)


def compile_train_step(config, devices, phase: pretrain.Phase | None = None):
  """(compiled train_step, mesh, abstract state) for `config` on a mesh over `devices`, for the
  batches of `phase` (step_phases; default: data's lengths); config.model's 'auto' fields are
  settled for their platform (settle_model).

  Raises ValueError before tracing anything when the config cannot run on that mesh.
  """
  settle_model(config, devices)
  mesh = sharding.make_mesh(config.mesh, devices)
  train_state.check_config(config, mesh, vocab_entries=None)
  hosts = len({d.process_index for d in devices})
  if config.global_batch_size % hosts:
    raise ValueError(f'global_batch_size {config.global_batch_size} is not divisible by the '
                     f'{hosts} hosts of this slice.')
  tx, schedule = optimizer_lib.for_run(config)  # As the loop: total_steps 0 = the run's steps.
  objective = pretrain.objective(config)
  rules = sharding.parse_rules(config.mesh.rules)
  state, state_shardings = train_state.train_state_shapes(config, objective, tx, mesh, rules)
  batch_shardings = sharding.batch_sharding(mesh, rules)
  step_fn = train_state.jit_train_step(config, objective, tx, schedule, state_shardings,
                                       batch_shardings)
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    lowered = step_fn.lower(state, abstract_batch(config, batch_shardings, phase))
  return lowered.compile(), mesh, state


def memory_per_device(compiled) -> dict:
  """Bytes per device from XLA's buffer assignment; 'total' counts donated buffers once."""
  stats = compiled.memory_analysis()
  memory = {'arguments': stats.argument_size_in_bytes, 'outputs': stats.output_size_in_bytes,
            'aliased': stats.alias_size_in_bytes, 'temporaries': stats.temp_size_in_bytes,
            'generated_code': stats.generated_code_size_in_bytes}
  memory['total'] = (memory['arguments'] + memory['outputs'] - memory['aliased']
                     + memory['temporaries'] + memory['generated_code'])
  return memory


def xla_flops_per_device(compiled) -> float | None:
  """FLOPs of one step on one device as XLA's cost analysis counts them (None if it has none)."""
  costs = compiled.cost_analysis()
  if isinstance(costs, (list, tuple)):  # Older jax: one dict per program.
    costs = costs[0] if costs else None
  return float(costs['flops']) if costs and 'flops' in costs else None


def matmul_loops(compiled) -> int:
  """While loops whose body holds a matmul: XLA's cost analysis counts each body once.

  Loops without one (the RNG's) cost next to nothing; those with one are the layer scan, the
  accumulation, or the TPU compiler's own (windowed einsums under fsdp, rematerialisation).
  """
  text = compiled.as_text()
  computations = {}
  for block in re.split(r'\n(?=\S)', text):  # An HLO computation starts in column 0.
    name = re.match(r'(?:ENTRY )?%([\w.\-]+) ', block)
    if name:
      computations[name.group(1)] = block

  @functools.cache
  def has_matmul(name):
    block = computations[name]
    return (' dot(' in block or ' convolution(' in block or any(
        has_matmul(called) for called in set(re.findall(r'%([\w.\-]+)', block)) - {name}
        if called in computations))

  return sum(has_matmul(body) for body in re.findall(r' while\(.*?body=%([\w.\-]+)', text))


def unrolled_flops_per_device(config, devices, phase=None) -> tuple[float | None, int]:
  """(XLA's FLOPs per device, while loops left) of the step without layer scan or accumulation.

  Extrapolated from 1- and 2-layer copies: the layers are identical, so FLOPs are linear in
  depth. Loops the compiler makes itself (see matmul_loops) still count once.
  """
  counts = []
  for layers in (1, 2):
    variant = config.copy_and_resolve_references()
    variant.model.num_layers = layers
    variant.model.scan_layers = False
    variant.grad_accum_steps = 1
    compiled = compile_train_step(variant, devices, phase)[0]
    counts.append(xla_flops_per_device(compiled))
  if None in counts:
    return None, 0
  return counts[0] + (counts[1] - counts[0]) * (config.model.num_layers - 1), matmul_loops(compiled)


def shard_bytes(abstract_tree) -> int:
  """Bytes one device holds of a tree of ShapeDtypeStructs with shardings (the biggest shard)."""
  return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
             for x in jax.tree.leaves(abstract_tree))


def biggest_params(params, count: int) -> list[tuple[str, tuple, str, tuple]]:
  """(path, shape, partition spec, per-device shape) of the `count` biggest parameters."""
  flat = flax.traverse_util.flatten_dict(params, sep='/')
  rows = sorted(flat.items(), key=lambda item: -math.prod(item[1].shape))[:count]
  return [(path, x.shape, str(tuple(x.sharding.spec)), x.sharding.shard_shape(x.shape))
          for path, x in rows]


def _memory_savers(config) -> list[str]:
  """Flags that shrink the step's per-device memory, for a config that does not fit."""
  savers = []
  if config.mesh.fsdp == 1:
    savers.append('sharding the state: --config.mesh.fsdp=-1 --config.mesh.data=1')
  if config.model.remat_policy != 'full':
    savers.append('rematerialisation: --config.model.remat_policy='
                  f'{"dots" if config.model.remat_policy == "none" else "full"}')
  savers.append(f'--config.grad_accum_steps={2 * config.grad_accum_steps}')
  if config.model.dtype == 'float32':
    savers.append('bfloat16 compute: dtype=bfloat16 in the config argument')
  return savers


def check_job(config) -> list[pretrain.Phase]:
  """The run's phases (step_phases), after the config is checked as bertjax.main checks it
  (config_check, job_config) and found to be a pre-training job's; raises ValueError (one line)
  otherwise."""
  config_check.check(config)
  job_config.check_fields(config)
  if config.job != 'pretrain':
    raise ValueError(f'config.job={config.job!r}: launch/aot_compile.py compiles the '
                     'pre-training step only; pass a pre-training config, '
                     '--config=configs/pretrain.py:...')
  return step_phases(config)


def print_memory(compiled, state, hbm_bytes):
  """The step's per-device memory from XLA's buffer assignment, against the chip's HBM."""
  memory = memory_per_device(compiled)
  state_bytes = shard_bytes(state)
  print('  per-device memory (XLA buffer assignment):')
  print(f'    arguments       {memory["arguments"] / GIB:8.3f} GiB  (train state '
        f'{state_bytes / GIB:.3f} GiB per the shardings; the rest: batch, TPU tile padding)')
  print(f'    outputs         {memory["outputs"] / GIB:8.3f} GiB  ({memory["aliased"] / GIB:.3f} '
        'GiB of it reuses the donated state)')
  print(f'    temporaries     {memory["temporaries"] / GIB:8.3f} GiB')
  print(f'    generated code  {memory["generated_code"] / GIB:8.3f} GiB')
  if hbm_bytes is None:
    print(f'    total           {memory["total"] / GIB:8.3f} GiB  (CPU: no HBM to compare with)')
  else:
    print(f'    total           {memory["total"] / GIB:8.3f} GiB  of {hbm_bytes / GIB:.0f} GiB '
          f'HBM ({memory["total"] / hbm_bytes:.0%})')


def print_flops(config, phase, compiled, devices, hbm_bytes):
  """XLA's FLOPs per device of the phase's step against bertjax/training/perf.py's formula."""
  mcfg = config.model
  formula = perf.flops_per_sequence(mcfg, phase.max_seq_length, phase.max_predictions_per_seq)
  formula_per_device = formula * config.global_batch_size / len(devices)
  xla, loops = xla_flops_per_device(compiled), matmul_loops(compiled)
  how = 'this compile'
  unroll = (mcfg.scan_layers or config.grad_accum_steps > 1) and not _COUNT_FLOPS.value
  if _COUNT_FLOPS.value and (mcfg.scan_layers or config.grad_accum_steps > 1):
    start = time.perf_counter()
    xla, loops = unrolled_flops_per_device(config, devices, phase)
    how = (f'unrolled 1- and 2-layer copies, {time.perf_counter() - start:.0f} s, extrapolated '
           'to the depth')
  ratio = f', XLA / formula {xla / formula_per_device:.2f}' if xla else ''
  print(f'  FLOPs per device per step: XLA {xla or float("nan"):.3e} ({how}), '
        f'bertjax/training/perf.py {formula_per_device:.3e}{ratio}')
  if loops:
    print(f'    XLA\'s figure is a lower bound: {loops} while loop(s) with matmuls (layer scan, '
          'accumulation, or the compiler\'s own), each body counted once'
          + ('; --count_flops unrolls the layers' if unroll else ''))
  peak = perf.peak_flops_per_device(config.peak_tflops, device=devices[0])
  if peak and hbm_bytes is not None:
    print(f'    at {peak / 1e12:.0f} TFLOP/s per chip: a step takes >= '
          f'{formula_per_device / peak * 1e3:.1f} ms at 100% MFU')


def main(argv):
  command_flags.refuse_arguments(argv, '--config=..., --topology=...')
  config = _CONFIG.value
  try:
    phases = check_job(config)
    devices, hbm_bytes = topology_devices(_TOPOLOGY.value)
  except ValueError as e:
    cloud.refuse('aot_compile', str(e))
  target = ('simulated CPU devices (CPU compiler: memory is only a rough guide for a TPU)'
            if hbm_bytes is None else f'{devices[0].device_kind} chips (TPU compiler, libtpu)')
  hosts = len({d.process_index for d in devices})
  print(f'target: --topology={_TOPOLOGY.value}: {len(devices)} {target}, {hosts} host(s)')
  # 'auto' settled before anything reads the fields: the unroll and FLOP-count choices below
  # take the layer scan the slice will run, not the string.
  print(f'model: {settle_model(config, devices)}')
  mcfg, instances = config.model, config.data.max_instances_per_row
  print(f'config: {mcfg.size} ({mcfg.num_layers} layers, hidden {mcfg.hidden_size}, vocab '
        f'{mcfg.vocab_size}, {mcfg.dtype}, scan_layers={mcfg.scan_layers}, remat='
        f'{mcfg.remat_policy}), {config.optimizer.name}, batch {config.global_batch_size} '
        f'(grad_accum_steps {config.grad_accum_steps}), '
        + (f'packed rows of up to {instances} instances' if instances > 1 else 'unpacked rows'))

  for number, phase in enumerate(phases, 1):
    print(f'phase {number} of {len(phases)}: steps {phase.first_step}..{phase.end_step}, batch '
          f'{config.global_batch_size} x seq {phase.max_seq_length}, '
          f'{phase.max_predictions_per_seq} predictions per row')
    start = time.perf_counter()
    try:
      compiled, mesh, state = compile_train_step(config, devices, phase)
    except ValueError as e:
      cloud.refuse('aot_compile', str(e))
    except jax.errors.JaxRuntimeError as e:
      if 'RESOURCE_EXHAUSTED' not in str(e):
        raise
      console.fail(f'{e}\n\nphase {number} (seq {phase.max_seq_length}) DOES NOT FIT on one '
                   f'{devices[0].device_kind}: try {", or ".join(_memory_savers(config))}.',
                   cloud.REFUSED_EXIT)  # The config refused, as by a check: no retry helps.
    print(f'  mesh: {dict(mesh.shape)}; lowered and compiled in '
          f'{time.perf_counter() - start:.0f} s')
    print_memory(compiled, state, hbm_bytes)
    print_flops(config, phase, compiled, devices, hbm_bytes)

  print(f'parameters: {encoder.param_count(state.params):,}; the biggest, with their '
        'shardings (optimizer moments follow them):')
  for path, shape, spec, shard in biggest_params(state.params, _TOP_PARAMS.value):
    print(f'  {path:60s} {str(shape):18s} {spec:28s} per device {shard}')


def quiet_main(argv):
  """main with bertjax's and the libraries' INFO lines held (its own `mesh:` line says what
  sharding's says), warnings shown; every line at --verbosity=1."""
  with console.library_lines_held(verbose=logging.get_verbosity() >= logging.DEBUG,
                                  quiet=True):
    main(argv)


if __name__ == '__main__':
  app.run(command_flags.usage_said(quiet_main, 'aot_compile: error: ', cloud.REFUSED_EXIT),
          flags_parser=config_args.parse_flags)
