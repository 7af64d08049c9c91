"""The cluster tests' SLURM cluster: one per test session, started once and stopped at its end."""

import os

import pytest

from tests.cluster.slurm_cluster import PACKAGES, Cluster, missing_binaries
from tests.integration.conftest import corpus  # noqa: F401  pylint: disable=unused-import


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
  """munged, slurmctld and slurmd on this host (2 CPUs), reached through SLURM_CONF."""
  missing = missing_binaries()
  if missing and os.environ.get("TFM_CI"):
    pytest.fail(f"no SLURM in CI: .ci/run installs {PACKAGES} (missing {', '.join(missing)})")
  if missing:
    pytest.skip(f"no SLURM here: apt-get install {PACKAGES} (missing {', '.join(missing)})")
  started = Cluster(tmp_path_factory.mktemp("slurm"))
  started.start()
  previous = {k: os.environ.get(k) for k in started.environment()}
  os.environ.update(started.environment())
  try:
    yield started
  finally:
    for k, v in previous.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
    started.stop()
