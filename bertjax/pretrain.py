"""BERT pre-training: the job that hands the MLM + NSP objective and its eval to the loop.

  check the config against the mesh -> data files (the embedded corpus's made on first use,
  checked) -> Objective
  (pretrain_objective.py: BertForPreTraining, MLM + NSP loss) -> tf.data batches from the
  examples consumed so far -> training/loop.run (pretrain_eval.py: eval on the held-out files,
  with the unigram baseline) -> the summary line.
"""

import contextlib
import dataclasses
import time

from absl import logging

from bertjax import console
from bertjax import files
from bertjax import job_config
from bertjax import paths
from bertjax import phase_plan
from bertjax import pretrain_eval
from bertjax import pretrain_objective
from bertjax.input import global_batch
from bertjax.input import input_pipeline
from bertjax.input import masking_tf
from bertjax.input import record_check
from bertjax.interop import init_from
from bertjax.pretraining_data import embedded
from bertjax.records import file_set
from bertjax.text import vocab_files
from bertjax.training import checkpoint_reader
from bertjax.training import hosts
from bertjax.training import loop
from bertjax.training import perf
from bertjax.training import progress
from bertjax.training import resume_checks
from bertjax.training import run_files
from bertjax.training import sharding
from bertjax.training import train_state
from bertjax.training import workdir_lock

# The objective lives in pretrain_objective.py, which imports no TensorFlow (the train step and
# the bench need only it); the job's callers keep finding it here.
BEST_METRIC = pretrain_objective.BEST_METRIC
eval_metric_names = pretrain_objective.eval_metric_names
loss = pretrain_objective.loss
normalizers = pretrain_objective.normalizers
objective = pretrain_objective.objective
eval_step = pretrain_objective.eval_step


# ---------------------------------------------------------------------------------------------
# The job.


@dataclasses.dataclass(frozen=True)
class Phase:
  """Steps [first_step, end_step) at one length, on their own files (the paper's phase 1 at
  128 tokens, phase 2 at 512). One schedule and optimizer state run through every phase."""

  first_step: int
  end_step: int
  max_seq_length: int
  max_predictions_per_seq: int
  train_files: object  # Pattern, then a checked file_set.FileSet.
  eval_files: object  # Pattern or FileSet; '' / None = no eval in this phase.

  def holds(self, step: int) -> bool:
    """Whether the metrics after `step` steps belong to this phase (its end included)."""
    return self.first_step < step <= self.end_step


def phases(config, workdir, finished: int = 0) -> list[Phase]:
  """One phase, or two with config.phase2.fraction > 0, with their file patterns; the embedded
  corpus's files (data.train_files empty) are made on first use at each phase's lengths. A phase
  the run `finished` (the step it resumes from) is never read again: no files (None), its own
  no longer needed (phase 1's 128-token set moved away to free a bucket)."""
  # config_check_jobs.check_pretrain refused phases without a step or files (the job's start).
  data, second, total = config.data, config.phase2, config.num_train_steps
  first_steps = phase_plan.phase2_start(total, second.fraction) if second.fraction else total
  plan = [(0, first_steps, data.max_seq_length, data.max_predictions_per_seq,
           data.train_files, data.eval_files)]
  if first_steps < total:
    plan.append((first_steps, total, second.max_seq_length, second.max_predictions_per_seq,
                 second.train_files, second.eval_files))
  result = []
  for first, end, seq, predictions, train, eval_ in plan:
    if end <= finished:
      train = eval_ = None
    elif not data.train_files:
      train, eval_ = embedded.pretraining_files(
          f'{workdir}/data', max_seq_length=seq, max_predictions_per_seq=predictions,
          dupe_factor=data.dupe_factor, static_masking=not data.dynamic_masking,
          nsp=config.model.nsp, max_instances_per_row=data.max_instances_per_row,
          masking=data.masking, masked_lm_prob=data.masked_lm_prob, resumed=finished > 0)
    result.append(Phase(first, end, seq, predictions, train, eval_))
  return result


def vocab_file(config) -> str:
  """The vocab the data was made with: data.vocab_file, or the embedded corpus's."""
  return config.data.vocab_file if config.data.train_files else str(embedded.vocab_path())


def take_data_vocab(config, phase2: bool = False):
  """Sets an unset data.vocab_file, with train files of your own, to the vocab their reports
  say they were made with (still that file: file_set.vocab_of): the run checks the data and
  init_from against it and records it, as it does a vocab given. One changed since is refused;
  one gone (data made on another machine) is warned about, the data read unchecked. `phase2`:
  a run resumed in phase 2 reads phase 2's files (phase 1's may be gone)."""
  if config.data.vocab_file or not config.data.train_files:
    return
  try:
    made_with = file_set.vocab_of(file_set.resolve(
        config.phase2.train_files if phase2 else config.data.train_files))
  except FileNotFoundError as e:  # Made on another machine: read unchecked, as before, but said.
    logging.warning('%s (the run checks the data against no vocab and records none)', e)
    return
  if made_with:
    logging.info('data.vocab_file: %s, the vocab data.train_files were made with (their report)',
                 made_with)
    with config.unlocked():
      config.data.vocab_file = made_with


def check_data(config, phase: Phase, vocab_file, init_path, workdir=None) -> Phase:
  """The phase with its files resolved to FileSets, every data input checked before anything is
  compiled: its length against the position table, the file sets against their reports (eval
  files too: a mistake there would surface only at the first eval), their vocab against the
  model's (data.vocab_file, else the start-from checkpoint's) and each file's first record
  against the phase's lengths, the masking and NSP; files without a report are counted (read
  whole) now, not as their phase or eval comes, and kept in `workdir` for the next start
  (count_cache). The pipelines read these FileSets: nothing is resolved or counted twice. Every
  host checks its share together (hosts.fail_together: one host's damaged file or missing path
  stops them all at once) and the hosts must match the same files."""
  with hosts.fail_together():
    phase = _checked_data(config, phase, vocab_file, init_path, workdir)
  which = 'phase2' if phase.first_step else 'data'
  hosts.check_same_view('', ' '.join(f'{len(f.files)} files {f.files[0]}..{f.files[-1]}'
                                     for f in (phase.train_files, phase.eval_files) if f)
                        + '\n' + '\n'.join(phase.train_files.files + (
                            phase.eval_files.files if phase.eval_files else [])),
                        what=f'{which}.train_files/eval_files', fix=(
                            'every host must match the same files: let copies finish, or put '
                            'the data in a bucket or on a file system all the hosts share'))
  return phase


def _checked_data(config, phase: Phase, vocab_file, init_path, workdir) -> Phase:
  if phase.max_seq_length > config.model.max_position_embeddings:
    raise ValueError(f'max_seq_length {phase.max_seq_length} (steps {phase.first_step}..'
                     f'{phase.end_step}) exceeds the position table '
                     f'(model.max_position_embeddings={config.model.max_position_embeddings}).')
  model_vocab = vocab_file or (init_from.vocab_file(init_path) if init_path else None)
  masked = not config.data.dynamic_masking
  spec = record_check.feature_spec(phase.max_seq_length, phase.max_predictions_per_seq,
                                   masked=masked, nsp=config.model.nsp,
                                   max_instances_per_row=config.data.max_instances_per_row)
  checked = []
  for pattern in (phase.train_files, phase.eval_files):
    field = ('train_files', 'eval_files')[len(checked)]
    which = 'phase2' if phase.first_step else 'data'
    try:  # Files moved or deleted since (a resume's, given again): the field that names them.
      checked.append(file_set.resolve(pattern) if pattern else None)
    except FileNotFoundError as e:
      raise FileNotFoundError(f'config.{which}.{field}: {e}') from None
    if pattern:
      with _refused():
        if field == 'eval_files' and checked[0] is not None:  # Remade, not the config changed.
          file_set.check_made_alike(checked[0], checked[-1], (f'{which}.train_files',
                                                              f'{which}.eval_files'), _same_ids)
        with _shared_by_both(f'phase2.{field}={pattern}' if phase.first_step else ''):
          file_set.check_vocab(checked[-1], model_vocab_size=config.model.vocab_size,
                               vocab_file=model_vocab, same_ids=_same_ids)
          if masked:
            file_set.check_masking(checked[-1], masking=config.data.masking,
                                   masked_lm_prob=config.data.masked_lm_prob)
        record_check.check_first_record(checked[-1].files[0], spec, masked=masked,
                                        which=f'{which}.{field}')
      checked[-1] = input_pipeline.counted(checked[-1], spec, masked=masked,
                                           every_host_file=field == 'eval_files', workdir=workdir)
  _warn_of_shared_files(phase, *checked)
  return dataclasses.replace(phase, train_files=checked[0], eval_files=checked[1])


def _same_ids(vocab, other) -> bool:
  """Whether two vocab files of other bytes give the same ids (a vocab.txt's line ends)."""
  return not vocab_files.difference(vocab, other)


@contextlib.contextmanager
def _refused():
  """Files the config does not match (their vocab, masking, lengths, NSP) refused as the config
  is: exit 78, which a scheduler does not restart, since a restart would read the same files
  (a file missing, damaged or still being copied stays an error a restart may mend)."""
  try:
    yield
  except ValueError as e:
    if isinstance(e, (console.Refused, record_check.UnreadableFile)):
      raise
    raise console.Refused(str(e)) from e


@contextlib.contextmanager
def _shared_by_both(files_of_phase2: str):
  """Phase 2's files refused for their vocab or masking, which both phases share: the fix said
  (set data.X to the files') would refuse phase 1's; the message names phase 2's files."""
  try:
    yield
  except ValueError as e:
    if not files_of_phase2:
      raise
    raise ValueError(f'{files_of_phase2}: {e} (both phases read data.vocab_file, data.masking '
                     'and data.masked_lm_prob: make phase 2\'s files as phase 1\'s were made)'
                     ) from None


def _warn_of_shared_files(phase: Phase, train, held_out):
  """Says so when the eval files are among the training files: the eval then scores text the
  model trains on (its accuracy climbs with memorisation, not with what it learned)."""
  if train is None or held_out is None:
    return
  shared = sorted(set(map(paths.file_key, train.files))
                  & set(map(paths.file_key, held_out.files)))
  if shared:
    which = 'phase2' if phase.first_step else 'data'
    logging.warning('%d of the %d %s.eval_files are also %s.train_files (e.g. %s): the eval '
                    'scores text the model trains on; hold out other files for it '
                    '(create_pretraining_data writes a separate eval set from held-out text).',
                    len(shared), len(held_out.files), which, which, shared[0])


def masking_config(config, vocab_file):
  """The dynamic-masking settings (None for static masks read from the files); each phase's
  cap on the predictions was checked with the config (config_check: before any data is made)."""
  if not config.data.dynamic_masking:
    return None
  data = config.data
  vocab = vocab_files.load_vocab(vocab_file)  # A vocab.txt's tokens or a SentencePiece model's.
  missing = [t for t in ('[MASK]', '[CLS]', '[SEP]') if t not in vocab]
  if missing:
    raise ValueError(f'data.vocab_file={vocab_file} has no {missing}: dynamic masking needs '
                     'them (a SentencePiece model as control symbols, which learn_vocab '
                     '--model=sentencepiece adds)')
  sentencepiece = vocab_files.is_sentencepiece(vocab_file)
  if sentencepiece:
    vocab_files.check_word_starts(vocab, data.masking, f'data.vocab_file={vocab_file}',
                                  '--config.data.masking=wordpiece')
  return masking_tf.MaskingConfig(
      vocab_size=len(vocab), mask_id=vocab['[MASK]'], cls_id=vocab['[CLS]'],
      # A SentencePiece model's own pad id: its id 0 may be <unk>, a real token to mask.
      sep_id=vocab['[SEP]'], pad_id=vocab_files.pad_id(vocab_file, vocab),
      masked_lm_prob=data.masked_lm_prob,
      # Whole words by '##' continuations, or by SentencePiece's '▁' word starts.
      continuation=masking_tf.continuation_flags(vocab, sentencepiece),
      strategy=data.masking)


def _describe(step, means) -> str:
  del step
  nsp = f', nsp acc {means["nsp_accuracy"]:.4f}' if 'nsp_accuracy' in means else ''
  return (f': loss {means["loss"]:.4f}, mlm acc {means["mlm_accuracy"]:.4f}{nsp}, lr '
          f'{means["learning_rate"]:.2e}, grad norm {means["grad_norm"]:.3f}')


def train_and_evaluate(config, workdir: str) -> dict:
  """Pre-trains per `config`, writing checkpoints and TensorBoard logs to `workdir`.

  Returns the last eval metrics (plus 'unigram_baseline') for tests and notebooks; the
  console's last line is the run's summary (progress.summary).
  """
  try:
    return _pretrain(config, workdir)
  finally:
    console.forget_warnings()  # The next run in this process (a notebook's) says them again.


def _pretrain(config, workdir) -> dict:
  start = time.perf_counter()
  config, workdir = job_config.job_start(config, workdir, 'pretrain')
  with workdir_lock.locked(workdir):
    outcome = _train_and_evaluate(config, workdir)
  progress.summary('pretrain', time.perf_counter() - start, outcome, workdir,
               main_metric=BEST_METRIC)
  return outcome.eval_metrics


def _check_workdir_job(workdir: str):
  """Refuses a workdir that holds another job's run (a fine-tuning run's checkpoints would
  only be told apart by their classifier's parameters, after the data is made)."""
  if paths.is_run(workdir):
    job = (init_from.run_config(workdir) or {}).get('job', 'pretrain')
    if job != 'pretrain':
      raise ValueError(f'{workdir} holds a {job} run: pre-train in another --workdir '
                       '(init_from=<a run> starts from its weights).')


def _check_init_from_function(config, path: str):
  """Refuses init_from weights trained under another activation or LayerNorm epsilon than the
  run's model (the shapes fit, so they would load and train on as another function)."""
  source = init_from.model_config(path)
  fields = [k for k in resume_checks.FUNCTION_FIELDS if source[k] != config.model[k]]
  if fields:
    said = ', '.join(f'model.{k}={source[k]!r} (this run: {config.model[k]!r})' for k in fields)
    fix = ' '.join(f'--config.model.{k}={source[k]}' for k in fields)
    raise ValueError(f'init_from={path} was trained with {said}: set {fix} so that its weights '
                     'compute what they were trained to.')


def _resumed_at(workdir: str) -> int:
  """The newest checkpoint's step a run in `workdir` resumes from (0: none, a new run)."""
  return max(checkpoint_reader.steps(files.join(workdir, 'checkpoints')), default=0) if (
      paths.is_run(workdir)) else 0


def _say_init_from_on_a_resume(path: str, workdir: str, config, resumed_at: int):
  """Warns that init_from is not read by a run that resumes from its own checkpoints (at step
  `resumed_at`: _resumed_at; another one than the run began from, or another step of it:
  fine-tuning says the same); else checks what it will load (`path`: init_from.configured)."""
  if not resumed_at:
    if path:
      _check_init_from_function(config, path)
    return
  run = init_from.run_config(workdir) or {}
  began = init_from.named(run)
  if not init_from.began_from(config, run):
    logging.warning('init_from=%s is not loaded: %s resumes from its own checkpoint (the run '
                    'began from %s); to start from those weights, pre-train in another '
                    '--workdir', init_from.named(config) or "''", workdir,
                    began or 'random weights')


def _check_and_record_vocab(config, path: str, vocab: str, workdir: str, finished: int):
  """The data's vocab (checked against the files later) must be the weights' own at `path`: the
  embedded corpus's too, whose data is made with its own vocab. Its hash goes into config.json:
  the run's vocab.txt edited later is refused by every reader. One gone (moved since the run
  began) is named with its field and, on a resume, the copy the run keeps (`finished`: steps)."""
  if vocab and not files.exists(vocab):
    kept = files.join(workdir, run_files.RUN_VOCAB)
    own = (f'; this run keeps the vocab it trained with: --config.data.vocab_file={kept}'
           if finished and files.exists(kept) else '')
    raise FileNotFoundError(f'config.data.vocab_file: {vocab} does not exist (moved or deleted '
                            f'since?): pass the vocab where it is now{own}.')
  if config.data.train_files:
    init_from.check_same_vocab(path, config.data.vocab_file, 'data.vocab_file')
  else:
    init_from.check_same_vocab(path, vocab, '', fix=(
        'the embedded corpus is tokenized with it; make data with the weights\' vocab '
        '(python -m bertjax.create_pretraining_data --vocab_file=...) and pass it as '
        'data.train_files, with data.vocab_file'))
  if vocab:
    with config.unlocked():
      config.data.vocab_sha256 = files.sha256(vocab)


def _record_casing(config, plan, workdir: str, finished: int):
  """config.json records the casing the training files' reports say (data.do_lower_case), which
  the run's readers (fine-tuning from it, predict, export, extract_features) tokenize with: they
  took lower case, and a cased vocab with few capitals was read lower-cased without a word. A run
  begun before casing was recorded (its config.json without it) is left so: its later steps'
  record would say other than its config.json."""
  with _refused():
    lower = file_set.casing_of({f'{"phase2" if p.first_step else "data"}.train_files':
                                p.train_files for p in plan if p.train_files is not None})
  if lower is None:
    return
  run = init_from.run_config(workdir) if finished else None
  if run is not None and 'do_lower_case' not in (run.get('data') or {}):
    return
  with config.unlocked():
    config.data.do_lower_case = lower


def _train_and_evaluate(config, workdir: str) -> progress.Outcome:
  _check_workdir_job(workdir)
  logging.info('--- mesh and data')
  rules = sharding.parse_rules(config.mesh.rules)
  mesh = sharding.make_mesh(config.mesh)
  with hosts.fail_together():  # A path one host cannot read stops every host at once.
    finished = _resumed_at(workdir)  # Phases done by then are not read again.
    take_data_vocab(config, phase2=0 < (phase_plan.phase2_start(
        config.num_train_steps, config.phase2.fraction) or 0) <= finished)
    vocab = vocab_file(config)
    path = init_from.configured(config, loads_weights=not finished)
    _say_init_from_on_a_resume(path, workdir, config, finished)
    _check_and_record_vocab(config, path, vocab, workdir, finished)
    vocab_entries = len(vocab_files.load_vocab(vocab)) if vocab else None
    # The batch, heads and vocab against this mesh: before the embedded corpus is made (phases).
    train_state.check_config(config, mesh, vocab_entries)
    masking = masking_config(config, vocab)
  hosts.check_same_view(workdir, f'resumes at step {finished}, data.vocab_file={vocab}, '
                        f'init_from={path}', what='the run\'s start')
  with hosts.fail_together():  # Process 0 makes the embedded corpus; the others wait here.
    planned = phases(config, workdir, finished)
  plan = [phase if phase.train_files is None else check_data(config, phase, vocab, path, workdir)
          for phase in planned]
  _record_casing(config, plan, workdir, finished)
  data = config.data
  batch_axes = sharding.batch_axes(rules)
  if len(plan) > 1:
    logging.info('two phases: steps 0..%d at %d tokens, %d..%d at %d tokens',
                 plan[1].first_step, plan[0].max_seq_length, plan[1].first_step,
                 plan[1].end_step, plan[1].max_seq_length)

  def batches(start_step, examples_consumed):
    # The data position is the examples consumed; a phase starts its files from its own first
    # example (the batch size is the same in every phase).
    for phase in plan:
      if phase.end_step <= start_step:
        continue
      if phase.train_files is None:  # The newest checkpoints unreadable: an earlier phase's.
        raise ValueError(f'the run resumes at step {start_step}, in a phase it had finished by '
                         f'step {finished} (the newer checkpoints could not be read): rerun the '
                         'same command to read and check that phase\'s files')
      begin = max(start_step, phase.first_step)
      start = examples_consumed - phase.first_step * config.global_batch_size if (
          start_step > phase.first_step) else 0
      dataset = input_pipeline.pretrain_dataset(
          phase.train_files, global_batch_size=config.global_batch_size,
          max_seq_length=phase.max_seq_length,
          max_predictions_per_seq=phase.max_predictions_per_seq, seed=config.seed,
          start_example=start, masking=masking, num_lanes=data.num_lanes,
          shuffle_window=data.shuffle_window, nsp=config.model.nsp,
          max_instances_per_row=data.max_instances_per_row)
      for host_batch in input_pipeline.host_batches(dataset.take(phase.end_step - begin),
                                                    phase.train_files):
        record_check.check_ids(host_batch, config.model.vocab_size, phase.train_files)
        yield global_batch.make_global_batch(host_batch, mesh, batch_axes)

  task = objective(config)
  evaluator = pretrain_eval.evaluator(config, plan, masking, mesh, rules, task.model)

  def load_weights(params, shardings):
    params, _, read = init_from.load_params(path, params, shardings)
    with config.unlocked():  # config.json records the step read ('latest' and 'best' move).
      config.init_from_read = read
    return params

  def remaining_flops(step):  # Phase 2's steps cost ~4x phase 1's at the paper's lengths.
    return sum(max(p.end_step - max(step, p.first_step), 0) * config.global_batch_size
               * perf.flops_per_sequence(config.model, p.max_seq_length,
                                         p.max_predictions_per_seq) for p in plan)

  job = loop.Job(  # Each host reads its own files (input_pipeline): order_per_process.
      objective=task, batches=batches, evaluator=evaluator,
      load_weights=load_weights if path else None, describe=_describe, best_metric=BEST_METRIC,
      vocab_file=vocab or '', metric_names=eval_metric_names(config), order_per_process=True,
      early_stopping_patience=config.early_stopping_patience, remaining_flops=remaining_flops,
      pipeline_starts=tuple(phase.first_step for phase in plan[1:]))
  return loop.run(config, workdir, mesh, job, rules=rules)
