"""The GPU table's first job (experiments/gpu_table.py): is this a GPU, and do tfm's step and beam
search run on it? Under a minute, so that a machine without a working GPU costs one line.

  python experiments/gpu/preflight.py               # exit 3 with one line unless JAX runs on a GPU
  python experiments/gpu/preflight.py --allow_cpu   # the same checks on any backend (--quick)

It prints the device, the versions of the packages the table uses (and where each was imported
from: the node's image or the bundle's wheels), then times one train step of a tiny encoder-decoder
(1 + 1 layers, d_model 64, bfloat16 on a GPU) with XLA's attention and one beam search (beam 4,
batch 2), and on a GPU the same step with cuDNN's attention, whose failure is reported, not fatal
(the table's XLA rows still run). The backend is the one JAX_PLATFORMS names (gpu_table.py sets
`cuda`, or `cpu` with --quick): a CUDA plugin that does not load is an error here, never a quiet
fall back to the CPU.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

from absl import app, flags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tfm and configs of this checkout, installed or not
sys.path.insert(0, str(ROOT / "experiments"))

FLAGS = flags.FLAGS
flags.DEFINE_bool("allow_cpu", False, "run the checks on a CPU backend too (gpu_table.py --quick)")

# (distribution, module) of what the table imports; the first found of the jax GPU plugins.
PACKAGES = (("jax", "jax"), ("jaxlib", "jaxlib"), ("flax", "flax"), ("optax", "optax"),
            ("orbax-checkpoint", "orbax.checkpoint"), ("numpy", "numpy"),
            ("ml-collections", "ml_collections"), ("grain", "grain"),
            ("array-record", "array_record"), ("sentencepiece", "sentencepiece"),
            ("sacrebleu", "sacrebleu"))
PLUGINS = ("jax-cuda13-plugin", "jax-cuda12-plugin")
TINY = ["model.num_encoder_layers=1", "model.num_decoder_layers=1", "model.d_model=64",
        "model.d_ff=128", "model.num_heads=2", "model.d_k=32", "model.d_v=32",
        "model.vocab_size=256", "data.vocab_size=256", "train.compilation_cache_dir="]


def versions() -> str:
  """'python 3.12.3, jax 0.11.2, ..., grain 0.2.18 (bundle)': '(bundle)' where the module was
  imported from a directory on PYTHONPATH, i.e. the carried wheels."""
  carried = [p for p in sys.path if "site-cp" in p]
  out = [f"python {platform.python_version()}"]
  for dist, module in PACKAGES + tuple((p, None) for p in PLUGINS):
    try:
      version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
      version = None
    if module is None:
      if version:
        out.append(f"{dist} {version}")
      continue
    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None:
      out.append(f"{dist} missing")
      continue
    where = " (bundle)" if any(str(spec.origin).startswith(p) for p in carried) else ""
    out.append(f"{dist} {version or '?'}{where}")
  return ", ".join(out)


def train_step(attention: str, dtype: str) -> str:
  """One step of the tiny model: 'loss 5.55 in 3.2 s (compilation included)'."""
  # pylint: disable=import-outside-toplevel
  import jax
  import numpy as np
  from benchmark_step import synthetic_batch
  from tfm import config as config_lib
  from tfm.data.prefetch import to_device
  from tfm.experiment import Experiment
  start = time.perf_counter()
  config = config_lib.load_config(str(ROOT / "configs" / "base.py"), TINY + [
      f"model.dtype={dtype}", f"model.attention_impl={attention}"])
  exp = Experiment(config)
  batch = to_device(synthetic_batch(4, 32, 256, True, 0), exp.batch_sharding)
  _, metrics = exp.train_step(exp.init_state(), batch)
  loss = float(jax.block_until_ready(metrics)["loss"])
  if not np.isfinite(loss):
    raise FloatingPointError(f"the loss is {loss}")
  return f"loss {loss:.3f} in {time.perf_counter() - start:.1f} s (compilation included)"


def beam_search(dtype: str) -> str:
  """One beam search (beam 4, batch 2, source 8) with random weights."""
  # pylint: disable=import-outside-toplevel
  import jax
  import numpy as np
  from tfm import config as config_lib
  from tfm.experiment import Experiment
  start = time.perf_counter()
  exp = Experiment(config_lib.load_config(str(ROOT / "configs" / "base.py"),
                                          TINY + [f"model.dtype={dtype}"]))
  tokens = np.random.default_rng(0).integers(3, 256, (2, 8)).astype(np.int32)
  tokens[:, -1] = 1
  out, _ = jax.block_until_ready(exp.translate_fn(beam_size=4)(
      exp.init_state().params, tokens, jax.random.PRNGKey(0)))
  return (f"{int(np.sum(np.asarray(out) != 0))} tokens out in {time.perf_counter() - start:.1f} s "
          "(compilation included)")


def main(argv):
  del argv
  start = time.perf_counter()
  import jax  # pylint: disable=import-outside-toplevel
  try:
    devices = jax.devices()
  except Exception as e:  # noqa: BLE001 -- JAX_PLATFORMS names a backend that does not start
    first = next((line for line in str(e).splitlines() if line.strip()), "")
    print(f"preflight: no GPU: JAX could not start the backend JAX_PLATFORMS="
          f"{os.environ.get('JAX_PLATFORMS', '')} names ({type(e).__name__}"
          f"{': ' + first[:300] if first else ''})", flush=True)
    return 3
  backend = jax.default_backend()
  if backend != "gpu" and not FLAGS.allow_cpu:
    print(f"preflight: no GPU: JAX runs on {backend} ({devices[0].device_kind}); the table "
          "needs a GPU (--quick runs its plumbing on the CPU)", flush=True)
    return 3
  stats = devices[0].memory_stats() or {}
  memory = f", {stats['bytes_limit'] / 2**30:.0f} GiB" if "bytes_limit" in stats else ""
  print(f"device: {devices[0].device_kind} ({len(devices)} x {backend}{memory})", flush=True)
  print(f"versions: {versions()}", flush=True)
  dtype = "bfloat16" if backend == "gpu" else "float32"
  print(f"train step, xla attention, {dtype}: {train_step('xla', dtype)}", flush=True)
  print(f"beam search: {beam_search(dtype)}", flush=True)
  if backend == "gpu":
    try:
      print(f"train step, cudnn attention, {dtype}: {train_step('cudnn', dtype)}", flush=True)
    except Exception as e:  # noqa: BLE001 -- reported; the table's XLA rows run without it
      print(f"train step, cudnn attention: failed: {type(e).__name__}: "
            f"{' '.join(str(e).split())[:300]}", flush=True)
  print(f"preflight ok in {time.perf_counter() - start:.1f} s", flush=True)
  return 0


if __name__ == "__main__":
  app.run(main)
