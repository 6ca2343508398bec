"""One kind table (bertjax/training/kinds.py): no module outside it branches on a kind's name,
and every kind says, for every export format, how the format holds it or why it cannot."""

import ast
import importlib
import pathlib

import numpy as np
import pytest

from bertjax import predict
from bertjax import predict_inputs
from bertjax.interop import bundle
from bertjax.interop import saved_model
from bertjax.training import kinds

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / 'bertjax'
TABLE = 'bertjax/training/kinds.py'
HOLDERS = {'hf': kinds.Transformers, 'tf1': kinds.Tf1, 'saved_model': kinds.Served,
           'sentence_transformers': kinds.SentenceTransformers, 'onnx': kinds.Onnx}


def _is_kind(node) -> bool:
  """`kind` or `<anything>.kind`: what the comparisons below may not test by name."""
  return ((isinstance(node, ast.Name) and node.id == 'kind')
          or (isinstance(node, ast.Attribute) and node.attr == 'kind'))


def _names(value) -> set:
  """The kind names a compared value holds: a string, or a tuple / list / set of them."""
  if isinstance(value, str):
    return {value} & set(kinds.KINDS)
  if isinstance(value, (tuple, list, set, frozenset)):
    return {v for v in value if isinstance(v, str)} & set(kinds.KINDS)
  return set()


def _module_constants(tree) -> dict:
  """NAME -> value of the module's top-level `NAME = <literal>` assignments."""
  constants = {}
  for node in tree.body:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
        node.targets[0], ast.Name):
      try:
        constants[node.targets[0].id] = ast.literal_eval(node.value)
      except ValueError:
        pass
  return constants


def _imported_modules(tree) -> dict:
  """alias -> module name of `from bertjax.x import y [as z]` imports."""
  aliases = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or '').startswith('bertjax'):
      for alias in node.names:
        aliases[alias.asname or alias.name] = f'{node.module}.{alias.name}'
  return aliases


def _value(node, constants: dict, aliases: dict):
  """The compared value where it is a literal, a module constant or an imported module's."""
  try:
    return ast.literal_eval(node)
  except ValueError:
    pass
  if isinstance(node, ast.Name):
    return constants.get(node.id)
  if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
      and node.value.id in aliases):
    try:
      return getattr(importlib.import_module(aliases[node.value.id]), node.attr, None)
    except ImportError:
      return None
  return None


def kind_branches(path: pathlib.Path) -> list[str]:
  """'line: code' of every ==, !=, in, not in between a kind and kind names in the file."""
  source = path.read_text()
  tree = ast.parse(source)
  constants, aliases = _module_constants(tree), _imported_modules(tree)
  found = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Compare):
      continue
    operands = [node.left, *node.comparators]
    for op, left, right in zip(node.ops, operands[:-1], operands[1:], strict=True):
      if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
        continue
      for this, other in ((left, right), (right, left)):
        if _is_kind(this) and _names(_value(other, constants, aliases)):
          found.append(f'{node.lineno}: {ast.get_source_segment(source, node)}')
  return found


def _package_branches() -> dict:
  found = {}
  for path in sorted(PACKAGE.rglob('*.py')):
    name = str(path.relative_to(PACKAGE.parent))
    if name != TABLE and (branches := kind_branches(path)):
      found[name] = branches
  return found


def test_no_module_branches_on_a_kind_name_outside_the_table():
  found = _package_branches()
  assert not found, 'look the kind up in bertjax/training/kinds.py instead:\n' + '\n'.join(
      f'{name}:{line}' for name, lines in found.items() for line in lines)


def test_the_check_sees_every_form_of_a_kind_branch(tmp_path):
  """The walk finds a comparison by literal, by tuple, by module constant and through an
  imported module's constant (the test above could not fail otherwise), and lets other kinds
  of `kind` (a file's, a dtype's) and lookups in the table pass."""
  source = tmp_path / 'm.py'
  source.write_text(
      'from bertjax.interop import bundle as bundle_lib\n'
      "SCORED = 'regression'\n"
      'def f(kind, result, dtype, table):\n'
      "  a = kind == 'span'\n"
      "  b = result.kind in ('classification', 'tagging')\n"
      '  c = kind != SCORED\n'
      '  d = result.kind in bundle_lib.POOLED_HEADS\n'
      "  e = 'tagging' == kind\n"
      "  ok = (kind == 'Pooling', dtype.kind in 'fiu', kind in table, kind == 'tf1')\n")
  assert [line.split(':')[0] for line in kind_branches(source)] == ['4', '5', '6', '7', '8']


@pytest.mark.parametrize('name', sorted(kinds.KINDS))
def test_every_kind_says_how_each_format_holds_it_or_why_not(name):
  kind = kinds.get(name)
  for fmt, holder_type in HOLDERS.items():
    holder, why = kind.holder(fmt), kind.why_not(fmt)
    assert (holder is None) != (why is None), (name, fmt)
    if holder is None:
      assert isinstance(why, str) and len(why) > 20, (name, fmt, why)
      continue
    assert isinstance(holder, holder_type), (name, fmt)
    if fmt in ('hf', 'tf1'):  # The head's tensors are the kind's head parameters, all named.
      assert all(path.startswith(kind.head_params) for path in holder.head), (name, fmt)
      assert all(any(path.startswith(p) for path in holder.head) for p in kind.head_params)
      assert all(theirs for theirs, _ in holder.head.values())
    if fmt == 'hf':
      assert holder.architecture.startswith('Bert'), name
    if fmt == 'saved_model':
      assert holder.signature in saved_model._SIGNATURES and holder.outputs, name
  assert tuple(kinds.FORMATS) == tuple(HOLDERS)


@pytest.mark.parametrize('name', sorted(kinds.KINDS))
def test_a_task_kind_has_everything_fine_tuning_reads(name):
  kind = kinds.get(name)
  fields = (kind.head, kind.loss_weight, kind.decode, kind.outputs, kind.example)
  if kind.task:
    assert all(f is not None for f in fields) and kind.targets and kind.head_params, name
    assert (kind.predictions is not None) == (not kind.per_token), name
    assert kind.example in predict_inputs._READERS, name  # predict reads its examples.
    assert hasattr(predict.Predictor, f'_predict_{kind.example}') and kind.line_fields, name
  else:  # The encoder and pre-training's heads: pretrain.py's objective trains them.
    assert all(f is None for f in fields) and kind.predictions is None, name


def test_the_views_of_the_table_are_what_the_formats_held_before():
  assert bundle.FORMAT_KINDS == {
      'hf': ('encoder', 'pretraining', 'masked_lm', 'classification', 'regression', 'span',
             'tagging', 'multiple_choice'),
      'tf1': ('encoder', 'pretraining', 'masked_lm', 'classification', 'span'),
      'saved_model': ('encoder', 'pretraining', 'masked_lm', 'classification', 'regression',
                      'span', 'tagging'),
      'sentence_transformers': ('encoder', 'pretraining', 'masked_lm', 'classification',
                                'regression', 'multiple_choice'),
      # What the SavedModel holds, through transformers' classes (interop/onnx_export.py).
      'onnx': ('encoder', 'pretraining', 'masked_lm', 'classification', 'regression', 'span',
               'tagging')}
  assert bundle.POOLED_HEADS == ('classification', 'regression', 'multiple_choice')
  assert 'one vector per text' in bundle.cannot_hold('sentence_transformers', 'tagging')
  assert "bert's scripts have no regression head" in bundle.cannot_hold('tf1', 'regression')
  assert 'pooler' in bundle.cannot_hold('hf', 'classification', 'mean')
  assert bundle.cannot_hold('saved_model', 'classification', 'mean') is None


@pytest.mark.parametrize('fmt, tensors, want', [
    ('hf', {'cls.predictions.bias', 'cls.seq_relationship.weight'}, 'pretraining'),
    ('hf', {'cls.predictions.bias'}, 'masked_lm'),
    ('hf', {'cls.seq_relationship.weight'}, 'encoder'),  # NSP alone is no pre-training head.
    ('tf1', {'cls/seq_relationship/output_bias', 'cls/predictions/output_bias'}, 'pretraining'),
    ('tf1', {'cls/predictions/output_bias'}, 'masked_lm'),
    ('tf1', {'cls/squad/output_weights', 'cls/squad/output_bias'}, 'span'),
    ('tf1', {'output_weights', 'output_bias'}, 'classification'),
    ('tf1', {'bert/pooler/dense/kernel'}, 'encoder'),
])
def test_a_checkpoint_is_told_its_kind_by_its_heads_tensors(fmt, tensors, want):
  assert kinds.told_by(tensors, fmt) == want


def test_predictions_rows_per_kind():
  logits_NxC = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]], np.float32)
  rows = kinds.get('classification').predictions(('a', 'b', 'c'), logits_NxC, logits=True,
                                                 digits=None)
  assert [r['label'] for r in rows] == ['b', 'a']
  assert rows[0]['logits'] == {'a': 0.0, 'b': 2.0, 'c': 0.0}
  np.testing.assert_allclose(sum(rows[0]['probabilities'].values()), 1.0)
  short = kinds.get('multiple_choice').predictions((), logits_NxC, logits=False, digits=2)
  assert short[0] == {'choice': 1, 'probabilities': [0.11, 0.79, 0.11]}
  assert kinds.get('regression').predictions((), logits_NxC[:, :1], logits=True, digits=2) == [
      {'value': 0.0}, {'value': 1.0}]


@pytest.mark.parametrize('kind', ['encoder', 'pretraining', 'no_such_kind'])
def test_predict_refuses_a_kind_without_task_examples(kind):
  with pytest.raises(ValueError, match=f"predict does not handle kind '{kind}'"):
    predict_inputs.example('input 1', 'a text', kind, ('a', 'b'), {}, None)


def test_predict_reads_each_example_form_by_its_kind():
  def read(kind, line):
    return predict_inputs.example('input 1', line, kind, ('x', 'y'), {}, None)
  for kind in ('classification', 'regression'):
    assert (read(kind, 'a ||| b').text_a, read(kind, 'a ||| b').text_b) == ('a', 'b'), kind
  assert read('span', 'who ||| a context').question_text == 'who'
  assert read('tagging', 'who ||| a context').words == ('who', '|||', 'a', 'context')
  assert read('multiple_choice', 'who ||| a ||| b').choices == ('a', 'b')
