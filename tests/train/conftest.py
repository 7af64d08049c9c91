"""Fixtures shared by the single-device train tests (this process keeps jax's default device count;
the 8-device tests run in subprocesses, see test_multidevice.py)."""

import jax
import pytest

from tests.train import helpers
from tests.train.tiny_model import TinySeq2Seq, tiny_config

LABEL_SMOOTHING = 0.1


@pytest.fixture(scope="session")
def tiny_model():
  return TinySeq2Seq(tiny_config(dropout_rate=0.0))


@pytest.fixture(scope="session")
def tiny_setup(tiny_model):
  """The tiny model on a 1-device mesh: paper optimizer (warmup 10), label smoothing 0.1."""
  return helpers.Setup(tiny_model, helpers.train_cfg(label_smoothing=LABEL_SMOOTHING),
                       helpers.mesh_cfg(), jax.devices()[:1])
