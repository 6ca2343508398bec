"""predict's Python API: full-precision probabilities with the logits, quiet loading, every kind's
fields; its command line: the JSON lines as before and the summary line, off stdout in a pipe."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from unittest import mock

import jax
import ml_collections
import numpy as np
import pytest

from bertjax import predict
from bertjax import predict_inputs
from bertjax.finetune import kinds
from bertjax.finetune.tasks import bbc_news
from bertjax.finetune.tasks import features
from bertjax.finetune.tasks import glue
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import text_windows
from bertjax.interop import init_from
from bertjax.pretraining_data import embedded
from configs import finetune as finetune_config

REPO = pathlib.Path(__file__).resolve().parents[1]
SENTENCES = ['the king doth speak of love', 'my heart and death and grief']
# The TensorFlow / XLA start-up lines a console must never show at default verbosity.
START_UP = ('oneDNN', 'InitializeLog', 'cuInit', 'tensorflow/core', 'absl::InitializeLog')


def _python(code: str, **env) -> subprocess.CompletedProcess:
  """`code` in a plain Python process, as a user's script runs it (no test set-up)."""
  clean = {k: v for k, v in os.environ.items() if k not in ('TF_CPP_MIN_LOG_LEVEL',)}
  return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                        timeout=300, check=False, cwd=REPO, env={**clean, **env})


def test_probabilities_are_full_precision_softmax_of_the_logits(fine_tuned_sst2):
  workdir, _ = fine_tuned_sst2
  predictor = predict.Predictor.from_workdir(workdir)
  rows = predictor.predict(SENTENCES)
  assert predictor.step == max(int(p.name) for p in (workdir / 'checkpoints').iterdir()
                               if p.name.isdigit())
  for row in rows:
    assert set(row) == {'label', 'probabilities', 'logits'}
    labels = list(row['logits'])
    assert all(type(v) is float for v in [*row['probabilities'].values(),
                                          *row['logits'].values()])
    logits = np.array([row['logits'][k] for k in labels])
    want = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose([row['probabilities'][k] for k in labels], want, rtol=1e-12)
    assert row['label'] == labels[int(np.argmax(logits))]
  # Not rounded: the 6-decimal rounding is the command line's alone.
  values = [v for row in rows for v in row['probabilities'].values()]
  assert any(v != round(v, 6) for v in values)
  assert [predict.jsonl_row('classification', r) for r in rows] == [
      {'label': r['label'], 'probabilities': {k: round(v, 6) for k, v in
                                              r['probabilities'].items()}} for r in rows]


def test_loading_is_quiet_in_a_plain_python_session(fine_tuned_sst2):
  workdir, _ = fine_tuned_sst2
  code = ('from bertjax import predict; '
          f'p = predict.Predictor.from_workdir({str(workdir)!r}{{}}); '
          f'import json; print(json.dumps(p.predict({SENTENCES!r})))')
  quiet = _python(code.format(''))
  assert quiet.returncode == 0, quiet.stderr[-2000:]
  assert quiet.stderr == ''
  rows = json.loads(quiet.stdout)
  assert len(rows) == 2 and all('logits' in r for r in rows)
  # Asked for, the lines are there: orbax's, and which step was read.
  loud = _python(code.format(', verbose=True'))
  assert loud.returncode == 0, loud.stderr[-2000:]
  assert 'predicting with step' in loud.stderr and 'orbax' in loud.stderr
  assert json.loads(loud.stdout) == rows
  # A notebook's console (console.notebook(): bertjax's INFO lines shown) still loads quietly:
  # the step read is the object's `step`, not a line in the cell.
  cell = _python('from bertjax import console; console.notebook(); ' + code.format(''))
  assert cell.returncode == 0, cell.stderr[-2000:]
  assert 'predicting with step' not in cell.stdout + cell.stderr
  assert json.loads(cell.stdout.strip().splitlines()[-1]) == rows


def test_export_is_quiet_in_a_plain_python_session(fine_tuned_sst2, tmp_path):
  """bertjax.export.export() in Python: the folder it wrote, and not one library line."""
  workdir, _ = fine_tuned_sst2
  out = tmp_path / 'st'
  result = _python(f'from bertjax import export; print(export.export({str(workdir)!r}, '
                   f'"sentence_transformers", {str(out)!r}))')
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stderr == ''
  assert result.stdout.strip() == str(out) and (out / 'modules.json').is_file()


def test_a_damaged_step_is_still_said_when_quiet(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy)
  newest = max((copy / 'checkpoints').glob('[0-9]*'), key=lambda p: int(p.name))
  (newest / 'state' / '_METADATA').unlink()
  result = _python(f'from bertjax import predict; predict.Predictor.from_workdir({str(copy)!r})')
  assert result.returncode == 0, result.stderr[-2000:]
  assert f'checkpoints/{newest.name} cannot be read' in result.stderr


def test_what_a_user_gets_wrong_is_named(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  predictor = predict.Predictor.from_workdir(workdir)
  assert predictor.predict([]) == []
  assert len(predictor.predict(iter(SENTENCES))) == 2  # Any iterable, a generator included.
  with pytest.raises(ValueError, match='takes a list of inputs, got one str: pass'):
    predictor.predict(SENTENCES[0])
  with pytest.raises(ValueError, match=r'input 2 is an int \(3\): pass a string or a dict'):
    predictor.predict([SENTENCES[0], 3])
  with pytest.raises(ValueError, match=r'input 1 is a NoneType'):
    predictor.predict([None])
  with pytest.raises(ValueError, match=r'takes a list of inputs .*, got None\.'):  # Pass U.
    predictor.predict(None)
  with pytest.raises(ValueError, match='takes a list of inputs, got one ndarray'):
    predictor.predict(np.array(SENTENCES[0]))
  assert len(predictor.predict(np.array(SENTENCES))) == 2
  with pytest.raises(FileNotFoundError, match='^step=7: .* has no checkpoint step 7; its steps'):
    predict.Predictor.from_workdir(workdir, step=7)  # Named as the keyword (was --step=7).
  with pytest.raises(FileNotFoundError, match=f'^workdir={tmp_path}/gone does not exist: pass a '
                     'fine-tuning run.'):
    predict.Predictor.from_workdir(tmp_path / 'gone')
  for nothing in (None, ''):  # Notebook pass (session 34): was '--workdir=<cwd>/None does not
    # exist'.
    with pytest.raises(ValueError, match=r"^workdir=(None|''): pass the run's folder"):
      predict.Predictor.from_workdir(nothing)
  with pytest.raises(ValueError, match="step='32' is a str: pass the number, step=32"):
    predict.Predictor.from_workdir(workdir, step='32')
  assert predict.Predictor.from_workdir(workdir, step=np.int64(predictor.step)).step == (
      predictor.step)
  with pytest.raises(ValueError, match='batch_size=0: inputs per forward pass, at least 1'):
    predict.Predictor.from_workdir(workdir, batch_size=0)
  # Helper-172's pass: numpy's 4 was refused as 'at least 1'.
  assert predict.Predictor.from_workdir(workdir, batch_size=np.int64(4)).batch_size == 4
  for wrong in (2.0, True, np.bool_(True), '4'):
    with pytest.raises(ValueError, match=f'^batch_size={wrong!r}: inputs per forward pass, a '
                       r'whole number\.$'):
      predict.Predictor.from_workdir(workdir, batch_size=wrong)
  # A pre-training run's workdir: refused by its config, before any checkpoint is read.
  pretrain = tmp_path / 'pretrain'
  shutil.copytree(workdir, pretrain)
  config = json.loads((pretrain / 'config.json').read_text())
  (pretrain / 'config.json').write_text(json.dumps({**config, 'job': 'pretrain'}))
  with pytest.raises(ValueError, match='is a pretrain run: predict needs a fine-tuned model'):
    predict.Predictor.from_workdir(pretrain)


def _untrained(workdir, kind, labels, **data) -> predict.Predictor:
  """A predictor of another kind on the SST-2 run's encoder settings, its head untrained."""
  run = json.loads((workdir / 'config.json').read_text())
  run = {**run, 'kind': kind, 'labels': list(labels), 'data': {**run['data'], **data}}
  seq = run['data']['max_seq_length']
  objective = kinds.objective(kind, ml_collections.ConfigDict(run['model']), len(labels),
                              run['pooling'], seq)
  params = objective.model.init(jax.random.PRNGKey(0), *objective.init_inputs.values(),
                                deterministic=True)['params']
  return predict.Predictor(run, params, init_from.vocab_file(str(workdir)))


def _softmax(values):
  values = np.asarray(values, np.float64)
  return np.exp(values - values.max()) / np.exp(values - values.max()).sum()


def test_every_kind_gives_its_fields_and_its_logits(fine_tuned_sst2):
  workdir, _ = fine_tuned_sst2
  tagger = _untrained(workdir, 'tagging', ('O', 'B-X', 'I-X'))
  [tagged] = tagger.predict(['the king doth speak'])
  assert tagged['tokens'] == ['the', 'king', 'doth', 'speak'] and len(tagged['tags']) == 4
  for tag, probs, logits in zip(tagged['tags'], tagged['probabilities'], tagged['logits'],
                                strict=True):
    assert max(logits, key=logits.get) == tag == max(probs, key=probs.get)
    np.testing.assert_allclose(list(probs.values()), _softmax(list(logits.values())),
                               rtol=1e-12)
  assert predict.jsonl_row('tagging', tagged) == {'tokens': tagged['tokens'],
                                                  'tags': tagged['tags']}

  chooser = _untrained(workdir, 'multiple_choice', ('0', '1', '2'))
  [chosen] = chooser.predict(['the king ||| doth speak ||| of love ||| and grief'])
  assert chosen['choice'] == int(np.argmax(chosen['logits'])) and len(chosen['logits']) == 3
  np.testing.assert_allclose(chosen['probabilities'], _softmax(chosen['logits']), rtol=1e-12)

  regressor = _untrained(workdir, 'regression', ('score',))
  [value] = regressor.predict(['the king doth speak'])
  assert set(value) == {'value'} and type(value['value']) is float

  reader = _untrained(workdir, 'span', (), max_query_length=4, doc_stride=8)
  [span] = reader.predict(['who speaks ||| the king doth speak of love'])
  assert span['answer'] and span['answer'] in 'the king doth speak of love'
  assert 0 < span['score'] <= 1 and type(span['start_logit']) is float
  assert type(span['end_logit']) is float
  assert predict.jsonl_row('span', span) == {'answer': span['answer'],
                                             'score': round(span['score'], 6)}


def _predict_cli(*args, stdin=None):
  return subprocess.run([sys.executable, '-m', 'bertjax.predict', *args], input=stdin,
                        capture_output=True, text=True, timeout=300, check=False, cwd=REPO)


def test_the_command_line_ends_with_its_summary_line(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  source = tmp_path / 'in.txt'
  source.write_text('\n'.join(SENTENCES) + '\n')
  out = tmp_path / 'out.jsonl'
  result = _predict_cli(f'--workdir={workdir}', f'--input_file={source}', f'--output_file={out}')
  assert result.returncode == 0, result.stderr[-2000:]
  last = result.stdout.splitlines()[-1]
  assert last.startswith('predict finished in ') and 'inputs 2' in last, result.stdout
  assert last.endswith(f'predictions {out}')
  assert not any(m in result.stderr for m in START_UP), result.stderr
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  want = predict.Predictor.from_workdir(workdir).predict(SENTENCES)
  assert rows == [predict.jsonl_row('classification', r) for r in want]


def test_the_command_line_names_its_flags_where_python_names_keywords(fine_tuned_sst2,
                                                                        tmp_path):
  """bertjax.predict loads through the same checks as Predictor.from_workdir, whose errors name
  its keywords (step=7): the command's say --step=7. Helper-172's pass: the folders made for
  --output_file stayed behind, empty, after a refusal."""
  workdir, _ = fine_tuned_sst2
  (tmp_path / 'kept').mkdir()
  result = _predict_cli(f'--workdir={workdir}', '--step=7',
                        f'--output_file={tmp_path}/kept/new/deeper/out.jsonl', stdin='x\n')
  assert result.returncode != 0
  assert result.stderr.strip().splitlines()[0].startswith(
      f'error: --step=7: {workdir}/checkpoints has no checkpoint step 7'), result.stderr
  assert sorted(p.name for p in tmp_path.rglob('*')) == ['kept']


def test_predictions_on_stdout_stay_pure_json_lines(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  result = _predict_cli(f'--workdir={workdir}', f'--log_dir={tmp_path}',
                        stdin='\n'.join(SENTENCES) + '\n')
  assert result.returncode == 0, result.stderr[-2000:]
  rows = [json.loads(line) for line in result.stdout.splitlines()]  # What `| jq` reads.
  assert len(rows) == 2 and all(set(r) == {'label', 'probabilities'} for r in rows)
  last = result.stderr.splitlines()[-1]
  assert last.startswith('predict finished in ') and last.endswith('predictions stdout')
  [log] = tmp_path.glob('predict.*.log')  # --log_dir's file ends with the summary too,
  written = log.read_text().splitlines()  # and holds orbax's restore lines, held from the console.
  assert written[-1] == last and any('] Restoring checkpoint from ' in line for line in written)
  assert not any('orbax' in line for line in result.stderr.splitlines()), result.stderr


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='no /dev/full (Linux has it)')
def test_predictions_on_stdout_to_a_full_disk_say_so(fine_tuned_sst2):
  """Hostile pass F10: `predict > /dev/full` said only 'error: [Errno 28] No space left on
  device', where an --output_file on a full disk is named with what to do."""
  workdir, _ = fine_tuned_sst2
  with open('/dev/full', 'w', encoding='utf-8') as full:
    result = subprocess.run([sys.executable, '-m', 'bertjax.predict', f'--workdir={workdir}'],
                            input='\n'.join(SENTENCES) + '\n', stdout=full, stderr=subprocess.PIPE,
                            text=True, timeout=300, check=False, cwd=REPO)
  assert result.returncode == 1, result.stderr[-2000:]
  assert result.stderr.splitlines()[-1] == (
      'error: the disk holding standard output is full (No space left on device): what it got '
      'is cut short; free space there or pass an --output_file on another disk.')


def _closed(stream: int, *args, **kwargs) -> subprocess.CompletedProcess:
  """`python ...` started with standard stream `stream` closed (as `N>&-` starts it)."""
  kwargs = {'stdout': subprocess.PIPE if stream != 1 else None,
            'stderr': subprocess.PIPE if stream != 2 else None,
            'stdin': subprocess.DEVNULL if stream else None} | kwargs
  return subprocess.run(['bash', '-c', f'exec "$@" {stream}>&-', 'bash', sys.executable, *args],
                        text=True, timeout=300, check=False, cwd=REPO, **kwargs)


def test_a_command_started_with_a_standard_stream_closed_has_it_on_devnull(tmp_path):
  """Helper-172's pass on predict: `>&-` and `<&-` gave AttributeError tracebacks (Python makes
  sys.stdout None), and the next file opened took the free descriptor, where a C++ library's
  stderr lines would land."""
  report = tmp_path / 'report.json'
  code = ('import json, os, sys, bertjax\n'
          'print("a line to nowhere"); sys.stderr.write("and another\\n")\n'
          'fd = os.open(os.devnull, os.O_RDONLY)\n'
          f'open({str(report)!r}, "w").write(json.dumps([sorted(bertjax.CLOSED_STREAMS), fd, '
          'sys.stdin.read()]))\n')
  for stream, name in ((0, 'stdin'), (1, 'stdout'), (2, 'stderr')):
    result = _closed(stream, '-c', code)
    assert result.returncode == 0, result.stderr
    closed, fd, read = json.loads(report.read_text())
    assert closed == [name] and fd > 2 and read == ''
  from bertjax import text_files  # pylint: disable=g-import-not-at-top
  with mock.patch('bertjax.CLOSED_STREAMS', frozenset({'stdin'})):
    with pytest.raises(ValueError, match=r'^standard input is closed \(started with <&-\), where '
                       r'the inputs were to be read: pass them as a file'):
      text_files.read_stdin_lines()


def test_predict_refuses_a_closed_stream_it_would_use_and_works_without_stderr(fine_tuned_sst2,
                                                                              tmp_path):
  workdir, _ = fine_tuned_sst2
  source = tmp_path / 'in.txt'
  source.write_text('\n'.join(SENTENCES) + '\n')
  out = tmp_path / 'out.jsonl'
  predict_args = ('-m', 'bertjax.predict', f'--workdir={workdir}')
  result = _closed(1, *predict_args, f'--input_file={source}')
  assert result.returncode == 1
  assert result.stderr.splitlines()[-1] == (
      'error: standard output is closed (started with >&-), where the predictions are written '
      'without --output_file: pass --output_file=FILE.'), result.stderr
  result = _closed(0, *predict_args, f'--output_file={out}')
  assert result.returncode == 1 and not out.exists()
  assert result.stderr.splitlines()[-1] == (
      'error: standard input is closed (started with <&-), where the inputs are read without '
      '--input_file: pass --input_file=FILE.'), result.stderr
  # stderr closed (`2>&-`): console.exit_on_interrupt's os.dup(2) ended it with status 1 and
  # nothing written.
  result = _closed(2, *predict_args, f'--input_file={source}', f'--output_file={out}')
  assert result.returncode == 0 and result.stdout.splitlines()[-1].startswith('predict finished')
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  want = predict.Predictor.from_workdir(workdir).predict(SENTENCES)
  assert rows == [predict.jsonl_row('classification', r) for r in want]


def test_a_context_without_wordpieces_gets_no_answer_and_no_score():
  """A zero-width space has no wordpiece, so the context has no window: alone it left predict
  no rows to run (a crash), beside another line it got '' with score 1.0 (full confidence in
  what was never read). It gets '' and score null; the other line is unaffected."""
  config = finetune_config.get_config('task=span,size=tiny,seq=32')
  config.unlock()
  config.model.vocab_size = embedded.VOCAB_SIZE
  config.data.max_query_length, config.data.doc_stride = 4, 8
  run = {'kind': 'span', 'labels': [], 'data': config.data.to_dict(),
         'model': config.model.to_dict(), 'pooling': 'cls'}
  objective = kinds.objective('span', config.model, 0, 'cls', 32)
  params = objective.model.init(jax.random.PRNGKey(0), *objective.init_inputs.values(),
                                deterministic=True)['params']
  reader = predict.Predictor(run, params, str(embedded.vocab_path()))
  unread = {'answer': '', 'score': None, 'start_logit': None, 'end_logit': None}
  assert reader.predict(['who ||| \u200b']) == [unread]
  question = 'who speaks ||| the king doth speak of love'
  blank, read = reader.predict(['who ||| \u200b', question])
  assert blank == unread and read == reader.predict([question])[0]
  assert read['answer'] and 0 < read['score'] <= 1
  assert predict.jsonl_row('span', blank) == {'answer': '', 'score': None}


def test_an_input_without_wordpieces_is_refused_as_an_empty_one_is():
  """`\x00\x00\x00` or zero-width spaces got a label, the empty input's probabilities, while
  an empty input was refused."""
  config = finetune_config.get_config('task=classification,size=tiny,seq=32')
  config.unlock()
  config.model.vocab_size = embedded.VOCAB_SIZE
  run = {'kind': 'classification', 'labels': ['neg', 'pos'], 'data': config.data.to_dict(),
         'model': config.model.to_dict(), 'pooling': 'cls'}
  objective = kinds.objective('classification', config.model, 2, 'cls', 32)
  params = objective.model.init(jax.random.PRNGKey(0), *objective.init_inputs.values(),
                                deterministic=True)['params']
  classifier = predict.Predictor(run, params, str(embedded.vocab_path()))
  for text in ('\x00\x00\x00', '\x01\x02\x7f', '\u200b\u200b'):
    with pytest.raises(ValueError, match=r'^input 2 is empty: .* holds no wordpieces'):
      classifier.predict(['the king doth speak', text])
  assert len(classifier.predict(['the king\u200b doth speak'])) == 1
  # A string holding a JSON object is read as the command reads its line (the API classified
  # its braces and quotes: another answer than the command's for the same line).
  line = '{"text": "the king doth speak"}'
  assert classifier.predict([line]) == classifier.predict([{'text': 'the king doth speak'}])
  assert predict_inputs.read_inputs([line], 'in.txt') == [json.loads(line)]  # The command's.
  with pytest.raises(ValueError, match=r'^input 1 is a JSON array, but predict reads one input '):
    classifier.predict(['[{"text": "good film"}, {"text": "bad film"}]'])
  # Session 53's pass: the command's errors about a JSON line's fields said `input 2`, not the
  # file's line; with the file named (the command names it), they say its line.
  with pytest.raises(ValueError, match=r'^in\.txt:2 has none of the fields it reads'):
    classifier.predict(['good film', '{"txt": "bad film"}'], source='in.txt')



def test_a_long_text_gets_the_mean_of_the_windows_eval_reads():
  """bbc eval averages the logits of up to data.max_windows windows of a text; predict read the
  first window alone, so a served label could differ from the one eval scored."""
  config = finetune_config.get_config('task=bbc,size=tiny,seq=16')
  config.unlock()
  config.model.vocab_size = embedded.VOCAB_SIZE
  assert config.data.max_windows == 4 and config.data.doc_stride == 14
  labels = list(bbc_news.BBC_LABELS)
  run = {'kind': 'classification', 'labels': labels, 'data': config.data.to_dict(),
         'model': config.model.to_dict(), 'pooling': 'cls', 'task': 'bbc', 'text_pairs': False}
  objective = kinds.objective('classification', config.model, len(labels), 'cls', 16)
  params = objective.model.init(jax.random.PRNGKey(0), *objective.init_inputs.values(),
                                deterministic=True)['params']
  classifier = predict.Predictor(run, params, str(embedded.vocab_path()))
  long = ' '.join(['the king doth speak of love'] * 4 + ['my heart and death and grief'] * 6)
  texts = [long, 'the king doth speak']
  # Eval's path: the task's features (one row per window), the per-text mean of their logits.
  task = registry.get_task('bbc', config.data)
  examples = [glue.Example(f'x{i}', t, None, None) for i, t in enumerate(texts)]
  feats, _ = task.featurize(examples, classifier.tokenizer, is_training=False)
  assert np.bincount(feats['example_index']).tolist() == [4, 1]
  want = text_windows.example_logits(classifier._outputs(feats), feats['example_index'], 2)
  first = classifier._outputs(features.encode(examples, classifier.tokenizer, 16, 'bbc', labels))
  rows = classifier.predict(texts)
  got = np.array([[row['logits'][k] for k in labels] for row in rows])
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert not np.allclose(got[0], first[0], atol=1e-4)  # Not the first window alone.
  np.testing.assert_allclose(got[1], first[1], rtol=1e-5)  # A short text: its one window.
  assert [row['label'] for row in rows] == [labels[i] for i in np.argmax(want, -1)]


def test_a_step_a_resume_wrote_is_read_with_the_resumes_own_config(fine_tuned_sst2, tmp_path):
  """A resume with other settings records them in config-resumed-at-N.json (and, from session
  60, its steps' meta); readers built every step from config.json, so that a resumed bbc run's
  changed data.max_windows was scored with the old one, without a word."""
  workdir, _ = fine_tuned_sst2
  run = tmp_path / 'run'
  shutil.copytree(workdir, run, ignore=shutil.ignore_patterns('.lock'))
  recorded = json.loads((run / 'config.json').read_text())
  resumed = json.loads(json.dumps(recorded))
  resumed['optimizer']['learning_rate'] = 5e-4  # As if resumed at step 28 with another rate.
  (run / 'config-resumed-at-28.json').write_text(json.dumps(resumed))
  assert predict.Predictor.from_workdir(run).run['optimizer']['learning_rate'] == 5e-4
  assert predict.Predictor.from_workdir(run, step=28).run == recorded
  resumed['data']['max_windows'] = 3  # What step 32's meta does not record.
  (run / 'config-resumed-at-28.json').write_text(json.dumps(resumed))
  with pytest.raises(ValueError, match=re.escape(
      "32 was saved with data.max_windows=1, but the run's config-resumed-at-28.json says 3: "
      "config-resumed-at-28.json was edited or is another run's")):
    predict.Predictor.from_workdir(run)
  assert predict.Predictor.from_workdir(run, step=28).run == recorded


def test_a_hand_edited_pooling_or_activation_in_config_json_is_refused(fine_tuned_sst2,
                                                                       tmp_path):
  """Notebook pass (session 34), 2: config.json's pooling (cls -> mean) or model.hidden_act
  (gelu -> relu) edited by hand gave other probabilities from the same weights, without a
  word; the checkpoint records what it was trained with."""
  workdir, _ = fine_tuned_sst2
  run = tmp_path / 'run'
  shutil.copytree(workdir, run, ignore=shutil.ignore_patterns('.lock'))
  want = predict.Predictor.from_workdir(run).predict(['a fine film'])
  recorded = json.loads((run / 'config.json').read_text())
  assert recorded['pooling'] == 'cls'
  # Session 53's hostile pass: max_seq_length (32 -> 16) too, scoring other windows.
  # Session 54's export pass: kind (classification -> regression) blamed the checkpoint.
  # Session 60 (helper-172's pass on predict): the tokenization (a word's character limit, the
  # windows of a text, the casing) and the task edited were read without a word.
  data = recorded['data']
  for field, value in (('pooling', 'mean'), ('model.hidden_act', 'relu'),
                       ('data.max_seq_length', data['max_seq_length'] // 2),
                       ('kind', 'regression'), ('task', 'cola'),
                       ('data.max_chars_per_word', data['max_chars_per_word'] // 2),
                       ('data.max_windows', data['max_windows'] + 2),
                       ('data.do_lower_case', not data['do_lower_case'])):
    edited = json.loads(json.dumps(recorded))
    section, key = field.split('.') if '.' in field else (None, field)
    saved = (edited[section] if section else edited)[key]
    (edited[section] if section else edited)[key] = value
    (run / 'config.json').write_text(json.dumps(edited))
    with pytest.raises(ValueError, match=re.escape(
        f"was saved with {field}={saved!r}, but the run's config.json says {value!r}: "
        "config.json was edited or is another run's; restore the one the run wrote.") + '$'):
      predict.Predictor.from_workdir(run)
  (run / 'config.json').write_text(json.dumps(recorded))
  assert predict.Predictor.from_workdir(run).predict(['a fine film']) == want
