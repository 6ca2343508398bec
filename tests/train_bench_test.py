"""bench/train_bench.py runs, tiny and for one update, so that it cannot rot: bertjax and
PyTorch's stock, gathered and torch.compile'd BERT, each in its own process, and the table.
They run one process at a time (--interleave=off), as on a GPU: the CPU's own interleaved order
is the older path, and the GPU's would otherwise run nowhere in CI.

The compiled variant uses torch.compile's aot_eager backend: it traces the same graphs as the
GPU's inductor (TorchDynamo, forward and backward through AOTAutograd) without generating C++,
which would need a compiler on the CI machine and a minute of its 2 cores.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
FRAMEWORKS = ('bertjax', 'torch stock', 'torch gathered', 'torch compiled')


def test_the_bench_times_bertjax_and_every_torch_variant_on_the_cpu():
  # One CPU device (conftest forces 8, which the bench refuses); the CPU even where a GPU is.
  env = dict(os.environ, XLA_FLAGS='', JAX_PLATFORMS='cpu', CUDA_VISIBLE_DEVICES='')
  run = subprocess.run(
      [sys.executable, 'bench/train_bench.py', '--sizes=tiny', '--batches=4', '--seq_len=32',
       '--vocab=512', '--steps=1', '--rounds=1', '--peak_tflops=1',
       '--torch_variants=stock,gathered,compiled', '--torch_compile_backend=aot_eager',
       '--interleave=off'],
      capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  out = run.stdout
  assert out.startswith('device cpu (cpu);'), out
  assert '# tiny/32: 5 predictions, dropout 0.1, attention dropout 0.1; bertjax attention xla' in (
      out), out
  rows = {}
  for name in FRAMEWORKS:
    match = re.search(rf'^tiny +4 +32 {name} +(.*)$', out, re.M)
    assert match, (name, out)
    rows[name] = [float(v.rstrip('%x')) for v in match.group(1).split()]
  for name, values in rows.items():
    seq_per_s, tokens_per_s, gflops, mfu, ms, _, first_step = values[:7]
    assert seq_per_s > 0 and first_step > 0, (name, values)
    # seq/s is printed to 0.1 (32 tokens a sequence: up to 1.6 tokens/s off at a slow machine's
    # few seq/s), tokens/s to 1.
    assert abs(tokens_per_s - seq_per_s * 32) <= 0.051 * 32 + 0.51, (name, values)
    # Printed to 0.1 each: ms's rounding, plus seq/s's carried into 4000 / seq/s.
    assert abs(ms - 4000 / seq_per_s) <= 0.051 + 4000 / seq_per_s**2 * 0.051, (name, values)
    assert mfu == pytest.approx(gflops / 1000 * 100, abs=0.06)  # Against 1 TFLOP/s.
  # One round: bertjax's ratio to the faster torch is the smallest of its ratios to each.
  ratios = [rows[name][7] for name in FRAMEWORKS[1:]]
  faster = re.search(r'^tiny +4 +32 vs faster torch +([\d.]+)x +([\d.]+)x$', out, re.M)
  assert faster and float(faster.group(1)) == min(ratios), out
  # Where bertjax's first step went: its parts add up to no more than the whole, cold.
  split = re.search(r'^# tiny/32 bertjax first step ([\d.]+) s: state ([\d.]+) s \(init compiled '
                    r'and run\), step traced ([\d.]+) s, lowered ([\d.]+) s, compiled by XLA '
                    r'([\d.]+) s \(([\d,]+) StableHLO lines\)$', out, re.M)
  assert split, out
  whole, *parts = (float(v) for v in split.groups()[:5])
  assert whole == rows['bertjax'][6] and all(p >= 0 for p in parts), out
  assert sum(parts) <= whole + 0.2 and parts[3] > 0, out  # Each part printed to 0.1 s.
  assert int(split.group(6).replace(',', '')) > 500, out


def test_the_benches_console_holds_jax_backend_probing():
  """A bench run as a user runs it (no JAX_PLATFORMS) shows its table, not jax's INFO lines of
  the backends it probed ('Unable to initialize backend tpu': libtpu is absent), as
  bertjax.main holds them (console.install)."""
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  env.update(XLA_FLAGS='', CUDA_VISIBLE_DEVICES='')
  # --seconds: its three timings' budget (5 s each by default); the console is the subject.
  run = subprocess.run([sys.executable, 'bench/forward_bench.py', '--sizes=tiny', '--seq_len=16',
                        '--seconds=0.1'],
                       capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  assert re.search(r'^tiny +32 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+x', run.stdout, re.M), run.stdout
  assert 'xla_bridge' not in run.stderr and 'Unable to initialize' not in run.stderr, run.stderr
