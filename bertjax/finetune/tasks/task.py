"""What every fine-tuning task provides: its kind, labels, splits, reader, featurizer, metrics
and predictions writer (registry.get_task builds one by name)."""

import collections
import dataclasses
from typing import Any
from typing import Callable

# The end of a `read` count of eval examples kept despite it (SQuAD's whose answer is not
# located): said apart from the ones skipped.
KEPT = ' (kept for evaluation)'


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  kind: str  # classification, regression, span, tagging, multiple_choice.
  # Class names or tags; () for regression and spans; for multiple choice '0'..'C-1' (the
  # number of choices).
  labels: tuple
  main_metric: str  # Ranks checkpoints (higher is better).
  eval_splits: tuple
  test_splits: tuple
  read: Callable[[str], tuple[list, collections.Counter]]
  featurize: Callable[..., tuple[dict, Any]]  # (examples, tokenizer, *, is_training).
  evaluate: Callable[..., dict]  # (outputs, features, meta, examples) -> metrics.
  write_predictions: Callable[..., str]  # (outputs, features, meta, examples, split, dir).
  version_2: bool = False  # Span tasks: SQuAD 2.0's "no answer" is a possible prediction.
  # What `evaluate` reports, where the data decides it (a tagging set scored by entities or by
  # token): checked against checkpoint.best_metric before training. (): known from the task
  # name alone (config_check's metric_names).
  metric_names: tuple = ()
  # Where eval examples are held out of the training ones: the digest of all of them (before
  # max_eval_examples), once read (None: none held out). mode=eval compares it with the run's.
  held_out: Callable[[], str | None] = lambda: None
