"""The embed job on two hosts (two local processes, jax.distributed over gloo): each host embeds
its share of the sentences, process 0 prints and writes them all.

Before, every host embedded every sentence and took the workdir's lock: on a shared workdir the
second host was refused as "another run (?)" while the first wrote the outputs alone.
"""

import os
import subprocess
import sys

import numpy as np
import two_processes

from bertjax import embed
from bertjax import embed_outputs

SENTENCES = ['The weather is lovely today.', 'It is so sunny outside!',
             'He drove to the stadium.', 'A man is playing a guitar.',
             'Someone plays an instrument.', 'A cat sleeps.', 'Dogs bark loudly at night.']


def _two_hosts(tmp_path, workdir):
  """Runs the embed job as processes 0 and 1; their (exit status, output) in order."""
  env = dict(os.environ, JAX_PLATFORMS='cpu',
             XLA_FLAGS='--xla_force_host_platform_device_count=2')
  port = two_processes.free_port()
  hosts = [subprocess.Popen(
      [sys.executable, '-m', 'bertjax.main', '--config=configs/embed.py',
       f'--config.input_file={tmp_path / "in.txt"}',
       *([f'--workdir={workdir}'] if workdir else []),
       f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2', f'--process_id={i}',
       '--distributed_timeout_s=60', '--compilation_cache_dir='],
      cwd=two_processes.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True) for i in range(2)]
  try:
    return [(host.wait(timeout=240), host.stdout.read()) for host in hosts]
  finally:
    for host in hosts:  # Never leave one waiting on its peer.
      if host.poll() is None:
        host.kill()
        host.wait()


def test_each_host_embeds_its_share_and_process_0_writes_them_all(tmp_path, minilm_dir):
  (tmp_path / 'in.txt').write_text(''.join(f'{s}\n' for s in SENTENCES))  # 4 and 3 each.
  workdir = tmp_path / 'out'
  (status0, said0), (status1, said1) = _two_hosts(tmp_path, workdir)
  assert status0 == 0 and status1 == 0, said0[-3000:] + said1[-3000:]
  vectors = np.load(workdir / 'embeddings.npy')
  expected = embed.Embedder.from_pretrained(str(minilm_dir), normalize=True).encode(SENTENCES)
  np.testing.assert_allclose(vectors, expected, atol=1e-5)  # In order, each host's share.
  assert len(np.loadtxt(workdir / 'similarity.txt')) == len(SENTENCES)
  assert said0.strip().splitlines()[-1].endswith(
      f'embeddings {workdir}/embeddings.npy, similarities {workdir}/similarity.txt')
  assert 'cosine similarity' not in said1  # Printed once, by process 0.
  assert said1.strip().splitlines()[-1].endswith(
      'sentences 7; embeddings printed and written by process 0')
  (status0, said0), (status1, said1) = _two_hosts(tmp_path, None)  # Printed only.
  assert status0 == 0 and status1 == 0, said0[-3000:] + said1[-3000:]
  assert said0.strip().splitlines()[-1].endswith('embeddings not written (no --workdir)')
  assert said1.strip().splitlines()[-1].endswith(
      'embeddings printed by process 0 (no --workdir: not written)')

  # Process 0 refused (its workdir busy): process 1 stops too, naming why, not waiting for it.
  with embed_outputs.held(str(workdir)):
    (status0, said0), (status1, said1) = _two_hosts(tmp_path, workdir)
  assert status0 == 1 and status1 == 1, said0[-3000:] + said1[-3000:]
  assert 'error: another embed run (pid' in said0.strip().splitlines()[-2]
  assert said1.strip().splitlines()[-1].startswith(
      'error: process 0 of this job stopped (another embed run (pid'), said1[-2000:]
  np.testing.assert_array_equal(np.load(workdir / 'embeddings.npy'), vectors)
