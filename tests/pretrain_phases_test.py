"""The paper's two phases in one run: one schedule, one optimizer state, each phase's length.

A tiny model runs 12 steps: 9 at 32 tokens / 5 predictions, then 3 at 64 / 10 (phase2
fraction 0.25), on the embedded corpus made at both lengths; the eval at step 9 reads phase 1's
files, the one at step 12 phase 2's. Resuming inside phase 2 ends bit-identical. Every run here
builds its mesh over the first device only.
"""

import json
import re
import shutil

import jax
import log_records
import numpy as np
import pretrain_runs
import pytest

from bertjax import config_check
from bertjax import phase_plan
from bertjax import pretrain
from bertjax import pretrain_eval
from bertjax.input import input_pipeline
from bertjax.interop import init_from
from bertjax.pretraining_data import embedded
from bertjax.training import checkpoint_reader
from bertjax.training import optimizer
from bertjax.training import preemption
from bertjax.training import summaries
from configs import pretrain as pretrain_config

STEPS, BOUNDARY = 12, 9


# The subject is never sharding: the runs, the shared ones too, use the first device only.
pytestmark = pytest.mark.usefixtures('one_device_per_module')


def two_phase_config():
  cfg = pretrain_config.get_config(
      f'size=tiny,steps={STEPS},seq=32,batch=16,phase2_fraction=0.25,phase2_seq=64')
  assert cfg.phase2.max_predictions_per_seq == 2 * cfg.data.max_predictions_per_seq
  return pretrain_runs.set_fields(cfg, {
      'model.num_layers': 2, 'model.hidden_size': 64, 'model.num_heads': 2,
      'model.mlp_dim': 128, 'data.max_predictions_per_seq': 5,
      'phase2.max_predictions_per_seq': 10, 'data.dupe_factor': 1,
      'data.shuffle_window': 64, 'data.num_lanes': 4, 'checkpoint.every_steps': 5,
      'checkpoint.keep': 10, 'log_every_steps': 1, 'eval_every_steps': BOUNDARY,
      'max_eval_batches': 2, 'eval_batch_size': 16, 'optimizer.warmup_steps': 3,
      'checkpoint.keep_best': 1})


def scalars(workdir, tag) -> dict:
  return summaries.read_scalars(str(workdir), [tag])[tag]


@pytest.fixture(scope='module')
def two_phase(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('two_phase')
  cfg = two_phase_config()
  metrics = pretrain.train_and_evaluate(cfg, str(workdir))
  return cfg, workdir, metrics


def test_one_schedule_and_optimizer_state_run_through_both_phases(two_phase):
  cfg, workdir, _ = two_phase
  rates = scalars(workdir, 'train/learning_rate')
  schedule = optimizer.learning_rate_schedule(cfg.optimizer)
  assert sorted(rates) == list(range(1, STEPS + 1))
  # Every step's rate is the one schedule's (logged at step s: the rate of update s - 1).
  np.testing.assert_allclose([rates[s] for s in sorted(rates)],
                             [float(schedule(s - 1)) for s in sorted(rates)], rtol=1e-5)
  state = pretrain_runs.read_state(workdir, STEPS)
  assert int(state['step']) == STEPS
  counts = {int(x) for x in jax.tree.leaves(state['opt_state']) if np.ndim(x) == 0}
  assert counts == {STEPS}  # Adam's count too.
  losses = scalars(workdir, 'train/loss')
  # The loss goes on from where phase 1 left it (a fresh optimizer or model would not).
  assert losses[BOUNDARY + 1] < losses[1] - 0.3, losses
  assert abs(losses[BOUNDARY + 1] - losses[BOUNDARY]) < 0.3, losses


def test_phase_1s_last_step_is_timed_as_training_phase_2s_start_is_not(tmp_path):
  """Pass of 2026-12-01: phase 1's last step ran on the device while phase 2's pipeline started
  and its step compiled, all of which was left out of that step's window: 537 steps/s, 20
  steady. (An eval at the boundary read the step first: the fixture's run never showed it.)"""
  cfg = two_phase_config()
  cfg.eval_every_steps = 0
  pretrain.train_and_evaluate(cfg, str(tmp_path))
  rates = scalars(tmp_path, 'train/sequences_per_sec')
  assert rates[BOUNDARY] < 3 * max(rates[s] for s in range(2, BOUNDARY)), rates


def test_each_eval_reads_its_phase_files(two_phase):
  cfg, workdir, metrics = two_phase
  # Phase 2's in its own TensorBoard section (console pass of 2026-12-02: one curve of both).
  baselines = scalars(workdir, 'eval/unigram_baseline') | scalars(
      workdir, 'eval_phase2/unigram_baseline')
  assert sorted(scalars(workdir, 'eval/unigram_baseline')) == [BOUNDARY]
  assert sorted(baselines) == [BOUNDARY, STEPS]
  plan = pretrain.phases(cfg, str(workdir))
  assert [(p.first_step, p.end_step, p.max_seq_length) for p in plan] == [
      (0, BOUNDARY, 32), (BOUNDARY, STEPS, 64)]
  for phase, step in zip(plan, (BOUNDARY, STEPS), strict=True):
    dataset = input_pipeline.eval_dataset(
        phase.eval_files, global_batch_size=16, max_seq_length=phase.max_seq_length,
        max_predictions_per_seq=phase.max_predictions_per_seq, process_index=0,
        process_count=1)
    # Over the batches the accuracies see: max_eval_batches caps both.
    assert baselines[step] == pytest.approx(
        pretrain_eval.unigram_baseline(dataset.take(cfg.max_eval_batches), phase.eval_files),
        rel=1e-6)
    assert baselines[step] != pytest.approx(
        pretrain_eval.unigram_baseline(dataset, phase.eval_files), rel=1e-6)
  assert baselines[BOUNDARY] != baselines[STEPS]
  assert metrics['unigram_baseline'] == pytest.approx(baselines[STEPS], rel=1e-6)
  assert pretrain_runs.read_meta(workdir, STEPS)['examples_consumed'] == STEPS * 16


def test_the_best_checkpoint_is_phase_2s(two_phase):
  # Pass Y: phase 1's eval (other data, another unigram baseline) outranked phase 2's.
  _, workdir, _ = two_phase
  evals = {int(k): v['mlm_accuracy'] for k, v in json.loads(
      (workdir / 'eval_history.json').read_text()).items()}
  assert sorted(evals) == [BOUNDARY, STEPS] and evals[BOUNDARY] > evals[STEPS], evals
  assert checkpoint_reader.resolve_step(workdir, 'best') == STEPS
  ranking = pretrain_runs.read_meta(workdir, STEPS)['ranking']
  assert ranking['phase_start'] == BOUNDARY and 'phase_start' not in pretrain_runs.read_meta(
      workdir, BOUNDARY)['ranking']


def test_resume_inside_phase_2_is_bit_exact(two_phase, tmp_path):
  _, workdir, _ = two_phase
  resumed = tmp_path / 'resumed'
  shutil.copytree(workdir, resumed)
  shutil.rmtree(resumed / 'checkpoints' / str(STEPS))
  assert pretrain_runs.checkpoint_steps(resumed)[-1] == 10  # Inside phase 2 (steps 10..12).
  # Phase 1's files, never read again, moved away (freeing a bucket): the resume needed them.
  first = [p for p in (resumed / 'data').iterdir() if p.name.startswith(f'{embedded.NAME}-32-')]
  assert first
  for path in first:
    shutil.rmtree(path) if path.is_dir() else path.unlink()
  pretrain.train_and_evaluate(two_phase_config(), str(resumed))
  assert not [p for p in (resumed / 'data').iterdir() if p.name.startswith(  # Not made again.
      f'{embedded.NAME}-32-')]
  pretrain_runs.assert_equal_leaves(pretrain_runs.read_state(resumed, STEPS),
                                    pretrain_runs.read_state(workdir, STEPS))


def test_a_resumed_run_stopped_before_its_next_eval_ends_naming_its_last(two_phase, tmp_path,
                                                                         monkeypatch):
  """A resumed run that ran no eval of its own ended with no eval figures, its run's recorded
  eval (step 9's) unsaid; the summary says its step."""
  from bertjax.training import progress  # noqa: PLC0415
  _, workdir, _ = two_phase
  resumed = tmp_path / 'resumed'
  shutil.copytree(workdir, resumed)
  for step in (11, STEPS):
    shutil.rmtree(resumed / 'checkpoints' / str(step), ignore_errors=True)
  monkeypatch.setattr(preemption.Preemption, 'reached', lambda self, step: True)
  ended = []  # The summary's Outcome (a preempted one exits the process as it is said).
  monkeypatch.setattr(progress, 'summary', lambda job, seconds, outcome, *a, **k: ended.append(
      outcome))
  pretrain.train_and_evaluate(two_phase_config(), str(resumed))
  outcome, = ended
  history = json.loads((workdir / 'eval_history.json').read_text())
  assert (outcome.step, outcome.stopped.startswith('preempted'), outcome.eval_step) == (
      11, True, BOUNDARY)
  assert outcome.eval_metrics == pytest.approx(history[str(BOUNDARY)])


@pytest.mark.parametrize('step, folder', [('latest', ''), ('best', f'/checkpoints/{STEPS}'),
                                          (str(BOUNDARY), f'/checkpoints/{BOUNDARY}')])
def test_init_from_step_names_the_checkpoint_read(two_phase, step, folder):
  """Pass V F12: init_from read a run's newest step only; its best (or any step) took a path."""
  _, workdir, _ = two_phase
  config = pretrain_config.get_config(f'size=tiny,init_from={workdir}')
  config.init_from_step = step
  assert init_from.configured(config) == f'{workdir}{folder}'


def test_init_from_step_refuses_a_step_the_run_lacks(two_phase):
  _, workdir, _ = two_phase
  config = pretrain_config.get_config(f'size=tiny,init_from={workdir}')
  config.init_from_step = '7'
  with pytest.raises(FileNotFoundError, match=re.escape(
      f'config.init_from_step=7 (init_from={workdir}): {workdir}/checkpoints has no checkpoint '
      'step 7; its steps: 5, 9, 10, 12.')):
    init_from.configured(config)
  # A job that loads no weights from it (a resume, eval, predict) reads the run itself: the
  # step named may since have been pruned.
  assert init_from.configured(config, loads_weights=False) == str(workdir)


def test_init_from_step_messages_name_the_config_field_and_an_unreadable_best(
    two_phase, tmp_path, monkeypatch):
  """Pass AD: the readers' sentences told a config's user to pass --step=..., a flag these jobs
  do not take; and a best step whose meta cannot be read was left out of the ranking silently
  (a newer step read as the best where no eval_history.json tells the lost best)."""
  _, workdir, _ = two_phase
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  run = json.loads((copy / 'config.json').read_text())
  run['checkpoint']['keep_best'] = 0
  (copy / 'config.json').write_text(json.dumps(run))
  config = pretrain_config.get_config(f'size=tiny,init_from={copy}')
  config.init_from_step = 'best'
  with pytest.raises(ValueError) as e:
    init_from.configured(config)
  assert '--step' not in str(e.value) and 'pass config.init_from_step=latest or one of its ' \
      'steps (5, 9, 10, 12)' in str(e.value), e.value
  (copy / 'config.json').write_text((workdir / 'config.json').read_text())
  (copy / 'eval_history.json').unlink()
  (copy / 'checkpoints' / str(STEPS) / 'meta' / 'metadata').write_text('')
  said = log_records.recorded_warnings(monkeypatch, checkpoint_reader)
  assert checkpoint_reader.best_step(copy / 'checkpoints') == BOUNDARY
  assert [line for line in said if line.startswith(
      f'step=best: checkpoint {copy}/checkpoints/{STEPS} is left out of the ranking: ')], said
  # A run before its first save (a live one still compiling): said so, not "another kind".
  shutil.rmtree(copy / 'checkpoints')
  (copy / 'checkpoints_saved.json').unlink()  # Its record of a finished save: none yet.
  for step in ('best', '9'):
    config.init_from_step = step
    with pytest.raises(FileNotFoundError, match=re.escape(
        f'{copy} holds no checkpoint: pass as init_from a run that saved one')):
      init_from.configured(config)


def test_continued_pretraining_starts_from_the_step_named(two_phase, tmp_path):
  _, workdir, _ = two_phase
  # On the run's phase-1 files (read only): each continued run would make them again.
  first = pretrain.phases(two_phase_config(), str(workdir))[0]
  cfg = pretrain_runs.set_fields(two_phase_config(), {
      'phase2.fraction': 0.0, 'num_train_steps': 1, 'optimizer.learning_rate': 0.0,
      'eval_every_steps': 0, 'init_from': str(workdir), 'init_from_step': str(BOUNDARY),
      'data.train_files': first.train_files, 'data.eval_files': first.eval_files,
      'data.vocab_file': str(embedded.vocab_path()),
      'data.dupe_factor': 5})  # The embedded corpus's (two_phase_config's 1): files of its own.
  pretrain.train_and_evaluate(cfg, str(tmp_path / 'continued'))
  got = pretrain_runs.flat(pretrain_runs.read_state(tmp_path / 'continued', 1)['params'])
  want = pretrain_runs.flat(pretrain_runs.read_state(workdir, BOUNDARY)['params'])
  assert got.keys() == want.keys()
  assert all(np.array_equal(got[k], want[k]) for k in want)  # A rate of 0 moves nothing.
  assert not all(np.array_equal(got[k], v) for k, v in pretrain_runs.flat(
      pretrain_runs.read_state(workdir, STEPS)['params']).items())
  # Pass AD: the step read is recorded ('latest' and 'best' name another one as the run goes).
  recorded = json.loads((tmp_path / 'continued' / 'config.json').read_text())
  assert recorded['init_from_read'] == str(workdir / 'checkpoints' / str(BOUNDARY)), recorded
  cfg.init_from_step = 'latest'
  pretrain.train_and_evaluate(cfg, str(tmp_path / 'latest'))
  recorded = json.loads((tmp_path / 'latest' / 'config.json').read_text())
  assert recorded['init_from_read'] == str(workdir / 'checkpoints' / str(STEPS)), recorded


@pytest.mark.parametrize('step, message', [
    ('last', "config.init_from_step='last': is no checkpoint step; pass latest, best or a step"),
    ('best', "config.init_from_step='best': names a checkpoint of init_from, which is empty")])
def test_a_bad_init_from_step_is_refused_before_anything_runs(step, message):
  config = pretrain_config.get_config('size=tiny')
  config.init_from_step = step
  with pytest.raises(ValueError, match=re.escape(message)):
    config_check.check(config)


@pytest.mark.parametrize('fraction', ['1.0', '-0.1', '1.5'])
def test_phase2_fraction_outside_0_1_is_refused(fraction):
  with pytest.raises(ValueError, match=r'phase2_fraction=.* must be in \[0, 1\)'):
    pretrain_config.get_config(f'size=tiny,phase2_fraction={fraction}')


def test_phase2_needs_its_own_files_when_data_files_are_given(tmp_path):
  """Refused with the config (exit 78, before JAX starts); pretrain.phases raised them once the
  job had started (exit 1: hostile pass H4)."""
  cfg = pretrain_config.get_config('size=tiny,steps=10,phase2_fraction=0.1')
  cfg.data.train_files = str(tmp_path / 'train-*')
  with pytest.raises(ValueError, match=r"^config.phase2.train_files='': is empty, and "
                     r'phase2.fraction=0.1 runs a phase 2 beside your own data.train_files; set '
                     r'it to files made at max_seq_length=512 and max_predictions_per_seq=80'):
    config_check.check(cfg)
  for steps, fraction, first, least in ((5, 0.01, 5, 51), (10, 0.96, 0, 13), (1, 0.5, 0, 2)):
    cfg = pretrain_config.get_config(f'size=tiny,steps={steps},phase2_fraction={fraction}')
    with pytest.raises(ValueError, match=rf'^config.phase2.fraction={fraction}: of '
                       rf'num_train_steps={steps} leaves {first} steps in phase 1 and '
                       rf'{steps - first} in phase 2, and each phase needs one at least; set '
                       rf'--config.num_train_steps to {least} or more'):
      config_check.check(cfg)
    cfg.num_train_steps = least  # The fewest that both phases run a step of.
    config_check.check(cfg)
    assert 0 < phase_plan.phase2_start(least, fraction) < least
    assert not 0 < phase_plan.phase2_start(least - 1, fraction) < least - 1
  # A fraction so near 0 or 1 that no run of a sane length splits: the fix says so, no crash
  # (StopIteration escaped the check).
  for fraction in (1e-7, 0.9999999):
    cfg = pretrain_config.get_config(f'size=tiny,steps=10,phase2_fraction={fraction}')
    with pytest.raises(ValueError, match=rf'^config.phase2.fraction={fraction}: of '
                       r'num_train_steps=10 leaves \d+ steps in phase 1 and \d+ in phase 2, and '
                       r'each phase needs one at least; set phase2_fraction=0 \(one phase\) in '
                       r'the argument string\.$'):
      config_check.check(cfg)


def test_a_phase_past_the_position_table_is_refused_before_reading_its_files():
  cfg = two_phase_config()
  cfg.model.max_position_embeddings = 48
  phase = pretrain.Phase(BOUNDARY, STEPS, 64, 10, 'gs://nowhere/train-*', '')
  with pytest.raises(ValueError, match=r'max_seq_length 64 \(steps 9..12\) exceeds the position '
                     r'table \(model.max_position_embeddings=48\)'):
    pretrain.check_data(cfg, phase, '', '')


@pytest.mark.parametrize('field', ['data.eval_files', 'data.vocab_file', 'phase2.train_files',
                                   'phase2.eval_files'])
def test_data_fields_without_train_files_are_refused(field):
  # Pass Y: phase2.eval_files were ignored, the embedded corpus's eval files read instead.
  cfg = pretrain_config.get_config('size=tiny,steps=10,phase2_fraction=0.1')
  section, name = field.split('.')
  cfg[section][name] = '/d/files-*'
  with pytest.raises(ValueError, match=rf"^config.{field}='/d/files-\*': is set but "
                     r'data.train_files is empty \(the embedded corpus, which brings its own '
                     r'eval split and vocab\); set --config.data.train_files to your TFRecords'):
    config_check.check(cfg)


def test_a_phase_without_eval_files_shows_no_eval(monkeypatch):
  # Pass Y: phase 2 without eval files printed 'eval at step 12:  (0.0 s)' at each eval.
  import types  # noqa: PLC0415

  from bertjax.training import loop  # noqa: PLC0415
  phase1 = pretrain.Phase(0, BOUNDARY, 32, 5, 'train-*', 'eval-*')
  first = types.SimpleNamespace(run=lambda params, step: {'mlm_accuracy': 0.5})
  job = types.SimpleNamespace(evaluator=pretrain_eval.PhasedEvaluator([(phase1, first)], 3))
  shown, written = [], []
  monkeypatch.setattr(loop, 'logging', types.SimpleNamespace(
      info=lambda message, *args: shown.append(message % args)))
  writer = types.SimpleNamespace(write_scalars=lambda step, scalars: written.append(step))
  assert loop._evaluate(job, None, STEPS, writer) == {}  # pylint: disable=protected-access
  assert shown == [] and written == []
  assert loop._evaluate(job, None, 6, writer) == {'mlm_accuracy': 0.5}  # pylint: disable=protected-access
  assert written == [6] and shown[0].startswith('eval at step 6: mlm_accuracy 0.5000'), shown


def test_a_workdir_holding_a_finetuning_run_is_refused_by_name(tmp_path):
  # Refused before any data is made: it was told only by the classifier's parameters.
  (tmp_path / 'checkpoints' / '4').mkdir(parents=True)
  (tmp_path / 'config.json').write_text('{"job": "finetune", "task": "sst2"}')
  with pytest.raises(ValueError, match=rf'^{tmp_path} holds a finetune run: pre-train in '
                     'another --workdir'):
    pretrain.train_and_evaluate(pretrain_config.get_config('size=tiny'), str(tmp_path))
  # As it was: the refused run's lock is removed (session 56).
  assert sorted(p.name for p in tmp_path.iterdir()) == ['checkpoints', 'config.json']
