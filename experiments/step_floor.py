"""The floor under a train step on this machine: its matrix products alone, and Adam's update alone.

  python experiments/step_floor.py                                   # the paper's base, 8 x 64
  python experiments/step_floor.py --config=configs/quickstart.py --rows=16 --length=128

Every projection of the model (encoder and decoder attention, cross-attention, FFN, the tied logits)
is timed as its three products at the batch's tokens: forward x @ W, input gradient g @ W^T and
weight gradient x^T @ g, all in one jitted function of independent products, in the config's compute
dtype. The attention score products (length x length per head) are left out and only counted, so the
figure is below what any step of this model can take. Adam's update (m, v and the parameters, state
donated) is timed alone over the same parameter count. Their sum is the floor; with
`--other_ms=T` (e.g. the Flax example's step time from compare_flax_wmt.py) it prints the largest
ratio T / step that a step could reach if everything other than these took no time at all.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tfm import config as config_lib  # noqa: E402
from tfm.train import backend  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("rows", 8, "batch rows a side")
flags.DEFINE_integer("length", 64, "tokens a row")
flags.DEFINE_integer("repeats", 9, "timed calls (the median is printed)")
flags.DEFINE_float("other_ms", None, "another step's time (ms): prints the largest ratio reachable")


def projections(cfg) -> list[tuple[int, int]]:
  """(fan_in, fan_out) of every matrix product of the model with the batch's tokens as rows."""
  heads_k, heads_v = cfg.num_heads * cfg.d_k, cfg.num_heads * cfg.d_v
  attention = [(cfg.d_model, heads_k)] * 2 + [(cfg.d_model, heads_v), (heads_v, cfg.d_model)]
  ffn = [(cfg.d_model, cfg.d_ff), (cfg.d_ff, cfg.d_model)]
  return ((attention + ffn) * cfg.num_encoder_layers + (2 * attention + ffn) * cfg.num_decoder_layers
          + [(cfg.d_model, cfg.vocab_size)])


def median_seconds(fn, *args, repeats: int) -> float:
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def products_seconds(shapes, tokens: int, dtype, repeats: int) -> float:
  rng = np.random.default_rng(0)
  draw = lambda *shape: jnp.asarray(rng.standard_normal(shape, np.float32), dtype)
  xs = [draw(tokens, k) for k, _ in shapes]
  ws = [draw(k, n) for k, n in shapes]
  gs = [draw(tokens, n) for _, n in shapes]
  step = jax.jit(lambda xs, ws, gs: [(x @ w, g @ w.T, x.T @ g) for x, w, g in zip(xs, ws, gs)])
  return median_seconds(step, xs, ws, gs, repeats=repeats)


def adam_seconds(parameters: int, repeats: int) -> float:
  """Adam(0.9, 0.98, 1e-9) over `parameters` float32 parameters in 16M-element leaves."""
  sizes = [1 << 24] * (parameters >> 24) + [parameters % (1 << 24)]
  state = [[jnp.full(s, value, jnp.float32) for s in sizes] for value in (1.0, 0.0, 0.0)]
  grads = [jnp.full(s, 1e-3, jnp.float32) for s in sizes]

  def update(p, m, v, g):
    m = [0.9 * a + 0.1 * b for a, b in zip(m, g)]
    v = [0.98 * a + 0.02 * b * b for a, b in zip(v, g)]
    return [a - 1e-4 * b / (jnp.sqrt(c) + 1e-9) for a, b, c in zip(p, m, v)], m, v

  step = jax.jit(update, donate_argnums=(0, 1, 2))
  times = []
  for i in range(repeats + 1):
    start = time.perf_counter()
    state = list(jax.block_until_ready(step(*state, grads)))
    if i:  # the first call compiles
      times.append(time.perf_counter() - start)
  return statistics.median(times)


def main(argv):
  del argv
  backend.limit_platforms()
  config = config_lib.build(FLAGS.config)
  cfg = config.model
  dtype = jnp.dtype(cfg.dtype if jax.default_backend() != "cpu" else "float32")  # as the comparison
  shapes, tokens = projections(cfg), FLAGS.rows * FLAGS.length
  flops = sum(3 * 2 * tokens * k * n for k, n in shapes)
  layers = cfg.num_encoder_layers + 2 * cfg.num_decoder_layers
  scores = 3 * 2 * 2 * FLAGS.rows * cfg.num_heads * FLAGS.length ** 2 * cfg.d_k * layers
  parameters = sum(k * n for k, n in shapes)  # the tied embedding is the last product's
  products = products_seconds(shapes, tokens, dtype, FLAGS.repeats)
  adam = adam_seconds(parameters, FLAGS.repeats)
  print(f"{jax.devices()[0].device_kind}, {FLAGS.rows} x {FLAGS.length} tokens a side, {dtype.name}")
  print(f"projection products: {len(shapes)} x 3, {flops / 1e9:.1f} GFLOP (attention scores, not "
        f"timed: {scores / 1e9:.1f}): {1e3 * products:.0f} ms, {flops / products / 1e9:.1f} GFLOP/s")
  print(f"Adam update over {parameters / 1e6:.1f}M parameters (weights only, no biases or norms): "
        f"{1e3 * adam:.0f} ms")
  floor = products + adam
  print(f"floor: {1e3 * floor:.0f} ms a step")
  if FLAGS.other_ms:
    print(f"largest reachable ratio against a {FLAGS.other_ms:.0f} ms step: "
          f"{FLAGS.other_ms / 1e3 / floor:.2f} (everything but these products and Adam free)")


if __name__ == "__main__":
  config_lib.define_config_flag(FLAGS, sys.argv, default=str(ROOT / "configs/base.py"))
  app.run(main)
