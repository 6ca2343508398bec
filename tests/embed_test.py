"""The feature-extraction job end to end, through the same entry point a user runs."""

import io
import os
import pathlib
import subprocess
import sys

from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax import embed
from bertjax import embed_outputs
from configs import embed as embed_config


def test_embed_job_writes_similarities(tmp_path, minilm_dir):
  config = embed_config.get_config(f'init_from={minilm_dir}')
  vectors = embed.run(config, tmp_path)
  assert vectors.shape == (len(config.sentences), 384)
  similarity = np.loadtxt(tmp_path / 'similarity.txt')
  np.testing.assert_allclose(np.diag(similarity), 1.0, atol=1e-4)
  assert similarity[0, 1] == pytest.approx(0.666, abs=1e-3)
  # Paraphrases score above unrelated pairs.
  assert similarity[3, 4] > 0.4 > similarity[0, 3]


def test_embed_job_bfloat16_close_to_float32(tmp_path, minilm_dir):
  want = embed.run(embed_config.get_config(f'init_from={minilm_dir}'), None)
  got = embed.run(embed_config.get_config(f'init_from={minilm_dir},dtype=bfloat16'), None)
  # Stated tolerance for bf16 compute on real weights: cosine similarities within 0.02.
  np.testing.assert_allclose(got @ got.T, want @ want.T, atol=2e-2)


def test_main_cli(tmp_path, minilm_dir):
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  result = subprocess.run(
      [sys.executable, '-m', 'bertjax.main', f'--config=configs/embed.py:init_from={minilm_dir}',
       f'--workdir={tmp_path}', '--config.max_seq_length=16',
       # The user's own texts on the command line: a tuple field, each text quoted.
       "--config.sentences=('The weather is lovely today.', 'He drove to the stadium.')"],
      capture_output=True, text=True, timeout=300, check=False, env=env,
      cwd=pathlib.Path(__file__).resolve().parents[1])
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'cosine similarity' in result.stdout
  assert (tmp_path / 'embeddings.npy').exists()
  last = result.stdout.splitlines()[-1]
  assert last.startswith('embed finished in ') and 'sentences 2, dimension 384' in last, last
  assert np.load(tmp_path / 'embeddings.npy').shape == (2, 384)
  assert last.endswith(f'embeddings {tmp_path}/embeddings.npy, similarities '
                       f'{tmp_path}/similarity.txt')
  for start_up in ('oneDNN', 'InitializeLog', 'cuInit', 'tensorflow/core'):
    assert start_up not in result.stderr, result.stderr


def test_without_a_workdir_the_summary_says_nothing_was_written(minilm_dir, capsys):
  config = embed_config.get_config(f'init_from={minilm_dir}')
  with config.unlocked():
    config.sentences, config.max_seq_length = config.sentences[:2], 16
  embed.run(config, None)
  last = capsys.readouterr().out.splitlines()[-1]
  assert last.startswith('embed finished in ') and 'sentences 2' in last, last
  assert last.endswith('embeddings not written (no --workdir)')
  with config.unlocked():
    config.sentences = []
  with pytest.raises(ValueError, match=r'^config.sentences=\(\): holds no sentence, and no '
                     'config.input_file is set'):
    embed.run(config, None)
  with config.unlocked():  # Past MiniLM's position table: named as the job's setting, before
    config.sentences, config.max_seq_length = ('A text.',), 600  # the import's line says it.
  with pytest.raises(ValueError, match=r"^config.max_seq_length=600 must be between 3 and the "
                     "model's 512 positions"):
    embed.run(config, None)
  with config.unlocked():  # What --config.sentences="(1, 2)" parses to.
    config.max_seq_length = 16
    config.sentences = ('A text.', 2)
  with pytest.raises(ValueError, match=r'^config.sentences\[1\]=2: is not text; quote each'):
    embed.run(config, None)


def test_empty_input_file_is_an_error(tmp_path, minilm_dir):
  empty = tmp_path / 'empty.txt'
  empty.write_text('\n\n')
  config = embed_config.get_config(f'init_from={minilm_dir}')
  with config.unlocked():
    config.input_file = str(empty)
  with pytest.raises(ValueError, match='holds no sentences'):
    embed.run(config, tmp_path)


def test_unknown_config_argument():
  with pytest.raises(ValueError, match=r"unknown config argument 'size'; valid ones: \['dtype', "
                     r"'init_from'\]; any field is set with --config.FIELD=VALUE"):
    embed_config.get_config('size=base')


def test_a_training_run_without_a_checkpoint_gets_one_message_saying_so(tmp_path):
  run = tmp_path / 'run'  # A bertjax workdir: read by the one loader, as export reads it.
  (run / 'checkpoints').mkdir(parents=True)
  (run / 'config.json').write_text('{"job": "pretrain"}')
  with pytest.raises(FileNotFoundError,
                     match=f'{run} holds no checkpoint: pass a run that saved one'):
    embed.run(embed_config.get_config(f'init_from={run}'), None)
  with pytest.raises(FileNotFoundError, match=f'{tmp_path}/none does not exist'):
    embed.run(embed_config.get_config(f'init_from={tmp_path}/none'), None)


def test_the_module_as_a_command_names_the_embed_job():
  """`python -m bertjax.embed --input_file=x` did nothing and exited 0: it is no command line,
  so it says, in one line, which command runs the embed job."""
  result = subprocess.run([sys.executable, '-m', 'bertjax.embed', '--input_file=x'],
                          capture_output=True, text=True, timeout=300, check=False,
                          cwd=pathlib.Path(__file__).resolve().parents[1])
  assert result.returncode == 1 and result.stdout == ''
  assert result.stderr == ('error: bertjax.embed is not a command line; run the embed job: '
                           f'{embed.COMMAND}\n')
  assert embed.COMMAND.startswith('python -m bertjax.main --config=configs/embed.py')


def _config(minilm_dir, **fields):
  config = embed_config.get_config(f'init_from={minilm_dir}')
  with config.unlocked():
    for name, value in fields.items():
      config[name] = value
  return config


LONG = ' '.join(f'the {i}th sentence of the long line' for i in range(30))  # 200+ tokens


def test_the_job_cuts_at_the_models_length_as_sentence_transformers_does(tmp_path, minilm_dir,
                                                                        capsys, caplog):
  """configs/embed.py cut at 128 where MiniLM says 256: a 200-token line was 0.969 off."""
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  reference = SentenceTransformer(str(minilm_dir), device='cpu')
  assert reference.max_seq_length == 256
  assert 128 < len(reference.tokenizer(LONG)['input_ids']) < 256
  source = tmp_path / 'in.txt'
  source.write_text(f'{LONG}\nThe weather is lovely today.\n')
  got = embed.run(_config(minilm_dir, input_file=str(source)), None)
  want = reference.encode([LONG, 'The weather is lovely today.'])
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
  out = capsys.readouterr().out
  assert 'sentences of at most 256 tokens' in out and 'cut to' not in out
  assert caplog.messages[-1].endswith('mean-pooled, normalised, 256 tokens at most')
  # A length given wins, and the log and the table say which is in effect.
  short = embed.run(_config(minilm_dir, input_file=str(source), max_seq_length=128), None)
  out = capsys.readouterr().out
  assert 'sentences of at most 128 tokens' in out
  assert out.splitlines()[-1].startswith('embed finished in ')  # The long line, counted:
  assert out.splitlines()[-1].split(': ')[1].startswith(
      'sentences 2, dimension 384, cut 1 (longer than 128 tokens);')
  assert caplog.messages[-1].endswith('128 tokens at most (the model says 256)')
  assert float(short[0] @ want[0]) < 0.99


def test_a_workdir_in_a_run_or_a_model_folder_is_refused_as_other_tools_refuse(tmp_path,
                                                                               minilm_dir):
  run = tmp_path / 'run'
  (run / 'checkpoints' / '10').mkdir(parents=True)
  (run / 'predictions').mkdir()
  (run / 'config.json').write_text('{"job": "finetune"}')
  model = tmp_path / 'model'
  model.mkdir()
  (model / 'config.json').write_text('{}')
  (model / 'model.safetensors').write_bytes(b'')
  for workdir, message in (
      (run / 'checkpoints' / '10', rf"embeddings.npy in --workdir={run}/checkpoints/10 is "
                                   r"inside a run's checkpoints/: write it elsewhere"),
      (run / 'checkpoints', r"inside a run's checkpoints/"),
      (run / 'predictions', rf'embeddings.npy in --workdir={run}/predictions would be in a '
                            rf'bertjax run \({run}\): tools that read a run never write into it'),
      (model, rf'--workdir={model} is in a transformers model \({model}\): tools that read a '
              'model never write into it; pass a folder of its own'),
      (model / 'sub', 'is in a transformers model')):
    with pytest.raises(FileExistsError, match=message):
      embed.run(_config(minilm_dir), workdir)
  # Through bertjax.main: the one line (a FileExistsError was a traceback there).
  result = subprocess.run(
      [sys.executable, '-m', 'bertjax.main', f'--config=configs/embed.py:init_from={minilm_dir}',
       f'--workdir={model}'], capture_output=True, text=True, timeout=300, check=False,
      cwd=pathlib.Path(__file__).resolve().parents[1])
  assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-2000:]
  assert f'error: --workdir={model} is in a transformers model' in result.stderr
  assert not list(tmp_path.rglob('*.npy')) and not list(tmp_path.rglob('similarity.txt'))


def test_many_sentences_print_a_capped_table_and_no_square_matrix(tmp_path, minilm_dir, capsys,
                                                                  monkeypatch):
  monkeypatch.setattr(embed, 'PRINTED_ROWS', 3)
  monkeypatch.setattr(embed_outputs, 'MATRIX_ROWS', 4)
  lines = ['ring \x07 the bell', 'an \x1b[31m escape', 'a man plays a guitar', 'a dog runs',
           'the sun is out', 'it rains']
  source = tmp_path / 'in.txt'
  source.write_text('\n'.join(lines) + '\n')
  vectors = embed.run(_config(minilm_dir, input_file=str(source), max_seq_length=16),
                      tmp_path / 'out')
  out = capsys.readouterr().out
  assert '\x07' not in out and '\x1b' not in out
  assert 'ring \\x07 the bell' in out and 'an \\x1b[31m escape' in out
  table = [line for line in out.splitlines() if line.startswith('  ')]
  assert len(table) == 4 and table[-1] == '  ... 3 more sentences not printed (the first 3 are)'
  assert 'similarity.txt not written: 6 sentences make a 6 x 6 matrix' in out
  assert out.splitlines()[-1].endswith('similarities not written (over 4 sentences)')
  np.testing.assert_array_equal(np.load(tmp_path / 'out' / 'embeddings.npy'), vectors)
  assert vectors.shape == (6, 384) and not (tmp_path / 'out' / 'similarity.txt').exists()
  source.write_text('\n'.join(lines[2:]) + '\n')  # 4: the matrix, the whole table.
  embed.run(_config(minilm_dir, input_file=str(source), max_seq_length=16), tmp_path / 'out')
  assert np.loadtxt(tmp_path / 'out' / 'similarity.txt').shape == (4, 4)
  out = capsys.readouterr().out
  assert '  ... 1 more sentence not printed (the first 3 are)' in out
  assert 'not written' not in out


def test_the_printed_table_lines_up_in_any_script_and_cuts_no_escape(minilm_dir, capsys):
  # The table cut sentences at 40 characters: a CJK row took 80 columns, a combining accent's
  # row 20 (its numbers stood apart from the others'), and an escape was cut into '\x0'.
  sentences = ('東京は晴れ' * 10, 'a' * 38 + '\x07 bell', 'e\u0301' * 45, 'short')
  embed.run(_config(minilm_dir, sentences=sentences, max_seq_length=16), None)
  table = [line for line in capsys.readouterr().out.splitlines() if line.startswith('  ')]
  names = [line[:-27] for line in table]  # Four similarities of 6 characters, a space apart.
  assert names == ['  ' + '東京は晴れ' * 4 + '  ', '  ' + 'a' * 38 + '    ',
                   '  ' + 'e\u0301' * 40 + '  ', '  short' + ' ' * 35 + '  '], names


@pytest.mark.parametrize('line', ['\u200b\u200b', '\x01'])
def test_a_line_without_wordpieces_is_refused_as_predict_refuses_it(tmp_path, minilm_dir, line):
  source = tmp_path / 'in.txt'
  source.write_text(f'a good film\n{line}\n')
  with pytest.raises(ValueError, match=rf'^{source}:2 is empty: .* holds no wordpieces \(the '
                     r'tokenizer drops control and zero-width characters\): one input per line'):
    embed.run(_config(minilm_dir, input_file=str(source)), tmp_path / 'out')
  assert not (tmp_path / 'out').exists()


def test_the_outputs_are_one_runs_pair_and_never_the_input(tmp_path, minilm_dir, monkeypatch):
  """Pass AL: a run over MATRIX_ROWS sentences (or one interrupted between its two files) left
  an earlier run's similarity.txt beside its embeddings.npy; --config.input_file=W/similarity.txt
  was overwritten by the job; '-' (standard input) was a file that 'does not exist'."""
  out = tmp_path / 'out'
  embed.run(_config(minilm_dir, max_seq_length=16), out)
  assert np.loadtxt(out / 'similarity.txt').shape == (5, 5)
  monkeypatch.setattr(embed_outputs, 'MATRIX_ROWS', 2)
  source = tmp_path / 'in.txt'
  source.write_text('a dog runs\nthe sun is out\nit rains\n')
  embed.run(_config(minilm_dir, input_file=str(source), max_seq_length=16), out)
  assert np.load(out / 'embeddings.npy').shape == (3, 384)
  assert not (out / 'similarity.txt').exists()
  (out / 'similarity.txt').write_text('kept read-only\n')
  (out / 'similarity.txt').chmod(0o444)  # Refused before either file is touched.
  with pytest.raises(PermissionError, match='similarity.txt is read-only'):
    embed.run(_config(minilm_dir, input_file=str(source), max_seq_length=16), out)
  assert (out / 'similarity.txt').read_text() == 'kept read-only\n'
  (out / 'similarity.txt').unlink()
  mine = out / 'similarity.txt'
  mine.write_text('my precious sentence\n')
  with pytest.raises(FileExistsError, match='similarity.txt'):
    embed.run(_config(minilm_dir, input_file=str(mine), max_seq_length=16), out)
  assert mine.read_text() == 'my precious sentence\n'
  monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(b'a dog runs\nit rains\n')))
  vectors = embed.run(_config(minilm_dir, input_file='-', max_seq_length=16), None)
  assert vectors.shape == (2, 384)


def test_a_vocab_file_that_is_not_there_is_named_as_the_job_sets_it(tmp_path, minilm_dir):
  """Pass 33, item 14: `--config.vocab_file=/nope` said only `/nope does not exist.`"""
  for vocab, says in ((tmp_path / 'nope.txt', 'does not exist: fix the path'),
                      (tmp_path, 'is a folder: name the vocab file in it')):
    config = embed_config.get_config(f'init_from={minilm_dir}')
    config.vocab_file = str(vocab)
    with pytest.raises(FileNotFoundError, match=rf'^config.vocab_file={vocab} {says}, or drop it '
                       "to read the model's own vocab.$"):
      embed.run(config, tmp_path / 'out')
    assert not (tmp_path / 'out').exists()
  # Hostile pass H10: a vocab the model was not trained with was named as another tool's flag.
  other = tmp_path / 'other_vocab.txt'
  other.write_text('\n'.join(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'a', 'b']) + '\n')
  config = embed_config.get_config(f'init_from={minilm_dir}')
  config.vocab_file = str(other)
  with pytest.raises(ValueError, match=rf'^config.vocab_file={other} is not the vocab '):
    embed.run(config, tmp_path / 'out')
  assert not (tmp_path / 'out').exists()
  with pytest.raises(ValueError, match=rf'^vocab_file={other} is not the vocab '):
    embed.Embedder.from_pretrained(minilm_dir, vocab_file=other)


def test_the_cut_count_includes_the_models_prompt(tmp_path, minilm_dir, capsys):
  """'query: ' + a 6-word line is longer than 8 tokens: the line was embedded cut, and the
  summary said nothing was."""
  import json  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  prompted = shutil.copytree(minilm_dir, tmp_path / 'prompted')
  settings = prompted / 'config_sentence_transformers.json'
  settings.write_text(json.dumps({**json.loads(settings.read_text()),
                                  'prompts': {'query': 'query: '}, 'default_prompt_name': 'query'}))
  source = tmp_path / 'in.txt'
  source.write_text('one two three four five six\nseven\n')
  embed.run(_config(prompted, input_file=str(source), max_seq_length=8), None)
  assert 'sentences 2, dimension 384, cut 1 (longer than 8 tokens);' in (
      capsys.readouterr().out.splitlines()[-1])
