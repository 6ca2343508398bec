"""Per-token hidden states of chosen layers, as google-research/bert's extract_features.py.

  python -m bertjax.extract_features --input_file=in.txt --output_file=out.jsonl \
    --vocab_file=vocab.txt --bert_config_file=bert_config.json \
    --init_checkpoint=bert_model.ckpt --layers=-1,-2,-3,-4 --max_seq_length=128

Every path may be a URL (gs://...): the input is read and the output written through
bertjax.files (written to a local temporary file, then put as one object when whole).

or --init=DIR for any importable model (a bertjax workdir or checkpoint, a transformers BERT
directory, a TF1 checkpoint folder), whose vocab and casing are used unless given; a bertjax
run's checkpoint is its latest unless --step=best|latest|N names another. An input line
is `text_a` or `text_a ||| text_b`, split at the last ` ||| ` as the original's greedy
regex `^(.*) \\|\\|\\| (.*)$` splits it. Each output line is the original's JSON: `linex_index`, and
`features`, one per token ([CLS] and [SEP] included, no padding) with `token` and `layers`: the
`index` and `values` (rounded to 6 decimals) of each requested layer.

--layers index the Transformer layers' outputs as the original's (its all_encoder_layers[i]):
0 is the first layer's output, -1 (and num_layers - 1) the last; the embeddings are not a layer
here, as there, so a script written for the original gets the same vectors.

`concat_last_layers` is the paper's feature-based approach (the last four layers concatenated)
as one call.

The model runs through bertjax/inference.py, the one inference path of predict, embed and this.
"""

import contextlib
import dataclasses
import json
import numbers
import os
import shutil
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from bertjax import command_flags
from bertjax import console
from bertjax import files
from bertjax import inference
from bertjax import job_lines
from bertjax import output_lock
from bertjax import paths
from bertjax import predict_inputs
from bertjax import processes
from bertjax import text_files
from bertjax.interop import sources
from bertjax.model import encoder_config
from bertjax.model import platform_defaults
from bertjax.training import checkpoint_reader

STDIO = '-'  # --input_file=- reads standard input, --output_file=- writes standard output.


def read_examples(input_file, tokenizer=None) -> list[tuple[str, str | None]]:
  """(text_a, text_b or None) per line of `input_file` ('-': standard input), split as the
  original splits it. With the model's `tokenizer`, a text that holds no wordpieces (only
  control or zero-width characters) is refused as predict refuses it: the model would read
  [CLS] [SEP] and give the empty input's features."""
  if str(input_file) == STDIO:
    lines, source = text_files.read_stdin_lines(), '<stdin>'
  else:
    lines, source = text_files.read_text_lines(input_file), str(input_file)
  if lines:
    lines = text_files.check_no_blank_lines(lines, source)
  examples = []
  for number, line in enumerate(lines, 1):
    # The original's re.match(r'^(.*) \|\|\| (.*)$', line.strip()): greedy, so the last
    # separator splits; `a ||| b ||| c` is ('a ||| b', 'c').
    a, sep, b = line.strip().rpartition(' ||| ')
    examples.append((a, b) if sep else (b, None))
    if tokenizer is not None:
      for text in examples[-1]:
        if text is not None:
          predict_inputs.check_wordpieces(text, f'{source}:{number}', tokenizer)
  if not examples:
    raise ValueError(f'{source} is empty: one text (or `a ||| b`) per line expected.')
  return examples


def encode(tok, examples, max_seq_length: int):
  """Tokens per example, the padded batch, and the indices of the examples cut to
  max_seq_length (as the original cuts them: a pair's longer text first)."""
  tokens, batch = [], {k: np.zeros((len(examples), max_seq_length), np.int32)
                       for k in ('input_ids', 'input_mask', 'segment_ids')}
  cut = []
  for i, (text_a, text_b) in enumerate(examples):
    a = tok.tokenize(text_a)
    b = tok.tokenize(text_b) if text_b is not None else None
    if len(a) + len(b or ()) + (2 if b is None else 3) > max_seq_length:
      cut.append(i)
    if b is None:
      a = a[:max_seq_length - 2]
      row, segments = ['[CLS]', *a, '[SEP]'], [0] * (len(a) + 2)
    else:
      while len(a) + len(b) > max_seq_length - 3:
        (a if len(a) > len(b) else b).pop()
      row = ['[CLS]', *a, '[SEP]', *b, '[SEP]']
      segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    tokens.append(row)
    batch['input_ids'][i, :len(row)] = tok.convert_tokens_to_ids(row)
    batch['input_mask'][i, :len(row)] = 1
    batch['segment_ids'][i, :len(row)] = segments
  return tokens, batch, cut


def hidden_states_fn(config):
  """jit(params, batch) -> [N+1, B, L, D] float32 hidden states (embeddings first), of
  per-layer params (a Bundle's; return_hidden_states needs the layers unrolled)."""
  return inference.forward(platform_defaults.for_inference(
      encoder_config.default_config(**config), jax.default_backend(), saved_scan=False),
      'hidden_states')


def concat_last_layers(config, params, batch, n: int = 4):
  """The paper's feature-based approach: the last n layers' outputs concatenated, [B, L, n*D]."""
  layers = config['num_layers']
  if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= layers:
    # Past the layers, the embeddings came next, then again (an index past the end is clamped).
    raise ValueError(f'n={n!r}: the last n of the model\'s {layers} layers, 1 to {layers} (the '
                     'embeddings are not a layer).')
  states = hidden_states_fn(config)(params, batch)
  return jnp.concatenate([states[-i] for i in range(1, n + 1)], axis=-1)


@dataclasses.dataclass(frozen=True)
class Written:
  """run()'s result: the lines written; the checkpoint step read from a bertjax run (None for
  another source); how many inputs were longer than max_seq_length (their features end there),
  and the first of them (numbered from 1)."""
  lines: int
  step: int | None = None
  cut: int = 0
  cut_first: tuple = ()


DEFAULT_LAYERS = (-1, -2, -3, -4)  # The original's.
_CUT_SHOWN = 5  # The inputs cut that the summary names.


def run(init: str, input_file: str, output_file: str, layers=DEFAULT_LAYERS,
        max_seq_length: int = 128, batch_size: int = 32, vocab_file: str = '',
        do_lower_case: bool | None = None, bert_config_file: str = '', step=None,
        overwrite: bool = False) -> Written:
  """Writes the original's JSON lines for every input line; returns what it wrote (Written:
  the lines, the step read, the inputs cut). `step` picks a bertjax run's checkpoint: 'best',
  'latest' (None) or a step number. input_file / output_file '-': standard input / output.
  An existing output_file is replaced only with `overwrite`."""
  layers = _checked(layers, max_seq_length, batch_size)
  to_stdout = str(output_file) == STDIO
  output = None if to_stdout else paths.check_output_file(
      output_file, inputs=(i for i in (input_file, vocab_file, bert_config_file) if i != STDIO))
  if output is not None:
    paths.refuse_compressed_name(output, f'--output_file={output_file}')
  # One run per output file at a time: a second is refused now, not after its work.
  with (contextlib.nullcontext() if to_stdout else
        output_lock.held(output, 'extract_features', f'writing {output}')):
    if output is not None:
      paths.refuse_existing(output, overwrite, f'--output_file={output_file}')
    if output is None or files.is_remote(output):  # Written whole in the temporary folder first.
      _remove_dead_temporaries()
    return _extract(init, input_file, output, layers, max_seq_length, batch_size, vocab_file,
                    do_lower_case, bert_config_file, step)


def _checked(layers, max_seq_length, batch_size) -> tuple[int, ...]:
  """run()'s arguments checked as the command's flags are (a batch_size of -3 wrote an empty
  file and returned success; layers=(True,) wrote "index": true); returns the layers."""
  if (not isinstance(layers, (list, tuple)) or not layers or
      not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in layers)):
    raise TypeError(f'--layers={layers!r}: pass layer numbers, e.g. (-1, -2, -3, -4) (-1 is the '
                    'last layer, 0 the first).')
  for name, value, least in (('max_seq_length', max_seq_length, 3), ('batch_size', batch_size, 1)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
      raise ValueError(f'--{name}={value!r}: pass a whole number, {least} or more.')
  return tuple(int(i) for i in layers)


def _extract(init: str, input_file: str, output: str | None, layers, max_seq_length: int,
             batch_size: int, vocab_file: str, do_lower_case: bool | None,
             bert_config_file: str, step) -> Written:
  """run()'s work once `output` (None: standard output) is checked and held: the model loaded
  and checked, the inputs read, their features written."""
  model = _checked_model(init, layers, max_seq_length, vocab_file, do_lower_case,
                         bert_config_file, step)
  tok = inference.tokenizer(model, f'{init} has no vocab beside it: pass --vocab_file.',
                            casing_fix=lambda lower: _casing_fix(lower, do_lower_case is not None))
  examples = read_examples(input_file, tok)
  pairs = [i for i, (_, b) in enumerate(examples) if b is not None]
  encoder_config.check_segments(model.config['type_vocab_size'], [int(bool(pairs))],
                                f'the inputs of {input_file} (line {pairs[0] + 1} first)'
                                if pairs else '')
  cut = _write_features(model, tok, examples, output, layers, max_seq_length, batch_size, init)
  from_run = (not bert_config_file and sources.format_of(init) == 'bertjax'
              and files.name(model.source).isdigit())
  # The loader's source is <checkpoints>/<step>.
  return Written(len(examples), int(files.name(model.source)) if from_run else None, len(cut),
                 tuple(cut[:_CUT_SHOWN]))


def _casing_fix(lower: bool, given: bool) -> str:
  """What to pass where the casing (--do_lower_case, if `given`, else the model's record)
  contradicts the vocab's."""
  return (f'pass --{"" if lower else "no"}do_lower_case for {"an uncased" if lower else "a cased"}'
          + (" model, or drop the flag to read the model's own casing" if given else
             ' model (the casing the model records is not its vocab\'s)'))


def _checked_model(init: str, layers, max_seq_length: int, vocab_file: str,
                   do_lower_case: bool | None, bert_config_file: str, step):
  """The model `init` names (sources.load's Bundle), refused where it has no vocab, fewer
  positions than `max_seq_length` or no such `layers` (a warning where a run was trained on
  fewer tokens)."""
  if vocab_file and files.isdir(vocab_file) and not files.isfile(vocab_file):
    raise IsADirectoryError(f'--vocab_file={vocab_file} is a folder: name the vocab file '
                            '(vocab.txt, or a SentencePiece .model) in it.')
  # The one loader (any source, the run's step, the original's separate bert_config.json).
  model = sources.load(init, vocab_file=vocab_file, do_lower_case=do_lower_case, step=step,
                       bert_config_file=bert_config_file)
  if not model.vocab_file:
    run = files.parent(files.parent(model.source)) if model.step is not None else ''
    if run and not files.exists(files.join(run, 'config.json')):  # What records its vocab.
      raise ValueError(f'{run}\'s config.json is gone (the run\'s record of its vocab and '
                       'settings): put it back, or pass --vocab_file.')
    raise ValueError(f'{init} has no vocab beside it: pass --vocab_file.')
  if max_seq_length > model.config['max_position_embeddings']:
    raise ValueError(f'--max_seq_length={max_seq_length} exceeds the model\'s '
                     f'{model.config["max_position_embeddings"]} positions.')
  if model.step is not None and max_seq_length > model.max_seq_length:  # A bertjax run's.
    logging.warning('--max_seq_length=%d is past the %d tokens %s was trained on: positions from '
                    '%d on were never trained, so longer inputs\' features there are '
                    'untrained; pass --max_seq_length=%d for the run\'s own', max_seq_length,
                    model.max_seq_length, init, model.max_seq_length, model.max_seq_length)
  num_layers = model.config['num_layers']
  bad = [i for i in layers if not -num_layers <= i < num_layers]
  if bad:
    default = tuple(layers) == DEFAULT_LAYERS
    every = ','.join(str(-i) for i in range(1, num_layers + 1))
    raise ValueError(
        f'--layers {bad} out of range for a {num_layers}-layer model'
        + (" (-1,-2,-3,-4, the default: the original's last four)" if default else '')
        + f': 0 to {num_layers - 1} or -{num_layers} to -1 (0 is the first layer\'s output, -1 '
        'the last; the embeddings are not a layer, as in the original)'
        + (f'; pass e.g. --layers={every}' if default else '') + '.')
  return model


def _write_features(model, tok, examples, output: str | None, layers, max_seq_length: int,
                    batch_size: int, init: str) -> int:
  """Writes each example's JSON line into a temporary file, then shows it on standard output
  (`output` None), puts it to a URL in one object or renames it over a local file (its
  permissions kept): nothing half-written is left. Returns the inputs cut (numbered from 1)."""
  params = inference.encoder_params(model)
  fn = hidden_states_fn(model.config)
  # states[0] is the embeddings: the original's layer i is states[i + 1] (i >= 0), and
  # states[i] from the end. Only these come to the host.
  picked = np.asarray([index + 1 if index >= 0 else index for index in layers])
  # Rows padded to a power of two up to batch_size (inference.rows_per_batch, as predict and
  # embed): a few compiled shapes, and one line with --batch_size=1024 runs one row, not 1024
  # (padding rows are cut off). Tokens stay padded to --max_seq_length, as the original pads
  # them (cut to the batch's longest, the values moved by up to 3e-6). A batch of other rows
  # (1, 2, 4, ...: a short file, another --batch_size) computes in another order: its values
  # differ in the 6th decimal; the same file and --batch_size give the same bytes.
  rows = inference.rows_per_batch(len(examples), batch_size)
  temp = _temporary_beside(output)
  cut = []  # The inputs cut, numbered from 1 as the console numbers them.
  progress = job_lines.Progress('extract_features', len(examples), 'inputs')
  try:
    with console.temporary(temp), open(temp, 'w', encoding='utf-8') as f:  # local temp
      for start in range(0, len(examples), rows):
        chunk = examples[start:start + rows]
        tokens, batch, chunk_cut = encode(tok, chunk, max_seq_length)
        cut += [start + i + 1 for i in chunk_cut]
        batch = inference.padded(batch, rows)
        states = np.asarray(fn(params, batch)[picked])
        if not np.isfinite(states[:, :len(chunk)]).all():  # JSON has no NaN (parsers refuse it).
          row = int(np.argwhere(~np.isfinite(states[:, :len(chunk)]))[0][1])
          raise ValueError(f'the model gave NaN or infinite values for input {start + row + 1}: '
                           f'its weights hold some (a diverged run?), so {init} cannot give '
                           'features; nothing was written.')
        for row in range(len(chunk)):
          f.write(_json_line(start + row, tokens[row], states[:, row], layers))
        progress.update(start + len(chunk))
      f.close()
      if output is None:
        with open(temp, encoding='utf-8') as whole:  # local temp, written whole: now shown
          shutil.copyfileobj(whole, sys.stdout)  # local temp, to standard output
        sys.stdout.flush()
      elif files.is_remote(output):
        files.copy(temp, output)  # One object put: the whole file or none.
      else:
        mode = files.check_replaceable(output)  # Its permissions kept; read-only refused.
        if mode is not None:
          os.chmod(temp, mode)  # local temp
        os.replace(temp, output)  # local temp, renamed into place
  finally:
    if os.path.exists(temp):  # local temp: interrupted or failed, nothing half-written is left.
      os.unlink(temp)  # local temp
  return cut


def _json_line(index: int, tokens, states, layers) -> str:
  """The original's JSON line of input `index`: each token's values in each picked layer
  (states [layers, tokens, hidden]), rounded to 6 decimals as it writes them."""
  features = [{'token': token, 'layers': [
      {'index': layer, 'values': [round(float(x), 6) for x in states[j, t]]}
      for j, layer in enumerate(layers)]} for t, token in enumerate(tokens)]
  return json.dumps({'linex_index': index, 'features': features}) + '\n'


# The temporary file of a URL's or standard output's features: TEMP_PREFIX, the writer's
# processes.mark(), '-', tempfile's random part (no '-' in it), TEMP_SUFFIX.
TEMP_PREFIX, TEMP_SUFFIX = 'bertjax_features-', '.jsonl'


def _remove_dead_temporaries() -> list[str]:
  """Removes the temporary files that runs killed on this host left in the temporary folder (a
  whole features file each: processes.remove_dead_writers), saying so; returns their paths."""
  removed = processes.remove_dead_writers(tempfile.gettempdir(), TEMP_PREFIX, TEMP_SUFFIX, tail='-')
  for path in removed:
    logging.warning('removed %s: the features a run killed before it finished left.', path)
  return removed


def _temporary_beside(output: str | None) -> str:
  """A local file to write `output`'s lines into: beside a local output (renamed into place
  when whole), in the temporary folder for a URL (uploaded as one object when whole) or for
  standard output (None: copied there when whole), named for this process (a later run removes
  it if this one is killed: _remove_dead_temporaries)."""
  if output is None or files.is_remote(output):
    handle, temp = tempfile.mkstemp(prefix=f'{TEMP_PREFIX}{processes.mark()}-',
                                    suffix=TEMP_SUFFIX)
    os.close(handle)
    return temp
  files.makedirs(os.path.dirname(output) or '.')
  return files.temporary_beside(output)


FLAGS = flags.FLAGS


def _layers(text: str) -> tuple:
  try:
    layers = tuple(int(x) for x in text.split(','))
  except ValueError:
    raise ValueError(f'--layers={text!r}: comma-separated layer numbers, e.g. -1,-2,-3,-4 (-1 is '
                     'the last layer, 0 the first).') from None
  return layers


def _define_flags():
  """Flags exist only when this module is the program (tests import the library part)."""
  flags.DEFINE_string('input_file', None, 'Text, one `a` or `a ||| b` per line; - reads '
                      'standard input.')
  flags.DEFINE_string('output_file', None, 'JSON lines to write; - writes standard output.')
  flags.DEFINE_bool('overwrite', False, 'Replace an existing --output_file.')
  flags.DEFINE_string('vocab_file', '', 'The vocab (default: the one beside --init).')
  flags.DEFINE_string('bert_config_file', '', 'bert_config.json of --init_checkpoint.')
  flags.DEFINE_string('init_checkpoint', '', 'A TF1 checkpoint prefix (the original flag).')
  flags.DEFINE_string('init', '', 'Any importable model directory (instead of '
                              '--init_checkpoint).')
  flags.DEFINE_string('layers', '-1,-2,-3,-4', 'Layers to output, as the original\'s: 0 is the '
                      'first Transformer layer, -1 the last (the embeddings are not a layer).')
  flags.DEFINE_integer('max_seq_length', 128, 'Tokens per input, [CLS] and [SEP] included.',
                       lower_bound=3)
  flags.DEFINE_integer('batch_size', 32, 'Inputs per forward pass.', lower_bound=1)
  flags.DEFINE_string('step', None, 'A bertjax run\'s checkpoint (--init): best, latest (the '
                      'default) or a step number.')
  # A bool flag as the original's: --do_lower_case[=true|false|True|False|1|0],
  # --nodo_lower_case; unset (None) = what the model records, else the vocab's casing.
  flags.DEFINE_bool('do_lower_case', None, 'Override the casing (default: what the model '
                    'records, else the vocab\'s).')


def main(argv):
  command_flags.refuse_arguments(argv, '--init=..., --input_file=..., --output_file=...')
  console.install()
  console.exit_on_interrupt(console.nothing_written(
      'nothing was written (features are written whole or not at all)'), terminate=True)
  init = FLAGS.init or FLAGS.init_checkpoint
  start = time.perf_counter()
  try:
    if FLAGS.init and FLAGS.init_checkpoint:
      raise ValueError('--init and --init_checkpoint both name a model: pass one of them.')
    if not init:
      raise ValueError('pass --init=DIR (any importable model) or --init_checkpoint=PREFIX.')
    layers = _layers(FLAGS.layers)
    written = run(paths.absolute(init), FLAGS.input_file, FLAGS.output_file, layers=layers,
                max_seq_length=FLAGS.max_seq_length, batch_size=FLAGS.batch_size,
                vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
                bert_config_file=FLAGS.bert_config_file,
                step=checkpoint_reader.parse_step(FLAGS.step, text=True),
                overwrite=FLAGS.overwrite)
  except BrokenPipeError as e:
    if FLAGS.output_file == STDIO:  # The reader of the features closed it (`| head`).
      console.reader_gone()
    console.fail(f'error: {e}')
  except OSError as e:
    output = None if FLAGS.output_file == STDIO else paths.absolute(FLAGS.output_file)
    console.fail(f'error: {paths.write_error(e, output) or e}')
  except ValueError as e:
    console.fail(f'error: {e}')
  metrics = [('inputs', written.lines), ('layers', ','.join(map(str, layers)))]
  if written.step is not None:
    metrics.append(('step', written.step))
  if written.cut:  # Their features stop at the cut: said, as the original never said it.
    shown = ', '.join(map(str, written.cut_first)) + ('...' if written.cut > _CUT_SHOWN else '')
    metrics.append(('cut', f'{written.cut} (longer than --max_seq_length='
                           f'{FLAGS.max_seq_length}: input {shown})'))
  if FLAGS.output_file != STDIO:
    job_lines.summary('extract_features', time.perf_counter() - start, metrics=metrics,
                    outputs=[('features', paths.absolute(FLAGS.output_file))])
  else:  # stdout carries the features alone (`... | jq`): the last line goes to stderr.
    job_lines.summary('extract_features', time.perf_counter() - start, sys.stderr,
                      metrics=metrics, outputs=[('features', 'stdout')])


if __name__ == '__main__':
  _define_flags()
  flags.mark_flags_as_required(['input_file', 'output_file'])
  app.run(command_flags.usage_said(main), flags_parser=command_flags.flags_parser())
