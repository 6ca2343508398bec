"""Training-step throughput: bertjax vs transformers' PyTorch BERT, same config, same batch.

  python bench/train_bench.py [--sizes=tiny,mini,base] [--batches=32,32,8] [--seq_len=128] \
      [--threads=2] [--steps=4] [--rounds=3] [--dtype=float32|bfloat16] [--peak_tflops=0] \
      [--notune_malloc] [--scan_layers=config|on|off]

Times full pre-training updates (forward, backward, clipping, AdamW with weight decay; dropout
0.1 everywhere; float32 parameters, compute in --dtype) of:
  bertjax     train_state.train_step on configs/pretrain.py's config, jitted with the state
              donated under the mesh and the logical-axis rules, as the training loop runs it;
  torch stock transformers' BertForPreTraining with `labels`: vocab logits at every position;
  torch gath. the same model with the MLM head applied only at the gathered masked positions,
              as the original BERT (and bertjax) does.
For bfloat16, PyTorch runs under torch.autocast('cpu', bfloat16), its mixed precision.
All three see the same batch (the same masked positions, ids, weights and NSP labels). Each
runs in its own process (spawned, so no thread pool or allocator is shared: in one process,
bertjax's base step ran up to 60% slower once torch had run); the measurements are interleaved
(rounds of `steps` updates each, in turn) so that a noisy, shared machine slows them alike. The
figures are medians over rounds, and the ratio is bertjax over the faster PyTorch variant,
taken round by round, from wall time and (robust to other load on the machine, but blind to
idle threads) from the process's CPU time. GFLOP/s use bertjax/training/perf.py's count, the
same for all three; MFU is against --peak_tflops or, on CPU, the measured peak of a 3072^3 matmul in
--dtype (the better of jax and torch), printed first.

On a GPU (JAX_PLATFORMS=cuda; the default here is cpu), BERT-Base/128 and Large/512:
  JAX_PLATFORMS=cuda python bench/train_bench.py --notorch --dtype=bfloat16 --threads=16 \
      --attention_impl=cudnn --sizes=base --batches=256 --seq_len=128
  (the same with --sizes=large --batches=64 --seq_len=512); MFU is against the chip's peak
  from bertjax/training/perf.py.

Threads: torch.set_num_threads(--threads); XLA:CPU uses one thread per schedulable core, so the
process is pinned to --threads cores when the machine has more. Extra XLA flags go through
XLA_FLAGS as usual. Run on one CPU device: do not force more host devices.
Not a test: figures only.
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
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))
from bertjax import malloc_tuning  # noqa: E402

_TUNE_MALLOC = _early_flag('tune_malloc', True) and malloc_tuning.keep_memory_mapped()

import functools  # noqa: E402
import multiprocessing  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from bertjax import pretrain_objective  # noqa: E402
from bertjax.training import optimizer as optimizer_lib  # noqa: E402
from bertjax.training import perf  # noqa: E402
from bertjax.training import sharding  # noqa: E402
from bertjax.training import train_state  # noqa: E402
from configs import pretrain  # noqa: E402

_SIZES = flags.DEFINE_list('sizes', ['tiny', 'mini', 'base'], 'Model sizes to run.')
_BATCHES = flags.DEFINE_list('batches', ['32', '32', '8'], 'Batch per size (one per size).')
_SEQ_LEN = flags.DEFINE_integer('seq_len', 128, 'Sequence length.')
_PREDICTIONS = flags.DEFINE_integer('max_predictions', 20, 'Masked positions per sequence.')
_VOCAB = flags.DEFINE_integer('vocab', 30522, 'Vocabulary size (BERT uncased: 30522).')
_STEPS = flags.DEFINE_integer('steps', 4, 'Updates per timed chunk.')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Interleaved rounds (each times every framework).')
_THREADS_FLAG = flags.DEFINE_integer('threads', 2, 'CPU threads for XLA and torch.')
flags.DEFINE_bool('tune_malloc', True, 'Keep large allocations mapped across steps (glibc '
                  'mallopt: one arena, no mmap, no trim); applies to both frameworks.')
_PEAK = flags.DEFINE_float('peak_tflops', 0.0, 'Peak TFLOP/s of the device, for MFU (0: the '
                           "chip's known peak, or on CPU a measured matmul peak).")
_SCAN = flags.DEFINE_enum('scan_layers', 'config', ['config', 'on', 'off'],
                          "bertjax's nn.scan over layers: as configs/pretrain.py sets it (base "
                          'and large: on, for compile time), or forced.')
_ATTENTION = flags.DEFINE_enum(
    'attention_impl', 'xla', ['xla', 'dot_product_attention', 'cudnn'],
    "bertjax's model.attention_impl; the fused ones ('cudnn': the GPU flash kernel) have no "
    'attention-probability dropout, so it is set to 0 for them (for PyTorch too).')
_TORCH = flags.DEFINE_bool('torch', True, 'Also time transformers PyTorch BERT.')
_DTYPE = flags.DEFINE_enum(
    'dtype', 'float32', ['float32', 'bfloat16'],
    'Compute dtype (parameters and optimizer state stay float32 in all three): bertjax\'s '
    'model.dtype; PyTorch runs under torch.autocast(cpu, bfloat16) for bfloat16.')
_TORCH_ATTN = flags.DEFINE_enum('torch_attn', 'sdpa', ['sdpa', 'eager'],
                                'transformers attention implementation.')


def make_batch(vocab_size, batch_size, seq_len, predictions, seed=0):
  """A full-length pre-training batch with distinct, sorted masked positions per row."""
  rng = np.random.default_rng(seed)
  input_ids = rng.integers(1000, vocab_size, (batch_size, seq_len)).astype(np.int32)
  segment_ids = np.zeros((batch_size, seq_len), np.int32)
  segment_ids[:, seq_len // 2:] = 1
  positions = np.stack([np.sort(rng.choice(np.arange(1, seq_len), predictions, replace=False))
                        for _ in range(batch_size)]).astype(np.int32)
  return dict(
      input_ids=input_ids, input_mask=np.ones((batch_size, seq_len), np.int32),
      segment_ids=segment_ids, masked_lm_positions=positions,
      masked_lm_ids=rng.integers(1000, vocab_size, (batch_size, predictions)).astype(np.int32),
      masked_lm_weights=np.ones((batch_size, predictions), np.float32),
      next_sentence_labels=rng.integers(0, 2, (batch_size, 1)).astype(np.int32))


def bertjax_runner(config, batch):
  """A function running n train steps (state donated, kept across calls) and blocking."""
  mesh = sharding.make_mesh(config.mesh)
  tx = optimizer_lib.make(config.optimizer)
  schedule = optimizer_lib.learning_rate_schedule(config.optimizer)
  objective = pretrain_objective.objective(config)
  rules = sharding.parse_rules(config.mesh.rules)
  state, state_shardings = train_state.create_train_state(config, objective, tx, mesh, rules)
  batch_shardings = sharding.batch_sharding(mesh, rules)
  step_fn = train_state.jit_train_step(config, objective, tx, schedule, state_shardings,
                                       batch_shardings)
  device_batch = jax.device_put(batch, batch_shardings)
  holder = {'state': state}

  def run(n):
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
      state, metrics = holder['state'], None
      for _ in range(n):
        state, metrics = step_fn(state, device_batch)
      jax.block_until_ready((state, metrics))
      holder['state'] = state
    return float(metrics['loss'][0])
  return run


def torch_runner(config, batch, variant, attn_implementation):
  """A function running n PyTorch updates of one variant ('stock' or 'gathered')."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  mcfg, ocfg = config.model, config.optimizer
  hf = transformers.BertConfig(
      vocab_size=mcfg.vocab_size, hidden_size=mcfg.hidden_size,
      num_hidden_layers=mcfg.num_layers, num_attention_heads=mcfg.num_heads,
      intermediate_size=mcfg.mlp_dim, hidden_dropout_prob=mcfg.dropout_rate,
      attention_probs_dropout_prob=mcfg.attention_dropout_rate,
      layer_norm_eps=mcfg.layer_norm_eps, attn_implementation=attn_implementation)

  def tensor(x):
    return torch.tensor(np.asarray(x), dtype=torch.long)

  inputs = dict(input_ids=tensor(batch['input_ids']),
                attention_mask=tensor(batch['input_mask']),
                token_type_ids=tensor(batch['segment_ids']))
  positions = tensor(batch['masked_lm_positions'])
  ids = tensor(batch['masked_lm_ids'])
  weights = torch.tensor(batch['masked_lm_weights'])
  nsp_labels = tensor(batch['next_sentence_labels']).reshape(-1)
  labels = torch.full(inputs['input_ids'].shape, -100, dtype=torch.long)  # -100: not a target.
  labels.scatter_(1, positions, ids)

  def make_model_and_opt():
    torch.manual_seed(0)
    ref = transformers.BertForPreTraining(hf).train()

    def no_decay(name):  # BERT decays no LayerNorm parameter and no bias.
      return name.endswith('bias') or 'LayerNorm' in name

    groups = [
        {'params': [p for n, p in ref.named_parameters() if not no_decay(n)],
         'weight_decay': ocfg.weight_decay},
        {'params': [p for n, p in ref.named_parameters() if no_decay(n)], 'weight_decay': 0.0}]
    opt = torch.optim.AdamW(groups, lr=ocfg.learning_rate, betas=(ocfg.b1, ocfg.b2),
                            eps=ocfg.eps)
    return ref, opt

  def update(ref, opt, loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), ocfg.grad_clip_norm)
    opt.step()
    return loss.item()

  ref, opt = make_model_and_opt()

  # Mixed precision as PyTorch users run it: float32 parameters, autocast compute.
  autocast = functools.partial(torch.autocast, 'cpu', dtype=torch.bfloat16,
                               enabled=mcfg.dtype == 'bfloat16')

  def stock(n):
    for _ in range(n):
      with autocast():
        out = ref(**inputs, labels=labels, next_sentence_label=nsp_labels)
      loss = update(ref, opt, out.loss)
    return loss

  def gathered(n):  # The MLM head only at the masked positions, as the original BERT does.
    for _ in range(n):
      with autocast():
        seq, pooled = ref.bert(**inputs, return_dict=False)[:2]
        seq = torch.gather(seq, 1, positions[..., None].expand(-1, -1, seq.shape[-1]))
        mlm_logits, nsp_logits = ref.cls(seq, pooled)
        mlm = torch.nn.functional.cross_entropy(
            mlm_logits.flatten(0, 1).float(), ids.flatten(), reduction='none')
        loss = ((mlm * weights.flatten()).sum() / weights.sum().clamp_min(1e-8)
                + torch.nn.functional.cross_entropy(nsp_logits.float(), nsp_labels))
      loss = update(ref, opt, loss)
    return loss
  return {'stock': stock, 'gathered': gathered}[variant]


def timed(run, steps):
  """(wall seconds, CPU seconds of the whole process) per update over `steps` updates."""
  wall, cpu = time.perf_counter(), time.process_time()
  loss = run(steps)
  wall, cpu = (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps
  if not np.isfinite(loss):
    raise FloatingPointError(f'non-finite loss {loss}')
  return wall, cpu


def make_config(s):
  """configs/pretrain.py's config for one benchmark setting (a plain dict, see main)."""
  config = pretrain.get_config(f'size={s["size"]},batch={s["batch"]},seq={s["seq"]},'
                               f'vocab={s["vocab"]},dtype={s["dtype"]}')
  with config.unlocked():
    config.data.max_predictions_per_seq = s['predictions']
    if s['scan'] != 'config':
      config.model.scan_layers = s['scan'] == 'on'
    config.model.attention_impl = s['attention']
    if s['attention'] != 'xla':
      config.model.attention_dropout_rate = 0.0
  return config


def worker(conn, framework, settings):
  """One framework in its own process: build, warm up, then time `steps` updates per request.

  Each framework runs alone in its process so that none shares another's thread pools or
  allocator: in one process, bertjax's base step ran 60% slower once torch had run there (on
  this 2-core machine; torch's OpenMP spinning was ruled out with OMP_WAIT_POLICY=PASSIVE).
  """
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(settings['threads'])
  config = make_config(settings)
  batch = make_batch(settings['vocab'], settings['batch'], settings['seq'],
                     settings['predictions'])
  if framework == 'bertjax':
    run = bertjax_runner(config, batch)
  else:
    run = torch_runner(config, batch, framework.split()[1], settings['attn'])
  run(1)  # Compile / warm up (allocator, caches).
  conn.send('ready')
  while (steps := conn.recv()) is not None:
    conn.send(timed(run, steps))


def measured_matmul_peak(dtype, threads, n=3072):
  """GFLOP/s of a large [n, n] x [n, n] matmul, the best of jax and torch: the CPU's
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


def main(argv):
  del argv
  import torch  # pylint: disable=g-import-not-at-top
  if len(jax.devices()) != 1:
    raise SystemExit(f'{len(jax.devices())} devices: run with one (drop '
                     '--xla_force_host_platform_device_count from XLA_FLAGS).')
  if len(_BATCHES.value) != len(_SIZES.value):
    raise SystemExit(f'--batches needs one value per size ({len(_SIZES.value)}).')
  peak = perf.peak_flops_per_device(_PEAK.value)
  print(f'device {jax.devices()[0].device_kind}; jax {jax.__version__}, torch {torch.__version__}'
        f'; threads {_THREADS_FLAG.value}, cores {len(os.sched_getaffinity(0))}, '
        f'XLA_FLAGS="{os.environ.get("XLA_FLAGS", "")}"; malloc tuned {_TUNE_MALLOC}; '
        f'PRNG {jax.config.jax_default_prng_impl}; load average {os.getloadavg()[0]:.1f}')
  if not peak:
    gemm = measured_matmul_peak(_DTYPE.value, _THREADS_FLAG.value)
    peak = max(gemm.values()) * 1e9
    print(f'measured {_DTYPE.value} matmul peak (3072^3): jax {gemm["jax"]:.0f} GFLOP/s, torch '
          f'{gemm["torch"]:.0f} GFLOP/s; MFU below is against the better of the two')
  print(f'seq {_SEQ_LEN.value}, {_PREDICTIONS.value} predictions, vocab {_VOCAB.value}, '
        f'compute {_DTYPE.value} (float32 parameters), dropout 0.1, AdamW + clipping; '
        f'{_ROUNDS.value} rounds x {_STEPS.value} updates, each framework in its own process; '
        f'torch attention {_TORCH_ATTN.value}; bertjax scan_layers {_SCAN.value}, attention '
        f'{_ATTENTION.value}')
  print(f'{"size":<6}{"batch":>6} {"framework":<15}{"seq/s":>8}{"tokens/s":>10}{"GFLOP/s":>9}'
        f'{"MFU":>7}{"ms/step":>9}{"CPU ms/step":>12}{"bertjax speed-up":>18}{"(CPU time)":>12}')
  frameworks = ['bertjax'] + (['torch stock', 'torch gathered'] if _TORCH.value else [])
  context = multiprocessing.get_context('spawn')  # Fresh interpreters: no shared pools.
  for size, batch_size in zip(_SIZES.value, map(int, _BATCHES.value), strict=True):
    settings = dict(size=size, batch=batch_size, seq=_SEQ_LEN.value, vocab=_VOCAB.value,
                    dtype=_DTYPE.value, predictions=_PREDICTIONS.value, scan=_SCAN.value,
                    threads=_THREADS_FLAG.value, attn=_TORCH_ATTN.value,
                    attention=_ATTENTION.value)
    workers = {}
    for name in frameworks:  # One at a time, so that compiling does not overlap timing.
      parent, child = context.Pipe()
      process = context.Process(target=worker, args=(child, name, settings), daemon=True)
      process.start()
      child.close()  # So that a worker that dies reads as EOF here, not as a hang.
      try:
        parent.recv()
      except EOFError:
        raise SystemExit(f'the {name} worker died while starting (its error is above)') from None
      workers[name] = (parent, process)
    times = {name: [] for name in frameworks}
    for _ in range(_ROUNDS.value):
      for name, (conn, _) in workers.items():
        conn.send(_STEPS.value)
        times[name].append(conn.recv())
    for conn, process in workers.values():
      conn.send(None)
      process.join()
    times = {name: np.asarray(t) for name, t in times.items()}  # [rounds, (wall, cpu)]
    flops = perf.flops_per_sequence(make_config(settings).model, _SEQ_LEN.value,
                                    _PREDICTIONS.value)
    ours = times['bertjax']
    if _TORCH.value:
      times['vs faster torch'] = np.minimum(times['torch stock'], times['torch gathered'])
    for name, t in times.items():
      wall, cpu = np.median(t, axis=0)
      speedup = '' if name == 'bertjax' else (
          f'{np.median(t[:, 0] / ours[:, 0]):>17.2f}x{np.median(t[:, 1] / ours[:, 1]):>11.2f}x')
      if name == 'vs faster torch':  # Round by round, the faster of the two.
        print(f'{size:<6}{batch_size:>6} {name:<15}{"":>55}{speedup}', flush=True)
        continue
      per_sec = batch_size / wall
      print(f'{size:<6}{batch_size:>6} {name:<15}{per_sec:>8.1f}{per_sec * _SEQ_LEN.value:>10.0f}'
            f'{per_sec * flops / 1e9:>9.1f}{per_sec * flops / peak:>7.1%}{wall * 1e3:>9.1f}'
            f'{cpu * 1e3:>12.1f}{speedup}', flush=True)


if __name__ == '__main__':
  app.run(main)
