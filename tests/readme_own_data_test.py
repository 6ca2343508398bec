"""README's "Your own data" block, run as written (from the checkout, its example files and the
installed all-MiniLM-L6-v2): it learns, ends on its summary line, and predict labels new reviews.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_block() -> str:
  """The first ```bash block of the section '### Your own data'."""
  section = (ROOT / 'README.md').read_text().split('### Your own data', 1)[1]
  return re.search(r'```bash\n(.*?)```', section, re.S).group(1)


def test_the_own_data_example_runs_as_written(minilm_dir, tmp_path):
  block = readme_block()
  assert 'init_from=$MINILM' in block and 'launch/examples/reviews.csv' in block
  # As written, but with this run's workdir; pip is already done (the data is installed).
  script = '\n'.join(line for line in block.splitlines() if not line.startswith('pip install'))
  script = script.replace('/tmp/reviews', str(tmp_path / 'reviews'))
  # On a newcomer's machine: one CPU device, not the suite's 8 simulated ones.
  env = dict(os.environ, PATH=f'{pathlib.Path(sys.executable).parent}:{os.environ["PATH"]}',
             XLA_FLAGS='--xla_force_host_platform_device_count=1')
  run = subprocess.run(['bash', '-euo', 'pipefail', '-c', script], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
  assert run.returncode == 0, run.stderr[-3000:]
  # The fine-tuning run: its start line names the formats, its summary line the accuracy.
  assert re.search(r'classification head on mean-pooled outputs: exports to '
                   r'.*sentence_transformers', run.stderr), run.stderr[-3000:]
  finished = [line for line in run.stdout.splitlines() if line.startswith('finetune finished')]
  assert len(finished) == 1, run.stdout
  accuracy = float(re.search(r'eval accuracy ([0-9.]+)', finished[0]).group(1))
  assert accuracy >= 0.9, finished[0]
  # Predict: one JSON line per new review, the labels a reader gives them; its summary on
  # stderr (the predictions went to stdout).
  rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{')]
  assert [r['label'] for r in rows] == ['positive', 'negative', 'positive', 'negative']
  assert run.stderr.strip().splitlines()[-1].startswith('predict finished in ')
