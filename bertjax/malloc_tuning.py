"""glibc's allocator tuned for XLA on CPU hosts: freed memory kept mapped, set at process start.

bertjax.main applies it on a host without accelerators before TensorFlow and XLA start (no
thread or large allocation exists yet); bench/train_bench.py does the same for both frameworks.
"""

import ctypes
import os
import sys


def keep_memory_mapped() -> bool:
  """glibc: one arena, no mmap for large blocks, no trimming. Returns whether it was applied.

  By default glibc serves blocks over 32 MiB with a fresh mmap and unmaps them on free, so on
  the CPU backend every step page-faults in XLA's whole temp arena again (~30% of a tiny step's
  CPU time in the kernel). Keeping freed memory for reuse removes that; the process's resident
  memory then stays at its peak. Linux/glibc only; BERTJAX_TUNE_MALLOC=0 turns it off.
  """
  if sys.platform != 'linux' or os.environ.get('BERTJAX_TUNE_MALLOC', '1') == '0':
    return False
  try:
    libc = ctypes.CDLL('libc.so.6')
  except OSError:  # musl or another libc.
    return False
  m_trim_threshold, m_mmap_max, m_arena_max = -1, -4, -8
  return all((libc.mallopt(m_arena_max, 1), libc.mallopt(m_mmap_max, 0),
              libc.mallopt(m_trim_threshold, 2**31 - 1)))
