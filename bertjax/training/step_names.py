"""How a reader's step is named and parsed: None or 'latest' (the newest), 'best', or a number;
and how the messages name it (a command's --step, a config's init_from_step). No orbax or JAX:
bertjax.main checks --step with it before JAX starts (config_args.check_step)."""

import dataclasses
import numbers


@dataclasses.dataclass(frozen=True)
class Asking:
  """How the user names a step and a run, for the messages: a command's flags (COMMAND_FLAGS,
  the readers': each names its run by its own flag) or a config's fields (init_from's)."""
  step: str = '--step'
  run: str = 'a run'
  where: str = ''  # What the step is of, said after it (' (init_from=RUN)').

  def said(self, step) -> str:
    return f'{self.step}={step}{self.where}'


COMMAND_FLAGS = Asking()


def parse_step(step, *, text: bool = False, asking: Asking = COMMAND_FLAGS) -> int | str | None:
  """None (the newest), 'best' or a step number, from a reader's `step`: None, 'latest', 'best'
  or a number >= 0 (`text`: a flag or a config's field, the number a digit string; a command's
  empty `--step=`, an unset variable, is refused; a recorded init_from_step '' is the newest)."""
  if step is None or step == 'latest' or (text and step == '' and asking is not COMMAND_FLAGS):
    return None
  if text and step == '':
    raise ValueError(f'{asking.said(step)} is empty: pass best, latest or a checkpoint step '
                     'number, or leave --step out for the newest.')
  if step == 'best':
    return 'best'
  if isinstance(step, numbers.Integral) and not isinstance(step, bool) and step >= 0:
    return int(step)
  if text and isinstance(step, str) and step.strip().isascii() and step.strip().isdigit():
    return int(step)
  if text:
    raise ValueError(f'{asking.said(step)}: pass best, latest or a checkpoint step number (0 or '
                     'more, one of the run\'s checkpoints/<step> folders).')
  if isinstance(step, str) and step.strip().isascii() and step.strip().isdigit():
    raise ValueError(f'step={step!r} is a str: pass the number, step={int(step)} (or \'best\' '
                     "or 'latest').")
  raise ValueError(f'step={step!r}: a checkpoint step is a number (0 or more, e.g. step=600), '
                   "'best' or 'latest'.")
