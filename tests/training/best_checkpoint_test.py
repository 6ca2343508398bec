"""The best checkpoint: keep_best keeps what the evals rank best by checkpoint.best_metric, and
--step=best|latest|N resolves the same way for every reader (checkpoint_reader.resolve_step).

Tiny fine-tuning runs (the SST-2-layout task of finetune_runs) evaluated at every step, and
tiny pre-training runs, each on the first device only.
"""

import json
import pathlib
import re

import finetune_runs
import log_records
import pretrain_runs
import pytest

from bertjax import config_check
from bertjax import metric_direction
from bertjax import pretrain
from bertjax.finetune import job as finetune
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader
from bertjax.training import checkpoint_step
from bertjax.training import ranking
from bertjax.training import run_files
from configs import pretrain as pretrain_config

# The subject is never sharding: the runs, the shared ones too, use the first device only.
pytestmark = pytest.mark.usefixtures('one_device_per_module')


@pytest.fixture(scope='module')
def sst2_dir(tmp_path_factory):
  return finetune_runs.write_sst2(tmp_path_factory.mktemp('sst2'))


def kept_steps(workdir) -> set[int]:
  return set(checkpoint_reader.steps(pathlib.Path(workdir) / 'checkpoints'))


def history(workdir) -> dict[int, dict]:
  recorded = json.loads((pathlib.Path(workdir) / run_files.EVAL_HISTORY).read_text())
  return {int(k): v for k, v in recorded.items()}


def run(sst2_dir, workdir, **fields):
  config = finetune_runs.tiny_config(sst2_dir, **{
      'num_train_steps': 6, 'eval_every_steps': 1, 'checkpoint.every_steps': 1000,
      'checkpoint.keep': 1, **fields})
  return finetune.train_and_evaluate(config, str(workdir))


# A rate that moves the eval loss. The runs at it (6 steps) compile one train step: the
# session's compilation cache gives the second run the first one's.
MOVING_RATE = {'optimizer.learning_rate': 3e-3}


@pytest.fixture(scope='module')
def best_by_loss(sst2_dir, tmp_path_factory):
  """keep=1, keep_best=1, ranked by the eval loss (lower is better) at a rate that moves it."""
  workdir = tmp_path_factory.mktemp('best') / 'run'
  run(sst2_dir, workdir, **{'checkpoint.keep_best': 1, 'checkpoint.best_metric': 'loss',
                            **MOVING_RATE})
  return workdir


def test_keeps_the_newest_and_the_best_the_evals_name(best_by_loss):
  evals = history(best_by_loss)
  assert sorted(evals) == [1, 2, 3, 4, 5, 6]
  losses = {step: metrics['loss'] for step, metrics in evals.items()}
  best = min(losses, key=lambda s: (losses[s], s))
  assert kept_steps(best_by_loss) == {6, best}
  assert checkpoint_reader.resolve_step(best_by_loss, 'best') == best
  assert checkpoint_reader.resolve_step(best_by_loss, 'latest') is None
  assert checkpoint_reader.read(best_by_loss, 'best').step == best
  recorded = checkpoint_step.read_meta(best_by_loss / 'checkpoints' / str(best))['ranking']
  assert recorded == {'metric': 'loss', 'mode': 'min', 'value': losses[best]}
  assert checkpoint_reader.step_path(best_by_loss, 'best') == str(
      best_by_loss / 'checkpoints' / str(best))


def test_pretraining_keeps_its_best_by_mlm_accuracy(tmp_path_factory, tmp_path):
  fields = pretrain_runs.fields(pretrain_runs.corpus_files(tmp_path_factory), **{
      'eval_every_steps': 1, 'checkpoint.every_steps': 1000, 'checkpoint.keep': 1,
      'checkpoint.keep_best': 1, 'optimizer.learning_rate': 1e-2, 'optimizer.warmup_steps': 0})
  workdir = tmp_path / 'pretrain'
  pretrain.train_and_evaluate(pretrain_runs.config(4, fields), str(workdir))
  accuracy = {step: m['mlm_accuracy'] for step, m in history(workdir).items()}
  best = max(accuracy, key=lambda s: (accuracy[s], -s))
  assert sorted(accuracy) == [1, 2, 3, 4] and kept_steps(workdir) == {4, best}
  assert checkpoint_reader.resolve_step(workdir, 'best') == best
  recorded = checkpoint_step.read_meta(workdir / 'checkpoints' / str(best))['ranking']
  assert recorded['metric'] == 'mlm_accuracy' and recorded['mode'] == 'max'


def test_pretraining_stops_early_and_hands_on_its_best_step(tmp_path_factory, tmp_path, capsys):
  # Learning rate 0: every eval equals the first, so none improves on step 1's: with patience 2
  # the run stops after the evals at steps 2 and 3, long before its 10 steps.
  fields = pretrain_runs.fields(pretrain_runs.corpus_files(tmp_path_factory), **{
      'eval_every_steps': 1, 'checkpoint.every_steps': 1000, 'checkpoint.keep': 1,
      'optimizer.learning_rate': 0.0, 'early_stopping_patience': 2})
  workdir = tmp_path / 'pretrain'
  pretrain.train_and_evaluate(pretrain_runs.config(10, fields), str(workdir))
  assert sorted(history(workdir)) == [1, 2, 3]
  assert kept_steps(workdir) == {1, 3}
  assert checkpoint_reader.resolve_step(workdir, 'best') == 1
  summary = capsys.readouterr().out.strip().splitlines()[-1]
  assert summary.startswith('pretrain stopped (early: mlm_accuracy did not improve for 2 '
                            'evaluations after step 1'), summary
  assert 'step 3/10' in summary and 'best step 1 (mlm_accuracy 0)' in summary, summary


def test_a_tie_keeps_the_earlier_step(sst2_dir, tmp_path):
  # Learning rate 0: every eval gives the same accuracy; a later tie is no improvement.
  workdir = tmp_path / 'flat'
  run(sst2_dir, workdir, **{'checkpoint.keep_best': 1, 'optimizer.learning_rate': 0.0,
                            'num_train_steps': 3})
  assert len({m['accuracy'] for m in history(workdir).values()}) == 1
  assert kept_steps(workdir) == {1, 3}
  assert checkpoint_reader.resolve_step(workdir, 'best') == 1


def test_eval_of_the_best_says_it_ranks_as_the_run_trained(best_by_loss, sst2_dir, tmp_path,
                                                           caplog):
  """Hostile pass of session 35, 7: `--config.mode=eval --step=best` with another best_metric
  read the step the run ranked by its own, without a word."""
  import shutil  # noqa: PLC0415
  workdir = tmp_path / 'run'
  shutil.copytree(best_by_loss, workdir)
  config = finetune_runs.tiny_config(sst2_dir, **{
      'mode': 'eval', 'num_train_steps': 6, 'checkpoint.best_metric': 'accuracy'})
  finetune.run_predict(config, str(workdir), step='best')
  assert ('--step=best reads the step the run ranked best by loss, as it trained: '
          'config.checkpoint.best_metric=accuracy ranks the evals of a run that trains with it, '
          'not of a trained one') in caplog.text


@pytest.mark.parametrize('processes, read', [(1, [None]), (2, ['newest'])])
def test_hosts_read_the_step_they_agreed_on(best_by_loss, sst2_dir, monkeypatch, processes,
                                            read):
  """Review of session 40: mode=eval on several hosts agreed on the newest step, then each
  listed the steps again to read it (a live run saving meanwhile: another step per host). One
  process lists again (a step deleted meanwhile is skipped)."""
  import jax  # noqa: PLC0415

  from bertjax.interop import sources  # noqa: PLC0415
  from bertjax.training import hosts  # noqa: PLC0415

  class Loaded(Exception):
    pass

  asked = []

  def load(workdir, step=None, **kwargs):
    asked.append(step)
    raise Loaded

  monkeypatch.setattr(jax, 'process_count', lambda: processes)
  monkeypatch.setattr(hosts, 'check_same_view', lambda *args, **kwargs: None)  # One host here.
  monkeypatch.setattr(sources, 'load', load)
  config = finetune_runs.tiny_config(sst2_dir, **{'mode': 'eval', 'num_train_steps': 6})
  with pytest.raises(Loaded):
    finetune.run_predict(config, str(best_by_loss))
  assert asked == [max(kept_steps(best_by_loss)) if r == 'newest' else r for r in read]


def test_hosts_that_cannot_read_their_agreed_step_say_which_and_what_to_do(
    best_by_loss, sst2_dir, monkeypatch):
  import jax  # noqa: PLC0415

  from bertjax.interop import sources  # noqa: PLC0415
  from bertjax.training import checkpoint_damage  # noqa: PLC0415
  from bertjax.training import hosts  # noqa: PLC0415

  def load(workdir, step=None, **kwargs):
    raise checkpoint_damage.DamagedCheckpointError(f'step {step}: a digest disagrees')

  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  monkeypatch.setattr(hosts, 'check_same_view', lambda *args, **kwargs: None)  # One host here.
  monkeypatch.setattr(sources, 'load', load)
  config = finetune_runs.tiny_config(sst2_dir, **{'mode': 'eval', 'num_train_steps': 6})
  newest = max(kept_steps(best_by_loss))
  with pytest.raises(ValueError, match=(
      rf'^the hosts read step {newest}, the newest when they compared: step {newest}: a digest '
      r'disagrees \(.*pass --step=<an earlier step>\)$')):
    finetune.run_predict(config, str(best_by_loss))


def test_step_values_a_user_gets_wrong(best_by_loss, sst2_dir, tmp_path):
  for text in ('-1', 'abc', '1.5', 'Best'):
    with pytest.raises(ValueError, match=f'--step={text}: pass best, latest or a checkpoint'):
      checkpoint_reader.parse_step(text, text=True)
  assert checkpoint_reader.parse_step('12', text=True) == 12
  assert checkpoint_reader.parse_step('latest', text=True) is None
  # Session 54's export pass: --from=RUN/checkpoints/<older> --step=latest read the older step.
  kept = sorted(kept_steps(best_by_loss))
  older, newest = (str(best_by_loss / 'checkpoints' / str(s)) for s in (kept[0], kept[-1]))
  with pytest.raises(ValueError, match=re.escape(
      f"--step=latest reads a run's newest checkpoint (here step {kept[-1]}), but {older} is its "
      f"step {kept[0]}: drop --step to read step {kept[0]}, or pass the run's folder")):
    checkpoint_reader.step_path(older, 'latest')
  assert checkpoint_reader.step_path(newest, 'latest') == newest
  assert checkpoint_reader.step_path(older, None) == older
  # A command's --step= (an unset variable) read the newest; a config's init_from_step '' is
  # its default, the newest.
  with pytest.raises(ValueError, match='--step= is empty: pass best, latest or a checkpoint'):
    checkpoint_reader.parse_step('', text=True)
  assert checkpoint_reader.parse_step(
      '', text=True, asking=checkpoint_reader.Asking('config.init_from_step')) is None
  with pytest.raises(ValueError, match=r"step=-1: a checkpoint step is a number \(0 or more"):
    checkpoint_reader.parse_step(-1)
  with pytest.raises(ValueError, match="step=True: a checkpoint step is a number"):
    checkpoint_reader.parse_step(True)
  with pytest.raises(FileNotFoundError, match='no checkpoint step 99; its steps: '):
    checkpoint_reader.resolve_step(best_by_loss, 99)
  # A run that kept no best (keep=1: its last step only): 'best' says why and what to pass.
  plain = tmp_path / 'plain'
  run(sst2_dir, plain, **MOVING_RATE)
  with pytest.raises(ValueError, match=r'keep_best=0, so its best checkpoint may have been '
                     r'deleted .* pass --step=latest or one of its steps \(6\); train with '
                     r'--config.checkpoint.keep_best=1'):
    checkpoint_reader.resolve_step(plain, 'best')
  with pytest.raises(ValueError, match='holds none'):
    checkpoint_reader.step_path(tmp_path, 'best')


def test_best_metric_and_mode_checked(sst2_dir, tmp_path):
  assert metric_direction.best_mode('loss') == metric_direction.best_mode('dev/mse') == 'min'
  assert metric_direction.best_mode('mlm_loss') == 'min'
  assert metric_direction.best_mode('accuracy') == metric_direction.best_mode('f1') == 'max'
  assert metric_direction.best_mode('loss', 'max') == 'max'
  config = finetune_runs.tiny_config(sst2_dir, **{'checkpoint.best_mode': 'highest'})
  with pytest.raises(ValueError, match=r"config.checkpoint.best_mode='highest': is unknown; "
                     'valid: max'):
    config_check.check(config)
  # Pre-training knows its metrics before it reads any data.
  config = pretrain_config.get_config('size=tiny,steps=2')
  config.checkpoint.best_metric = 'mlm_acc'
  with pytest.raises(ValueError, match=r"best_metric='mlm_acc': is not an eval metric of "
                     'pre-training; valid: mlm_accuracy, mlm_loss, nsp_accuracy, nsp_loss'):
    pretrain.train_and_evaluate(config, str(tmp_path / 'pretrain'))
  # A task's metrics are known from its name too: the run is refused before it starts.
  workdir = tmp_path / 'typo'
  with pytest.raises(ValueError, match=r"best_metric='acuracy': is not an eval metric of task "
                     r'sst2; valid: loss, accuracy'):
    run(sst2_dir, workdir, **{'checkpoint.best_metric': 'acuracy'})
  assert kept_steps(workdir) == set()
  # A mode against the metric's known direction would keep (and early-stop on) the worst eval
  # (session 35's leftover): refused at the start, nothing written.
  config = pretrain_config.get_config('size=tiny,steps=2')
  config.checkpoint.best_metric, config.checkpoint.best_mode = 'mlm_loss', 'max'
  with pytest.raises(ValueError, match=r"best_mode='max': mlm_loss is better lower"):
    pretrain.train_and_evaluate(config, str(tmp_path / 'against'))
  assert not (tmp_path / 'against').exists()
  # Its default metric (best_metric='', mlm_accuracy) against min: refused with the config too,
  # as a named one is (it was found only once the job had started).
  config.checkpoint.best_metric, config.checkpoint.best_mode = '', 'min'
  with pytest.raises(ValueError, match=r"^config.checkpoint.best_mode='min': with "
                     r"best_metric='' \(mlm_accuracy\): mlm_accuracy is better higher, so the "
                     r"run would keep \(and early-stop on\) its worst eval; set it to 'max'"):
    config_check.check(config)
  config.checkpoint.best_mode = 'max'
  config_check.check(config)
  workdir = tmp_path / 'worst'
  with pytest.raises(ValueError, match=r"config.checkpoint.best_mode='min': with best_metric="
                     r"'': task \w+'s main metric, a score, is better higher, so the run would "
                     r"keep \(and early-stop on\) its worst eval; set it to 'max', or leave it ''"):
    run(sst2_dir, workdir, **{'checkpoint.best_mode': 'min'})
  assert kept_steps(workdir) == set() and not (workdir / 'config.json').exists()
  # The loop's own refusal stays for a config that skipped the check (ranking.check_best_metric).
  with pytest.raises(ValueError, match=r"best_mode='min': accuracy is better higher"):
    ranking.check_best_metric('accuracy', (), 'min')
  # Named, the metric's direction is checked with the config, before any data is read (a pod
  # launcher checks it before booking a slice).
  config = finetune_runs.tiny_config(sst2_dir, **{'checkpoint.best_metric': 'loss',
                                                 'checkpoint.best_mode': 'max'})
  with pytest.raises(ValueError, match=r"config.checkpoint.best_mode='max': loss is better "
                     r"lower, so the run would keep \(and early-stop on\) its worst eval; set it "
                     r"to 'min'"):
    config_check.check(config)
  config.checkpoint.best_mode = 'min'
  config_check.check(config)
  for metric, mode in (('loss', 'min'), ('dev/mse', 'min'), ('accuracy', 'max'),
                       ('best_f1_thresh', 'min'), ('HasAns_total', 'min'), ('accuracy', '')):
    ranking.check_best_metric(metric, (), mode)  # Agreeing, or of no known direction.


def _save_ranked(workdir, values: dict[int, float], keep_best=1):
  """Saves tiny states at `values`' steps, each ranked by its eval loss, as the loop does
  (the meta's ranking, the manager's metrics, the run's eval history and config)."""
  import checkpoint_test  # noqa: PLC0415  # Its tiny state.
  config = checkpoint_test.config()
  config.checkpoint.keep, config.checkpoint.keep_best = 1, keep_best
  mngr = checkpoint.manager(workdir, config, best_metric='loss', mode='min')
  evals = run_files.eval_history(workdir, up_to_step=10**9)
  for step, loss in values.items():
    ranking = {'metric': 'loss', 'mode': 'min', 'value': loss}
    checkpoint.save(mngr, step, checkpoint_test.make_state(step),
                    {'step': step, 'ranking': ranking}, force=True,
                    metrics={'step': step, 'loss': loss})
    checkpoint.wait(mngr)
    evals[step] = {'loss': loss}
  mngr.close()
  run_files.record_eval(workdir, evals)
  (pathlib.Path(workdir) / 'config.json').write_text(json.dumps(config.to_dict()))


def test_a_resumed_run_keeps_the_best_saved_before_it(tmp_path):
  """orbax ranks a step by the metrics it reads back from the step's folder: a resumed run's
  manager must still see the best of the first run, or its first save deletes it."""
  _save_ranked(tmp_path, {1: 0.5, 2: 0.1, 3: 0.4})
  assert kept_steps(tmp_path) == {2, 3}
  _save_ranked(tmp_path, {4: 0.6, 5: 0.7})  # A new manager: the resume.
  assert kept_steps(tmp_path) == {2, 5}
  assert checkpoint_reader.resolve_step(tmp_path, 'best') == 2
  # A step saved before orbax kept its metrics (no metrics item) is kept, never deleted unranked.
  import shutil  # noqa: PLC0415
  shutil.rmtree(tmp_path / 'checkpoints' / '2' / 'metrics')
  _save_ranked(tmp_path, {6: 0.8})
  assert kept_steps(tmp_path) == {2, 5, 6}  # 5: the best of the steps orbax can rank.


def test_step_best_never_reads_another_step_for_a_lost_best(tmp_path):
  _save_ranked(tmp_path, {2: 0.1, 4: 0.3}, keep_best=2)
  assert checkpoint_reader.resolve_step(tmp_path, 'best') == 2
  meta = tmp_path / 'checkpoints' / '2' / 'meta' / 'metadata'
  meta.write_text('')  # Unreadable: its ranking cannot be read back.
  with pytest.raises(ValueError, match=r'--step=best: the run\'s best eval by loss was step 2 '
                     r'\(0.1, eval_history.json\), but its checkpoint is unreadable; the best of '
                     r'the steps kept is 4 \(0.3\): pass --step=4'):
    checkpoint_reader.resolve_step(tmp_path, 'best')
  import shutil  # noqa: PLC0415
  shutil.rmtree(tmp_path / 'checkpoints' / '2')
  with pytest.raises(ValueError, match=r'step 2 .*but its checkpoint is gone'):
    checkpoint_reader.resolve_step(tmp_path, 'best')
  assert checkpoint_reader.resolve_step(tmp_path, 4) == 4
  with pytest.raises(ValueError, match=r'--step=²: pass best, latest or a checkpoint step'):
    checkpoint_reader.parse_step('²', text=True)


def _save_as_the_loop(workdir, values: dict[int, float | None], *, keep_best=1, steps=16,
                      fraction=0.25):
  """Saves tiny states at `values`' steps as the loop does (ranking.record, then loop._save; None:
  a save at no eval) for a run of `steps` steps whose second phase is `fraction` of them."""
  import types  # noqa: PLC0415

  import checkpoint_test  # noqa: PLC0415  # Its tiny state.
  import ml_collections  # noqa: PLC0415

  from bertjax.training import loop  # noqa: PLC0415
  config = checkpoint_test.config()
  config.checkpoint.keep, config.checkpoint.keep_best = 1, keep_best
  config.num_train_steps = steps
  config.global_batch_size = 4  # The examples each step consumes below.
  config.phase2 = ml_collections.ConfigDict({'fraction': fraction})
  config.model = ml_collections.ConfigDict({'size': 'tiny'})
  mngr = checkpoint.manager(workdir, config, best_metric='loss', mode='min')
  history = {}
  for step, loss in values.items():
    standing = None if loss is None else ranking.record(
        config, {'loss': loss}, step, history, str(workdir), 'loss', 'min', 0)[0]
    loop._save(mngr, config, types.SimpleNamespace(shape={'data': 1}),  # pylint: disable=protected-access
               checkpoint_test.make_state(step), step, step * 4, standing)
    checkpoint.wait(mngr)
  mngr.close()
  (pathlib.Path(workdir) / 'config.json').write_text(json.dumps(config.to_dict()))
  return config, history


def test_a_two_phase_run_ranks_only_its_last_evaluated_phase(tmp_path, monkeypatch):
  """Pass Y: phase 1's evals (other data: 128 tokens, another unigram baseline) were ranked
  against phase 2's, and its best was a phase-1 step. Phase 2 starts at step 12 of 16."""
  config, evals = _save_as_the_loop(tmp_path / 'two', {4: 0.1, 8: 0.2, 12: 0.3, 14: 0.5,
                                                       16: 0.6})
  assert kept_steps(tmp_path / 'two') == {14, 16}  # Not step 4: its loss is of other data.
  assert checkpoint_reader.resolve_step(tmp_path / 'two', 'best') == 14
  assert ranking.since_best(evals, 'loss', 'min', config) == (14, 1)  # Early stopping's.
  best = ranking.best_of(config, 16, evals, 'loss', 'min', 1)
  assert best == {'best_step': 14, 'best': ('loss', 0.5), 'best_note': ''}
  # Phase 2 without evals: phase 1's best, said by the summary and --step=best.
  warnings = log_records.recorded_warnings(monkeypatch, checkpoint_reader)
  config, evals = _save_as_the_loop(tmp_path / 'one', {4: 0.1, 8: 0.2, 16: None})
  assert checkpoint_reader.resolve_step(tmp_path / 'one', 'best') == 4
  assert any('step 4 is of phase 1 (steps 0..12): phase 2 has no eval' in w for w in warnings)
  best = ranking.best_of(config, 16, evals, 'loss', 'min', 1)
  assert best['best_step'] == 4 and best['best_note'] == ', of phase 1: phase 2 has no eval'


def test_saves_at_no_eval_are_never_kept_as_the_best(tmp_path):
  # Pass Y: keep_best=1 without any eval kept the first save (2) forever beside the newest.
  _save_as_the_loop(tmp_path, {2: None, 4: None, 6: None, 8: None}, fraction=0)
  assert kept_steps(tmp_path) == {8}
  _save_as_the_loop(tmp_path, {10: 0.5, 12: None, 14: None}, fraction=0)  # One eval: kept.
  assert kept_steps(tmp_path) == {10, 14}
