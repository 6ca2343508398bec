"""Shared by the fine-tuning tests: a tiny SST-2-like task on disk and its tiny config."""

import pathlib

import numpy as np
import pretrain_runs

from bertjax.interop import init_from
from bertjax.pretraining_data import embedded
from bertjax.training import checkpoint
from configs import finetune as finetune_config

POSITIVE = ['love', 'sweet', 'gentle', 'fair']
NEGATIVE = ['death', 'blood', 'foul', 'grief']
FILLER = ['the', 'king', 'doth', 'speak', 'of', 'his', 'lord', 'and', 'my', 'heart']


def write_sst2(directory: pathlib.Path, n_train=64, n_dev=24, n_test=10, seed=0):
  rng = np.random.default_rng(seed)

  def sentence(label):
    words = list(rng.choice(FILLER, 5)) + [rng.choice(POSITIVE if label else NEGATIVE)]
    rng.shuffle(words)
    return ' '.join(words)

  directory.mkdir(parents=True, exist_ok=True)
  for name, n in (('train.tsv', n_train), ('dev.tsv', n_dev)):
    labels = rng.integers(0, 2, n)
    rows = [f'{sentence(y)}\t{y}' for y in labels]
    (directory / name).write_text('sentence\tlabel\n' + '\n'.join(rows) + '\n')
  rows = [f'{i}\t{sentence(int(rng.integers(0, 2)))}' for i in range(n_test)]
  (directory / 'test.tsv').write_text('index\tsentence\n' + '\n'.join(rows) + '\n')
  return directory


def tiny_config(data_dir, **overrides):
  config = finetune_config.get_config('task=sst2,size=tiny,seq=16,batch=16,lr=1e-3,epochs=2')
  config.unlock()
  config.data.data_dir = str(data_dir)
  config.model.vocab_size = embedded.VOCAB_SIZE  # No init: the embedded corpus's vocab.
  config.log_every_steps = 2
  config.eval_batch_size = 16
  config.checkpoint.every_steps = 3
  return pretrain_runs.set_fields(config, overrides)


def final_params(workdir) -> dict:
  step_dir = max((pathlib.Path(workdir) / 'checkpoints').glob('[0-9]*'), key=lambda p: int(p.name))
  return checkpoint.flatten(init_from.read_params(step_dir)), int(step_dir.name)


def crash_at_step(monkeypatch, step: int):
  """Fine-tuning killed (KeyboardInterrupt) where it draws the batch after `step` steps ran;
  returns the batches' own example_indices, to put back (monkeypatch.setattr)."""
  from bertjax.finetune import batches  # pylint: disable=g-import-not-at-top
  example_indices = batches.example_indices

  def crashing(first, batch_size, *args, **kwargs):
    if first == step * batch_size:
      raise KeyboardInterrupt('killed')
    return example_indices(first, batch_size, *args, **kwargs)

  monkeypatch.setattr(batches, 'example_indices', crashing)
  return example_indices
