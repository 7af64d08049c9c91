"""Orbax checkpoints: bit-identical round trip, the last K kept, fallback past a corrupt latest one."""

import gc
import logging
import time

import jax
import numpy as np
import pytest

from tfm.config import build
from tfm.train.checkpoint import (CheckpointError, Checkpointer, available_steps, read_config, restore_params,
                                  write_config)
from tfm.data.prefetch import to_device
from tfm.train.sharding import batch_sharding
from tests.train import helpers


# A failed Orbax read leaves its coroutines behind; collect them (they complain when collected) while
# this module's warning filter applies, not during some later test. Once, after the module's last
# test (whose teardown this is, under the filter): a full collection of a test process's heap takes
# ~1 s, and one after every test cost the module 12 s.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True, scope="module")
def collect_garbage():
  yield
  gc.collect()


def abstract(setup):
  return setup.experiment.abstract_state


def identical(a, b) -> bool:
  same = jax.tree_util.tree_map(lambda x, y: np.asarray(x).dtype == np.asarray(y).dtype
                                and np.array_equal(np.asarray(x), np.asarray(y)), a, b)
  return jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b) and all(
      jax.tree_util.tree_leaves(same))


def perturbed(state, seed):
  """The state with different parameter values and step, so checkpoints of 'steps' differ."""
  rng = np.random.default_rng(seed)
  params = jax.tree_util.tree_map(lambda x: (np.asarray(x) + rng.normal(size=x.shape)).astype(x.dtype),
                                  state.params)
  return state.replace(params=params, step=np.int32(seed))


def test_roundtrip_is_bit_identical(tiny_setup, tmp_path):
  checkpointer = Checkpointer(tmp_path, keep=3)
  assert checkpointer.restore(abstract(tiny_setup)) is None  # nothing saved yet
  state = perturbed(tiny_setup.initial, 5)
  checkpointer.save(5, jax.device_put(state, tiny_setup.shardings), {"epoch": 1, "position": [3, 4]})
  restored, data, step = checkpointer.restore(abstract(tiny_setup))
  checkpointer.close()
  assert step == 5 and data == {"epoch": 1, "position": [3, 4]}
  assert identical(jax.device_get(restored), state)
  assert restored.params["wi"].sharding == tiny_setup.shardings.params["wi"]


def test_keeps_the_last_k(tiny_setup, tmp_path):
  checkpointer = Checkpointer(tmp_path, keep=2)
  for step in (1, 2, 3, 4):
    checkpointer.save(step, jax.device_put(perturbed(tiny_setup.initial, step), tiny_setup.shardings))
  checkpointer.wait()
  assert checkpointer.all_steps() == [3, 4] == available_steps(tmp_path)
  assert not checkpointer.save(4, jax.device_put(tiny_setup.initial, tiny_setup.shardings))
  assert checkpointer.latest_step() == 4
  checkpointer.close()


def test_saves_outside_the_series_are_kept_only_while_newest(tiny_setup, tmp_path):
  """keep=3 of the every-3 series to step 12, with preemption saves at 4, 5 and 7 among them: each
  off-series save stays while it is the newest (a resume needs it) and goes once a later one is on
  disk, never taking a series checkpoint with it, so the run ends with the uninterrupted run's
  [6, 9, 12] (the loop's case: tests/integration/test_robustness.py, long tier)."""
  checkpointer = Checkpointer(tmp_path, keep=3, period=3, final_step=12)
  seen = []
  for step in (3, 4, 5, 6, 7, 9, 12):
    checkpointer.save(step, jax.device_put(perturbed(tiny_setup.initial, step), tiny_setup.shardings))
    checkpointer.wait()
    seen.append(checkpointer.all_steps())
  assert seen == [[3], [3, 4], [3, 5], [3, 6], [3, 6, 7], [3, 6, 9], [6, 9, 12]]
  assert available_steps(tmp_path) == [6, 9, 12]
  checkpointer.close()


def test_corrupt_latest_falls_back_to_previous(tiny_setup, tmp_path, caplog):
  checkpointer = Checkpointer(tmp_path, keep=3)
  first, second = perturbed(tiny_setup.initial, 1), perturbed(tiny_setup.initial, 2)
  checkpointer.save(1, jax.device_put(first, tiny_setup.shardings), {"position": 1})
  checkpointer.save(2, jax.device_put(second, tiny_setup.shardings), {"position": 2})
  checkpointer.wait()
  files = [f for f in (tmp_path / "checkpoints" / "2" / "state").rglob("*") if f.is_file()]
  assert files
  for f in files:  # a torn write: every file of the latest step's state truncated
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 3])
  with caplog.at_level(logging.WARNING):
    restored, data, step = checkpointer.restore(abstract(tiny_setup))
  assert step == 1 and data == {"position": 1}
  assert identical(jax.device_get(restored), first)
  assert any("checkpoints/2 cannot be restored" in r.getMessage() for r in caplog.records)
  assert (tmp_path / "checkpoints" / "2.unreadable").exists()
  assert checkpointer.all_steps() == [1]
  checkpointer.save(2, jax.device_put(second, tiny_setup.shardings))  # the step can be written again
  checkpointer.wait()
  assert checkpointer.all_steps() == [1, 2]
  checkpointer.close()


def test_incompatible_state_raises_and_keeps_checkpoints(tiny_setup, tmp_path):
  checkpointer = Checkpointer(tmp_path, keep=3)
  for step in (1, 2):
    checkpointer.save(step, jax.device_put(perturbed(tiny_setup.initial, step), tiny_setup.shardings))
  target = abstract(tiny_setup)
  wrong = target.replace(params={**target.params, "wi": jax.ShapeDtypeStruct(
      (32, 65), np.float32, sharding=target.params["wi"].sharding)})  # d_ff changed
  with pytest.raises(CheckpointError, match="no checkpoint"):
    checkpointer.restore(wrong)
  assert checkpointer.all_steps() == [1, 2]
  checkpointer.close()


def test_donating_step_right_after_an_async_save(tiny_setup, tmp_path):
  checkpointer = Checkpointer(tmp_path, keep=2)
  state = tiny_setup.fresh_state()
  before = jax.device_get(state)
  checkpointer.save(0, state)
  batch = helpers.packed_batch(8, 12, tiny_setup.model.cfg.vocab_size)
  tiny_setup.step(state, to_device(batch, batch_sharding(tiny_setup.mesh, tiny_setup.rules)))
  restored, _, _ = checkpointer.restore(abstract(tiny_setup))
  checkpointer.close()
  assert identical(jax.device_get(restored), before)


def test_restore_params_only(tiny_setup, tmp_path):
  checkpointer = Checkpointer(tmp_path, keep=2)
  state = perturbed(tiny_setup.initial, 9)
  checkpointer.save(9, jax.device_put(state, tiny_setup.shardings))
  checkpointer.close()
  params = restore_params(tmp_path, 9, abstract(tiny_setup).params)
  assert identical(jax.device_get(params), state.params)


def test_config_json(tmp_path):
  rules = (("embed", "fsdp"), ("act_batch", ("data", "fsdp")))
  config = {"train": {"steps": 10, "schedule": "rsqrt_warmup"}, "mesh": {"rules": rules}}
  path = write_config(tmp_path, config)
  assert path == tmp_path / "config.json"
  loaded = read_config(tmp_path)
  assert loaded["train"] == {"steps": 10, "schedule": "rsqrt_warmup"}
  assert loaded["mesh"]["rules"] == [["embed", "fsdp"], ["act_batch", ["data", "fsdp"]]]
  # The typed config reads the lists back as the tuples it was written from.
  assert build(loaded).mesh.rules == rules


def test_keep_must_be_positive(tmp_path):
  with pytest.raises(ValueError, match=r"train\.keep_checkpoints"):
    Checkpointer(tmp_path, keep=0)


def test_a_save_killed_midway_leaves_nothing_after_the_next_run(tmp_path):
  """A process killed while its async save runs leaves checkpoints/<step>.orbax-checkpoint-tmp (a
  partial copy of the state); the next Checkpointer on the workdir removes it."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  child = ("import os, jax.numpy as jnp\n"
           "from tfm.train.checkpoint import Checkpointer\n"
           f"c = Checkpointer({str(tmp_path)!r}, keep=2)\n"
           "c.save(1234, {'w': jnp.ones((2048, 2048), jnp.float32)}, {})\n"
           "os._exit(9)\n")  # killed (a grace period over, the OOM killer) while the save runs
  subprocess.run([sys.executable, "-c", child], check=False, timeout=120)
  left = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
  assert left and all(".orbax-checkpoint-tmp" in name for name in left), left
  Checkpointer(str(tmp_path), keep=2).close()  # Orbax removes it in a background thread
  for _ in range(100):
    if not list((tmp_path / "checkpoints").iterdir()):
      break
    time.sleep(0.1)
  assert not list((tmp_path / "checkpoints").iterdir())


def test_a_kill_during_the_next_save_leaves_the_previous_checkpoint(tmp_path):
  """keep=1 (the best checkpoint's Checkpointer): step 2 on disk, then a process killed while step
  4's asynchronous save runs. Step 2 must still be there and readable: a checkpoint is deleted
  only once the one replacing it is on disk."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  child = ("import os, jax.numpy as jnp\n"
           "from tfm.train.checkpoint import Checkpointer\n"
           f"c = Checkpointer({str(tmp_path)!r}, keep=1)\n"
           "c.save(2, {'w': jnp.full((2048, 2048), 2.0)}, {'at': 2})\n"
           "c.wait()\n"
           "c.save(4, {'w': jnp.full((2048, 2048), 4.0)}, {'at': 4})\n"
           "os._exit(9)\n")  # killed while step 4 is written
  subprocess.run([sys.executable, "-c", child], check=False, timeout=120)
  assert available_steps(tmp_path) == [2]
  checkpointer = Checkpointer(str(tmp_path), keep=1)
  abstract_w = {"w": jax.ShapeDtypeStruct((2048, 2048), np.float32,
                                          sharding=jax.sharding.SingleDeviceSharding(
                                              jax.devices()[0]))}
  state, data, step = checkpointer.restore(abstract_w)
  assert step == 2 and data == {"at": 2} and float(state["w"][0, 0]) == 2.0
  checkpointer.save(4, {"w": jax.numpy.full((2048, 2048), 4.0)}, {"at": 4})
  assert 2 in available_steps(tmp_path)  # 4 in flight: 2 goes once 4 is on disk
  checkpointer.wait()
  assert available_steps(tmp_path) == [4]
  checkpointer.close()


def test_a_stacks_members_keep_the_newest_step_all_of_them_hold(tmp_path):
  """keep=1 for two members of a stack (peers): member 0's step 2 on disk does not delete its
  step 1 while member 1 holds only 1, so a kill then leaves a step both can resume from; once
  both hold 2, both delete 1. A `<step>.ahead` copy set aside at a resume goes once that step is
  written again."""
  members = [Checkpointer(str(tmp_path / f"m{k}"), keep=1) for k in range(2)]
  for checkpointer in members:
    checkpointer.peers = [c for c in members if c is not checkpointer]
  state = lambda v: {"w": jax.numpy.full((4,), float(v))}
  for checkpointer in members:
    checkpointer.save(1, state(1), {})
    checkpointer.wait()
  (tmp_path / "m1" / "checkpoints" / "2.ahead").mkdir()
  members[0].save(2, state(2), {})
  members[0].wait()
  assert [available_steps(tmp_path / f"m{k}") for k in range(2)] == [[1, 2], [1]]
  members[1].save(2, state(2), {})
  members[1].wait()
  members[0].wait()
  assert [available_steps(tmp_path / f"m{k}") for k in range(2)] == [[2], [2]]
  assert not (tmp_path / "m1" / "checkpoints" / "2.ahead").exists()
  for checkpointer in members:
    checkpointer.close()


def test_an_optimizer_state_numbered_by_optax_chain_is_named_and_its_params_still_restore(
    tiny_setup, tmp_path):
  """Checkpoints of older tfm versions held opt_state as optax.chain's tuple (opt_state/0/mu/...)."""
  import optax  # pylint: disable=import-outside-toplevel
  state = perturbed(tiny_setup.initial, 4)
  chain = optax.chain(optax.scale_by_adam(), optax.scale_by_learning_rate(1e-3))
  old = state.replace(opt_state=chain.init(state.params))
  checkpointer = Checkpointer(tmp_path, keep=2)
  checkpointer.save(4, old)
  with pytest.raises(CheckpointError, match=r"numbered it \(opt_state/0/\.\.\.\).*new --workdir"):
    checkpointer.restore(abstract(tiny_setup))
  assert checkpointer.all_steps() == [4]
  checkpointer.close()
  params = restore_params(tmp_path, 4, abstract(tiny_setup).params)
  assert identical(jax.device_get(params), state.params)
