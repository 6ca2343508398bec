"""The kind table: what a model is for, and everything that follows from it, in one entry each.

A kind (the encoder alone, pre-training's MLM and NSP heads, or a fine-tuning task's head) knows
its head, its loss and metrics, its predictions, and how each export format holds it or why it
cannot. Every other module looks its kind up here instead of branching on the name, so adding a
kind is one entry (and its tests). It sits below interop/ and finetune/, which both read it.
Shape legend as in model/encoder.py.
"""

import dataclasses
import types
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax import format_names
from bertjax.model import encoder
from bertjax.model import heads
from bertjax.training import losses

# The export formats, in the order they are offered (bertjax.export --format).
FORMATS = format_names.FORMATS


@dataclasses.dataclass(frozen=True, eq=False)
class Transformers:
  """How a transformers directory holds the kind."""

  architecture: str  # config.json's `architectures`: the Bert* class that loads it.
  # bertjax path -> (transformers name, transposed: torch keeps [out, in]).
  head: types.MappingProxyType
  pooler: bool = True  # Whether the class has BERT's pooler (span and token heads do not).
  config: types.MappingProxyType = dataclasses.field(  # config.json fields it reads.
      default_factory=lambda: types.MappingProxyType({}))
  # The tensors that say a checkpoint holds this head, all of them (() = told by its class).
  markers: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Tf1:
  """How google-research/bert's checkpoint layout holds the kind."""

  head: types.MappingProxyType  # bertjax path -> (TF1 variable, transposed: stored [out, in]).
  # The variables that say a checkpoint holds this head, all of them (() = none: the encoder).
  markers: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Served:
  """How the SavedModel serves the kind: its signature and what the model part returns."""

  signature: str  # 'texts' (serving_default: text; pairs: text_a, text_b), 'answer', 'tags'.
  outputs: tuple[str, ...]  # serving_default's outputs, as its docstring lists them.
  # (model outputs, input_mask [B, L]) -> the converted function's outputs, float32 or int32.
  compute: Callable[..., dict]
  encoder: bool = False  # Serves the encoder's outputs (the pre-training heads are not served).


@dataclasses.dataclass(frozen=True, eq=False)
class SentenceTransformers:
  """How a sentence-transformers folder holds the kind: one vector per text (or pair)."""

  head_as_dense: bool  # Its head runs as Dense layers after pooling (else: the embedding).


@dataclasses.dataclass(frozen=True, eq=False)
class Onnx:
  """How the ONNX graph (interop/onnx_export.py, transformers' class converted) holds the kind."""

  outputs: tuple[str, ...]  # The graph's outputs, named as the SavedModel's model part.
  encoder: bool = False  # The encoder's outputs (the pre-training heads are not exported).


@dataclasses.dataclass(frozen=True)
class Kind:
  """One kind. Model and training: head(config, num_labels, pooling) -> the encoder + head
  model; head_params: its parameters beside `bert/...`; metrics(outputs, batch) -> (sum, weight)
  pairs with 'loss' first; targets: the batch keys the loss reads besides the model inputs;
  loss_weight(batch) -> what the summed loss is divided by; decode(outputs) -> per-row
  predictions on the host (class index, value, start/end logits, tag indices). Fine-tuning's
  kinds have all of these; the encoder and pre-training's (trained by pretrain.py's objective,
  losses.pretraining) have none.

  per_token: whether the outputs have the token axis (axis 1), like the inputs; token_targets:
  the targets that have it too; choices: the inputs are [B, C, L] (C choices per question);
  packable: several examples can share a row (batches.py), because each has one output from its
  own [CLS] or tokens' mean, or one per token with targets that move with their tokens
  (tagging); span logits are softmaxed over the whole row, so SQuAD is not packable.

  Labels and outputs: outputs(num_labels) -> the head's outputs per row (None: no task head);
  pooled: one output per sequence, read from the pooled output (so the pooling matters);
  named_labels: the labels are class or tag names (transformers' id2label); scored: the label is
  a real number the head predicts (regression), not a class; predictions(labels, outputs [N, C],
  logits=, digits=) -> the JSON fields of each row's prediction (sequence-level kinds), with
  the logits or not, probabilities rounded to `digits` (None: as computed). example: what one
  example of the task is, as predict reads it (predict_inputs.py): 'texts' (a text, or a pair
  text_a and text_b: a run records which it trained on, config.json's text_pairs, and predict
  refuses the other), 'question' (a question and its context), 'words' (a sentence's words),
  'choices' (a context and its choices); None: no task examples. line_fields: the fields of a
  prediction that predict's command line writes (its JSON lines as before the Python API gave
  logits).

  Formats (FORMATS): each is its holder (Transformers, Tf1, Served, SentenceTransformers, Onnx) or a
  string saying why the format cannot hold the kind."""

  head_params: tuple[str, ...]
  hf: Transformers | str
  tf1: Tf1 | str
  saved_model: Served | str
  sentence_transformers: SentenceTransformers | str
  onnx: Onnx | str
  head: Callable[[encoder.Config, int, str], nn.Module] | None = None
  metrics: Callable[[jnp.ndarray, dict], dict] | None = None
  targets: tuple[str, ...] = ()
  loss_weight: Callable[[dict], jnp.ndarray] | None = None
  decode: Callable[[np.ndarray], np.ndarray] | None = None
  per_token: bool = False
  token_targets: tuple[str, ...] = ()
  choices: bool = False
  packable: bool = False
  outputs: Callable[[int], int] | None = None
  pooled: bool = False
  named_labels: bool = False
  scored: bool = False
  predictions: Callable[..., list] | None = None
  example: str | None = None
  line_fields: tuple[str, ...] = ()

  @property
  def task(self) -> bool:
    """Whether fine-tuning trains it (a task's head, loss and metrics)."""
    return self.metrics is not None

  def holder(self, fmt: str):
    """How format `fmt` holds the kind, or None where it cannot (why_not says why)."""
    held = getattr(self, fmt)
    return None if isinstance(held, str) else held

  def why_not(self, fmt: str) -> str | None:
    """Why format `fmt` cannot hold the kind, or None where it does."""
    held = getattr(self, fmt)
    return held if isinstance(held, str) else None

  def heads_dropped(self, fmt: str) -> bool:
    """Whether format `fmt` holds only the encoder of a kind that has heads (pre-training's MLM
    and NSP: the SavedModel, ONNX and sentence-transformers serve its encoder)."""
    held = self.holder(fmt)
    return bool(self.head_params) and (
        getattr(held, 'encoder', False) or getattr(held, 'head_as_dense', None) is False)


def _example_weight(batch):
  return jnp.sum(batch['example_weight'])


def _tag_weights(batch):
  return batch['label_weights'] * losses.token_example_weight(batch)


def _label_weight(batch):
  return jnp.sum(_tag_weights(batch))


def probabilities(logits_NxC) -> np.ndarray:
  """Softmax over the last axis, in float64 on the host."""
  logits_NxC = np.asarray(logits_NxC, np.float64)
  exp = np.exp(logits_NxC - logits_NxC.max(-1, keepdims=True))
  return exp / exp.sum(-1, keepdims=True)


def _rounded(value: float, digits: int | None) -> float:
  return float(value) if digits is None else round(float(value), digits)


def _class_rows(labels, outputs_NxC, *, logits: bool, digits: int | None) -> list[dict]:
  outputs_NxC = np.asarray(outputs_NxC, np.float64)  # float32 logits, exactly.
  return [{'label': labels[int(np.argmax(p))],
           'probabilities': {label: _rounded(x, digits) for label, x in zip(labels, p,
                                                                            strict=True)},
           **({'logits': {label: float(x) for label, x in zip(labels, row, strict=True)}}
              if logits else {})}
          for p, row in zip(probabilities(outputs_NxC), outputs_NxC, strict=True)]


def _value_rows(labels, outputs_Nx1, *, logits: bool, digits: int | None) -> list[dict]:
  del labels, logits, digits  # A score is written as the model gives it.
  return [{'value': float(v)} for v in np.asarray(outputs_Nx1, np.float64)[:, 0]]


def _choice_rows(labels, outputs_NxC, *, logits: bool, digits: int | None) -> list[dict]:
  del labels
  outputs_NxC = np.asarray(outputs_NxC, np.float64)
  return [{'choice': int(np.argmax(p)), 'probabilities': [_rounded(x, digits) for x in p],
           **({'logits': [float(x) for x in row]} if logits else {})}
          for p, row in zip(probabilities(outputs_NxC), outputs_NxC, strict=True)]


def _encoder_outputs(out, input_mask_BxL):
  seq_BxLxD, pooled_BxD = out
  mask_BxLx1 = input_mask_BxL.astype(jnp.float32)[..., None]
  mean_BxD = jnp.sum(seq_BxLxD * mask_BxLx1, 1) / jnp.maximum(jnp.sum(mask_BxLx1, 1), 1.0)
  return {'sequence_output': seq_BxLxD, 'pooled_output': pooled_BxD,
          'mean_pooled_output': mean_BxD}


def _frozen(table: dict) -> types.MappingProxyType:
  return types.MappingProxyType(table)


# Head tensors, bertjax path -> (the format's name, transposed).
_HF_PRETRAINING = {
    'mlm/transform/kernel': ('cls.predictions.transform.dense.weight', True),
    'mlm/transform/bias': ('cls.predictions.transform.dense.bias', False),
    'mlm/layer_norm/scale': ('cls.predictions.transform.LayerNorm.weight', False),
    'mlm/layer_norm/bias': ('cls.predictions.transform.LayerNorm.bias', False),
    'mlm/output_bias': ('cls.predictions.bias', False),
    'nsp/dense/kernel': ('cls.seq_relationship.weight', True),
    'nsp/dense/bias': ('cls.seq_relationship.bias', False),
}
_HF_CLASSIFIER = {'classifier/kernel': ('classifier.weight', True),
                  'classifier/bias': ('classifier.bias', False)}
_HF_SPAN = {'qa_outputs/kernel': ('qa_outputs.weight', True),
            'qa_outputs/bias': ('qa_outputs.bias', False)}
_TF1_PRETRAINING = {
    'mlm/transform/kernel': ('cls/predictions/transform/dense/kernel', False),
    'mlm/transform/bias': ('cls/predictions/transform/dense/bias', False),
    'mlm/layer_norm/scale': ('cls/predictions/transform/LayerNorm/gamma', False),
    'mlm/layer_norm/bias': ('cls/predictions/transform/LayerNorm/beta', False),
    'mlm/output_bias': ('cls/predictions/output_bias', False),
    # run_pretraining.py stores this [2, D] ("output_weights", transposed).
    'nsp/dense/kernel': ('cls/seq_relationship/output_weights', True),
    'nsp/dense/bias': ('cls/seq_relationship/output_bias', False),
}


def _mlm_only(head: dict) -> types.MappingProxyType:
  return _frozen({k: v for k, v in head.items() if k.startswith('mlm/')})


# Exported as the encoder's outputs (the pre-training heads are not served).
_ENCODER_SERVED = Served('texts', ('sequence_output', 'pooled_output', 'mean_pooled_output',
                                   'input_mask'), _encoder_outputs, encoder=True)
_EMBEDDING = SentenceTransformers(head_as_dense=False)
_ENCODER_ONNX = Onnx(('sequence_output', 'pooled_output', 'mean_pooled_output'), encoder=True)
_PER_TOKEN = ('SentenceTransformer.encode gives one vector per text, a span or tagging head one '
              'per token')
_NOT_IN_ORIGINAL = "google-research/bert's scripts have no {} head"
_LABELS = _frozen({'problem_type': 'single_label_classification'})
_REGRESSION = _frozen({'problem_type': 'regression', 'id2label': {'0': 'LABEL_0'},
                       'label2id': {'LABEL_0': 0}})

# Ordered as a checkpoint's heads are told apart: pre-training (MLM and NSP) before MLM alone.
KINDS = {
    'encoder': Kind(
        head_params=(),
        hf=Transformers('BertModel', _frozen({})),
        tf1=Tf1(_frozen({})),
        saved_model=_ENCODER_SERVED, sentence_transformers=_EMBEDDING, onnx=_ENCODER_ONNX),
    'pretraining': Kind(
        head_params=('mlm/', 'nsp/'),
        hf=Transformers('BertForPreTraining', _frozen(_HF_PRETRAINING),
                        markers=('cls.predictions.bias', 'cls.seq_relationship.weight')),
        tf1=Tf1(_frozen(_TF1_PRETRAINING), markers=('cls/seq_relationship/output_bias',)),
        saved_model=_ENCODER_SERVED, sentence_transformers=_EMBEDDING, onnx=_ENCODER_ONNX),
    # MLM-only pre-training (model.nsp=False): no NSP head.
    'masked_lm': Kind(
        head_params=('mlm/',),
        hf=Transformers('BertForMaskedLM', _mlm_only(_HF_PRETRAINING), pooler=False,
                        markers=('cls.predictions.bias',)),
        tf1=Tf1(_mlm_only(_TF1_PRETRAINING), markers=('cls/predictions/output_bias',)),
        saved_model=_ENCODER_SERVED, sentence_transformers=_EMBEDDING, onnx=_ENCODER_ONNX),
    'classification': Kind(
        head_params=('classifier/',),
        hf=Transformers('BertForSequenceClassification', _frozen(_HF_CLASSIFIER),
                        config=_LABELS),
        tf1=Tf1(_frozen({  # run_classifier.py: [num_labels, D].
            'classifier/kernel': ('output_weights', True),
            'classifier/bias': ('output_bias', False)}), markers=('output_weights',)),
        saved_model=Served('texts', ('probabilities', 'label'),
                           lambda logits_BxC, _: {'probabilities': jax.nn.softmax(logits_BxC, -1)}),
        sentence_transformers=SentenceTransformers(head_as_dense=True),
        onnx=Onnx(('logits', 'probabilities')),
        head=heads.BertForSequenceClassification,
        metrics=lambda logits_BxC, batch: losses.classification(
            logits_BxC, batch['label'], batch['example_weight']),
        targets=('label',), loss_weight=_example_weight,
        decode=lambda logits_NxC: np.argmax(logits_NxC, -1), packable=True,
        outputs=lambda num_labels: num_labels, pooled=True, named_labels=True,
        predictions=_class_rows, example='texts', line_fields=('label', 'probabilities')),
    'regression': Kind(
        head_params=('classifier/',),
        hf=Transformers('BertForSequenceClassification', _frozen(_HF_CLASSIFIER),
                        config=_REGRESSION),
        tf1=_NOT_IN_ORIGINAL.format('regression'),
        saved_model=Served('texts', ('score',), lambda scores_Bx1, _: {'score': scores_Bx1[:, 0]}),
        sentence_transformers=SentenceTransformers(head_as_dense=True),
        onnx=Onnx(('score',)),
        head=lambda config, num_labels, pooling: heads.BertForSequenceClassification(
            config, 1, pooling),
        metrics=lambda scores_Bx1, batch: losses.regression(
            scores_Bx1[..., 0], batch['label'], batch['example_weight']),
        targets=('label',), loss_weight=_example_weight,
        decode=lambda scores_Nx1: scores_Nx1[..., 0], packable=True,
        outputs=lambda num_labels: 1, pooled=True, scored=True, predictions=_value_rows,
        example='texts', line_fields=('value',)),
    'span': Kind(
        head_params=('qa_outputs/',),
        hf=Transformers('BertForQuestionAnswering', _frozen(_HF_SPAN), pooler=False),
        tf1=Tf1(_frozen({  # run_squad.py: [2, D].
            'qa_outputs/kernel': ('cls/squad/output_weights', True),
            'qa_outputs/bias': ('cls/squad/output_bias', False)}),
            markers=('cls/squad/output_weights',)),
        saved_model=Served('answer', ('answer', 'score'), lambda logits_BxLx2, _: {
            'start_logits': logits_BxLx2[..., 0], 'end_logits': logits_BxLx2[..., 1]}),
        sentence_transformers=_PER_TOKEN, onnx=Onnx(('start_logits', 'end_logits')),
        head=lambda config, num_labels, pooling: heads.BertForQuestionAnswering(config),
        metrics=lambda logits_BxLx2, batch: losses.span(
            logits_BxLx2, batch['start_position'], batch['end_position'],
            batch['example_weight']),
        targets=('start_position', 'end_position'), loss_weight=_example_weight,
        decode=lambda logits_NxLx2: logits_NxLx2, per_token=True,
        outputs=lambda num_labels: 2, example='question', line_fields=('answer', 'score')),
    'tagging': Kind(
        head_params=('classifier/',),
        hf=Transformers('BertForTokenClassification', _frozen(_HF_CLASSIFIER), pooler=False),
        tf1=_NOT_IN_ORIGINAL.format('token-classification'),
        saved_model=Served('tags', ('words', 'tags'), lambda logits_BxLxC, _: {
            'tag_ids': jnp.argmax(logits_BxLxC, -1).astype(jnp.int32)}),
        sentence_transformers=_PER_TOKEN, onnx=Onnx(('logits', 'tag_ids')),
        head=lambda config, num_labels, pooling: heads.BertForTokenClassification(
            config, num_labels),
        metrics=lambda logits_BxLxC, batch: losses.classification(
            logits_BxLxC, batch['label_ids'], _tag_weights(batch)),
        targets=('label_ids', 'label_weights'), loss_weight=_label_weight,
        decode=lambda logits_NxLxC: np.argmax(logits_NxLxC, -1), per_token=True,
        token_targets=('label_ids', 'label_weights'), packable=True,
        outputs=lambda num_labels: num_labels, named_labels=True, example='words',
        line_fields=('tokens', 'tags')),
    # num_labels is the number of choices per question; inputs are [B, C, L]. One score per
    # [CLS] context [SEP] choice [SEP].
    'multiple_choice': Kind(
        head_params=('classifier/',),
        hf=Transformers('BertForMultipleChoice', _frozen(_HF_CLASSIFIER)),
        tf1=_NOT_IN_ORIGINAL.format('multiple-choice'),
        saved_model=('its signatures take a text or a pair per row, not a question with its '
                     'choices'),
        sentence_transformers=SentenceTransformers(head_as_dense=True),
        onnx=('not yet: its inputs are [B, C, L] (a question with its choices) and the graph '
              'takes [batch, sequence] rows'),
        head=lambda config, num_labels, pooling: heads.BertForMultipleChoice(config, pooling),
        metrics=lambda logits_BxC, batch: losses.classification(
            logits_BxC, batch['label'], batch['example_weight']),
        targets=('label',), loss_weight=_example_weight,
        decode=lambda logits_NxC: np.argmax(logits_NxC, -1), choices=True,
        outputs=lambda num_labels: 1, pooled=True, predictions=_choice_rows,
        example='choices', line_fields=('choice', 'probabilities')),
}


def get(name: str) -> Kind:
  if name not in KINDS:
    raise ValueError(f'unknown kind {name!r}; valid: {", ".join(KINDS)}.')
  return KINDS[name]


def told_by(tensors, fmt: str) -> str:
  """The kind a checkpoint in format `fmt` holding `tensors` (names) is, by its heads' markers:
  the first kind in table order whose markers are all there, else the encoder."""
  for name, kind in KINDS.items():
    holder = kind.holder(fmt)
    markers = getattr(holder, 'markers', ())
    if markers and all(marker in tensors for marker in markers):
      return name
  return 'encoder'


def held_by(fmt: str) -> tuple[str, ...]:
  """The kinds format `fmt` holds (whatever their pooling)."""
  return tuple(name for name, kind in KINDS.items() if kind.holder(fmt) is not None)
