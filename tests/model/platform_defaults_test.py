"""model.attention_impl / scan_layers 'auto': the choice per platform, explicit values kept, the
attention-dropout rule, the start line, and what a run records and resumes with (issue 29).

The GPU and TPU choices are checked on the resolved config (no accelerator here); the runs are
tiny CPU runs through the jobs, which settle 'auto' at the loop's start.
"""

import itertools
import json
import logging
import pathlib
import sys

from absl import flags
import finetune_runs
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import pretrain_runs
import pytest

from bertjax import pretrain
from bertjax.finetune import job as finetune
from bertjax.model import encoder
from bertjax.model import encoder_config
from bertjax.model import platform_defaults
from configs import common
from configs import finetune as finetune_config
from configs import pretrain as pretrain_config


def bf16_config(size='base', **overrides):
  """The configs' model block as a GPU user trains it (issue 29's settings)."""
  return common.model_config(size, **{'dtype': 'bfloat16', 'attention_dropout_rate': 0.0,
                                      **overrides})


@pytest.mark.parametrize('size', ['tiny', 'base', 'large'])
def test_gpu_defaults_are_cudnn_and_unrolled_layers(size):
  resolved, line = platform_defaults.resolve(bf16_config(size), 'gpu')
  assert (resolved.attention_impl, resolved.scan_layers) == ('cudnn', False)
  assert line == 'attention cudnn, layers unrolled: GPU defaults'


@pytest.mark.parametrize('platform', ['tpu', 'cpu'])
def test_tpu_and_cpu_defaults_scan_base_and_large_with_xla_attention(platform):
  for size, scanned in (('tiny', False), ('medium', False), ('base', True), ('large', True)):
    resolved, line = platform_defaults.resolve(bf16_config(size), platform)
    assert (resolved.attention_impl, resolved.scan_layers) == ('xla', scanned), size
    assert line == (f'attention xla, layers {"scanned" if scanned else "unrolled"}: '
                    f'{platform.upper()} defaults')


def test_the_statement_names_scanned_layers_per_trip():
  resolved, line = platform_defaults.resolve(bf16_config('base', scan_unroll=4), 'tpu')
  assert (resolved.scan_layers, resolved.scan_unroll) == (True, 4)
  assert line == 'attention xla, layers scanned 4 per trip: TPU defaults'
  # Where layers are not scanned, the line says the value is unused.
  _, line = platform_defaults.resolve(bf16_config('tiny', scan_unroll=2), 'cpu')
  assert line == 'attention xla, layers unrolled (model.scan_unroll=2 unused): CPU defaults'
  _, line = platform_defaults.resolve(bf16_config('tiny', scan_unroll=3, scan_layers=False,
                                                  attention_impl='xla'), 'cpu')
  assert line == ('attention xla (set), layers unrolled (set; model.scan_unroll=3 unused): as '
                  'configured')  # One parenthesis, not two.


def test_cpu_keeps_what_the_configs_chose_before_auto():
  # Before 'auto': pre-training scanned base and large, fine-tuning (tiny..) never; xla always.
  for size in pretrain_config.RECIPES:
    model = pretrain_config.get_config(f'size={size}').model
    assert (model.attention_impl, model.scan_layers) == ('auto', 'auto')
    resolved, _ = platform_defaults.resolve(model, 'cpu')
    assert (resolved.attention_impl, resolved.scan_layers) == ('xla', size in ('base', 'large'))
  model = finetune_config.get_config('task=sst2,size=tiny').model
  assert (model.attention_impl, model.scan_layers) == ('auto', 'auto')
  assert platform_defaults.resolve(model, 'cpu')[0].scan_layers is False


@pytest.mark.parametrize('platform', ['gpu', 'tpu', 'cpu'])
def test_explicit_values_win_on_every_platform(platform):
  config = bf16_config('base', attention_impl='splash', scan_layers=True)
  resolved, line = platform_defaults.resolve(config, platform)
  assert (resolved.attention_impl, resolved.scan_layers) == ('splash', True)
  assert line == 'attention splash (set), layers scanned (set): as configured'
  # One field explicit, the other auto.
  resolved, line = platform_defaults.resolve(bf16_config('tiny', attention_impl='xla'), platform)
  assert resolved.attention_impl == 'xla'
  assert line.startswith('attention xla (set), layers unrolled')
  assert line.endswith(f'{platform.upper()} defaults')


def test_gpu_training_with_attention_dropout_gets_cudnn_unrolled_and_xla_where_scanned():
  resolved, line = platform_defaults.resolve(bf16_config(attention_dropout_rate=0.1), 'gpu')
  assert (resolved.attention_impl, resolved.scan_layers) == ('cudnn', False)
  assert line == 'attention cudnn, layers unrolled: GPU defaults'
  # A run resumed from scanned layers (a TPU run's checkpoint): cuDNN's dropout needs them
  # unrolled (model/cudnn_dropout.py), so the XLA attention, saying how to get cuDNN.
  resolved, line = platform_defaults.resolve(bf16_config(attention_dropout_rate=0.1), 'gpu',
                                             saved_scan=True)
  assert (resolved.attention_impl, resolved.scan_layers) == ('xla', True)
  assert line == ("attention xla (cudnn's attention dropout needs unrolled layers, these are "
                  'scanned: model.attention_dropout_rate=0 gives cudnn), layers scanned (the '
                  "checkpoint's layout): GPU defaults")
  # Inference has no dropout: cuDNN runs scanned layers too.
  resolved, _ = platform_defaults.resolve(bf16_config(attention_dropout_rate=0.1), 'gpu',
                                          training=False, saved_scan=True)
  assert resolved.attention_impl == 'cudnn'


def test_gpu_float32_or_odd_head_dims_get_xla_attention():
  resolved, line = platform_defaults.resolve(bf16_config(dtype='float32'), 'gpu')
  assert resolved.attention_impl == 'xla'
  assert 'cudnn needs model.dtype=bfloat16' in line
  resolved, line = platform_defaults.resolve(bf16_config(hidden_size=120, num_heads=2), 'gpu')
  assert resolved.attention_impl == 'xla'
  assert 'head dim that is a multiple of 8 up to 128, not 60' in line
  # Set explicitly, the same blockers are refused before anything is compiled, not at trace.
  with pytest.raises(ValueError, match=r'cudnn cannot run this model \(cudnn needs model.dtype'):
    platform_defaults.resolve(bf16_config(dtype='float32', attention_impl='cudnn'), 'gpu')
  with pytest.raises(ValueError, match='multiple of 8 up to 128, not 60'):
    platform_defaults.resolve(bf16_config(hidden_size=120, num_heads=2, attention_impl='cudnn'),
                              'gpu', training=False)


def test_auto_never_gives_a_config_the_encoder_refuses():
  for platform, size, dtype, rate, training in itertools.product(
      ('gpu', 'tpu', 'cpu'), ('tiny', 'base'), ('float32', 'bfloat16'), (0.0, 0.1),
      (True, False)):
    config = common.model_config(size, dtype=dtype, attention_dropout_rate=rate)
    resolved, _ = platform_defaults.resolve(config, platform, training=training)
    encoder_config.check_config(resolved)
    assert isinstance(resolved.scan_layers, bool)
    assert resolved.attention_impl in encoder_config.ATTENTION_IMPLS
    if resolved.attention_impl != 'xla':  # cuDNN: bf16; dropout with unrolled layers only.
      assert (platform, dtype, resolved.attention_impl) == ('gpu', 'bfloat16', 'cudnn')
      assert rate == 0 or not training or not resolved.scan_layers


def test_a_resume_keeps_the_checkpoints_layout_and_refuses_a_contradicting_override():
  resolved, line = platform_defaults.resolve(bf16_config('base'), 'gpu', saved_scan=True)
  assert (resolved.attention_impl, resolved.scan_layers) == ('cudnn', True)
  assert line == "attention cudnn, layers scanned (the checkpoint's layout): GPU defaults"
  assert platform_defaults.resolve(bf16_config('base'), 'tpu', saved_scan=False)[0].scan_layers \
      is False
  with pytest.raises(ValueError, match=r'model.scan_layers=False but the checkpoint this run '
                     r'resumes from holds stacked \(nn.scan\) layers: drop the override'):
    platform_defaults.resolve(bf16_config('base', scan_layers=False), 'gpu', saved_scan=True)


def test_scanned_layout_of_a_parameter_tree():
  assert platform_defaults.scanned_layout({'bert': {'layers': {}, 'pooler': {}}}) is True
  assert platform_defaults.scanned_layout({'bert': {'layers_0': {}, 'layers_1': {}}}) is False
  assert platform_defaults.scanned_layout({'head': {}}) is None


def parsed_config(monkeypatch, *argv):
  """The --config that `argv` gives an absl program (config_flags reads sys.argv)."""
  argv = ['prog', *argv]
  monkeypatch.setattr(sys, 'argv', argv)
  values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', flag_values=values)
  values(argv)
  return values.config


def test_command_line_values_parse_and_win(monkeypatch):
  model = parsed_config(monkeypatch, '--config=configs/pretrain.py:size=base,dtype=bfloat16',
                        '--config.model.scan_layers=false',
                        '--config.model.attention_impl=cudnn').model
  assert model.scan_layers is False and model.attention_impl == 'cudnn'
  assert platform_defaults.resolve(model, 'gpu')[1] == ('attention cudnn (set), layers unrolled '
                                                        '(set): as configured')
  model = parsed_config(monkeypatch, '--config=configs/finetune.py:task=sst2',
                        '--config.model.scan_layers').model
  assert model.scan_layers is True and model.attention_impl == 'auto'
  model = parsed_config(monkeypatch, '--config=configs/pretrain.py:size=base',
                        '--config.model.scan_layers=auto').model
  assert model.scan_layers == 'auto'
  with pytest.raises(ValueError, match="model.scan_layers='yes' is unknown; valid: True, False, "
                     'auto'):
    encoder_config.check_config(common.model_config('tiny', scan_layers='yes'))
  with pytest.raises(ValueError, match="model.attention_impl='flash' is unknown; valid: xla, "
                     'dot_product_attention, cudnn, splash, auto'):
    encoder_config.check_config(common.model_config('tiny', attention_impl='flash'))


def test_a_model_built_outside_a_run_resolves_auto_for_its_platform():
  ids = jnp.ones((2, 8), jnp.int32)
  for layers, top in ((2, 'layers_0'), (12, 'layers')):  # CPU: scanned from 12 layers on.
    model = encoder.BertEncoder(common.model_config('tiny', num_layers=layers))
    shapes = jax.eval_shape(model.init, jax.random.key(0), ids, ids, ids)
    assert top in shapes['params'], (layers, list(shapes['params']))


@pytest.fixture(scope='module')
def corpus_fields(tmp_path_factory):
  return pretrain_runs.fields(pretrain_runs.corpus_files(tmp_path_factory))


def _recorded_model(workdir, name='config.json') -> dict:
  return json.loads((workdir / name).read_text())['model']


@pytest.mark.usefixtures('one_device')  # The choice, not sharding (conftest.py).
def test_pretraining_with_the_defaults_records_the_resolved_choice(corpus_fields, tmp_path,
                                                                   caplog):
  config = pretrain_runs.config(2, corpus_fields)
  with caplog.at_level(logging.INFO, logger='absl'):
    pretrain.train_and_evaluate(config, str(tmp_path))
  assert caplog.text.count('attention xla, layers unrolled: CPU defaults') == 1
  model = _recorded_model(tmp_path)
  assert (model['attention_impl'], model['scan_layers']) == ('xla', False)
  meta = pretrain_runs.read_meta(tmp_path, 2)['model']
  assert (meta['attention_impl'], meta['scan_layers']) == ('xla', False)


@pytest.mark.usefixtures('one_device')  # The layout, not sharding (conftest.py).
def test_a_resume_keeps_the_layout_its_checkpoint_was_written_with(corpus_fields, tmp_path,
                                                                   caplog):
  # Written scanned (explicitly: CPU's choice for 2 layers is unrolled), resumed with 'auto'.
  pretrain.train_and_evaluate(
      pretrain_runs.config(2, corpus_fields | {'model.scan_layers': True}), str(tmp_path))
  with caplog.at_level(logging.INFO, logger='absl'):
    pretrain.train_and_evaluate(pretrain_runs.config(3, corpus_fields), str(tmp_path))
  assert "attention xla, layers scanned (the checkpoint's layout): CPU defaults" in caplog.text
  assert _recorded_model(tmp_path, 'config-resumed-at-2.json')['scan_layers'] is True
  assert pretrain_runs.checkpoint_steps(tmp_path)[-1] == 3
  params = pretrain_runs.read_state(tmp_path, 3)['params']['bert']
  assert 'layers' in params and 'layers_0' not in params


@pytest.mark.usefixtures('one_device')  # The choice, not sharding (conftest.py).
def test_fine_tuning_records_the_choice_and_eval_reads_the_runs_layout(tmp_path, caplog):
  data_dir = finetune_runs.write_sst2(tmp_path / 'sst2')
  workdir = tmp_path / 'run'
  config = finetune_runs.tiny_config(data_dir, **{'num_train_steps': 1,
                                                  'model.scan_layers': True})
  with caplog.at_level(logging.INFO, logger='absl'):
    finetune.train_and_evaluate(config, str(workdir))
  assert 'attention xla, layers scanned (set): CPU defaults' in caplog.text
  model = _recorded_model(workdir)
  assert (model['attention_impl'], model['scan_layers']) == ('xla', True)
  # Eval with the configs' defaults ('auto': unrolled for 2 layers on a CPU) reads the run's
  # stacked layers.
  config = finetune_runs.tiny_config(data_dir, mode='eval')
  assert config.model.scan_layers == 'auto'
  written = finetune.run_predict(config, str(workdir))
  assert written and all(pathlib.Path(p).exists() for p in written)
