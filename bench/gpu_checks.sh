#!/bin/bash
# Issue 29's GPU measurements, in parts that each end well inside one 10-minute call of a lent
# GPU machine (one H100 or H200; its image has jax with the CUDA plugin, flax, optax, orbax,
# torch and transformers, no TensorFlow). From the repository root:
#
#   bash bench/gpu_checks.sh check   # cuDNN's attention dropout: the check a GPU run makes
#                                    # before relying on it, padded and packed rows (~1 min)
#   bash bench/gpu_checks.sh tests   # JAX_PLATFORMS=cuda pytest tests/model (~3 min)
#   bash bench/gpu_checks.sh base    # the table's BERT-Base/128 batch 256 rows, defaults (~6 min)
#   bash bench/gpu_checks.sh large   # BERT-Large/512 batch 32 (~7 min)
#   bash bench/gpu_checks.sh profile # where the Base/128 batch 256 step's time goes, by part of
#                                    # the model and kind of op, and where its compile's time
#                                    # goes, by phase (bench/step_profile.py, ~4 min)
#   bash bench/gpu_checks.sh scan    # the same with layers scanned, cuDNN attention without
#                                    # attention dropout (issue 29's setting where nn.scan cost
#                                    # 37% of the throughput on an H100: where it goes; ~3 min)
#   bash bench/gpu_checks.sh unroll  # bertjax's Base/128 row with layers scanned 2, then 4 per
#                                    # trip (model.scan_unroll), cuDNN attention without attention
#                                    # dropout: issue 29's scanned 2744 vs unrolled 4316 seq/s
#                                    # setting, for a loop between the two in compile and speed
#                                    # (~6 min)
#   bash bench/gpu_checks.sh flags   # bertjax's Base/128 row again under XLA flags that trade
#                                    # autotuning (compile time) for kernel choice (~7 min)
#
# The times are estimates from issue 29's H100 compile times: this script has not yet run on a
# GPU. 'check tests' runs two parts in one call. Every part prints what it measured; the table rows
# come with bertjax's first step split into state, trace, lowering and XLA compile.
# ml_collections (pure Python) is the one package these need beyond that image: carry its wheel
# (the device README: pip download --no-deps ... ml_collections) and put it on PYTHONPATH.
# tests/model/platform_defaults_test.py is left out of 'tests': it runs the CPU jobs, which
# import the TensorFlow input pipeline; it checks configs only and runs in CI.
set -o pipefail
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
[ $# -gt 0 ] || { echo "usage: bash bench/gpu_checks.sh check|tests|base|large|profile|scan|unroll|flags ..." >&2; exit 2; }
status=0
for part in "$@"; do
  echo "=== $part ($(date -u +%H:%M:%S))"
  case "$part" in
    check)
      python - <<'EOF' || status=1
import jax
from bertjax.model import cudnn_dropout
print(jax.devices()[0].device_kind, jax.__version__)
failures = []
for packed in (False, True):  # The run's row layout decides which one a run checks.
  layout = 'packed' if packed else 'padded'
  try:
    measured = cudnn_dropout.measure(packed=packed)
  except Exception as e:  # What a run would be told.
    failures.append(f'{layout}: cuDNN attention dropout failed to run here '
                    f'({type(e).__name__}: {e})')
    continue
  print(layout, measured)
  verdict = cudnn_dropout.judge(measured)
  print(layout, verdict or 'trains: forward = backward, a new mask each step, layer, row and '
        'head, the kept share as the rate')
  failures += [f'{layout}: {verdict}'] if verdict else []
raise SystemExit('\n'.join(failures) or None)
EOF
      ;;
    tests)
      JAX_PLATFORMS=cuda python -m pytest -q -p no:cacheprovider tests/model \
          --ignore=tests/model/platform_defaults_test.py || status=1 ;;
    base)
      python bench/train_bench.py --sizes=base --batches=256 --seq_len=128 --dtype=bfloat16 \
          --threads=16 --steps=20 --rounds=3 || status=1 ;;
    large)
      python bench/train_bench.py --sizes=large --batches=32 --seq_len=512 --dtype=bfloat16 \
          --threads=16 --steps=10 --rounds=3 || status=1 ;;
    unroll)
      for unroll in 2 4; do
        echo "--- model.scan_unroll=$unroll"
        python bench/train_bench.py --sizes=base --batches=256 --seq_len=128 --dtype=bfloat16 \
            --threads=16 --steps=20 --rounds=3 --notorch --scan_layers=on --scan_unroll=$unroll \
            --attention_impl=cudnn --attention_dropout=0 || status=1
      done ;;
    flags)  # Triton's GEMM autotuning is much of an XLA:GPU compile: without it, or untuned.
      for flag in --xla_gpu_enable_triton_gemm=false --xla_gpu_autotune_level=0; do
        echo "--- XLA_FLAGS=$flag"
        XLA_FLAGS="${XLA_FLAGS:-} $flag" python bench/train_bench.py --sizes=base --batches=256 \
            --seq_len=128 --dtype=bfloat16 --threads=16 --steps=20 --rounds=3 --notorch || status=1
      done ;;
    profile|scan)
      python bench/step_profile.py --sizes=base --batches=256 --seq_len=128 --dtype=bfloat16 \
          --threads=16 --steps=10 --top=25 --compile_top=15 \
          $([ "$part" = scan ] && echo --scan_layers=on --attention_impl=cudnn \
              --attention_dropout=0) || status=1 ;;
    *)
      echo "unknown part '$part': check, tests, base, large, profile, scan, unroll or flags" >&2; exit 2 ;;
  esac
done
exit $status
