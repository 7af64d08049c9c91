"""Multi-host start-up: join the JAX cluster that launch.sh describes, and host barriers.

launch.sh sets either TFM_COORDINATOR / TFM_NUM_PROCESSES / TFM_PROCESS_ID (N processes on one
machine, coordinator on 127.0.0.1) or TFM_DISTRIBUTED=auto (SLURM, TPU pods: jax.distributed reads
the cluster from the environment). Without either, this is a single process and nothing happens.
"""

from __future__ import annotations

import collections
import os

import jax
from jax._src import distributed as jax_distributed

# Long enough for the lead host to build a dataset (hours for WMT) while the others wait.
BARRIER_TIMEOUT_S = 24 * 3600
_barrier_uses: collections.Counter = collections.Counter()


def initialize_from_env() -> None:
  """Calls jax.distributed.initialize once, as the environment asks; a no-op for one process."""
  if jax.distributed.is_initialized():
    return
  coordinator = os.environ.get("TFM_COORDINATOR")
  if coordinator:
    try:
      num, index = int(os.environ["TFM_NUM_PROCESSES"]), int(os.environ["TFM_PROCESS_ID"])
    except (KeyError, ValueError) as e:
      raise ValueError("TFM_COORDINATOR is set, so TFM_NUM_PROCESSES and TFM_PROCESS_ID must be "
                       f"integers too ({e})") from None
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num, process_id=index)
  elif os.environ.get("TFM_DISTRIBUTED") == "auto":
    jax.distributed.initialize()


def barrier(name: str, timeout_s: float = BARRIER_TIMEOUT_S) -> None:
  """Waits until every host reaches the barrier `name` (no-op on one host), up to timeout_s.

  The coordination service's barrier, not a device collective: a collective
  (multihost_utils.sync_global_devices) gives up after 30 s of Gloo set-up on CPUs, so hosts that
  waited for a lead preparing data crashed. Each use of a name is a new barrier.
  """
  if jax.process_count() > 1:
    _barrier_uses[name] += 1
    jax_distributed.global_state.client.wait_at_barrier(f"{name}-{_barrier_uses[name]}",
                                                       timeout_in_ms=int(timeout_s * 1000))


def is_lead_host() -> bool:
  return jax.process_index() == 0
