"""README's layout section names every package folder and module in the tree, and each module's
docstring opens with a line that says its concern; no two test modules share a file name."""

import ast
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = REPO / 'bertjax'


def _layout() -> str:
  readme = (REPO / 'README.md').read_text()
  start = readme.index('\n## Layout\n')
  return readme[start:readme.index('\n## ', start + 2)]


def _modules():
  for path in sorted(PACKAGE.rglob('*.py')):
    if path.name != '__init__.py' and 'corpus' not in path.parts:
      yield path


def test_the_layout_names_every_folder_and_module():
  layout = _layout()
  words = set(re.findall(r'[A-Za-z_0-9]+', layout))
  missing = []
  for folder in sorted(p for p in PACKAGE.iterdir() if (p / '__init__.py').is_file()):
    if f'bertjax/{folder.name}/' not in layout:
      missing.append(f'bertjax/{folder.name}/')
  for path in _modules():
    if path.stem not in words:
      missing.append(str(path.relative_to(REPO)))
  assert not missing, f'README.md ## Layout does not name: {missing}'


def test_every_module_says_its_concern_in_its_first_line():
  silent = [str(path.relative_to(REPO)) for path in [*_modules(), *PACKAGE.rglob('__init__.py')]
            if not (ast.get_docstring(ast.parse(path.read_text())) or '').strip()]
  assert not silent, f'no module docstring: {silent}'


def test_every_test_module_has_a_name_of_its_own():
  """pytest imports test modules by their file name (rootdir `tests` on the path, no packages):
  a second tests/*/x_test.py fails the whole file's collection in the suite's run."""
  names = {}
  for path in sorted((REPO / 'tests').rglob('*.py')):
    names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
  assert not {name: where for name, where in names.items() if len(where) > 1}
