"""BERT pre-training (MLM + NSP), from a laptop CPU to a TPU pod.

  python -m bertjax.main --config=configs/pretrain.py:size=tiny --workdir=/tmp/bertjax_tiny

With no `data.train_files` it pre-trains on the embedded Shakespeare + KJV corpus (its
TFRecords are created under <workdir>/data first, ~5 s). Expected for size=tiny (defaults below,
600 steps of 64 x 128 tokens) on 2 CPU cores: 5-8 min, eval MLM accuracy 0.140 against a
unigram-frequency baseline of 0.073 on the same eval data, NSP accuracy 0.550 (the README's
figures, the same on every run with the default seed).

On a pod, run the same command on every host with the size, the data and a bucket:
  --config=configs/pretrain.py:size=base,vocab=30522 --config.data.train_files=gs://b/train-* \
  --config.data.eval_files=gs://b/eval-* --config.data.vocab_file=gs://b/vocab.txt \
  --workdir=gs://b/runs/base
BERT-Base recipe (paper): batch 256, 1M steps, lr 1e-4, 10k warmup, seq 128 for 90% then 512.
Arguments: size=tiny|mini|small|medium|base|large, steps=<train steps>, batch=<global batch>,
seq=<max_seq_length>, vocab=<vocab size>, dtype=float32|bfloat16, optimizer=adamw|lamb,
init_from=<dir>, phase2_fraction=<share of steps at phase2_seq> (0.1 = the paper's two
phases), phase2_seq=<its length, 512>, pack=<instances per row; 1 = unpacked, 3 = MLPerf's>.

The paper's two phases (90% of the steps at 128 tokens / 20 predictions, 10% at 512 / 80),
one schedule, the optimizer state carried across:
  --config=configs/pretrain.py:size=base,vocab=30522,phase2_fraction=0.1 \
  --config.data.train_files=gs://b/train128-* --config.phase2.train_files=gs://b/train512-* ...
"""

import pathlib
import sys

import ml_collections

from bertjax.pretraining_data import embedded

try:
  from configs import common
except ImportError:  # Loaded by path (--config=<checkout>/configs/...) from another directory.
  sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))
  from configs import common

# Per size: (global batch, peak learning rate, warmup steps, train steps) defaults. tiny/mini
# are sized for a CPU demo on the embedded corpus; small+ follow BERT's recipe.
RECIPES = {
    'tiny': (64, 2e-3, 60, 600),
    'mini': (64, 1e-3, 100, 1000),
    'small': (256, 1e-4, 10_000, 1_000_000),
    'medium': (256, 1e-4, 10_000, 1_000_000),
    'base': (256, 1e-4, 10_000, 1_000_000),
    'large': (256, 1e-4, 10_000, 1_000_000),
}


def get_config(arg=None):
  arg = common.parse_arg(arg, size='tiny', steps=0, batch=0, seq=128, dtype='float32',
                         optimizer='adamw', vocab=embedded.VOCAB_SIZE, init_from='',
                         phase2_fraction=0.0, phase2_seq=512, pack=1, recipe=('steps', 'batch'))
  if arg.size not in RECIPES:
    raise ValueError(f'unknown size {arg.size!r}{common.did_you_mean(arg.size, RECIPES)}; valid '
                     f'sizes: {", ".join(RECIPES)}.')
  if not 0.0 <= arg.phase2_fraction < 1.0:
    raise ValueError(f'phase2_fraction={arg.phase2_fraction}: the share of the steps run at '
                     'phase2_seq must be in [0, 1) (the paper: 0.1; 0 = one phase).')
  batch, learning_rate, warmup, steps = RECIPES[arg.size]
  steps = arg.steps or steps
  config = ml_collections.ConfigDict()
  config.job = 'pretrain'  # Which job bertjax.main runs.
  config.seed = 0  # Parameter init, dropout and data order all derive from it.
  # vocab_size must equal data.vocab_file's entries: 8192 for the embedded corpus, 30522 for
  # BERT's uncased vocab (pass vocab=30522, or pad to 30592 for tensor parallelism > 2).
  # attention_impl and scan_layers: 'auto', chosen by the platform at the run's start.
  config.model = common.model_config(arg.size, dtype=arg.dtype, vocab_size=arg.vocab)
  config.num_train_steps = ml_collections.FieldReference(steps)  # Optimizer updates.
  config.global_batch_size = arg.batch or batch  # Sequences per update, over all hosts.
  config.grad_accum_steps = 1  # Micro-batches per update (memory): batch/accum run at once.

  config.data = ml_collections.ConfigDict()
  # TFRecords from create_pretraining_data (globs, comma-separated). '' = the embedded corpus,
  # made under <workdir>/data on first use.
  config.data.train_files = ''
  config.data.eval_files = ''  # Held-out TFRecords; '' with train_files '' = embedded eval split.
  # The vocab.txt or SentencePiece .model the data was made with (told by the file), checked
  # against the data's report and model.vocab_size; '' = the embedded corpus's vocab, or with
  # train_files the one their report names (if still there, unchanged).
  config.data.vocab_file = ''
  config.data.max_seq_length = ml_collections.FieldReference(arg.seq)  # The files'.
  # Must equal the files' (static masking); phase2's follows it (below).
  config.data.max_predictions_per_seq = ml_collections.FieldReference(20)
  # False: files hold static masks (BERT). True: unmasked files (create_pretraining_data
  # --nostatic_masking), masked anew each epoch in the pipeline (RoBERTa-style).
  config.data.dynamic_masking = False
  # Share of tokens masked. BERT 0.15; up to ~0.3 for MLM-only models (ModernBERT);
  # max_predictions_per_seq must hold the share of a full row. Static masks: must equal the
  # files' (create_pretraining_data --masked_lm_prob; checked against their report).
  config.data.masked_lm_prob = 0.15
  # What is masked: wordpiece (BERT: each piece alone), whole_word (every piece of a word),
  # ngram (1-3 whole words, TF Model Garden), span (SpanBERT: whole-word spans, geometric
  # lengths of mean 3.8 words). Static masks: must equal the files' (--masking; checked).
  config.data.masking = 'wordpiece'
  config.data.shuffle_window = 10_000  # Records permuted together (memory ~ window x record).
  config.data.num_lanes = 16  # Files read in parallel per host.
  # Instances per row: 1 = one (BERT). More reads packed files (create_pretraining_data --pack
  # --max_instances_per_row=N; the embedded corpus is packed so), in every phase: the padding
  # goes, attention stays inside each instance and the loss counts instances.
  config.data.max_instances_per_row = arg.pack
  config.data.dupe_factor = 5  # Embedded corpus only: passes over it when creating TFRecords.

  # The paper's recipe in one run: the last phase2_fraction of the steps at a longer length,
  # on their own files, with the same learning-rate schedule, optimizer state and batch size.
  config.phase2 = ml_collections.ConfigDict()
  config.phase2.fraction = arg.phase2_fraction  # Share of num_train_steps; 0 = one phase.
  config.phase2.max_seq_length = ml_collections.FieldReference(arg.phase2_seq)  # The paper: 512.
  # Phase 2's predictions scaled with the lengths (the paper: 80 at 512), rounded half up: it
  # follows data.max_predictions_per_seq and both lengths until set itself. (`1 // (|seq| + 1)`:
  # 1 at 0, else 0, keeps the division defined for config_check to name a length of 0.)
  seq = config.data.get_ref('max_seq_length')
  config.phase2.max_predictions_per_seq = (
      (config.data.get_ref('max_predictions_per_seq') * config.phase2.get_ref('max_seq_length')
       * 2 + seq) // (2 * abs(seq) + 1 // (abs(seq) + 1)))
  # TFRecords made at phase2's lengths; '' with data.train_files '' = the embedded corpus.
  config.phase2.train_files = ''
  config.phase2.eval_files = ''

  # The decay ends with the run: total_steps follows num_train_steps until it is set itself
  # (a derived reference, `+ 0`: setting it never changes num_train_steps, as a shared one
  # would), to run part of a longer schedule (num_train_steps=1000 of total_steps=1000000).
  config.optimizer = common.optimizer_config(
      name=arg.optimizer, learning_rate=learning_rate, warmup_steps=warmup,
      total_steps=config.get_ref('num_train_steps') + 0)
  config.mesh = common.mesh_config()
  config.checkpoint = common.checkpoint_config(every_steps=200, keep=3)
  # Start from these weights (continued pre-training): a bertjax workdir, its checkpoints/<step>
  # or a transformers BERT dir; encoder and heads are loaded, the optimizer starts fresh.
  # Ignored when the workdir already holds a checkpoint (that one is resumed).
  config.init_from = arg.init_from
  config.init_from_step = 'latest'  # Of a bertjax run in init_from: latest, best or a number.

  common.add_logging(config, log_every_steps=50)
  config.eval_every_steps = 200  # Eval over all of data.eval_files; 0 = only at the end.
  config.eval_batch_size = config.global_batch_size  # Over all hosts.
  config.max_eval_batches = -1  # Cap per eval (-1: the whole eval set, exactly once).
  # Stop after this many evals without an improvement of checkpoint.best_metric (default: the
  # eval MLM accuracy; 0 = never): a run past its best on held-out text ends there, its best step
  # kept (keep_best >= 1) for --step=best.
  config.early_stopping_patience = 0
  return config.lock()
