"""predict's input lines and JSON fields, read as the user wrote them (no model needed)."""

import json
import re

import ml_collections
import pytest

from bertjax import predict_inputs
from bertjax import text_files


def _reader(kind, labels=('neg', 'pos'), **data):
  """predict_inputs.example for a run of `kind` (no model needed): reader(index, item)."""
  data = ml_collections.ConfigDict({'text_fields': 'text', **data})
  return lambda index, item: predict_inputs.example(f'input {index + 1}', item, kind,
                                                     tuple(labels), data)


def _examples(reader, path):
  inputs = predict_inputs.read_inputs(text_files.read_text_lines(path), str(path))
  return [reader(i, x) for i, x in enumerate(inputs)]


def test_a_line_holding_u2028_or_a_form_feed_is_one_input(tmp_path):
  path = tmp_path / 'in.txt'
  path.write_text('first\u2028half\nsecond\x0cpart\nthird\u0085\x1cend\n', encoding='utf-8')
  examples = _examples(_reader('classification'), path)
  assert [e.text_a for e in examples] == ['first\u2028half', 'second\x0cpart',
                                          'third\u0085\x1cend']


def test_jsonl_with_a_bom_and_a_raw_u2028_inside_a_string(tmp_path):
  path = tmp_path / 'in.jsonl'
  lines = ['{"text": "a\u2028b"}', json.dumps({'text': 'plain'})]
  path.write_bytes(('\ufeff' + '\n'.join(lines) + '\n').encode('utf-8'))
  examples = _examples(_reader('classification'), path)
  assert [e.text_a for e in examples] == ['a\u2028b', 'plain']
  # A BOM left on the first line by a caller is no part of the input either.
  assert predict_inputs.read_inputs(['\ufeff{"text": "x"}'], 'in') == [{'text': 'x'}]


def test_a_bom_opening_a_later_line_is_no_part_of_it(tmp_path):
  # Files each written with a BOM and joined with cat: the second's JSON line was read as raw
  # text (its syntax classified, its tokens tagged), without a word.
  first, second = tmp_path / 'a.jsonl', tmp_path / 'b.jsonl'
  first.write_bytes('\ufeff{"text": "one"}\n'.encode())
  second.write_bytes('\ufeff{"text": "two"}\n\ufeff[{"text": "three"}]\n'.encode())
  joined = tmp_path / 'joined.jsonl'
  joined.write_bytes(first.read_bytes() + second.read_bytes())
  lines = text_files.read_text_lines(joined)
  with pytest.raises(ValueError, match=rf'^{joined}:3 is a JSON array'):
    predict_inputs.read_inputs(lines, str(joined))
  assert predict_inputs.read_inputs(lines[:2], str(joined)) == [{'text': 'one'}, {'text': 'two'}]
  assert predict_inputs.line_input(' \ufeff {"tokens": ["a"]}', 'in') == {'tokens': ['a']}
  assert predict_inputs.line_input('\ufeffplain text', 'in') == '\ufeffplain text'  # Raw: as is.


def test_blank_lines_stay_an_error_naming_the_line():
  with pytest.raises(ValueError, match=r'in.txt:2 is empty: one input per line'):
    predict_inputs.read_inputs(['a', '  ', 'b'], 'in.txt')
  assert predict_inputs.read_inputs(['a', 'b', '', '\r\n'], 'in.txt') == ['a', 'b']  # The end's.


@pytest.mark.parametrize('item,message', [
    ({'text': None}, r"input 3: field 'text' is null: give its text as a JSON string"),
    ({'text': 5}, r"input 3: field 'text' is a number \(5\), not a string"),
    ({'text': ['a', 'b']}, r"input 3: field 'text' is a list \(\[\"a\", \"b\"\]\), not a str"),
    ({'text': True}, r"input 3: field 'text' is a boolean"),
    ({'text': ' '}, r"input 3: field 'text' is empty"),
    # A second text under a pair's name is read (session 36: it was ignored without a word).
    ({'text': 'a', 'text_b': 7}, r"input 3: field 'text_b' is a number \(7\), not a string"),
    ({'text': 'a', 'label': 7}, None),  # Not a text field: ignored.
])
def test_text_fields_must_be_strings(item, message):
  reader = _reader('classification')
  if message is None:
    assert reader(2, item).text_a == 'a'
    return
  with pytest.raises(ValueError, match=message):
    reader(2, item)


def test_pair_and_span_fields_are_checked_too():
  pair = _reader('classification', text_fields='q,a')
  with pytest.raises(ValueError, match=r"input 1: field 'a' is a number"):
    pair(0, {'q': 'x', 'a': 3})
  assert pair(0, {'q': 'x', 'a': None}).text_b is None
  span = _reader('span', labels=())
  with pytest.raises(ValueError, match=r"input 1: field 'context' is null"):
    span(0, {'question': 'q?', 'context': None})
  with pytest.raises(ValueError, match=r"input 1 has no field 'question'"):
    span(0, {'context': 'c'})
  choice = _reader('multiple_choice')
  with pytest.raises(ValueError, match=r"input 1: field 'choices' must be a JSON list of str"):
    choice(0, {'context': 'c', 'choices': 'ab'})


def test_a_second_text_under_a_pairs_name_is_read_not_dropped():
  """Hostile pass of session 36, 4: {"text": ..., "text_b": ...} to a one-text model predicted
  the first text alone, as if the second were not there."""
  one = lambda item: predict_inputs.example('input 1', item, 'classification', ('neg', 'pos'),  # noqa: E731
                                            ml_collections.ConfigDict({'text_fields': 'text'}),
                                            text_pairs=False)
  for item in ({'text': 'great film', 'text_b': 'awful'},
               {'text': 'great film', 'sentence2': 'awful'}):
    with pytest.raises(ValueError, match=r'input 1: this model reads one text but was given two'):
      one(item)
  assert one({'text': 'great film', 'text_b': None}).text_b is None
  pair = _reader('classification')
  example = pair(0, {'text': 'a', 'text_b': 'b'})
  assert (example.text_a, example.text_b) == ('a', 'b')


def test_tagger_tokens_a_string_is_split_on_whitespace_and_a_list_must_hold_words():
  tagger = _reader('tagging', labels=('O', 'B-LOC'))
  sentence = tagger(0, {'tokens': 'john  lives in\tparis'})
  assert sentence.words == ('john', 'lives', 'in', 'paris') and len(sentence.tags) == 4
  assert tagger(0, {'tokens': ['a', 'b']}).words == ('a', 'b')
  with pytest.raises(ValueError, match=r'input 1: tokens\[1\] is 2, not a word'):
    tagger(0, {'tokens': ['a', 2]})
  with pytest.raises(ValueError, match=r"input 1: field 'tokens' is a number"):
    tagger(0, {'tokens': 3})
  with pytest.raises(ValueError, match=r"input 1 has no field 'tokens'"):
    tagger(0, {'words': ['a']})


NO_PIECES = ['\x00\x00\x00', '\x01\x02\x7f', '\u200b\u200b']  # Nothing the tokenizer keeps.


@pytest.fixture(scope='module')
def tokenizer():
  from bertjax.pretraining_data import embedded  # pylint: disable=g-import-not-at-top
  from bertjax.text import vocab_files  # pylint: disable=g-import-not-at-top
  return vocab_files.for_model(str(embedded.vocab_path()), True)


@pytest.mark.parametrize('text', NO_PIECES)
def test_a_line_without_wordpieces_is_refused_as_a_blank_line_is(tokenizer, text):
  """Each got a label, the empty input's probabilities, while blank lines were refused."""
  assert [tokenizer.tokenize(t) for t in NO_PIECES] == [[], [], []]
  with pytest.raises(ValueError, match=f'^in.txt:2 is empty: {re.escape(repr(text))} holds no '
                     r'wordpieces \(the tokenizer drops .*\): one input per line \(remove it\)'):
    predict_inputs.read_inputs(['a', text, 'b'], 'in.txt', tokenizer)
  assert predict_inputs.read_inputs(['a', text], 'in.txt') == ['a', text]  # No tokenizer given.
  # Python's inputs, JSON fields, a choice, a tagger's words and a pair's second text: where
  # example() reads them.
  for kind, item in (('classification', text), ('classification', {'text': text}),
                     ('multiple_choice', f'ctx ||| a ||| b ||| {text}'),
                     ('tagging', {'tokens': [text]})):
    with pytest.raises(ValueError, match=f'^input 3 is empty: {re.escape(repr(text))} holds no '
                       'wordpieces .*: every input needs its text'):
      predict_inputs.example('input 3', item, kind, ('0', '1', '2'), ml_collections.ConfigDict(
          {'text_fields': 'text'}), tokenizer=tokenizer)
  with pytest.raises(ValueError, match=f'^input 1 is empty: {re.escape(repr(text))}'):
    predict_inputs.example('input 1', f'a ||| {text}', 'classification', ('0', '1'),
                           ml_collections.ConfigDict({'text_fields': 'text'}), True, tokenizer)


def test_a_text_with_some_wordpieces_is_read_and_a_span_context_without_any_too(tokenizer):
  data = ml_collections.ConfigDict({'text_fields': 'text'})
  assert predict_inputs.example('input 1', '\x00a\u200b', 'classification', ('0', '1'), data,
                                tokenizer=tokenizer).text_a == '\x00a\u200b'
  assert predict_inputs.example('input 1', '\U0001F600', 'classification', ('0', '1'), data,
                                tokenizer=tokenizer).text_a == '\U0001F600'  # [UNK] is read.
  assert predict_inputs.example('input 1', 'a \u200b', 'tagging', ('O',), data,
                                tokenizer=tokenizer).words == ('a', '\u200b')
  # A span's context without pieces is answered null (predict_api_test), not refused.
  span = predict_inputs.example('input 1', 'who ||| \u200b', 'span', (), data, tokenizer=tokenizer)
  assert span.question_text == 'who'
  assert predict_inputs.read_inputs(['who ||| \u200b'], 'in.txt', tokenizer) == ['who ||| \u200b']


def test_a_json_mistake_says_how_the_line_was_read_and_what_is_read():
  with pytest.raises(ValueError, match=r'^in.txt:1: not valid JSON \(.*\): a line that starts '
                     r'with \{ is read as a JSON object .* pass it as \{"text": "..."\}\.$'):
    predict_inputs.read_inputs(['{spoiler} great film'], 'in.txt')
  # A raw tab inside a string (session 36: said 'Invalid control character at', no fix).
  with pytest.raises(ValueError, match=re.escape(
      'in.txt:1: not valid JSON (Invalid control character (a raw tab or line break inside a '
      'string: write it as \\t or \\n) at column 12)')):
    predict_inputs.read_inputs(['{"text": "a\tb"}'], 'in.txt')
  with pytest.raises(ValueError, match=r"^input 1 has none of the fields it reads \(.*review, "
                     r"sentence, sentence1, sentence2, text, text_a, text_b\): it has \['body'\]"):
    predict_inputs.example('input 1', {'body': 'x'}, 'classification', ('0', '1'),
                           ml_collections.ConfigDict({'text_fields': 'review'}))


def test_a_question_without_wordpieces_is_refused(tokenizer):
  """A question of a zero-width space only was answered with full confidence ('Eve', 0.97):
  the model read no question at all (a context without pieces is answered null instead)."""
  data = ml_collections.ConfigDict({'text_fields': 'text'})
  for item in ('\u200b ||| Eve lives in Berlin.', {'question': '\x01', 'context': 'Eve lives.'}):
    with pytest.raises(ValueError, match=r"^input 1 is empty: '.*' holds no wordpieces"):
      predict_inputs.example('input 1', item, 'span', (), data, tokenizer=tokenizer)


def test_a_json_array_line_is_refused_and_the_fix_names_the_models_fields():
  """A line `[{"text": ...}, {"text": ...}]` was one raw text (one label for two inputs); a
  tagger told to put raw text starting with { in {"text": ...} then lacked 'tokens'."""
  with pytest.raises(ValueError, match=r'^in.txt:2 is a JSON array, but predict reads one input '
                     r'per line \(JSON lines: one object per line, e.g. `jq -c ".\[\]" FILE`\)'):
    predict_inputs.read_inputs(['a', '[{"text": "good"}, {"text": "bad"}]'], 'in.txt')
  assert predict_inputs.read_inputs(['[1] see the note', '[x'], 'in.txt') == [
      '[1] see the note', '[x']  # Raw text that starts with [.
  for kind, pairs, fields in (('tagging', None, '{"tokens": ["...", "..."]}'),
                              ('span', None, '{"question": "...", "context": "..."}'),
                              ('classification', True, '{"text_a": "...", "text_b": "..."}'),
                              ('classification', False, '{"text": "..."}')):
    with pytest.raises(ValueError, match=re.escape(f'pass it as {fields}.')):
      predict_inputs.read_inputs(['{ Alice } visited Paris'], 'in.txt', None, kind, pairs)


def test_a_text_under_a_name_the_model_does_not_read_is_refused():
  """{"review": "good film", "text": "awful"} was predicted on "good film" alone."""
  reader = _reader('classification', text_fields='review')
  for item, unread in (({'review': 'good film', 'text': 'awful awful'}, 'text'),
                       ({'review': 'good film', 'sentence1': 'x', 'id': 3}, 'sentence1')):
    with pytest.raises(ValueError, match=rf'^input 1 holds texts the model would not read '
                       rf'\({unread} beside review\): give each text under one name'):
      reader(0, item)
  assert reader(0, {'review': 'good film', 'id': 3, 'text': None}).text_a == 'good film'
  pair = _reader('classification', text_fields='first,second')
  with pytest.raises(ValueError, match=r'\(text_b beside first, second\)'):
    pair(0, {'first': 'a', 'second': 'b', 'text_b': 'c'})


def test_a_line_json_cannot_read_is_raw_text_or_refused_by_its_line():
  # RecursionError and Python's digits limit escaped as tracebacks (or as advice to call
  # sys.set_int_max_str_digits); a lone surrogate failed at the output, after all the work.
  assert predict_inputs.line_input('[' * 1000 + ' great film', 'in:1') == '[' * 1000 + ' great film'
  assert predict_inputs.line_input('[' + '9' * 5000 + ' is big', 'in:1').endswith(' is big')
  for line, why in (('{"a":' * 100000 + '1' + '}' * 100000, 'nested too deep to read'),
                    ('{"n": ' + '9' * 5000 + '}', 'a number too long to read')):
    with pytest.raises(ValueError, match=rf'^in:1: not valid JSON \({why}\): a line that starts '):
      predict_inputs.line_input(line, 'in:1')
  with pytest.raises(ValueError, match=r'^in:1: its JSON holds \\ud800, half of a UTF-16 '
                     'surrogate pair and no character'):
    predict_inputs.line_input('{"tokens": ["John", "\\ud800x", "Paris"]}', 'in:1')
  assert predict_inputs.line_input('{"text": "\\ud83d\\ude00 ok"}', 'in:1') == {'text': '😀 ok'}
