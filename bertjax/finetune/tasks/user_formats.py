"""A user's data file as rows: its format from the extension, its content checked against that,
CSV/TSV (with a header) and JSON lines read as (line number, {field: value}).

The first of user_data.py's rules: the format is the file's extension (.csv, .tsv, .jsonl/.json,
and for tagging .conll/.txt columns) unless `data.format` says otherwise, and the content must
agree with it. Every error names the file and the line.
"""

import csv
import io
import json
import os

from bertjax import compressed_text
from bertjax import files
from bertjax import text_files

FORMATS = ('csv', 'tsv', 'jsonl')
_EXTENSIONS = {'.csv': 'csv', '.tsv': 'tsv', '.jsonl': 'jsonl', '.json': 'jsonl',
               '.ndjson': 'jsonl', '.conll': 'conll', '.txt': 'conll', '.iob': 'conll',
               '.bio': 'conll'}


def check_file(path) -> str:
  """`path` (a local path or a URL, as given) when it names a file with something in it."""
  path = os.fspath(path)
  if files.isdir(path) and not files.isfile(path):
    raise IsADirectoryError(f'{path} is a folder: config.data.train_file / eval_file / test_file '
                            'name one file (a preset task\'s folder is config.data.data_dir).')
  missing = f'{path} does not exist: check config.data.train_file / eval_file / test_file.'
  files.require_file(path, missing)
  if files.size(path) == 0:
    raise ValueError(f'{path} is empty: it holds no examples.')
  return path


def file_text(path) -> str:
  """The file's text as written (line breaks untranslated, for csv), its BOM removed."""
  data = compressed_text.decompressed(path)  # A .gz, .bz2 or .xz file decompressed.
  text_files.check_utf8_head(str(path), data)  # Binary, gzip or UTF-16 (which may decode).
  try:
    return data.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    raise ValueError(f'{path} is not UTF-8 text ({e.reason} at byte {e.start}): convert it, '
                     f'{text_files.reencode_hint(data[:64], data)}.') from None


def _suffix(path) -> str:
  """The extension of the file's name ('.csv'; that of train.csv.gz too: read decompressed),
  '' for none."""
  name = files.name(path)
  name = next((name[:-len(s)] for s in ('.gz', '.bz2', '.xz') if name.lower().endswith(s)), name)
  stem, suffix = os.path.splitext(name)
  return suffix if stem and suffix != '.' else ''


def extension_format(path) -> str:
  """The format the file's extension names ('csv', 'jsonl', 'conll'), '' for none."""
  return _EXTENSIONS.get(_suffix(path).lower(), '')


def format_of(path, configured: str = '', allowed=FORMATS) -> str:
  """The file's format: `configured` if set, else its extension's."""
  fmt = configured or extension_format(path)
  if configured and fmt not in allowed:  # The value given is wrong, not the file's name.
    raise ValueError(f'config.data.format={configured!r} cannot read {path}: set it to one of '
                     f'{", ".join(allowed)}, or to \'\' to go by the extension.')
  if fmt not in allowed:
    raise ValueError(f'{path}: cannot tell the format from the extension '
                     f'{_suffix(path)!r}: name the file .{" / .".join(allowed)} or '
                     f'set config.data.format to one of {", ".join(allowed)}.')
  return fmt


def _first_line(text: str) -> tuple[int, str]:
  for number, line in enumerate(text_files.split_lines(text), 1):
    if line.strip():
      return number, line
  return 0, ''


def said_by(fmt: str) -> str:
  """What names a file's format: `fmt` as config.data.format, or the extension when unset."""
  return f'config.data.format={fmt!r}' if fmt else 'the extension'


def check_content(path, fmt, text, source='the extension', header=True):
  """An error when the content is plainly another format than the one `fmt` names; `source`
  says what named it (said_by's), `header`: the first line is a CSV / TSV header."""
  number, line = _first_line(text)
  if not line:
    raise ValueError(f'{path} holds only blank lines: it holds no examples.')
  looks_json = line.lstrip().startswith(('{', '['))

  def fix(found=''):  # What to do; `found`: the format the line looks like.
    named = f' ({found})' if found else ''
    if source == 'the extension':
      return f'rename the file or set config.data.format{named}'
    if source.startswith('config.'):
      return f"set config.data.format to the file's format{named}, or to '' for the extension's"
    return 'write the file in that format'

  if fmt == 'jsonl' and not looks_json:
    raise ValueError(f'{path}:{number}: {source} says JSON lines but the line is not a '
                     f'JSON object ({line[:60]!r}): {fix()}.')
  if fmt in ('csv', 'tsv', 'conll') and looks_json:
    raise ValueError(f'{path}:{number}: {source} says {fmt.upper()} but the line is JSON '
                     f'({line[:60]!r}): {fix("jsonl")}.')
  if header and fmt == 'tsv' and '\t' not in line and ',' in line:
    raise ValueError(f'{path}:{number}: {source} says TSV but the header has no tab and '
                     f'has commas ({line[:60]!r}): it looks like CSV; {fix()}.')
  if header and fmt == 'csv' and ',' not in line and '\t' in line:
    raise ValueError(f'{path}:{number}: {source} says CSV but the header has no comma and '
                     f'has tabs ({line[:60]!r}): it looks like TSV; {fix()}.')


class _RepeatedKey(Exception):
  """A JSON object that names one key twice (its key in args[0])."""


def _object(pairs) -> dict:
  """A JSON object; a repeated key is refused: json.loads would keep the last value silently,
  where CSV and TSV refuse a repeated column."""
  record = {}
  for key, value in pairs:
    if key in record:
      raise _RepeatedKey(key)
    record[key] = value
  return record


def read_records(path, fmt: str = '', source='') -> list[tuple[int, dict]]:
  """(line number, {field: value}) of every data row of a CSV/TSV (with a header) or JSONL file.

  `fmt`: config.data.format's ('' for the extension's); `source`, when another than these named
  it, what did (check_content's). Blank lines are no rows; a CSV / TSV row of only separators
  and spaces (`,` or ` ,`) is one, every field empty: the reader skips and counts it in
  training data and refuses it in eval and test data, as any empty text.
  """
  path = check_file(path)
  source = source or said_by(fmt)
  fmt = format_of(path, fmt)
  text = file_text(path)
  check_content(path, fmt, text, source)
  records = []
  if fmt == 'jsonl':
    for number, line in enumerate(text_files.split_lines(text), 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line, object_pairs_hook=_object)
      except json.JSONDecodeError as e:
        raise ValueError(f'{path}:{number}: not valid JSON ({text_files.json_error(e)}): JSON '
                         'lines hold one object per line.') from None
      except _RepeatedKey as e:
        raise ValueError(f'{path}:{number}: the key {e.args[0]!r} is written twice in one '
                         'object: write each field once.') from None
      if not isinstance(record, dict):
        raise ValueError(f'{path}:{number}: a JSON {type(record).__name__}, not an object: JSON '
                         'lines hold one {"field": value, ...} object per line.')
      records.append((number, record))
    return records
  # The csv module's own line rules (newline='' semantics): a form feed, U+2028... is text.
  csv.field_size_limit(1 << 30)  # A long document is a valid field (the default stops at 128 KB).
  # strict: a stray quote is an error where it breaks the file, not rows merged into one field.
  reader = csv.reader(io.StringIO(text, newline=''),
                      delimiter='\t' if fmt == 'tsv' else ',',
                      quoting=csv.QUOTE_MINIMAL if fmt == 'csv' else csv.QUOTE_NONE, strict=True)
  header, start = None, 1  # The line a row starts on (a quoted field may span lines).
  try:
    for row in reader:
      # Rows are numbered by their last line (guids, so held-out splits, depend on it: runs made
      # before keep theirs); a broken quote is said at its first (`start`).
      number, start = reader.line_num, reader.line_num + 1
      if header is None:
        header = [h.strip() for h in row]
        if len(set(header)) != len(header) or '' in header:
          raise ValueError(f'{path}:{number}: the header {header} has an empty or repeated '
                           'column name: the first line names the columns.')
        continue
      if not any(cell.strip() for cell in row):
        if len(row) > 1:  # Separators: a row with every field empty (its count aside).
          records.append((number, dict.fromkeys(header, '')))
        continue  # A blank line (or one of spaces) is no row.
      if len(row) != len(header):
        # TSV is read unquoted (QUOTE_NONE): quoting a field cannot hide a tab in it.
        if len(row) < len(header):  # A value missing (the label?): no quote would help.
          fix = f'write one value per column, separated by {"commas" if fmt == "csv" else "tabs"}'
        else:
          fix = ('quote fields that hold the separator' if fmt == 'csv' else
                 'a field may not hold a tab: replace it with a space, or write the file as CSV '
                 'with quoted fields')
        raise ValueError(f'{path}:{number}: {len(row)} column{"s" * (len(row) != 1)} where the '
                         f'header has {len(header)} ({", ".join(header)}): {fix}.')
      records.append((number, dict(zip(header, row, strict=True))))
  except csv.Error as e:
    if fmt == 'csv' and 'field larger' not in str(e):  # A quote opened and not closed as CSV's.
      raise ValueError(
          f'{path}:{start}: {e}: the row that starts there opens a quoted field read on to line '
          f'{reader.line_num}: close its quote, and double every quote inside it ("").') from None
    raise ValueError(f'{path}:{reader.line_num}: {e}') from None
  # Rows of only separators at the end (`,,,`: a spreadsheet's export pads its last rows) are no
  # rows, as blank lines are; before another row they are one with every field empty.
  while records and not any(str(v).strip() for v in records[-1][1].values()):
    records.pop()
  return records
