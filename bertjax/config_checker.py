"""The field lookups and range checks config_check's rules are written with: a field looked up
by its dotted path (a missing one is skipped, configs differ per job), and a failed check raised
as one line, `config.<field>=<value>: <why>; <fix>`. Pure Python, as config_check."""

import math
import numbers

from bertjax import console

MISSING = object()  # A field the config does not have.
_INT32 = 2**31


class Checker:
  """Looks fields up by dotted path (a missing one is skipped: configs differ per job)."""

  def __init__(self, config):
    self.config = config

  def get(self, path: str):
    node = self.config
    for key in path.split('.'):
      try:
        node = node[key]
      except (KeyError, AttributeError, TypeError):
        return MISSING
    return node

  def fail(self, path: str, value, why: str, fix: str):
    raise ValueError(f'config.{path}={value!r}: {console.said(why, fix)}')

  def number(self, path: str, *, integer: bool):
    """The field's value, or MISSING; raises when it is not a number (bool excluded)."""
    value = self.get(path)
    if value is MISSING:
      return MISSING
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and integer and not isinstance(value, numbers.Integral):
      # 16.0 (set from Python) passed, then failed deep in the run (tf.data, the PRNG).
      whole = math.isfinite(value) and float(value).is_integer()
      self.fail(path, value, 'must be a whole number' + (', written as one' if whole else ''),
                f'pass {int(value)}' if whole else f'pass --config.{path}=<a whole number>')
    if not ok:
      kind = 'a whole number' if integer else 'a number'
      self.fail(path, value, f'must be {kind}', f'pass --config.{path}=<{kind}>')
    if not math.isfinite(value):  # inf passes every range check, then fails mid-run.
      self.fail(path, value, 'must be a finite number', f'pass --config.{path}=<a finite number>')
    if integer and not -_INT32 <= value < _INT32:  # Counts reach jitted code as int32.
      self.fail(path, value, 'is past what a 32-bit integer holds (the steps, counts and seed '
                'reach compiled code as int32)', f'pass --config.{path} below 2**31 '
                f'({_INT32 - 1})')
    return value

  def at_least(self, path: str, low, fix: str = '', *, integer: bool = True, why: str = ''):
    value = self.number(path, integer=integer)
    if value is not MISSING and not value >= low:
      self.fail(path, value, why or f'must be >= {low}', fix or f'set --config.{path} to {low} '
                'or more')
    return value

  def positive(self, path: str, fix: str = '', *, integer: bool = True, why: str = ''):
    value = self.number(path, integer=integer)
    if value is not MISSING and not value > 0:
      self.fail(path, value, why or 'must be > 0', fix or f'set --config.{path} to a positive '
                'value')
    return value

  def fraction(self, path: str, *, closed_high: bool, fix: str = '', why: str = '',
               open_low: bool = False):
    """A value in [0, 1) ([0, 1] with closed_high; (0, ...) with open_low)."""
    value = self.number(path, integer=False)
    if value is MISSING:
      return value
    low_ok = value > 0 if open_low else value >= 0
    high_ok = value <= 1 if closed_high else value < 1
    if not (low_ok and high_ok):
      interval = f'{"(" if open_low else "["}0, 1{"]" if closed_high else ")"}'
      self.fail(path, value, why or f'must be in {interval}',
                fix or f'set --config.{path} to a value in {interval}')
    return value

  def all_or_positive(self, path: str, what: str):
    """-1 (= all) or at least 1."""
    value = self.number(path, integer=True)
    if value is not MISSING and value != -1 and value < 1:
      self.fail(path, value, f'must be -1 ({what}) or >= 1',
                f'set --config.{path}=-1 for {what}, or a positive count')
    return value

  def choice(self, path: str, valid):
    value = self.get(path)
    if value is not MISSING and value not in valid:
      self.fail(path, value, 'is unknown', f'valid: {", ".join(valid)}')
    return value
