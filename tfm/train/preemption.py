"""Preemption: SIGTERM ends training after the current step, at a step every host agrees on."""

from __future__ import annotations

import signal

import jax
from jax.experimental import multihost_utils


class Preemption:
  """SIGTERM -> stop after the current step; stop(step) is read once per step, no host sync.

  One process: a Python signal handler sets a flag, and the loop stops after the step in which
  the signal came. Under jax.distributed, JAX's preemption service owns SIGTERM; hosts get the
  notice at different steps, and one host leaving the loop alone would hang the others in a
  collective, so every host stops at the step the service agrees on
  (`multihost_utils.reached_preemption_sync_point`, which must be called at every step).

  The service sets the sync point one past the largest counter the hosts have passed it, 0 before
  the first call: the counter must count this process's calls (1, 2, ...), not training steps. A
  run resumed at step 1000 that passed its step would never reach a notice's sync point (measured
  with experiments/soak.py: a SIGTERM during the first compile of a resumed 2-process run was
  ignored and training went on to the end).
  """

  def __init__(self):
    self.requested = False
    self._calls = 0
    self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    self.requested = True

  def stop(self) -> bool:
    """Whether to stop after the step just taken (call once per step, on every host)."""
    if jax.distributed.is_initialized():
      self._calls += 1
      return multihost_utils.reached_preemption_sync_point(self._calls)
    return self.requested

  def restore(self):
    signal.signal(signal.SIGTERM, self._previous)
