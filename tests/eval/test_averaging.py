"""Checkpoint averaging: the mean of the last N checkpoints' params equals a numpy mean, on the target
shardings, one checkpoint in memory at a time; explicit steps; too few / no checkpoints.

The sharded case (an FSDP mesh over 2 CPU devices) runs this file as a script in a subprocess:
XLA_FLAGS must give 2 host devices before jax is imported, and this pytest process keeps one device.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 python -m tests.eval.test_averaging OUT.json
"""

from __future__ import annotations

import gc
import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import warnings
import weakref

import jax
import numpy as np
import pytest

from tests.train import helpers
from tests.train.tiny_model import TinySeq2Seq, tiny_config
from tfm.eval import averaging
from tfm.train import checkpoint as ckpt_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = (100, 200, 300, 400)
TOLERANCE = 1e-6

# A failed Orbax read leaves its coroutines behind; collect them while this filter applies.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class Tiny:
  """The tiny train-test model on a mesh: its state, shardings and abstract state."""

  def __init__(self, mesh_config, devices):
    setup = helpers.Setup(TinySeq2Seq(tiny_config(dropout_rate=0.0)), helpers.train_cfg(),
                          mesh_config, devices)
    self.model, self.mesh, self.rules = setup.model, setup.mesh, setup.rules
    self.state, self.shardings = setup.state, setup.shardings
    self.abstract = setup.experiment.abstract_state

  def write_checkpoints(self, workdir, steps=STEPS) -> dict[int, dict]:
    """Saves one checkpoint per step whose params are distinct random values; returns them (numpy)."""
    saved = {}
    checkpointer = ckpt_lib.Checkpointer(workdir, keep=len(steps))
    for step in steps:
      rng = np.random.default_rng(step)
      params = jax.tree_util.tree_map(lambda x: rng.normal(size=x.shape).astype(np.float32),
                                      self.abstract.params)
      saved[step] = params
      state = self.state.replace(params=jax.device_put(params, self.shardings.params))
      checkpointer.save(step, state)
    checkpointer.wait()
    checkpointer.close()
    return saved


def numpy_mean(saved: dict[int, dict], steps) -> dict:
  trees = [saved[s] for s in steps]
  return jax.tree_util.tree_map(lambda *xs: np.mean(np.stack(xs).astype(np.float64), axis=0), *trees)


def max_difference(a, b) -> float:
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
             for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


@pytest.fixture(scope="module")
def tiny():
  return Tiny(helpers.mesh_cfg(), jax.devices()[:1])


@pytest.fixture(scope="module")
def written(tiny, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("averaging")
  return workdir, tiny.write_checkpoints(workdir)


def test_mean_of_the_last_n(tiny, written):
  workdir, saved = written
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mean, steps = averaging.average_params(workdir, tiny.abstract.params, 3)
  assert not [w for w in caught if "donat" in str(w.message)], "donating the running sum failed"
  assert steps == [200, 300, 400]
  assert max_difference(jax.device_get(mean), numpy_mean(saved, steps)) < TOLERANCE
  targets = jax.tree_util.tree_leaves(tiny.abstract.params)
  assert all(x.dtype == np.float32 and x.shape == t.shape and x.sharding == t.sharding
             for x, t in zip(jax.tree_util.tree_leaves(mean), targets))


def test_one_checkpoint_is_the_latest_exactly(tiny, written):
  workdir, saved = written
  mean, steps = averaging.average_params(workdir, tiny.abstract.params, 1)
  assert steps == [400]
  assert max_difference(jax.device_get(mean), saved[400]) == 0.0


def test_explicit_steps(tiny, written):
  workdir, saved = written
  mean, steps = averaging.average_params(workdir, tiny.abstract.params, 5, steps=[300, 100])
  assert steps == [100, 300]  # num is ignored with explicit steps
  assert max_difference(jax.device_get(mean), numpy_mean(saved, steps)) < TOLERANCE
  with pytest.raises(ValueError, match=r"\[250\] not found .*available: \[100, 200, 300, 400\]"):
    averaging.average_params(workdir, tiny.abstract.params, 2, steps=[100, 250])
  with pytest.raises(ValueError, match=r"\[200\] given more than once"):
    averaging.average_params(workdir, tiny.abstract.params, 2, steps=[200, 200])
  with pytest.raises(ValueError, match="no checkpoint steps given"):
    averaging.average_params(workdir, tiny.abstract.params, 2, steps=[])


def test_fewer_checkpoints_than_num_warns_and_averages_all(tiny, written, caplog):
  workdir, saved = written
  with caplog.at_level(logging.WARNING, logger="tfm.eval.averaging"):
    mean, steps = averaging.average_params(workdir, tiny.abstract.params, 20)
  assert steps == list(STEPS)
  assert max_difference(jax.device_get(mean), numpy_mean(saved, steps)) < TOLERANCE
  assert any("train.average_checkpoints=20" in r.getMessage() and "only 4" in r.getMessage()
             for r in caplog.records)


def test_errors(tiny, written, tmp_path):
  workdir, _ = written
  for num in (0, -1, 2.5, True):
    with pytest.raises(ValueError, match=r"train\.average_checkpoints: expected a positive integer"):
      averaging.average_params(workdir, tiny.abstract.params, num)
  empty = re.escape(f"{tmp_path}/checkpoints")
  with pytest.raises(ValueError, match=f"no finished checkpoint in {empty}"):
    averaging.average_params(tmp_path, tiny.abstract.params, 5)
  unsharded = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                                     tiny.abstract.params)
  with pytest.raises(ValueError, match="has no sharding"):
    averaging.average_params(workdir, unsharded, 2)
  wrong = {**tiny.abstract.params, "wi": jax.ShapeDtypeStruct(
      (32, 65), np.float32, sharding=tiny.abstract.params["wi"].sharding)}  # d_ff changed
  with pytest.raises(ckpt_lib.CheckpointError, match="no checkpoint in .* can be restored for averaging; the "
                     "newest: checkpoint .*checkpoints/400 cannot be restored"):
    averaging.average_params(workdir, wrong, 2)  # 400, 300, 200 and 100 all tried
  with pytest.raises(ckpt_lib.CheckpointError, match="checkpoints/300 cannot be restored for averaging"):
    averaging.average_params(workdir, wrong, 2, steps=[300])  # explicit steps: no fallback


def test_one_checkpoint_in_memory_at_a_time(tiny, written, monkeypatch):
  """Each restored checkpoint is freed before the next one is read (no list of all N is built)."""
  workdir, saved = written
  restore, alive = ckpt_lib.restore_params, []

  def tracking_restore(*args, **kwargs):
    gc.collect()
    alive.append(sum(ref() is not None for ref in refs))
    params = restore(*args, **kwargs)
    refs.extend(weakref.ref(x) for x in jax.tree_util.tree_leaves(params))
    return params

  refs = []
  monkeypatch.setattr(ckpt_lib, "restore_params", tracking_restore)
  # The objects alive now go to the collector's permanent generation (as tests/conftest.py sends
  # what the collection built): each collection above then walks what the averaging allocated (the
  # restored arrays and any cycle holding them), not the whole test process (~1 s each).
  gc.freeze()
  mean, steps = averaging.average_params(workdir, tiny.abstract.params, 4)
  assert alive == [0, 0, 0, 0]
  assert max_difference(jax.device_get(mean), numpy_mean(saved, steps)) < TOLERANCE


# --- the sharded case, in a subprocess with 2 CPU devices ------------------------------------------


def sharded_main(out: str) -> None:
  """FSDP over 2 devices: checkpoints of sharded states averaged back onto the sharded target."""
  import tempfile  # noqa: PLC0415
  assert jax.device_count() == 2, jax.devices()
  tiny = Tiny(helpers.mesh_cfg(data=1, fsdp=2), jax.devices())
  with tempfile.TemporaryDirectory() as workdir:
    saved = tiny.write_checkpoints(workdir, STEPS[:3])
    mean, steps = averaging.average_params(workdir, tiny.abstract.params, 2)
    leaves = jax.tree_util.tree_leaves(mean)
    targets = jax.tree_util.tree_leaves(tiny.abstract.params)
    result = {
        "steps": steps,
        "difference": max_difference(jax.device_get(mean), numpy_mean(saved, steps)),
        "same_shardings": all(x.sharding == t.sharding for x, t in zip(leaves, targets)),
        "wi_shard_shape": list(mean["wi"].addressable_shards[0].data.shape),
        "wi_devices": len(mean["wi"].sharding.device_set),
    }
  pathlib.Path(out).write_text(json.dumps(result))


def test_sharded_on_2_devices(tmp_path):
  out = tmp_path / "sharded.json"
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0 "
                       "--xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false "
                       "--xla_cpu_parallel_codegen_split_count=1")
  proc = subprocess.run([sys.executable, "-m", "tests.eval.test_averaging", str(out)], cwd=ROOT,
                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:]
  result = json.loads(out.read_text())
  assert result["steps"] == [200, 300]
  assert result["difference"] < TOLERANCE
  assert result["same_shardings"]
  assert result["wi_devices"] == 2 and result["wi_shard_shape"] == [16, 64]  # d_model 32 / fsdp 2


if __name__ == "__main__":
  sharded_main(sys.argv[1])
