"""SaveThread: checkpoint saves handed to a thread; the state is donated to the next step at once,
and the checkpoint still holds it to the bit."""

import gc

import jax
import numpy as np
import pytest

from tests.train import helpers
from tests.train.test_checkpoint import identical
from tfm.data.prefetch import to_device
from tfm.train.checkpoint import Checkpointer
from tfm.train.save_thread import SaveThread
from tfm.train.sharding import batch_sharding

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def test_a_save_holds_the_state_the_next_step_donated(tiny_setup, tmp_path):
  """Two saves, each followed at once by a step that donates the saved state: both checkpoints
  hold the states as they were at save(), with their data states; the training went on from the
  same values (the step after a save matches the step after no save)."""
  setup = tiny_setup
  batch = to_device(helpers.packed_batch(8, 12, setup.model.cfg.vocab_size, 0),
                    batch_sharding(setup.mesh, setup.rules))
  saves = SaveThread(Checkpointer(tmp_path, keep=3))
  state, want = setup.fresh_state(), {}
  for step in (1, 2):
    state, _ = setup.step(state, batch)
    want[step] = jax.device_get(state)
    saves.save(step, state, {"position": step})
    state, _ = setup.step(state, batch)  # donates the state just handed to the save
  saves.wait()
  after_steps = jax.device_get(state)
  for step in (1, 2):
    restored, data, got = saves.restore(setup.experiment.abstract_state, step=step)
    assert got == step and data == {"position": step}
    assert identical(jax.device_get(restored), want[step])
  assert saves.all_steps() == [1, 2]
  plain = setup.fresh_state()
  for _ in range(4):
    plain, _ = setup.step(plain, batch)
  assert identical(jax.device_get(plain), after_steps)
  saves.close()
  saves.checkpointer.close()
  gc.collect()


def test_a_failed_save_is_raised_by_the_next_call(tiny_setup, tmp_path):
  class Failing:
    def save(self, step, state, data_state):
      raise OSError(f"disk full at step {step}")

    def wait(self):
      pass

  saves = SaveThread(Failing())
  saves.save(3, tiny_setup.fresh_state(), {})
  with pytest.raises(OSError, match="disk full at step 3"):
    saves.wait()
  saves.wait()  # raised once
  saves.close()
