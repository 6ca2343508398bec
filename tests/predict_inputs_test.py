"""predict's input lines and JSON fields, read as the user wrote them (no model needed)."""

import json

import ml_collections
import pytest

from bertjax import paths
from bertjax import predict


def _predictor(kind, labels=('neg', 'pos'), **data):
  """A Predictor with no model: enough for read_inputs / _example."""
  predictor = object.__new__(predict.Predictor)
  predictor.kind, predictor.labels, predictor.run = kind, tuple(labels), {}
  predictor.data = ml_collections.ConfigDict({'text_fields': 'text', **data})
  return predictor


def _examples(predictor, path):
  inputs = predict.read_inputs(paths.read_text_lines(path), str(path))
  # pylint: disable-next=protected-access
  return [predictor._example(i, x) for i, x in enumerate(inputs)]


def test_a_line_holding_u2028_or_a_form_feed_is_one_input(tmp_path):
  path = tmp_path / 'in.txt'
  path.write_text('first\u2028half\nsecond\x0cpart\nthird\u0085\x1cend\n', encoding='utf-8')
  examples = _examples(_predictor('classification'), path)
  assert [e.text_a for e in examples] == ['first\u2028half', 'second\x0cpart',
                                          'third\u0085\x1cend']


def test_jsonl_with_a_bom_and_a_raw_u2028_inside_a_string(tmp_path):
  path = tmp_path / 'in.jsonl'
  lines = ['{"text": "a\u2028b"}', json.dumps({'text': 'plain'})]
  path.write_bytes(('\ufeff' + '\n'.join(lines) + '\n').encode('utf-8'))
  examples = _examples(_predictor('classification'), path)
  assert [e.text_a for e in examples] == ['a\u2028b', 'plain']
  # A BOM left on the first line by a caller is no part of the input either.
  assert predict.read_inputs(['\ufeff{"text": "x"}'], 'in') == [{'text': 'x'}]


def test_blank_lines_stay_an_error_naming_the_line():
  with pytest.raises(ValueError, match=r'in.txt:2 is empty: one input per line'):
    predict.read_inputs(['a', '  ', 'b'], 'in.txt')


@pytest.mark.parametrize('item,message', [
    ({'text': None}, r"input 3: field 'text' is null: give its text as a JSON string"),
    ({'text': 5}, r"input 3: field 'text' is a number \(5\), not a string"),
    ({'text': ['a', 'b']}, r"input 3: field 'text' is a list \(\[\"a\", \"b\"\]\), not a str"),
    ({'text': True}, r"input 3: field 'text' is a boolean"),
    ({'text': ' '}, r"input 3: field 'text' is empty"),
    ({'text': 'a', 'text_b': 7}, None),  # text_b is not a field of this model: ignored.
])
def test_text_fields_must_be_strings(item, message):
  predictor = _predictor('classification')
  if message is None:
    assert predictor._example(2, item).text_a == 'a'  # pylint: disable=protected-access
    return
  with pytest.raises(ValueError, match=message):
    predictor._example(2, item)  # pylint: disable=protected-access


def test_pair_and_span_fields_are_checked_too():
  pair = _predictor('classification', text_fields='q,a')
  with pytest.raises(ValueError, match=r"input 1: field 'a' is a number"):
    pair._example(0, {'q': 'x', 'a': 3})  # pylint: disable=protected-access
  assert pair._example(0, {'q': 'x', 'a': None}).text_b is None  # pylint: disable=protected-access
  span = _predictor('span', labels=())
  with pytest.raises(ValueError, match=r"input 1: field 'context' is null"):
    span._example(0, {'question': 'q?', 'context': None})  # pylint: disable=protected-access
  with pytest.raises(ValueError, match=r"input 1 has no field 'question'"):
    span._example(0, {'context': 'c'})  # pylint: disable=protected-access
  choice = _predictor('multiple_choice')
  with pytest.raises(ValueError, match=r"input 1: field 'choices' must be a JSON list of str"):
    choice._example(0, {'context': 'c', 'choices': 'ab'})  # pylint: disable=protected-access


def test_tagger_tokens_a_string_is_split_on_whitespace_and_a_list_must_hold_words():
  tagger = _predictor('tagging', labels=('O', 'B-LOC'))
  # pylint: disable-next=protected-access
  sentence = tagger._example(0, {'tokens': 'john  lives in\tparis'})
  assert sentence.words == ('john', 'lives', 'in', 'paris') and len(sentence.tags) == 4
  # pylint: disable-next=protected-access
  assert tagger._example(0, {'tokens': ['a', 'b']}).words == ('a', 'b')
  with pytest.raises(ValueError, match=r'input 1: tokens\[1\] is 2, not a word'):
    tagger._example(0, {'tokens': ['a', 2]})  # pylint: disable=protected-access
  with pytest.raises(ValueError, match=r"input 1: field 'tokens' is a number"):
    tagger._example(0, {'tokens': 3})  # pylint: disable=protected-access
  with pytest.raises(ValueError, match=r"input 1 has no field 'tokens'"):
    tagger._example(0, {'words': ['a']})  # pylint: disable=protected-access
