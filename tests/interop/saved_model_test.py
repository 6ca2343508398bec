"""The SavedModel export, served from raw strings in a fresh process where JAX cannot be imported
(only tensorflow and tensorflow-text), against bertjax and the published golden values."""

import json
import os
import re
import subprocess
import sys

import export_test
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax import export
from bertjax.finetune.tasks import conll
from bertjax.interop import saved_model
from bertjax.interop import sources
from bertjax.text import fast_tokenizer
from bertjax.text import tokenizer

GOLDEN = ['The weather is lovely today.', "It's so sunny outside!", 'He drove to the stadium.']
# all-MiniLM-L6-v2's published cosine similarities of GOLDEN (sentence-transformers).
GOLDEN_COSINE = np.array([[1, .6660, .1046], [.6660, 1, .1411], [.1046, .1411, 1]])

SERVE = r'''
import importlib.abc, json, sys
class NoJax(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name.split('.')[0] in ('jax', 'jaxlib', 'flax', 'bertjax'):
      raise ImportError(name + ' may not be imported here')
sys.meta_path.insert(0, NoJax())
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
requests = json.load(open(sys.argv[1]))
out, models = {}, {}
for name, (path, signature, inputs) in requests.items():
  if path not in models:  # Loaded once, however many requests it serves.
    models[path] = tf.saved_model.load(path)
  fn = models[path].signatures[signature]
  result = fn(**{k: tf.constant(v) for k, v in inputs.items()})
  out[name] = {k: v.numpy().tolist() if v.dtype != tf.string else
               [[x.decode() for x in row] if isinstance(row, np.ndarray) else row.decode()
                for row in v.numpy()] for k, v in result.items()}
described = lambda specs: ', '.join(f'{k}: {v.dtype.name} {v.shape.as_list()}'  # noqa: E731
                                    for k, v in sorted(specs.items()))
signatures = {path: {name: (described(fn.structured_input_signature[1]),
                            described(fn.structured_outputs))
                     for name, fn in model.signatures.items()}
              for path, model in models.items()}
json.dump({'outputs': out, 'signatures': signatures}, open(sys.argv[2], 'w'))
'''


def serve_all(requests: dict, tmp_path) -> tuple[dict, dict]:
  """Runs each (SavedModel, signature, inputs) in one fresh TF-only process, each SavedModel
  loaded once: (the outputs by request name, each SavedModel's signatures by its path as
  {name: (inputs, outputs)}, each 'name: dtype shape, ...' as the loaded signature has them)."""
  (tmp_path / 'requests.json').write_text(json.dumps(requests))
  (tmp_path / 'serve.py').write_text(SERVE)
  proc = subprocess.run([sys.executable, str(tmp_path / 'serve.py'), str(tmp_path /
                        'requests.json'), str(tmp_path / 'out.json')], capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  written = json.loads((tmp_path / 'out.json').read_text())
  return written['outputs'], written['signatures']


def serve(requests: dict, tmp_path) -> dict:
  """The outputs by request name of serve_all."""
  return serve_all(requests, tmp_path)[0]


@pytest.fixture(scope='module')
def minilm_command(minilm_dir, tmp_path_factory):
  """MiniLM's SavedModel as `python -m bertjax.export` writes it: (its folder, the process)."""
  out = tmp_path_factory.mktemp('command') / 'minilm'
  return out, run_export(f'--from={minilm_dir}', '--format=saved_model', f'--output={out}')


@pytest.fixture(scope='module')
def exported(minilm_dir, minilm_command, fine_tuned_sst2, tmp_path_factory):
  root = tmp_path_factory.mktemp('saved_models')
  paths = {'minilm': minilm_command[0],  # The command's; the others written in this process.
           'sst2': export.export(fine_tuned_sst2[0], 'saved_model', root / 'sst2')}
  bundles = {}
  for kind in ('span', 'tagging'):
    _, _, bundles[kind] = export_test.random_bundle(kind, minilm_dir, num_labels=3)
    (root / kind).mkdir()
    saved_model.save(bundles[kind], root / kind)
    paths[kind] = root / kind
  return {k: str(v) for k, v in paths.items()}, bundles


# The requests of the tests below, served together by one process (`served`).
CONTEXT = 'The king doth speak of his lord in the great hall, and my heart is glad.'
QUESTIONS = ['Who speaks?', 'Where does he speak of his lord?']
# The last: words split at a no-break space, an ideographic space and U+001D (Python's
# str.split splits there, tf.strings.split does not), a word of a zero-width space only (no
# wordpieces: [UNK]) and words holding a NUL and a soft hyphen (dropped inside the word).
TAGGED = ['The king speaks , and all listen .', 'Fair is foul',
          'The\u00a0king \u200b speaks\x00 of\u3000his lo\u00adrd\x1dtoday']
# Accents, punctuation, CJK, controls: bertjax's fast path or the reference tokenizer's lines;
# words past and at MiniLM's 100-character limit ([UNK], pieces), in two-byte scripts too.
TOKENIZER_TEXTS = ['Héllo, WORLD! naïve café’s déjà-vu: 3.14', '東京は晴れ。',
                   'tab\there\u200bzero-width', 'ÀÉÎÕÜ ñ ß ﬁ', 'a' * 120, 'ab' * 50,
                   f'{"привет" * 16}пр, {"привет" * 17}.', 'Ελλάδα' * 17]


def sst2_sentences(data) -> list[str]:
  return [line.split('\t')[0] for line in (data / 'dev.tsv').read_text().splitlines()[1:]]


@pytest.fixture(scope='module')
def served(exported, fine_tuned_sst2, tmp_path_factory):
  """This file's requests, served by one fresh process without JAX: serve_all's (outputs,
  signatures)."""
  paths, _ = exported
  return serve_all({
      'golden': (paths['minilm'], 'serving_default', {'text': GOLDEN}),
      'pairs': (paths['minilm'], 'pairs', {'text_a': GOLDEN, 'text_b': GOLDEN[::-1]}),
      'tokenizer': (paths['minilm'], 'serving_default', {'text': TOKENIZER_TEXTS}),
      'sst2': (paths['sst2'], 'serving_default', {'text': sst2_sentences(fine_tuned_sst2[1])}),
      'span': (paths['span'], 'serving_default',
               {'question': QUESTIONS, 'context': [CONTEXT] * 2}),
      'tagging': (paths['tagging'], 'serving_default', {'text': TAGGED}),
      # A text past the model's length: a gather out of range failed the whole batch.
      'long': (paths['tagging'], 'serving_default', {'text': [' '.join(['king'] * 200)]}),
  }, tmp_path_factory.mktemp('served'))


@pytest.fixture(scope='module')
def minilm(minilm_dir):
  return sources.load(minilm_dir)


def ids_of(vocab_file, texts, pairs=None, max_len=128, max_chars_per_word=200):
  """[CLS] a [SEP] (b [SEP]) ids by bertjax's tokenizer, padded to the longest."""
  tok = tokenizer.FullTokenizer(vocab_file, do_lower_case=True,
                                max_input_chars_per_word=max_chars_per_word)
  cls, sep = tok.vocab['[CLS]'], tok.vocab['[SEP]']
  rows, segs = [], []
  for i, text in enumerate(texts):
    a = tok.encode(text)
    b = tok.encode(pairs[i]) if pairs else None
    if b is None:
      row, seg = [cls, *a[:max_len - 2], sep], None
    else:
      while len(a) + len(b) > max_len - 3:
        (a if len(a) > len(b) else b).pop()
      row = [cls, *a, sep, *b, sep]
      seg = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    rows.append(row)
    segs.append(seg or [0] * len(row))
  length = max(map(len, rows))
  batch = {'input_ids': np.zeros((len(rows), length), np.int32)}
  batch['input_mask'] = np.zeros_like(batch['input_ids'])
  batch['segment_ids'] = np.zeros_like(batch['input_ids'])
  for i, (row, seg) in enumerate(zip(rows, segs, strict=True)):
    batch['input_ids'][i, :len(row)] = row
    batch['input_mask'][i, :len(row)] = 1
    batch['segment_ids'][i, :len(row)] = seg
  return batch


def test_saved_models_serve_raw_strings_in_a_process_without_jax(exported, served, minilm,
                                                                fine_tuned_sst2):
  _, bundles = exported
  workdir, data = fine_tuned_sst2
  sentences = sst2_sentences(data)
  context, questions, tagged = CONTEXT, QUESTIONS, TAGGED
  out, _ = served

  # The sentence-transformers golden matrix from raw strings.
  mean = np.array(out['golden']['mean_pooled_output'])
  mean /= np.linalg.norm(mean, axis=1, keepdims=True)
  np.testing.assert_allclose(mean @ mean.T, GOLDEN_COSINE, atol=1e-3)
  # Every output equals bertjax's on bertjax's own ids, single texts and pairs alike.
  for name, pairs in (('golden', None), ('pairs', GOLDEN[::-1])):
    batch = ids_of(minilm.vocab_file, GOLDEN, pairs)
    np.testing.assert_array_equal(np.array(out[name]['input_mask']), batch['input_mask'])
    ours = saved_model.numpy_outputs(minilm, batch)
    for key in ('sequence_output', 'pooled_output', 'mean_pooled_output'):
      np.testing.assert_allclose(np.array(out[name][key]), ours[key], atol=1e-4, err_msg=key)

  # The fine-tuned classifier: probabilities within 1e-4 of bertjax's, and its label names.
  sst2 = sources.load(workdir)
  probabilities = saved_model.numpy_outputs(sst2, ids_of(sst2.vocab_file, sentences,
                                                         max_len=16))['probabilities']
  np.testing.assert_allclose(np.array(out['sst2']['probabilities']), probabilities, atol=1e-4)
  assert out['sst2']['label'] == [sst2.labels[i] for i in probabilities.argmax(-1)]
  assert set(out['sst2']['label']) == {'0', '1'}

  # SQuAD: the answer is the context's text of the best span bertjax's logits give.
  span = bundles['span']
  batch = ids_of(span.vocab_file, questions, [context] * 2)
  logits = saved_model.numpy_outputs(span, batch)
  tok = tokenizer.FullTokenizer(span.vocab_file, do_lower_case=True)
  for row, answer in enumerate(out['span']['answer']):
    first = int((batch['segment_ids'][row] == 0).sum() - (batch['input_mask'][row] == 0).sum())
    last = int(batch['input_mask'][row].sum()) - 1  # The final [SEP].
    best = max(((i, j) for i in range(first, last) for j in range(i, min(i + 30, last))),
               key=lambda ij: logits['start_logits'][row, ij[0]] + logits['end_logits'][row,
                                                                                       ij[1]])
    assert answer in context
    assert tok.encode(answer) == batch['input_ids'][row, best[0]:best[1] + 1].tolist()

  # Tagging: the words as given, each with the tag of its first piece, as bertjax's predict
  # splits and aligns them (conll: str.split, a word without pieces read as [UNK]).
  tagger = bundles['tagging']
  sentences = [conll.Sentence(tuple(t.split()), (None,) * len(t.split())) for t in tagged]
  features, alignment = conll.convert_sentences(
      sentences, tok, min(128, tagger.config['max_position_embeddings']), tagger.labels)
  assert len(features['input_ids']) == len(tagged)  # One row each: nothing cut.
  tag_ids = saved_model.numpy_outputs(tagger, {k: features[k] for k in (
      'input_ids', 'input_mask', 'segment_ids')})['tag_ids']
  want = conll.word_predictions(np.eye(len(tagger.labels))[tag_ids], features, alignment,
                                sentences, tagger.labels)
  assert len(sentences[2].words) == 8 and want[2][2] in tagger.labels  # The [UNK] word's tag.
  for row, sentence in enumerate(sentences):
    n = len(sentence.words)
    assert out['tagging']['words'][row][:n] == list(sentence.words)
    tags = out['tagging']['tags'][row]  # Padded with '' to the batch's most words.
    assert tags == want[row] + [''] * (len(tags) - n), sentence.words
  (words,), (tags,) = out['long']['words'], out['long']['tags']
  # [CLS], the words' pieces that fit, [SEP] (at most its positions, fewer than 128 here).
  length = min(128, tagger.config['max_position_embeddings'])
  kept = sum(1 + n * len(tok.encode('king')) < length - 1 for n in range(200))
  assert len(words) == 200 and 20 < kept < 200 and tags[kept:] == [''] * (200 - kept)
  assert set(tags[:kept]) <= set(tagger.labels)


def test_saved_model_tokenizer_is_bertjax_fast_path(minilm, served):
  """The in-graph ids equal bertjax's on varied real text (accents, punctuation, CJK, controls)."""
  texts, result = TOKENIZER_TEXTS, minilm
  tf, _ = fast_tokenizer.import_tf()
  got = served[0]['tokenizer']
  fast = fast_tokenizer.FastTokenizer(result.vocab_file, do_lower_case=True)
  routed = fast.tf_needs_reference(tf.constant(texts)).numpy()
  mask = np.array(got['input_mask'])
  batch = ids_of(result.vocab_file, texts, max_chars_per_word=result.max_chars_per_word)
  seq = np.array(got['sequence_output'])
  ours = saved_model.numpy_outputs(result, batch)['sequence_output']
  for row in range(len(texts)):
    if routed[row]:
      continue  # Lines bertjax routes to the reference tokenizer (documented difference).
    assert mask[row].sum() == batch['input_mask'][row].sum(), texts[row]
    np.testing.assert_allclose(seq[row][mask[row] == 1], ours[row][mask[row] == 1], atol=1e-4)
  # The first three take the fast path (a real check); ß and ﬁ are routed (FastBertTokenizer
  # folds them to ss and fi, the original does not): the SavedModel cannot route them.
  assert not routed[:3].any() and routed[3] and not routed[4:].any()



TF_START_UP = ('oneDNN', 'InitializeLog', 'cuInit', 'tensorflow/core', 'I0000')


def run_export(*flags):
  """The command as a user's shell runs it (no TF_CPP_MIN_LOG_LEVEL of the tests' own)."""
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  proc = subprocess.run([sys.executable, '-m', 'bertjax.export', *flags], capture_output=True,
                        text=True, timeout=600, env=env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def test_the_command_prints_how_to_load_it_and_ends_on_its_summary(minilm_dir, minilm_command,
                                                                  served, tmp_path):
  out, proc = minilm_command
  lines = (proc.stdout + proc.stderr).splitlines()
  assert not [line for line in lines if any(s in line for s in TF_START_UP)], lines
  printed = proc.stdout.splitlines()
  assert re.fullmatch(r'export finished in ([0-9.]+ s|\d+m\d\ds): kind encoder, layers 6, '
                      r'max_seq_length '
                      f'256; saved_model {re.escape(str(out))}', printed[-1]), printed[-1]
  assert printed[:4] == ['load it with:', '  import tensorflow as tf',
                         "  import tensorflow_text  # registers the tokenizer's ops",
                         f"  model = tf.saved_model.load('{out}')"]
  # Each signature as the written SavedModel has it, loaded the way the lines say (by the
  # serving process: tensorflow and tensorflow_text imported, tf.saved_model.load).
  signatures = served[1][str(out)]
  assert sorted(signatures) == ['pairs', 'serving_default']
  for name, (inputs, outputs) in signatures.items():
    assert f'  {name}({inputs}) -> {outputs}' in printed, (name, printed)
  assert '  serving_default(text: string [None]) -> input_mask: int32 [None, None], ' \
         'mean_pooled_output: float32 [None, 384]' in '\n'.join(printed)

  # tf1 too: quiet by default, the held lines shown at --verbosity=1.
  proc = run_export(f'--from={minilm_dir}', '--format=tf1', f'--output={tmp_path / "tf1"}')
  lines = (proc.stdout + proc.stderr).splitlines()
  assert not [line for line in lines if any(s in line for s in TF_START_UP)], lines
  assert proc.stdout.splitlines()[-1].endswith(f'; tf1 {tmp_path / "tf1"}')
  proc = run_export(f'--from={minilm_dir}', '--format=tf1', f'--output={tmp_path / "tf1"}',
                    '--overwrite', '--verbosity=1')
  assert [line for line in proc.stderr.splitlines() if any(s in line for s in TF_START_UP)]
