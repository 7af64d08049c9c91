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
  """

  def __init__(self):
    self.requested = False
    self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    self.requested = True

  def stop(self, step: int) -> bool:
    if jax.distributed.is_initialized():
      return multihost_utils.reached_preemption_sync_point(step)
    return self.requested

  def restore(self):
    signal.signal(signal.SIGTERM, self._previous)
