"""Predictions of a fine-tuned model on raw text, from the command line or Python.

  python -m bertjax.predict --workdir=/tmp/mine [--input_file=in.txt] [--output_file=out.jsonl]
  python -m bertjax.predict --workdir=gs://b/mine --input_file=gs://b/in.txt \
    --output_file=gs://b/out.jsonl
  echo 'I loved it' | python -m bertjax.predict --workdir=/tmp/mine

  predictor = Predictor.from_workdir('/tmp/mine')
  predictor.predict(['I loved it', 'a dull film'])
  # -> [{'label': 'pos', 'probabilities': {'neg': 0.0213..., 'pos': 0.9786...},
  #      'logits': {'neg': -1.91..., 'pos': 1.90...}}, ...]

An input line is raw text: `text`, or `text_a ||| text_b` for sentence pairs; `question |||
context` for span models; `context ||| choice ||| choice ...` for multiple choice; for tagging
the words are the line split on whitespace. A line that starts with `{` is a JSON object with
the task's fields instead (text_fields, or text_a/text_b; question/context; tokens;
context/choices, or SWAG's sent1/sent2/ending0..3). A blank line is refused, and so is a text
that holds no wordpieces (only control or zero-width characters: the model would read an empty
input), but for a span model's context (see below). Each output line is a JSON object:
classification `label` and `probabilities`; regression `value`; span `answer` and `score` (the
best span's probability among the n-best; null, with the answer "", when the context has no
wordpieces, e.g. only zero-width characters: nothing was read, so nothing is claimed);
tagging `tokens` and `tags` (one per word); multiple choice `choice` (an index) and
`probabilities`; probabilities and scores rounded to 6 decimals. In Python, predict() gives
the same fields unrounded, and the model's raw outputs: `logits` (classification: per label;
multiple choice: per choice; tagging: per word, per tag, with per-word `probabilities`), span
`start_logit` and `end_logit` of the answer.

The tokenizer, casing, sequence length, kind and labels are those the run was fine-tuned with
(its config.json); the weights are its latest checkpoint (or --step=best|latest|N; the same
values as step= in Python). Inputs go through the
very feature code evaluation uses, in batches of --batch_size, so a line gets the label eval
gave the same example (bbc, wordnet with data.max_windows > 1: the mean of the logits of a
text's windows, as eval reads it).
"""

import contextlib
import json
import math
import numbers
import sys
import time

from absl import app
from absl import flags
from absl import logging
from flax import traverse_util
import jax
import ml_collections
import numpy as np

import bertjax
from bertjax import command_flags
from bertjax import console
from bertjax import files
from bertjax import inference
from bertjax import job_lines
from bertjax import keywords
from bertjax import output_lock
from bertjax import paths
from bertjax import predict_inputs
from bertjax import text_files
from bertjax.finetune import kinds
from bertjax.finetune.tasks import conll
from bertjax.finetune.tasks import features as features_lib
from bertjax.finetune.tasks import multiple_choice
from bertjax.finetune.tasks import registry
from bertjax.finetune.tasks import squad
from bertjax.finetune.tasks import squad_answers
from bertjax.finetune.tasks import text_windows
from bertjax.interop import init_from
from bertjax.interop import sources
from bertjax.text import vocab_files
from bertjax.training import checkpoint_reader
from bertjax.training import kinds as kind_table


class Predictor:
  """A fine-tuned model with its tokenizer and labels: predict(inputs) -> one dict per input."""

  def __init__(self, run: dict, params, vocab_file: str, batch_size: int = 32,
               step: int | None = None):
    if isinstance(batch_size, (bool, np.bool_)) or not isinstance(batch_size, numbers.Integral):
      raise ValueError(f'batch_size={batch_size!r}: inputs per forward pass, a whole number.')
    if batch_size < 1:
      raise ValueError(f'batch_size={batch_size!r}: inputs per forward pass, at least 1.')
    batch_size = int(batch_size)  # numpy's too (a value read from an array).
    self.run = run
    self.step = step  # The checkpoint step the params are from (None: given directly).
    self.kind = run['kind']
    self.labels = tuple(run['labels'])
    self.data = ml_collections.ConfigDict(run['data'])
    self.batch_size = batch_size
    self.tokenizer = vocab_files.for_model(
        vocab_file, self.data.do_lower_case,
        max_chars_per_word=init_from.recorded_word_limit(run))
    # The recorded model as this platform runs it: a run trained on a GPU records cudnn
    # attention, which a CPU or TPU cannot run; the layout is the params'.
    model_config = inference.model_config(run['model'], params)
    model = kinds.get(self.kind).head(model_config, len(self.labels), run.get('pooling', 'cls'))
    self.params = params
    # The one inference path (inference.forward), its head's logits.
    self._apply = inference.forward(model_config, 'logits', head=model)
    self._progress = None  # predict()'s, while it runs.

  @classmethod
  def from_workdir(cls, workdir, step: int | str | None = None, batch_size: int = 32,
                   verbose: bool = False) -> 'Predictor':
    """The model a fine-tuning run in `workdir` wrote: its latest checkpoint, or `step` ('best':
    the one its evals ranked best, kept by checkpoint.keep_best; 'latest'; a step number).

    Quiet unless something needs the user (a damaged step skipped); verbose=True shows every
    library's lines while it loads (orbax's, bertjax's 'predicting with step N')."""
    with keywords.named({'workdir': 'workdir', 'step': 'step', 'batch_size': 'batch_size'}):
      return cls._load(workdir, step, batch_size, verbose)

  @classmethod
  def _load(cls, workdir, step, batch_size, verbose) -> 'Predictor':
    """from_workdir, its errors naming the command's flags (bertjax.predict's main)."""
    step = checkpoint_reader.parse_step(step)  # Refused before anything is read.
    with console.library_lines_held(verbose, quiet=True):
      return cls._from_workdir(workdir, step, batch_size)

  @classmethod
  def _from_workdir(cls, workdir, step, batch_size) -> 'Predictor':
    workdir = paths.absolute_workdir(workdir)  # A local folder or a URL (gs://...).
    files.check_exists(workdir, f'--workdir={workdir} does not exist: pass a fine-tuning run.')
    if not files.isdir(workdir):
      raise ValueError(f'--workdir={workdir} is a file: pass the folder of a fine-tuning run '
                       '(its config.json and checkpoints/).')
    run = init_from.run_config(workdir)
    if run is None and init_from.is_transformers_dir(workdir):
      raise ValueError(f'{workdir} is a transformers model, not a fine-tuning run: predict '
                       "reads bertjax's fine-tuning runs (their task, labels and length); "
                       'fine-tune from it (configs/finetune.py:init_from=...), or run it in '
                       'transformers.')
    if run is None:
      raise FileNotFoundError(f'{workdir} holds no fine-tuning run (config.json and '
                              'checkpoints/): pass the --workdir a fine-tuning wrote.')
    if run.get('job') != 'finetune':
      raise ValueError(f'{workdir} is a {run.get("job", "unknown")} run: predict needs a '
                       'fine-tuned model (job=finetune).')
    vocab_file = init_from.vocab_file(workdir)
    if not vocab_file:
      raise FileNotFoundError(
          f'{workdir} keeps no copy of its vocab and the one it recorded '
          f'({run["data"].get("vocab_file")}) no longer exists: put the vocab it was trained '
          f'with at {files.join(workdir, init_from.RUN_VOCAB)}.')
    # The one loader: the digests checked, a damaged newest step skipped with a warning, the
    # head checked against the run's labels; nothing written. Its params are per layer.
    model = sources.load(workdir, vocab_file=vocab_file, step=step)
    read_step = int(files.name(model.source))  # The loader's source is <checkpoints>/<step>.
    logging.info('predicting with step %d of %s', read_step, workdir)
    params = traverse_util.unflatten_dict(model.params, sep='/')
    # The config the step was written with (a resume's own where a resume with other settings,
    # e.g. data.max_windows, wrote it), which the loader checked against the step's meta.
    run = init_from.run_config(model.source)
    if 'labels' not in run or 'kind' not in run:
      task = registry.get_task(run['task'], ml_collections.ConfigDict(run['data']))
      run = {**run, 'kind': task.kind, 'labels': list(task.labels)}
    return cls(run, params, vocab_file, batch_size, step=read_step)

  def set_null_threshold(self, threshold: float):
    """A SQuAD 2.0 model's no-answer threshold (data.null_score_diff_threshold): "" when the
    null score exceeds the best span's by more; tuned on dev by mode=eval."""
    if not self.run.get('version_2_with_negative'):
      raise ValueError(f'--null_score_diff_threshold is the no-answer threshold of a model '
                       f'fine-tuned on SQuAD 2.0 files, and this run (task {self.run.get("task")}, '
                       f'a {self.kind} model) was not: drop it.')
    if (isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)
        or not math.isfinite(threshold)):
      # nan never chose the null answer (its comparisons are false), as inf does: refused as
      # mode=eval's config.data.null_score_diff_threshold is.
      raise ValueError(f'--null_score_diff_threshold={threshold!r}: must be a finite number '
                       "(the null score's margin over the best span's; mode=eval reports the "
                       'best one).')
    self.data.null_score_diff_threshold = float(threshold)

  def predict(self, inputs, progress: job_lines.Progress | None = None, *,
              source: str = '') -> list[dict]:
    """One dict per input (a raw string or a dict of the task's fields), in order, at full
    precision (Python floats), with the model's logits: see the module docstring. `progress`
    (the command line's): told the inputs done after each batch. `source`: the file the inputs
    are the lines of, one each, which errors then name as `source:line` (else `input N`)."""
    if isinstance(inputs, (str, bytes, dict)) or getattr(inputs, 'ndim', 1) == 0:
      raise ValueError(f'predict takes a list of inputs, got one {type(inputs).__name__}: '
                       'pass [input] for one.')
    try:
      inputs = list(inputs)
    except TypeError:  # None, a number: Python's 'not iterable' names no fix.
      raise ValueError(f'predict takes a list of inputs (texts, or dicts of the task\'s fields), '
                       f'got {inputs!r}.') from None
    if not inputs:
      return []
    # Raw input -> the examples evaluation reads; a string as the command reads its line (a
    # JSON object where it starts with {), so that both give one answer.
    pairs = self.run.get('text_pairs')
    names = [f'{source}:{i + 1}' if source else f'input {i + 1}' for i in range(len(inputs))]
    examples = [predict_inputs.example(
        names[i], predict_inputs.line_input(x, names[i], self.kind, pairs)
        if isinstance(x, str) else x, self.kind, self.labels, self.data, pairs, self.tokenizer)
                for i, x in enumerate(inputs)]
    # By the example form (Kind.example): a new kind of an existing form needs no method.
    self._progress = progress
    try:
      return getattr(self, f'_predict_{kinds.get(self.kind).example}')(examples)
    finally:
      self._progress = None

  # -------------------------------------------------------------------------------------------
  # Features -> outputs, in batches of fixed shape (one compilation).

  def _outputs(self, feature_arrays: dict) -> np.ndarray:
    return inference.outputs(self._counted(feature_arrays), self.params,
                                    {k: feature_arrays[k] for k in kinds.MODEL_INPUTS},
                                    self.batch_size)

  def _counted(self, feature_arrays: dict):
    """The model, telling self._progress the inputs done after each batch of rows that
    inference.outputs runs: rows are in input order (example_index), an input done once its
    last row (a text's windows, a context's spans) is."""
    progress, index = self._progress, np.asarray(feature_arrays.get('example_index', ()))
    if progress is None or not len(index):
      return self._apply
    rows, done = inference.rows_per_batch(len(index), self.batch_size), 0

    def counted(params, batch):
      nonlocal done
      out = jax.block_until_ready(self._apply(params, batch))
      done = min(done + rows, len(index))
      progress.update(int(index[done]) if done < len(index) else progress.total)
      return out
    return counted

  def _predict_texts(self, examples):
    if (self.data.get('max_windows', 1) > 1
        and self.run.get('task') in registry.TOPIC_TASKS):
      # Eval's features (bbc, wordnet: up to max_windows windows of a text, one row each), and
      # eval's per-text mean of their logits; a task that does not window gives one row each.
      task = registry.get_task(self.run['task'], self.data, labels=self.labels)
      feats, _ = task.featurize(examples, self.tokenizer, is_training=False)
      logits = text_windows.example_logits(self._outputs(feats), feats['example_index'],
                                           len(examples))
    else:
      feats = features_lib.encode(examples, self.tokenizer, self.data.max_seq_length, 'predict',
                                  self.labels)
      logits = self._outputs(feats)
    return kinds.get(self.kind).predictions(self.labels, logits, logits=True, digits=None)

  def _predict_choices(self, questions):
    feats = multiple_choice.convert(questions, self.tokenizer, self.data.max_seq_length)
    return kinds.get(self.kind).predictions(self.labels, self._outputs(feats), logits=True,
                                             digits=None)

  def _predict_words(self, sentences):
    feats, meta = conll.convert_sentences(sentences, self.tokenizer, self.data.max_seq_length,
                                          self.labels)
    logits_NxLxC = self._outputs(feats)
    tags = conll.word_predictions(logits_NxLxC, feats, meta, sentences, self.labels)
    out = []
    for sentence, words, logits_WxC in zip(sentences, tags, _word_logits(
        logits_NxLxC, feats, meta, sentences), strict=True):
      probs_WxC = kind_table.probabilities(logits_WxC)
      out.append({'tokens': list(sentence.words), 'tags': words,
                  'probabilities': [_by_label(self.labels, p) for p in probs_WxC],
                  'logits': [_by_label(self.labels, x) for x in logits_WxC]})
    return out

  def _predict_question(self, examples):
    data = self.data
    feats, meta = squad.convert_examples(
        examples, self.tokenizer, max_seq_length=data.max_seq_length,
        doc_stride=data.doc_stride, max_query_length=data.max_query_length, is_training=False)
    logits = self._outputs(feats)
    predictions, nbest, _ = squad_answers.postprocess(
        logits[..., 0], logits[..., 1], examples, feats, meta, n_best_size=data.n_best_size,
        max_answer_length=data.max_answer_length, do_lower_case=data.do_lower_case,
        version_2_with_negative=bool(self.run.get('version_2_with_negative', False)),
        null_score_diff_threshold=data.null_score_diff_threshold)
    out = []
    for example in examples:
      answer = predictions[example.qas_id]
      # No entry: the context has no wordpieces, nothing was read or scored (score null).
      best = next((n for n in nbest[example.qas_id] if n['text'] == answer),
                  {'probability': None, 'start_logit': None, 'end_logit': None})
      out.append({'answer': answer, 'score': _float_or_none(best['probability']),
                  'start_logit': _float_or_none(best['start_logit']),
                  'end_logit': _float_or_none(best['end_logit'])})
    return out


# The command line writes a kind's Kind.line_fields of predict()'s, probabilities and scores
# rounded to 6 decimals: a person reads them, and eval's prediction files round the same way.
_ROUNDED = ('probabilities', 'score')


def jsonl_row(kind: str, prediction: dict) -> dict:
  """The command line's output line of one predict() result."""
  return {name: _rounded(prediction[name]) if name in _ROUNDED else prediction[name]
          for name in kinds.get(kind).line_fields}


def _rounded(value):
  if value is None:
    return None
  if isinstance(value, dict):
    return {k: round(v, 6) for k, v in value.items()}
  if isinstance(value, list):
    return [round(v, 6) for v in value]
  return round(value, 6)


def _by_label(labels, values) -> dict:
  return {label: float(v) for label, v in zip(labels, values, strict=True)}


def _float_or_none(value):
  return None if value is None else float(value)


def _word_logits(logits_NxLxC, features, meta, sentences) -> list[np.ndarray]:
  """Per sentence, the logits [W, C] of each word's first piece (conll.word_predictions'
  alignment, which has already checked that every word has exactly one)."""
  logits_NxLxC = np.asarray(logits_NxLxC, np.float64)
  word_index_NxL = np.asarray(meta.word_index)
  example_index_N = np.asarray(features['example_index'])
  out = [np.zeros((len(s.words), logits_NxLxC.shape[-1])) for s in sentences]
  for row, position in zip(*np.nonzero(word_index_NxL >= 0), strict=True):
    word = int(word_index_NxL[row, position])
    out[int(example_index_N[row])][word] = logits_NxLxC[row, position]
  return out



FLAGS = flags.FLAGS


def _define_flags():
  """Flags exist only when this module is the program (tests import the library part)."""
  flags.DEFINE_string('workdir', None, 'The fine-tuning run (its config.json and checkpoints).')
  flags.DEFINE_string('input_file', '', 'One input per line; default (or -): standard input.')
  flags.DEFINE_string('output_file', '', 'JSON lines to write; default (or -): standard output.')
  flags.DEFINE_bool('overwrite', False, 'Replace an existing --output_file.')
  flags.DEFINE_integer('batch_size', 32, 'Inputs per forward pass.', lower_bound=1)
  flags.DEFINE_string('step', None, 'The checkpoint: best (as the run ranked its evals; needs '
                      'checkpoint.keep_best), latest (the default) or a step number.')
  flags.DEFINE_float('null_score_diff_threshold', None, 'A SQuAD 2.0 model\'s no-answer '
                     'threshold (as tuned with --config.mode=eval); default: the run\'s.')


def _check_input_file(path: str):
  """Refuses a CSV or TSV file: predict reads one input per line, so its header would be an input
  and every row's other columns part of its text."""
  if path and (any(c in path for c in '*?[') or ',' in path) and not files.exists(path):
    raise ValueError(f'--input_file={path} does not exist: predict reads one file (or the '
                     'standard input), not a glob or a list of files: join them, e.g. '
                     f'`cat {" ".join(path.split(","))} | python -m bertjax.predict '
                     '--workdir=...`.')
  name = files.name(path or '').lower()
  for packed in ('.gz', '.bz2', '.xz'):
    name = name.removesuffix(packed)
  if name.endswith(('.csv', '.tsv')):
    raise ValueError(f'--input_file={path} is a {name[-3:].upper()} file, but predict reads one '
                     'input per line (a text, `text_a ||| text_b`, or a JSON object), so its '
                     'header and every column would be read as text: score the file as the run '
                     "read its own with bertjax.main, the run's --config and --workdir, "
                     f'--config.mode=predict and --config.data.predict_file={path}; or, if it '
                     'holds one input per line and no header, name it .txt.')


def main(argv):
  command_flags.refuse_arguments(argv, '--workdir=..., --input_file=..., --output_file=...')
  console.install()
  for name in ('input_file', 'output_file'):  # '-': the standard stream, as Unix tools take it.
    if FLAGS[name].present and not FLAGS[name].value.strip():  # `--output_file=$OUT`, OUT unset.
      console.fail(f'error: --{name} is empty: name the file, or pass - (or leave the flag out) '
                   'for the standard stream.')
    if FLAGS[name].value == '-':
      FLAGS[name].value = ''
  for name, stream, closed, use in (
      ('output_file', 'stdout', 'output is closed (started with >&-)', 'predictions are written'),
      ('input_file', 'stdin', 'input is closed (started with <&-)', 'inputs are read')):
    if not FLAGS[name].value and stream in bertjax.CLOSED_STREAMS:
      console.fail(f'error: standard {closed}, where the {use} without --{name}: pass '
                   f'--{name}=FILE.')
  console.exit_on_interrupt(console.nothing_written(
      'nothing was written (predictions are written whole or not at all)'), terminate=True)
  start = time.perf_counter()
  with contextlib.ExitStack() as held:
    try:
      output = (paths.check_output_file(FLAGS.output_file, inputs=(FLAGS.input_file,))
                if FLAGS.output_file else None)
      if output is not None:  # One run per output file at a time: a second refused at its start.
        paths.refuse_compressed_name(output, f'--output_file={FLAGS.output_file}')
        held.enter_context(output_lock.held(output, 'predict', f'writing {output}'))
        paths.refuse_existing(output, FLAGS.overwrite, f'--output_file={FLAGS.output_file}')
      _check_input_file(FLAGS.input_file)
      predictor = Predictor._load(  # pylint: disable=protected-access
          FLAGS.workdir, checkpoint_reader.parse_step(FLAGS.step, text=True), FLAGS.batch_size,
          verbose=False)
      if FLAGS.null_score_diff_threshold is not None:
        predictor.set_null_threshold(FLAGS.null_score_diff_threshold)
      if FLAGS.input_file:
        lines, source = text_files.read_text_lines(FLAGS.input_file), FLAGS.input_file
      else:
        if sys.stdin.isatty():  # Else a terminal waits for lines with no word of why.
          print('reading inputs from standard input, one per line (Ctrl-D ends)', file=sys.stderr,
                flush=True)
        lines, source = text_files.read_stdin_lines(), '<stdin>'
      inputs = predict_inputs.read_inputs(lines, source, predictor.tokenizer, predictor.kind,
                                          predictor.run.get('text_pairs'))
      if not inputs:
        raise ValueError(f'{source} holds no inputs: one per line expected.')
      rows = predictor.predict(inputs, job_lines.Progress('predict', len(inputs), 'inputs'),
                               source=source)  # Errors name its lines (read_inputs' numbers).
      text = ''.join(json.dumps(jsonl_row(predictor.kind, row), ensure_ascii=False) + '\n'
                     for row in rows)
      if output is not None:
        paths.write_atomically(output, text)
      else:
        sys.stdout.write(text)
        sys.stdout.flush()  # A reader gone (`| head`) is said here, in the try.
    except BrokenPipeError as e:
      if not FLAGS.output_file:  # The reader of the predictions closed it (`| head`).
        console.reader_gone()
      console.fail(f'error: {e}')
    except OSError as e:
      output = paths.absolute(FLAGS.output_file) if FLAGS.output_file else None  # None: stdout
      console.fail(f'error: {paths.write_error(e, output) or e}')
    except ValueError as e:
      console.fail(f'error: {e}')
  summary = dict(metrics=[('inputs', len(rows)), ('step', predictor.step)],
                 outputs=[('predictions', output or 'stdout')])
  if output is not None:
    job_lines.summary('predict', time.perf_counter() - start, **summary)
  else:  # stdout carries the predictions alone (`predict | jq`): the last line goes to stderr.
    job_lines.summary('predict', time.perf_counter() - start, sys.stderr, **summary)


if __name__ == '__main__':
  _define_flags()
  flags.mark_flags_as_required(['workdir'])
  app.run(command_flags.usage_said(main), flags_parser=command_flags.flags_parser())
