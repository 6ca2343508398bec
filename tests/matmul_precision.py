"""What lets a parity test hold on a GPU as on a CPU: true float32 matmuls, and device-count and
kernel conditions stated as skips with a reason.

A GPU multiplies float32 matrices in TF32 by default (10-bit mantissa, ~1e-3 relative: the
issue 29 H100 run saw 7e-4 between two attention kernels and 1e-3 on packed classification
logits); a CPU always in full float32. Comparisons at 1e-5 of two float32 computations ask for
float32 matmuls explicitly, which changes nothing on a CPU and restores their meaning on a GPU.
"""

import jax
import pytest


@pytest.fixture(autouse=True)
def float32_matmuls():
  """Every matmul of the test at full float32 precision (import it into a test module)."""
  with jax.default_matmul_precision('float32'):
    yield


# The simulated 8-device CPU mesh of tests/conftest.py; one GPU has one device.
needs_eight_devices = pytest.mark.skipif(
    jax.device_count() < 8, reason=f'needs 8 devices, {jax.device_count()} here (tests/conftest.py '
    'simulates 8 on a CPU)')
# Pallas' splash kernel is a TPU kernel: compiled on a TPU, in interpret mode on a CPU (as the
# tests run it); the encoder refuses it on a GPU.
splash_runs_here = pytest.mark.skipif(
    jax.default_backend() not in ('tpu', 'cpu'),
    reason=f'splash is a TPU kernel (interpret mode on a CPU); not on {jax.default_backend()}')
