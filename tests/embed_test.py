"""The feature-extraction job end to end, through the same entry point a user runs."""

import os
import pathlib
import subprocess
import sys

from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax import embed
from configs import embed as embed_config


def test_embed_job_writes_similarities(tmp_path, minilm_dir):
  config = embed_config.get_config(f'init_from={minilm_dir}')
  vectors = embed.run(config, tmp_path)
  assert vectors.shape == (len(config.sentences), 384)
  similarity = np.loadtxt(tmp_path / 'similarity.txt')
  np.testing.assert_allclose(np.diag(similarity), 1.0, atol=1e-4)
  assert similarity[0, 1] == pytest.approx(0.666, abs=1e-3)
  # Paraphrases score above unrelated pairs.
  assert similarity[3, 4] > 0.4 > similarity[0, 3]


def test_embed_job_bfloat16_close_to_float32(tmp_path, minilm_dir):
  want = embed.run(embed_config.get_config(f'init_from={minilm_dir}'), None)
  got = embed.run(embed_config.get_config(f'init_from={minilm_dir},dtype=bfloat16'), None)
  # Stated tolerance for bf16 compute on real weights: cosine similarities within 0.02.
  np.testing.assert_allclose(got @ got.T, want @ want.T, atol=2e-2)


def test_main_cli(tmp_path, minilm_dir):
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  result = subprocess.run(
      [sys.executable, '-m', 'bertjax.main', f'--config=configs/embed.py:init_from={minilm_dir}',
       f'--workdir={tmp_path}', '--config.max_seq_length=16'],
      capture_output=True, text=True, timeout=300, check=False, env=env,
      cwd=pathlib.Path(__file__).resolve().parents[1])
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'cosine similarity' in result.stdout
  assert (tmp_path / 'embeddings.npy').exists()
  last = result.stdout.splitlines()[-1]
  assert last.startswith('embed finished in ') and 'sentences 5, dimension 384' in last, last
  assert last.endswith(f'embeddings {tmp_path}/embeddings.npy, similarities '
                       f'{tmp_path}/similarity.txt')
  for start_up in ('oneDNN', 'InitializeLog', 'cuInit', 'tensorflow/core'):
    assert start_up not in result.stderr, result.stderr


def test_without_a_workdir_the_summary_says_nothing_was_written(minilm_dir, capsys):
  config = embed_config.get_config(f'init_from={minilm_dir}')
  with config.unlocked():
    config.sentences, config.max_seq_length = config.sentences[:2], 16
  embed.run(config, None)
  last = capsys.readouterr().out.splitlines()[-1]
  assert last.startswith('embed finished in ') and 'sentences 2' in last, last
  assert last.endswith('embeddings not written (no --workdir)')
  with config.unlocked():
    config.sentences = []
  with pytest.raises(ValueError, match='config.sentences is empty'):
    embed.run(config, None)


def test_empty_input_file_is_an_error(tmp_path, minilm_dir):
  empty = tmp_path / 'empty.txt'
  empty.write_text('\n\n')
  config = embed_config.get_config(f'init_from={minilm_dir}')
  with config.unlocked():
    config.input_file = str(empty)
  with pytest.raises(ValueError, match='holds no sentences'):
    embed.run(config, tmp_path)


def test_unknown_config_argument():
  with pytest.raises(ValueError, match=r"unknown config argument 'size'; valid ones"):
    embed_config.get_config('size=base')


def test_a_training_run_without_a_checkpoint_gets_one_message_saying_so(tmp_path):
  run = tmp_path / 'run'  # A bertjax workdir: read by the one loader, as export reads it.
  (run / 'checkpoints').mkdir(parents=True)
  (run / 'config.json').write_text('{"job": "pretrain"}')
  with pytest.raises(FileNotFoundError, match=f'{run} holds no checkpoint: pass the --workdir'):
    embed.run(embed_config.get_config(f'init_from={run}'), None)
  with pytest.raises(FileNotFoundError, match=f'{tmp_path}/none does not exist'):
    embed.run(embed_config.get_config(f'init_from={tmp_path}/none'), None)


def test_the_module_as_a_command_names_the_embed_job():
  """`python -m bertjax.embed --input_file=x` did nothing and exited 0: it is no command line,
  so it says, in one line, which command runs the embed job."""
  result = subprocess.run([sys.executable, '-m', 'bertjax.embed', '--input_file=x'],
                          capture_output=True, text=True, timeout=300, check=False,
                          cwd=pathlib.Path(__file__).resolve().parents[1])
  assert result.returncode == 1 and result.stdout == ''
  assert result.stderr == ('error: bertjax.embed is not a command line; run the embed job: '
                           f'{embed.COMMAND}\n')
  assert embed.COMMAND.startswith('python -m bertjax.main --config=configs/embed.py')
