"""Inference from a recorded model config on another platform (issue 29): a run trained on a GPU
records attention_impl='cudnn', which a CPU or TPU cannot run; predict, extract_features and
embed keep the weights' layout and run the platform's kernel (platform_defaults.for_inference).

The GPU run is a CPU-trained tiny classifier whose config.json and checkpoint metas are
rewritten to say cudnn, as a GPU run records them: its outputs must equal the run's own.
"""

import json
import pathlib
import shutil

import jax
import ml_collections
import numpy as np
import pytest

from bertjax import embed
from bertjax import extract_features
from bertjax import predict
from bertjax.finetune import kinds
from bertjax.interop import init_from
from bertjax.model import encoder_config
from bertjax.model import platform_defaults
from bertjax.text import vocab_files
from bertjax.training import checkpoint_reader

SENTENCES = ['the king doth speak of love', 'my heart and death and grief', 'o brave new world']


def recorded(**fields) -> ml_collections.ConfigDict:
  """A model block as a run's config.json records it (settled: no 'auto')."""
  return ml_collections.ConfigDict(encoder_config.default_config(**{
      'num_layers': 2, 'hidden_size': 64, 'num_heads': 4, 'mlp_dim': 128, 'dtype': 'bfloat16',
      **fields}).to_dict())


@pytest.mark.parametrize('platform, kernel', [('cpu', 'xla'), ('tpu', 'xla'), ('gpu', 'cudnn')])
def test_a_gpu_runs_cudnn_becomes_the_platforms_kernel_where_it_cannot_run(platform, kernel):
  for scan in (True, False):
    got = platform_defaults.for_inference(recorded(attention_impl='cudnn', scan_layers=scan),
                                          platform)
    assert (got.attention_impl, got.scan_layers) == (kernel, scan)
    encoder_config.check_config(got)


def test_a_kernel_that_runs_here_is_kept_and_splash_only_on_a_tpu():
  # What the run's evals saw: the same numerics in predict on the same platform.
  for platform in ('cpu', 'tpu', 'gpu'):
    for kernel in ('xla', 'dot_product_attention'):
      got = platform_defaults.for_inference(recorded(attention_impl=kernel), platform)
      assert got.attention_impl == kernel, (platform, kernel)
  splash = recorded(attention_impl='splash')
  assert platform_defaults.for_inference(splash, 'tpu').attention_impl == 'splash'
  assert platform_defaults.for_inference(splash, 'cpu').attention_impl == 'xla'  # Not interpret.
  assert platform_defaults.for_inference(splash, 'gpu').attention_impl == 'cudnn'
  # Inference has no dropout: the training rule that keeps cudnn off does not apply.
  assert platform_defaults.for_inference(recorded(attention_impl='auto',
                                                  attention_dropout_rate=0.1),
                                         'gpu').attention_impl == 'cudnn'
  # A cudnn it cannot run even on a GPU (float32) is replaced too.
  assert platform_defaults.for_inference(recorded(attention_impl='cudnn', dtype='float32'),
                                         'gpu').attention_impl == 'xla'


def test_the_layout_is_the_weights_whatever_the_platform():
  for platform in ('cpu', 'tpu', 'gpu'):
    for saved in (True, False):
      for scan in (True, False, 'auto'):
        got = platform_defaults.for_inference(
            recorded(num_layers=12, scan_layers=scan), platform, saved_scan=saved)
        assert got.scan_layers is saved, (platform, saved, scan)
    # Without the weights: the recorded layout.
    for scan in (True, False):
      assert platform_defaults.for_inference(recorded(scan_layers=scan),
                                             platform).scan_layers is scan
  # The recorded block is not changed.
  block = recorded(attention_impl='cudnn', scan_layers=True)
  platform_defaults.for_inference(block, 'cpu', saved_scan=False)
  assert (block.attention_impl, block.scan_layers) == ('cudnn', True)


@pytest.fixture(scope='module')
def gpu_recorded_run(fine_tuned_sst2, tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
  """(the fine-tuned run, a copy whose config.json and metas record cudnn as a GPU run does)."""
  workdir, _ = fine_tuned_sst2
  copy = tmp_path_factory.mktemp('gpu_recorded') / 'run'
  shutil.copytree(workdir, copy)
  config_file = copy / 'config.json'
  run = json.loads(config_file.read_text())
  assert run['model']['attention_impl'] == 'xla'  # The CPU's choice, recorded.
  run['model']['attention_impl'] = 'cudnn'
  config_file.write_text(json.dumps(run))
  metas = list((copy / 'checkpoints').glob('*/meta/metadata'))
  assert metas
  for meta_file in metas:
    meta = json.loads(meta_file.read_text())
    meta['model']['attention_impl'] = 'cudnn'
    meta_file.write_text(json.dumps(meta))
  return workdir, copy


@pytest.mark.skipif(jax.default_backend() == 'gpu', reason='a GPU runs the recorded cudnn')
def test_the_recorded_cudnn_does_not_run_here_as_recorded(gpu_recorded_run):
  """What the other tests guard against: the model built as recorded fails on this platform."""
  _, copy = gpu_recorded_run
  run = init_from.run_config(copy)
  params = checkpoint_reader.read(copy).params
  model = kinds.get(run['kind']).head(ml_collections.ConfigDict(run['model']),
                                      len(run['labels']), run.get('pooling', 'cls'))
  ids = np.ones((1, 8), np.int32)
  with pytest.raises(Exception, match='(?i)cudnn'):
    model.apply({'params': params}, ids, ids, ids * 0, deterministic=True)


def test_predict_of_a_gpu_recorded_run_equals_the_runs_own(gpu_recorded_run):
  workdir, copy = gpu_recorded_run
  want = predict.Predictor.from_workdir(workdir).predict(SENTENCES)
  got = predict.Predictor.from_workdir(copy).predict(SENTENCES)
  assert got == want
  assert len({row['label'] for row in want}) >= 1 and all('logits' in row for row in got)


def test_extract_features_of_a_gpu_recorded_run_equals_the_runs_own(gpu_recorded_run, tmp_path):
  workdir, copy = gpu_recorded_run
  (tmp_path / 'in.txt').write_text('\n'.join(SENTENCES) + '\n')
  outputs = []
  for source in (workdir, copy):
    out = tmp_path / f'{source.parent.name}.jsonl'
    assert extract_features.run(str(source), str(tmp_path / 'in.txt'), str(out),
                                layers=(-1, -2, 0), max_seq_length=16,
                                batch_size=2).lines == len(SENTENCES)
    outputs.append(out.read_text())
  assert outputs[0] == outputs[1] and outputs[0].count('\n') == len(SENTENCES)
  # The recorded block itself (cudnn, its layout) given to the library functions.
  run = init_from.run_config(copy)
  encoder_params = checkpoint_reader.read(copy).params['bert']
  tok = vocab_files.for_model(init_from.vocab_file(copy), True)
  _, batch, _ = extract_features.encode(tok, [(SENTENCES[0], None)], 16)
  got = extract_features.concat_last_layers(run['model'], encoder_params, batch, n=2)
  xla = {**run['model'], 'attention_impl': 'xla'}
  want = extract_features.concat_last_layers(xla, encoder_params, batch, n=2)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_embed_of_a_gpu_recorded_config_equals_the_xla_one(gpu_recorded_run):
  _, copy = gpu_recorded_run
  run = init_from.run_config(copy)
  encoder_params = checkpoint_reader.read(copy).params['bert']
  tok = vocab_files.for_model(init_from.vocab_file(copy), True)
  vectors = [embed.embed_sentences(encoder_config.default_config(**{**run['model'],
                                                                    'attention_impl': kernel}),
                                   encoder_params, tok, SENTENCES, max_seq_length=16)
             for kernel in ('cudnn', 'xla')]
  assert vectors[0].shape == (len(SENTENCES), run['model']['hidden_size'])
  np.testing.assert_array_equal(vectors[0], vectors[1])
