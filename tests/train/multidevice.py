"""Runs the train step on 8 simulated CPU devices and on 1, and writes the comparison as JSON.

    python -m tests.train.multidevice OUT.json [tiny|transformer|transformer_scan|transformer_forms]

XLA_FLAGS must give 8 host devices before jax is imported, so this runs in its own process
(tests/train/test_multidevice.py starts it); the other test files keep their single device.
For each mesh (data, fsdp, tensor) it records: the largest difference from the single-device run of
the initial parameters, the per-step losses and the parameters after 2 steps; the shapes of one
device's shard of a few weights, of an Adam moment and of the batch; and, for one mesh, whether a
sharded checkpoint restores bit-identically with its shardings. transformer_forms is transformer
with dropout, trained with the select guard (tfm/train/platform_choices.py) on 1 device and on 8
(one microbatch: train.microbatches draws each part's own masks), and with rbg dropout keys too, on
8 twice and on 1.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""),
                                    "--xla_force_host_platform_device_count=8",
                                    "--xla_backend_optimization_level=0",
                                    "--xla_llvm_disable_expensive_passes=true",
                                    "--xla_cpu_use_fusion_emitters=false",
                                    "--xla_cpu_parallel_codegen_split_count=1"])

import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from tests.train import helpers  # noqa: E402
from tfm.model.config import ModelConfig  # noqa: E402
from tests.train.tiny_model import TinySeq2Seq, tiny_config  # noqa: E402
from tfm.train.checkpoint import Checkpointer  # noqa: E402
from tfm.data.prefetch import to_device  # noqa: E402
from tfm.train.sharding import batch_sharding  # noqa: E402
from tfm.train.step import POOLED_LEAF_SIZE, norm_groups  # noqa: E402

# name: (data, fsdp, tensor), microbatches
MESHES = {
    "data_parallel": ((8, 1, 1), 1),
    "fsdp": ((2, 4, 1), 2),
    "tensor_parallel": ((2, 1, 4), 1),
}
STEPS = 2
FORMS = {"mixed": dict(guard="select"),  # transformer_forms' train sections, by mesh
         "mixed_rbg": dict(guard="select", dropout_prng="rbg")}
WEIGHTS = {  # name -> path in params, per model
    "tiny": {"embedding": ("embedding",), "query": ("self_attention", "query"), "wi": ("wi",)},
    "transformer": {"embedding": ("token_embedding", "embedding"),
                    "query": ("encoder", "layer_0", "self_attention", "query", "kernel"),
                    "wi": ("encoder", "layer_0", "ffn", "wi", "kernel")},
    "transformer_forms": {"embedding": ("token_embedding", "embedding"),
                          "query": ("encoder", "layer_0", "self_attention", "query", "kernel"),
                          "wi": ("encoder", "layer_0", "ffn", "wi", "kernel")},
    "transformer_scan": {"embedding": ("token_embedding", "embedding"),
                         "query": ("encoder", "layers", "self_attention", "query", "kernel"),
                         "wi": ("encoder", "layers", "ffn", "wi", "kernel")},
}


# The EMA and Adafactor (tfm/train/ema.py, optimizer.py) on the scanned Transformer: its embeddings
# [64, 32] and stacked kernels factored (min_dim_size_to_factor 8), per layer.
EMA_ADAFACTOR = dict(optimizer="adafactor", adafactor_min_dim_size_to_factor=8, ema_decay=0.5)


def make_model(kind: str):
  if kind == "tiny":
    return TinySeq2Seq(tiny_config(dropout_rate=0.0))
  from tfm.model.transformer import Transformer  # noqa: PLC0415
  scan = kind in ("transformer_scan", "ema_adafactor")
  layers = 2 if scan else 1  # scanned: 2 layers stacked per stack
  return Transformer(ModelConfig(vocab_size=64, d_model=32, d_ff=64, num_heads=8, d_k=4, d_v=4,
                                 num_encoder_layers=layers, num_decoder_layers=layers,
                                 dropout_rate=0.1 if kind == "transformer_forms" else 0.0,
                                 max_length=32,
                                 scan_layers=scan))


def leaf(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def max_diff(a, b) -> float:
  """Largest |a - b| over the leaves, attention key biases excepted (helpers.max_diff)."""
  return helpers.max_diff(a, b, key_biases=False)


def shard_shape(x) -> list[int]:
  """Shape of one device's shard of x."""
  return list(x.addressable_shards[0].data.shape)


def train(setup, batch):
  """STEPS updates; returns (initial params, per-step losses and gradient norms, final state,
  device batch), the parameters as host copies."""
  initial = jax.device_get(setup.state.params)
  device_batch = to_device(batch, batch_sharding(setup.mesh, setup.rules))
  state, losses, norms = setup.state, [], []
  for _ in range(STEPS):
    state, metrics = setup.step(state, device_batch)
    losses.append(float(metrics["loss"]))
    norms.append(float(metrics["grad_norm"]))
  return initial, (losses, norms), state, device_batch


def norm_group_sizes(setup) -> dict:
  """How gradient_norm groups this mesh's gradients: pooled, and left alone (of which small)."""
  leaves = jax.tree_util.tree_leaves(setup.state.params)
  pooled, alone = norm_groups(leaves, jax.tree_util.tree_leaves(setup.experiment.param_shardings))
  return {"pooled": len(pooled), "alone": len(alone),
          "alone_small": sum(leaves[i].size <= POOLED_LEAF_SIZE for i in alone)}


def checkpoint_roundtrip(setup, state) -> dict:
  with tempfile.TemporaryDirectory() as workdir:
    checkpointer = Checkpointer(workdir, keep=2)
    checkpointer.save(STEPS, state, {"position": 7})
    restored, data, step = checkpointer.restore(setup.experiment.abstract_state)
    checkpointer.close()
  same = jax.tree_util.tree_map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))),
                                state, restored)
  shardings = jax.tree_util.tree_map(lambda a, b: a.sharding == b.sharding, state, restored)
  return {"bit_identical": all(jax.tree_util.tree_leaves(same)),
          "same_shardings": all(jax.tree_util.tree_leaves(shardings)),
          "data": data, "step": step}


def decode_check(setup, reference, state) -> dict:
  """Beam search and greedy decoding with the sharded parameters, through the experiment's mesh
  context, against the same parameters on one device."""
  rng = np.random.default_rng(3)
  inputs = rng.integers(2, setup.model.cfg.vocab_size, (8, 10)).astype(np.int32)
  inputs[:, -1] = 1  # EOS
  inputs[5, 6:] = 0  # a shorter source
  inputs[5, 5] = 1
  key = jax.random.PRNGKey(0)
  single = jax.device_put(jax.device_get(state.params), reference.experiment.param_shardings)
  kind = "transformer_scan" if setup.model.cfg.scan_layers else "transformer"
  out = {"wi_replicated": leaf(state.params, WEIGHTS[kind]["wi"]).sharding.is_fully_replicated}
  # A scanned model decodes as its unrolled twin (make_translate_fn unstacks it): beam search shows
  # that unstacking under the mesh; greedy decoding of that twin is the unrolled kind's check.
  searches = (("beam", 4),) if setup.model.cfg.scan_layers else (("beam", 4), ("greedy", 1))
  for name, beam in searches:
    tokens, scores = setup.experiment.translate_fn(beam_size=beam)(state.params, inputs, key)
    ref_tokens, ref_scores = reference.experiment.translate_fn(beam_size=beam)(single, inputs, key)
    out[name] = {"same_tokens": bool(np.array_equal(np.asarray(tokens), np.asarray(ref_tokens))),
                 "score_diff": float(np.max(np.abs(np.asarray(scores) - np.asarray(ref_scores)))),
                 "output_tokens": int(np.count_nonzero(np.asarray(tokens)))}
  return out


def main(out: str, kind: str):
  assert jax.device_count() == 8, jax.devices()
  model = make_model(kind)
  batch = helpers.packed_batch(rows=16, length=12, vocab=model.cfg.vocab_size, seed=1)
  forms = FORMS if kind == "transformer_forms" else {}
  if kind == "ema_adafactor":
    forms = {"mixed": EMA_ADAFACTOR}
  reference = helpers.Setup(model, helpers.train_cfg(**forms.get("mixed", {})), helpers.mesh_cfg(),
                            jax.devices()[:1])
  ref_initial, (ref_losses, ref_norms), ref_state, _ = train(reference, batch)
  ref_final = jax.device_get(ref_state.params)
  meshes = MESHES if kind == "tiny" else {"mixed": ((2, 2, 2), 2)}
  if forms:
    meshes = {name: ((2, 2, 2), 1) for name in forms}
  weights = WEIGHTS["transformer_scan" if kind == "ema_adafactor" else kind]
  results = {"reference_losses": ref_losses, "reference_grad_norms": ref_norms,
             "reference_norm_groups": norm_group_sizes(reference), "meshes": {}}
  for name, (shape, microbatches) in meshes.items():
    setup = helpers.Setup(model, helpers.train_cfg(microbatches=microbatches, **forms.get(name, {})),
                          helpers.mesh_cfg(*shape))
    initial, (losses, norms), state, device_batch = train(setup, batch)
    result = {
        "initial_diff": max_diff(initial, ref_initial),
        "losses": losses,
        "grad_norms": norms,
        "norm_groups": norm_group_sizes(setup),
        "final_diff": max_diff(jax.device_get(state.params), ref_final),
        "update_size": max_diff(ref_final, ref_initial),
        "shapes": {w: leaf(state.params, p).shape for w, p in weights.items()},
        "shard_shapes": {w: shard_shape(leaf(state.params, p)) for w, p in weights.items()},
        "batch_shard_shape": shard_shape(device_batch["targets"]),
        "mesh": dict(setup.mesh.shape),
        "choices": setup.experiment.choices.describe(),
    }
    if "adam" in state.opt_state:
      result["adam_mu_shard_shape"] = shard_shape(leaf(state.opt_state["adam"].mu, weights["wi"]))
    if state.ema is not None:  # sharded as the parameters, the same EMA as on one device
      result["ema_shard_shapes"] = {w: shard_shape(leaf(state.ema, p)) for w, p in weights.items()}
      result["ema_diff"] = max_diff(jax.device_get(state.ema), jax.device_get(ref_state.ema))
      result["ema_moved"] = max_diff(jax.device_get(state.ema), jax.device_get(state.params))
    if name == "fsdp" or state.ema is not None:
      result["checkpoint"] = checkpoint_roundtrip(setup, state)
    if name == "mixed_rbg":  # the same again: its masks are a function of the step and the mesh
      setup.state = setup.fresh_state()
      result["losses_again"] = train(setup, batch)[1][0]
      alone = helpers.Setup(model, helpers.train_cfg(**forms[name]), helpers.mesh_cfg(),
                            jax.devices()[:1])
      result["losses_one_device"] = train(alone, batch)[1][0]
    if kind not in ("tiny", "ema_adafactor"):
      result["decode"] = decode_check(setup, reference, state)
    results["meshes"][name] = result
  with open(out, "w") as f:
    json.dump(results, f, indent=1)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "tiny")
