"""Generation speed: new tokens/s of `tfm generate`'s two paths, and what the prompt costs.

  python experiments/generate_speed.py --config=configs/lm_quickstart.py
  python experiments/generate_speed.py --config=configs/lm_quickstart.py --prompt_lengths=8,64 \
      --max_new_tokens=100 --rows=8 --repeats=21

The config's model with random parameters (speed does not depend on their values), prompts of
random pieces of each --prompt_lengths, continued by the Generator `tfm generate` runs
(tfm/decode/generate.py), greedy, with no EOS (so every continuation has --max_new_tokens tokens):
  * streamed (tfm generate's default): one prompt, `Generator.start` (the prompt into the cache)
    then one `advance` call a token, each token fetched to the host as it is drawn;
  * batched (--nostream): --rows prompts, `Generator.generate`, the whole continuation in one call.
Each path runs once to compile, then --repeats timed times; each cell is the median run and, in
brackets, the fastest (on a machine shared with other jobs, the least disturbed). tokens/s is new
tokens over the whole time, the prompt included; "prompt" is the time of `start` alone (the
streamed path's cost before its first step).

The script reads the tfm of the checkout it sits in, so a copy in an older checkout times that
code with the same measurement; the first line says how that checkout fills the cache
(`Transformer.prefill`: the prompt in one pass; else one token a step).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tfm and configs of this checkout, installed or not

from tfm import config as config_lib  # noqa: E402
from tfm.decode import generate as gen  # noqa: E402
from tfm.experiment import Experiment  # noqa: E402
from tfm.model.transformer import Transformer  # noqa: E402
from tfm.train import backend  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("prompt_lengths", ["8", "64"], "prompt lengths in pieces")
flags.DEFINE_integer("max_new_tokens", 100, "new tokens a prompt (tfm generate's default)")
flags.DEFINE_integer("rows", 8, "prompts a batch on the batched path")
flags.DEFINE_integer("repeats", 21, "timed runs a measurement (the median and the fastest are "
                     "printed)")

NO_EOS = -1  # never drawn: random weights would end some continuations early


def _seconds(run) -> tuple[float, float]:
  """(median, fastest) seconds of run() over --repeats calls after a first (compiling) one."""
  run()
  times = []
  for _ in range(FLAGS.repeats):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return statistics.median(times), min(times)


def _rate(tokens: int, seconds: tuple[float, float]) -> str:
  """tokens/s of the median run (of the fastest)."""
  return f"{tokens / seconds[0]:.0f} ({tokens / seconds[1]:.0f})"


def main(argv):
  del argv
  if not FLAGS.config:
    raise app.UsageError("--config=FILE is required")
  backend.limit_platforms()
  exp = Experiment(config_lib.build(FLAGS.config))
  params = exp.init_state().params
  cfg = exp.config.model
  generator = exp.generator(max_new_tokens=FLAGS.max_new_tokens, temperature=0, eos_id=NO_EOS)
  prefill = ("one pass (Transformer.prefill)" if hasattr(Transformer, "prefill")
             else "one token a step")
  print(f"prompt into the cache: {prefill}")
  print(f"model: decoder layers={cfg.num_decoder_layers} d_model={cfg.d_model} "
        f"heads={cfg.num_heads} positions={cfg.positions} vocab={cfg.vocab_size}; "
        f"jax {jax.__version__} on {jax.devices()[0].platform}; {FLAGS.max_new_tokens} new tokens "
        f"a prompt, median (fastest) of {FLAGS.repeats} runs")
  rows, batch_rows = exp.decode_rows(1), exp.decode_rows(FLAGS.rows)
  print(f"| prompt pieces | streamed: prompt | streamed: tokens/s | batched ({batch_rows} rows): "
        "tokens/s |")
  print("|---|---|---|---|")
  rng = np.random.default_rng(0)
  n = FLAGS.max_new_tokens
  for length in (int(x) for x in FLAGS.prompt_lengths):
    prompts = [[int(t) for t in rng.integers(3, cfg.vocab_size, length)]
               for _ in range(FLAGS.rows)]
    one = gen.prompt_batch(prompts[:1], rows)
    key = gen.row_keys(0, 0, 1)[0]
    prompt_s = _seconds(
        lambda: jax.block_until_ready(generator.start(params, one.fed, one.counts)))

    def stream():
      made = list(gen.stream_tokens(generator, params, prompts[0], key=key, limit=n, rows=rows,
                                    eos_id=NO_EOS))
      assert len(made) == n, len(made)

    stream_s = _seconds(stream)
    batch = gen.prompt_batch(prompts, batch_rows)
    keys, limits = gen.row_keys(0, 0, batch_rows), np.full((batch_rows,), n, np.int32)

    def batched():
      result = generator.generate(params, batch.fed, batch.counts, batch.last, keys, limits)
      assert int(np.asarray(result.lengths).min()) == n

    batch_s = _seconds(batched)
    print(f"| {length} | {prompt_s[0] * 1e3:.1f} ms ({prompt_s[1] * 1e3:.1f}) | "
          f"{_rate(n, stream_s)} | {_rate(batch_rows * n, batch_s)} |", flush=True)


if __name__ == "__main__":
  config_lib.define_config_flag(FLAGS, sys.argv)
  app.run(main)
