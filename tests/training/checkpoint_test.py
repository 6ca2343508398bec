"""Checkpoint integrity: digests, damaged bytes fall back, other errors leave checkpoints be,
a full disk is one clear error; one CPU process saves replicated arrays whole, and checkpoints
of either kind read back."""

import errno
import json
import logging
import pathlib
import subprocess
import sys

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import pytest

from bertjax.training import checkpoint
from bertjax.training import checkpoint_damage
from bertjax.training import checkpoint_space
from bertjax.training import hosts


@flax.struct.dataclass
class State:
  params: dict
  step: jnp.ndarray


def config():
  c = ml_collections.ConfigDict()
  c.checkpoint = ml_collections.ConfigDict({'keep': 5, 'keep_best': 0, 'every_steps': 1})
  return c


def make_state(seed):
  rng = np.random.default_rng(seed)
  return State(params={'dense': {'kernel': jnp.asarray(rng.normal(size=(64, 32)), jnp.float32),
                                 'bias': jnp.asarray(rng.normal(size=(32,)), jnp.bfloat16)}},
               step=jnp.int32(seed))


def save_steps(workdir, steps=(1, 2)):
  mngr = checkpoint.manager(workdir, config(), best_metric='acc')
  for step in steps:
    state = make_state(step)
    meta = {'step': step, 'examples_consumed': step * 4}  # save() adds the digests.
    checkpoint.save(mngr, step, state, meta, force=True)
  checkpoint.wait(mngr)
  mngr.close()


def restore(workdir):
  mngr = checkpoint.manager(workdir, config(), best_metric='acc')
  abstract = checkpoint.abstract_state(make_state(0), jax.tree.map(lambda x: x.sharding,
                                                                    make_state(0)))
  return checkpoint.restore_latest(mngr, abstract)


def largest_data_file(step_dir):
  return max((p for p in (step_dir / 'state').rglob('*') if p.is_file()),
             key=lambda p: p.stat().st_size)


def test_digest_sees_every_bit_and_no_sharding():
  x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 16)), jnp.float32)
  base = checkpoint_damage.digests({'x': x})
  mesh = jax.make_mesh((8,), ('d',))
  sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec('d')))
  assert checkpoint_damage.digests({'x': sharded}) == base
  bits = np.asarray(x).view(np.uint32).copy()
  for index, bit in [(0, 0), (37, 31), (127, 5)]:
    flipped = bits.copy().reshape(-1)
    flipped[index] ^= np.uint32(1 << bit)
    flipped_x = jnp.asarray(flipped.view(np.float32).reshape(8, 16))
    assert checkpoint_damage.digests({'x': flipped_x}) != base
  swapped = np.asarray(x).copy()
  swapped[[0, 1]] = swapped[[1, 0]]
  assert checkpoint_damage.digests({'x': jnp.asarray(swapped)}) != base


def test_a_flipped_bit_falls_back_to_the_previous_checkpoint(tmp_path):
  save_steps(tmp_path)
  victim = largest_data_file(tmp_path / 'checkpoints' / '2')
  data = bytearray(victim.read_bytes())
  data[len(data) // 2] ^= 0x04
  victim.write_bytes(bytes(data))
  state, meta = restore(tmp_path)
  assert meta['step'] == 1 and int(state.step) == 1
  assert len(list((tmp_path / 'checkpoints').glob('2.unreadable-*'))) == 1


_READ_DAMAGED_TREE = """
import pathlib, sys
import checkpoint_test
from bertjax.training import checkpoint_reader
workdir = pathlib.Path(sys.argv[2])
if sys.argv[1] == 'resume':
  state, meta = checkpoint_test.restore(workdir)
else:
  meta = checkpoint_reader.read(workdir).meta
print('read step', meta['step'])
"""


@pytest.mark.parametrize('damage', ['manifest', 'cut'])
@pytest.mark.parametrize('reader', ['resume', 'predict'])
def test_a_damaged_tree_falls_back_with_no_traceback(tmp_path, reader, damage):
  # The root manifest's data (where the tree is listed) damaged, or the arrays' data file cut
  # short: orbax read it and left tensorstore calling into a closed event loop, tracebacks on
  # stderr after the warning (hundreds of them for a cut file).
  save_steps(tmp_path)
  if damage == 'manifest':
    victim = next((tmp_path / 'checkpoints' / '2' / 'state' / 'd').iterdir())
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x10
    victim.write_bytes(bytes(data))
  else:
    victim = largest_data_file(tmp_path / 'checkpoints' / '2')
    victim.write_bytes(victim.read_bytes()[:1000])
  out = subprocess.run([sys.executable, '-c', _READ_DAMAGED_TREE, reader, str(tmp_path)],
                       capture_output=True, text=True, timeout=120,
                       cwd=pathlib.Path(__file__).parent, check=False)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == 'read step 1'
  assert 'state: its tree cannot be read (' in out.stderr
  assert 'Traceback' not in out.stderr and 'Event loop is closed' not in out.stderr


def test_a_meta_without_its_step_falls_back(tmp_path):
  save_steps(tmp_path)
  (tmp_path / 'checkpoints' / '2' / 'meta' / 'metadata').write_text('{}')
  _, meta = restore(tmp_path)
  assert meta['step'] == 1


def test_an_error_that_is_not_damage_moves_nothing(tmp_path, monkeypatch):
  save_steps(tmp_path)
  before = sorted(p.name for p in (tmp_path / 'checkpoints').iterdir())

  def out_of_memory(*args, **kwargs):
    raise MemoryError('RESOURCE_EXHAUSTED: host memory')  # Not the bytes' fault.

  monkeypatch.setattr(checkpoint.ocp.CheckpointManager, 'restore', out_of_memory)
  with pytest.raises(RuntimeError, match='look intact, so nothing was moved'):
    restore(tmp_path)
  assert sorted(p.name for p in (tmp_path / 'checkpoints').iterdir()) == before


@pytest.mark.parametrize('other', ['damaged', 'stopped'])
def test_the_hosts_agree_on_a_steps_verdict(tmp_path, monkeypatch, caplog, other):
  """Each host restores its own shards: one host alone finding step 2 damaged moved it aside
  and went back to step 1 while the others went on at step 2 (or one host stopped while the
  others trained). Process 1 is simulated: its verdicts after the tree's check and after the
  restore of step 2 (its own shards' damage or error), then of step 1 (healthy)."""
  save_steps(tmp_path)
  theirs = [0, 1 if other == 'damaged' else 2, 0, 0]
  monkeypatch.setattr(hosts, 'worst', lambda mine: max(
      (mine, 0), (theirs.pop(0), 1), key=lambda verdict_host: verdict_host[0]))
  monkeypatch.setattr(checkpoint.multihost_utils, 'sync_global_devices', lambda name: None)
  if other == 'stopped':
    with pytest.raises(checkpoint.RestoreError, match=(
        r'checkpoint step 2 in .* could not be restored on process 1: nothing was moved')):
      restore(tmp_path)
    assert sorted(p.name for p in (tmp_path / 'checkpoints').iterdir()) == ['1', '2']
    return
  with caplog.at_level(logging.WARNING):
    _, meta = restore(tmp_path)
  assert meta['step'] == 1
  assert len(list((tmp_path / 'checkpoints').glob('2.unreadable-*'))) == 1
  assert 'cannot be read on process 1; falling back to the previous one' in caplog.text
  assert theirs == []  # Both stages of both steps agreed on.


def test_the_hosts_compare_the_steps_they_list_before_any_verdict(tmp_path, monkeypatch):
  """Review of session 41, 8: each host walked its own list of steps, so a host whose listing
  lagged paired its verdicts with the others' on other steps."""
  save_steps(tmp_path)
  compared = []
  monkeypatch.setattr(hosts, 'check_same_view', lambda workdir, seen, **kwargs: compared.append(
      (workdir, seen, kwargs['fix'])))
  restore(tmp_path)
  assert [c[:2] for c in compared] == [(str(tmp_path / 'checkpoints'), 'checkpoint steps [2, 1]')]
  assert compared[0][2].startswith('every host must list the same checkpoints')


def test_one_hosts_disk_too_full_for_a_save_stops_every_host(tmp_path, monkeypatch):
  """Each host read the free space itself: one host short stopped alone while the others went
  into the save's collectives. Process 1 (simulated) reads the disk full."""
  mngr = checkpoint.manager(tmp_path, config(), best_metric='acc')
  checkpoint_space.check_space(mngr, 1, make_state(1))  # Nobody short.
  monkeypatch.setattr(hosts, 'worst', lambda mine: (max(mine, 1), 1 - mine))
  with pytest.raises(checkpoint_space.DiskFullError, match=(
      rf'the disk holding {tmp_path}/checkpoints has too little free space for the checkpoint of '
      r'step 1 as process 1 reads it \(about 0 MiB, plus 4 MiB to spare\): not saved')):
    checkpoint_space.check_space(mngr, 1, make_state(1))
  mngr.close()


@flax.struct.dataclass
class OptState:
  params: dict
  opt_state: tuple
  step: jnp.ndarray


def test_another_optimizer_state_is_one_line_and_moves_nothing(tmp_path):
  # adamw -> lamb on a resume: orbax's refusal of the tree came out as a traceback.
  def state(moments):
    params = make_state(1).params
    return OptState(params, tuple(jax.tree.map(jnp.zeros_like, params) for _ in range(moments)),
                    jnp.int32(1))

  mngr = checkpoint.manager(tmp_path, config(), best_metric='acc')
  checkpoint.save(mngr, 1, state(2), {'step': 1, 'examples_consumed': 4}, force=True)
  checkpoint.wait(mngr)
  mngr.close()
  before = sorted(p.name for p in (tmp_path / 'checkpoints').iterdir())
  other = state(1)
  abstract = checkpoint.abstract_state(other, jax.tree.map(lambda x: x.sharding, other))
  mngr = checkpoint.manager(tmp_path, config(), best_metric='acc')
  with pytest.raises(checkpoint.RestoreError) as e:
    checkpoint.restore_latest(mngr, abstract)
  assert str(e.value).startswith(f'checkpoint step 1 in {tmp_path}/checkpoints holds another '
                                 'training state than this config builds (they differ at ')
  assert 'optimizer.name' in str(e.value) and '\n' not in str(e.value)
  assert sorted(p.name for p in (tmp_path / 'checkpoints').iterdir()) == before


def test_damage_is_told_from_other_errors():
  damaged = [ValueError('OUT_OF_RANGE: Requested byte range [0, 9) is not valid'),
             ValueError('NOT_FOUND: Metadata at "a/.zarray" does not exist'),
             json.JSONDecodeError('Expecting value', '{', 1), FileNotFoundError('manifest')]
  for error in damaged:
    assert checkpoint_damage.is_damage(error), error
  wrapped = RuntimeError('restore failed')
  wrapped.__cause__ = damaged[0]
  assert checkpoint_damage.is_damage(wrapped)
  for error in [MemoryError('out of memory'), PermissionError(errno.EACCES, 'denied'),
                RuntimeError('Checkpoint path should be absolute')]:
    assert not checkpoint_damage.is_damage(error), error


def test_a_full_disk_during_a_save_is_one_clear_error(tmp_path, monkeypatch):
  save_steps(tmp_path, steps=(1,))
  mngr = checkpoint.manager(tmp_path, config(), best_metric='acc')

  def full(*args, **kwargs):
    raise ValueError('RESOURCE_EXHAUSTED: Error writing local file "/w/checkpoints/2.orbax-'
                     'checkpoint-tmp/state/d/x": [OS error 28: No space left on device]')

  monkeypatch.setattr(checkpoint.ocp.CheckpointManager, 'wait_until_finished', full)
  with pytest.raises(checkpoint_space.DiskFullError, match=r'is full: .* last complete one '
                     r'\(step 1\) is intact and a rerun resumes from it'):
    checkpoint.wait(mngr)


def replicated_state(seed):
  """make_state's arrays replicated over the 8 devices, in shapes no other test saves (a
  program compiled for a shape is cached for the process)."""
  rng = np.random.default_rng(seed)
  everywhere = jax.sharding.NamedSharding(jax.make_mesh((8,), ('data',)),
                                          jax.sharding.PartitionSpec())
  state = State(params={'dense': {'kernel': jnp.asarray(rng.normal(size=(40, 24)), jnp.float32),
                                  'bias': jnp.asarray(rng.normal(size=(24,)), jnp.bfloat16)}},
                step=jnp.int32(seed))
  return jax.device_put(state, everywhere)


def compiles_while(caplog, action) -> list[str]:
  """The names of the programs jax compiles while `action()` runs."""
  caplog.clear()
  with jax.log_compiles(True), caplog.at_level(logging.WARNING):
    action()
  return [r.getMessage().split(' ')[1] for r in caplog.records
          if r.getMessage().startswith('Compiling ')]


def test_one_cpu_process_saves_replicated_arrays_whole(tmp_path, caplog):
  """orbax's replica-parallel save slices a replicated array per replica, compiling a program
  per shape and device, which on one CPU process parallelizes nothing; bertjax's handler saves
  it whole. Each reads the other's checkpoint, bit for bit."""
  state = replicated_state(3)
  ours = ocp.Checkpointer(checkpoint.state_handler())
  orbaxs = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())  # orbax's default handler.
  assert compiles_while(caplog, lambda: ours.save(tmp_path / 'ours', args=ocp.args.PyTreeSave(
      state))) == []
  # The check can fail: orbax's default compiles its slices for the same arrays.
  assert 'slice' in ' '.join(compiles_while(caplog, lambda: orbaxs.save(
      tmp_path / 'orbaxs', args=ocp.args.PyTreeSave(state))))
  abstract = checkpoint.abstract_state(state, jax.tree.map(lambda x: x.sharding, state))
  restore_args = ocp.checkpoint_utils.construct_restore_args(abstract)
  for got in [ours.restore(tmp_path / 'orbaxs', args=ocp.args.PyTreeRestore(
                  abstract, restore_args=restore_args)),
              orbaxs.restore(tmp_path / 'ours', args=ocp.args.PyTreeRestore(
                  abstract, restore_args=restore_args)),
              ocp.StandardCheckpointer().restore(tmp_path / 'ours', abstract)]:
    for got_leaf, want in zip(jax.tree.leaves(got), jax.tree.leaves(state), strict=True):
      assert got_leaf.dtype == want.dtype and got_leaf.sharding == want.sharding
      np.testing.assert_array_equal(np.asarray(got_leaf), np.asarray(want))


def test_a_workdir_saved_with_orbaxs_standard_handler_resumes(tmp_path):
  """Workdirs written before bertjax had its own state handler (orbax's StandardSave) resume
  through today's manager, digests checked."""
  old = ocp.CheckpointManager(checkpoint.checkpoint_dir(tmp_path), item_names=('state', 'meta'))
  for step in (1, 2):
    state = make_state(step)
    meta = {'step': step, 'examples_consumed': step * 4,
            'digests': checkpoint_damage.digests(state)}
    old.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                           meta=ocp.args.JsonSave(meta)))
  old.wait_until_finished()
  old.close()
  state, meta = restore(tmp_path)
  assert meta['step'] == 2
  for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(make_state(2)), strict=True):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  save_steps(tmp_path, steps=(3,))  # And it goes on saving in the same workdir.
  assert restore(tmp_path)[1]['step'] == 3


@flax.struct.dataclass
class KeyState:
  params: dict
  rng: jnp.ndarray


def test_a_resume_under_another_prng_impl_is_one_line_naming_it(tmp_path):
  # Pass helper-181: a run saved with threefry keys (2 words) resumed under
  # JAX_DEFAULT_PRNG_IMPL=rbg (4) failed as 'could not be restored (ValueError: Requested
  # shape: (4,) is not compatible with the stored shape: (2,) ...)', naming no setting.
  mngr = checkpoint.manager(tmp_path, config(), best_metric='acc')
  saved = KeyState(make_state(1).params, jnp.zeros((2,), jnp.uint32))
  checkpoint.save(mngr, 1, saved, {'step': 1, 'examples_consumed': 4}, force=True)
  checkpoint.wait(mngr)
  mngr.close()
  before = sorted(p.name for p in (tmp_path / 'checkpoints').iterdir())
  other = KeyState(saved.params, jnp.zeros((4,), jnp.uint32))
  abstract = checkpoint.abstract_state(other, jax.tree.map(lambda x: x.sharding, other))
  mngr = checkpoint.manager(tmp_path, config(), best_metric='acc')
  with pytest.raises(ValueError, match=r"holds a PRNG key of 2 words \(threefry2x32 \(JAX's "
                     r'default\)\) and this process makes keys of 4 \(JAX_DEFAULT_PRNG_IMPL=.*\): '
                     r'resume with the PRNG implementation the run was trained with') as e:
    checkpoint.restore_latest(mngr, abstract)
  assert '\n' not in str(e.value)
  assert sorted(p.name for p in (tmp_path / 'checkpoints').iterdir()) == before
