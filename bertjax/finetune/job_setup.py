"""Fine-tuning's set-up, shared by training, eval and predict: task, tokenizer, config, objective.

setup() resolves a config against init_from and the run already in the workdir (its task, label
set, model, vocab and pooling); check_head() checks the export format before any data is read;
layout() says how examples become rows; featurized() reads and featurizes a split; num_steps()
and Epochs count the steps of the epochs as google-research/bert does. job.py's
train_and_evaluate and its eval and predict modes start here.
"""

import dataclasses
import fractions
import os

from absl import logging
import jax
import ml_collections

from bertjax import console
from bertjax import files
from bertjax.finetune import batches
from bertjax.finetune import export_formats
from bertjax.finetune import kinds
from bertjax.finetune import run_config
from bertjax.finetune import run_data
from bertjax.finetune.tasks import data_reads
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import task as task_lib
from bertjax.interop import hf_tokenizer_files
from bertjax.interop import init_from
from bertjax.model import encoder_config
from bertjax.text import tokenizer
from bertjax.text import vocab_files
from bertjax.training import checkpoint_reader
from bertjax.training import optimizer as optimizer_lib
from bertjax.training import sharding
from bertjax.training import train_state

# Epochs. The training batches are one stream of concatenated per-epoch permutations
# (batches.py): step s reads examples [s x batch, (s+1) x batch) of it, plus the offset a resume
# at another batch size leaves. An epoch therefore ends inside a step whenever the batch does not
# divide the examples: the epoch shown is the examples seen over the training examples, and the
# per-epoch eval comes after the step whose batch completes an epoch's examples.


def steps_for(num_examples: int, num_epochs: float, batch: int) -> fractions.Fraction:
  """The exact steps `num_epochs` passes over `num_examples` take at `batch`: google-research/
  bert's int(examples / batch x epochs) is its floor. Exact (a float's 4.75 x 4 can land just
  under 19), the epochs taken as written (0.1 is 1/10, not its binary float)."""
  return num_examples * fractions.Fraction(str(num_epochs)) / batch


@dataclasses.dataclass
class Epochs:
  """The examples a run's steps have consumed, as epochs."""

  num_examples: int  # Training features: one epoch.
  batch: int  # Global batch size.
  offset: int = 0  # Examples consumed minus steps x batch (a resume at another batch size).

  def seen(self, step: int) -> int:
    """Examples consumed after `step` steps."""
    return step * self.batch + self.offset

  def at(self, step: int) -> float:
    """The epochs `step` steps have covered (2.5: half-way through the third)."""
    return self.seen(step) / self.num_examples

  def ends_at(self, step: int) -> bool:
    """Whether step `step`'s batch (the `step`-th, 1-based) completes an epoch's examples."""
    seen = self.seen(step)
    return step > 0 and seen // self.num_examples > (seen - self.batch) // self.num_examples

  def start_words(self, total_steps: int) -> str:
    """The run's steps in epochs, for its start line: '19 steps (4 epochs of 38 train features
    at batch 8)'."""
    epochs = f'{self.at(total_steps):.3g}'
    return (f'{total_steps} step{"s" * (total_steps != 1)} ({epochs} '
            f'epoch{"s" * (epochs != "1")} of {self.num_examples} train features at batch '
            f'{self.batch})')


def num_steps(config, num_train_features: int, workdir: str = '') -> int:
  """config.num_train_steps, else the epochs' steps as google-research/bert's run_classifier.py
  counts them: int(train examples / batch x epochs), floored once (the batches run on across
  epoch ends, batches.py: no example of an epoch is dropped), at least 1. Counted in train
  features, the rows trained on: a SQuAD question gives one per window, and run_squad.py counts
  questions (8310 steps where it makes 8212 on SQuAD v1.1 at batch 32, 3 epochs: its epochs
  fall 1.2% short of the windows). A run in `workdir` begun when each epoch counted whole
  batches only keeps the steps it recorded."""
  if config.num_train_steps:
    return config.num_train_steps
  exact = steps_for(num_train_features, config.num_epochs, config.global_batch_size)
  if exact < 1:
    logging.warning('num_epochs=%g is %.3g of a step (%d train features, batch %d): running 1 '
                    'step; set --config.num_train_steps to choose the steps instead',
                    config.num_epochs, float(exact), num_train_features, config.global_batch_size)
  steps = max(1, int(exact))
  if steps >= 2**31:  # Past int32, which the step counter is: an overflow in the first step.
    raise ValueError(f'config.num_epochs={config.num_epochs:g} makes {steps} steps of '
                     f'{config.global_batch_size} over {num_train_features} train features, '
                     'past what a 32-bit step count holds; set --config.num_epochs lower.')
  return _floored_run_steps(config, num_train_features, workdir, steps) or steps


def _floored_run_steps(config, num_train_features: int, workdir: str, steps: int) -> int | None:
  """The steps a run in `workdir` recorded when each epoch counted whole batches only
  (num_epochs x floor(examples / batch)), where it ran with these epochs and batch; None for
  any other run (a new one, or one whose epochs or batch are changed on this resume)."""
  if run_config.trained_run(workdir) is None:
    return None
  last = checkpoint_reader.last_run_config(workdir)  # None unreadable: the resume's checks say so.
  if not isinstance(last, dict):
    return None
  batch, num_epochs = config.global_batch_size, config.num_epochs
  floored = max(1, int(num_epochs * max(1, num_train_features // batch)))
  if (last.get('num_train_steps') != floored or floored == steps or
      last.get('num_epochs') != num_epochs or last.get('global_batch_size') != batch):
    return None
  logging.warning('%s recorded %d steps, the old count of whole batches per epoch: it keeps '
                  'them (num_epochs=%g of %d examples at batch %d make %d steps now, '
                  "google-research/bert's count); --config.num_train_steps=%d trains on to step "
                  '%d', workdir, floored, num_epochs, num_train_features, batch, steps, steps,
                  steps)
  return floored


@dataclasses.dataclass
class Setup:
  """What training and prediction share: the task, tokenizer, resolved config and objective."""

  task: task_lib.Task
  tokenizer: object  # vocab_files.for_model's: WordPiece or SentencePiece, same interface.
  config: ml_collections.ConfigDict  # Unlocked, run-time fields filled in.
  mesh: jax.sharding.Mesh
  objective: train_state.Objective
  init_path: str
  vocab_file: str
  rules: tuple  # config.mesh.rules, parsed.


def setup(config, workdir: str = '') -> Setup:
  """The mesh, the task's reader, the model resolved against init_from, the tokenizer.

  A run in `workdir` that has a config.json keeps its label set: eval and predict never reread
  the training file for it, and a resumed fine-tuning whose training file now has other labels
  stops with an error instead of scoring with a shuffled head.
  """
  mesh = sharding.make_mesh(config.mesh)
  run = run_config.trained_run(workdir)
  if run is not None and run.get('task', config.task) != config.task:
    raise ValueError(f'{workdir} was fine-tuned on task {run["task"]!r} ({run.get("kind")}), not '
                     f'{config.task!r}: use its task to resume, evaluate or predict, or another '
                     '--workdir.')
  saved = run_config.saved_labels(workdir)
  reuse = saved is not None and config.mode != 'train_eval'
  data_reads.check_limits(config.task, config.data, config.mode, run is not None)
  task = registry.get_task(config.task, config.data, seed=config.seed,
                           labels=saved if reuse else (),
                           version_2=None if run is None else run.get('version_2_with_negative'))
  if reuse and tuple(task.labels) != saved:  # A task whose labels are its own (GLUE's).
    raise ValueError(f'{workdir}/config.json lists the labels {list(saved)}, but task '
                     f'{config.task} has {list(task.labels)}: config.json was edited or is '
                     "another run's; restore the one the run wrote.")
  if saved is not None and tuple(task.labels) != saved:
    raise ValueError(f'{workdir} was fine-tuned with labels {list(saved)}, but the training '
                     f'data now has {list(task.labels)}: use another --workdir for a new label '
                     'set, or the data it was trained on.')
  init_path = init_from.configured(config, loads_weights=run is None)
  if run is None:  # A run's own casing is checked against its config.json.
    run_config.check_casing(config, init_path)
  model_cfg, vocab_file = run_config.resolve_model(config, init_path, run, workdir)
  # vocab.txt or a SentencePiece model (the one init_from's pre-training used), told by the file.
  # Messages name the vocab where the user's init_from holds it (a tokenizer.json's vocab is
  # read into a cache file the user never named).
  name = hf_tokenizer_files.vocab_name(vocab_file, init_path) if init_path else ''
  # WordPiece's longest word as init_from's tokenizer sets it (a resume: as the run recorded).
  word_limit = init_from.word_limit(workdir if run is not None else init_path) if (
      run is not None or init_path) else tokenizer.DEFAULT_MAX_INPUT_CHARS_PER_WORD
  tok = vocab_files.for_model(vocab_file, config.data.do_lower_case, vocab_name=name,
                              max_chars_per_word=word_limit)
  vocab_files.check_input_tokens(tok, name)  # [CLS] and [SEP]: one line, not a KeyError later.
  cfg = ml_collections.ConfigDict(config.to_dict())
  cfg.model = model_cfg
  # The vocab actually used (init_from's when data.vocab_file is empty), so that predict and
  # export read the run's config.json and tokenize as training did.
  cfg.data.vocab_file = (vocab_file if files.is_remote(vocab_file)
                         else os.path.realpath(vocab_file))
  # Its hash: a run's vocab.txt edited or cut later is refused by every reader.
  cfg.data.vocab_sha256 = files.sha256(vocab_file)
  cfg.data.max_chars_per_word = word_limit
  cfg.pooling = run_config.resolve_pooling(config, run, init_path)[0]
  cfg.kind = task.kind  # Saved in config.json: what predict and export read the model as.
  cfg.labels = list(task.labels)
  cfg.version_2_with_negative = task.version_2
  if run_data.records_training_data(cfg):  # Rows changed under a run are told on its resume.
    cfg.data.train_sha256 = run_data.data_digest(cfg.data.train_file)
    if cfg.get('mode', 'train_eval') == 'train_eval' and cfg.data.get('eval_file'):
      cfg.data.eval_sha256 = run_data.data_digest(cfg.data.eval_file, 'eval_file')
    if cfg.get('mode', 'train_eval') == 'train_eval' and cfg.data.get('test_file'):
      # What mode=predict of the run's own test file writes as predict_step_N; edited since,
      # its predictions go to a folder of their own (run_config.scored_folder).
      cfg.data.test_sha256 = run_data.data_digest(cfg.data.test_file, 'test_file')
  if run is not None:
    run_config.check_against_run(cfg, run, workdir)
  objective = kinds.objective(task.kind, model_cfg, len(task.labels), cfg.pooling,
                              cfg.data.max_seq_length)
  return Setup(task, tok, cfg, mesh, objective, init_path, vocab_file,
               sharding.parse_rules(cfg.mesh.rules))


def check_head(config, workdir: str) -> tuple[str, str]:
  """(kind, pooling) of the run's head, known before any data is read, with
  config.export_format checked against them."""
  kind, run = export_formats.task_kind(config), run_config.trained_run(workdir)
  init_path = init_from.configured(config, loads_weights=run is None)
  pooling, found = run_config.resolve_pooling(config, run, init_path)
  export_formats.check(config, kind, pooling, found, trained=run is not None)
  # With no run, `found` is said only of init_from's sentence-transformers pooling.
  if run is None and pooling == 'cls' and found and kinds.get(kind).pooled:
    # Standard BERT fine-tuning, but not what the sentence-transformers model was trained as.
    logging.info('init_from %s is a sentence-transformers model whose embedding is the raw [CLS] '
                 "state; the %s head reads BERT's pooler (dense + tanh over [CLS]), as BERT "
                 'fine-tuning does, which sentence-transformers did not train', init_path, kind)
  return kind, pooling


def set_steps(cfg, total_steps: int):
  """The run's steps, and the schedule's where the config leaves them 0 (its default): the
  decay ends with the run and warmup takes optimizer.warmup_proportion of it (BERT's). An
  optimizer.total_steps or warmup_steps of the user's own is kept, never overwritten."""
  cfg.num_train_steps = total_steps
  optimizer_lib.resolve_total_steps(cfg)
  if not cfg.optimizer.warmup_steps:  # 0 is the default: warmup_proportion=0 is no warmup.
    cfg.optimizer.warmup_steps = int(cfg.optimizer.warmup_proportion * total_steps)
  elif cfg.optimizer.warmup_steps > cfg.optimizer.total_steps:
    console.warn_once('config.optimizer.warmup_steps=%d is longer than the '
                        '%d steps of the schedule: the learning rate still rises when the run '
                        'ends (never reaching its peak, never decaying); set '
                        '--config.optimizer.warmup_steps below %d, or leave it 0 for '
                        'optimizer.warmup_proportion of the steps',
                        cfg.optimizer.warmup_steps, cfg.optimizer.total_steps,
                        cfg.optimizer.total_steps)


def layout(s: Setup) -> batches.Layout:
  """How this run's examples become rows (dynamic padding, packing) on its mesh."""
  data = s.config.data
  out = batches.Layout(s.task.kind, data.pad_to_multiple_of, data.max_instances_per_row, s.mesh,
                       s.rules, data.packed_rows_multiple_of, s.config.grad_accum_steps)
  batches.check_layout(out)
  return out


def skipped_total(skipped: dict) -> int:
  """The examples featurized() skipped, over its splits: SQuAD's eval questions kept and scored
  against their text (task_lib.KEPT) are counted there, not skipped."""
  return sum(n for k, n in skipped.items() if not k.endswith(task_lib.KEPT))


def featurized(s: Setup, split: str, is_training: bool, skipped=None):
  """(examples, features, meta) of a split; its skip counts logged, and added to `skipped`
  (named by split but for train) when given."""
  examples, split_skipped = s.task.read(split)
  for kept, said in ((False, 'skipped'), (True, 'kept, scored against their text,')):
    # SQuAD's eval questions whose answer is not located are counted, not skipped.
    counts = {k: v for k, v in split_skipped.items() if k.endswith(task_lib.KEPT) == kept}
    if counts:
      logging.warning('%s: %s %d examples (%s)', split, said, sum(counts.values()),
                      ', '.join(f'{k}: {v}' for k, v in sorted(counts.items())))
  if skipped is not None:
    skipped.update({k if split == 'train' else f'{split}/{k}': v
                    for k, v in split_skipped.items()})
  features, meta = s.task.featurize(examples, s.tokenizer, is_training=is_training)
  encoder_config.check_segments(s.config.model.type_vocab_size, features['segment_ids'],
                                f'task {s.task.name}\'s {split} examples')
  return examples, features, meta
