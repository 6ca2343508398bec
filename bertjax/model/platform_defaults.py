"""model.attention_impl and model.scan_layers = 'auto' (the configs' default), chosen by the
platform a run lands on; any other value in the config or on the command line is kept.

  platform  attention  layers                      why
  gpu       cudnn      unrolled                    measured (issue 29, one H100, bf16)
  tpu       xla        scanned from 12 layers on   compile time; XLA's attention takes dropout
  cpu       xla        scanned from 12 layers on   what the configs did before 'auto'

Measured on one H100 80GB (jax 0.11.2, bf16, AdamW, hidden dropout 0.1, no attention dropout,
2026-11-25; issue 29): nn.scan over the layers costs 37% of the step's throughput on
BERT-Base/128 batch 256 (cuDNN attention: 2744 seq/s scanned, 4316 unrolled) and 28% on
BERT-Large/512 batch 32 (227.5 vs 317.4); cuDNN's fused attention beats the written-out one by
15% unrolled (3750 -> 4316 seq/s). Unrolled layers compile longer (153 s vs 97 s for Base):
on a GPU the step time wins over a month of training. On a TPU nn.scan keeps the compile time
(and the AOT compile of a pod slice) independent of depth, and the XLA attention is the one
kernel with attention dropout that runs any length; the splash kernel stays an explicit choice.

cuDNN is picked only where it can run the config: bfloat16 compute (its kernel has no float32),
a head dim that is a multiple of 8 up to 128, and, for attention dropout in training, unrolled
layers (cuDNN draws it inside the kernel: model/cudnn_dropout.py); otherwise 'auto' is the XLA
attention and the message says what to change to get cuDNN. A GPU run that trains with cuDNN's
attention dropout checks first that it trains (cudnn_dropout.check, in settle) and says that a
resume is then not bit for bit.

scan_layers is the parameter layout (stacked 'layers/...' vs 'layers_<i>/...'): a run resumed
from a checkpoint keeps the layout that checkpoint was written with, whatever the platform.
The training loop settles the fields once at its start (settle) and records the settled values
in config.json and each checkpoint's meta; a model built outside a run with 'auto' resolves it
at trace time for the platform it is compiled for (encoder.BertEncoder), so no kernel ever sees
'auto'. Inference from a recorded config (predict, extract_features, embed: for_inference)
keeps the weights' layout and the recorded kernel where it runs, else takes this platform's.
"""

import jax
import ml_collections
import numpy as np

from bertjax.model import cudnn_dropout

AUTO = 'auto'
# Layers from which the TPU and CPU defaults stack them with nn.scan: base (12) and large (24),
# as the pre-training config did by size; smaller models compile fast unrolled.
SCAN_FROM_LAYERS = 12
# The attention kernel each platform prefers when the config lets it run (see the docstring).
ATTENTION = {'gpu': 'cudnn', 'tpu': 'xla', 'cpu': 'xla'}
# The platforms a kernel runs on where that is not all of them (xla and dot_product_attention
# run everywhere): a run trained on a GPU records cudnn, which a CPU or TPU cannot run; splash
# runs on a CPU only in Pallas' interpret mode, far too slow to serve with.
RUNS_ON = {'cudnn': ('gpu',), 'splash': ('tpu',)}


def platform_of(mesh) -> str:
  """'gpu', 'tpu' or 'cpu': the platform of the mesh's devices (what the run compiles for)."""
  return mesh.devices.flat[0].platform


def is_auto(value) -> bool:
  return isinstance(value, str) and value == AUTO


def scanned_layout(params) -> bool | None:
  """Whether a parameter tree (nested dicts, the encoder under 'bert') holds nn.scan's stacked
  layers (True) or one subtree per layer (False); None where it holds no encoder layers."""
  names = set(params['bert'].keys()) if hasattr(params.get('bert'), 'keys') else set()
  if 'layers' in names:
    return True
  return False if any(name.startswith('layers_') for name in names) else None


def _cudnn_blocker(model_config, training: bool, scan: bool = False) -> str:
  """Why cuDNN's flash kernel cannot run this config ('' = it can)."""
  head_dim = model_config.hidden_size // model_config.num_heads
  if model_config.dtype != 'bfloat16':
    return 'cudnn needs model.dtype=bfloat16'
  if head_dim % 8 or head_dim > 128:
    return f'cudnn needs a head dim that is a multiple of 8 up to 128, not {head_dim}'
  if training and model_config.attention_dropout_rate > 0 and scan:
    return ("cudnn's attention dropout needs unrolled layers, these are scanned: "
            'model.attention_dropout_rate=0 gives cudnn')
  return ''


def resolve(model_config, platform: str, *, training: bool = True,
            saved_scan: bool | None = None) -> tuple[ml_collections.ConfigDict, str]:
  """(a copy of `model_config` with its 'auto' fields chosen for `platform`, the one-line
  statement of the choice, e.g. 'attention cudnn, layers unrolled: GPU defaults').

  saved_scan: the layout of the checkpoint the run resumes from (scanned_layout), which an
  'auto' scan_layers keeps; an explicit value that contradicts it is refused here, by name,
  before anything is compiled.
  """
  resolved = ml_collections.ConfigDict(model_config.to_dict())
  auto = False
  scan, why_scan = model_config.scan_layers, 'set'
  if is_auto(scan):
    auto = True
    if saved_scan is not None:
      scan, why_scan = saved_scan, "the checkpoint's layout"
    else:
      scan, why_scan = platform != 'gpu' and model_config.num_layers >= SCAN_FROM_LAYERS, ''
  elif saved_scan is not None and bool(scan) != saved_scan:
    layout = 'stacked (nn.scan)' if saved_scan else 'per-layer'
    raise ValueError(f'model.scan_layers={scan} but the checkpoint this run resumes from holds '
                     f'{layout} layers: drop the override (auto keeps the checkpoint\'s '
                     'layout), or use another --workdir.')
  attention, why_attention = model_config.attention_impl, 'set'
  if attention == 'cudnn' and platform != 'gpu':  # Scoring too (mode=eval: a traceback).
    raise ValueError(f'model.attention_impl=cudnn is a GPU kernel and this run is on {platform}: '
                     'use attention_impl=auto (or xla).')
  if attention == 'cudnn' and platform == 'gpu' and (
      blocker := _cudnn_blocker(model_config, training=False)):  # As auto would not take it.
    raise ValueError(f'model.attention_impl=cudnn cannot run this model ({blocker}): set '
                     'model.dtype=bfloat16 where that is the cause, or use attention_impl=auto '
                     '(or xla).')
  if (attention == 'cudnn' and training and model_config.attention_dropout_rate > 0 and scan):
    # A scanned checkpoint's layout stays: unrolling is no fix for its resume.
    fix = 'model.scan_layers=False, ' if saved_scan is None else ''
    raise ValueError(
        "model.attention_impl=cudnn draws attention dropout inside the kernel, which needs "
        f'unrolled layers, and these are scanned: set {fix}model.attention_dropout_rate=0, or '
        'attention_impl=auto (or xla).')
  if is_auto(attention):
    auto = True
    attention, why_attention = ATTENTION.get(platform, 'xla'), ''
    if attention == 'cudnn' and (blocker := _cudnn_blocker(model_config, training, scan)):
      attention, why_attention = 'xla', blocker
  with resolved.ignore_type():  # 'auto' (a string) becomes a bool.
    resolved.attention_impl = attention
    resolved.scan_layers = bool(scan)
  unroll = model_config.get('scan_unroll', 1)
  layers = 'scanned' if scan else 'unrolled'
  if unroll > 1 and scan:  # Said where it applies, and where it does not.
    layers += f' {unroll} per trip'
  elif unroll > 1:
    unused = f'model.scan_unroll={unroll} unused'
    why_scan = f'{why_scan}; {unused}' if why_scan else unused
  parts = [f'attention {attention}', f'layers {layers}']
  reasons = (why_attention, why_scan)
  line = ', '.join(f'{p} ({r})' if r else p for p, r in zip(parts, reasons, strict=True))
  return resolved, f'{line}: {platform.upper()} defaults' if auto else f'{line}: as configured'


def settle(model_config, platform: str, *, saved_scan: bool | None = None, packed: bool = False,
           dropout_check=cudnn_dropout.check) -> str:
  """resolve() written into `model_config` itself, for the job's modules that already hold it
  (they read their config when first traced); returns the statement of the choice.

  A training run that lands on cuDNN's attention dropout on a GPU first runs
  dropout_check(packed) (cudnn_dropout.check: '' where it trains, else why not; packed: the
  run's rows hold several instances), agreed between processes: where it fails on any, 'auto'
  takes the XLA attention and says why, and an explicit cudnn is refused."""
  resolved, line = resolve(model_config, platform, saved_scan=saved_scan)
  if (platform == 'gpu' and resolved.attention_impl == 'cudnn'
      and resolved.attention_dropout_rate > 0
      and (failure := _on_every_process(dropout_check(packed)))):
    if not is_auto(model_config.attention_impl):
      raise ValueError(f'model.attention_impl=cudnn with attention dropout: {failure}. Use '
                       'attention_impl=xla (or auto), or model.attention_dropout_rate=0.')
    resolved.attention_impl = 'xla'
    line = line.replace('attention cudnn', f'attention xla ({failure})', 1)
  if resolved.attention_impl == 'cudnn' and resolved.attention_dropout_rate > 0:
    line += ("; cuDNN draws the attention-dropout masks, not the run's key: a resumed run is not "
             'bit for bit the uninterrupted one, and each device draws the same masks')
  with model_config.ignore_type():
    model_config.attention_impl = resolved.attention_impl
    model_config.scan_layers = resolved.scan_layers
  return line


def _on_every_process(failure: str) -> str:
  """This process's check failure, or another process's: every process compiles the same
  program (different kernels would diverge or hang the collectives), so one failure is all's."""
  if jax.process_count() == 1:
    return failure
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  failed = multihost_utils.process_allgather(np.int32(bool(failure)))
  if failure or not np.any(failed):
    return failure
  return (f'cuDNN attention dropout failed its check on process '
          f'{int(np.argmax(failed))} of {jax.process_count()}')


def for_inference(recorded, platform: str, *,
                  saved_scan: bool | None = None) -> ml_collections.ConfigDict:
  """The model config that runs a recorded model (a run's config.json or checkpoint meta
  'model' block, a full model ConfigDict) for inference on `platform`.

  The layout is the weights': saved_scan (scanned_layout of the params to be applied) where
  given, else the recorded scan_layers. The attention kernel is the recorded one where it runs
  on `platform` (the numerics the run's evals saw), else the platform's inference choice:
  the kernel changes no weight, so a run trained with cudnn on a GPU predicts on a CPU or TPU.
  """
  model_config = ml_collections.ConfigDict(
      recorded.to_dict() if hasattr(recorded, 'to_dict') else dict(recorded))
  with model_config.ignore_type():
    kernel = model_config.attention_impl
    if platform not in RUNS_ON.get(kernel, (platform,)) or (
        kernel == 'cudnn' and _cudnn_blocker(model_config, training=False)):
      model_config.attention_impl = AUTO
    if saved_scan is not None:
      model_config.scan_layers = AUTO  # resolve() takes the saved layout for 'auto'.
  return resolve(model_config, platform, training=False, saved_scan=saved_scan)[0]
