"""`bertjax.export`: transformers loads each kind with no missing or unexpected keys and computes
the same outputs; round trips are bit-identical; bad requests are refused and nothing is lost."""

import json
import shutil
import subprocess
import sys

from flax import traverse_util
import flax.linen as nn
import hf_checkpoint_test
import jax
import log_records
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
from safetensors import numpy as st_numpy
import torch
import transformers

from bertjax import export
from bertjax import predict
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import format_writers
from bertjax.interop import hf_checkpoint
from bertjax.interop import sources
from bertjax.interop import tf1_checkpoint
from bertjax.model import encoder
from bertjax.model import encoder_config
from bertjax.model import heads
from bertjax.text import tokenizer

SENTENCES = hf_checkpoint_test.SENTENCES
CLASSES = {'encoder': transformers.BertModel, 'pretraining': transformers.BertForPreTraining,
           'masked_lm': transformers.BertForMaskedLM,
           'classification': transformers.BertForSequenceClassification,
           'regression': transformers.BertForSequenceClassification,
           'span': transformers.BertForQuestionAnswering,
           'tagging': transformers.BertForTokenClassification}


def load_reporting(cls, directory):
  model, info = cls.from_pretrained(str(directory), output_loading_info=True)
  assert not info['missing_keys'] and not info['unexpected_keys'], info
  assert not info['mismatched_keys'], info
  return model.eval()


def random_bundle(kind, minilm_dir, num_labels=3):
  """A small random model of `kind`, as bertjax's own module initialises it."""
  cfg = encoder_config.default_config(vocab_size=30522, hidden_size=32, num_layers=2,
                                      num_heads=4, mlp_dim=64, max_position_embeddings=64,
                                      nsp=kind != 'masked_lm')
  module = {'encoder': encoder.BertEncoder(cfg), 'pretraining': heads.BertForPreTraining(cfg),
            'masked_lm': heads.BertForPreTraining(cfg),
            'classification': heads.BertForSequenceClassification(cfg, num_labels),
            'regression': heads.BertForSequenceClassification(cfg, 1),
            'span': heads.BertForQuestionAnswering(cfg),
            'tagging': heads.BertForTokenClassification(cfg, num_labels)}[kind]
  batch = heads.dummy_batch(1, 4, 2)
  if kind not in ('pretraining', 'masked_lm'):
    batch.pop('masked_lm_positions')
  params = nn.unbox(module.init(jax.random.key(1), **batch)['params'])
  # Non-zero biases and LayerNorms, so that a misplaced one would show.
  params = jax.tree.map(lambda x: x + 0.01 * np.arange(x.size, dtype=np.float32).reshape(
      x.shape) % 0.07, params)
  flat = traverse_util.flatten_dict(params, sep='/')
  if kind == 'encoder':
    flat = {f'bert/{k}': v for k, v in flat.items()}
  flat = {k: np.asarray(v) for k, v in flat.items()}
  labels = tuple(f'L{i}' for i in range(num_labels)) if kind in ('classification',
                                                                  'tagging') else ()
  return module, params, bundle_lib.Bundle(
      config=cfg.to_dict(), params=flat, kind=kind, vocab_file=str(minilm_dir / 'vocab.txt'),
      do_lower_case=True, labels=labels, source=f'random {kind}')


@pytest.mark.parametrize('kind', list(CLASSES))
def test_transformers_loads_every_kind_with_equal_outputs(kind, minilm_dir, tmp_path):
  module, params, result = random_bundle(kind, minilm_dir)
  result.max_seq_length = 32  # As a run fine-tuned at 32 tokens records it.
  out = tmp_path / kind
  out.mkdir()
  hf_checkpoint.save(result, out)
  ref = load_reporting(CLASSES[kind], out)
  assert json.loads((out / 'config.json').read_text())['architectures'] == [
      CLASSES[kind].__name__]
  batch = hf_checkpoint_test.hf_batch(out, SENTENCES, SENTENCES[::-1])
  with torch.no_grad():
    theirs = ref(**hf_checkpoint_test.torch_inputs(batch))
  # A task head reads texts as bertjax's predict does (its length, [SEP] in a text is text); a
  # model with no task keeps transformers' defaults ([MASK] in a text is a mask).
  tok = transformers.AutoTokenizer.from_pretrained(str(out))
  task = kind not in ('encoder', 'pretraining', 'masked_lm')
  assert tok.model_max_length == (32 if task else 64)  # Its length; the position table.
  split = tok.tokenize('a [SEP] b [MASK]')
  assert split == (['a', '[', 'sep', ']', 'b', '[', 'mask', ']'] if task else
                   ['a', '[SEP]', 'b', '[MASK]'])
  if kind in ('pretraining', 'masked_lm'):
    positions = np.tile(np.arange(0, 8, dtype=np.int32), (len(SENTENCES), 1))
    mlm, nsp = module.apply({'params': params}, **batch, masked_lm_positions=positions)
    logits = theirs.prediction_logits if kind == 'pretraining' else theirs.logits
    ref_mlm = np.take_along_axis(logits.numpy(), positions[..., None], 1)
    np.testing.assert_allclose(np.asarray(mlm), ref_mlm, atol=1e-5, rtol=0)
    if kind == 'pretraining':
      np.testing.assert_allclose(np.asarray(nsp), theirs.seq_relationship_logits.numpy(),
                                 atol=1e-5, rtol=0)
    else:
      assert nsp is None and not any(k.startswith('nsp/') for k in result.params)
    return
  ours = module.apply({'params': params}, **batch)
  if kind == 'encoder':
    np.testing.assert_allclose(np.asarray(ours[0]), theirs.last_hidden_state.numpy(), atol=1e-5,
                               rtol=0)
    np.testing.assert_allclose(np.asarray(ours[1]), theirs.pooler_output.numpy(), atol=1e-5,
                               rtol=0)
  elif kind == 'span':
    np.testing.assert_allclose(np.asarray(ours[..., 0]), theirs.start_logits.numpy(), atol=1e-5,
                               rtol=0)
    np.testing.assert_allclose(np.asarray(ours[..., 1]), theirs.end_logits.numpy(), atol=1e-5,
                               rtol=0)
  else:
    np.testing.assert_allclose(np.asarray(ours), theirs.logits.numpy(), atol=1e-5, rtol=0)
  if kind in ('classification', 'tagging'):
    assert ref.config.id2label == {0: 'L0', 1: 'L1', 2: 'L2'}
  if kind == 'regression':
    assert ref.config.problem_type == 'regression' and ref.config.num_labels == 1


def test_transformers_round_trip_is_bit_identical(minilm_dir, tmp_path):
  out = export.export(minilm_dir, 'hf', tmp_path / 'hf')
  before = st_numpy.load_file(str(minilm_dir / 'model.safetensors'))
  after = st_numpy.load_file(str(out / 'model.safetensors'))
  before = {k: v for k, v in before.items() if not k.endswith('position_ids')}
  assert set(after) == set(before)
  for name, value in before.items():
    np.testing.assert_array_equal(after[name], value, err_msg=name)
  # sentence-transformers' pooling is kept beside the weights.
  assert json.loads((out / '1_Pooling' / 'config.json').read_text())['pooling_mode_mean_tokens']
  # Its tokenizer files give transformers the same ids as bertjax's WordPiece.
  tok = transformers.AutoTokenizer.from_pretrained(str(out))
  ours = tokenizer.FullTokenizer(out / 'vocab.txt', do_lower_case=True)
  text = 'Héllo, WORLD! The naïve café’s déjà-vu: 3.14 unaffable [SEP] [MASK] [CLS]'
  assert tok(text)['input_ids'][1:-1] == ours.encode(text)
  # Cut where bertjax's embed cuts (sentence-transformers' 256), not at the position table.
  long_text = ' '.join(['unaffable déjà-vu'] * 200)
  assert tok(long_text, truncation=True)['input_ids'][1:-1] == ours.encode(long_text)[:254]


def test_a_fine_tuned_classifier_predicts_the_same_labels_in_transformers(fine_tuned_sst2,
                                                                          tmp_path):
  workdir, data = fine_tuned_sst2
  out = export.export(workdir, 'hf', tmp_path / 'hf')
  result = sources.load(workdir)
  assert result.kind == 'classification' and result.labels == ('0', '1')
  ref = load_reporting(transformers.BertForSequenceClassification, out)
  assert ref.config.id2label == {0: '0', 1: '1'}
  sentences = [line.split('\t')[0] for line in
               (data / 'dev.tsv').read_text().splitlines()[1:]]
  batch = hf_checkpoint_test.hf_batch(out, sentences)
  ours_tok = tokenizer.FullTokenizer(result.vocab_file, do_lower_case=True)
  assert batch['input_ids'][0][1:int(batch['input_mask'][0].sum()) - 1].tolist() == \
      ours_tok.encode(sentences[0])
  cfg = encoder_config.default_config(**result.config)
  module = heads.BertForSequenceClassification(cfg, 2)
  tree = traverse_util.unflatten_dict(result.params, sep='/')  # Unscanned, as cfg.
  ours = np.asarray(module.apply({'params': tree}, **batch))
  with torch.no_grad():
    theirs = ref(**hf_checkpoint_test.torch_inputs(batch)).logits.numpy()
  np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
  assert (ours.argmax(-1) == theirs.argmax(-1)).all()
  assert len(set(ours.argmax(-1).tolist())) == 2  # Both labels are predicted: a real check.
  # A text longer than the run's length, with BERT's special words in it: transformers'
  # tokenizer cuts and splits it as bertjax's predict does, so the probabilities agree.
  tok = transformers.AutoTokenizer.from_pretrained(str(out))
  assert tok.model_max_length == json.loads((workdir / 'config.json').read_text())['data'][
      'max_seq_length']
  odd = ['[SEP] ' + ' [MASK] '.join(sentences) * 4]
  assert len(ours_tok.encode(odd[0])) > tok.model_max_length
  with torch.no_grad():
    probabilities = torch.softmax(ref(**tok(odd, truncation=True, return_tensors='pt')).logits,
                                  -1).numpy()[0]
  predicted = predict.Predictor.from_workdir(workdir).predict(odd)[0]['probabilities']
  np.testing.assert_allclose(probabilities, [predicted['0'], predicted['1']], atol=1e-5)


def test_bad_requests_are_refused_and_nothing_is_lost(minilm_dir, tmp_path):
  out = tmp_path / 'taken'
  out.mkdir()
  (out / 'keep.txt').write_text('mine')
  with pytest.raises(FileExistsError, match='not empty: pass overwrite=True'):
    export.export(minilm_dir, 'hf', out)
  assert (out / 'keep.txt').read_text() == 'mine'
  with pytest.raises(FileExistsError, match='replaces only an earlier export'):
    export.export(minilm_dir, 'hf', out, overwrite=True)
  assert (out / 'keep.txt').read_text() == 'mine'
  earlier = export.export(minilm_dir, 'hf', tmp_path / 'earlier')
  (earlier / 'NOTES.md').write_text('mine, added to the export')
  with pytest.raises(FileExistsError, match='did not write .*NOTES.md'):
    export.export(minilm_dir, 'hf', earlier, overwrite=True)
  assert (earlier / 'NOTES.md').read_text() == 'mine, added to the export'
  (earlier / 'NOTES.md').unlink()
  export.export(minilm_dir, 'tf1', earlier, overwrite=True)  # An earlier export: replaced.
  assert (earlier / 'bert_config.json').exists() and not (earlier / 'model.safetensors').exists()
  downloaded = tmp_path / 'downloaded'  # A model folder fetched by hand is not an export.
  shutil.copytree(minilm_dir, downloaded)
  with pytest.raises(FileExistsError, match='not written by bertjax.export'):
    export.export(earlier, 'hf', downloaded, overwrite=True)
  assert sorted(p.name for p in downloaded.iterdir()) == sorted(
      p.name for p in minilm_dir.iterdir())
  with pytest.raises(FileNotFoundError, match='nowhere does not exist'):
    export.export(tmp_path / 'nowhere', 'hf', tmp_path / 'out')
  assert not [p for p in tmp_path.iterdir() if p.name.startswith('.')]

  _, _, tagger = random_bundle('tagging', minilm_dir)
  with pytest.raises(ValueError, match='--format=tf1 cannot hold .* --format=hf or '
                     '--format=saved_model'):
    format_writers.check(tagger, 'tf1')
  _, _, mean_classifier = random_bundle('classification', minilm_dir)
  mean_classifier.pooling = 'mean'
  for fmt in ('tf1', 'hf'):  # Both read the [CLS] pooler: refused before anything is written.
    with pytest.raises(ValueError, match=f'mean-pooled .* --format={fmt}.* --format=saved_model'
                       ' or --format=sentence_transformers .* --config.pooling=cls'):
      format_writers.check(mean_classifier, fmt)
  format_writers.check(mean_classifier, 'saved_model')
  format_writers.check(mean_classifier, 'sentence_transformers')
  _, _, mean_classifier = random_bundle('classification', minilm_dir)
  mean_classifier.pooling = 'mean'
  for writer in (hf_checkpoint, tf1_checkpoint):  # A library caller skips export's checks.
    with pytest.raises(ValueError, match='mean-pooled .* --format=saved_model'):
      writer.save(mean_classifier, tmp_path / 'direct')
  assert not (tmp_path / 'direct').exists()
  with pytest.raises(ValueError, match=r"uncased vocab .* do_lower_case=False, so .*: drop "
                     r"do_lower_case=False \(the source's own casing\)\.$"):
    export.export(minilm_dir, 'hf', tmp_path / 'cased', do_lower_case=False)
  assert not (tmp_path / 'cased').exists()
  short_vocab = tmp_path / 'short_vocab.txt'
  short_vocab.write_text('[PAD]\n[UNK]\n[CLS]\n[SEP]\n')
  # Not the folder's own vocab.txt: refused, however its size compares.
  with pytest.raises(ValueError, match=r"vocab_file=.*short_vocab.txt is not the vocab .* "
                     r"was trained with \(.*vocab.txt: id 1 is '\[unused0\]' vs '\[UNK\]'\)"):
    export.export(minilm_dir, 'hf', tmp_path / 'short', vocab_file=str(short_vocab))
  assert not (tmp_path / 'short').exists()


def test_a_padded_vocab_is_cut_back_to_the_vocab_file(minilm_dir, tmp_path):
  _, _, result = random_bundle('pretraining', minilm_dir)
  for name in ('bert/embeddings/word_embeddings/embedding', 'mlm/output_bias'):
    value = result.params[name]
    result.params[name] = np.concatenate([value, np.ones((70,) + value.shape[1:], np.float32)])
  hf_checkpoint.save(result, tmp_path)
  ref = load_reporting(transformers.BertForPreTraining, tmp_path)
  assert ref.config.vocab_size == 30522
  assert ref.bert.embeddings.word_embeddings.weight.shape[0] == 30522


def test_the_command_line_writes_tf1_that_imports_back_exactly(minilm_dir, tmp_path):
  command = [sys.executable, '-m', 'bertjax.export', f'--from={minilm_dir}', '--format=tf1',
             f'--output={tmp_path / "tf1"}']
  proc = subprocess.run(command, capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr[-2000:]
  back, original = sources.load(tmp_path / 'tf1'), sources.load(minilm_dir)
  assert back.kind == 'encoder' and set(back.params) == set(original.params)
  for name, value in original.params.items():
    np.testing.assert_array_equal(back.params[name], value, err_msg=name)
  proc = subprocess.run(command, capture_output=True, text=True)  # Again: the output is taken.
  assert proc.returncode == 1 and 'pass --overwrite' in proc.stderr, proc.stderr[-2000:]


def test_transformers_loads_a_multiple_choice_model_with_equal_scores(minilm_dir, tmp_path):
  _, params, result = random_bundle('classification', minilm_dir, num_labels=1)
  module = heads.BertForMultipleChoice(encoder_config.default_config(**result.config))
  result.kind, result.labels = 'multiple_choice', ('0', '1', '2')
  hf_checkpoint.save(result, tmp_path)
  ref = load_reporting(transformers.BertForMultipleChoice, tmp_path)
  contexts = SENTENCES[:2]
  choices = [SENTENCES[1:4], SENTENCES[::-1][:3]]
  flat = hf_checkpoint_test.hf_batch(tmp_path, [c for c in contexts for _ in range(3)],
                                     [x for row in choices for x in row])
  batch = {k: v.reshape(2, 3, -1) for k, v in flat.items()}
  with torch.no_grad():
    theirs = ref(**hf_checkpoint_test.torch_inputs(batch)).logits.numpy()
  ours = np.asarray(module.apply({'params': params}, **batch))
  assert ours.shape == (2, 3)
  np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


def test_an_export_never_goes_over_around_or_into_its_source_or_a_run(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  before = sorted(str(p.relative_to(workdir)) for p in workdir.rglob('*'))
  for output, where in ((workdir, 'is the source'), (workdir / 'hf', 'is inside the source'),
                        (workdir.parent, 'holds the source'),
                        (workdir / 'checkpoints', 'is inside the source')):
    with pytest.raises(FileExistsError, match=where):
      export.export(workdir, 'hf', output, overwrite=True)
  step = sorted((workdir / 'checkpoints').glob('[0-9]*'))[-1]
  with pytest.raises(FileExistsError, match='is the source'):
    export.export(step, 'tf1', step, overwrite=True)
  other_run = tmp_path / 'other_run'
  (other_run / 'checkpoints').mkdir(parents=True)
  (other_run / 'config.json').write_text('{}')
  for output in (other_run, other_run / 'checkpoints' / '9', other_run / 'hf'):
    with pytest.raises(FileExistsError, match='the bertjax run .*other_run'):
      export.export(workdir, 'hf', output, overwrite=True)
  with pytest.raises(ValueError, match="records its labels \\['0', '1'\\].* reorder"):
    export.export(workdir, 'hf', tmp_path / 'relabelled', labels=('1', '0'))
  with pytest.raises(ValueError, match='SavedModel.s maximum length.*tf1 keeps no length'):
    export.export(workdir, 'tf1', tmp_path / 'short', max_seq_length=8)
  assert sorted(str(p.relative_to(workdir)) for p in workdir.rglob('*')) == before
  assert (other_run / 'config.json').read_text() == '{}'
  assert sorted(p.name for p in other_run.iterdir()) == ['checkpoints', 'config.json']
  # Beside the source is where it goes.
  out = export.export(workdir, 'hf', workdir.parent / 'run_hf')
  assert (out / 'model.safetensors').exists()


def test_a_run_whose_config_lost_its_labels_is_refused_by_name(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  run = json.loads((copy / 'config.json').read_text())
  del run['labels']
  (copy / 'config.json').write_text(json.dumps(run))
  with pytest.raises(ValueError, match="config.json does not record its task's kind and labels"):
    export.export(str(copy), 'hf', str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()


def test_a_run_without_its_config_or_with_another_vocab_or_no_length_is_refused(
    fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  swapped = tmp_path / 'swapped.txt'
  words = (copy / 'vocab.txt').read_text().splitlines()
  words[5], words[6] = words[6], words[5]  # The same size: only its hash tells.
  swapped.write_text('\n'.join(words) + '\n')
  with pytest.raises(ValueError, match=r'vocab_file=.*swapped.txt is not the vocab .* was '
                     'trained with .*: drop vocab_file'):
    export.export(str(copy), 'hf', str(tmp_path / 'out'), vocab_file=str(swapped))
  with pytest.raises(ValueError, match=r'max_seq_length=2 leaves no room for a token'):
    export.export(str(copy), 'saved_model', str(tmp_path / 'out'), max_seq_length=2)
  (copy / 'config.json').unlink()  # Its head's kind and labels are gone with it.
  with pytest.raises(ValueError, match=r'holds a task head \(classifier/\) but its run has no '
                     'config.json'):
    export.export(str(copy), 'hf', str(tmp_path / 'out'), vocab_file=str(copy / 'vocab.txt'))
  assert not (tmp_path / 'out').exists()


def test_labels_reordered_in_config_json_are_refused(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  run = json.loads((copy / 'config.json').read_text())
  assert run['labels'] == ['0', '1']
  run['labels'] = ['1', '0']  # Every answer would be the other label.
  (copy / 'config.json').write_text(json.dumps(run))
  with pytest.raises(ValueError, match=r"was saved with the labels \['0', '1'\] \(its head's "
                     r"order\), but the run's config.json lists \['1', '0'\]"):
    export.export(str(copy), 'hf', str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()
  # The fine-tuning job's own eval and predict modes read the run the same way.
  import finetune_runs  # pylint: disable=g-import-not-at-top

  from bertjax.finetune import job  # pylint: disable=g-import-not-at-top
  for mode in ('eval', 'predict'):
    config = finetune_runs.tiny_config(fine_tuned_sst2[1])
    config.mode = mode
    with pytest.raises(ValueError, match=r"config.json lists the labels \['1', '0'\], but task "
                       r"sst2 has \['0', '1'\]: config.json was edited"):
      job.run(config, str(copy))
  assert not (copy / 'predictions').exists() or not any(
      p.name.startswith(('eval_', 'predict_')) for p in (copy / 'predictions').iterdir())


def test_what_an_export_leaves_out_or_caps_is_said(minilm_dir, tmp_path, monkeypatch):
  """Pass AI: a pre-training model written as its encoder alone, and --max_seq_length past the
  model's positions, were said by no line."""
  said = log_records.recorded_warnings(monkeypatch, format_writers)
  for kind, heads_said in (('pretraining', 'mlm, nsp'), ('masked_lm', 'mlm')):
    _, _, result = random_bundle(kind, minilm_dir)
    for fmt in ('saved_model', 'sentence_transformers', 'onnx', 'hf', 'tf1'):
      said.clear()
      format_writers.check(result, fmt)
      if fmt in ('hf', 'tf1'):  # Their pre-training classes hold the heads.
        assert not said, (kind, fmt, said)
      else:
        assert said == [f'random {kind} is a {kind} model: --format={fmt} holds its encoder only, '
                        f'its heads ({heads_said}) are not written; --format=hf or tf1 keeps '
                        'them'], (kind, fmt)
  said.clear()
  format_writers.check(random_bundle('encoder', minilm_dir)[2], 'saved_model')
  assert not said
  said = log_records.recorded_warnings(monkeypatch, export)
  out = export.export(minilm_dir, 'hf', tmp_path / 'hf', max_seq_length=100_000)
  assert said == ["--max_seq_length=100000 is past the model's 512 positions: 512 is used"]
  assert json.loads((out / 'tokenizer_config.json').read_text())['model_max_length'] == 512
