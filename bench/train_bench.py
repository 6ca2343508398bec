"""Training-step throughput: bertjax vs transformers' PyTorch BERT, same config, same batch.

  python bench/train_bench.py [--sizes=tiny,mini,base] [--batches=32,32,8] [--seq_len=128] \
      [--threads=2] [--steps=4] [--rounds=3] [--dtype=float32|bfloat16] [--peak_tflops=0] \
      [--notune_malloc] [--scan_layers=config|on|off] [--scan_unroll=1] \
      [--attention_impl=config|xla|...] \
      [--attention_dropout=-1] [--torch_variants=stock,gathered,compiled] \
      [--torch_compile_backend=inductor] [--interleave=auto|on|off]

The whole GPU table (BERT-Base/128 batch 256, BERT-Large/512 batch 32, bf16; one GPU; needs
jax with its CUDA plugin, flax, optax, orbax, ml_collections, torch and transformers, and no
TensorFlow; several minutes, most of them compiling):
  python bench/train_bench.py --sizes=base,large --batches=256,32 --seq_len=128,512 \
      --dtype=bfloat16 --threads=16 --steps=20 --rounds=3
Both frameworks train with BERT's attention dropout 0.1 (cuDNN's inside the kernel for bertjax,
SDPA's for PyTorch); --attention_dropout=0 gives the settings of issue 29's first table.

Times full pre-training updates (forward, backward, clipping, AdamW with weight decay; hidden
dropout 0.1 and the config's attention dropout; float32 parameters, compute in --dtype;
--max_predictions masked positions, by default BERT's 20 per 128 tokens) of:
  bertjax        train_state.train_step on configs/pretrain.py's config, its 'auto' attention
                 and layer stacking settled for the platform (model/platform_defaults.py, as the
                 loop does), jitted with the state donated under the mesh and the logical-axis
                 rules, as the training loop runs it;
  torch stock    transformers' BertForPreTraining with `labels`: vocab logits at every position;
  torch gathered the same model with the MLM head applied only at the gathered masked positions,
                 as the original BERT (and bertjax) does, eager;
  torch compiled the gathered one, its forward and loss under torch.compile
                 (--torch_compile_backend; backward through AOTAutograd).
The device is the platform's that jax runs on (the GPU where jax has one, else the CPU); PyTorch
runs on the same one: on a GPU, SDPA attention, fused AdamW and torch.autocast('cuda', bfloat16)
for bfloat16; on the CPU, torch.autocast('cpu', bfloat16). --torch_variants defaults to
gathered,compiled on a GPU (what a GPU user runs) and stock,gathered on the CPU.
All see the same batch (the same masked positions, ids, weights and NSP labels) and dropout.
Each runs in its own process (spawned, so no thread pool or allocator is shared: in one process,
bertjax's base step ran up to 60% slower once torch had run). On the CPU the measurements are
interleaved (rounds of `steps` updates each, in turn) so that a noisy, shared machine slows them
alike; on a GPU each process has the GPU to itself (it starts, is timed and exits before the
next starts: jax reserves most of the GPU's memory); --interleave chooses. The figures are
medians over rounds. 'bertjax speed-up' is the PyTorch variant's time per update over
bertjax's (above 1: bertjax is faster), taken round by round, from wall time and (robust to
other load on the machine, but blind to idle threads) from the process's CPU time; the 'vs
faster torch' row is it against the faster PyTorch variant of each round.
'first step s' is what a user waits before the first update is done: building the model and
its optimizer state, compiling (jax.jit; torch.compile) and running that update. A line after
each size splits bertjax's: the state (its init compiled and run), the step's trace, lowering
and XLA compile (cold: the bench turns JAX's compilation cache off), and its StableHLO size.
GFLOP/s use bertjax/training/perf.py's count, the same for all; MFU is against --peak_tflops,
else the chip's peak from perf.py (H100: 989 bf16 TFLOP/s), else on the CPU the measured peak
of a 3072^3 matmul in --dtype (the better of jax and torch), printed first.

Threads: torch.set_num_threads(--threads); XLA:CPU uses one thread per schedulable core, so the
process is pinned to --threads cores when the machine has more (on a GPU, give it all cores:
jax and torch.compile compile on them). Extra XLA flags go through XLA_FLAGS as usual. Run on
one device: do not force more host devices. The step imports no TensorFlow, so this runs where
none is installed (tests/no_tensorflow_step_test.py). Not a test: figures only
(tests/train_bench_test.py runs it tiny so that it cannot rot).
"""

import os
import sys


def _early_flag(name, default):
  """A flag's value read before absl parses (it must act before jax and torch start)."""
  values = [a.split('=', 1)[1] for a in sys.argv if a.startswith(f'--{name}=')]
  if f'--no{name}' in sys.argv:
    return False
  return type(default)(values[-1]) if values else default


# XLA:CPU runs one intra-op thread per schedulable core and has no flag to change that: pin the
# process to --threads cores (before jax starts) so that it and torch use the same number.
_THREADS = _early_flag('threads', 2)
if _THREADS < len(os.sched_getaffinity(0)):
  os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:_THREADS])
# glibc unmaps large blocks on free, so every step would page-fault in XLA's temp arena again
# (malloc_tuning.keep_memory_mapped; bertjax.main does the same on CPU hosts). Same for both
# frameworks; --notune_malloc measures without it.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))
from bertjax import console  # noqa: E402
from bertjax import malloc_tuning  # noqa: E402

_TUNE_MALLOC = _early_flag('tune_malloc', True) and malloc_tuning.keep_memory_mapped()

import multiprocessing  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import jax_step  # noqa: E402  (bertjax's side, beside this file)
import numpy as np  # noqa: E402
import torch_step  # noqa: E402  (transformers' side, beside this file)

from bertjax.model import platform_defaults  # noqa: E402
from bertjax.training import perf  # noqa: E402

_SIZES = flags.DEFINE_list('sizes', ['tiny', 'mini', 'base'], 'Model sizes to run.')
_BATCHES = flags.DEFINE_list('batches', ['32', '32', '8'], 'Batch per size (one per size).')
_SEQ_LEN = flags.DEFINE_list('seq_len', ['128'], 'Sequence length: one for every size, or one '
                             'per size (e.g. 128,512 for Base/128 and Large/512).')
_PREDICTIONS = flags.DEFINE_integer('max_predictions', 0, 'Masked positions per sequence (0: '
                                    "BERT's 20 per 128 tokens: 20 at 128, 80 at 512).")
_VOCAB = flags.DEFINE_integer('vocab', 30522, 'Vocabulary size (BERT uncased: 30522).')
_STEPS = flags.DEFINE_integer('steps', 4, 'Updates per timed chunk.')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Rounds (each times every framework).')
_THREADS_FLAG = flags.DEFINE_integer('threads', 2, 'CPU threads for XLA and torch.')
flags.DEFINE_bool('tune_malloc', True, 'Keep large allocations mapped across steps (glibc '
                  'mallopt: one arena, no mmap, no trim); applies to both frameworks.')
_PEAK = flags.DEFINE_float('peak_tflops', 0.0, 'Peak TFLOP/s of the device, for MFU (0: the '
                           "chip's known peak, or on CPU a measured matmul peak).")
_SCAN = flags.DEFINE_enum('scan_layers', 'config', ['config', 'on', 'off'],
                          "bertjax's nn.scan over layers: as configs/pretrain.py sets it ('auto':"
                          " the platform's choice, model/platform_defaults.py: unrolled on a GPU, "
                          'scanned from 12 layers on a TPU or CPU), or forced.')
_UNROLL = flags.DEFINE_integer('scan_unroll', 1, "bertjax's model.scan_unroll: scanned layers "
                               'per trip of the layer loop (1 to the layer count).')
_ATTENTION = flags.DEFINE_enum(
    'attention_impl', 'config', ['config', 'xla', 'dot_product_attention', 'cudnn'],
    "bertjax's model.attention_impl: as configs/pretrain.py sets it ('auto': the platform's "
    'choice, model/platform_defaults.py), or forced. dot_product_attention has no '
    'attention-probability dropout, so forcing it sets the rate to 0 (for PyTorch too).')
_ATTENTION_DROPOUT = flags.DEFINE_float(
    'attention_dropout', -1.0, 'Attention-probability dropout for both frameworks (-1: the '
    "config's, BERT's 0.1).")
_INTERLEAVE = flags.DEFINE_enum(
    'interleave', 'auto', ['auto', 'on', 'off'], 'Time the frameworks round by round, all '
    'processes alive (on), or one process at a time (off); auto: on for the CPU (a shared '
    "machine's load slows them alike), off for an accelerator (each has its memory to itself).")
_TORCH = flags.DEFINE_bool('torch', True, 'Also time transformers PyTorch BERT.')
_TORCH_VARIANTS = flags.DEFINE_list(
    'torch_variants', [], f'PyTorch variants, of {", ".join(torch_step.TORCH_VARIANTS)} (empty: '
    f'{",".join(torch_step.DEFAULT_TORCH_VARIANTS["gpu"])} on a GPU, '
    f'{",".join(torch_step.DEFAULT_TORCH_VARIANTS["cpu"])} on the CPU).')
_COMPILE_BACKEND = flags.DEFINE_string(
    'torch_compile_backend', 'inductor', "torch.compile's backend for the compiled variant "
    "(inductor: what users run; on the CPU it needs a C++ compiler. aot_eager traces the same "
    'graphs, forward and backward, without generating code).')
_DTYPE = flags.DEFINE_enum(
    'dtype', 'float32', ['float32', 'bfloat16'],
    "Compute dtype (parameters and optimizer state stay float32 in all): bertjax's model.dtype; "
    'PyTorch runs under torch.autocast(<device>, bfloat16) for bfloat16.')
_TORCH_ATTN = flags.DEFINE_enum('torch_attn', 'sdpa', ['sdpa', 'eager'],
                                'transformers attention implementation.')


def timed(run, steps):
  """(wall seconds, CPU seconds of the whole process) per update over `steps` updates."""
  wall, cpu = time.perf_counter(), time.process_time()
  loss = run(steps)
  wall, cpu = (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps
  if not np.isfinite(loss):
    raise FloatingPointError(f'non-finite loss {loss}')
  return wall, cpu


def worker(conn, framework, settings):
  """One framework in its own process: build, warm up, then time `steps` updates per request.

  Each framework runs alone in its process so that none shares another's thread pools or
  allocator: in one process, bertjax's base step ran 60% slower once torch had run there (on
  this 2-core machine; torch's OpenMP spinning was ruled out with OMP_WAIT_POLICY=PASSIVE).
  Its first message is ('ready', seconds to its first update done, what it runs on).
  """
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(settings['threads'])
  config = jax_step.make_config(settings)
  batch = jax_step.make_batch(settings['vocab'], settings['batch'], settings['seq'],
                     settings['predictions'])
  start = time.perf_counter()
  if framework == 'bertjax':
    jax.config.update('jax_enable_compilation_cache', False)  # Every compile timed cold.
    device = jax.devices()[0]
    # 'auto' attention and layer stacking settle for this platform, as the loop's start does.
    choice = platform_defaults.settle(config.model, device.platform)
    info = dict(choice=choice, platform=device.platform, device_kind=device.device_kind,
                devices=len(jax.devices()), versions=f'jax {jax.__version__}',
                prng=jax.config.jax_default_prng_impl,
                peak=perf.peak_flops_per_device(settings['peak_tflops'], device))
    run, info['first_step'] = jax_step.bertjax_runner(config, batch)
  else:
    import transformers  # pylint: disable=g-import-not-at-top
    info = dict(versions=f'torch {torch.__version__}, transformers {transformers.__version__}')
    run = torch_step.torch_runner(
        config, batch, framework.split()[1], device_type=settings['device'],
        attn_implementation=settings['attn'], compile_backend=settings['compile_backend'])
  run(1)  # Builds and compiles (jax.jit; torch.compile on its first call).
  first_step = time.perf_counter() - start
  run(1)  # Warms up what the first update set up (allocator, caches, optimizer state).
  conn.send(('ready', first_step, info))
  while (steps := conn.recv()) is not None:
    conn.send(timed(run, steps))


def measured_matmul_peak(dtype, threads, n=3072):
  """GFLOP/s of a large [n, n] x [n, n] matmul on the CPU, the best of jax and torch: its
  practical peak for this dtype (bfloat16 accumulates in float32), for a CPU 'MFU'."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(threads)
  a = jax.numpy.ones((n, n), dtype)
  dot = jax.jit(lambda a: jax.numpy.dot(a, a, preferred_element_type=np.float32))
  ta = torch.ones((n, n), dtype=getattr(torch, dtype))
  best = {}
  for name, f in (('jax', lambda: dot(a).block_until_ready()), ('torch', lambda: ta @ ta)):
    f()
    start = time.perf_counter()
    for _ in range(5):
      f()
    best[name] = 2 * n**3 * 5 / (time.perf_counter() - start) / 1e9
  return best


class Worker:
  """A framework's worker process and the end of its pipe."""

  def __init__(self, context, framework, settings):
    self.name = framework
    self.conn, child = context.Pipe()
    self.process = context.Process(target=worker, args=(child, framework, settings),
                                   daemon=True)
    self.process.start()
    child.close()  # So that a worker that dies reads as EOF here, not as a hang.
    try:
      _, self.first_step, self.info = self.conn.recv()
    except EOFError:
      raise SystemExit(f'the {framework} worker died while starting (its error is '
                       'above)') from None

  def time(self, steps):
    self.conn.send(steps)
    return self.conn.recv()

  def stop(self):
    self.conn.send(None)
    self.process.join()


def per_size(values, sizes, name):
  """A flag's list: one value for every size, or one per size."""
  if len(values) not in (1, len(sizes)):
    raise SystemExit(f'--{name} needs one value, or one per size ({len(sizes)}).')
  return values * len(sizes) if len(values) == 1 else values


def _header(info, peak):
  """Prints what the table below ran on, once: the device, versions, threads, settings."""
  print(f'device {info["device_kind"]} ({info["platform"]}); {info["versions"]}; threads '
        f'{_THREADS_FLAG.value}, cores {len(os.sched_getaffinity(0))}, '
        f'XLA_FLAGS="{os.environ.get("XLA_FLAGS", "")}"; malloc tuned {_TUNE_MALLOC}; '
        f'PRNG {info["prng"]}; load average {os.getloadavg()[0]:.1f}')
  if info['platform'] == 'cpu' and not _PEAK.value:
    gemm = measured_matmul_peak(_DTYPE.value, _THREADS_FLAG.value)
    peak = max(gemm.values()) * 1e9
    print(f'measured {_DTYPE.value} matmul peak (3072^3): jax {gemm["jax"]:.0f} GFLOP/s, torch '
          f'{gemm["torch"]:.0f} GFLOP/s; MFU below is against the better of the two')
  elif peak:
    print(f'MFU below is against {peak / 1e12:.0f} TFLOP/s per device')
  else:
    print('no MFU: the peak of this device is not known (set --peak_tflops)')
  print(f'compute {_DTYPE.value} (float32 parameters), AdamW + clipping; {_ROUNDS.value} '
        f'rounds x {_STEPS.value} updates, each framework in its own process; torch attention '
        f'{_TORCH_ATTN.value}, torch.compile backend {_COMPILE_BACKEND.value}')
  print(f'{"size":<6}{"batch":>6}{"seq":>5} {"framework":<15}{"seq/s":>8}{"tokens/s":>10}'
        f'{"GFLOP/s":>10}{"MFU":>7}{"ms/step":>9}{"CPU ms/step":>12}{"first step s":>13}'
        f'{"bertjax speed-up":>18}{"(CPU time)":>12}')
  return peak


def _rows(size, batch_size, seq, times, first_steps, flops, peak):
  """The table's rows of one size: each framework, then bertjax's ratio to the faster torch."""
  ours = times['bertjax']
  torch_names = [name for name in times if name != 'bertjax']
  if torch_names:  # Round by round, the faster of them.
    times['vs faster torch'] = np.min([times[name] for name in torch_names], axis=0)
  for name, t in times.items():
    wall, cpu = np.median(t, axis=0)
    speedup = '' if name == 'bertjax' else (
        f'{np.median(t[:, 0] / ours[:, 0]):>17.2f}x{np.median(t[:, 1] / ours[:, 1]):>11.2f}x')
    head = f'{size:<6}{batch_size:>6}{seq:>5} {name:<15}'
    if name == 'vs faster torch':
      print(f'{head}{"":>69}{speedup}', flush=True)
      continue
    per_sec = batch_size / wall
    mfu = f'{per_sec * flops / peak:>7.1%}' if peak else f'{"-":>7}'
    print(f'{head}{per_sec:>8.1f}{per_sec * seq:>10.0f}{per_sec * flops / 1e9:>10.1f}{mfu}'
          f'{wall * 1e3:>9.1f}{cpu * 1e3:>12.1f}{first_steps[name]:>13.1f}{speedup}',
          flush=True)


def _measure(context, ours, frameworks, settings, *, interleaved):
  """({framework: [rounds, (wall, cpu)]}, {framework: first step seconds}) of bertjax (its
  worker `ours`, started) and the PyTorch `frameworks`: interleaved round by round (a shared
  CPU's load then slows them alike), or one process at a time (each has the accelerator and its
  memory to itself)."""
  workers, times = [ours], {}

  def rounds(group):
    for _ in range(_ROUNDS.value):
      for w in group:
        times.setdefault(w.name, []).append(w.time(_STEPS.value))

  if interleaved:
    workers += [Worker(context, name, settings) for name in frameworks]
    rounds(workers)
    for w in workers:
      w.stop()
  else:
    rounds(workers)
    ours.stop()
    for name in frameworks:
      workers.append(Worker(context, name, settings))
      rounds(workers[-1:])
      workers[-1].stop()
  return ({name: np.asarray(t) for name, t in times.items()},
          {w.name: w.first_step for w in workers})


def settings_per_size():
  """The benchmark setting of each --sizes entry (a plain dict: make_config, make_batch and the
  workers read it) from the flags."""
  sizes = _SIZES.value
  batches = [int(b) for b in per_size(_BATCHES.value, sizes, 'batches')]
  seq_lens = [int(s) for s in per_size(_SEQ_LEN.value, sizes, 'seq_len')]
  return [dict(size=size, batch=batch_size, seq=seq, vocab=_VOCAB.value, dtype=_DTYPE.value,
               predictions=_PREDICTIONS.value or max(1, 20 * seq // 128), scan=_SCAN.value,
               unroll=_UNROLL.value,
               threads=_THREADS_FLAG.value, attn=_TORCH_ATTN.value, attention=_ATTENTION.value,
               attention_dropout=_ATTENTION_DROPOUT.value, peak_tflops=_PEAK.value,
               compile_backend=_COMPILE_BACKEND.value)
          for size, batch_size, seq in zip(sizes, batches, seq_lens, strict=True)]


def main(argv):
  del argv
  console.install()  # Libraries' INFO lines (jax's backend probing) held, as bertjax.main does.
  unknown = set(_TORCH_VARIANTS.value) - set(torch_step.TORCH_VARIANTS)
  if unknown:
    raise SystemExit(f'--torch_variants: unknown {sorted(unknown)}; valid: '
                     f'{", ".join(torch_step.TORCH_VARIANTS)}.')
  context = multiprocessing.get_context('spawn')  # Fresh interpreters: no shared pools.
  peak, info = None, None
  for settings in settings_per_size():
    size, batch_size, seq = settings['size'], settings['batch'], settings['seq']
    # bertjax first: it says which platform jax runs on, which PyTorch then runs on too. This
    # process never touches the accelerator (it would hold memory the workers need).
    ours = Worker(context, 'bertjax', settings)
    if info is None:
      info = ours.info
      if info['devices'] != 1:
        raise SystemExit(f'{info["devices"]} devices: run with one (drop '
                         '--xla_force_host_platform_device_count from XLA_FLAGS; '
                         'CUDA_VISIBLE_DEVICES=0).')
      if _TORCH.value and info['platform'] not in torch_step.TORCH_DEVICE:
        raise SystemExit(f'jax runs on {info["platform"]}, where PyTorch does not: --notorch.')
      peak = _header(info, info['peak'])
    variants = (_TORCH_VARIANTS.value
                or torch_step.DEFAULT_TORCH_VARIANTS.get(info['platform'], ()))
    frameworks = [f'torch {v}' for v in variants] if _TORCH.value else []
    settings['device'] = torch_step.TORCH_DEVICE.get(info['platform'])
    interleaved = (_INTERLEAVE.value == 'on' if _INTERLEAVE.value != 'auto'
                   else info['platform'] == 'cpu')
    times, first_steps = _measure(context, ours, frameworks, settings, interleaved=interleaved)
    model = jax_step.make_config(settings).model
    print(f'# {size}/{seq}: {settings["predictions"]} predictions, dropout {model.dropout_rate}, '
          f'attention dropout {model.attention_dropout_rate}; bertjax {ours.info["choice"]}',
          flush=True)
    flops = perf.flops_per_sequence(model, seq, settings['predictions'])
    _rows(size, batch_size, seq, times, first_steps, flops, peak)
    split = ours.info['first_step']
    print(f'# {size}/{seq} bertjax first step {first_steps["bertjax"]:.1f} s: state '
          f'{split["state"]:.1f} s (init compiled and run), step traced {split["trace"]:.1f} s, '
          f'lowered {split["lower"]:.1f} s, compiled by XLA {split["compile"]:.1f} s '
          f'({split["hlo_lines"]:,} StableHLO lines)', flush=True)


if __name__ == '__main__':
  app.run(main)
