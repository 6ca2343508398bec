"""The export formats' names, as `bertjax.export --format` and a fine-tuning run's
config.export_format take them: one list of names, one reading of a comma list, one guess at
what an unknown name meant. Light (no numpy or JAX): config checks read it before JAX starts.

What each format holds is the kind table's (training/kinds.py, interop/bundle.FORMAT_KINDS).
"""

import difflib

# The export formats, in the order they are offered.
FORMATS = ('hf', 'tf1', 'saved_model', 'sentence_transformers', 'onnx')
# The names other tools give our formats.
_OTHER_NAMES = {'transformers': 'hf', 'huggingface': 'hf', 'safetensors': 'hf', 'pytorch': 'hf',
                'savedmodel': 'saved_model', 'tensorflow': 'saved_model',
                'sbert': 'sentence_transformers', 'sentence_transformer': 'sentence_transformers'}


def meant(name: str) -> str | None:
  """The format an unknown `name` most likely meant: another tool's name for one of ours, a
  spelling in another case or with hyphens, or a close misspelling; None when none is close."""
  plain = name.strip().lower().replace('-', '_')
  if plain in FORMATS or plain in _OTHER_NAMES:
    return _OTHER_NAMES.get(plain, plain)
  close = difflib.get_close_matches(plain, FORMATS, n=1)
  return close[0] if close else None


def names(value) -> tuple[str, ...]:
  """The names of a comma list (or a list of names), stripped, empty ones kept: config.export_format
  skips them ('' = none asked), --format refuses them (parse)."""
  listed = value.split(',') if isinstance(value, str) else list(value or ())
  return tuple(str(name).strip() for name in listed)


def parse(value) -> tuple[str, ...]:
  """The formats `value` names: one name, a comma list, or a list of names, each once. Raises
  with --format's words (the command's; keywords.named renames them for Python calls)."""
  if isinstance(value, bytes) or not isinstance(value, (str, list, tuple, type(None))):
    raise TypeError(f'--format={value!r}: pass a format name, a comma-separated str of them or '
                    f'a list of names ({", ".join(FORMATS)}).')
  formats = names(value)
  given = ','.join(formats)
  if '' in formats and len(formats) > 1:
    raise ValueError(f'--format={given} holds an empty name: name each format once, '
                     'comma-separated (--format=hf,saved_model).')
  elif not formats or '' in formats:
    raise ValueError(f'--format={given!r} names no format: pass one of {", ".join(FORMATS)}, or '
                     'several comma-separated (--format=hf,saved_model).')
  unknown = [fmt for fmt in formats if fmt not in FORMATS]
  if unknown:
    guess = meant(unknown[0])
    guess = f' (did you mean --format={guess}?)' if guess else ''
    raise ValueError(f'--format={unknown[0]!r} is unknown{guess}; valid: {", ".join(FORMATS)}.')
  twice = sorted({fmt for fmt in formats if formats.count(fmt) > 1})
  if twice:
    raise ValueError(f'--format={given} names {", ".join(twice)} twice: name each format once.')
  return formats
