"""A TFDS text dataset as the input of create_pretraining_data: one document per example.

  python -m bertjax.create_pretraining_data --tfds_name=wikipedia/20230601.en \
    --tfds_split=train --tfds_text_field=text [--tfds_data_dir=DIR] --output_file=... ...

Any prepared TFDS dataset with a text feature works: a catalog dataset, or a user's own builder
(registered by importing its module, or just its prepared folder in --tfds_data_dir: TFDS reads
prepared data without the builder's code). Nothing is downloaded or generated here: a dataset
that is not prepared is an error that says to run `tfds build` (or the builder's
download_and_prepare) first.

Each example's text field is one document. Its lines (broken at \\n, \\r\\n, \\r) are handled as
--input_format says: text (the default here) takes each line as a paragraph split into
sentences by `corpora.split_sentences`, lines takes each line as one sentence; blank lines
inside a text are dropped (they do not start a document, the example does). Blank texts are
skipped and counted as `empty_text`, lines that are not UTF-8 as `invalid_utf8` (the rest of
the text kept; more than 1% of the lines refused, as for a file), lines longer than
max_line_bytes as `line_too_long`, as text_input does for files.

Worker w of W reads part w of `tfds.even_splits(split, W)`: contiguous runs of examples that
differ in size by at most one, so every worker reads only its own examples, never the whole
split. The split is read in its stored order (shuffle_files=False, no autocache), streamed
through tf.data, and only the text field is decoded: same seed and worker count, same bytes.
Workers open the dataset as `name:version` of the version the parent checked.
"""

import dataclasses
import re

import numpy as np

from bertjax import files as files_lib
from bertjax.pretraining_data import text_input
from bertjax.text import fast_tokenizer


@dataclasses.dataclass(frozen=True)
class Source:
  """Which TFDS dataset, split and text feature; picklable, so it crosses into workers."""

  name: str  # 'wikipedia/20230601.en', 'my_builder', 'c4/en:3.1.0' (a version pins it).
  split: str = 'train'  # TFDS split syntax: 'train', 'train[:10%]', 'train+validation'.
  text_field: str = 'text'  # A top-level Text (or scalar string) feature.
  data_dir: str = ''  # '' = TFDS's default (~/tensorflow_datasets or $TFDS_DATA_DIR).


def _tfds():
  """tensorflow_datasets, imported on first use: it imports TensorFlow (seconds)."""
  fast_tokenizer.import_tf()  # Quiet, and kept off the accelerators, before TFDS imports it.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return tfds


def _build_hint(source):
  data_dir = f' --data_dir={source.data_dir}' if source.data_dir else ''
  return (f'prepare it first: `tfds build {source.name.split(":")[0]}{data_dir}` for a catalog '
          'dataset, or your builder\'s download_and_prepare() (its data_dir as --tfds_data_dir); '
          'create_pretraining_data never downloads')


def _builder(source):
  """The dataset builder, or a ValueError that says what is missing and what to run."""
  tfds = _tfds()
  above = _data_dir_above(source)
  if above:  # Else not prepared there, and told to prepare it again inside itself.
    raise ValueError(f'--tfds_data_dir={source.data_dir} is {source.name.partition(":")[0]}\'s '
                     f'own prepared folder, inside the data_dir TFDS reads: pass '
                     f'--tfds_data_dir={above}')
  try:
    return tfds.builder(source.name, data_dir=source.data_dir or None)
  except tfds.core.registered.DatasetNotFoundError as e:
    # Another version of it prepared there (TFDS reads a folder only at the version asked for).
    name, _, version = source.name.partition(':')
    folder = files_lib.join(source.data_dir or _default_data_dir(tfds), *name.split('/'))
    prepared = _prepared_versions(folder)
    if prepared:
      raise ValueError(_not_prepared(source, files_lib.join(folder, version) if version
                                     else folder, prepared)) from None
    # TFDS's own message lists every catalog name (hundreds of lines): its first line only.
    where = source.data_dir or 'the default data_dir'
    raise ValueError(f'--tfds_name={source.name}: {str(e).splitlines()[0]} Neither a registered '
                     f'builder (import its module, or see tfds.list_builders()) nor prepared '
                     f'data in {where}; {_build_hint(source)}') from None
  except (ValueError, AssertionError) as e:  # No such config or version: TFDS lists those it has.
    raise ValueError(f'--tfds_name={source.name}: ' + ' '.join(str(e).split())[:600]) from None


def _data_dir_above(source) -> str:
  """The data_dir holding the dataset where --tfds_data_dir is its prepared folder itself
  (DIR/<name>/<version>, or DIR/<name> holding versions; `download_and_prepare` printed the
  first): DIR, else ''."""
  parts = source.name.partition(':')[0].split('/')
  folder = source.data_dir.rstrip('/')
  if not folder or files_lib.exists(files_lib.join(folder, *parts)):  # A data_dir holding it.
    return ''
  if files_lib.exists(files_lib.join(folder, 'dataset_info.json')):  # A version's folder.
    folder = folder.rpartition('/')[0]
  elif not _prepared_versions(folder):
    return ''
  names = folder.split('/')
  if len(names) < len(parts) or names[-len(parts):] != parts:
    return ''
  rest = names[:-len(parts)]
  return '/' if rest == [''] else '/'.join(rest) or '.'


def text_fields(features) -> list[str]:
  """The top-level features that hold one string per example."""
  tfds = _tfds()
  names = []
  for name, feature in features.items():
    if isinstance(feature, tfds.features.Text) or (
        isinstance(feature, tfds.features.Tensor) and feature.shape == ()
        and np.dtype(feature.np_dtype).kind in 'OSU'):
      names.append(name)
  return names


def _decoders(source):
  # Only the text field is decoded: the others (images, ids) are skipped unread.
  return _tfds().decode.PartialDecoding({source.text_field: True})


def _read_config():
  # No autocache: a small split would otherwise be held in memory whole.
  return _tfds().ReadConfig(try_autocache=False)


def _default_data_dir(tfds) -> str:
  """TFDS's default data_dir ($TFDS_DATA_DIR, else ~/tensorflow_datasets)."""
  return str(getattr(tfds.core.constants, 'DATA_DIR', '~/tensorflow_datasets'))


def _prepared_versions(folder: str) -> list[str]:
  """The versions prepared in a dataset's (and config's) folder, oldest first: its
  subfolders holding TFDS's dataset_info.json."""
  try:
    names = files_lib.listdir(folder)
  except (OSError, ValueError):
    return []
  versions = [name for name in names
              if files_lib.exists(files_lib.join(folder, name, 'dataset_info.json'))]
  return sorted(versions, key=lambda v: [int(x) if x.isdigit() else x for x in v.split('.')])


def _not_prepared(source, where, prepared) -> str:
  """The error for a dataset not prepared in `where`, naming the versions that are (with the
  pin that reads one) and how to prepare it."""
  there = (f' (prepared there: {", ".join(prepared)}; pin one as --tfds_name='
           f'{source.name.split(":")[0]}:{prepared[-1]})' if prepared else '')
  return f'--tfds_name={source.name} is not prepared in {where}{there}: {_build_hint(source)}'


def check(source) -> tuple[Source, dict]:
  """(the source pinned to the version found, the report's description of it): fails early,
  in the parent, on a missing dataset, field or split, or data not prepared."""
  builder = _builder(source)
  fields = text_fields(builder.info.features)
  if source.text_field not in fields:
    raise ValueError(
        f'--tfds_text_field={source.text_field}: {source.name} has no text feature of that name; '
        f'its text features: {", ".join(fields) or "none"} (all features: '
        f'{", ".join(builder.info.features.keys())})')
  try:
    # Builds the pipeline without reading it: the data's presence and the split are checked.
    builder.as_dataset(split=source.split, decoders=_decoders(source),
                       read_config=_read_config())
  except AssertionError:  # TFDS's way of saying `could not find data in DIR`.
    prepared = _prepared_versions(files_lib.parent(str(builder.data_dir)))
    raise ValueError(_not_prepared(source, builder.data_dir, prepared)) from None
  except ValueError as e:  # Unknown split, or a slice out of range.
    known = ', '.join(builder.info.splits.keys())
    raise ValueError(f'--tfds_split={source.split}: {str(e).splitlines()[0]} ({source.name} '
                     f'has {known or "no splits"})') from None
  pinned = dataclasses.replace(source, name=f'{source.name.split(":")[0]}:{builder.version}')
  try:
    split_info = builder.info.splits[source.split]
    num_examples, num_bytes = split_info.num_examples, split_info.num_bytes
  except KeyError:  # Splits not recorded (tfds.testing.mock_data): unknown until read.
    num_examples = num_bytes = None
  return pinned, {'name': source.name, 'split': source.split, 'version': str(builder.version),
                  'text_field': source.text_field, 'data_dir': str(builder.data_dir),
                  'num_examples': num_examples, 'num_bytes': num_bytes}


def _part_split(tfds, builder, split, part, num_parts):
  """Part `part` of `num_parts` of the split, or None when it holds no example."""
  if num_parts == 1:
    return split
  part_split = tfds.even_splits(split, num_parts)[part]
  try:
    if builder.info.splits[part_split].num_examples == 0:
      return None  # TFDS refuses to read an empty slice.
  except KeyError:  # Splits not recorded (mock data): read it.
    pass
  return part_split


def raw_documents(source, input_format, max_line_bytes, skips, where, part=0, num_parts=1,
                  read=None):
  """Yields this part's documents (lists of sentence strings), one per example with text;
  read(n): told the examples of this part read so far, for the command's progress line."""
  if input_format not in text_input.INPUT_FORMATS:
    raise ValueError(f'input_format={input_format!r}: pass one of {text_input.INPUT_FORMATS}')
  tfds = _tfds()
  builder = tfds.builder(source.name, data_dir=source.data_dir or None)
  split = _part_split(tfds, builder, source.split, part, num_parts)
  if split is None:
    return
  dataset = builder.as_dataset(split=split, shuffle_files=False, decoders=_decoders(source),
                               read_config=_read_config())
  dataset_name = f'{source.name}[{source.split}]'
  label = f'{dataset_name} part {part + 1}/{num_parts} example'
  where['path'] = label
  lines = invalid = 0
  for index, example in enumerate(tfds.as_numpy(dataset)):
    where['line'] = index
    if read is not None:
      read(index + 1)
    place = f'{label} {index}'
    sentences, too_long, undecodable = [], False, False
    # Line by line, as files are read: a bad byte loses its line, not the whole document, and
    # the share of such lines is limited as a file's is (writer._check_utf8).
    for number, raw in enumerate(_byte_lines(example[source.text_field]), 1):
      raw = raw.strip()
      if not raw:
        continue
      lines += 1
      if len(raw) > max_line_bytes:
        skips.add('line_too_long', place)
        too_long = True
        continue
      try:
        line = raw.decode('utf-8').strip()
      except UnicodeDecodeError:
        skips.add('invalid_utf8', f'{dataset_name}: part {part + 1}/{num_parts} example {index} '
                  f'line {number}')
        invalid += 1
        undecodable = True
        continue
      if line:
        sentences.extend(text_input.sentences_of(line, input_format))
    if sentences:
      yield sentences
    elif not (too_long or undecodable):  # Counted as those lines already.
      skips.add('empty_text', place)
  skips.add_file_lines(dataset_name, lines, invalid)


def _byte_lines(text: bytes) -> list[bytes]:
  """A text field's lines, broken at \\n, \\r\\n and \\r (text_files.split_lines' rule; these bytes
  never occur inside a UTF-8 character), a leading UTF-8 byte order mark removed."""
  return re.split(rb'\r\n|\r|\n', text.removeprefix(b'\xef\xbb\xbf'))
