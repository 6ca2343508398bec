"""Every user-given path goes through bertjax.files: no other module of the package opens,
lists, stats, copies or moves a file with the OS, pathlib, glob or shutil.

A line that works on a purely local path of its own making (a temporary file, the package's
embedded corpus, /proc) says so with a `# local` comment, and that is the only way past this
test. TensorFlow's own file systems (tf.io.gfile, for the TFRecords tf.data reads) and orbax
are clients of their own and are not matched.
"""

import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'bertjax'
LAYER = {'files.py'}
FORBIDDEN = re.compile(
    r'(?<![\w.])open\(|\bpathlib\b|\bos\.path\.(exists|isdir|isfile|getsize|getmtime)\('
    r'|\bos\.(listdir|makedirs|mkdir|replace|rename|remove|unlink|scandir|walk|stat)\('
    r'|\bglob\.glob\(|\bshutil\.|(?<!files)\.(read_text|write_text|read_bytes|write_bytes|'
    r'iterdir|unlink|mkdir|rglob)\(')


_LAYER_CALL = re.compile(r'\b(files|files_lib|paths)\.\w+\(')


def offending_lines() -> list[str]:
  found = []
  for path in sorted(PACKAGE.rglob('*.py')):
    if path.name in LAYER:
      continue
    for number, line in enumerate(path.read_text(encoding='utf-8').splitlines(), 1):
      code = _LAYER_CALL.sub('', line.split('#', 1)[0])
      if FORBIDDEN.search(code) and '# local' not in line:
        found.append(f'{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}')
  return found


def test_no_file_access_outside_the_layer():
  found = offending_lines()
  assert not found, ('file access outside bertjax/files.py (use files.*, or mark a purely '
                     'local path with "# local: why"):\n' + '\n'.join(found))


def test_the_check_finds_what_it_forbids():
  for bad in ('with open(path) as f:', 'p = pathlib.Path(x)', 'os.makedirs(d)',
              'shutil.copy(a, b)', 'x.read_text()', 'glob.glob(p)', 'os.path.exists(p)'):
    assert FORBIDDEN.search(bad), bad
  for good in ('files.open(path)', 'files.read_text(p)', 'tf.io.gfile.exists(p)',
               'builtins.open(p)', 'files_lib.read_text(p)'):
    assert not FORBIDDEN.search(_LAYER_CALL.sub('', good)), good
