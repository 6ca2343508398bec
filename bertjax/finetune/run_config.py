"""A fine-tuning config checked against the run in its workdir: model, vocab, pooling, labels.

A run that saved a checkpoint keeps what it was trained as (its config.json): its architecture
and vocab (resolve_model), its pooling (resolve_pooling), its labels (saved_labels) and the
settings in RUN_FIELDS (check_against_run). A resume, eval or predict with other values would
train on, or score, a model other than the one trained, so they are refused by name.
"""

import os
import shlex

from absl import logging
import ml_collections

from bertjax import files
from bertjax.finetune.tasks import data_reads
from bertjax.finetune.tasks import registry
from bertjax.interop import bundle
from bertjax.interop import hf_tokenizer_files
from bertjax.interop import init_from
from bertjax.model import platform_defaults
from bertjax.pretraining_data import embedded
from bertjax.text import vocab_files
from bertjax.training import checkpoint_reader
from bertjax.training import resume_checks


def check_casing(config, init_path: str):
  """A transformers folder that records its tokenizer's casing (tokenizer_config.json's
  do_lower_case, else tokenizer.json's normalizer), or a bertjax run (its config.json's
  data.do_lower_case: its data's casing), is fine-tuned with that casing: the other
  would feed its weights text it never saw tokenized that way. A folder that records none
  takes config.data.do_lower_case (checked against its vocab by the tokenizer)."""
  model = init_from.transformers_model_dir(init_path) if init_path else ''
  if not model:
    run = init_from.run_config(init_path) if init_path else None
    theirs = init_from.lookup(run or {}, 'data.do_lower_case')
    if theirs is not None and bool(theirs) != bool(config.data.do_lower_case):
      raise ValueError(f'init_from={init_path} was trained on '
                       f'{"lower-cased" if theirs else "cased"} text (its run\'s config.json: '
                       f'data.do_lower_case) but config.data.do_lower_case is '
                       f'{bool(config.data.do_lower_case)}: pass '
                       f'--config.data.do_lower_case={bool(theirs)}.')
    return
  settings = hf_tokenizer_files.json_beside(model, 'sentence_bert_config.json')
  if settings.get('do_lower_case'):  # sentence-transformers lower-cases before its tokenizer.
    raise ValueError(f'init_from={init_path} lower-cases its text before its cased tokenizer '
                     "(sentence_bert_config.json's do_lower_case), which fine-tuning's readers "
                     'do not do: its weights would see capitals they never saw; fine-tune a '
                     'model without that setting.')
  theirs, where = hf_tokenizer_files.recorded_lower_case(model)
  if theirs is not None and theirs != bool(config.data.do_lower_case):
    raise ValueError(f'init_from={init_path} was trained on '
                     f'{"lower-cased" if theirs else "cased"} text ({where}) but '
                     f'config.data.do_lower_case is {bool(config.data.do_lower_case)}: pass '
                     f'--config.data.do_lower_case={theirs}.')


def check_vocab_rows(init_path: str, vocab_file: str, rows: int, given: bool):
  """init_from's `rows` word-embedding rows must be its vocab's entries (or their padding,
  bundle.vocab_misfit): another vocab's ids would mean other tokens. The fix is the vocab, never
  --config.model.vocab_size (a fine-tuning takes init_from's shape). `given`: the user's
  config.data.vocab_file, else init_from's own."""
  entries = len(vocab_files.load_vocab(vocab_file))
  why = bundle.misfit_at(init_path, vocab_file, entries, rows)
  if not why:
    return
  which = (f'config.data.vocab_file={vocab_file}' if given else
           f'its {hf_tokenizer_files.vocab_name(vocab_file, init_path)}')
  raise ValueError(f'init_from={init_path} has {rows} word-embedding rows but {which} has '
                   f'{entries} entries ({why}): it is not the vocab the checkpoint was trained '
                   'with; pass --config.data.vocab_file=VOCAB, the vocab.txt trained with it '
                   f'({rows} entries, or fewer padded to {rows}).')


def resolve_model(config, init_path: str, run: dict | None = None,
                  workdir: str = '') -> tuple[ml_collections.ConfigDict, str]:
  """(model config, vocab file): a run that saved checkpoints in `workdir` (`run`, its
  config.json) keeps its architecture and its own vocab; else the architecture from
  `init_path` unless a size was given."""
  model_cfg = ml_collections.ConfigDict(config.model.to_dict())
  vocab_file = config.data.vocab_file
  if run is not None:
    arch = {k: run['model'][k] for k in init_from.ARCHITECTURE_FIELDS if k in run['model']}
    differ = {k: (v, model_cfg[k]) for k, v in arch.items() if v != model_cfg[k]}
    if not (init_path or vocab_file) and arch.get('vocab_size') == embedded.VOCAB_SIZE:
      differ.pop('vocab_size', None)  # The run took the embedded vocab itself (below): no change.
    if differ and not config.model_from_init and config.model.size != run['model'].get('size'):
      raise ValueError(f'{workdir} holds a model of size {run["model"].get("size")} but '
                       f'config.model.size is {config.model.size}: drop the size, or use another '
                       '--workdir for a new model.')
    if differ and not config.model_from_init:  # The size's, then a --config.model.* changed.
      said = ', '.join(f'model.{k} {a!r} in the run vs {b!r}' for k, (a, b) in differ.items())
      if set(differ) & set(resume_checks.FUNCTION_FIELDS):  # Weights under another function.
        raise ValueError(f'{workdir} holds another model than config.model ({said}): drop the '
                         'override, or use another --workdir for a new model.')
      logging.warning('%s holds another model shape than config.model (%s): the run\'s is '
                      'used, as its checkpoints hold it', workdir, said)
    model_cfg.update(arch)
    model_cfg.size = run['model'].get('size', model_cfg.size)
    if platform_defaults.is_auto(model_cfg.scan_layers) and 'scan_layers' in run['model']:
      # Its layout too (stacked or per-layer, as its checkpoints hold it), whatever platform
      # evaluates or resumes it.
      with model_cfg.ignore_type():
        model_cfg.scan_layers = bool(run['model']['scan_layers'])
    kept = init_from.vocab_file(workdir)
    if not kept:
      raise FileNotFoundError(
          f'{workdir} keeps no copy of its vocab and the one it recorded '
          f'({run["data"].get("vocab_file")}) no longer exists: set config.data.vocab_file to '
          'the vocab it was trained with.')
    if vocab_file and (not files.isfile(vocab_file) or
                       files.read_bytes(vocab_file) != files.read_bytes(kept)):
      raise ValueError(f'{workdir} was trained with the vocab {kept}; config.data.vocab_file='
                       f'{vocab_file} is another: drop it, or use another --workdir.')
    return model_cfg, kept
  if init_path:
    arch = init_from.model_config(init_path)
    if config.model_from_init:
      model_cfg.update(arch)
      model_cfg.size = 'from-init'
    else:
      differ = {k: (arch[k], model_cfg[k]) for k in arch if arch[k] != model_cfg[k]}
      if differ:
        raise ValueError(
            f'init_from={init_path} does not fit config.model (size {model_cfg.size}): '
            + ', '.join(f'{k} {a} in the checkpoint vs {b}' for k, (a, b) in differ.items())
            + '. Leave size empty to take the checkpoint\'s shape.')
    given = bool(vocab_file)
    vocab_file = vocab_file or init_from.vocab_file(init_path) or ''
    if vocab_file:
      check_vocab_rows(init_path, vocab_file, arch['vocab_size'], given)
    if given:  # Another vocab of the same size would map every id to another token.
      init_from.check_same_vocab(init_path, vocab_file, 'config.data.vocab_file')
  if not vocab_file:
    if init_path:
      unrecorded = next((f for f in files.folders_up(init_path, 2)
                         if files.isdir(files.join(f, 'checkpoints'))
                         and not files.exists(files.join(f, 'config.json'))), None)
      if unrecorded is not None:  # A run's checkpoints without the run's record of itself.
        raise ValueError(f'init_from={init_path}: the run {unrecorded} has checkpoints but no '
                         'config.json (its record of the model, vocab and settings): copy it '
                         'back from where the run was made, or set config.data.vocab_file to '
                         'the vocab its weights were trained with.')
      raise ValueError(f'init_from={init_path} has no vocab.txt: set config.data.vocab_file to '
                       'the vocab its weights were trained with.')
    # A random encoder (a smoke test): any vocab fits it, the embedded corpus's one is at hand.
    logging.info('no init_from and no data.vocab_file: a random encoder with the embedded '
                 "corpus's %d-entry vocab", embedded.VOCAB_SIZE)
    model_cfg.vocab_size = embedded.VOCAB_SIZE
    vocab_file = str(embedded.vocab_path())
  return model_cfg, vocab_file


def resolve_pooling(config, run: dict | None, init_path: str) -> tuple[str, str]:
  """(pooling, where pooling=auto found it): config.pooling, else the run's own (`run`, its
  config.json), else init_from's sentence-transformers pooling, else cls."""
  if config.pooling != 'auto':
    return config.pooling, ''
  if run is not None and 'pooling' in run:
    return run['pooling'], 'pooling=auto: the run in this workdir was trained so'
  found = init_from.pooling(init_path)
  return (found, "pooling=auto: init_from's sentence-transformers pooling") if found else (
      'cls', '')



def saved_labels(workdir) -> tuple | None:
  """The label set a fine-tuning run in `workdir` was trained with (its config.json), if any."""
  run = init_from.run_config(workdir) if workdir else None
  if not run or 'labels' not in run:
    return None
  return tuple(run['labels'])


# What a fine-tuning run was trained as, beyond its labels and architecture: a resume, eval or
# predict with another value would train on, or score, a model other than the one trained.
RUN_FIELDS = ('task', 'kind', 'pooling', 'version_2_with_negative', 'data.max_seq_length',
              'data.do_lower_case', 'data.text_fields', 'data.label_field', 'data.doc_stride',
              'data.max_query_length')


def has_checkpoint(workdir: str) -> bool:
  """Whether `workdir` (a local folder or a URL) holds a complete checkpoint."""
  return bool(checkpoint_reader.steps(files.join(workdir, 'checkpoints')))


def _folder_key(path) -> str:
  """`path` in one spelling, to tell whether two paths name one folder."""
  path = os.fspath(path)
  return path.rstrip('/') if files.is_remote(path) else os.path.abspath(path)


def trained_run(workdir: str) -> dict | None:
  """The config.json of a run in `workdir` that saved at least one checkpoint, else None."""
  if not workdir:
    return None
  folder = init_from.run_folder(workdir)
  if folder is None or _folder_key(folder) != _folder_key(workdir) or not has_checkpoint(workdir):
    return None  # No run, or one that saved nothing yet (a new run may change anything).
  run = init_from.run_config(workdir)
  if run.get('job') not in (None, 'finetune'):
    raise ValueError(f'{workdir} holds a {run["job"]} run: fine-tune in another --workdir '
                     f'(init_from={workdir} starts from its weights).')
  return run


def holds_out_eval(config) -> bool:
  """Whether a config's eval examples are drawn out of its training examples by its seed."""
  # Always for the topic tasks; for the user-file tasks when data.eval_file is empty.
  return config.get('task') in registry.TOPIC_TASKS or bool(
      init_from.lookup(config, 'data.train_file') and not init_from.lookup(config,
                                                                           'data.eval_file'))


# RUN_FIELDS set by the task and its data, not by a field of their own.
_FOLLOWS = {'kind': 'the task', 'version_2_with_negative': "the task and its SQuAD files' version"}


def _to_match(field: str, value, cfg) -> str:
  """What to pass for config `field` to take the run's `value`, wherever the config's came from
  (its default, the argument string or a --config override)."""
  if field in _FOLLOWS:
    return f'it follows {_FOLLOWS[field]}'
  if field == 'task':  # A --config.task override is refused (config_args.ignored_override).
    return f'pass task={value} in --config=configs/finetune.py:task={value}'
  flag = f'--config.{field}={shlex.quote(str(value))}'
  if field == 'data.max_seq_length':  # The argument string's seq= sets it (and bbc's stride).
    return (f'pass {flag} (or add seq={value} to the argument string of '
            '--config=configs/finetune.py:...)')  # Its other arguments unknown here: kept.
  return f'pass {flag}'


def _differences(run: dict, cfg, fields, why: str = '') -> list[str]:
  """'FIELD RUN (the run) vs CONFIG[: why]: what to pass' for each of `fields` that differ."""
  values = {f: (init_from.lookup(run, f), init_from.lookup(cfg, f)) for f in fields}
  return [f'{f} {old!r} (the run) vs {new!r}{why}: {_to_match(f, old, cfg)}'
          for f, (old, new) in values.items() if old is not None and new is not None and old != new]


def check_against_run(cfg, run: dict, workdir: str):
  """Refuses settings that differ from what the run in `workdir` was trained with: the model's
  (RUN_FIELDS); the seed and fraction that hold its eval examples out of its training ones; an
  eval file it had, dropped (eval would score training examples); on a resume, its batch (its
  epochs are counted in it), max_train_examples, another eval file (its eval history compares
  one set's scores) and an eval file added to a held-out split (its eval examples would be
  trained on). An eval or predict may name another eval file."""
  training = cfg.get('mode', 'train_eval') == 'train_eval'
  fields = RUN_FIELDS + (('data.max_train_examples',) if training else ())
  # A data key the task never reads shaped nothing (config_check refuses it set): a run of
  # before the refusal may hold one (doc_stride beside classification, text_fields beside mrpc).
  unread = {f'data.{key}' for key in data_reads.UNSET} - {
      f'data.{key}' for key in data_reads.READS.get(cfg.get('task'), ())}
  fields = tuple(f for f in fields if f not in unread)
  differ = _differences(run, cfg, fields)
  scoring = cfg.get('mode', 'train_eval') in ('train_eval', 'eval')
  if scoring and holds_out_eval(run) and holds_out_eval(cfg):  # Both draw from the training set.
    differ += _differences(run, cfg, ('seed', 'data.eval_fraction'),
                           ': it draws the eval examples held out of the training ones')
  eval_files = (init_from.lookup(run, 'data.eval_file'), init_from.lookup(cfg, 'data.eval_file'))
  eval_digests = (init_from.lookup(run, 'data.eval_sha256'),
                  init_from.lookup(cfg, 'data.eval_sha256'))
  # The run's eval file moved (or copied) since: another path, the same rows (sha256).
  moved_eval = (eval_files[0] != eval_files[1] and None not in eval_digests
                and eval_digests[0] == eval_digests[1])
  if moved_eval and training:
    logging.info('data.eval_file %s holds the rows of the run\'s %s (the same sha256): its eval '
                 'set, moved', eval_files[1], eval_files[0])
  if scoring and not holds_out_eval(run) and holds_out_eval(cfg):
    differ.append(f'data.eval_file {eval_files[0]!r} (the run) vs {eval_files[1]!r}: without it, '
                  'eval examples would be held out of the ones it trained on; '
                  f'{_to_match("data.eval_file", eval_files[0], cfg)}')
  elif (training and not holds_out_eval(run) and eval_files[0] is not None
        and eval_files[0] != eval_files[1] and not moved_eval):  # None: a run older than it.
    differ.append(f'data.eval_file {eval_files[0]!r} (the run) vs {eval_files[1]!r}: its eval '
                  'history (the best step, early stopping) compares scores on one eval set; '
                  f'{_to_match("data.eval_file", eval_files[0], cfg)} (mode=eval scores another '
                  'file with it)')
  elif training and holds_out_eval(run) and not holds_out_eval(cfg):
    differ.append(f'data.eval_file {eval_files[0]!r} (the run) vs {eval_files[1]!r}: its eval '
                  'examples, held out of the training file, would be trained on; drop '
                  '--config.data.eval_file')
  if (training and not cfg.get('num_train_steps') and run.get(
      'global_batch_size', cfg.get('global_batch_size')) != cfg.get('global_batch_size')):
    differ.append(f'global_batch_size {run["global_batch_size"]!r} (the run) vs '
                  f'{cfg.get("global_batch_size")!r}: its steps are counted in epochs of its '
                  'batch (--config.grad_accum_steps splits a batch that does not fit; '
                  '--config.num_train_steps=N trains to step N at the new batch, from the '
                  'examples consumed)')
  if training and not init_from.began_from(cfg, run):
    logging.warning('init_from=%s is not loaded: %s resumes from its own checkpoint (the run '
                    'began from %s); to start from those weights, fine-tune in another --workdir',
                    init_from.named(cfg) or "''", workdir, init_from.named(run) or 'random weights')
  elif not training and cfg.get('init_from') and not init_from.began_from(cfg, run):
    logging.warning('init_from=%s is not read: --config.mode=%s reads %s\'s own checkpoint (the '
                    'run began from %s); to score that model, fine-tune from it in another '
                    '--workdir', init_from.named(cfg), cfg.get('mode'), workdir,
                    init_from.named(run) or 'random weights')
  digests = (init_from.lookup(run, 'data.train_sha256'),
             init_from.lookup(cfg, 'data.train_sha256'))
  if None not in digests and digests[0] != digests[1]:
    differ.append(f'data.train_file {init_from.lookup(cfg, "data.train_file")!r} holds other rows '
                  f'than it did (sha256 {digests[0][:12]}... vs {digests[1][:12]}...): rows added, '
                  'removed, edited or reordered change the example order and the held-out eval '
                  'examples; restore the file the run was trained on')
  if (training and None not in eval_digests and eval_digests[0] != eval_digests[1]
      and eval_files[0] == eval_files[1]):  # Another file: said above.
    differ.append(f'data.eval_file {eval_files[1]!r} holds other rows than it did (sha256 '
                  f'{eval_digests[0][:12]}... vs {eval_digests[1][:12]}...): its eval history '
                  '(the best step, early stopping) compares scores on one eval set; restore that '
                  'file (an eval of the edited one: mode=eval)')
  if differ:
    raise ValueError(f'{workdir} was fine-tuned with other settings: {"; ".join(differ)}. Match '
                     f'the run ({workdir}/config.json) to resume, evaluate or predict with it as '
                     'trained, or use another --workdir.')
