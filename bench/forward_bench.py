"""Forward-pass throughput: bertjax vs transformers' PyTorch BERT, same config, same batch.

  python bench/forward_bench.py [--sizes=tiny,mini,base] [--seq_len=128] [--dtype=float32]

Prints sequences/s of the pre-training forward pass (encoder + MLM head at the gathered
positions + NSP) for each size, and of PyTorch `BertForPreTraining` run the stock way (vocab
logits at every position) and with the MLM head at the gathered positions only, in the same
process, with the ratio against the faster of the two. Not a test: figures only.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from bertjax import console  # noqa: E402
from bertjax.model import heads  # noqa: E402
from configs import common  # noqa: E402

_SIZES = flags.DEFINE_list('sizes', ['tiny', 'mini', 'base'], 'Model sizes to run.')
_SEQ_LEN = flags.DEFINE_integer('seq_len', 128, 'Sequence length.')
_PREDICTIONS = flags.DEFINE_integer('max_predictions', 20, 'Masked positions per sequence.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'bertjax compute dtype.')
_SECONDS = flags.DEFINE_float('seconds', 5.0, 'Time budget per measurement.')
_TORCH = flags.DEFINE_bool('torch', True, 'Also time transformers PyTorch BERT.')
BATCH = {'tiny': 32, 'mini': 32, 'small': 32, 'medium': 16, 'base': 8, 'large': 4}


def make_batch(cfg, batch_size, seq_len, predictions, seed=0):
  rng = np.random.default_rng(seed)
  batch = heads.dummy_batch(batch_size, seq_len, predictions)
  batch['input_ids'] = rng.integers(1000, cfg.vocab_size, (batch_size, seq_len)).astype(np.int32)
  batch['segment_ids'][:, seq_len // 2:] = 1
  batch['masked_lm_positions'] = np.sort(
      rng.integers(1, seq_len, (batch_size, predictions)), axis=1).astype(np.int32)
  return batch


def time_calls(fn, seconds):
  """Median seconds per call after one warm-up (compile) call."""
  fn()
  times, start = [], time.perf_counter()
  while time.perf_counter() - start < seconds or len(times) < 3:
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return float(np.median(times))


def bench_bertjax(cfg, batch):
  module = heads.BertForPreTraining(cfg)
  params = jax.jit(module.init)(jax.random.key(0), **batch)
  forward = jax.jit(module.apply)
  return time_calls(lambda: jax.block_until_ready(forward(params, **batch)), _SECONDS.value)


def bench_torch(cfg, batch):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  hf = transformers.BertConfig(
      vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
      num_attention_heads=cfg.num_heads, intermediate_size=cfg.mlp_dim,
      attn_implementation='sdpa')
  ref = transformers.BertForPreTraining(hf).eval()
  inputs = dict(input_ids=torch.tensor(batch['input_ids'], dtype=torch.long),
                attention_mask=torch.tensor(batch['input_mask'], dtype=torch.long),
                token_type_ids=torch.tensor(batch['segment_ids'], dtype=torch.long))

  positions = torch.tensor(batch['masked_lm_positions'], dtype=torch.long)

  def stock():
    with torch.inference_mode():
      ref(**inputs)

  def gathered():  # The MLM head only at the masked positions, as the original BERT does.
    with torch.inference_mode():
      seq, pooled = ref.bert(**inputs, return_dict=False)[:2]
      seq = torch.gather(seq, 1, positions[..., None].expand(-1, -1, seq.shape[-1]))
      ref.cls(seq, pooled)
  return (time_calls(stock, _SECONDS.value), time_calls(gathered, _SECONDS.value),
          torch.get_num_threads())


def main(argv):
  del argv
  console.install()  # Libraries' INFO lines (jax's backend probing) held, as bertjax.main does.
  print(f'devices: {jax.devices()}; seq {_SEQ_LEN.value}, {_PREDICTIONS.value} predictions, '
        f'bertjax dtype {_DTYPE.value}')
  print(f'{"size":<7}{"batch":>6}{"bertjax seq/s":>15}{"torch stock":>13}{"torch gathered":>16}'
        f'{"ratio vs faster":>17}')
  for size in _SIZES.value:
    cfg = common.model_config(size, dtype=_DTYPE.value)
    b = BATCH[size]
    batch = make_batch(cfg, b, _SEQ_LEN.value, _PREDICTIONS.value)
    ours = b / bench_bertjax(cfg, batch)
    if _TORCH.value:
      stock, gathered, threads = bench_torch(cfg, batch)
      best = max(b / stock, b / gathered)
      print(f'{size:<7}{b:>6}{ours:>15.1f}{b / stock:>13.1f}{b / gathered:>16.1f}'
            f'{ours / best:>16.2f}x   (torch threads {threads})')
    else:
      print(f'{size:<7}{b:>6}{ours:>15.1f}')


if __name__ == '__main__':
  app.run(main)
