"""The one step's losses on lm and mlm batches against computations outside it: an lm's dev NLL
is the next-piece NLL of a stream's rows (each row from the start token 0, the model decoding one
piece at a time with its cache), an mlm's counts the masked positions only."""

import jax
import numpy as np
import pytest

from tests.train.helpers import FAST_COMPILE
from tfm.config import Config
from tfm.data import prefetch
from tfm.data.config import DataConfig
from tfm.experiment import Experiment
from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer
from tfm.train.config import TrainConfig

VOCAB, LENGTH, ROWS = 40, 8, 3
TINY = dict(vocab_size=VOCAB, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8, dtype="float32",
            dropout_rate=0.0, num_encoder_layers=2, num_decoder_layers=2)


def _experiment(task: str, architecture: str) -> Experiment:
  layers = {"num_encoder_layers": 0} if architecture == "decoder_only" else {
      "num_decoder_layers": 0}
  config = Config(model=ModelConfig(**{**TINY, "architecture": architecture, **layers}),
                  data=DataConfig(vocab_size=VOCAB, max_length=LENGTH, text_key="en"),
                  train=TrainConfig(warmup_steps=10, label_smoothing=0.1), task=task)
  return Experiment(config, devices=jax.devices()[:1], compiler_options=FAST_COMPILE)


def _stream(rng) -> np.ndarray:
  """Texts of 2-6 ordinary pieces (ids >= 4), each ending in EOS (1), concatenated: [ROWS * LENGTH
  - 3] ids, so the last row ends in 3 padding positions."""
  ids = []
  while len(ids) < ROWS * LENGTH - 3:
    ids += list(rng.integers(4, VOCAB, int(rng.integers(2, 7)))) + [1]
  return np.asarray(ids[:ROWS * LENGTH - 3], np.int32)


def _log_softmax(logits) -> np.ndarray:
  x = np.asarray(logits, np.float64)
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _sums(exp: Experiment, params, batch: dict) -> dict:
  device = prefetch.to_device(batch, exp.batch_sharding)
  return {k: float(v) for k, v in jax.device_get(exp.eval_step(params, device)).items()}


def test_lm_dev_nll_is_the_next_piece_nll_of_the_stream_rows():
  exp = _experiment("lm", "decoder_only")
  params = exp.init_state().params
  stream = _stream(np.random.default_rng(0))
  targets = np.zeros(ROWS * LENGTH, np.int32)
  targets[:len(stream)] = stream
  targets = targets.reshape(ROWS, LENGTH)
  batch = {"targets": targets, "targets_segmentation": (targets != 0).astype(np.int32),
           "targets_position": np.tile(np.arange(LENGTH, dtype=np.int32), (ROWS, 1))}
  sums = _sums(exp, params, batch)

  # Outside the step: the model decodes each row piece by piece from the start token 0 (its
  # cache, no teacher-forcing shift), and numpy scores piece i by the logits after pieces < i.
  model: Transformer = exp.model
  variables = {"params": jax.device_get(params)}
  _, cache = model.apply(variables, None, None, ROWS, LENGTH, method=Transformer.init_cache,
                         mutable=["cache"])
  fed = np.concatenate([np.zeros((ROWS, 1), np.int32), targets[:, :-1]], axis=1)
  step = jax.jit(lambda cache, token: model.apply({**variables, **cache}, token,
                                                  method=Transformer.decode_step,
                                                  mutable=["cache"]))
  log_p = []
  for i in range(LENGTH):
    logits, cache = step(cache, fed[:, i:i + 1])
    log_p.append(_log_softmax(logits))
  log_p = np.stack(log_p, axis=1)  # [rows, length, vocab]
  picked = np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
  real = targets != 0
  assert sums["tokens"] == real.sum() == len(stream)  # every piece once, EOS included
  np.testing.assert_allclose(sums["nll"], -picked[real].sum(), rtol=2e-5)
  assert sums["correct"] == (log_p.argmax(-1) == targets)[real].sum()


def test_mlm_loss_counts_the_masked_positions_only():
  exp = _experiment("mlm", "encoder_only")
  params = exp.init_state().params
  rng = np.random.default_rng(1)
  original = _stream(rng)[:ROWS * LENGTH - 3]
  original = np.concatenate([original, np.zeros(3, np.int32)]).reshape(ROWS, LENGTH)
  selected = (rng.random((ROWS, LENGTH)) < 0.3) & (original > 1)  # real pieces, not EOS
  inputs = np.where(selected, 3, original).astype(np.int32)  # <mask> = 3
  ones = (original != 0).astype(np.int32)
  positions = np.tile(np.arange(LENGTH, dtype=np.int32), (ROWS, 1))
  batch = {"inputs": inputs, "inputs_segmentation": ones, "inputs_position": positions,
           "targets": np.where(selected, original, 0).astype(np.int32),
           "targets_segmentation": ones, "targets_position": positions}
  sums = _sums(exp, params, batch)

  logits = exp.model.apply({"params": jax.device_get(params)}, inputs, None,
                           inputs_segmentation=ones, inputs_positions=positions)
  log_p = _log_softmax(logits)
  picked = np.take_along_axis(log_p, original[..., None], axis=-1)[..., 0]
  assert 0 < selected.sum() < ones.sum()
  assert sums["tokens"] == selected.sum()  # the masked positions, nothing else
  np.testing.assert_allclose(sums["nll"], -picked[selected].sum(), rtol=2e-5)
  assert sums["correct"] == (log_p.argmax(-1) == original)[selected].sum()
