"""Export time per format for BERT-Base, and the SavedModel's serving speed beside bertjax.

  python bench/export_bench.py [--size=base] [--sentences=256] [--batch=32] [--rounds=3]
      [--formats=hf,tf1,saved_model] [--workdir=/tmp/export_bench]

Export: a BERT-Base encoder with pre-training heads (random weights, the real shapes) saved as a
bertjax Bundle and exported to each format by bertjax.export's writers; wall time per format,
including TensorFlow's and jax2tf's work, in this process (TF already imported).

Serving: the SavedModel of all-MiniLM-L6-v2 (the real checkpoint) and of the Base encoder,
raw strings in (real text: lines of the embedded Shakespeare corpus), mean-pooled embeddings
out, batch --batch; beside bertjax on the same lines: its fast tokenizer then the jitted encoder
(float32, padded to the batch's longest, as the SavedModel pads). Sentences/s is the median of
--rounds after a warm-up round; both sides run in this process, one after the other.
"""

import argparse
import gzip
import os
import pathlib
import shutil
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bertjax import embed  # noqa: E402
from bertjax.interop import bundle as bundle_lib  # noqa: E402
from bertjax.interop import hf_checkpoint  # noqa: E402
from bertjax.interop import saved_model  # noqa: E402
from bertjax.interop import sources  # noqa: E402
from bertjax.interop import tf1_checkpoint  # noqa: E402
from bertjax.pretraining_data import embedded  # noqa: E402
from bertjax.text import fast_tokenizer  # noqa: E402
from configs import common  # noqa: E402


def random_bundle(size: str, vocab_file: str) -> bundle_lib.Bundle:
  cfg = common.model_config(size).to_dict()
  cfg['vocab_size'] = 30522
  rng = np.random.default_rng(0)
  d, f, h = cfg['hidden_size'], cfg['mlp_dim'], cfg['num_heads']
  shapes = {'bert/embeddings/word_embeddings/embedding': (30522, d),
            'bert/embeddings/position_embeddings/embedding': (512, d),
            'bert/embeddings/token_type_embeddings/embedding': (2, d),
            'bert/embeddings/layer_norm/scale': (d,), 'bert/embeddings/layer_norm/bias': (d,),
            'bert/pooler/kernel': (d, d), 'bert/pooler/bias': (d,),
            'mlm/transform/kernel': (d, d), 'mlm/transform/bias': (d,),
            'mlm/layer_norm/scale': (d,), 'mlm/layer_norm/bias': (d,),
            'mlm/output_bias': (30522,), 'nsp/dense/kernel': (d, 2), 'nsp/dense/bias': (2,)}
  for i in range(cfg['num_layers']):
    p = f'bert/layers_{i}'
    for name in ('query', 'key', 'value'):
      shapes[f'{p}/attention/{name}/kernel'] = (d, h, d // h)
      shapes[f'{p}/attention/{name}/bias'] = (h, d // h)
    shapes[f'{p}/attention/out/kernel'] = (h, d // h, d)
    shapes[f'{p}/attention/out/bias'] = (d,)
    for ln in ('attention_layer_norm', 'output_layer_norm'):
      shapes[f'{p}/{ln}/scale'] = (d,)
      shapes[f'{p}/{ln}/bias'] = (d,)
    shapes[f'{p}/mlp/intermediate/kernel'] = (d, f)
    shapes[f'{p}/mlp/intermediate/bias'] = (f,)
    shapes[f'{p}/mlp/output/kernel'] = (f, d)
    shapes[f'{p}/mlp/output/bias'] = (d,)
  params = {k: (rng.standard_normal(s) * 0.02).astype(np.float32) for k, s in shapes.items()}
  return bundle_lib.Bundle(config=cfg, params=params, kind='pretraining', vocab_file=vocab_file,
                           do_lower_case=True, source=f'random {size}')


def corpus_lines(n: int) -> list[str]:
  lines = []
  with gzip.open(embedded.corpus_path('train'), 'rt', encoding='utf-8') as f:
    for line in f:
      if len(line.split()) >= 4:
        lines.append(line.strip())
      if len(lines) >= n:
        break
  return lines


def time_exports(result, formats, workdir: pathlib.Path):
  writers = {'hf': hf_checkpoint.save, 'tf1': tf1_checkpoint.save, 'saved_model':
             saved_model.save}
  for fmt in formats:
    out = workdir / f'base_{fmt}'
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    start = time.perf_counter()
    writers[fmt](result, out)
    seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in out.rglob('*') if p.is_file()) / 2**20
    print(f'export {fmt:12s} {result.config["num_layers"]} layers: {seconds:6.1f} s '
          f'({size:.0f} MiB)', flush=True)


def serving_rates(name, result, path, lines, batch: int, rounds: int):
  tf, _ = fast_tokenizer.import_tf()
  serve = tf.saved_model.load(str(path)).signatures['serving_default']
  tok = fast_tokenizer.FastTokenizer(result.vocab_file, do_lower_case=result.do_lower_case)
  params = saved_model._params_tree(result)  # pylint: disable=protected-access
  import jax  # pylint: disable=g-import-not-at-top
  fn = jax.jit(saved_model.jax_function(result))

  def run_tf():
    for s in range(0, len(lines), batch):
      serve(text=tf.constant(lines[s:s + batch]))['mean_pooled_output'].numpy()

  cls, sep = tok.vocab['[CLS]'], tok.vocab['[SEP]']

  def run_jax():
    for s in range(0, len(lines), batch):
      rows = [[cls, *ids[:126], sep] for ids in tok.encode_batch(lines[s:s + batch])]
      length = max(map(len, rows))
      input_ids = np.zeros((len(rows), length), np.int32)
      for i, row in enumerate(rows):
        input_ids[i, :len(row)] = row
      mask = (input_ids > 0).astype(np.int32)
      np.asarray(fn(params, input_ids, mask, np.zeros_like(mask))['mean_pooled_output'])

  rates = {}
  for label, fn_run in (('SavedModel (TF)', run_tf), ('bertjax (JAX)', run_jax)):
    fn_run()  # Warm-up: traces and compiles every length seen.
    times = []
    for _ in range(rounds):
      start = time.perf_counter()
      fn_run()
      times.append(time.perf_counter() - start)
    rates[label] = len(lines) / statistics.median(times)
  print(f'serve {name:8s} ' + ', '.join(f'{k} {v:7.1f} sentences/s' for k, v in rates.items())
        + f'; ratio SavedModel/bertjax {rates["SavedModel (TF)"] / rates["bertjax (JAX)"]:.2f}',
        flush=True)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--size', default='base')
  parser.add_argument('--sentences', type=int, default=256)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--formats', default='hf,tf1,saved_model')
  parser.add_argument('--workdir', default='/tmp/export_bench')
  args = parser.parse_args()
  workdir = pathlib.Path(args.workdir)
  print(f'{os.cpu_count()} CPU cores; {args.sentences} sentences, batch {args.batch}')
  minilm_dir = embed.default_checkpoint()
  base = random_bundle(args.size, str(minilm_dir / 'vocab.txt'))
  time_exports(base, args.formats.split(','), workdir)
  lines = corpus_lines(args.sentences)
  minilm = sources.load(minilm_dir)
  out = workdir / 'minilm_saved_model'
  shutil.rmtree(out, ignore_errors=True)
  out.mkdir(parents=True)
  saved_model.save(minilm, out)
  serving_rates('MiniLM', minilm, out, lines, args.batch, args.rounds)
  if 'saved_model' in args.formats:
    serving_rates(args.size, base, workdir / 'base_saved_model', lines, args.batch, args.rounds)


if __name__ == '__main__':
  main()
