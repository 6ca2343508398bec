"""The package's imports follow the flow: no module imports from a later stage than its own.

Stages, earliest first (README's layout): the base every stage uses (files, paths, console,
records), text, model, pre-training data, input, training, interop, the two training jobs, the
tools over trained models, main. An import of a later stage, at module level or inside a
function, is a climb back up the flow: the piece it needs belongs lower down.
"""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'bertjax'

STAGES = (
    ('console', 'command_flags', 'files', 'file_errors', 'object_store', 'paths', 'text_files',
     'processes', 'accelerators', 'malloc_tuning', 'records', 'compressed_text', 'remote_lock',
     'output_lock', 'keywords', 'format_names', 'job_lines', 'metric_direction', 'phase_plan',
     'mesh_rules', 'log_file'),
    ('text',),
    ('model',),
    ('pretraining_data', 'create_pretraining_data', 'learn_vocab'),
    ('input',),
    ('training',),
    ('interop',),
    ('pretrain_objective',),  # What the train step needs of pre-training: no TensorFlow.
    # config_check: the jobs' configs' values, at their start; job_config: their fields;
    # config_args: a job's command line, checked; config_files: its --config file, loaded.
    ('pretrain', 'pretrain_eval', 'finetune', 'config_check', 'config_check_jobs',
     'config_checker', 'job_config', 'config_args', 'config_files'),
    # inference: the one inference path that predict, embed and extract_features run.
    ('predict', 'predict_inputs', 'embed', 'embed_outputs', 'extract_features', 'export',
     'inference'),
    ('main',),
)
STAGE = {unit: i for i, units in enumerate(STAGES) for unit in units}


def _unit(module: str) -> str:
  """The stage unit of a bertjax module: its top-level package or module ('' for bertjax)."""
  parts = module.split('.')
  return parts[1] if len(parts) > 1 else ''


def _imports(path: pathlib.Path):
  """(line, imported bertjax module) for every import in the file, nested ones included."""
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('bertjax'):
      if node.module == 'bertjax':
        yield from ((node.lineno, f'bertjax.{alias.name}') for alias in node.names)
      else:
        yield node.lineno, node.module
    elif isinstance(node, ast.Import):
      yield from ((node.lineno, a.name) for a in node.names if a.name.startswith('bertjax.'))


def test_every_unit_has_a_stage():
  units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
           if (p.suffix == '.py' and p.stem != '__init__') or (p / '__init__.py').is_file()}
  assert units == set(STAGE), f'give each a stage: {sorted(units ^ set(STAGE))}'


def test_no_import_climbs_back_up_the_flow():
  climbs = []
  for path in sorted(PACKAGE.rglob('*.py')):
    module = '.'.join(path.relative_to(PACKAGE.parent).with_suffix('').parts)
    module = module.removesuffix('.__init__')
    # bertjax/__init__.py runs first, at every import of the package: the base stage's.
    here = _unit(module) if module != 'bertjax' else STAGES[0][0]
    for line, imported in _imports(path):
      there = _unit(imported)
      if there and here and STAGE[there] > STAGE[here]:
        climbs.append(f'{path.relative_to(PACKAGE.parent)}:{line} imports {imported} '
                      f'(stage {STAGE[there]} > {STAGE[here]})')
  assert not climbs, '\n'.join(climbs)


def test_the_check_can_see_a_climb(tmp_path):
  """The walk finds an import of a later stage (the test above could not fail otherwise)."""
  source = tmp_path / 'm.py'
  source.write_text('def f():\n  from bertjax.finetune import job\n')
  assert [imported for _, imported in _imports(source)] == ['bertjax.finetune']
  assert STAGE[_unit('bertjax.finetune.job')] > STAGE[_unit('bertjax.model.encoder')]
