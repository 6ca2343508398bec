"""`bertjax.export --format=onnx`: onnxruntime runs model.onnx on ids that transformers' tokenizer
makes from the files beside it, and its outputs equal bertjax's own (1e-5, float32) for the real
MiniLM, a fine-tuned classifier and every other kind the SavedModel holds; what the format cannot
hold is refused, and the output folder is kept as the other formats keep it."""

import json
import re
import subprocess
import sys

import export_test
from flax import traverse_util
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import onnxruntime
import pytest
import transformers

from bertjax import export
from bertjax.interop import format_writers
from bertjax.interop import onnx_export
from bertjax.interop import sources
from bertjax.model import encoder
from bertjax.model import encoder_config
from bertjax.text import tokenizer
from bertjax.training import kinds

# Accents and casing, CJK, controls and a zero-width space, a long word, one character: a padded
# batch whose rows differ in length.
ODD_TEXTS = ['Héllo, WORLD! The naïve café’s déjà-vu: 3.14', '東京は晴れ。 한국어',
             'tab\there\u200bzero-width\x00', 'unaffable ' * 12, 'a']


def bertjax_outputs(bundle, enc) -> dict:
  """bertjax's own model on transformers-tokenized `enc`, as the kind table's onnx entry names
  the outputs."""
  cfg = encoder_config.default_config(**{**bundle.config, 'dtype': 'float32', 'scan_layers': False,
                                         'attention_impl': 'xla', 'remat_policy': 'none'})
  params = traverse_util.unflatten_dict(bundle.params, sep='/')
  held = kinds.get(bundle.kind).holder('onnx')
  if held.encoder:
    module, params = encoder.BertEncoder(cfg), params['bert']
  else:
    module = kinds.get(bundle.kind).head(cfg, len(bundle.labels), bundle.pooling)
  mask_BxL = enc['attention_mask'].astype(np.int32)
  out = module.apply({'params': params}, enc['input_ids'].astype(np.int32), mask_BxL,
                     enc['token_type_ids'].astype(np.int32), deterministic=True)
  if held.encoder:
    seq_BxLxD, pooled_BxD = (np.asarray(x) for x in out)
    mean_BxD = (seq_BxLxD * mask_BxL[..., None]).sum(1) / mask_BxL.sum(1, keepdims=True)
    return {'sequence_output': seq_BxLxD, 'pooled_output': pooled_BxD,
            'mean_pooled_output': mean_BxD}
  out = np.asarray(out)
  if bundle.kind == 'span':
    return {'start_logits': out[..., 0], 'end_logits': out[..., 1]}
  if bundle.kind == 'regression':
    return {'score': out[:, 0]}
  if bundle.kind == 'tagging':
    return {'logits': out, 'tag_ids': out.argmax(-1)}
  return {'logits': out, 'probabilities': kinds.probabilities(out)}


def run_onnx(folder, texts) -> tuple[dict, dict]:
  """(transformers' tokenization of `texts` by the export's files, onnxruntime's outputs)."""
  tok = transformers.AutoTokenizer.from_pretrained(str(folder))
  enc = dict(tok(texts, padding=True, return_tensors='np'))
  session = onnxruntime.InferenceSession(str(folder / 'model.onnx'),
                                         providers=['CPUExecutionProvider'])
  names = [o.name for o in session.get_outputs()]
  return enc, dict(zip(names, session.run(None, enc), strict=True))


def assert_equal_outputs(bundle, folder, texts):
  enc, theirs = run_onnx(folder, texts)
  ours = bertjax_outputs(bundle, enc)
  assert list(theirs) == json.loads((folder / 'onnx_export.json').read_text())['outputs']
  assert set(theirs) <= set(ours) and len(theirs) >= len(ours) - 1, (list(theirs), list(ours))
  real_BxL = enc['attention_mask'] == 1
  assert not real_BxL.all()  # A padded batch: padding must not change the real tokens' outputs.
  for name, got in theirs.items():
    value = ours[name]
    if got.ndim > 1 and got.shape[1] == real_BxL.shape[1]:  # Per token: the real tokens only.
      got, value = got[real_BxL], value[real_BxL]
    np.testing.assert_allclose(got, value, atol=1e-5, rtol=0, err_msg=name)
  return enc, theirs, ours


@pytest.fixture(scope='module')
def minilm_onnx(minilm_dir, tmp_path_factory):
  return export.export(minilm_dir, 'onnx', tmp_path_factory.mktemp('onnx') / 'minilm')


def test_onnxruntime_equals_bertjax_on_minilm(minilm_dir, minilm_onnx):
  minilm = sources.load(minilm_dir)
  enc, theirs, _ = assert_equal_outputs(minilm, minilm_onnx, ODD_TEXTS)
  # The tokenizer outside the graph gives bertjax's ids (its files are the hf export's).
  ours_tok = tokenizer.FullTokenizer(minilm_onnx / 'vocab.txt', do_lower_case=True)
  for row, text in enumerate(ODD_TEXTS):
    length = int(enc['attention_mask'][row].sum())
    assert enc['input_ids'][row, 1:length - 1].tolist() == ours_tok.encode(text), text
  assert theirs['sequence_output'].shape == (*enc['input_ids'].shape, 384)
  # Batch and sequence axes are dynamic: another batch size and length, and pairs.
  assert_equal_outputs(minilm, minilm_onnx, ['one', 'two words here'])
  session = onnxruntime.InferenceSession(str(minilm_onnx / 'model.onnx'),
                                         providers=['CPUExecutionProvider'])
  assert [(i.name, i.shape, i.type) for i in session.get_inputs()] == [
      (name, ['batch', 'sequence'], 'tensor(int64)') for name in onnx_export.INPUTS]
  meta = json.loads((minilm_onnx / 'onnx_export.json').read_text())
  assert meta['kind'] == 'encoder' and meta['opset'] == onnx_export.OPSET
  assert meta['outputs'] == ['sequence_output', 'pooled_output', 'mean_pooled_output']


def test_every_other_kind_the_saved_model_holds_runs_equal(minilm_dir, tmp_path):
  out = tmp_path / 'out'
  for kind in ('regression', 'span', 'tagging', 'masked_lm'):
    _, _, bundle = export_test.random_bundle(kind, minilm_dir, num_labels=3)
    # One folder, each export replacing the one before (--overwrite replaces an earlier export).
    onnx_export_dir = export.export(bundle_source(bundle, tmp_path), 'onnx', out,
                                    overwrite=kind != 'regression')
    written = json.loads((onnx_export_dir / 'onnx_export.json').read_text())
    assert written['kind'] == kind and written['labels'] == list(bundle.labels)
    _, theirs, _ = assert_equal_outputs(bundle, out, ODD_TEXTS[:3] + ['The king , he said .'])
    if kind == 'masked_lm':  # transformers' BertForMaskedLM has no pooler: nothing to serve.
      assert 'pooled_output' not in theirs and 'mean_pooled_output' in theirs
  assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith('.')) == []


def bundle_source(bundle, tmp_path):
  """`bundle` written as a transformers folder: a source export.export reads back."""
  from bertjax.interop import hf_checkpoint  # pylint: disable=g-import-not-at-top
  folder = tmp_path / f'source_{bundle.kind}'
  folder.mkdir()
  hf_checkpoint.save(bundle, folder)
  return folder


def run_export(*flags):
  proc = subprocess.run([sys.executable, '-m', 'bertjax.export', *flags], capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def test_the_command_exports_a_fine_tuned_classifier_that_onnxruntime_runs_equal(
    fine_tuned_sst2, tmp_path):
  workdir, data = fine_tuned_sst2
  out = tmp_path / 'sst2'
  proc = run_export(f'--from={workdir}', '--format=onnx', f'--output={out}')
  printed = proc.stdout.splitlines()
  step = max(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit())
  assert re.fullmatch(rf'export finished in ([0-9.]+ s|\d+m\d\ds): step {step}, kind '
                      rf'classification, layers '
                      rf'\d+; onnx {re.escape(str(out))}', printed[-1]), printed[-1]
  assert 'Loading weights' not in proc.stderr and 'torchvision' not in proc.stderr, proc.stderr
  # The lines it prints load and run it as they say.
  assert printed[0] == 'load it with:', printed
  code = '\n'.join(line[2:] for line in printed[1:6])
  namespace = {}
  exec(code, namespace)  # noqa: S102  (the printed lines, run as a user would)
  assert namespace['probabilities'].shape == (1, 2) and namespace['logits'].shape == (1, 2)

  sst2 = sources.load(workdir)
  sentences = [line.split('\t')[0] for line in (data / 'dev.tsv').read_text().splitlines()[1:]]
  enc, theirs, _ = assert_equal_outputs(sst2, out, sentences + ODD_TEXTS[:2])
  assert len(set(theirs['logits'][:len(sentences)].argmax(-1).tolist())) == 2  # A real check.
  meta = json.loads((out / 'onnx_export.json').read_text())
  assert meta['labels'] == list(sst2.labels) == ['0', '1'] and meta['kind'] == 'classification'
  assert enc['input_ids'].shape[0] == len(sentences) + 2


def test_what_onnx_cannot_hold_is_refused_and_nothing_is_lost(minilm_dir, minilm_onnx, tmp_path,
                                                              monkeypatch):
  _, _, choices = export_test.random_bundle('classification', minilm_dir)
  choices.kind = 'multiple_choice'
  with pytest.raises(ValueError, match=r'--format=onnx cannot hold its head .*\[B, C, L\].* '
                     'use --format=hf or --format=sentence_transformers'):
    format_writers.check(choices, 'onnx')
  with pytest.raises(ValueError, match='cannot hold its head'):
    onnx_export.save(choices, tmp_path / 'direct')  # A library caller skips export's checks.
  _, _, mean_classifier = export_test.random_bundle('classification', minilm_dir)
  mean_classifier.pooling = 'mean'
  with pytest.raises(ValueError, match='mean-pooled .* --format=saved_model'):
    onnx_export.save(mean_classifier, tmp_path / 'direct')
  assert not (tmp_path / 'direct').exists()

  # An existing folder is never lost: refused without --overwrite, and with it unless it is an
  # earlier export.
  taken = tmp_path / 'taken'
  taken.mkdir()
  (taken / 'keep.txt').write_text('mine')
  with pytest.raises(FileExistsError, match='not empty: pass overwrite=True'):
    export.export(minilm_dir, 'onnx', taken)
  with pytest.raises(FileExistsError, match='replaces only an earlier export'):
    export.export(minilm_dir, 'onnx', taken, overwrite=True)
  assert [p.name for p in taken.iterdir()] == ['keep.txt']
  (minilm_onnx / 'NOTES.md').write_text('mine, added to the export')
  try:
    with pytest.raises(FileExistsError, match='did not write .*NOTES.md'):
      export.export(minilm_dir, 'onnx', minilm_onnx, overwrite=True)
  finally:
    (minilm_onnx / 'NOTES.md').unlink()
  with pytest.raises(FileExistsError, match='is the source'):
    export.export(minilm_onnx, 'onnx', minilm_onnx, overwrite=True)

  # Without the extra: said first, before the source is even looked for.
  monkeypatch.setattr(onnx_export, 'NEEDS', (('no_such_module_bertjax', 'a test'),))
  with pytest.raises(ValueError, match=r'needs no_such_module_bertjax \(a test\): pip install '
                     r'bertjax\[onnx\]'):
    export.export(tmp_path / 'nowhere', 'onnx', tmp_path / 'out')


def test_bertjax_imports_without_torch():
  code = ('import sys; import bertjax.export; from bertjax.interop import onnx_export; '
          "print(sorted({'torch', 'transformers', 'onnx', 'onnxscript'} & set(sys.modules)))")
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip() == '[]'
