"""Raw inputs (text lines, strings, JSON objects) -> the examples a kind's evaluation reads.

predict's line format: a line is raw text (`text`, `text_a ||| text_b`, `question ||| context`,
`context ||| choice ||| ...`, a tagger's words) or, starting with `{`, a JSON object with the
task's fields. Every error names the input (its line, or its index in a Python list) and the fix.
"""

import json

from bertjax import text_files
from bertjax.finetune.tasks import squad
from bertjax.finetune.tasks import user_data
from bertjax.training import kinds as kind_table


def read_inputs(lines, source: str, tokenizer=None, kind: str = '', text_pairs=None) -> list:
  """Inputs of predict's line format: JSON objects for lines starting with `{`, else raw text.

  `lines` are text_files.split_lines' (a U+2028 or form feed inside a line is part of it); a blank
  line is an error naming it, since every later output would be misaligned. With the model's
  `tokenizer`, so is a raw line that holds no wordpieces (example() checks JSON fields). `kind`
  and `text_pairs` (the run's) name the JSON fields to put raw text in where a line is refused.
  """
  inputs = []
  for number, line in enumerate(text_files.without_blank_end(lines), 1):
    line = line.rstrip('\r\n')
    if number == 1:
      line = line.removeprefix('\ufeff')
    if not line.strip():
      raise ValueError(f'{source}:{number} is empty: one input per line (remove blank lines).')
    item = line_input(line, f'{source}:{number}', kind, text_pairs)
    if tokenizer is not None and isinstance(item, str):
      check_wordpieces(line, f'{source}:{number}', tokenizer)
    inputs.append(item)
  return inputs


def line_input(line: str, where: str, kind: str = '', text_pairs=None):
  """One line of predict's format (the command's, or a string given to Predictor.predict: both
  read it alike) as its input: the JSON object of a line that starts with `{`, else the raw
  text. A line that is a JSON array is refused (JSON lines hold one object per line)."""
  # A byte-order mark opening any line is no text: files each written with one (Windows
  # editors, Excel's UTF-8) and joined with cat hold one at every later file's first line,
  # whose JSON was read as raw text and its syntax classified.
  stripped = line.lstrip().removeprefix('\ufeff').lstrip()
  if stripped.startswith('['):  # Valid JSON there is an array; else raw text that starts with [.
    # Not JSON, however it fails (nested past Python's recursion limit, or a number past its
    # digits limit, were tracebacks): raw text.
    try:
      json.loads(stripped)
      array = True
    except (ValueError, RecursionError):
      array = False
    if array:
      raise ValueError(f'{where} is a JSON array, but predict reads one input per line (JSON '
                       'lines: one object per line, e.g. `jq -c ".[]" FILE`); for raw text '
                       f'that is one, pass it as {raw_text_as_json(kind, text_pairs)}.')
  if not stripped.startswith('{'):
    return line
  try:
    item = json.loads(stripped)
  except (ValueError, RecursionError) as e:
    why = (text_files.json_error(e) if isinstance(e, json.JSONDecodeError) else
           'nested too deep to read' if isinstance(e, RecursionError) else
           'a number too long to read')
    raise ValueError(f'{where}: not valid JSON ({why}): a line that starts '
                     'with { is read as a JSON object of the task\'s fields, whole on its line '
                     '(JSON lines, not a JSON document spread over lines); for raw text that '
                     f'starts with {{, pass it as {raw_text_as_json(kind, text_pairs)}.') from None
  try:  # A lone surrogate (JSON's "\ud800") is no character: every output would fail to write.
    json.dumps(item, ensure_ascii=False).encode('utf-8')
  except UnicodeEncodeError as e:
    half = e.object[e.start:e.end].encode('unicode_escape').decode()
    raise ValueError(f'{where}: its JSON holds {half}, half of a UTF-16 surrogate pair and no '
                     'character: write the character itself (or its pair, e.g. '
                     '\\ud83d\\ude00).') from None
  return item


def raw_text_as_json(kind: str, text_pairs=None) -> str:
  """The JSON object a model of `kind` reads raw text from (a line that is raw text but reads
  as JSON goes in it)."""
  form = getattr(kind_table.KINDS.get(kind), 'example', None)
  return {'question': '{"question": "...", "context": "..."}',
          'words': '{"tokens": ["...", "..."]}',
          'choices': '{"context": "...", "choices": ["...", "..."]}'}.get(
              form, '{"text_a": "...", "text_b": "..."}' if text_pairs else '{"text": "..."}')


def example(where: str, item, kind: str, labels: tuple, data, text_pairs=None, tokenizer=None):
  """An input (a raw string or a dict of the task's fields), which errors name `where`
  (`file:line`, `input N`), as the example the eval of `kind` reads; `labels`, `data`
  (config.data) and `text_pairs` (None: either) are the run's.

  With the model's `tokenizer`, a text that holds no wordpieces (only control or zero-width
  characters) is refused as an empty one is: the model would read [CLS] [SEP] and its answer
  would be the empty input's, for every such line. A span model's context is not checked: one
  without pieces is answered null (nothing read, nothing claimed).
  """
  if isinstance(item, str):
    if not item.strip():
      raise ValueError(f'{where} is empty: every input needs its text.')
    parts = [p.strip() for p in item.split('|||')]
  elif isinstance(item, dict):
    parts = None
  else:
    name = type(item).__name__
    raise ValueError(f'{where} is {"an" if name[0] in "aeiou" else "a"} {name} '
                     f'({str(item)[:40]}): pass a string or a dict.')
  form = getattr(kind_table.KINDS.get(kind), 'example', None)
  if form not in _READERS:
    raise ValueError(f'predict does not handle kind {kind!r}.')
  read = _READERS[form](where, item, parts, labels, data, text_pairs)
  if tokenizer is not None:
    for text in _READ_TEXTS.get(form, lambda _: ())(read):
      if text is not None and _no_pieces(text, tokenizer):
        raise ValueError(f'{where} is empty: {_NO_PIECES.format(text[:40])}: every input needs '
                         'its text.')
  return read


_NO_PIECES = ('{!r} holds no wordpieces (the tokenizer drops control and zero-width '
              'characters)')


def check_wordpieces(text: str, where: str, tokenizer):
  """Refuses a line (`where`: file:line) that holds no wordpieces, only control or zero-width
  characters: the model would read [CLS] [SEP], the empty input, whatever the line held
  (predict, extract_features and embed alike)."""
  if _no_pieces(text, tokenizer):
    raise ValueError(f'{where} is empty: {_NO_PIECES.format(text[:40])}: one input per line '
                     '(remove it).')


def _no_pieces(text: str, tokenizer) -> bool:
  """Whether `text` yields no wordpieces. Only a text without a letter or digit is tokenized
  (one with a letter or digit always yields a piece, if only [UNK]): the inputs are tokenized
  again for their features."""
  return not any(c.isalnum() for c in text) and not tokenizer.tokenize(text)


def _texts(where, item, parts, labels, data, text_pairs):
  """A text or a pair (text_a, text_b): classification's and regression's examples."""
  del labels
  fields, names = user_data.text_fields(data.get('text_fields', 'text')), ()
  if parts is None:
    accepted = (fields, ('text_a', 'text_b'), ('text_a',), ('text',), ('sentence1', 'sentence2'),
                ('sentence',))
    for names in accepted:
      if names[0] in item:
        parts = [_string(where, item, names[0])]
        if len(names) > 1 and item.get(names[1]) is not None:
          parts.append(_string(where, item, names[1]))
        # A second text under another pair's name ({"text": ..., "text_b": ...}) is one, not
        # dropped: a one-text model refuses it below.
        second = [k for k in user_data.SECOND_TEXTS if k not in names and item.get(k) is not None]
        read = set(names[:len(parts)])
        if len(parts) == 1 and second:
          parts.append(_string(where, item, second[0]))
          read.add(second[0])
        # {"review": ..., "text": ...}: 'text' was dropped without a word.
        unread = sorted(({*sum(accepted, ()), *user_data.SECOND_TEXTS} - read) & {
            k for k, v in item.items() if v is not None})
        if unread:
          raise ValueError(f'{where} holds texts the model would not read ({", ".join(unread)} '
                           f'beside {", ".join(sorted(read))}): give each text under one name, '
                           f'as config.data.text_fields names them ({",".join(fields)}).')
        break
    else:
      known = sorted({name for names in accepted for name in names})
      raise ValueError(f'{where} has none of the fields it reads ({", ".join(known)}): it has '
                       f'{sorted(item)}.')
  if len(parts) > 2 or not all(parts):
    raise ValueError(f'{where}: expected `text` or `text_a ||| text_b`, got {item!r}.')
  if text_pairs and len(parts) == 1 and len(fields) == 2 and names == fields:
    raise ValueError(f'{where}: this model was fine-tuned on text pairs, and the second text is '
                     f'missing: no field {fields[1]!r} beside {names[0]!r} (it has '
                     f'{", ".join(sorted(item))}): name it as config.data.text_fields does '
                     f'({",".join(fields)}), or give `text_a ||| text_b`.')
  if text_pairs is not None and text_pairs != (len(parts) == 2):
    raise ValueError(
        f'{where}: this model was fine-tuned on text pairs: give `text_a ||| text_b`.'
        if text_pairs else f'{where}: this model reads one text but was given two (`|||` or a '
        'second field): give one; a text that holds `|||` goes as JSON {"text": ...}.')
  return user_data.Example(where, parts[0], parts[1] if len(parts) > 1 else None, None)


def _question(where, item, parts, labels, data, text_pairs):
  """A question and its context: a span model's example."""
  del labels, data, text_pairs
  if parts is None and 'question' not in item and isinstance(item.get('data'), list):
    raise ValueError(f'{where} is a SQuAD file ("data": its articles): predict reads one '
                     'question per line (`question ||| context`, or JSON question and context); '
                     'to answer a SQuAD file\'s questions, run python -m bertjax.main with the '
                     'run\'s --config, its --workdir, --config.mode=predict and '
                     '--config.data.predict_file=FILE.')
  if parts is None:
    parts = [_string(where, item, 'question'), _string(where, item, 'context')]
  if len(parts) != 2 or not all(parts):
    raise ValueError(f'{where}: a span model reads `question ||| context` (or JSON with '
                     f'question and context), got {str(item)[:80]!r}.')
  doc_tokens, _ = squad.split_paragraph(parts[1])
  return squad.Example(where, parts[0], doc_tokens, '', -1, -1, False, [])


def _words(where, item, parts, labels, data, text_pairs):
  """A sentence's words, without gold tags (None per word: nothing is scored)."""
  del labels, data, text_pairs
  words = item.split() if parts is not None else _tokens(where, item)
  if not words:
    raise ValueError(f'{where}: a tagger reads a line of words (or JSON with tokens).')
  return user_data.Sentence(tuple(words), (None,) * len(words))


def _choices(where, item, parts, labels, data, text_pairs):
  """A context and its choices, one per label (SWAG's sent1/sent2/endings, or context and
  choices)."""
  del data, text_pairs
  if parts is None:
    if 'sent1' in item:
      context = _string(where, item, 'sent1')
      start = _string(where, item, 'sent2', required=False)
      choices = [f'{start} {_string(where, item, f"ending{i}")}'.strip()
                 for i in range(len(labels))]
    else:
      context, choices = _string(where, item, 'context'), item.get('choices', [])
      if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise ValueError(f'{where}: field \'choices\' must be a JSON list of strings, got '
                         f'{json.dumps(choices)[:60]}.')
  else:
    context, choices = parts[0], parts[1:]
  if len(choices) != len(labels):
    raise ValueError(f'{where}: this model chooses among {len(labels)}: expected '
                     f'`context ||| choice` x {len(labels)} (or JSON context, choices), '
                     f'got {len(choices)} choices.')
  if not context.strip() or not all(c.strip() for c in choices):
    empty = 'its context' if not context.strip() else (
        f'choice {[c.strip() for c in choices].index("")}')
    raise ValueError(f'{where}: {empty} is empty: every input needs a context and '
                     f'{len(labels)} choices with text.')
  return user_data.Choices(where, context, tuple(choices), None)


# A kind's example form (training/kinds.py Kind.example) -> (where, item, parts: the raw
# string's `|||` parts or None for a dict, labels, data, text_pairs) -> the example.
_READERS = {'texts': _texts, 'question': _question, 'words': _words, 'choices': _choices}

# A form's example -> the texts the model reads, each of which needs a wordpiece (a tagger's
# words as one text: a word without pieces among others is read as [UNK]); a question, not its
# context: predict answers null for a context without pieces.
_READ_TEXTS = {'texts': lambda e: (e.text_a, e.text_b),
               'question': lambda e: (e.question_text,),
               'choices': lambda c: (c.context, *c.choices),
               'words': lambda s: (' '.join(s.words),)}


def _json_type(value) -> str:
  if isinstance(value, bool):
    return 'boolean'
  if isinstance(value, (int, float)):
    return 'number'
  return {list: 'list', dict: 'object', type(None): 'null'}.get(type(value), type(value).__name__)


def _string(where, item: dict, name: str, required: bool = True) -> str:
  """The text of JSON field `name`, or an error naming the input, the field and the fix."""
  if name not in item or item[name] is None:
    if not required:
      return ''
    if name not in item:
      raise ValueError(f'{where} has no field {name!r} (it has {sorted(item)}): add it.')
    raise ValueError(f'{where}: field {name!r} is null: give its text as a JSON string.')
  value = item[name]
  if not isinstance(value, str):
    raise ValueError(f'{where}: field {name!r} is a {_json_type(value)} '
                     f'({json.dumps(value)[:40]}), not a string: give its text as a JSON string.')
  if required and not value.strip():
    raise ValueError(f'{where}: field {name!r} is empty: every input needs its text.')
  return value


def _tokens(where, item: dict) -> list[str]:
  """A tagger's words: a JSON list of strings, or one string of words split on whitespace (as
  a raw line is)."""
  if 'tokens' not in item:
    raise ValueError(f'{where} has no field \'tokens\' (it has {sorted(item)}): a tagger reads '
                     'a line of words, or JSON with tokens.')
  tokens = item['tokens']
  if isinstance(tokens, str):
    return tokens.split()
  if not isinstance(tokens, list):
    raise ValueError(f'{where}: field \'tokens\' is a {_json_type(tokens)}, not a list of words: '
                     'give ["word", ...] or a string of words.')
  for i, token in enumerate(tokens):
    if not isinstance(token, str) or not token.strip():
      raise ValueError(f'{where}: tokens[{i}] is {json.dumps(token)[:40]}, not a word: every '
                       'token must be a non-empty JSON string.')
  return [t.strip() for t in tokens]
