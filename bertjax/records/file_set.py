"""Which TFRecord files a pattern names, checked against the JSON reports written beside them.

create_pretraining_data writes `<prefix>.json` beside its shards with each shard's bytes and
record count (pretraining_data/creation_report.py). A pattern's files are refused when they disagree
with the report that lists them: a listed shard that the pattern would match is missing, a
shard's size differs (modified, or left by a run killed while renaming), or a matched file
sits beside reports but is listed in none (a leftover of another run). Files without any report
beside them (made by another tool) are read as they are. Hidden names and directories never
match, so no temporary file of a running or killed data creation is ever read.

The reports also carry the vocab the data was made with: `check_vocab` compares it with the
model's vocab before anything is compiled. Files, reports and vocabs are listed and read through
bertjax.files (local or a URL); tf.data reads the records themselves.
"""

import dataclasses
import fnmatch
import json
import math
import os

from absl import logging

from bertjax import files as files_lib
from bertjax import paths

_REPORT_TOOL = 'create_pretraining_data'


@dataclasses.dataclass(frozen=True)
class FileSet:
  """Matched files, their record counts where a report gives them, and those reports."""

  files: list
  record_counts: dict  # path -> records, for files listed in a report.
  reports: dict  # report path -> report (dict).
  pattern: str = ''  # What was resolved, for messages.

  def __str__(self):
    return self.pattern


def _patterns(file_pattern) -> list[str]:
  if isinstance(file_pattern, str):  # An existing `my,data.tfrecord` is one file.
    return paths.split_list(file_pattern)
  return [p.strip() for p in file_pattern if p.strip()]


def _is_data_file(path: str) -> bool:
  return not os.path.basename(path).startswith('.') and not files_lib.isdir(path)


def list_files(file_pattern) -> list[str]:
  """Sorted files matching comma-separated patterns or globs (or a list of them); each pattern
  must match a file (one matching none, a typo beside others, was read as nothing)."""
  patterns = _patterns(file_pattern)
  files = set()
  for pattern in patterns:
    matched = [f for f in files_lib.glob(pattern) if _is_data_file(f)]
    if not matched:
      raise FileNotFoundError(_matches_nothing(pattern, file_pattern, len(patterns)))
    files.update(matched)
  if not files:
    raise FileNotFoundError(f'no files match {file_pattern!r}: check the path and the glob')
  return sorted(files)


def _matches_nothing(pattern: str, file_pattern, count: int) -> str:
  """What is said of a pattern that matches no file: a folder, its shards' globs."""
  named = repr(pattern) if count == 1 else f'{pattern!r} of {file_pattern!r}'
  if files_lib.isdir(pattern):  # A folder names no file: its shards' glob is what to pass.
    sets = [_shards_glob(path, report) for path, report in sorted(reports_in(pattern).items())]
    return (f'{named} is a folder: name its shards, e.g. '
            f'{" or ".join(sets) if sets else repr(files_lib.join(pattern, "*"))}')
  if count == 1:
    return f'no files match {named}: check the path and the glob'
  return (f'{named} matches no file: check the path and the glob, or leave it out to read the '
          'others')


def _shards_glob(report_path: str, report: dict) -> str:
  """What names the shards a report lists: '<prefix>-*' for N shards (the README's
  'data/train-*'), else the files listed, comma-separated."""
  prefix = report_path[:-len('.json')]
  names = [os.path.basename(o) for o in report['output_files']]
  if names and all(n.startswith(os.path.basename(prefix) + '-') for n in names):
    return repr(prefix + '-*')
  return repr(','.join(os.path.join(os.path.dirname(report_path), n) for n in names))


def reports_in(directory: str) -> dict:
  """The create_pretraining_data reports in a directory: path -> report."""
  found = {path: report_at(path) for path in files_lib.glob(files_lib.join(directory, '*.json'))}
  return {path: report for path, report in found.items() if report is not None}


def report_at(path: str) -> dict | None:
  """The create_pretraining_data report at `path`; None where the file is none."""
  try:
    report = json.loads(files_lib.read_text(path))
  except (ValueError, OSError):
    return None
  if (isinstance(report, dict) and _REPORT_TOOL in str(report.get('tool', ''))
      and isinstance(report.get('output_files'), list)):
    return report
  return None


def resolve(file_pattern) -> FileSet:
  """The files of a pattern, refused (ValueError) when they disagree with their reports."""
  patterns = _patterns(file_pattern)
  files = list_files(file_pattern)
  reports, counts, covered, report_files = {}, {}, set(), set()
  contributions = {}  # pattern -> {report path: the files of its set that it matches}
  bare = set()  # Folders with no report: their files are read unchecked.
  for directory in sorted({os.path.dirname(f) for f in files}):
    beside = reports_in(directory)
    report_files.update(beside)
    if not beside:
      bare.add(directory)
    for report_path, report in sorted(beside.items()):
      listed = [os.path.join(directory, os.path.basename(o)) for o in report['output_files']]
      wanted = [p for p in listed if any(fnmatch.fnmatchcase(p, pat) for pat in patterns)]
      if not set(wanted) & set(files):
        continue
      reports[report_path] = report
      for pattern in patterns:
        mine = [p for p in wanted if fnmatch.fnmatchcase(p, pattern)]
        if mine:
          contributions.setdefault(pattern, {})[report_path] = mine
      missing = [p for p in wanted if p not in files]
      if missing:
        raise ValueError(
            f'{len(missing)} of the {len(wanted)} shards that {report_path} lists under '
            f'{file_pattern!r} are missing ({", ".join(missing[:3])}): copy them back, or rerun '
            'create_pretraining_data with the same flags to remake the set')
      sizes = report.get('output_bytes', {})
      records = report.get('output_records', {})
      for path in wanted:
        name = os.path.basename(path)
        found = files_lib.size(path)
        if name in sizes and found != sizes[name]:
          raise ValueError(
              f'{path} has {found} bytes but {report_path} recorded {sizes[name]}: the shard '
              'was changed, or a data creation was killed while renaming; rerun '
              'create_pretraining_data with the same flags to remake the set')
        if name in records:
          counts[path] = int(records[name])
      covered.update(wanted)
    strays = [f for f in files if os.path.dirname(f) == directory and f not in covered
              and f not in beside]
    if beside and strays and covered:
      raise ValueError(
          f'{len(strays)} file(s) match {file_pattern!r} but no report beside them lists them '
          f'({", ".join(strays[:3])}): leftovers of another run? Move them away or narrow the '
          'pattern')
  unchecked = [f for f in files if os.path.dirname(f) in bare]
  if reports and unchecked:  # Beside checked sets: said, as they could be made otherwise.
    _warn_once(file_pattern, unchecked)
  for pattern, sets in contributions.items():
    if len(sets) > 1:
      _warn_sets_merged(pattern, sets)
  if not reports:
    logging.info('no create_pretraining_data report beside %s: the files are read unchecked',
                 file_pattern)
  data = [f for f in files if f not in report_files]
  for pattern in patterns:  # One naming reports only reads no record: said, not read as none.
    mine = [f for f in files if fnmatch.fnmatchcase(f, pattern)]
    if mine and all(f in report_files for f in mine):
      named = repr(pattern) if len(patterns) == 1 else f'{pattern!r} of {file_pattern!r}'
      raise FileNotFoundError(
          f'{named} matches create_pretraining_data reports only ({", ".join(mine[:3])}), no '
          f'shard: name the shards they list, e.g. {_shards_glob(mine[0], report_at(mine[0]))}')
  return FileSet(data, counts, reports, ','.join(_patterns(file_pattern)))


_WARNED = set()  # (pattern, its reports) warned about: once per process, not per read.


def _warn_once(pattern, unchecked):
  """Files in folders without a report, matched beside checked sets: read (the original tool's
  shards have none), but said, since their vocab, length and masking are not compared."""
  if (pattern, 'unchecked') in _WARNED:
    return
  _WARNED.add((pattern, 'unchecked'))
  logging.warning('%d file(s) of %s have no create_pretraining_data report beside them (%s): '
                  'they are read unchecked, while the other files are checked against their '
                  'reports (vocab, length, masking); a set made with another vocab would train '
                  'on wrong ids. Keep each set beside its <output_file>.json to check it',
                  len(unchecked), pattern, ', '.join(unchecked[:3]))


def _warn_sets_merged(pattern, sets):
  """Warns (once) that one pattern reads the shards of several sets, e.g. `train-*` matching
  the sets `train` and `train-eval`: maybe meant, often an eval set trained on."""
  key = (pattern, tuple(sorted(sets)))
  if key in _WARNED:
    return
  _WARNED.add(key)
  shown = '; '.join(
      f'{report} ({len(names)} file(s): '
      f'{", ".join(os.path.basename(n) for n in names[:2])}{", ..." if len(names) > 2 else ""})'
      for report, names in sorted(sets.items()))
  logging.warning('%s matches the shards of %d sets, all read: %s. If that is not meant, narrow '
                  'the pattern to one set (e.g. PREFIX-?????-of-?????) or pass the sets '
                  'comma-separated', pattern, len(sets), shown)


def resolved(files) -> FileSet:
  """`files` as a FileSet: one already resolved as it is, a pattern resolved now."""
  return files if isinstance(files, FileSet) else resolve(files)


def masking_made(settings: dict) -> str | None:
  """The masking strategy a report's settings record: a report written before --masking
  (2026-11-26) has the original's do_whole_word_mask instead; None where neither is said."""
  if settings.get('masking') is not None:
    return settings['masking']
  if settings.get('do_whole_word_mask') is not None:
    return 'whole_word' if settings['do_whole_word_mask'] else 'wordpiece'
  return None


def check_masking(file_set: FileSet, *, masking: str, masked_lm_prob: float):
  """Refuses statically masked data whose report names other masking than the config's: the
  files' masks are what trains, and the run's config would record the other."""
  for report_path, report in file_set.reports.items():
    settings = report.get('settings', {})
    made, rate = masking_made(settings), settings.get('masked_lm_prob')
    if not settings.get('static_masking', True) or made is None or rate is None:
      continue  # Unmasked files (the first record check names them), or an older report.
    if made != masking or not math.isclose(rate, masked_lm_prob):
      raise ValueError(
          f'the data ({report_path}) holds the masks it was made with ({made}, '
          f'masked_lm_prob {rate}), which are what trains, not config.data.masking={masking} '
          f'at masked_lm_prob {masked_lm_prob}: set --config.data.masking={made} '
          f'--config.data.masked_lm_prob={rate} to record what trains, or make the files '
          'unmasked (--nostatic_masking) and set --config.data.dynamic_masking=True')


def check_made_alike(train: FileSet, held_out: FileSet, fields: tuple[str, str], same_ids=None):
  """Refuses eval files made otherwise than the train files they are read with (another vocab,
  masking or rate, unmasked, or without the NSP pairs the train files have): the config's fix,
  said of the eval files alone (set data.X to theirs), would refuse the train files, which the
  config reads. `fields`: the config fields naming them ('data.train_files', 'data.eval_files');
  `same_ids` as check_vocab's."""
  if not train.reports or not held_out.reports:
    return
  train_path, made = sorted(train.reports.items())[0]
  for eval_path, report in sorted(held_out.reports.items()):
    ours, theirs = _how_made(made), _how_made(report)
    other = [k for k in ours if k in theirs and ours[k][0] != theirs[k][0]]
    if 'vocab' in other and same_ids and all(
        _still(_made_with(r), r['vocab_sha256']) for r in (made, report)) and same_ids(
            _made_with(made), _made_with(report)):
      other.remove('vocab')  # Other bytes, the same ids (a vocab.txt's line ends).
    if ('masking' in other or 'masked_lm_prob' in other) and 'static_masking' in other:
      other = [k for k in other if k not in ('masking', 'masked_lm_prob')]
    if 'nsp' in other and not ours['nsp'][0]:
      other.remove('nsp')  # Pairs read by an MLM-only model: their labels go unread.
    if other:
      raise ValueError(
          f'{fields[1]}={held_out.pattern} ({eval_path}) was made with '
          f'{", ".join(theirs[k][1] for k in other)}, but {fields[0]}={train.pattern} '
          f'({train_path}) with {", ".join(ours[k][1] for k in other)}: make the eval files as '
          'the train files were made (create_pretraining_data with the same vocab and flags, '
          'from held-out text)')


def _how_made(report) -> dict:
  """What makes a set's records mean and hold what they do, where its report says: name ->
  (value, the words of the flags)."""
  settings = report.get('settings') or {}
  made = {}
  if report.get('vocab_sha256'):
    made['vocab'] = (report['vocab_sha256'], f'the vocab {_made_with(report) or "?"} (sha256 '
                     f'{report["vocab_sha256"][:12]}...)')
  static = settings.get('static_masking', True)
  made['static_masking'] = (static, 'static masks' if static else 'no masks (--nostatic_masking)')
  for name, value in (('masking', masking_made(settings)),
                      ('masked_lm_prob', settings.get('masked_lm_prob'))):
    if static and value is not None:
      made[name] = (value, f'--{name}={value}')
  if settings.get('nsp') is not None:
    made['nsp'] = (settings['nsp'],
                   'NSP pairs' if settings['nsp'] else 'no NSP pairs (--nsp=false)')
  if settings.get('do_lower_case') is not None:
    made['do_lower_case'] = (bool(settings['do_lower_case']), _casing(settings['do_lower_case']))
  return made


def _casing(lower: bool) -> str:
  return 'lower-cased text (--do_lower_case)' if lower else 'cased text (--nodo_lower_case)'


def casing_of(sets: dict) -> bool | None:
  """Whether the text of `sets` ({config field: FileSet}, a run's training files) was lower-cased
  as their reports say (create_pretraining_data's --do_lower_case); None where none says.
  Refused where they say both: one model would read text cased two ways."""
  said = {}
  for field, file_set in sets.items():
    for report_path, report in sorted(file_set.reports.items()):
      lower = (report.get('settings') or {}).get('do_lower_case')
      if lower is not None:
        said.setdefault(bool(lower), f'{field}={file_set.pattern} ({report_path})')
  if len(said) > 1:
    raise ValueError(f'{said[True]} was made from {_casing(True)}, but {said[False]} from '
                     f'{_casing(False)}: make every set with the same casing (the vocab\'s)')
  return next(iter(said), None)


def _made_with(report) -> str:
  """The vocab a report says its set was made with ('' when it names none): a WordPiece vocab
  as settings.vocab_file, a SentencePiece model as settings.spm_model_file."""
  settings = report.get('settings') or {}
  return settings.get('vocab_file') or settings.get('spm_model_file') or ''


def vocab_of(file_set: FileSet, field: str = 'data.train_files') -> str:
  """The vocab the reports of `file_set` say it was made with, still that file (its sha256); ''
  where no report names one (files read unchecked). Refused where the sets were made with
  several vocabs, or the vocab named is gone or has changed since."""
  named = {}
  for report_path, report in sorted(file_set.reports.items()):
    if report.get('vocab_sha256') and _made_with(report):
      named.setdefault(report['vocab_sha256'], (_made_with(report), report_path))
  if not named:
    return ''
  if len(named) > 1:
    raise ValueError(f'{field}={file_set.pattern} holds sets made with {len(named)} vocabs ('
                     f'{", ".join(sorted(p for p, _ in named.values()))}): train on the sets of '
                     'one vocab, with it as data.vocab_file')
  (digest, (path, report_path)), = named.items()
  fix = (f'set data.vocab_file to the vocab the data was made with (sha256 {digest[:12]}...), '
         'wherever it is now')
  if not files_lib.exists(path):
    raise FileNotFoundError(f'the data ({report_path}) was made with the vocab {path}, which is '
                            f'gone, and data.vocab_file is unset: {fix}')
  if files_lib.sha256(path) != digest:
    raise ValueError(f'the data ({report_path}) was made with the vocab {path}, which has '
                     f'changed since (its sha256 differs), and data.vocab_file is unset: {fix}')
  return path


def check_vocab(file_set: FileSet, *, model_vocab_size: int, vocab_file: str | None,
                same_ids=None):
  """Refuses data made with another vocab than the model's, before anything is compiled.
  `same_ids(a, b)`: whether two vocab files of other bytes give the same ids (a vocab.txt with
  other line ends), asked where the data's vocab is still where its report says."""
  vocab_digest = files_lib.sha256(vocab_file) if vocab_file else None
  for report_path, report in file_set.reports.items():
    size, digest = report.get('vocab_size'), report.get('vocab_sha256')
    made_with = _made_with(report) or '?'
    if size is not None and size > model_vocab_size:
      raise ValueError(
          f'the data ({report_path}) was made with a {size}-entry vocab ({made_with}) but the '
          f'model has vocab_size={model_vocab_size}: set data.vocab_file to that vocab and '
          f'--config.model.vocab_size={size}, or remake the data with the model\'s vocab')
    if vocab_digest and digest and digest != vocab_digest:
      if same_ids and _still(made_with, digest) and same_ids(made_with, vocab_file):
        logging.info('data.vocab_file=%s gives the ids of %s, which the data (%s) was made '
                     'with (other bytes: line ends)', vocab_file, made_with, report_path)
        continue
      raise ValueError(
          f'the data ({report_path}) was made with another vocab ({made_with}, sha256 '
          f'{digest[:12]}...) than data.vocab_file={vocab_file} (sha256 {vocab_digest[:12]}...): '
          'the ids would mean other tokens. Point data.vocab_file at the vocab the data was '
          'made with, or remake the data with this vocab')
    if not vocab_file and size is not None and size != model_vocab_size:
      logging.warning('the data was made with a %d-entry vocab (%s) and the model has %d rows; '
                      'set data.vocab_file to check that they are the same vocab', size,
                      made_with, model_vocab_size)


def _still(path: str, digest: str) -> bool:
  """Whether `path` still holds the file of that sha256."""
  try:
    return files_lib.sha256(path) == digest
  except (OSError, ValueError):
    return False
