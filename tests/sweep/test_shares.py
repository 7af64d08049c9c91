"""tfm sweep --parallel K: each run's disjoint share of this host's GPUs or CPU cores."""

import os

import pytest

from tfm.sweep.shares import device_shares
from tfm.train import backend


def test_visible_gpus_are_split_evenly_between_the_runs(monkeypatch):
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4")
  shares = device_shares(2)
  assert [s.env["CUDA_VISIBLE_DEVICES"] for s in shares] == ["0,1", "2,3"]
  with pytest.raises(ValueError, match=r"--parallel=6 but this host has 5 GPU"):
    device_shares(6)


def test_without_gpus_the_cpu_cores_are_split(monkeypatch):
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
  monkeypatch.setattr(backend, "present_accelerator", lambda: None)
  cpus = sorted(os.sched_getaffinity(0))
  shares = device_shares(len(cpus))
  assert [sorted(s.cpus) for s in shares] == [[c] for c in cpus]
  with pytest.raises(ValueError, match="--parallel"):
    device_shares(len(cpus) + 1)


def test_amd_gpus_run_one_at_a_time(monkeypatch):
  """Runs get their GPUs through CUDA_VISIBLE_DEVICES alone: on AMD GPUs K runs would share all."""
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
  monkeypatch.setattr(backend, "present_accelerator", lambda: "rocm")
  with pytest.raises(ValueError, match="--parallel > 1 on AMD GPUs"):
    device_shares(2)
  assert len(device_shares(1)) == 1
