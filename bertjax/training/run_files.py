"""The files a run keeps beside its checkpoints: config.json, results, eval history, its vocab.

<workdir>/config.json and eval_results.json are written whole by process 0; eval_history.json
holds every eval's metrics by step, what early stopping counts from after a resume (checkpoints
of older evals may be gone by then); vocab.txt is the run's own copy of its vocab (a WordPiece
vocab or a SentencePiece model, told by its bytes).
"""

import json
import math
import os

from absl import logging
import jax

from bertjax import files

# Every eval's metrics by step, beside config.json: what early stopping counts from after a
# resume (checkpoints of older evals may be gone by then).
EVAL_HISTORY = 'eval_history.json'


def eval_history(workdir, up_to_step: int) -> dict[int, dict]:
  """{step: metrics} of the evals recorded in `workdir` at steps <= `up_to_step` (an eval
  recorded after the checkpoint a run resumes from is done again)."""
  path = files.join(workdir, EVAL_HISTORY)
  if not files.exists(path):
    return {}
  recorded = _record(path, 'early stopping and --step=best then know only the evals after it')
  if not all(k.isdigit() and isinstance(v, dict) and all(
      x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in v.values())
             for k, v in recorded.items()):
    raise _damaged(path, 'not {step: metrics}', 'early stopping and --step=best then know only '
                   'the evals after it')
  return {int(k): _nan_back(v) for k, v in recorded.items() if int(k) <= up_to_step}


def _record(path, without: str) -> dict:
  """A run file's JSON object; ValueError naming the file and what to do when it is damaged
  (`without`: what deleting it costs)."""
  try:
    recorded = json.loads(files.read_text(path))
  except ValueError as e:
    raise _damaged(path, f'not JSON: {e}', without) from None
  if not isinstance(recorded, dict):
    raise _damaged(path, f'a JSON {type(recorded).__name__}, not an object', without)
  return recorded


def _damaged(path, why: str, without: str) -> ValueError:
  return ValueError(f'{path} is damaged ({why}): restore it, or delete it ({without}).')


# The newest checkpoint step a run saw complete, beside config.json: what tells a run whose
# checkpoints/ was moved or deleted from one that never finished a save.
SAVED = 'checkpoints_saved.json'


def checkpoint_steps(directory) -> list[int]:
  """The complete steps of a checkpoints folder, oldest first (orbax gives a step its number
  only once it is complete; unreadable ones moved aside keep a suffix). A folder that does not
  exist has none; a bucket that cannot be reached is an error, not an empty run."""
  try:
    return sorted(int(name) for name in files.listdir(directory) if name.isdigit())
  except (FileNotFoundError, NotADirectoryError):
    return []


def note_saved(workdir, run: str | None = None):
  """Records the newest complete step (process 0), once a save is known finished: at the next
  save's start and at the run's end; with the run's name (`run`, else the one recorded)."""
  if steps := checkpoint_steps(files.join(workdir, 'checkpoints')):
    run = run or run_id(workdir)
    write_json(files.join(workdir, SAVED), {'newest_step': steps[-1]} | ({'run': run} if run
                                                                          else {}))


def name_run(workdir, run: str):
  """Records `run` (run_id) in SAVED, keeping what it records (process 0)."""
  recorded = _read_json(files.join(workdir, SAVED))
  write_json(files.join(workdir, SAVED),
             (recorded if isinstance(recorded, dict) else {}) | {'run': run})


def lost_checkpoints(workdir) -> str:
  """'' or why `workdir` is a run whose checkpoints are gone though it saved some (SAVED, or a
  resume's config-resumed-at-*.json, is there) yet checkpoints/ holds no step: moved, deleted,
  a link whose target is gone. Starting over there would replace its history, config and eval
  results with another run's. A run that ended before its first save finished restarts. Where
  only the newest steps are gone, warns (_say_newest_gone) and returns ''."""
  folder = files.join(workdir, 'checkpoints')
  try:
    names = files.listdir(folder)
  except (FileNotFoundError, NotADirectoryError):
    names = []
  if steps := [int(n) for n in names if n.isdigit()]:
    _say_newest_gone(workdir, folder, names, max(steps))
  if steps or any('.unreadable-' in n for n in names):  # The latter: restore's to say.
    return ''
  marker, resumes = files.join(workdir, SAVED), files.glob(
      files.join(workdir, 'config-resumed-at-*.json'))
  saved = _record(marker, 'a run whose checkpoints/ was moved away is then taken for one that '
                  'never saved').get('newest_step') if files.exists(marker) else None
  link = not files.is_remote(folder) and os.path.islink(folder)  # local: a link's target
  if saved is None and not resumes and not link:
    return ''
  recorded = (f'checkpoints up to step {saved} ({SAVED})' if saved is not None else
              f'{len(resumes)} resume(s) (config-resumed-at-*.json)' if resumes else
              'checkpoints/ as a link')
  where = f' (a link to {os.readlink(folder)}, which holds none)' if link else ''  # local
  found = ([marker] if saved is not None else []) + sorted(resumes)
  fresh = (f'; to start over here, delete {" and ".join(found)}' if found else
           f'; to start over here, remove the link {folder}')
  return (f'{workdir} records {recorded} but its checkpoints/ holds no checkpoint{where}: its '
          'checkpoints were moved or deleted. Put them back to resume, evaluate or predict, or '
          'use another --workdir (a run started here would replace its history, config and '
          f'results){fresh}')


def say_newest_gone_to_reader(workdir, newest: int):
  """A reader's warning (export, predict, embed) where SAVED records a newer step than
  `newest`, the newest step it reads: the newer ones were deleted or moved."""
  folder = files.join(workdir, 'checkpoints')
  if saved := _newer_saved(workdir, files.listdir(folder), newest):
    logging.warning('%s saved checkpoints up to step %d (%s) but %s holds none after step %d: '
                    'they were deleted or moved, and step %d is read; put them back to read '
                    'the newest', workdir, saved, SAVED, folder, newest, newest)


def newest_saved(workdir) -> int | None:
  """The newest step SAVED records (None: no record, or a damaged one: the next save rewrites
  it, and the steps present are resumed either way)."""
  recorded = _read_json(files.join(workdir, SAVED))
  saved = recorded.get('newest_step') if isinstance(recorded, dict) else None
  return saved if isinstance(saved, int) and not isinstance(saved, bool) else None


def _newer_saved(workdir, names, newest: int) -> int | None:
  """The newest step SAVED records where it is newer than `newest` (and was not moved aside
  as unreadable, which was said when it was); else None."""
  saved = newest_saved(workdir)
  if (saved is None or saved <= newest
      or any(n.startswith(f'{saved}.unreadable-') for n in names)):
    return None
  return saved


def _say_newest_gone(workdir, folder, names, newest: int):
  """Warns where SAVED records a newer step than `newest`, the newest in checkpoints/: a resume
  would train the steps between again without a word. The run's own keep limit removes older
  steps only; a newest step moved aside as unreadable was said when it was."""
  if (saved := _newer_saved(workdir, names, newest)) is None:
    return
  logging.warning('%s saved checkpoints up to step %d (%s) but %s holds none after step %d: '
                  'they were deleted or moved (by hand, a cleanup script, a copy of the workdir '
                  'made before them), so resuming from step %d trains %d steps again. To resume '
                  'from step %d, stop the run, put its checkpoint back and rerun; if it was '
                  'removed on purpose, nothing to do', workdir, saved, SAVED, folder, newest,
                  newest, saved - newest, saved)


def last_eval(workdir, step: int, total_steps: int) -> tuple[int | None, dict]:
  """(step, metrics) of the run's last eval up to `step`, from its eval history; (None, {})
  when none is recorded. A run without a history (written before it was kept) that ended at
  this config's last step evaluated there: its eval_results.json."""
  history = eval_history(workdir, step)
  if history:
    return max(history), history[max(history)]
  results = _nan_back(_read_json(files.join(workdir, 'eval_results.json')) or {})
  return (step, results) if results and step == total_steps else (None, {})


def _read_json(path):
  """A JSON file of the workdir (local or a URL), or None when it is missing or unreadable."""
  try:
    return json.loads(files.read_text(path))
  except (OSError, ValueError):
    return None


def record_eval(workdir, history: dict[int, dict]):
  """Writes the eval history (process 0, atomically)."""
  write_json(files.join(workdir, EVAL_HISTORY), {str(k): v for k, v in sorted(history.items())})


def write_json(path, payload: dict):
  """Atomically writes a JSON file, local or a URL (process 0 only)."""
  if jax.process_index() == 0:
    files.write_atomically(path, json_text(payload))


def json_text(payload) -> str:
  """`payload` as strict JSON, which every parser reads: a metric of NaN or Inf (a constant
  prediction's pearson, a diverged loss) is written as null, and read back as NaN here."""
  def strict(value):
    if isinstance(value, float) and not math.isfinite(value):
      return None
    if isinstance(value, dict):
      return {k: strict(v) for k, v in value.items()}
    return [strict(v) for v in value] if isinstance(value, (list, tuple)) else value
  return json.dumps(strict(payload), indent=1, sort_keys=True, allow_nan=False)


def _nan_back(metrics: dict) -> dict:
  """A metrics record as written (json_text): null is a metric of NaN."""
  return {k: float('nan') if v is None else v for k, v in metrics.items()}


# A run's own copy of its vocab, beside its config.json: the run reads the same wherever the
# vocab it was given moves (interop/init_from.vocab_file reads it). A SentencePiece model is
# kept under this name too: every reader tells the kind from the file's bytes
# (vocab_files.for_model), so one name serves both and every existing workdir still reads.
RUN_VOCAB = 'vocab.txt'
# Written last into every export (interop/export_manifest.py): the files it wrote, and while an
# upload is under way `in_progress` (every reader of a model refuses such a folder).
EXPORT_MANIFEST = '.bertjax_export_manifest.json'


def keep_run_vocab(workdir: str, vocab: str):
  """Copies the vocab a run trains with to <workdir>/vocab.txt (process 0, atomically), so that
  every later reader of the run tokenizes as it did; a run resumed with another vocab stops
  (on every host: each compares, none goes on alone into the first step)."""
  kept = files.join(workdir, RUN_VOCAB)
  if files.exists(kept):
    if not _same_file(kept, vocab) and files.read_bytes(kept) != files.read_bytes(vocab):
      raise ValueError(f'{workdir} was trained with the vocab {kept}, which differs from '
                       f'{vocab}: resume with its own vocab (data.vocab_file={kept}), or use '
                       'another --workdir for a new vocab.')
  elif jax.process_index() == 0:
    files.write_atomically(kept, files.read_bytes(vocab))


def _same_file(a: str, b: str) -> bool:
  """Whether two paths name one file (two URLs: the same text)."""
  if files.is_remote(a) or files.is_remote(b):
    return a.rstrip('/') == b.rstrip('/')
  return os.path.realpath(a) == os.path.realpath(b)


def run_id(workdir) -> str | None:
  """The run a workdir holds, as each step's meta records it (checkpoint_step.step_meta): a
  random name SAVED keeps from the run's first save on, copied or moved with the folder; None
  where none is recorded (a run saved before the record, or none yet)."""
  recorded = _read_json(files.join(workdir, SAVED))
  run = recorded.get('run') if isinstance(recorded, dict) else None
  return run if isinstance(run, str) and run else None
