"""malloc_tuning: applied on Linux/glibc unless BERTJAX_TUNE_MALLOC=0 (each in a fresh process)."""

import os
import subprocess
import sys

import pytest

_CODE = 'from bertjax import malloc_tuning; print(malloc_tuning.keep_memory_mapped())'


def _applied(setting: str) -> str:
  env = {**os.environ, 'BERTJAX_TUNE_MALLOC': setting}
  return subprocess.run([sys.executable, '-c', _CODE], env=env, capture_output=True, text=True,
                        check=True).stdout.strip()


@pytest.mark.skipif(sys.platform != 'linux', reason='glibc tuning is Linux-only')
def test_applied_on_glibc_unless_turned_off():
  assert _applied('1') == 'True'
  assert _applied('0') == 'False'
