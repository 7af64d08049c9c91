"""tfm against the official Flax WMT example (google/flax examples/wmt), same shapes, one process.

The example's model, beam search and train step are vendored in experiments/flax_wmt/ (the
google/flax revision they come from and their license: ORIGIN.md), the default --flax_wmt_dir;
another revision's `examples/wmt` directory can be passed instead:

  python experiments/compare_flax_wmt.py
  python experiments/compare_flax_wmt.py --only=train_small,beam --rounds=8
  git clone --depth 1 https://github.com/google/flax /tmp/flax       # the newest example instead
  python experiments/compare_flax_wmt.py --flax_wmt_dir=/tmp/flax/examples/wmt
  # on a GPU: the paper's models in bfloat16 at the paper's batch (96 x 256 a side), cuDNN attention
  python experiments/compare_flax_wmt.py --only=train_base,train_big \
      --dtype=bfloat16 --train_rows=96 --train_length=256 --tfm_overrides=model.attention_impl=cudnn

The script imports the example's own `models.py`, `decode.py` and `train.py` from there and runs its
train step (`train.train_step` under `jax.pmap`, as its training loop does, with its `TrainState`
and `optax.adamw`) and its beam search (`train.predict_step`). Modules that only the example's
training loop needs (tensorflow, clu, flax's checkpointing, its input pipeline and BLEU) are replaced by empty modules
while train.py is imported, so neither TensorFlow nor clu has to be installed.

Both sides get the same model: tfm's config (configs/quickstart.py at the shapes below, `SMALL`,
for "small"; configs/base.py for "base", configs/big.py for "big"; float32 unless --dtype)
translated to the example's TransformerConfig (shared embeddings, logits through the embedding, the
same widths, heads, layers and dropout; attention dropout as tfm's, 0). The architectures still
differ where the example differs from the paper (pre-LN, no attention biases, dropout on the FFN's
hidden layer, no cached encoder projections in decoding); that is what is compared.

Work, printed as tfm / flax (throughput ratios: above 1 means tfm is faster):
  train_small  train step, 2+2 layers, d_model 128, 16 x 128 packed tokens a side
  train_base   train step, the paper's base model, 8 x 64 packed tokens a side
  train_big    train step, the paper's big model (configs/big.py), 8 x 64 packed tokens a side
  beam         beam search, beam 4, alpha 0.6, batch 16, source 32, output up to source + 50
               (random weights rarely emit EOS, so both run about 82 steps), small model
  compile      lower + compile of each train step under jax.jit (the example's step vmapped over the
               device axis its pmap maps; time ratio: below 1 means tfm compiles faster)
  memory       XLA's peak memory of the base train step (argument + output + temporaries - aliased;
               below 1 means tfm needs less)

--dtype sets both models' compute dtype (parameters stay float32 on both sides), --train_rows and
--train_length every train step's batch (the defaults are the shapes above); the train rows also
give each side's target tokens/s and, on devices with a known peak, its MFU by tfm's FLOP count
(tfm/train/flops.py; the example's model has the same products, without the attention biases).

Throughput is timed interleaved: each round times `--calls` calls of tfm, then of flax (the
order alternates), after a compile and a warm-up call each; the ratio printed is the median of the
rounds' ratios, which cancels most of the load other processes put on a shared machine. Compile
times are the median over `--compile_rounds` fresh compilations (caches cleared, the persistent
compilation cache off).

The figures in docs/performance.md are from plain `python`, glibc's default allocator. `launch.sh` runs get
transparent huge pages for large blocks (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), which makes CPU
steps of both sides 9-28% faster in the same process (experiments/SPEED.md, fourteenth pass).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import statistics
import sys
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from benchmark_step import synthetic_batch  # noqa: E402
from tfm import config as config_lib  # noqa: E402
from tfm.data.prefetch import to_device  # noqa: E402
from tfm.experiment import Experiment  # noqa: E402
from tfm.train import backend  # noqa: E402
from tfm.train.flops import mfu, peak_flops, train_flops  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("flax_wmt_dir", str(ROOT / "experiments" / "flax_wmt"),
                    "the example's directory (.../flax/examples/wmt; default: the vendored copy)")
flags.DEFINE_list("only", ["train_small", "train_base", "beam", "compile", "memory"],
                  "which comparisons to run")
flags.DEFINE_integer("rounds", 7, "interleaved timing rounds")
flags.DEFINE_integer("calls", 3, "calls timed per round and side")
flags.DEFINE_integer("compile_rounds", 3, "fresh compilations per side for compile times")
flags.DEFINE_list("tfm_overrides", [], "extra tfm config overrides, e.g. model.scan_layers=true")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "compute dtype of both models")
flags.DEFINE_integer("train_rows", None, "train batch rows (default: 16 small, 8 base and big)")
flags.DEFINE_integer("train_length", None, "train tokens a row a side (default: 128 small, 64 others)")

# Modules the example's train.py imports for its training loop only (data, BLEU, logging).
_LOOP_ONLY = ("tensorflow", "clu", "clu.metric_writers", "clu.periodic_actions", "input_pipeline",
              "bleu", "flax.training.checkpoints")


class _Absent(types.ModuleType):
  """A stand-in module: any attribute is another stand-in (annotations such as tf.data.Dataset)."""

  def __getattr__(self, name):
    if name.startswith("__"):
      raise AttributeError(name)
    return _Absent(f"{self.__name__}.{name}")


def load_flax_wmt(directory: str) -> types.SimpleNamespace:
  """The example's models, decode and train modules, imported from `directory`."""
  path = Path(directory).expanduser().resolve()
  if not (path / "models.py").exists() or not (path / "train.py").exists():
    raise app.UsageError(f"--flax_wmt_dir={directory}: no models.py / train.py there (expected "
                         ".../flax/examples/wmt)")
  sys.path.insert(0, str(path))
  stubs = {}
  for name in _LOOP_ONLY:
    if name not in sys.modules:
      stubs[name] = sys.modules[name] = _Absent(name)
  try:
    models = importlib.import_module("models")
    decode = importlib.import_module("decode")
    train = importlib.import_module("train")
  finally:
    for name in stubs:
      sys.modules.pop(name, None)
  return types.SimpleNamespace(models=models, decode=decode, train=train)


# "small": the shapes of the first comparisons (configs/quickstart.py's at the time), pinned here so
# the comparison does not move when the quickstart does.
SMALL = ["model.vocab_size=8000", "data.vocab_size=8000", "model.d_model=128", "model.d_ff=512",
         "model.num_heads=4", "model.d_k=32", "model.d_v=32", "model.num_encoder_layers=2",
         "model.num_decoder_layers=2"]


def tfm_config(size: str, extra: list[str], dtype: str):
  """tfm's config for 'small' (configs/quickstart.py at SMALL's shapes), 'base' or 'big'
  (configs/base.py, configs/big.py), in `dtype`."""
  spec = f"configs/{'quickstart' if size == 'small' else size}.py"
  overrides = (SMALL if size == "small" else []) + [f"model.dtype={dtype}",
                                                     "train.compilation_cache_dir=", *extra]
  return config_lib.load_config(str(ROOT / spec), overrides)


def flax_model_config(fx, cfg, *, deterministic: bool, decode: bool, max_len: int):
  """The example's TransformerConfig for tfm's ModelConfig `cfg` (its compute dtype too)."""
  if cfg.num_encoder_layers != cfg.num_decoder_layers:
    raise ValueError("the example has one num_layers for both stacks")
  return fx.models.TransformerConfig(
      vocab_size=cfg.vocab_size, output_vocab_size=cfg.vocab_size, share_embeddings=True,
      logits_via_embedding=True, dtype=jnp.dtype(cfg.dtype), emb_dim=cfg.d_model,
      num_heads=cfg.num_heads, num_layers=cfg.num_encoder_layers,
      qkv_dim=cfg.num_heads * cfg.d_k, mlp_dim=cfg.d_ff, max_len=max_len,
      dropout_rate=cfg.dropout_rate, attention_dropout_rate=cfg.attention_dropout_rate,
      deterministic=deterministic, decode=decode)


# ---------------------------------------------------------------------------------------------
# Train steps: (step(), block) closures that advance their own state.


class TfmTrain:
  def __init__(self, config, rows: int, length: int):
    import optax  # noqa: F401  (imported by tfm anyway)
    self.exp = Experiment(config)
    cfg = config.model
    host = synthetic_batch(rows, length, cfg.vocab_size, True, 0)
    self.batch = to_device(host, self.exp.batch_sharding)
    self.state = self.exp.init_state()

  def lower(self):
    return self.exp.train_step.lower(self.state, self.batch)

  def __call__(self):
    self.state, metrics = self.exp.train_step(self.state, self.batch)
    return metrics


class FlaxTrain:
  """The example's train step under jax.pmap on one device, as its train.py builds it."""

  def __init__(self, fx, config, rows: int, length: int):
    import optax
    from flax import jax_utils
    from flax.training import common_utils
    t = fx.train
    cfg = config.model
    self.fx = fx
    train_config = flax_model_config(fx, cfg, deterministic=False, decode=False, max_len=length)
    eval_config = train_config.replace(deterministic=True)
    rng = jax.random.key(0)
    rng, init_rng = jax.random.split(rng)
    m = fx.models.Transformer(eval_config)
    variables = jax.jit(m.init)(init_rng, jnp.ones((rows, length), jnp.float32),
                                jnp.ones((rows, length), jnp.float32))
    schedule = t.create_learning_rate_schedule(learning_rate=0.002, warmup_steps=1000)
    state = t.TrainState.create(apply_fn=m.apply, params=variables["params"],
                                tx=optax.adamw(learning_rate=schedule, b1=0.9, b2=0.98, eps=1e-9,
                                               weight_decay=0.0),
                                dynamic_scale=None)
    self.state = jax_utils.replicate(state)
    step = functools.partial(t.train_step, config=train_config, learning_rate_fn=schedule,
                             label_smoothing=config.train.label_smoothing)
    self.step_fn = jax.pmap(step, axis_name="batch", donate_argnums=(0,))
    # For compile times, the same program under jax.jit as tfm's: pmap over one device is a map
    # over a leading axis of 1 with the collective axis named, which vmap is. (pmap keeps caches of
    # its own that jax.clear_caches() leaves, so timing its compilation measured cache hits.)
    self.jit_step = jax.jit(jax.vmap(step, axis_name="batch"), donate_argnums=(0,))
    host = synthetic_batch(rows, length, cfg.vocab_size, True, 0)
    self.batch = common_utils.shard(jax.tree_util.tree_map(np.asarray, host))
    self.rngs = jax.random.split(rng, jax.local_device_count())

  def lower(self):
    return self.jit_step.lower(self.state, self.batch, dropout_rng=self.rngs)

  def __call__(self):
    self.state, metrics = self.step_fn(self.state, self.batch, dropout_rng=self.rngs)
    return metrics


# ---------------------------------------------------------------------------------------------
# Beam search


def _sources(batch: int, length: int, vocab: int) -> np.ndarray:
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, vocab, (batch, length)).astype(np.int32)
  tokens[:, -1] = 1
  return tokens


class TfmBeam:
  def __init__(self, config, batch, length, extra):
    # The example's search: alpha 0.6 (its predict_step), outputs up to the source length + extra.
    config = config.replace(eval=dataclasses.replace(config.eval, max_extra_length=extra,
                                                     length_penalty=0.6))
    self.exp = Experiment(config)
    self.params = self.exp.init_state().params
    self.inputs = jnp.asarray(_sources(batch, length, config.model.vocab_size))
    self.translate = self.exp.translate_fn(beam_size=4)

  def __call__(self):
    return self.translate(self.params, self.inputs)

  def output_length(self, out):
    return float(np.mean(np.sum(np.asarray(out[0]) != 0, axis=-1)))


class FlaxBeam:
  """The example's predict_step (encode, then its beam search with its decode cache), jitted."""

  def __init__(self, fx, config, batch, length, extra):
    cfg = config.model
    t = fx.train
    max_decode_len = length + extra + 1  # its loop runs max_decode_len - 1 steps (slot 0: start)
    predict_config = flax_model_config(fx, cfg, deterministic=True, decode=True,
                                       max_len=max_decode_len)
    eval_config = predict_config.replace(decode=False)
    m = fx.models.Transformer(eval_config)
    self.params = jax.jit(m.init)(jax.random.key(0), jnp.ones((batch, length), jnp.float32),
                                  jnp.ones((batch, length), jnp.float32))["params"]
    self.inputs = jnp.asarray(_sources(batch, length, cfg.vocab_size))
    self.cache = jax.jit(functools.partial(t.initialize_cache, max_decode_len=max_decode_len,
                                           config=predict_config))(self.inputs)
    self.predict = jax.jit(functools.partial(t.predict_step, eos_id=1,
                                             max_decode_len=max_decode_len, config=predict_config,
                                             beam_size=4))

  def __call__(self):
    return self.predict(self.inputs, self.params, self.cache)

  def output_length(self, out):
    out = np.asarray(out)
    return float(np.mean(np.sum(np.cumsum(out == 1, axis=-1) == 0, axis=-1) + (out == 1).any(-1)))


# ---------------------------------------------------------------------------------------------


def interleaved(a, b, rounds: int, steps: int) -> tuple[float, list[float], list[float]]:
  """Median over rounds of time_b / time_a (a's throughput over b's), and the per-call seconds.

  Two untimed calls each first: the example's pmapped step compiles again on its second call (the
  state it returns is not typed as the replicated one it was given), which must not be timed.
  """
  for _ in range(2):
    jax.block_until_ready(a())
    jax.block_until_ready(b())
  times_a, times_b, ratios = [], [], []
  for r in range(rounds):
    pair = {}
    for name, fn in ((("a", a), ("b", b)) if r % 2 == 0 else (("b", b), ("a", a))):
      start = time.perf_counter()
      for _ in range(steps):
        out = fn()
      jax.block_until_ready(out)
      pair[name] = (time.perf_counter() - start) / steps
    times_a.append(pair["a"])
    times_b.append(pair["b"])
    ratios.append(pair["b"] / pair["a"])
  return statistics.median(ratios), times_a, times_b


def compile_seconds(lower, rounds: int) -> float:
  times = []
  for _ in range(rounds):
    jax.clear_caches()
    start = time.perf_counter()
    lower().compile()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def peak_bytes(compiled) -> int:
  m = compiled.memory_analysis()
  return (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
          - m.alias_size_in_bytes)


def main(argv):
  del argv
  backend.limit_platforms()
  jax.config.update("jax_enable_compilation_cache", False)  # compile times are compile times
  fx = load_flax_wmt(FLAGS.flax_wmt_dir)
  rows = []
  print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; rounds={FLAGS.rounds} "
        f"steps={FLAGS.calls}; tfm overrides {FLAGS.tfm_overrides or 'none'}", flush=True)
  defaults = {"small": (16, 128), "base": (8, 64), "big": (8, 64)}
  shapes = {size: (FLAGS.train_rows or n, FLAGS.train_length or length)
            for size, (n, length) in defaults.items()}
  trains = {}

  def get_train(size):
    if size not in trains:
      config = tfm_config(size, FLAGS.tfm_overrides, FLAGS.dtype)
      trains[size] = (TfmTrain(config, *shapes[size]), FlaxTrain(fx, config, *shapes[size]))
    return trains[size]

  for size in ("small", "base", "big"):
    if f"train_{size}" in FLAGS.only:
      a, b = get_train(size)
      ratio, ta, tb = interleaved(a, b, FLAGS.rounds, FLAGS.calls)
      n, length = shapes[size]
      flops, peak = n * train_flops(a.exp.config.model, length, length), peak_flops()
      detail = []
      for name, seconds in (("tfm", statistics.median(ta)), ("flax", statistics.median(tb))):
        utilisation = mfu(flops, seconds, jax.device_count(), peak)  # both use every device
        detail.append(f"{name} {1e3 * seconds:.0f} ms, {n * length / seconds:,.0f} target tok/s"
                      + ("" if utilisation is None else f", MFU {utilisation:.1%}"))
      rows.append((f"train step, {size} ({n} x {length}, {FLAGS.dtype})", ratio, "; ".join(detail)))
      print(rows[-1], flush=True)
  if "beam" in FLAGS.only:
    config = tfm_config("small", FLAGS.tfm_overrides, FLAGS.dtype)
    a, b = TfmBeam(config, 16, 32, 50), FlaxBeam(fx, config, 16, 32, 50)
    ratio, ta, tb = interleaved(a, b, FLAGS.rounds, FLAGS.calls)
    rows.append(("beam search, beam 4, batch 16, source 32, +50", ratio,
                 f"{1e3 * statistics.median(ta):.0f} ms vs {1e3 * statistics.median(tb):.0f} ms; "
                 f"mean output length {a.output_length(a()):.1f} vs {b.output_length(b()):.1f}"))
    print(rows[-1], flush=True)
  if "compile" in FLAGS.only:
    for size in ("small", "base"):
      a, b = get_train(size)
      ca = compile_seconds(a.lower, FLAGS.compile_rounds)
      cb = compile_seconds(b.lower, FLAGS.compile_rounds)
      rows.append((f"lower + compile, train {size} (time, lower is better)", ca / cb,
                   f"{ca:.1f} s vs {cb:.1f} s"))
      print(rows[-1], flush=True)
  if "memory" in FLAGS.only:
    a, b = get_train("base")
    ma, mb = peak_bytes(a.lower().compile()), peak_bytes(b.lower().compile())
    rows.append(("peak memory, train base (lower is better)", ma / mb,
                 f"{ma / 2**20:.0f} MiB vs {mb / 2**20:.0f} MiB"))
  print()
  print("| work | tfm / flax | tfm vs flax |")
  print("|---|---|---|")
  for name, ratio, detail in rows:
    print(f"| {name} | {ratio:.2f} | {detail} |")


if __name__ == "__main__":
  app.run(main)
