"""An ONNX graph of the model that onnxruntime runs, with its tokenizer's files beside it.

The conversion is PyTorch's: the model is written as --format=hf writes it (hf_checkpoint.save,
into a temporary folder), loaded into its transformers class (the kind table's hf entry), and
converted by torch.onnx.export. Nothing here converts an operation.

Why torch.onnx.export's dynamo exporter (onnxscript translates the exported program; opset
OPSET): it is the exporter torch 2.13 maintains; the TorchScript one (dynamo=False) is deprecated
since torch 2.9. jax2onnx pins an older orbax than bertjax's, tf2onnx cannot read the
XlaCallModule op that jax2tf writes, and optimum's exporter pins transformers below 4.58.

The graph (batch and sequence axes dynamic; transformers' eager attention, so the attention mask
is plain arithmetic any runtime runs):
  inputs   input_ids, attention_mask, token_type_ids: int64 [batch, sequence] (transformers'
           names for BERT's input_ids, input_mask, segment_ids);
  outputs  named as the SavedModel's model part names them (interop/saved_model.py), by kind:
    encoder, pretraining,  sequence_output [B, L, D], pooled_output [B, D] (BERT's pooler),
    masked_lm              mean_pooled_output [B, D] (mean of the last layer over real tokens;
                           no pooled_output from a checkpoint without a pooler, as transformers'
                           BertForMaskedLM);
    classification         logits [B, C], probabilities [B, C] (class names: onnx_export.json);
    regression             score [B];
    span                   start_logits [B, L], end_logits [B, L];
    tagging                logits [B, L, C], tag_ids [B, L] (tag names: onnx_export.json).

The tokenizer is outside the graph: vocab.txt, tokenizer.json and tokenizer_config.json (the
casing) as --format=hf writes them, so `transformers.AutoTokenizer.from_pretrained(DIR)` gives
bertjax's ids. onnx_export.json says the kind, labels, inputs, outputs, opset and casing.
"""

import json
import tempfile

from bertjax import console
from bertjax import files
from bertjax.interop import bundle as bundle_lib
from bertjax.interop import hf_checkpoint
from bertjax.training import kinds

OPSET = 18  # What the dynamo exporter translates to natively; onnxruntime >= 1.14 runs it.
MODEL = 'model.onnx'
METADATA = 'onnx_export.json'
INPUTS = ('input_ids', 'attention_mask', 'token_type_ids')
# The packages the export imports, none at bertjax's import time: (module, what it does).
NEEDS = (('torch', 'runs the exporter'), ('transformers', 'holds the model in torch'),
         ('onnx', 'the graph format'), ('onnxscript', "the dynamo exporter's translator"))


def check_installed():
  """Refuses, before anything is read, an export whose packages are not installed."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  missing = [f'{name} ({why})' for name, why in NEEDS if importlib.util.find_spec(name) is None]
  if missing:
    raise ValueError(f'--format=onnx needs {", ".join(missing)}: pip install bertjax[onnx] '
                     '(torch, transformers, onnx, onnxscript and onnxruntime).')


def _holder(result: bundle_lib.Bundle) -> kinds.Onnx:
  """How the kind table says the ONNX export holds `result`'s kind."""
  bundle_lib.check_holds(result, 'onnx')  # Its graph is transformers' class: [CLS]-pooled.
  return kinds.get(result.kind).holder('onnx')


def _transformers_model(result: bundle_lib.Bundle, held: kinds.Onnx, folder: str):
  """`result` written as --format=hf writes it into local `folder`, loaded by transformers with
  every tensor from the file (none initialised at random)."""
  import transformers  # pylint: disable=g-import-not-at-top
  hf_checkpoint.save(result, folder)
  if held.encoder:  # The pre-training heads are not served: BertModel reads the encoder's part.
    model, info = transformers.BertModel.from_pretrained(
        folder, attn_implementation='eager', output_loading_info=True,
        add_pooling_layer=_has_pooler(result))
  else:
    cls = getattr(transformers, kinds.get(result.kind).hf.architecture)
    model, info = cls.from_pretrained(folder, attn_implementation='eager',
                                      output_loading_info=True)
  made_up = info['missing_keys'] or info['mismatched_keys']
  if made_up:
    raise ValueError(f'{result.source}: transformers initialised {sorted(made_up)} at random '
                     'when loading its --format=hf export; the graph would not be this model.')
  return model.eval()


def _has_pooler(result: bundle_lib.Bundle) -> bool:
  return 'bert/pooler/kernel' in result.params


def outputs(result: bundle_lib.Bundle, held: kinds.Onnx) -> tuple[str, ...]:
  """The graph's outputs: the kind table's, less pooled_output for an encoder that has no pooler
  (a transformers BertForMaskedLM checkpoint: nothing to compute it from)."""
  if held.encoder and not _has_pooler(result):
    return tuple(name for name in held.outputs if name != 'pooled_output')
  return held.outputs


def _graph_module(torch, model, names: tuple):
  """A torch module: (input_ids, attention_mask, token_type_ids) -> the outputs `names`."""
  def mean(out, mask_BxL):
    mask_BxLx1 = mask_BxL.unsqueeze(-1).to(out.last_hidden_state.dtype)
    return ((out.last_hidden_state * mask_BxLx1).sum(1) / mask_BxLx1.sum(1).clamp(min=1.0))
  # Output name -> how it is read from transformers' outputs (as bertjax's kinds.Served computes
  # it for the SavedModel).
  computed = {
      'sequence_output': lambda out, mask: out.last_hidden_state,
      'pooled_output': lambda out, mask: out.pooler_output,
      'mean_pooled_output': mean,
      'logits': lambda out, mask: out.logits,
      'probabilities': lambda out, mask: torch.softmax(out.logits, -1),
      'score': lambda out, mask: out.logits[:, 0],
      'start_logits': lambda out, mask: out.start_logits,
      'end_logits': lambda out, mask: out.end_logits,
      'tag_ids': lambda out, mask: torch.argmax(out.logits, -1),
  }

  class Graph(torch.nn.Module):

    def __init__(self):
      super().__init__()
      self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
      out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=token_type_ids)
      return tuple(computed[name](out, attention_mask) for name in names)
  # eval() on the wrapper: the exporter restores the wrapper's mode (train, for a fresh module)
  # recursively, which would turn dropout on in the model it holds.
  return Graph().eval()


def _exported(result: bundle_lib.Bundle, held: kinds.Onnx):
  """The ONNX program of `result` (torch.onnx.ONNXProgram)."""
  import torch  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory(prefix='bertjax_onnx_') as folder:  # local: the hf export
    with console.temporary(folder):  # An interrupt or SIGTERM removes it too.
      model = _transformers_model(result, held, folder)
  graph = _graph_module(torch, model, outputs(result, held))
  # A padded batch of 2 x 8, so that no size is 1 (the exporter would specialise it).
  ids = torch.full((2, 8), 100, dtype=torch.int64)
  mask = torch.ones((2, 8), dtype=torch.int64)
  mask[1, 5:] = 0
  axes = {0: torch.export.Dim('batch'), 1: torch.export.Dim('sequence')}  # One pair, shared.
  dims = (axes,) * len(INPUTS)
  with torch.no_grad():
    return torch.onnx.export(graph, (ids, mask, torch.zeros_like(ids)), input_names=list(
        INPUTS), output_names=list(outputs(result, held)), opset_version=OPSET, dynamo=True,
        dynamic_shapes=dims, verbose=False)


def save(result: bundle_lib.Bundle, output):
  """Writes model.onnx, the tokenizer's files and onnx_export.json into `output` (a folder or a
  URL)."""
  check_installed()
  held = _holder(result)
  bundle_lib.check_tokenizer(result, 'onnx')
  if not result.vocab_file:
    raise ValueError(f'{result.source} has no vocab file: pass --vocab_file, the vocab its '
                     'weights were trained with.')
  # transformers' progress bars and the exporter's lines (torchvision's ops it skips) held:
  # shown if the export fails, or at --verbosity=1.
  with console.stderr_held():
    program = _exported(result, held)
  files.write_atomically(files.join(output, MODEL), program.model_proto.SerializeToString())
  hf_checkpoint.write_tokenizer(result, output)
  files.write_atomically(files.join(output, METADATA), json.dumps(
      {'kind': result.kind, 'labels': list(result.labels), 'do_lower_case': result.do_lower_case,
       'inputs': list(INPUTS), 'outputs': list(outputs(result, held)), 'opset': OPSET,
       'max_position_embeddings': result.config['max_position_embeddings']}, indent=2) + '\n')


def loading_lines(output) -> list[str]:
  """The lines that load the export at `output` and run it on a text."""
  meta = json.loads(files.read_text(files.join(str(output), METADATA)))
  return ['load it with:', '  import onnxruntime, transformers',
          f'  session = onnxruntime.InferenceSession({files.join(str(output), MODEL)!r})',
          f'  tokenizer = transformers.AutoTokenizer.from_pretrained({str(output)!r})',
          "  inputs = tokenizer(['a text'], padding=True, truncation=True, return_tensors='np')",
          f'  {", ".join(meta["outputs"])} = session.run(None, dict(inputs))',
          f'inputs: {", ".join(f"{name}: int64 [batch, sequence]" for name in meta["inputs"])}']
