"""The user's own task files: formats, label sets, and bad input named by file:line."""

import bz2
import gzip
import json
import lzma
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import user_task_files

from bertjax import paths
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import user_data
from bertjax.finetune.tasks import user_formats
from bertjax.finetune.tasks import user_labels
from bertjax.finetune.tasks import user_tasks
from bertjax.text import tokenizer
from configs import finetune as finetune_config

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture
def tok(minilm_dir):
  return tokenizer.FullTokenizer(minilm_dir / 'vocab.txt', do_lower_case=True)


_data = user_task_files.data_config


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
  # Compressed, each is read decompressed, its format from the name under .gz/.bz2/.xz.
  for ext, compress in (('csv.gz', gzip.compress), ('tsv.bz2', bz2.compress),
                        ('jsonl.xz', lzma.compress)):
    packed = tmp_path / f'd.{ext}'
    packed.write_bytes(compress((tmp_path / f'd.{ext.partition(".")[0]}').read_bytes()))
    assert user_formats.extension_format(packed) == ext.partition('.')[0]
    examples = user_data.read_texts(packed, fields=('text',), label_field='label')[0]
    assert [(e.text_a, e.label) for e in examples] == rows


def test_pairs_numbers_as_labels_and_label_order(tmp_path):
  path = tmp_path / 'p.jsonl'
  path.write_text(''.join(json.dumps({'q': f'q{i}', 'a': f'a{i}', 'y': y}) + '\n'
                          for i, y in enumerate([10, 2, 2.0, 10])))
  examples, _ = user_data.read_texts(path, fields=('q', 'a'), label_field='y')
  assert [(e.text_a, e.text_b) for e in examples][0] == ('q0', 'a0')
  assert user_labels.labels_of(examples) == ('2', '10')  # Numeric strings sorted by value.
  values, _ = user_data.read_texts(path, fields=('q', 'a'), label_field='y', regression=True)
  assert [e.label for e in values] == [10.0, 2.0, 2.0, 10.0]


def test_a_label_cut_short_in_the_last_row_is_warned_of(tmp_path, caplog):
  """Matrix pass of 2026-12-02: a CSV cut inside its last row's label (`pos` -> `po`) trained
  three classes with an INFO line only."""
  rows = ''.join(f'text {i},{"pos" if i % 2 else "neg"}\n' for i in range(8))
  (tmp_path / 'cut.csv').write_text('text,label\n' + rows + 'text 8,po')
  examples, _ = user_data.read_texts(tmp_path / 'cut.csv', fields=('text',), label_field='label')
  assert user_labels.labels_of(examples) == ('neg', 'po', 'pos')  # Still a label of its own.
  assert [r.getMessage() for r in caplog.records if r.levelname == 'WARNING'] == [
      "label 'po' is given once (cut.csv:10) and begins label 'pos' (4 examples): a row cut "
      "short (a file copied in part?); fix that row, or go on if 'po' is a label of its own"]
  caplog.clear()
  (tmp_path / 'fine.csv').write_text('text,label\n' + rows + 'text 8,1\ntext 9,10\n')
  examples, _ = user_data.read_texts(tmp_path / 'fine.csv', fields=('text',), label_field='label')
  user_labels.labels_of(examples)  # A number, or a label given twice: nothing said.
  assert not [r for r in caplog.records if r.levelname == 'WARNING']


@pytest.mark.parametrize('name,content,message', [
    ('x.csv', 'text,label\nfine,pos\n,neg\n', None),  # Training: counted skip.
    ('x.csv', 'text,label\nfine,pos\n"ok",\n', None),
    # A trained run's predict cannot take another text_fields (RUN_FIELDS): the fix says so.
    ('x.csv', 'body,label\nfine,pos\n', r"x.csv:2: no field 'text'; the row has 'body', 'label'. "
     r'A new run: set config.data.text_fields / label_field to the names in your file; a '
     r"trained run \(resume, eval, predict\) reads the names it was trained with: rename the "
     r"file's fields to them.$"),
    ('x.jsonl', 'text,label\nfine,pos\n', 'the extension says JSON lines'),
    ('x.csv', '{"text": "a", "label": "b"}\n', 'the extension says CSV but the line is JSON'),
    ('x.tsv', 'text,label\nfine,pos\n', 'looks like CSV'),
    ('x.csv', 'text\tlabel\nfine\tpos\n', 'looks like TSV'),
    ('x.csv', 'text,label\nfine,pos,extra\n', r'x.csv:2: 3 columns where the header has 2'),
    # Session 54's pass: a row short of a value was told to quote its separators.
    ('x.csv', 'text,label\nfine\n', r'x.csv:2: 1 column where the header has 2 \(text, label\): '
     r'write one value per column, separated by commas\.'),
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


def test_a_wrong_format_value_is_named_not_the_files_extension(tmp_path):
  """Pass S: --config.data.format=xlsx on a .csv said 'cannot tell the format from the extension
  .csv' (the extension is fine; the value is wrong)."""
  path = tmp_path / 'x.csv'
  path.write_text('text,label\nfine,pos\n')
  with pytest.raises(ValueError, match=rf"^config.data.format='xlsx' cannot read {path}: set it "
                     r"to one of csv, tsv, jsonl, or to '' to go by the extension.$"):
    user_formats.format_of(path, 'xlsx')
  assert user_formats.format_of(path, 'tsv') == 'tsv'  # A format given wins over the name.


def test_missing_and_non_utf8_files(tmp_path):
  with pytest.raises(FileNotFoundError, match='does not exist'):
    user_data.read_texts(tmp_path / 'none.csv', fields=('text',), label_field='label')
  with pytest.raises(IsADirectoryError, match=f'^{tmp_path} is a folder: config.data.train_file '):
    user_data.read_texts(tmp_path, fields=('text',), label_field='label')  # Said 'does not exist'.
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
  assert user_labels.tags_of(sentences) == ('DT', 'NN', 'VBZ')
  (tmp_path / 't.jsonl').write_text(json.dumps({'tokens': ['a', 'b'], 'tags': ['S-X', 'O']})
                                    + '\n' + json.dumps({'tokens': ['c'], 'tags': ['O', 'O']}))
  with pytest.raises(ValueError, match=r't.jsonl:2: 1 tokens but 2 tags'):
    user_data.read_tagged(tmp_path / 't.jsonl')


def test_tag_sets_and_schemes():
  iob = [user_data.Sentence(('a', 'b'), ('B-X', 'O'))]
  assert user_labels.tags_of(iob) == ('O', 'B-X')
  iobes = [user_data.Sentence(('a', 'b', 'c'), ('B-X', 'E-X', 'S-Y'))]
  # Every prefix in use is added for every type: I-? none; B, E, S for X and Y.
  assert user_labels.tags_of(iobes) == ('B-X', 'E-X', 'S-X', 'B-Y', 'E-Y', 'S-Y')
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


def test_csv_fields_holding_a_form_feed_or_line_separators_are_read(tmp_path):
  path = tmp_path / 'ff.csv'
  path.write_bytes('\ufefftext,label\r\n"page\x0cbreak",pos\r\nnext\x0cpage,neg\r\n'
                   'a\u2028b\u0085c,pos\r\n"two\r\nlines",neg\r\n'.encode('utf-8'))
  examples, _ = user_data.read_texts(path, fields=('text',), label_field='label')
  assert [(e.text_a, e.label) for e in examples] == [
      ('page\x0cbreak', 'pos'), ('next\x0cpage', 'neg'), ('a\u2028b\u0085c', 'pos'),
      ('two\r\nlines', 'neg')]
  assert [e.guid for e in examples] == ['ff.csv:2', 'ff.csv:3', 'ff.csv:4', 'ff.csv:6']


def test_jsonl_with_a_bom_and_a_raw_u2028_in_a_string(tmp_path):
  path = tmp_path / 'u.jsonl'
  path.write_bytes(('\ufeff{"text": "one\u2028line", "label": "a"}\n'
                    '{"text": "next\u0085line\u2029end", "label": "b"}\n').encode('utf-8'))
  examples, _ = user_data.read_texts(path, fields=('text',), label_field='label')
  assert [(e.text_a, e.label, e.guid) for e in examples] == [
      ('one\u2028line', 'a', 'u.jsonl:1'), ('next\u0085line\u2029end', 'b', 'u.jsonl:2')]


@pytest.mark.parametrize('value,kind', [(5, 'number'), (['a'], 'list'), ({'a': 1}, 'object'),
                                        (True, 'boolean')])
def test_a_text_field_that_is_not_a_string_is_an_error(tmp_path, value, kind):
  path = tmp_path / 'n.jsonl'
  path.write_text(json.dumps({'text': 'ok', 'label': 'a'}) + '\n'
                  + json.dumps({'text': value, 'label': 'b'}) + '\n')
  with pytest.raises(ValueError, match=rf"n.jsonl:2: field 'text' is a {kind} .*, not a text: "
                                       'write it as a JSON string'):
    user_data.read_texts(path, fields=('text',), label_field='label')


def test_one_number_spelled_two_ways_as_labels_is_refused(tmp_path):
  path = tmp_path / 'l.csv'
  path.write_text('text,label\na,1\nb,0\nc,1.0\n')
  with pytest.raises(ValueError, match=r"l.csv:4: label '1.0' is the number that line 2 writes "
                                       r"'1': they would be two classes; write every one of "
                                       r"them '1'"):
    user_data.read_texts(path, fields=('text',), label_field='label')
  path.write_text('text,label\na,1\nb,0\nc,1\nd,10\n')  # One spelling each: read as given.
  examples, _ = user_data.read_texts(path, fields=('text',), label_field='label')
  assert user_labels.labels_of(examples) == ('0', '1', '10')
  values, _ = user_data.read_texts(tmp_path / 'l.csv', fields=('text',), label_field='label',
                                   regression=True)
  assert [e.label for e in values] == [1.0, 0.0, 1.0, 10.0]


def test_an_eval_label_spelled_otherwise_than_in_training_says_how_training_writes_it(
    tmp_path):
  (tmp_path / 'train.csv').write_text('text,label\na,0\nb,1\n')
  (tmp_path / 'eval.csv').write_text('text,label\na,0\nc,1.0\n')
  task = registry.get_task('classification', _data(train_file=str(tmp_path / 'train.csv'),
                                                   eval_file=str(tmp_path / 'eval.csv')))
  with pytest.raises(ValueError, match=r"eval.csv:3: validation label '1.0' never occurs .* "
                                       r"write it '1' as training does"):
    task.read('validation')


def test_a_number_spelled_two_ways_in_two_files_is_refused_as_in_one(tmp_path):
  """train_file=a.csv,b.csv, a.csv writing 1/0 and b.csv (a pandas export) 1.0/0.0, made a
  4-way head ('0', '0.0', '1', '1.0'): each file was checked alone."""
  (tmp_path / 'a.csv').write_text('text,label\n' + 'good,1\nbad,0\n' * 10)
  (tmp_path / 'b.csv').write_text('text,label\n' + 'nice,1.0\nawful,0.0\n' * 10)
  (tmp_path / 'one.csv').write_text('text,label\ngood,1\nbad,0\nok,1\nnice,1.0\n')
  (tmp_path / 'e.csv').write_text('text,label\ngreat,1\npoor,0\n')
  message = ("{}: label '1.0' is the number that {} writes '1': they would be two classes; "
             "write every one of them '1'")
  with pytest.raises(ValueError, match=message.format('one.csv:5', 'line 2')):
    registry.get_task('classification', _data(train_file=str(tmp_path / 'one.csv'),
                                              eval_file=str(tmp_path / 'e.csv')))
  both = f'{tmp_path / "a.csv"},{tmp_path / "b.csv"}'
  with pytest.raises(ValueError, match=message.format('b.csv:2', 'a.csv:2')):
    registry.get_task('classification', _data(train_file=both, eval_file=str(tmp_path / 'e.csv')))
  # Eval held out of the training files: what is left for training, in the split's order.
  with pytest.raises(ValueError, match=r"[ab]\.csv:\d+: label '.+' is the number that "
                                       r"[ab]\.csv:\d+ writes '.+': they would be two classes"):
    registry.get_task('classification', _data(train_file=both))
  # Eval files are held to training's spelling, whichever of them writes it otherwise.
  task = registry.get_task('classification', _data(
      train_file=str(tmp_path / 'a.csv'), eval_file=f'{tmp_path / "e.csv"},{tmp_path / "b.csv"}'))
  assert task.labels == ('0', '1')
  with pytest.raises(ValueError, match=r"b.csv:2: validation label '1.0' never occurs .* "
                                       r"write it '1' as training does"):
    task.read('validation')


def test_a_file_named_with_a_comma_is_one_file(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  rows = ''.join(f'text {i},{"ab"[i % 2]}\n' for i in range(10))
  (tmp_path / 'my,data.csv').write_text('text,label\n' + rows)
  (tmp_path / 'eval,set.csv').write_text('text,label\nx,a\ny,b\n')
  data = paths.absolute_config(_data(train_file='my,data.csv', eval_file='eval,set.csv'))
  assert data.train_file == str(tmp_path / 'my,data.csv')
  task = registry.get_task('classification', data)
  train, _ = task.read('train')
  held_out, _ = task.read('validation')
  assert len(train) == 10 and train[0].guid == 'my,data.csv:2'
  assert [e.guid for e in held_out] == ['eval,set.csv:2', 'eval,set.csv:3']


def test_a_conll_line_with_other_columns_than_the_file_is_an_error(tmp_path):
  path = tmp_path / 'x.conll'
  path.write_text('John NNP B-NP B-PER\nlives VBZ B-VP O\n\nParis NNP B-NP I-NP B-LOC\n')
  with pytest.raises(ValueError, match=r"x.conll:4: 5 columns where line 1 has 4 \('Paris NNP "
                                       r"B-NP I-NP B-LOC'\): every word line needs the same "
                                       r'columns; fix the line'):
    user_data.read_tagged(path)
  path.write_text('John\tB-PER\nNew York\tB-LOC\n')  # TSV: a space is no column separator.
  assert user_data.read_tagged(path, fmt='tsv')[0][0].words == ('John', 'New York')
  path.write_text('John\tB-PER\nParis\tB\tB-LOC\n')
  with pytest.raises(ValueError, match=r'x.conll:2: 3 columns where line 1 has 2'):
    user_data.read_tagged(path, fmt='tsv')
  # Columns are split at spaces and tabs only: a no-break space is part of a word.
  path.write_text('10\u00a0000 CD O\nParis NNP B-LOC\n')
  assert user_data.read_tagged(path)[0][0].words == ('10\u00a0000', 'Paris')


def test_a_conll_line_holding_u2028_stays_one_line(tmp_path):
  path = tmp_path / 'u.conll'
  path.write_bytes('\ufeff-DOCSTART- -X- O\n\nJohn B-PER\nli\x0cves O\n'.encode('utf-8'))
  sentences, _ = user_data.read_tagged(path)
  assert sentences == [user_data.Sentence(('John', 'li\x0cves'), ('B-PER', 'O'))]


def test_mixed_chunk_and_plain_tags_are_an_error_unless_plain(tmp_path):
  path = tmp_path / 'm.conll'
  path.write_text('John B-PER\nSmith I-PER\nParis LOC\nis O\n')
  with pytest.raises(ValueError, match=r"m.conll:3: tag 'LOC' is not O or a chunk tag, but line "
                                       r"1 has the chunk tag 'B-PER': use one tag scheme in a "
                                       r'file, or set config.data.tag_scheme=plain'):
    user_data.read_tagged(path)
  sentences, _ = user_data.read_tagged(path, tag_scheme='plain')
  assert sentences[0].tags == ('B-PER', 'I-PER', 'LOC', 'O')
  (tmp_path / 'm.jsonl').write_text(json.dumps({'tokens': ['a', 'b'], 'tags': ['B-X', 'Y']}))
  with pytest.raises(ValueError, match=r"m.jsonl:1: tag 'Y' is not O or a chunk tag"):
    user_data.read_tagged(tmp_path / 'm.jsonl')
  (tmp_path / 'm.jsonl').write_text(json.dumps({'tokens': ['a', 'b'], 'tags': ['O', None]}))
  with pytest.raises(ValueError, match=r'm.jsonl:1: tags\[1\] is null, not a tag'):
    user_data.read_tagged(tmp_path / 'm.jsonl')
  (tmp_path / 'm.jsonl').write_text(json.dumps({'tokens': ['a', 1990], 'tags': ['O', 'O']}))
  with pytest.raises(ValueError, match=r'm.jsonl:1: tokens\[1\] is a number \(1990\), not a '
                                       'word'):
    user_data.read_tagged(tmp_path / 'm.jsonl')


def test_a_tagging_task_with_an_extra_column_in_eval_is_refused(tmp_path):
  (tmp_path / 'train.conll').write_text('John NNP B-PER\nlives VBZ O\n\nParis NNP B-LOC\n')
  (tmp_path / 'eval.conll').write_text('Mary NNP B-PER\n\nRome NNP B-LOC extra\n')
  data = finetune_config.get_config('task=tagging').data
  with data.unlocked():
    data.train_file, data.eval_file = str(tmp_path / 'train.conll'), str(tmp_path / 'eval.conll')
  task = registry.get_task('tagging', data)
  assert task.main_metric == 'f1'
  with pytest.raises(ValueError, match=r'eval.conll:3: 4 columns where line 1 has 3'):
    task.read('validation')


def test_a_csv_field_longer_than_the_csv_modules_default_limit_is_read(tmp_path):
  document = 'word ' * 60000  # 300 KB: csv's default limit is 128 KB.
  (tmp_path / 'train.csv').write_text(f'text,label\n"{document}",long\nshort,short\n')
  (tmp_path / 'eval.csv').write_text('text,label\nshort,short\n')
  task = registry.get_task('classification', _data(train_file=str(tmp_path / 'train.csv'),
                                                   eval_file=str(tmp_path / 'eval.csv')))
  examples, _ = task.read('train')
  assert sorted(len(e.text_a) for e in examples) == [5, len(document.strip())]


def test_a_jsonl_row_naming_a_key_twice_is_refused(tmp_path):
  path = tmp_path / 'd.jsonl'
  path.write_text('{"review": "fine", "sentiment": "positive"}\n'
                  '{"review": "dull", "sentiment": "positive", "sentiment": "negative"}\n')
  with pytest.raises(ValueError, match=r"d.jsonl:2: the key 'sentiment' is written twice in one "
                                       r'object: write each field once\.$'):
    user_formats.read_records(path)


@pytest.mark.parametrize('value,kind', [(['negative'], 'list'), ({'name': 'negative'}, 'object')])
def test_a_label_that_is_a_list_or_object_is_refused(tmp_path, value, kind):
  path = tmp_path / 'l.jsonl'
  path.write_text(json.dumps({'text': 'ok', 'label': 'positive'}) + '\n'
                  + json.dumps({'text': 'bad', 'label': value}) + '\n')
  with pytest.raises(ValueError, match=rf'l.jsonl:2: the label is a {kind} \(.*\), not a single '
                                       'value: write it as a JSON string or number'):
    user_data.read_texts(path, fields=('text',), label_field='label')


def test_number_boolean_and_null_labels_read_as_before(tmp_path):
  path = tmp_path / 'l.jsonl'
  path.write_text(''.join(json.dumps({'text': f't{i}', 'label': y}) + '\n'
                          for i, y in enumerate([3, 2.5, True, None, 'x'])))
  examples, skipped = user_data.read_texts(path, fields=('text',), label_field='label')
  assert [e.label for e in examples] == ['3', '2.5', 'true', 'x']
  assert skipped == {'empty_label': 1}


def test_nan_and_inf_labels_sort_as_text_whatever_the_input_order():
  def examples(labels):
    return [user_data.Example(f'x:{i}', 't', None, y) for i, y in enumerate(labels)]
  one = ['nan', '10', 'a', 'inf', '2', '0', '-inf']
  assert (user_labels.labels_of(examples(one)) == user_labels.labels_of(examples(reversed(one)))
          == user_labels.labels_of(tuple(examples(sorted(one))))
          == ('0', '2', '10', '-inf', 'a', 'inf', 'nan'))


def test_a_nan_label_sorts_alike_under_every_hash_seed():
  # A set's order of strings follows the hash seed: NaN, comparing false both ways, let it through.
  code = ('from bertjax.finetune.tasks import user_data, user_labels\n'
          "print(user_labels.labels_of([user_data.Example('x', 't', None, y) "
          "for y in ('0', 'nan', '1', '2')]))")
  orders = {subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                           check=True, cwd=REPO, env={**os.environ, 'PYTHONHASHSEED': str(seed)}
                           ).stdout.strip() for seed in range(6)}
  assert orders == {"('0', '1', '2', 'nan')"}


def test_a_file_named_twice_in_a_setting_is_read_once(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  for name in ('train.csv', 'train2.csv'):
    (tmp_path / name).write_text('text,label\na,x\nb,y\n')
  (tmp_path / 'link.csv').symlink_to(tmp_path / 'train.csv')
  assert user_tasks.expand('train*.csv,train.csv', 'train_file') == ['train.csv', 'train2.csv']
  assert user_tasks.expand('./train.csv,train.csv,link.csv,train2.csv', 'train_file') == [
      './train.csv', 'train2.csv']
  task = registry.get_task('classification', _data(train_file='train.csv,./train.csv,link.csv',
                                                   eval_file='train2.csv'))
  assert [e.guid for e in task.read('train')[0]] == ['train.csv:2', 'train.csv:3']


def test_a_tsv_row_with_too_many_columns_says_a_tab_is_no_part_of_a_field(tmp_path):
  (tmp_path / 'x.tsv').write_text('text\tlabel\nfine\tpos\nhas\ta tab\tneg\n')
  with pytest.raises(ValueError, match=r'x.tsv:3: 3 columns where the header has 2 \(text, label\)'
                                       r': a field may not hold a tab: replace it with a space, or '
                                       r'write the file as CSV with quoted fields\.$'):
    user_formats.read_records(tmp_path / 'x.tsv')
  (tmp_path / 'x.csv').write_text('text,label\nfine,pos\nhas, a comma,neg\n')
  with pytest.raises(ValueError, match=r'x.csv:3: 3 columns where the header has 2 \(text, label\)'
                                       r': quote fields that hold the separator\.$'):
    user_formats.read_records(tmp_path / 'x.csv')


def _tagging_task(tmp_path, test_name, test_text):
  (tmp_path / 'train.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in (
      {'tokens': ['John', 'lives', 'in', 'New York'], 'tags': ['B-PER', 'O', 'O', 'B-LOC']},
      {'tokens': ['Mary', 'left'], 'tags': ['B-PER', 'O']})))
  (tmp_path / test_name).write_text(test_text)
  data = finetune_config.get_config('task=tagging').data
  with data.unlocked():
    data.train_file = data.eval_file = str(tmp_path / 'train.jsonl')  # No held-out split.
    data.test_file = str(tmp_path / test_name)
    data.max_seq_length = 16
  return registry.get_task('tagging', data)


def _test_predictions(task, tmp_path, tok):
  """The task's test_predictions.txt lines, every word predicted 'O' (the fake model)."""
  sentences, _ = task.read('test')
  features, meta = task.featurize(sentences, tok, is_training=False)
  outputs = np.zeros((*meta.word_index.shape, len(task.labels)), np.float32)
  outputs[..., task.labels.index('O')] = 1.0
  path = task.write_predictions(outputs, features, meta, sentences, 'test', str(tmp_path))
  return sentences, features, pathlib.Path(path).read_text().split('\n')


@pytest.mark.parametrize('name,text', [
    ('test.jsonl', json.dumps({'tokens': ['Anna', 'saw', 'New York'],
                               'tags': ['B-PER', 'O', 'B-LOC']}) + '\n'),
    ('test.conll', 'Anna B-PER\nsaw O\nNew_York B-LOC\n'),
])
def test_test_predictions_keep_the_gold_tags_the_test_file_has(tmp_path, name, text, tok):
  """conlleval scores test_predictions.txt against its gold column: the file's own tags, not
  'O' for every word; a JSONL token holding a space is written as one column."""
  task = _tagging_task(tmp_path, name, text)
  sentences, _, lines = _test_predictions(task, tmp_path, tok)
  assert sentences[0].tags == ('B-PER', 'O', 'B-LOC')
  assert lines == ['Anna B-PER O', 'saw O O', 'New_York B-LOC O', '', '']


@pytest.mark.parametrize('name,text', [
    ('test.jsonl', json.dumps({'tokens': ['Anna', 'saw', 'New York']}) + '\n'),
    ('test.conll', 'Anna\nsaw\nNew_York\n'),
])
def test_unlabelled_test_predictions_are_word_and_prediction(tmp_path, name, text, tok):
  """Without gold tags none is invented: `word pred` lines, and the words carry no weight."""
  task = _tagging_task(tmp_path, name, text)
  sentences, features, lines = _test_predictions(task, tmp_path, tok)
  assert sentences[0].tags == (None, None, None)
  assert not features['label_weights'].any()
  assert lines == ['Anna O', 'saw O', 'New_York O', '', '']
  # Eval data still needs its tags.
  with pytest.raises(ValueError, match=f"{name}:1: (no field 'tags'|'Anna' has no tag column)"):
    user_data.read_tagged(tmp_path / name, is_training=False)
