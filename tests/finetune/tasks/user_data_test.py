"""The user's own task files: formats, label sets, and bad input named by file:line."""

import json

import ml_collections
import pytest

from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import user_data
from bertjax.finetune.tasks import user_tasks
from configs import finetune as finetune_config


def _data(**fields):
  config = finetune_config.get_config('task=classification')
  data = ml_collections.ConfigDict(config.data.to_dict())
  for key, value in fields.items():
    data[key] = value
  return data


def test_csv_tsv_and_jsonl_read_alike(tmp_path):
  rows = [('a film, "quoted", with commas', 'pos'), ('dull', 'neg'), ('fine', 'pos')]
  (tmp_path / 'd.csv').write_text('text,label\n' + ''.join(
      '"{}",{}\n'.format(t.replace('"', '""'), y) for t, y in rows))
  (tmp_path / 'd.tsv').write_text('text\tlabel\n' + ''.join(f'{t}\t{y}\n' for t, y in rows))
  (tmp_path / 'd.jsonl').write_text(''.join(json.dumps({'text': t, 'label': y}) + '\n'
                                            for t, y in rows))
  read = [user_data.read_texts(tmp_path / f'd.{ext}', fields=('text',), label_field='label')[0]
          for ext in ('csv', 'tsv', 'jsonl')]
  assert [(e.text_a, e.label) for e in read[0]] == rows
  assert [(e.text_a, e.label) for e in read[1]] == rows
  assert [(e.text_a, e.label) for e in read[2]] == rows
  assert read[0][0].guid == 'd.csv:2'


def test_pairs_numbers_as_labels_and_label_order(tmp_path):
  path = tmp_path / 'p.jsonl'
  path.write_text(''.join(json.dumps({'q': f'q{i}', 'a': f'a{i}', 'y': y}) + '\n'
                          for i, y in enumerate([10, 2, 2.0, 10])))
  examples, _ = user_data.read_texts(path, fields=('q', 'a'), label_field='y')
  assert [(e.text_a, e.text_b) for e in examples][0] == ('q0', 'a0')
  assert user_data.labels_of(examples) == ('2', '10')  # Numeric strings sorted by value.
  values, _ = user_data.read_texts(path, fields=('q', 'a'), label_field='y', regression=True)
  assert [e.label for e in values] == [10.0, 2.0, 2.0, 10.0]


@pytest.mark.parametrize('name,content,message', [
    ('x.csv', 'text,label\nfine,pos\n,neg\n', None),  # Training: counted skip.
    ('x.csv', 'text,label\nfine,pos\n"ok",\n', None),
    ('x.csv', 'body,label\nfine,pos\n', r"x.csv:2: no field 'text'; the row has 'body', 'label'"),
    ('x.jsonl', 'text,label\nfine,pos\n', 'the extension says JSON lines'),
    ('x.csv', '{"text": "a", "label": "b"}\n', 'the extension says CSV but the line is JSON'),
    ('x.tsv', 'text,label\nfine,pos\n', 'looks like CSV'),
    ('x.csv', 'text\tlabel\nfine\tpos\n', 'looks like TSV'),
    ('x.csv', 'text,label\nfine,pos,extra\n', r'x.csv:2: 3 columns where the header has 2'),
    ('x.jsonl', '{"text": "a", "label": "b"}\n[1, 2]\n', r'x.jsonl:2: a JSON list'),
    ('x.jsonl', '{"text": "a", "label": "b"}\n{"text": \n', r'x.jsonl:2: not valid JSON'),
    ('x.xlsx', 'text,label\n', 'cannot tell the format'),
    ('x.csv', '', 'is empty'),
])
def test_bad_training_files(tmp_path, name, content, message):
  path = tmp_path / name
  path.write_text(content)
  if message is None:
    examples, skipped = user_data.read_texts(path, fields=('text',), label_field='label')
    assert len(examples) == 1 and sum(skipped.values()) == 1
    return
  with pytest.raises(ValueError, match=message):
    user_data.read_texts(path, fields=('text',), label_field='label')


def test_missing_and_non_utf8_files(tmp_path):
  with pytest.raises(FileNotFoundError, match='does not exist'):
    user_data.read_texts(tmp_path / 'none.csv', fields=('text',), label_field='label')
  (tmp_path / 'l1.csv').write_bytes('text,label\ncaf\xe9,x\n'.encode('latin-1'))
  with pytest.raises(ValueError, match='is not UTF-8 text'):
    user_data.read_texts(tmp_path / 'l1.csv', fields=('text',), label_field='label')


def test_empty_text_in_eval_is_an_error_with_file_and_line(tmp_path):
  (tmp_path / 'train.csv').write_text('text,label\na,x\nb,y\n')
  (tmp_path / 'eval.csv').write_text('text,label\na,x\n  ,y\n')
  task = registry.get_task('classification', _data(train_file=str(tmp_path / 'train.csv'),
                                                   eval_file=str(tmp_path / 'eval.csv')))
  with pytest.raises(ValueError, match=r"eval.csv:3: field 'text' is empty"):
    task.read('validation')


def test_eval_label_never_seen_in_training_lists_the_labels(tmp_path):
  (tmp_path / 'train.csv').write_text('text,label\na,sport\nb,tech\n')
  (tmp_path / 'eval.csv').write_text('text,label\na,sport\nc,politics\n')
  task = registry.get_task('classification', _data(train_file=str(tmp_path / 'train.csv'),
                                                   eval_file=str(tmp_path / 'eval.csv')))
  assert task.labels == ('sport', 'tech')
  with pytest.raises(ValueError, match=r"eval.csv:3: validation label 'politics' never occurs "
                                       r"in the training data, whose labels are \['sport', "
                                       r"'tech'\]"):
    task.read('validation')


def test_test_file_may_lack_labels_and_no_eval_file_holds_out_a_stratified_split(tmp_path):
  rows = ''.join(f'text {i},{"ab"[i % 2]}\n' for i in range(20))
  (tmp_path / 'train.csv').write_text('text,label\n' + rows)
  (tmp_path / 'test.csv').write_text('text\nunlabelled one\n')
  task = registry.get_task('classification', _data(train_file=str(tmp_path / 'train.csv'),
                                                   test_file=str(tmp_path / 'test.csv'),
                                                   eval_fraction=0.2))
  train, _ = task.read('train')
  held_out, _ = task.read('validation')
  assert len(train) == 16 and sorted(e.label for e in held_out) == ['a', 'a', 'b', 'b']
  assert not {e.guid for e in train} & {e.guid for e in held_out}
  test, _ = task.read('test')
  assert test[0].label is None and task.test_splits == ('test',)


def test_single_label_training_file_is_refused(tmp_path):
  (tmp_path / 'train.csv').write_text('text,label\n' + 'a,x\n' * 10)
  with pytest.raises(ValueError, match="every example has label 'x'"):
    registry.get_task('classification', _data(train_file=str(tmp_path / 'train.csv')))


def test_conll_columns_and_jsonl_tagging_with_any_tag_set(tmp_path):
  (tmp_path / 't.conll').write_text('-DOCSTART- -X- O\n\nThe DT x\ndog NN x\n\nRuns VBZ x\n')
  sentences, _ = user_data.read_tagged(tmp_path / 't.conll', tag_column=1)
  assert sentences == [user_data.Sentence(('The', 'dog'), ('DT', 'NN')),
                       user_data.Sentence(('Runs',), ('VBZ',))]
  assert user_data.tags_of(sentences) == ('DT', 'NN', 'VBZ')
  (tmp_path / 't.jsonl').write_text(json.dumps({'tokens': ['a', 'b'], 'tags': ['S-X', 'O']})
                                    + '\n' + json.dumps({'tokens': ['c'], 'tags': ['O', 'O']}))
  with pytest.raises(ValueError, match=r't.jsonl:2: 1 tokens but 2 tags'):
    user_data.read_tagged(tmp_path / 't.jsonl')


def test_tag_sets_and_schemes():
  iob = [user_data.Sentence(('a', 'b'), ('B-X', 'O'))]
  assert user_data.tags_of(iob) == ('O', 'B-X')
  iobes = [user_data.Sentence(('a', 'b', 'c'), ('B-X', 'E-X', 'S-Y'))]
  # Every prefix in use is added for every type: I-? none; B, E, S for X and Y.
  assert user_data.tags_of(iobes) == ('B-X', 'E-X', 'S-X', 'B-Y', 'E-Y', 'S-Y')
  data = _data(tag_scheme='auto')
  assert user_tasks.tag_scheme(data, ('O', 'B-X', 'I-X')) == 'chunks'
  assert user_tasks.tag_scheme(data, ('NN', 'VB')) == 'plain'
  with pytest.raises(ValueError, match='set tag_scheme=plain'):
    user_tasks.tag_scheme(_data(tag_scheme='iob2'), ('O', 'NN'))


def test_choices_rows_must_have_one_number_of_choices(tmp_path):
  path = tmp_path / 'mc.jsonl'
  path.write_text(json.dumps({'context': 'c', 'choices': ['a', 'b', 'c'], 'label': 1}) + '\n'
                  + json.dumps({'context': 'd', 'choices': ['a', 'b'], 'label': 0}) + '\n')
  with pytest.raises(ValueError, match=r'mc.jsonl:2: 2 choices, but line 1 has 3'):
    user_data.read_choices(path)
  path.write_text(json.dumps({'context': 'c', 'choices': ['a', 'b'], 'label': 2}) + '\n')
  with pytest.raises(ValueError, match=r'mc.jsonl:1: label 2 is not a choice index \(0..1\)'):
    user_data.read_choices(path)


def test_swag_csv_layout(tmp_path):
  header = 'video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,' \
           'ending3,label\n'
  path = tmp_path / 'swag.csv'
  path.write_text(header + 'v1,0,x,She opens the door.,She,gold,walks in.,eats it.,flies.,'
                  'sings.,0\n')
  questions, _ = user_data.read_swag(path)
  assert questions == [user_data.Choices('swag.csv:2', 'She opens the door.',
                                         ('She walks in.', 'She eats it.', 'She flies.',
                                          'She sings.'), 0)]
  path.write_text(header.replace(',ending3', ',ending_3') + 'v1,0,x,a,b,g,c,d,e,f,0\n')
  with pytest.raises(ValueError, match=r"swag.csv:2: no field 'ending3'"):
    user_data.read_swag(path)
