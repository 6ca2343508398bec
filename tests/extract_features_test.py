"""extract_features: the original's flags and JSON, equal to transformers' hidden states."""

import io
import json
import os
import re
import shutil
import subprocess
import sys
import types

from flax import traverse_util
import log_records
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest
import torch
import transformers

from bertjax import export
from bertjax import extract_features
from bertjax.interop import sources
from bertjax.text import vocab_files

LINES = ['The weather is lovely today.', "It's so sunny outside! ||| He drove to the stadium.",
         'A man is playing a guitar on a stage in front of a large, cheering crowd at night.']


def test_features_equal_transformers_hidden_states(minilm_dir, tmp_path):
  (tmp_path / 'in.txt').write_text('\n'.join(LINES) + '\n')
  n = extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / 'out.jsonl',
                           max_seq_length=16, batch_size=2)
  # The third line is longer than 16 tokens: counted, and named (session 56).
  assert (n.lines, n.cut, n.cut_first) == (3, 1, (3,))
  rows = [json.loads(line) for line in (tmp_path / 'out.jsonl').read_text().splitlines()]
  assert n.lines == len(rows) == 3 and [r['linex_index'] for r in rows] == [0, 1, 2]
  tok = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
  ref = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
  for line, row in zip(LINES, rows, strict=True):
    a, _, b = line.partition(' ||| ')
    enc = tok(a, b or None, truncation='longest_first', max_length=16, return_tensors='pt')
    with torch.no_grad():
      states = ref(**enc, output_hidden_states=True).hidden_states
    tokens = tok.convert_ids_to_tokens(enc['input_ids'][0])
    assert [f['token'] for f in row['features']] == tokens
    for t, feature in enumerate(row['features']):
      assert [layer['index'] for layer in feature['layers']] == [-1, -2, -3, -4]
      for layer in feature['layers']:
        np.testing.assert_allclose(layer['values'], states[layer['index']][0, t].numpy(),
                                   atol=1e-4)
  assert len(rows[2]['features']) == 16  # Truncated to max_seq_length, [SEP] last.


def test_concat_last_four_layers_and_the_command_line(minilm_dir, tmp_path):
  model = sources.load(minilm_dir)
  params = traverse_util.unflatten_dict(
      {k[len('bert/'):]: v for k, v in model.encoder_params().items()}, sep='/')
  tok = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
  _, batch, _ = extract_features.encode(
      vocab_files.for_model(model.vocab_file, True), [(LINES[0], None)], 12)
  features = np.asarray(extract_features.concat_last_layers(model.config, params, batch))
  assert features.shape == (1, 12, 4 * 384)
  # Session 54's pass: n=10 of 6 layers gave the embeddings, then the embeddings again.
  for n in (0, 7, 10, 2.0):
    with pytest.raises(ValueError, match=rf"^n={n}: the last n of the model's 6 layers, 1 to 6"):
      extract_features.concat_last_layers(model.config, params, batch, n)
  enc = tok(LINES[0], return_tensors='pt')
  with torch.no_grad():
    states = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()(
        **enc, output_hidden_states=True).hidden_states
  length = enc['input_ids'].shape[1]
  want = np.concatenate([states[-i][0].numpy() for i in range(1, 5)], -1)
  np.testing.assert_allclose(features[0, :length], want, atol=1e-4)

  (tmp_path / 'in.txt').write_text(LINES[1] + '\n')
  proc = subprocess.run([sys.executable, '-m', 'bertjax.extract_features',
                         f'--input_file={tmp_path / "in.txt"}',
                         f'--output_file={tmp_path / "o.jsonl"}', f'--init={minilm_dir}',
                         '--layers=-1', '--max_seq_length=16'], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr[-2000:]
  row = json.loads((tmp_path / 'o.jsonl').read_text())
  assert [f['token'] for f in row['features']][:2] == ['[CLS]', 'it']
  assert ': inputs 1, layers -1; features ' in proc.stdout.splitlines()[-1]  # Nothing cut.
  (tmp_path / 'in.txt').write_text(LINES[2] + '\n')
  again = [sys.executable, '-m', 'bertjax.extract_features', f'--input_file={tmp_path / "in.txt"}',
           f'--output_file={tmp_path / "o.jsonl"}', f'--init={minilm_dir}', '--layers=-1',
           '--max_seq_length=16']
  # An existing output is replaced only with --overwrite (it was replaced without a word).
  kept = (tmp_path / 'o.jsonl').read_text()
  proc = subprocess.run(again, capture_output=True, text=True)
  assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
      f'error: --output_file={tmp_path / "o.jsonl"} exists: pass --overwrite to replace it, or '
      'another --output_file.'), proc.stderr[-2000:]
  assert (tmp_path / 'o.jsonl').read_text() == kept
  proc = subprocess.run([*again, '--overwrite'], capture_output=True, text=True)
  assert ': inputs 1, layers -1, cut 1 (longer than --max_seq_length=16: input 1); features ' in (
      proc.stdout.splitlines()[-1]), proc.stderr[-2000:]
  proc = subprocess.run([sys.executable, '-m', 'bertjax.extract_features',
                         f'--input_file={tmp_path / "missing.txt"}',
                         f'--output_file={tmp_path / "o.jsonl"}', f'--init={minilm_dir}',
                         '--do_lower_case=false', '--overwrite'], capture_output=True, text=True)
  # The fix named is this command's flag (it named create_pretraining_data's and fine-tuning's).
  assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].endswith(
      "is an uncased vocab (no upper-case word tokens) but do_lower_case=False, so capitalised "
      "words would become [UNK] or odd pieces: pass --do_lower_case for an uncased model, or "
      "drop the flag to read the model's own casing"), proc.stderr[-2000:]


def test_bad_layers_and_lengths_are_refused(minilm_dir, tmp_path):
  (tmp_path / 'in.txt').write_text('hello\n')
  with pytest.raises(ValueError, match='out of range for a 6-layer model'):
    extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / 'o', layers=(-9,))
  with pytest.raises(ValueError, match='exceeds the model'):
    extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / 'o',
                         max_seq_length=1024)
  (tmp_path / 'bad.txt').write_bytes(b'caf\xe9\n')
  with pytest.raises(ValueError, match='not UTF-8'):
    extract_features.run(str(minilm_dir), tmp_path / 'bad.txt', tmp_path / 'o')
  # Session 54's pass: the API took what the flags refuse (batch_size=-3 wrote an empty file
  # and returned success; layers=(True,) wrote "index": true); a name past 255 bytes failed
  # after the work.
  for keyword, value, error in (
      ('batch_size', -3, r'^--batch_size=-3: pass a whole number, 1 or more\.$'),
      ('batch_size', 0, r'^--batch_size=0: pass a whole number'),
      ('max_seq_length', 2, r'^--max_seq_length=2: pass a whole number, 3 or more'),
      ('layers', (), r'^--layers=\(\): pass layer numbers'),
      ('layers', (True,), r'^--layers=\(True,\): pass layer numbers'),
      ('layers', (-1.0,), r'^--layers=\(-1\.0,\): pass layer numbers'),
      ('layers', np.array([-1, 0]), r'^--layers=array\(\[-1,  0\]\): pass layer numbers')):
    with pytest.raises((TypeError, ValueError), match=error):
      extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / 'o',
                           **{keyword: value})
  with pytest.raises(ValueError, match=r'^--output_file=.*: the name z{24}\.\.\. is 256 bytes '
                     'long, past the 255 a file name may have on this file system'):
    extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / ('z' * 250 + '.jsonl'))
  assert sorted(os.listdir(tmp_path)) == ['bad.txt', 'in.txt']  # Nothing written.


def test_an_output_that_would_lose_the_input_or_a_run_is_refused_first(minilm_dir, tmp_path):
  source = tmp_path / 'in.txt'
  source.write_text('The weather is lovely today.\n')
  with pytest.raises(FileExistsError, match='is the input it is made from'):
    extract_features.run(str(minilm_dir), source, source)
  assert source.read_text() == 'The weather is lovely today.\n'
  with pytest.raises(IsADirectoryError, match='is a folder'):
    extract_features.run(str(minilm_dir), source, tmp_path)
  run_step = tmp_path / 'run' / 'checkpoints' / '10'
  run_step.mkdir(parents=True)
  with pytest.raises(FileExistsError, match="inside a run's checkpoints"):
    extract_features.run(str(minilm_dir), source, run_step / 'features.jsonl')
  assert not list(run_step.iterdir()) and not [p for p in tmp_path.iterdir()
                                               if p.name.startswith('.')]
  model = tmp_path / 'model'  # The vocab of the model it reads, or any file of a model folder.
  shutil.copytree(minilm_dir, model)
  for output in (model / 'vocab.txt', model / 'config.json'):
    with pytest.raises(FileExistsError, match='is the input|exists in a transformers model'):
      extract_features.run(str(model), source, output, vocab_file=str(model / 'vocab.txt'))
  assert (model / 'vocab.txt').read_bytes() == (minilm_dir / 'vocab.txt').read_bytes()
  # A new file there too (hostile pass of 2026-12-01: features written beside the weights they
  # came from, which a later export --overwrite of that folder then refused).
  with pytest.raises(FileExistsError, match=rf"features.jsonl would be in a transformers model "
                     rf"\({model}\): a model's folder holds its own files only"):
    extract_features.run(str(model), source, model / 'features.jsonl')
  assert not (model / 'features.jsonl').exists()


def test_layers_that_are_not_numbers_name_the_flag():
  assert extract_features._layers('-1,-2') == (-1, -2)
  with pytest.raises(ValueError, match="--layers='a,b': comma-separated layer numbers"):
    extract_features._layers('a,b')


def test_the_command_line_ends_with_its_summary_and_holds_tensorflows_start_up(minilm_dir,
                                                                              tmp_path):
  tf1 = export.export(minilm_dir, 'tf1', tmp_path / 'tf1')  # Read through TensorFlow.
  (tmp_path / 'in.txt').write_text('\n'.join(LINES[:2]) + '\n')
  out = tmp_path / 'o.jsonl'
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  for model in ([f'--init={tf1}'],
                [f'--init_checkpoint={tf1}/bert_model.ckpt', f'--vocab_file={tf1}/vocab.txt',
                 f'--bert_config_file={tf1}/bert_config.json']):
    proc = subprocess.run([sys.executable, '-m', 'bertjax.extract_features', *model,
                           f'--input_file={tmp_path / "in.txt"}', f'--output_file={out}',
                           '--layers=-1,0', '--max_seq_length=16', '--overwrite'],
                          capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.splitlines()[-1]
    assert last.startswith('extract_features finished in '), proc.stdout
    assert last.endswith(f': inputs 2, layers -1,0; features {out}'), last
    for start_up in ('oneDNN', 'InitializeLog', 'cuInit', 'tensorflow/core'):
      assert start_up not in proc.stderr, proc.stderr
    assert len(out.read_text().splitlines()) == 2


def test_layers_and_the_separator_mean_what_they_mean_in_the_original(minilm_dir, tmp_path):
  """google-research/bert's --layers index all_encoder_layers: 0 is the first Transformer
  layer's output (transformers' hidden_states[1]), -1 the last; the embeddings are none. Its
  greedy `^(.*) \\|\\|\\| (.*)$` splits `a ||| b ||| c` at the last separator."""
  source = tmp_path / 'in.txt'
  source.write_text('the king ||| doth speak ||| of love\n')
  assert extract_features.read_examples(source) == [('the king ||| doth speak', 'of love')]
  extract_features.run(str(minilm_dir), source, tmp_path / 'o.jsonl', layers=(0, 5, -1, -6),
                       max_seq_length=24)
  [row] = [json.loads(line) for line in (tmp_path / 'o.jsonl').read_text().splitlines()]
  tok = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
  enc = tok('the king ||| doth speak', 'of love', return_tensors='pt')
  with torch.no_grad():
    states = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()(
        **enc, output_hidden_states=True).hidden_states
  assert [f['token'] for f in row['features']] == tok.convert_ids_to_tokens(enc['input_ids'][0])
  for t, feature in enumerate(row['features']):
    assert [layer['index'] for layer in feature['layers']] == [0, 5, -1, -6]
    for layer, want in zip(feature['layers'], (1, 6, 6, 1), strict=True):
      np.testing.assert_allclose(layer['values'], states[want][0, t].numpy(), atol=1e-4)
  with pytest.raises(ValueError, match=r'--layers \[6\] out of range for a 6-layer model: 0 to '
                                       r'5 or -6 to -1'):
    extract_features.run(str(minilm_dir), source, tmp_path / 'o2.jsonl', layers=(6,))


def test_pairs_for_a_model_without_a_second_segment_are_refused(minilm_dir, tmp_path):
  # type_vocab_size 1: segment id 1 was clamped to segment A's row, silently.
  config = transformers.BertConfig.from_pretrained(minilm_dir)
  config.type_vocab_size, config.num_hidden_layers = 1, 1
  transformers.BertModel(config).save_pretrained(tmp_path / 'one_segment')
  shutil.copy(minilm_dir / 'vocab.txt', tmp_path / 'one_segment' / 'vocab.txt')
  (tmp_path / 'in.txt').write_text('a good film\nthe film is good ||| the movie was bad\n')
  with pytest.raises(ValueError, match=rf'^the inputs of {tmp_path}/in.txt \(line 2 first\) hold '
                     r'text pairs \(segment id 1\), but the model has type_vocab_size=1'):
    extract_features.run(str(tmp_path / 'one_segment'), tmp_path / 'in.txt', tmp_path / 'o',
                         layers=(-1,))
  assert not (tmp_path / 'o').exists()
  (tmp_path / 'single.txt').write_text('a good film\n')  # Single texts are read as before.
  extract_features.run(str(tmp_path / 'one_segment'), tmp_path / 'single.txt', tmp_path / 'o',
                       layers=(-1,))
  assert len((tmp_path / 'o').read_text().splitlines()) == 1


def test_one_line_with_a_large_batch_size_runs_one_row(minilm_dir, tmp_path, monkeypatch):
  """Every batch was padded to --batch_size rows: one line at 1024 took 91 s and 7.8 GB."""
  shapes, hidden_states_fn = [], extract_features.hidden_states_fn

  def spied(config):
    fn = hidden_states_fn(config)
    def run(params, batch):
      shapes.append(batch['input_ids'].shape)
      return fn(params, batch)
    return run

  monkeypatch.setattr(extract_features, 'hidden_states_fn', spied)
  (tmp_path / 'in.txt').write_text(LINES[0] + '\n')
  extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / 'big.jsonl',
                       max_seq_length=16, batch_size=1024)
  assert shapes == [(1, 16)]
  (tmp_path / 'in.txt').write_text('\n'.join(LINES) + '\n')  # 3 lines: rows of 2 and 4.
  for batch_size in (2, 1024):
    extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / f'{batch_size}.jsonl',
                         max_seq_length=16, batch_size=batch_size)
  assert shapes[1:] == [(2, 16), (2, 16), (4, 16)]
  rows = [[json.loads(line) for line in (tmp_path / f'{b}.jsonl').read_text().splitlines()]
          for b in (2, 1024)]
  for a, b in zip(*rows, strict=True):  # The same up to float32 sums over other row counts.
    assert [f['token'] for f in a['features']] == [f['token'] for f in b['features']]
    np.testing.assert_allclose([f['layers'][0]['values'] for f in a['features']],
                               [f['layers'][0]['values'] for f in b['features']], atol=3e-6)


@pytest.mark.parametrize('line', ['\u200b\u200b', '\x01', 'a good film ||| \u200b'])
def test_a_line_without_wordpieces_is_refused_as_predict_refuses_it(minilm_dir, tmp_path, line):
  """It was extracted as [CLS] [SEP], the empty input's features, whatever the line held."""
  source = tmp_path / 'in.txt'
  source.write_text(f'a good film\n{line}\n')
  with pytest.raises(ValueError, match=rf'^{source}:2 is empty: .* holds no wordpieces \(the '
                     r'tokenizer drops control and zero-width characters\): one input per line'):
    extract_features.run(str(minilm_dir), source, tmp_path / 'o.jsonl')
  assert not (tmp_path / 'o.jsonl').exists()


def test_standard_input_and_output_and_a_vocab_folder(minilm_dir, tmp_path, monkeypatch):
  """/dev/stdin said 'does not exist', --output_file=- wrote a file named '-', a --vocab_file
  that is a folder said 'does not exist'."""
  proc = subprocess.run([sys.executable, '-m', 'bertjax.extract_features',
                         '--input_file=/dev/stdin', '--output_file=-', f'--init={minilm_dir}',
                         '--layers=-1', '--max_seq_length=16'], input=LINES[0] + '\n',
                        capture_output=True, text=True, cwd=tmp_path, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  [row] = [json.loads(line) for line in proc.stdout.splitlines()]  # The features alone.
  assert [f['token'] for f in row['features']][:3] == ['[CLS]', 'the', 'weather']
  assert proc.stderr.splitlines()[-1].endswith(': inputs 1, layers -1; features stdout')
  assert not (tmp_path / '-').exists()
  # --input_file=- reads standard input; the same features.
  monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(LINES[0].encode() + b'\n')))
  extract_features.run(str(minilm_dir), '-', tmp_path / 'o.jsonl', layers=(-1,),
                       max_seq_length=16)
  assert json.loads((tmp_path / 'o.jsonl').read_text()) == row
  with pytest.raises(IsADirectoryError, match=rf'^--vocab_file={minilm_dir} is a folder: name '
                     'the vocab file'):
    extract_features.run(str(minilm_dir), tmp_path / 'o.jsonl', tmp_path / 'o2.jsonl',
                         vocab_file=str(minilm_dir))


def test_the_summary_names_the_step_read_from_a_run(fine_tuned_sst2, tmp_path, monkeypatch):
  workdir, _ = fine_tuned_sst2
  steps = sorted(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit())
  (tmp_path / 'in.txt').write_text('a gripping film\n')
  written = extract_features.run(str(workdir), tmp_path / 'in.txt', tmp_path / 'o.jsonl',
                                 layers=(-1,), max_seq_length=16, step=steps[0])
  assert written == extract_features.Written(lines=1, step=steps[0])
  # Session 54's pass: a length past the run's own (its positions from there never trained)
  # was taken without a word.
  said = log_records.recorded_warnings(monkeypatch, extract_features)
  extract_features.run(str(workdir), tmp_path / 'in.txt', tmp_path / 'o.jsonl', layers=(-1,),
                       max_seq_length=64, step=steps[0], overwrite=True)
  assert said == [f'--max_seq_length=64 is past the 16 tokens {workdir} was trained on: '
                  'positions from 16 on were never trained, so longer inputs\' features there '
                  "are untrained; pass --max_seq_length=16 for the run's own"]
  proc = subprocess.run([sys.executable, '-m', 'bertjax.extract_features', f'--init={workdir}',
                         f'--input_file={tmp_path / "in.txt"}', '--layers=-1',
                         f'--output_file={tmp_path / "o.jsonl"}', '--max_seq_length=16',
                         '--overwrite'],
                        capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.splitlines()[-1].endswith(
      f': inputs 1, layers -1, step {steps[-1]}; features {tmp_path / "o.jsonl"}')


def test_the_default_layers_past_a_small_model_are_said_as_the_default(minilm_dir, tmp_path):
  """Pass AL: a 2-layer model said '--layers [-3, -4] out of range' to a user who passed none."""
  config = transformers.BertConfig.from_pretrained(minilm_dir)
  config.num_hidden_layers = 2
  transformers.BertModel(config).save_pretrained(tmp_path / 'two')
  shutil.copy(minilm_dir / 'vocab.txt', tmp_path / 'two' / 'vocab.txt')
  (tmp_path / 'in.txt').write_text('a line\n')
  with pytest.raises(ValueError, match=r"^--layers \[-3, -4\] out of range for a 2-layer model "
                     r"\(-1,-2,-3,-4, the default: the original's last four\): 0 to 1 or -2 to -1 "
                     r'.*; pass e.g. --layers=-1,-2\.$'):
    extract_features.run(str(tmp_path / 'two'), tmp_path / 'in.txt', tmp_path / 'out.jsonl')
  assert not (tmp_path / 'out.jsonl').exists()


def test_a_reader_that_closes_the_pipe_ends_it_quietly(minilm_dir, tmp_path):
  """Pass AL: `... --output_file=- | head -c100` ended with 'error: [Errno 32] Broken pipe'."""
  (tmp_path / 'in.txt').write_text('a line of text\n' * 200)
  command = [sys.executable, '-m', 'bertjax.extract_features', f'--init={minilm_dir}',
             f'--input_file={tmp_path / "in.txt"}', '--output_file=-', '--max_seq_length=16']
  proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  assert len(proc.stdout.read(100)) == 100
  proc.stdout.close()  # As head does once it has its bytes.
  assert proc.wait(timeout=300) == 141
  stderr = proc.stderr.read().decode()
  assert 'error' not in stderr and 'Traceback' not in stderr, stderr[-2000:]


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='no /dev/full (Linux has it)')
def test_features_on_stdout_to_a_full_disk_say_so(minilm_dir, tmp_path):
  """Hostile pass F10: `--output_file=- > /dev/full` said only 'error: [Errno 28] No space left
  on device', where an --output_file on a full disk is named with what to do."""
  (tmp_path / 'in.txt').write_text('a line of text\n')
  command = [sys.executable, '-m', 'bertjax.extract_features', f'--init={minilm_dir}',
             f'--input_file={tmp_path / "in.txt"}', '--output_file=-', '--max_seq_length=16']
  with open('/dev/full', 'w', encoding='utf-8') as full:
    proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
                          check=False)
  assert proc.returncode == 1, proc.stderr[-2000:]
  assert proc.stderr.splitlines()[-1] == (
      'error: the disk holding standard output is full (No space left on device): what it got '
      'is cut short; free space there or pass an --output_file on another disk.')


def test_nan_features_are_refused_not_written_as_bare_nan(minilm_dir, tmp_path, monkeypatch):
  """Session 54's pass: a model with a NaN weight wrote bare NaN (no JSON parser's) and
  'extract_features finished'."""
  (tmp_path / 'in.txt').write_text('a fine film\nan awful one\n')
  real = extract_features.hidden_states_fn

  def with_nan(config):
    fn = real(config)
    return lambda params, batch: fn(params, batch).at[:, 1].set(np.nan)  # The second input.

  monkeypatch.setattr(extract_features, 'hidden_states_fn', with_nan)
  with pytest.raises(ValueError, match=r'^the model gave NaN or infinite values for input 2: its '
                     r'weights hold some \(a diverged run\?\)'):
    extract_features.run(str(minilm_dir), tmp_path / 'in.txt', tmp_path / 'o.jsonl')
  assert not (tmp_path / 'o.jsonl').exists()


def test_a_run_without_its_config_json_is_named_as_such(tmp_path, monkeypatch):
  """Session 54's pass: a pre-training run whose config.json was deleted (its vocab.txt still
  there) was told 'has no vocab beside it'."""
  run = tmp_path / 'run'
  (run / 'checkpoints' / '6').mkdir(parents=True)
  (tmp_path / 'in.txt').write_text('hello\n')
  loaded = types.SimpleNamespace(vocab_file=None, step=6, source=str(run / 'checkpoints' / '6'))
  monkeypatch.setattr(extract_features.sources, 'load', lambda *a, **k: loaded)
  with pytest.raises(ValueError, match=re.escape(
      f"{run}'s config.json is gone (the run's record of its vocab and settings): put it back, "
      'or pass --vocab_file.')):
    extract_features.run(str(run), tmp_path / 'in.txt', tmp_path / 'o.jsonl')
  (run / 'config.json').write_text('{}')
  with pytest.raises(ValueError, match=f'^{run} has no vocab beside it: pass --vocab_file'):
    extract_features.run(str(run), tmp_path / 'in.txt', tmp_path / 'o.jsonl')


def test_a_models_own_casing_against_its_vocab_is_not_told_to_drop_a_flag(minilm_dir, tmp_path):
  """helper-176: a model recording a casing its vocab contradicts, with no --do_lower_case
  given, was told to 'drop the flag to read the model's own casing', a flag not passed."""
  model = tmp_path / 'model'
  model.mkdir()
  for path in minilm_dir.iterdir():  # The weights linked; the tokenizer's record edited.
    (model / path.name).symlink_to(path)
  (model / 'tokenizer_config.json').unlink()
  (model / 'tokenizer_config.json').write_text(json.dumps({'do_lower_case': False}))
  (tmp_path / 'in.txt').write_text('Hello\n')
  with pytest.raises(ValueError) as e:
    extract_features.run(str(model), str(tmp_path / 'in.txt'), str(tmp_path / 'o.jsonl'))
  assert str(e.value).endswith(
      'pass --do_lower_case for an uncased model (the casing the model records is not its '
      "vocab's)"), str(e.value)
