"""Where mode=eval and mode=predict of a fine-tuned run write, under <workdir>/predictions/: a
folder per step and per input, so that scoring other files, a part of one, files edited since,
or another copy of a preset's data never replaces an earlier result (scored_folder, by what the
config names; scored_into, by what was read); each written whole or not at all (writing)."""

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
import time

from absl import logging

from bertjax import console
from bertjax import files
from bertjax import processes
from bertjax.finetune import run_config
from bertjax.finetune import run_data
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import user_tasks
from bertjax.interop import init_from


def scored_folder(cfg, run: dict | None, mode: str, step: int, counts=()) -> str:
  """The predictions/ folder name of mode eval or predict at `step`: `{mode}_step_{step}` for
  the run's own files as they were; for a file the run did not name, its eval or test file
  edited since, or any predict_file, the file's name and content digest after it
  (`eval_step_8-b.csv-1a2b3c4d`); for a preset's files read from another data_dir than the
  run's (or TFDS instead), the folder's name and a digest of where (`eval_step_8-SST-2-5e6f7a8b`);
  for the first N eval examples, `-firstN`: scoring another file or part of one keeps the earlier
  results. `counts`: the examples read of each split, where known."""
  named = (_scored_file_folder(cfg, run, mode, step) + _part_suffix(cfg, mode, counts)
           + _threshold_suffix(cfg, run))
  return named + _dtype_suffix(cfg, run, mode, named)


def _dtype_suffix(cfg, run: dict | None, mode: str, named: str) -> str:
  """`-bfloat16` where the model computes in another dtype than the run did: its scores are
  others (an eval at bfloat16 replaced the float32 one's, without a word: helper-173)."""
  dtype = init_from.lookup(cfg, 'model.dtype')
  own = init_from.lookup(run or {}, 'model.dtype')
  if not dtype or not own or dtype == own:
    return ''
  console.warn_once('model.dtype=%s is not the dtype the run trained and evaluated in (%s): its '
                    '%s go to predictions/%s-%s, beside those in %s', dtype, own,
                    'scores' if mode == 'eval' else 'predictions', named, dtype, own)
  return f'-{dtype}'


def _part_suffix(cfg, mode: str, counts=()) -> str:
  """`-firstN` where mode=eval scores the first N of its eval examples (data.max_eval_examples):
  never the folder of an eval of them all. Where every split read fewer than N (`counts`), all
  of them were scored: the eval's own folder."""
  asked = init_from.lookup(cfg, 'data.max_eval_examples')
  if mode != 'eval' or asked is None or asked < 0 or (counts and max(counts) < asked):
    return ''
  return f'-first{asked}'


def _scored_file_folder(cfg, run: dict | None, mode: str, step: int) -> str:
  field = 'eval_file' if mode == 'eval' else (
      'predict_file' if init_from.lookup(cfg, 'data.predict_file') else 'test_file')
  scored = init_from.lookup(cfg, f'data.{field}') or ''
  if not scored:  # The task's own split: a preset's data_dir, or held out of train_file.
    return f'{mode}_step_{step}' + _data_dir_suffix(cfg, run)
  own = init_from.lookup(run or {}, f'data.{field}') or ''
  digest_field = {'eval_file': 'data.eval_sha256', 'test_file': 'data.test_sha256'}.get(field)
  recorded = init_from.lookup(run or {}, digest_field) if digest_field else None
  # A predict_file, even the run's own (no digest of it is recorded), is never the test split's
  # folder: its predictions would replace those of the test split, or of the file as it was.
  if field != 'predict_file' and scored == own and recorded is None:
    return f'{mode}_step_{step}'
  digest = run_data.data_digest(scored, field)
  if field != 'predict_file' and scored == own and digest == recorded:
    return f'{mode}_step_{step}'
  first = files.name(user_tasks.expand(scored, field)[0])  # The file a glob matched.
  named = f'{mode}_step_{step}-{_cut(first)}-{digest[:8]}'
  if field != 'predict_file' and scored == own:  # Said: the user looks for the run's folder.
    logging.warning('config.data.%s %s was edited since the run trained (sha256 %s... then, '
                    '%s... now): its %s go to predictions/%s, beside those of the file as it '
                    'was', field, scored, recorded[:12], digest[:12],
                    'scores' if mode == 'eval' else 'predictions', named)
  return named


def _cut(name: str) -> str:
  """A file's or folder's name in a predictions/ folder's, cut to 80 bytes of UTF-8 (a file
  system takes 255; the digest beside it tells the names apart), control characters as _."""
  name = re.sub(r'[\x00-\x1f\x7f]', '_', name)  # A line break in a name broke the summary.
  return name.encode()[:80].decode('utf-8', 'ignore')


# In each predictions/ folder of mode=eval or mode=predict: the digest of the features it scored.
INPUTS_FILE = 'scored_inputs.json'


def inputs_digest(features_of: dict) -> str:
  """sha256 over the features of each split scored ({split: features}), in order."""
  digest = hashlib.sha256()
  for split, features in features_of.items():
    digest.update(f'{split} {run_data.features_digest(features)};'.encode())
  return digest.hexdigest()


def chosen(cfg, workdir: str, mode: str, step: int, features_of: dict,
           counts=()) -> tuple[str, str]:
  """(the folder mode eval or predict at `step` writes the splits of `features_of` into, the
  digest of those inputs, for record_inputs): scored_folder's name, then scored_into's.
  `counts`: the examples read of each split."""
  inputs = inputs_digest(features_of)
  named = scored_folder(cfg, run_config.trained_run(workdir), mode, step, counts)
  return scored_into(files.join(workdir, 'predictions', named), inputs), inputs


def scored_into(folder: str, inputs: str) -> str:
  """`folder` (scored_folder's) where it is new or holds the results of these same inputs (its
  INPUTS_FILE); else `folder-<8 hex of the inputs>`: files edited in place since (a preset's
  dev.tsv, a copy downloaded again), or results an older bertjax wrote without the record, are
  never replaced by the scores of other inputs."""
  record = files.join(folder, INPUTS_FILE)
  if not files.exists(folder):
    return folder
  try:
    if files.isfile(record) and json.loads(files.read_text(record)).get('sha256') == inputs:
      return folder
  except (ValueError, AttributeError):  # Damaged: not these inputs' to replace.
    pass
  return f'{folder}-{inputs[:8]}'


def record_inputs(folder: str, inputs: str, complete: bool = True):
  """Writes INPUTS_FILE: the inputs' digest (a rerun of the same inputs replaces the results),
  and `"complete": false` while a bucket's folder is uploaded (writing)."""
  record = {'sha256': inputs, **({} if complete else {'complete': False})}
  files.write_atomically(files.join(folder, INPUTS_FILE), json.dumps(record) + '\n')


def _remove_dead_writers(parent: str):
  """Removes what killed writers (SIGKILL runs no clean-up) left in `parent` (a predictions/
  folder), whatever folder they wrote: an eval of another step or file cleans up too."""
  with contextlib.suppress(OSError):
    prefixes = {entry[:entry.rindex('.writing-') + len('.writing-')]
                for entry in os.listdir(parent)  # local only: a bucket's folder is written whole
                if entry.startswith('.') and '.writing-' in entry}
    for prefix in prefixes:  # Each folder's writers, told apart from live ones by their mark.
      processes.remove_dead_writers(parent, prefix, '', tail='-')


@contextlib.contextmanager
def writing(folder: str, inputs: str):
  """A local folder to write the results into, put at `folder` once the block ends without
  error, INPUTS_FILE with them; an error or an interrupt before leaves nothing of them. Locally
  a new folder is renamed into place whole, and the results of a rerun of the same inputs are
  renamed into their folder file by file (a user's own files there stay); what a killed writer
  left beside it is removed first. A URL's folder (an object store has no rename) is uploaded
  after an INPUTS_FILE that says it is incomplete, which the last file written replaces."""
  if files.is_remote(folder):
    with tempfile.TemporaryDirectory(prefix='bertjax_predictions_') as local:  # local temp
      with console.temporary(local):  # Ctrl-C removes it too.
        yield local
        record_inputs(folder, inputs, complete=False)
        files.copy_tree(local, folder)
        record_inputs(folder, inputs)
    return
  parent, name = files.parent(folder), files.name(folder)
  files.makedirs(parent)
  prefix = f'{processes.hidden_prefix(name)}writing-'
  _remove_dead_writers(parent)
  temp = files.join(parent, f'{prefix}{processes.mark()}-{time.time_ns()}')
  try:
    with console.temporary(temp), _named(folder):  # Ctrl-C removes it: nothing half-written.
      files.makedirs(temp)  # Made once marked: an interrupt between the two would leave it.
      yield temp
      record_inputs(temp, inputs)
      try:
        os.rename(temp, folder)  # local only: atomic; refused where `folder` holds files
      except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not os.path.isdir(folder):  # local
          raise
        # The same inputs' earlier results (or another eval's of them, written meanwhile),
        # replaced file by file; INPUTS_FILE, the same, last.
        for entry in sorted(os.listdir(temp), key=lambda e: e == INPUTS_FILE):  # local only
          target = os.path.join(folder, entry)  # local only
          if os.path.isdir(target) and not os.path.islink(target):  # local only
            files.rmtree(target)
          os.replace(os.path.join(temp, entry), target)  # local only
  finally:
    with contextlib.suppress(OSError):  # What failed is reported, not this clean-up.
      files.rmtree(temp)


@contextlib.contextmanager
def _named(folder: str):
  """An OSError of the hidden folder beside `folder` (a read-only or immutable predictions/)
  said as `folder`'s, which the user knows."""
  try:
    yield
  except OSError as e:
    if e.filename is None or '.writing-' not in os.fsdecode(e.filename):
      raise
    raise OSError(e.errno, e.strerror, folder) from None


def _data_dir_suffix(cfg, run: dict | None) -> str:
  """'' where the task's own split is read as the run read it; for a preset's published files
  read from another data_dir than the run's (or TFDS instead of them, or back), the folder's
  name and 8 hex digits of where: their scores and predictions never replace the run's own."""
  if init_from.lookup(cfg, 'task') in registry.USER_TASKS or not run:
    return ''
  read, trained = (((init_from.lookup(c, 'data.data_dir') or '').rstrip('/'),
                    bool(init_from.lookup(c, 'data.use_tfds'))) for c in (cfg, run))
  if read == trained:
    return ''
  name = files.name(read[0]) or 'default'
  where = hashlib.sha256(f'{read[0]} use_tfds={read[1]}'.encode()).hexdigest()
  return f'-{"tfds-" if read[1] else ""}{_cut(name)}-{where[:8]}'


def _threshold_suffix(cfg, run: dict | None) -> str:
  """SQuAD 2.0's no-answer threshold, where it is not the run's: its answers are others (tuning
  it over several evals keeps each one's)."""
  if not init_from.lookup(cfg, 'version_2_with_negative'):
    return ''
  threshold = init_from.lookup(cfg, 'data.null_score_diff_threshold')
  own = init_from.lookup(run or {}, 'data.null_score_diff_threshold')
  if threshold is None or own is None or float(threshold) == float(own):
    return ''
  return f'-threshold{float(threshold):g}'
