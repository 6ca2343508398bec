"""A job's config from Python (bertjax/job_config.py): that job's, and only the fields it reads.
Fields added inside config.unlocked() (a notebook's cell, a copied config file) were ignored
without a word; FIELDS restates configs/' fields, held equal to them here."""

import ast
import pathlib

import main_test
import pytest

from bertjax import config_args
from bertjax import embed
from bertjax import job_config
from bertjax import pretrain
from bertjax.finetune import job
from configs import embed as embed_config
from configs import finetune as finetune_config
from configs import pretrain as pretrain_config


def _fields(config) -> set:
  return set(job_config.field_paths(config))


def test_the_fields_table_is_the_config_files_fields():
  pre = [pretrain_config.get_config(f'size={size}') for size in pretrain_config.RECIPES]
  pre.append(pretrain_config.get_config('size=base,phase2_fraction=0.1'))
  fine = [finetune_config.get_config(f'task={task}') for task in finetune_config.TASKS]
  for job_name, configs in (('pretrain', pre), ('finetune', fine),
                            ('embed', [embed_config.get_config()])):
    for config in configs:
      assert _fields(config) == job_config.FIELDS[job_name], job_name
      job_config.check_fields(config)


@pytest.mark.parametrize('job_name, path, value, advice', [
    ('pretrain', 'learning_rate', 3e-4, 'the pretrain config has config.optimizer.learning_rate: '
     'set that.'),
    ('pretrain', 'lr', 3e-4, 'the pretrain config has config.optimizer.learning_rate: set that.'),
    ('finetune', 'data.text_field', 'review', 'the finetune config has config.data.text_fields: '
     'set that.'),
    ('finetune', 'warmup_proportion', 0.1, 'the finetune config has '
     'config.optimizer.warmup_proportion: set that.'),
    ('finetune', 'batch_size', 16, 'the finetune config has config.global_batch_size: set that.'),
    ('pretrain', 'optimizer.warmup_proportion', 0.1, 'the pretrain config has '
     'config.optimizer.warmup_steps: set that.'),
    ('pretrain', 'wandb_project', 'x', 'drop it (configs/pretrain.py lists the fields, each with '
     'its meaning).'),
    ('embed', 'model.dtype', 'bfloat16', 'the embed config has config.dtype: set that.'),
])
def test_a_field_added_inside_unlocked_is_refused_before_anything_runs(tmp_path, job_name, path,
                                                                       value, advice):
  """Notebook pass (session 34), 4: `with config.unlocked(): config.learning_rate = 3e-4`
  trained at the config's own rate, without a word."""
  config = {'pretrain': lambda: pretrain_config.get_config('size=tiny'),
            'finetune': lambda: finetune_config.get_config('task=bbc'),
            'embed': embed_config.get_config}[job_name]()
  with config.unlocked():
    section, _, name = path.rpartition('.')
    if section and section not in config:
      config[section] = type(config)()
    (config[section] if section else config)[name] = value
  run = {'pretrain': pretrain.train_and_evaluate, 'finetune': job.train_and_evaluate,
         'embed': embed.run}[job_name]
  with pytest.raises(ValueError) as raised:
    run(config, tmp_path / 'run')
  article = 'an' if job_name == 'embed' else 'a'
  assert str(raised.value) == (
      f'config.{path} is not a field of {article} {job_name} config, and no part of bertjax '
      f'reads it (added inside config.unlocked(), it would be ignored); {advice}')
  assert list(tmp_path.iterdir()) == []


def test_a_config_read_back_from_a_runs_config_json_is_refused():
  """What a run records beside its settings (labels, digests) is no setting: a config rebuilt
  from config.json would have its labels ignored."""
  config = finetune_config.get_config('task=bbc')
  with config.unlocked():
    config.labels = ['b', 'a']
  with pytest.raises(ValueError, match=r"^config.labels is what a finetune run records in its "
                     r"config.json \(what it read and found\), not a setting: build the config "
                     r"with configs/finetune.py's get_config\(...\), not from a run's "
                     r'config.json.'):
    job_config.check_fields(config)


def test_a_copied_config_file_with_a_field_of_its_own_is_refused_by_the_command(tmp_path):
  """The command line: a config file copied and given a field of its own (in get_config)."""
  copy = tmp_path / 'mine.py'
  copy.write_text(f"import sys\nsys.path.insert(0, {str(main_test.REPO)!r})\n"
                  'from configs import pretrain\n\n\ndef get_config(arg=None):\n'
                  '  config = pretrain.get_config(arg)\n  with config.unlocked():\n'
                  '    config.lr = 1e-3\n  return config\n')
  done = main_test.run_main(tmp_path, f'--config={copy}:size=tiny', f'--workdir={tmp_path}/w')
  assert done.returncode == main_test.console.REFUSED_EXIT, done.stderr
  assert done.stderr.strip().splitlines()[0] == (
      'error: config.lr is not a field of a pretrain config, and no part of bertjax reads it '
      '(added inside config.unlocked(), it would be ignored); the pretrain config has '
      'config.optimizer.learning_rate: set that.'), done.stderr
  assert not (tmp_path / 'w').exists()


def test_the_python_entry_points_refuse_another_jobs_config_and_take_a_path(tmp_path):
  """Notebook pass (session 34), 9 and 10: a pathlib workdir was a TypeError from a regex; a
  pre-training config given to the fine-tuning job an AttributeError ('task'), a dict another;
  a fine-tuning config given to pre-training left its lock behind."""
  pre, fine = pretrain_config.get_config('size=tiny'), finetune_config.get_config('task=bbc')
  with pytest.raises(ValueError, match=r"^config.job='pretrain': not a finetune config, which "
                     r'bertjax.finetune.job.train_and_evaluate runs; pass it to '
                     r"bertjax.pretrain.train_and_evaluate, or build one with configs/finetune.py"):
    job.train_and_evaluate(pre, tmp_path / 'a')
  with pytest.raises(ValueError, match=r"^config.job='finetune': not a pretrain config"):
    pretrain.train_and_evaluate(fine, tmp_path / 'b')
  with pytest.raises(TypeError, match=r'^config is a dict, not an ml_collections ConfigDict: '
                     r"build one with configs/pretrain.py's get_config"):
    pretrain.train_and_evaluate(pre.to_dict(), tmp_path / 'c')
  for workdir in (None, ''):
    with pytest.raises(ValueError, match=r"^workdir=(None|''): pass the run's folder"):
      job.train_and_evaluate(fine, workdir)
  assert list(tmp_path.iterdir()) == []
  # A pathlib.Path goes through to the checks after the workdir (here: a key bbc never reads).
  fine.data.train_file = 'mine.csv'
  with pytest.raises(ValueError, match="config.data.train_file='.*mine.csv' is not read by"):
    job.train_and_evaluate(fine, tmp_path / 'run')


def test_the_launchers_refuse_a_copied_config_files_field_before_booking(tmp_path):
  """config_args.check_args: what launch/tpu_pod.py and gke_jobset.py check before booking."""
  copy = tmp_path / 'mine.py'
  copy.write_text(f"import sys\nsys.path.insert(0, {str(main_test.REPO)!r})\n"
                  'from configs import finetune\n\n\ndef get_config(arg=None):\n'
                  '  config = finetune.get_config(arg)\n  with config.unlocked():\n'
                  '    config.data.num_train_epochs = 5\n  return config\n')
  with pytest.raises(ValueError, match=r'^config.data.num_train_epochs is not a field of a '
                     r'finetune config, .* the finetune config has config.num_epochs: set that.'):
    config_args.check_args([f'--config={copy}:task=mrpc'])


def test_another_jobs_config_is_named_by_its_job_before_its_fields():
  """Checked fields first, a fine-tuning config set to job=embed was said as 'config.checkpoint.
  best_metric is not a field of an embed config'."""
  config = finetune_config.get_config('task=mrpc')
  config.job = 'embed'
  with pytest.raises(ValueError, match=r"^config.job='embed': but the config is not an embed "
                     r'config \(it has no sentences field\); load configs/embed.py'):
    job_config.check_for(config, 'embed')


# The modules that run each job, and the names their run config goes by there.
# Every module of the fine-tuning job, so that a field recorded by a module split off later
# (run_data's held-out digests) is still found.
_JOB_SOURCES = {'pretrain': ('bertjax/pretrain.py',),
                'finetune': tuple(sorted(
                    str(p.relative_to(pathlib.Path(__file__).resolve().parent.parent))
                    for p in (pathlib.Path(__file__).resolve().parent.parent / 'bertjax' /
                              'finetune').glob('*.py'))),
                'embed': ('bertjax/embed.py',)}


def _config_fields_set(path: pathlib.Path):
  """(line, dotted field) of every `config.X = ...` / `cfg.data.X = ...` in the file."""
  for node in ast.walk(ast.parse(path.read_text())):
    targets = node.targets if isinstance(node, ast.Assign) else (
        [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
    for target in targets:
      parts = []
      while isinstance(target, ast.Attribute):
        parts.insert(0, target.attr)
        target = target.value
      if parts and isinstance(target, ast.Name) and target.id in ('config', 'cfg'):
        yield node.lineno, '.'.join(parts)


def test_every_field_a_job_sets_is_a_setting_or_listed_as_recorded():
  """What a run records in config.json beside its settings (its labels, digests, ...) is refused
  as a setting by name (job_config.RECORDED): a field a job starts to record without listing it
  there would be taken for a user's typo by the next run that reads the config back."""
  root = pathlib.Path(__file__).resolve().parent.parent
  unlisted, recorded = [], set()
  for job_name, sources in _JOB_SOURCES.items():
    for source in sources:
      for line, field in _config_fields_set(root / source):
        recorded |= {field} & job_config.RECORDED
        known = job_config.FIELDS[job_name] | job_config.RECORDED
        if field not in known and not any(f.startswith(f'{field}.') for f in known):  # A section
          unlisted.append(f'{source}:{line} sets config.{field}')
  assert not unlisted, '\n'.join(unlisted)
  assert recorded == job_config.RECORDED  # Nothing listed that no job records.


def test_the_walk_sees_a_field_set(tmp_path):
  source = tmp_path / 'm.py'
  source.write_text('def f(cfg):\n  cfg.data.new_digest = 1\n  x.y = 2\n')
  assert list(_config_fields_set(source)) == [(2, 'data.new_digest')]
