"""When the training loop's periodic actions are due: a log line, dev loss, dev BLEU, a checkpoint.

Each action runs at the multiples of its cadence and at the run's last step; a checkpoint also at a
preempted step. A run resumed at a step due for evaluation owes that step's evaluations. A log window ends (its metrics are fetched, the one host sync) at every log step and
before anything that is not a train step, so the window's seconds are its steps' alone.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Due:
  """What one step is due for, once it has run."""
  last: bool  # the run's last step (train.steps)
  stop: bool  # preempted: save, then leave the loop
  evaluate: bool  # dev loss (and the input pipeline's figures)
  decode: bool  # dev BLEU
  save: bool  # a checkpoint
  flush: bool  # the log window ends: metrics fetched, a console line and TensorBoard scalars


@dataclasses.dataclass(frozen=True)
class Cadence:
  """The loop's cadences: train.steps and every how many steps each periodic action runs."""
  steps: int
  log_every: int
  eval_every: int
  checkpoint_every: int
  bleu_every: int = 0  # 0: no dev BLEU during training

  @classmethod
  def of(cls, config) -> Cadence:
    """From a Config's train and eval sections; eval.bleu_every only where the run translates
    (config.task 'translate': an lm or mlm run has no dev BLEU, and ignores the key)."""
    tc = config.train
    return cls(steps=tc.steps, log_every=tc.log_every, eval_every=tc.eval_every,
               checkpoint_every=tc.checkpoint_every,
               bleu_every=config.eval.bleu_every if config.translates else 0)

  def due(self, step: int, *, stop: bool = False) -> Due:
    """What `step` (1-based: the step just run) is due for; stop: a preemption was asked for."""
    last = step == self.steps
    evaluate = step % self.eval_every == 0 or last
    decode = bool(self.bleu_every) and (step % self.bleu_every == 0 or last)
    save = step % self.checkpoint_every == 0 or last or stop
    flush = step % self.log_every == 0 or evaluate or decode or save
    return Due(last=last, stop=stop, evaluate=evaluate, decode=decode, save=save, flush=flush)

  def owed(self, start: int) -> Due | None:
    """What a run resumed at `start` evaluates before its first step: the evaluations due at that
    step (its checkpoint was saved before them, and a SIGTERM there skips them), None where none
    is due or the run has no step left."""
    if not 0 < start < self.steps:
      return None
    due = self.due(start)
    return due if due.evaluate or due.decode else None

  def evaluations_left(self, start: int) -> int:
    """How many dev-loss and dev-BLEU evaluations a run resumed at `start` will run (owed, then
    those of steps start+1..steps)."""
    dues = [self.due(step) for step in range(start + 1, self.steps + 1)]
    owed = self.owed(start)
    dues += [owed] if owed is not None else []
    return sum(due.evaluate for due in dues) + sum(due.decode for due in dues)
