"""tfm plan end to end: a tiny config compiled for v5e:2x2 by libtpu, its JSON checked against the
parameter count, the FLOP formula and the roofline; a step too big for HBM and the change that
fixes it; the rows rounded up to split; the token embedding lookup without XLA's "involuntary full
rematerialization" under FSDP + tensor sharding; one-line errors."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec

from tfm import cli
from tfm.config import load_config
from tfm.experiment import Experiment
from tfm.model.embedding import Embed
from tfm.model.params import count_params
from tfm.model.positions import LearnedPositions
from tfm.model.partitioning import BLD, constrain
from tfm.plan import topology as topology_lib
from tfm.plan import xla_log
from tfm.train.flops import train_flops
from tfm.train.sharding import mesh_context
from tfm.train.tpu_chips import chip_by_name

# Matmul-dominated, so the model FLOPs of tfm/train/flops.py are most of what XLA counts.
TINY = ["model.vocab_size=1024", "data.vocab_size=1024", "model.d_model=256", "model.d_ff=1024",
        "model.num_heads=4", "model.d_k=64", "model.d_v=64", "model.num_encoder_layers=1",
        "model.num_decoder_layers=1", "model.dtype=bfloat16", "data.max_length=64"]
QS = "configs/quickstart.py"
needs_libtpu = pytest.mark.skipif(not topology_lib.libtpu_installed(),
                                  reason="libtpu is the tpu-aot extra (Linux x86_64 only)")


def plan_json(capsys, *overrides, flags=()):
  code = cli.main(["tfm", "plan", f"--config={QS}", "--topology=v5e:2x2", "--json", *flags]
                  + [f"--config.{o}" for o in TINY + list(overrides)])
  out = capsys.readouterr().out
  assert code == 0, out
  return json.loads(out)


@pytest.mark.long  # libtpu compiles the step for a TPU topology: CI runs it after the README's command
@needs_libtpu
def test_plan_of_a_tiny_step(capsys):
  # 30 rows of 64 tokens do not split over the 4 chips: rounded up to 32 rows.
  plan = plan_json(capsys, "data.tokens_per_batch=1920")
  config = load_config(QS, TINY + ["data.tokens_per_batch=1920"])
  v5e, params = chip_by_name("v5e"), count_params(config.model)
  assert plan["chips"] == 4 and plan["mesh"] == {"data": 4, "fsdp": 1, "tensor": 1}
  assert plan["rows"] == 32 and plan["tokens_per_step"] == 32 * 64
  assert "gives 30 rows" in plan["rows_note"] and "rounded up to 32 rows" in plan["rows_note"]
  assert plan["fits"] is True and plan["hbm_bytes"] == v5e.hbm_bytes
  # Data parallel: every chip holds the float32 parameters and Adam's two moments whole.
  assert plan["bytes"]["params"] == 4 * params
  assert 8 * params <= plan["bytes"]["optimizer"] <= 8 * params + 64  # + Adam's step count
  assert plan["bytes_per_chip"] >= 3 * 4 * params + plan["bytes"]["temporaries"]
  assert plan["bytes_per_chip"] < plan["hbm_bytes"]
  # XLA's count over the 4 chips is the model's matmuls (flops.py) plus softmax, norms, Adam...
  model = 32 * train_flops(config.model, 64, 64)
  assert plan["model_flops_per_step"] == model
  assert plan["flops_per_step"] == pytest.approx(4 * plan["flops_per_chip"])
  assert model <= plan["flops_per_step"] <= 1.25 * model
  # Roofline: the larger of compute time at peak (the model's FLOPs a floor) and HBM time.
  compute = max(plan["flops_per_chip"], model / 4) / v5e.peak_bf16_flops
  memory = plan["bytes_accessed_per_chip"] / v5e.hbm_bytes_per_s
  assert plan["est_step_s"] == pytest.approx(max(compute, memory)) and plan["est_step_s"] > 0
  assert plan["est_tokens_per_s"] == pytest.approx(32 * 64 / plan["est_step_s"])
  assert plan["est_mfu"] == pytest.approx(model / (plan["est_step_s"] * 4 * v5e.peak_bf16_flops))
  assert plan["compile_s"] > 0 and plan["remedies"] == []


@pytest.mark.long  # libtpu compiles a plan and each remedy it tries: CI runs it after the README's command
@needs_libtpu
def test_a_step_too_big_for_hbm_names_the_change_that_fits(capsys):
  # A 4M-piece vocabulary: ~1.07B parameters, whose float32 values, Adam moments and gradients do
  # not fit a 16 GiB v5e when every chip holds them whole; sharded over 4 chips they do.
  big_vocab = ["model.vocab_size=4194304", "data.vocab_size=4194304", "data.tokens_per_batch=256"]
  plan = plan_json(capsys, *big_vocab, flags=["--remedies=1"])
  params = count_params(load_config(QS, TINY + big_vocab).model)
  assert plan["fits"] is False and plan["bytes_per_chip"] > plan["hbm_bytes"]
  assert "Ran out of memory" in plan["out_of_memory"]["message"]
  assert plan["out_of_memory"]["usable_hbm_bytes"] <= plan["hbm_bytes"]
  assert plan["bytes"]["params"] == 4 * params and plan["flops_per_step"] is None
  [remedy] = plan["remedies"]
  assert remedy["change"] == "mesh.data=1, mesh.fsdp=4" and remedy["fits"] is True
  assert 3 * 4 * params / 4 < remedy["bytes_per_chip"] < plan["hbm_bytes"]


def test_missing_libtpu_is_one_line(monkeypatch, capsys):
  monkeypatch.setattr(topology_lib, "libtpu_installed", lambda: False)
  code = cli.main(["tfm", "plan", f"--config={QS}", "--topology=v5e:2x2"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1 and len(err) == 1
  assert "install the tpu-aot extra: pip install -e '.[tpu-aot]'" in err[0]


@pytest.mark.parametrize("args, code, message", [
    ([], 2, "--topology is required"),
    (["--topology=v9:2x2"], 1, "--topology='v9:2x2': unknown chip 'v9'"),
    (["--topology=v5e"], 1, "--topology='v5e': expected CHIP:XxY or CHIP:XxYxZ"),
    (["--topology=v5e:2x2", "--slices=0"], 1, "--slices must be a positive number"),
])
def test_bad_flags_are_one_line(args, code, message, capsys):
  assert cli.main(["tfm", "plan", f"--config={QS}", *args]) == code
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and message in err[0], err


def _lookup_warnings(lookup, table=lambda params: params["token_embedding"]["embedding"],
                     spec=PartitionSpec("tensor", "fsdp"), overrides=()) -> list[str]:
  """XLA's rematerialization warnings when compiling lookup(table, tokens) for v5e:2x4 as
  (data, fsdp, tensor) = (2, 2, 2), the table in its stored layout (`spec`; by default the token
  embedding's: vocab over tensor, embed over fsdp), tokens split by rows."""
  config = load_config(QS, TINY + ["mesh.data=2", "mesh.fsdp=2", "mesh.tensor=2", *overrides])
  exp = Experiment(config, devices=topology_lib.load_topology("v5e:2x4").devices)
  table = table(exp.abstract_params)
  assert table.sharding.spec == spec
  tokens = exp.abstract_batch(16, 64)["targets"]
  with xla_log.captured_stderr() as log, mesh_context(exp.mesh, exp.rules):
    jax.jit(lookup).lower(table, tokens).compile()
  return [line for line in log.notable() if "Involuntary full rematerialization" in line]


@needs_libtpu
def test_token_embedding_lookup_is_not_rematerialized_under_fsdp_and_tensor():
  embed = Embed(1024, 256, jnp.bfloat16)
  fixed = lambda table, tokens: embed.apply({"params": {"embedding": table}}, tokens)
  stored = lambda table, tokens: constrain(jnp.take(table.astype(jnp.bfloat16), tokens, axis=0), BLD)
  assert _lookup_warnings(stored)  # gathering from the stored layout: XLA replicates the output
  assert not _lookup_warnings(fixed)  # Embed: no full rematerialization


@needs_libtpu
def test_learned_position_lookup_is_not_rematerialized_under_fsdp_and_tensor():
  positions = LearnedPositions(128, 256)
  # In the model its output is added to the token embedding's, laid out as BLD.
  fixed = lambda table, ids: constrain(positions.apply({"params": {"pos_embedding": table}}, ids),
                                       BLD)
  stored = lambda table, ids: constrain(jnp.take(table, ids, axis=0), BLD)
  where = dict(table=lambda params: params["encoder"]["inputs"]["positions"]["pos_embedding"],
               spec=PartitionSpec(None, "fsdp"),
               overrides=["model.positions=learned", "model.max_length=128"])
  assert _lookup_warnings(stored, **where)  # the table as stored (embed over fsdp): replicated
  assert not _lookup_warnings(fixed, **where)


@pytest.mark.long  # libtpu compiles the step for a TPU topology: CI runs it after the README's command
@needs_libtpu
def test_a_microbatched_step_gets_no_estimate(capsys):
  # XLA's cost analysis counts the microbatch loop's body once: a roofline from it was the model's
  # FLOPs at peak, "MFU 100%". The plan gives memory and says why there is no time.
  overrides = ["data.tokens_per_batch=2048", "train.microbatches=2"]
  plan = plan_json(capsys, *overrides)
  assert plan["microbatches"] == 2 and plan["fits"] is True and plan["bytes_per_chip"] > 0
  assert plan["est_step_s"] is None and plan["est_mfu"] is None
  assert plan["est_tokens_per_s"] is None and plan["bound"] is None
  assert plan["estimate_note"].startswith("not estimated: train.microbatches=2 runs the step as")
  code = cli.main(["tfm", "plan", f"--config={QS}", "--topology=v5e:2x2",
                   *[f"--config.{o}" for o in TINY + overrides]])
  out = capsys.readouterr().out
  assert code == 0 and "MFU" not in out and "tokens/s" not in out
  assert "est. step time        not estimated: train.microbatches=2" in out
