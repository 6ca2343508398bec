"""The data a fine-tuning run read, recorded in its config.json and checked against it: digests
of its training files and features (a resume over other examples is refused), the eval examples
it held out of them (a mode=eval that would score examples it trained on is refused), and what
an eval or predict that names no data of its own reads of the run's (follow_run_data).
"""

import hashlib

from absl import logging
import numpy as np

from bertjax import files
from bertjax import paths
from bertjax.finetune import run_config
from bertjax.finetune.tasks import data_reads
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import user_tasks
from bertjax.interop import init_from

# The data.* keys that say where a run's examples are and how they are read, beside
# run_config.RUN_FIELDS.
_DATA_SOURCE = ('data_dir', 'use_tfds', 'train_file', 'eval_file', 'test_file', 'format',
                'token_column', 'tag_column', 'tag_scheme')
_PATHS = ('data_dir', 'train_file', 'eval_file', 'test_file')  # Where a resume may move them.
_NAMED_DATA = ('data_dir', 'use_tfds', 'train_file', 'eval_file', 'test_file', 'predict_file')


def follow_run_data(config, run: dict | None, latest: dict | None = None) -> dict:
  """For mode eval or predict of `run` (its config.json), what the config leaves unset (as
  data_reads.UNSET gives it) is read as the run read it: a key of run_config.RUN_FIELDS (any
  other value is refused), max_windows (how a topic task's texts were windowed), the
  eval_fraction and seed (0, the default) that held its eval examples out of the training file,
  and where the config
  names no data of its own (_NAMED_DATA all unset), the run's data (_DATA_SOURCE) that the mode
  reads (eval: its eval file, else the training file its eval examples are held out of;
  predict: its test file). `latest`: the config of the run's latest resume
  (config-resumed-at-N.json), whose file paths are where a resume found the files (moved since
  the run began). Returns {key: value} of each value taken, for the console."""
  if run is None or config.get('mode', 'train_eval') == 'train_eval':
    return {}
  data, recorded = config.data, run.get('data') or {}
  moved = {key: value for key, value in ((latest or {}).get('data') or {}).items()
           if key in _PATHS and value}
  recorded = {**recorded, **moved}
  # Named data the mode never reads (the training flags reused: eval beside a test_file) leaves
  # the run's data to read.
  ignored = ('test_file',) if config.mode == 'eval' else ('train_file', 'eval_file')
  unnamed = all(data.get(key, data_reads.UNSET[key]) == data_reads.UNSET[key]
                for key in _NAMED_DATA if key not in ignored)
  keys = [f.split('.', 1)[1] for f in run_config.RUN_FIELDS if f.startswith('data.')]
  keys.append('max_windows')
  # Only the files the mode reads: a file of another split, gone since, stops nothing.
  unread = (('train_file', 'eval_file') if config.mode == 'predict' else
            ('test_file',) + (('train_file',) if recorded.get('eval_file') else ()))
  keys += [key for key in _DATA_SOURCE if key not in unread] if unnamed else []
  taken = {}
  for key in [*keys, 'eval_fraction']:
    if (key in data_reads.UNSET and key in recorded and key in data
        and data[key] == data_reads.UNSET[key] and recorded[key] != data[key]
        and (key != 'eval_fraction' or run_config.holds_out_eval(config))):
      data[key] = taken[key] = recorded[key]
  if (run_config.holds_out_eval(config) and run_config.holds_out_eval(run)
      and config.get('seed') == 0 and run.get('seed', 0)):
    config.seed = taken['seed'] = run['seed']
  return taken


def check_run_data_found(config, taken: dict, workdir: str):
  """Refuses a file or folder follow_run_data took from the run that is gone (moved since?), or
  now of the other kind, saying it was the run's: the user named none, so 'fix the path' would
  leave them guessing."""
  for key in [k for k in taken if k in ('data_dir', 'train_file', 'eval_file', 'test_file')]:
    value, kind = config.data[key], files.isdir if key == 'data_dir' else files.isfile
    gone = None
    for part in [value] if key == 'data_dir' else paths.split_list(value):
      try:
        found = [part] if key == 'data_dir' else user_tasks.expand(part, key)
        gone = gone or next((path for path in found if not kind(path)), None)
      except FileNotFoundError:  # A glob of a comma list that matches nothing now: it.
        gone = gone or part
    if gone is not None:
      other = (' (or --config.data.eval_file=FILE to score another file)'
               if config.mode == 'eval' and key != 'eval_file'
               and 'eval_file' in data_reads.READS.get(config.task, ()) else '')  # A preset
      # (sst2) reads its published folder alone: its eval_file is refused.
      now = ('gone (moved since the run trained?)' if not files.exists(gone) else
             f'a {"file" if key == "data_dir" else "folder"} now')
      raise FileNotFoundError(
          f'{gone} is {now}: the run read it as config.data.{key} '
          f'({workdir}/config.json records it, and this {config.mode} named no data of its '
          f'own); pass --config.data.{key}=<where it is now>{other}.')


def warn_if_scoring_training_files(config, run: dict | None):
  """mode=eval of a file the run trained on (its train_file named as the eval_file, or a copy of
  one of its files): said, as training says eval examples that are training texts; the score is
  a free right answer (helper-173: eval_file=train.csv scored 96 of 96 without a word)."""
  scored = config.data.get('eval_file') or ''
  trained = init_from.lookup(run or {}, 'data.train_file') or ''
  if config.get('mode') != 'eval' or not scored or not trained:
    return
  try:
    train_files = user_tasks.expand(trained, 'train_file')
    eval_files = user_tasks.expand(scored, 'eval_file')
  except (OSError, ValueError):
    return  # Gone or moved: the readers say so.
  # A training file moved or deleted since is not read (files.size raised FileNotFoundError,
  # a traceback): its sha256, recorded for a run of one file, still tells a copy of it.
  present = [t for t in train_files if files.exists(t)]
  recorded = (init_from.lookup(run, 'data.train_sha256')
              if len(train_files) == 1 and not present else None)
  for path in eval_files:
    key, size = paths.file_key(path), files.size(path)
    same = next((t for t in present if paths.file_key(t) == key), None)
    copied = same or next((t for t in present if files.size(t) == size  # Sizes first.
                           and files.sha256(t) == files.sha256(path)), None)
    if not copied and recorded and data_digest(path, 'eval_file') == recorded:
      copied = f'{trained}, gone from there since: its sha256 in config.json'
    if copied:
      logging.warning('config.data.eval_file %s is %s the run trained on (config.data.train_file '
                      '%s): its score is a free right answer, above what new text would get',
                      path, 'the file' if same else 'a copy of the file', copied)


def data_digest(setting: str, flag: str = 'train_file') -> str:
  """sha256 over the files a data.`flag` setting names (each file's sha256, in reading order)."""
  digest = hashlib.sha256()
  for path in user_tasks.expand(setting, flag):
    files.require_file(path, f'config.data.{flag}: {path} does not exist: fix the path.')
    digest.update(files.sha256(path).encode())
  return digest.hexdigest()


def features_digest(features: dict) -> str:
  """sha256 over a split's features (each array's name, dtype, shape and bytes): what a run
  trained on, whatever read it (a GLUE, SQuAD or CoNLL folder, TFDS, the user's files)."""
  digest = hashlib.sha256()
  for name in sorted(features):
    array = np.asarray(features[name])
    digest.update(f'{name} {array.dtype} {array.shape};'.encode())
    digest.update(repr(array.tolist()).encode() if array.dtype == object else
                  np.ascontiguousarray(array).tobytes())
  return digest.hexdigest()


def check_training_features(cfg, workdir: str, digest: str):
  """Refuses to resume a run whose training features differ from the ones it was trained on
  (its config.json's data.train_features_sha256): its epochs and example order would go on
  over other examples. A user's training file is told by name first (data.train_sha256)."""
  run = run_config.trained_run(workdir)
  recorded = init_from.lookup(run, 'data.train_features_sha256') if run else None
  if recorded is None or recorded == digest:
    return
  where = cfg.data.get('train_file') or cfg.data.get('data_dir') or 'TFDS'
  said = (f'{workdir} was fine-tuned on other training examples: task {cfg.task} reads other '
          f'features from {where} now (sha256 {recorded[:12]}... then, {digest[:12]}... now): ')
  files_then = init_from.lookup(run, 'data.train_sha256')
  if files_then is not None and files_then == init_from.lookup(cfg, 'data.train_sha256'):
    # The same bytes: this bertjax reads them otherwise (a run older than the split that keeps a
    # text's copies on one side of the held-out set, whose file holds copies).
    raise ValueError(said + 'its training files are the same bytes, which this version of '
                     'bertjax reads, splits (the examples held out for eval) or tokenizes '
                     'otherwise than the one that started the run. Resume it with that version, '
                     'or fine-tune in another --workdir.')
  raise ValueError(said + 'its training files were changed, or read or tokenized otherwise. '
                   'Restore the data the run was trained on to resume it, or fine-tune in '
                   'another --workdir.')


def record_held_out(cfg, eval_sets: dict, task):
  """Records the eval examples a run holds out of its training ones: the texts of all of them
  (data.held_out_texts_sha256, before max_eval_examples) and the features of those it scores
  (data.held_out_sha256). mode=eval draws them again from its data, seed and eval_fraction,
  and check_held_out tells a draw that differs (data edited, another copy of a corpus,
  config.json edited) from the run's own."""
  if run_config.holds_out_eval(cfg) and 'validation' in eval_sets:
    cfg.data.held_out_sha256 = features_digest(eval_sets['validation'][1])
    if (texts := task.held_out()) is not None:
      cfg.data.held_out_texts_sha256 = texts


def check_held_out(cfg, run: dict | None, read: dict, workdir: str, task):
  """Refuses a mode=eval whose eval examples, held out of the training ones, are not the ones
  the run held out: some of those scored would be examples it trained on. Their texts are
  compared (data.held_out_texts_sha256: however many are scored), else, for runs that recorded
  their features only (data.held_out_sha256), where the run's eval examples were cut alike."""
  if not run or 'validation' not in read or not run_config.holds_out_eval(cfg):
    return
  recorded = init_from.lookup(run, 'data.held_out_texts_sha256')
  if recorded is not None:
    drawn = task.held_out()
  else:
    recorded = init_from.lookup(run, 'data.held_out_sha256')
    alike = ('max_eval_examples', 'max_windows')  # Features drawn and cut as the run's were.
    if recorded is None or any(
        cfg.data.get(key, data_reads.UNSET.get(key, -1)) != init_from.lookup(run, f'data.{key}')
        for key in alike if init_from.lookup(run, f'data.{key}') is not None):
      return
    drawn = features_digest(read['validation'][1])
  if drawn != recorded:
    where = (cfg.data.get('train_file') or cfg.data.get('data_dir')
             or ('TFDS' if cfg.data.get('use_tfds') else f'task {cfg.task}\'s default data'))
    raise ValueError(
        f'the eval examples drawn out of {where} now are not the ones {workdir} held out when '
        f'it trained (sha256 {recorded[:12]}... then, {drawn[:12]}... now): the data, or the '
        f'seed or eval_fraction in {workdir}/config.json, changed since, and some examples '
        'scored would be ones it trained on. Restore the data it trained on to score its '
        'held-out examples' + (', or score a file of your own with --config.data.eval_file=FILE.'
                               if cfg.get('task') in registry.USER_TASKS else '.'))


def records_training_data(cfg) -> bool:
  """Whether a job reads its training file's content: training, or scoring eval examples held
  out of it (its data.train_sha256 is then compared with the run's)."""
  mode = cfg.get('mode', 'train_eval')
  return bool(init_from.lookup(cfg, 'data.train_file')) and (
      mode == 'train_eval' or (mode == 'eval' and run_config.holds_out_eval(cfg)))
