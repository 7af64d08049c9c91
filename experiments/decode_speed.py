"""Decoding speed: output tokens/s of beam search (paper settings) for a config's model.

  python experiments/decode_speed.py --config=configs/base.py                 # random weights
  python experiments/decode_speed.py --workdir=workdirs/quickstart            # a trained model

Random-weight models decode synthetic sources of --source_length tokens, and the search runs to
the paper's limit (source length + 50) because an untrained model rarely emits EOS: that is the
worst case. A trained model decodes the first --batch_size dev sentences of its own corpus.
The first call compiles; the figure is the mean of --repeats timed calls after it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import numpy as np
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tfm and configs of this checkout, installed or not

from tfm import config as config_lib  # noqa: E402
from tfm.experiment import Experiment  # noqa: E402
from tfm.train import backend  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "a trained workdir (else --config with random weights)")
flags.DEFINE_integer("batch_size", 32, "sentences per batch")
flags.DEFINE_integer("beam_size", 4, "beam size (1 = greedy)")
flags.DEFINE_integer("source_length", 32, "synthetic source length (random-weight models)")
flags.DEFINE_integer("repeats", 2, "timed calls")


def _random_setup(config):
  exp = Experiment(config_lib.build(config))
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, exp.config.model.vocab_size,
                        (FLAGS.batch_size, FLAGS.source_length)).astype(np.int32)
  tokens[:, -1] = 1  # EOS
  return exp, exp.init_state().params, tokens


def _trained_setup(workdir):
  from tfm.data import pipeline  # pylint: disable=import-outside-toplevel
  from tfm.eval.restore import load_trained  # pylint: disable=import-outside-toplevel
  t = load_trained(workdir, average=1)
  pairs = pipeline.eval_text_pairs(t.config.data, t.experiment.data_source, "dev")
  sources = [s for s, _ in pairs[:FLAGS.batch_size]]
  encoded = [t.tokenizer.encode(s)[:t.config.data.max_length] for s in sources]
  tokens = np.zeros((FLAGS.batch_size, max(map(len, encoded))), np.int32)
  for row, ids in enumerate(encoded):
    tokens[row, :len(ids)] = ids
  return t.experiment, t.params, tokens


def main(argv):
  del argv
  if not (FLAGS.workdir or FLAGS.config):
    raise app.UsageError("--config=FILE (random parameters) or --workdir=DIR (a trained model) is "
                         "required")
  backend.limit_platforms()
  if FLAGS.workdir:
    exp, params, tokens = _trained_setup(FLAGS.workdir)
  else:
    exp, params, tokens = _random_setup(FLAGS.config)
  translate = exp.translate_fn(beam_size=FLAGS.beam_size)
  key = jax.random.PRNGKey(0)
  out, _ = jax.block_until_ready(translate(params, tokens, key))  # compile
  times, produced = [], 0
  for _ in range(FLAGS.repeats):
    start = time.perf_counter()
    out, _ = jax.block_until_ready(translate(params, tokens, key))
    times.append(time.perf_counter() - start)
    produced = int(np.sum(np.asarray(out) != 0))
  seconds = float(np.mean(times))
  cfg = exp.config.model
  print(f"model: {cfg.d_model=} layers={cfg.num_encoder_layers}+{cfg.num_decoder_layers} "
        f"vocab={cfg.vocab_size}; device: {jax.devices()[0].device_kind}")
  print(f"beam {FLAGS.beam_size}, batch {tokens.shape[0]}, source length {tokens.shape[1]}: "
        f"{produced} output tokens in {seconds:.2f} s = {produced / seconds:.1f} tokens/s "
        f"({tokens.shape[0] / seconds:.2f} sentences/s)")


if __name__ == "__main__":
  config_lib.define_config_flag(FLAGS, sys.argv)
  app.run(main)
