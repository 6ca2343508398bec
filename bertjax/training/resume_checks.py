"""What a resumed run is told about the ways it no longer continues the run it resumes.

The run's own record of itself (config.json, then a config-resumed-at-N.json per resume) is
compared with the config it resumes with: a schedule that changed, a data order that changed
(warned: a reseed after a loss spike is a known practice), and a two-phase run whose phase
boundary or batch changed (refused: its second phase would read its files from the wrong
example).
"""

import fnmatch
import json

from absl import logging
import flax
import jax
import ml_collections

from bertjax import files
from bertjax import paths
from bertjax import phase_plan
from bertjax.records import file_set
from bertjax.training import checkpoint
from bertjax.training import checkpoint_reader
from bertjax.training import checkpoint_step
from bertjax.training import optimizer as optimizer_lib


def check(config, workdir, step: int, examples_consumed: int, schedule):
  """All of the below, against the config that wrote checkpoint `step` (none: nothing)."""
  checkpoint_step.check_same_run(files.join(workdir, 'checkpoints'), step)
  last = _last_config(workdir, step)
  if last:
    _check_model(config, last, workdir, step)
    _check_schedule(config, last, workdir, step, schedule)
    _check_phases(config, last, workdir, step, examples_consumed)
    _check_data_order(config, last, step, examples_consumed)
    if changed := changed_fields(config, workdir, step):  # Every one, said once.
      logging.warning('resumed at step %d with settings other than the run had: %s (recorded in '
                      'config-resumed-at-%d.json; a later resume without them goes back to the '
                      'run\'s)', step, ', '.join(changed), step)


# Fields a run fills in itself (digests, resolved steps, what it read): not a user's change.
_RUN_FILLED = ('data.train_features_sha256', 'data.held_out_sha256',
               'data.held_out_texts_sha256', 'data.vocab_sha256',
               'data.vocab_file', 'text_pairs',
               'init_from', 'num_train_steps', 'optimizer.total_steps', 'model.scan_layers')
# 'auto' settles at the run's start (platform_defaults.settle), before the configs compared:
# the kernel each ran with, unless recorded as 'auto' (a config.json from before it settled).
_SETTLED = ('model.attention_impl',)


def changed_fields(config, workdir, step: int) -> list[str]:
  """'field old -> new' for each setting of `config` that differs from the config the run at
  `workdir` last ran with up to `step` (what a finished run's rerun leaves unused)."""
  last = _last_config(workdir, step)
  if not last:
    return []
  flat_last = flax.traverse_util.flatten_dict(last, sep='.')
  flat_now = flax.traverse_util.flatten_dict(config.to_dict(), sep='.')
  return [f'{k} {flat_last[k]!r} -> {flat_now[k]!r}' for k in sorted(flat_now)
          if k in flat_last and flat_last[k] != flat_now[k] and not k.startswith(_RUN_FILLED)
          and not (k in _SETTLED and 'auto' in (flat_last[k], flat_now[k]))]


# Settings that decide which examples a step reads: changed on a resume, the run goes on at
# its example count in another order (or other files), not where it stopped. The lanes and the
# window are read_order's plan of each epoch.
_ORDER_FIELDS = ('seed', 'data.train_files', 'data.train_file', 'phase2.train_files',
                 'data.shuffle_window', 'data.num_lanes')
# With the embedded corpus (data.train_files empty) the files are made in <workdir>/data from
# these: changed, the same names hold other examples.
_EMBEDDED_FIELDS = ('data.dupe_factor', 'data.max_seq_length', 'data.max_predictions_per_seq',
                    'data.dynamic_masking', 'data.masking', 'data.masked_lm_prob',
                    'data.max_instances_per_row', 'model.nsp', 'phase2.max_seq_length',
                    'phase2.max_predictions_per_seq')


def _last_config(workdir, step: int) -> dict | None:
  """The config the run ran with when it wrote checkpoint `step` (checkpoint_reader's
  config_file_at), an older bertjax's fields under today's names (_as_named_today)."""
  try:
    return _as_named_today(
        json.loads(files.read_text(checkpoint_reader.config_file_at(workdir, step))))
  except (OSError, ValueError):
    return None


def _as_named_today(last: dict) -> dict:
  """A config.json of an older bertjax with the fields since replaced under their new names, so
  that a resume compares what the run did: data.whole_word_masking (before 2026-11-26; read by
  dynamic masking alone) is data.masking."""
  data = last.get('data')
  if isinstance(data, dict) and 'whole_word_masking' in data and 'masking' not in data:
    whole = data.pop('whole_word_masking')
    if data.get('dynamic_masking'):
      data['masking'] = 'whole_word' if whole else 'wordpiece'
  return last


def _phase2_start(flat: dict) -> int | None:
  """The step pre-training's second phase starts at (pretrain.phases' rule); None: one phase."""
  return phase_plan.phase2_start(flat.get('num_train_steps', 0), flat.get('phase2.fraction') or 0)


def _check_phases(config, last: dict, workdir, step: int, examples_consumed: int):
  """Refuses a resume that would read the second phase's files from another example than the
  run reached: that phase reads on from (examples consumed - its first step x the batch), true
  only while the phase boundary and the batch are the ones the run ran with."""
  flat_last = flax.traverse_util.flatten_dict(last, sep='.')
  flat_now = flax.traverse_util.flatten_dict(config.to_dict(), sep='.')
  old, new = _phase2_start(flat_last), _phase2_start(flat_now)
  _check_two_phase_batch(config, flat_last, workdir, step, examples_consumed, new)
  if not any(start is not None and start < step for start in (old, new)):
    return  # In phase 1 either way: its files are read from the examples consumed.
  keep = (f"keep num_train_steps={flat_last.get('num_train_steps')}, "
          f"phase2.fraction={flat_last.get('phase2.fraction') or 0} and "
          f"global_batch_size={flat_last.get('global_batch_size')}, or start another --workdir "
          f'with init_from={workdir}')
  if old != new:
    def said(start):
      return 'in one phase' if start is None else f'with its second phase from step {start}'
    raise ValueError(f'this run ran {said(old)} and would now run {said(new)} '
                     f'(num_train_steps or phase2.fraction changed): resumed at step {step}, '
                     f'its phases would read their files from the wrong example; {keep}.')
  if examples_consumed != step * config.global_batch_size:
    earlier = flat_last.get('global_batch_size') == config.global_batch_size
    raise ValueError(f'this two-phase run consumed {examples_consumed} examples in {step} steps, '
                     f'not {step} x global_batch_size {config.global_batch_size}' + (
                         ' (its batch changed at an earlier resume): its second phase cannot '
                         'find where it stopped; start another --workdir with '
                         f'init_from={workdir}.' if earlier else
                         ': with another batch its second phase would read its files from the '
                         f'wrong example; {keep}.'))


def _check_two_phase_batch(config, flat_last: dict, workdir, step: int, examples_consumed: int,
                           phase2_start: int | None):
  """Refuses another global batch size on the resume of a two-phase run, in either phase:
  its second phase reads its files from (examples consumed - its first step x the batch), so a
  batch changed in phase 1 would stop the run at its first resume in phase 2."""
  batch, last_batch = config.global_batch_size, flat_last.get('global_batch_size')
  if phase2_start is None or step > phase2_start:
    return  # One phase (the data goes on from the examples consumed), or _check_phases' case.
  if last_batch is not None and last_batch != batch:
    raise ValueError(f'this two-phase run ran with global_batch_size={last_batch} and would '
                     f'resume at step {step} with {batch}: its second phase reads its files from '
                     f'step x batch, so keep global_batch_size={last_batch}, or start another '
                     f'--workdir with init_from={workdir}.')
  if examples_consumed != step * batch:
    raise ValueError(f'this run consumed {examples_consumed} examples in {step} steps, not {step} '
                     f'x global_batch_size {batch} (its batch changed at an earlier resume): its '
                     'second phase would read its files from the wrong example; run it in one '
                     f'phase (phase2.fraction=0), or start another --workdir with '
                     f'init_from={workdir}.')


# What the model computes with the same shapes (the shapes a restore checks itself): changed on
# a resume, the run's weights would go on under another function.
FUNCTION_FIELDS = ('hidden_act', 'layer_norm_eps')


def _check_model(config, last: dict, workdir, step: int):
  """Refuses a resume whose model computes another function than the run's (relu for gelu,
  another LayerNorm epsilon): its checkpoint restores (the shapes fit) and trains on silently."""
  old = last.get('model', {})
  changed = [f'model.{k} {old[k]!r} -> {config.model[k]!r}' for k in FUNCTION_FIELDS
             if k in old and k in config.model and old[k] != config.model[k]]
  if changed:
    raise ValueError(f'{workdir} was trained to step {step} with another model than this config '
                     f'makes ({", ".join(changed)}): its weights would go on under another '
                     'function; keep the old values, or start another --workdir with '
                     f'init_from={workdir}.')


def _check_data_order(config, last: dict, step: int, examples_consumed: int):
  """Warns when a resumed run reads its data in another order or from other files than the
  run it continues: examples seen may come again, others never."""
  flat_last = flax.traverse_util.flatten_dict(last, sep='.')
  flat_now = flax.traverse_util.flatten_dict(config.to_dict(), sep='.')
  fields = _ORDER_FIELDS
  if flat_now.get('data.train_files', 'none') == flat_last.get('data.train_files', 'none') == '':
    fields += _EMBEDDED_FIELDS
  # phase2.* decide what a step read only once the run trained in its second phase (a run of
  # one phase, or one still in its first, read nothing of them).
  start = _phase2_start(flat_last)
  if start is None or step <= start:
    fields = tuple(k for k in fields if not k.startswith('phase2.'))
  # A fine-tuning file moved since: another path, the same rows (its sha256 recorded by both).
  if flat_last.get('data.train_sha256') is not None and (
      flat_last.get('data.train_sha256') == flat_now.get('data.train_sha256')):
    fields = tuple(k for k in fields if k != 'data.train_file')
  changed = [f'{k} {flat_last[k]!r} -> {flat_now[k]!r}' for k in fields
             if k in flat_last and k in flat_now and flat_last[k] != flat_now[k]
             and not (k.endswith('.train_files') and _moved_set(flat_last[k], flat_now[k]))]
  if changed:
    logging.warning(
        'the data order differs from the one this run last ran with (%s): from step %d it '
        'reads on at example %d of another order, so examples already seen may come again and '
        'others never. To resume exactly, keep the old values.',
        ', '.join(changed), step, examples_consumed)


def _moved_set(old: str, new: str) -> bool:
  """Whether pre-training files `new` are the ones `old` matched, moved or copied since: every
  file `new` matches is in its set's report (whose shard sizes the readers check), and they are
  by name the ones of the reports `old`'s names match; where `old` still matches files, the
  same names and sizes."""
  try:
    found = file_set.resolve(new)
  except (OSError, ValueError):
    return False
  names = sorted(files.name(path) for path in found.files)
  globs = [files.name(pattern) for pattern in paths.split_list(old)]
  listed = [files.name(path) for report in found.reports.values()
            for path in report.get('output_files', [])]
  if not names or names != sorted(n for n in listed if any(fnmatch.fnmatch(n, g) for g in globs)):
    return False
  try:
    before = file_set.list_files(old)
  except (OSError, ValueError):
    return True  # Gone from there: moved.
  return sorted((files.name(p), files.size(p)) for p in before) == sorted(
      (files.name(p), files.size(p)) for p in found.files)


def _check_schedule(config, last: dict, workdir, step: int, schedule):
  """Warns when a resumed run's learning-rate schedule differs from the one it started with
  (a larger num_train_steps stretches the decay): the rate at the resume step jumps."""
  if 'optimizer' not in last:
    return
  old = {'decay_from': 'warmup_end', **last['optimizer']}  # Recorded since 2026-12-02.
  fields = ('learning_rate', 'end_learning_rate', 'warmup_steps', 'total_steps', 'decay_power',
            'decay_from')
  changed = [f'optimizer.{k} {old.get(k)} -> {config.optimizer[k]}' for k in fields
             if k in old and old[k] != config.optimizer[k]]
  if not changed:
    return
  old_rate = float(optimizer_lib.learning_rate_schedule(
      ml_collections.ConfigDict({k: old[k] for k in fields}))(step))
  new_rate = float(schedule(step))
  at_step = (f'the rate goes from {old_rate:.3g} to {new_rate:.3g}' if old_rate != new_rate
             else f'the rate is unchanged ({new_rate:.3g}) but follows another curve from here')
  keep = (f'keep optimizer.total_steps={old.get("total_steps")} (the rate stays at '
          'end_learning_rate after it), or start' if old.get('warmup_steps', 0) <= old.get(
              'total_steps', 0) else 'start')
  logging.warning(
      'the learning-rate schedule differs from the one this run last ran with (%s): at step %d '
      '%s. To extend a run without that change, %s a new run with init_from=%s.',
      ', '.join(changed), step, at_step, keep, workdir)


def process_count(order_per_process: bool, meta: dict):
  """Warns where the job's data order depends on the process count (each host reads its own
  files: `order_per_process`) and the checkpoint (its `meta`) was saved by another count: the
  run reads on at the same example count, but of another order."""
  saved = meta.get('process_count')  # Not recorded before 2026-11-29.
  if order_per_process and saved is not None and saved != jax.process_count():
    logging.warning('this checkpoint was saved by %d process(es) and this run has %d: each host '
                    'reads its own share of the files, so from example %d the data comes in '
                    'another order (examples seen may come again, others never); resume on %d '
                    'process(es) to continue exactly', saved, jax.process_count(),
                    int(meta['examples_consumed']), saved)


def prng(meta: dict):
  """Warns where the checkpoint (its `meta`) was saved under other JAX PRNG settings than this
  process's (JAX_DEFAULT_PRNG_IMPL between keys of one width, JAX_THREEFRY_PARTITIONABLE): the
  same key draws other bits, so the run goes on with other dropout masks than it would have."""
  saved, now = meta.get('prng'), checkpoint.prng_settings()  # Not recorded before 2026-12-06.
  if not saved:
    return
  env = {'impl': 'JAX_DEFAULT_PRNG_IMPL', 'threefry_partitionable': 'JAX_THREEFRY_PARTITIONABLE'}
  if {saved.get('impl'), now['impl']} != {'threefry2x32'}:  # The flag is threefry's alone.
    env.pop('threefry_partitionable')
  if all(saved.get(k) == now[k] for k in env):
    return
  def said(value):  # As the variable is set: 1 / 0.
    return int(value) if isinstance(value, bool) else value
  changed = [f'{env[k]} {said(saved.get(k))} -> {said(now[k])}' for k in env
             if saved.get(k) != now[k]]
  keep = ', '.join(f'{env[k]}={said(saved[k])}' for k in env if k in saved)
  logging.warning('this checkpoint was saved under other JAX PRNG settings than this process '
                  'has (%s): from step %d the same keys draw other dropout masks, so the run goes '
                  'on, but not as the run it resumes; resume with %s to continue exactly',
                  ', '.join(changed), int(meta['step']), keep)


def epoch_orders(order_per_process: bool, meta: dict):
  """Warns where a pre-training checkpoint (its `meta`, without 'epoch_orders') was saved
  before each epoch had its own shuffle order (04313db): the bertjax that saved it read every
  later epoch in the first's order, so past its first epoch the run reads on in another order
  than that code would have (each epoch's own, as a new run does)."""
  if order_per_process and not meta.get('epoch_orders'):
    logging.warning('this checkpoint was saved before 2026-12-06, when pre-training read every '
                    'epoch after the first in the first\'s shuffle order: if the run is past its '
                    'first epoch, it reads its later epochs from example %d in their own orders '
                    '(as a new run does), not as the bertjax that saved it would have',
                    int(meta['examples_consumed']))


def on_resume(order_per_process: bool, meta: dict):
  """The loop's checks of what a resumed checkpoint's meta records against this process."""
  process_count(order_per_process, meta)
  prng(meta)
  epoch_orders(order_per_process, meta)
