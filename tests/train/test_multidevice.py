"""Data parallel, FSDP and tensor parallel steps on 8 CPU devices equal the single-device step.

The 8-device runs happen in subprocesses (tests/train/multidevice.py): XLA_FLAGS must be set before
jax is imported, and this pytest process keeps one device for the other tests.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 2e-5  # float32 reductions in a different order


def run_script(kind: str, tmp_path: pathlib.Path) -> dict:
  """Runs tests/train/multidevice.py in a fresh process; its JSON results, or RuntimeError."""
  out = tmp_path / f"{kind}.json"
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run([sys.executable, "-m", "tests.train.multidevice", str(out), kind], cwd=ROOT,
                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        timeout=600)
  if proc.returncode:
    raise RuntimeError(f"tests/train/multidevice.py {kind} failed:\n{proc.stdout[-3000:]}")
  return json.loads(out.read_text())


def check_matches_single_device(result: dict, name: str) -> None:
  run = result["meshes"][name]
  assert run["initial_diff"] == 0.0, f"{name}: sharded init differs from the single-device init"
  assert run["losses"] == pytest.approx(result["reference_losses"], abs=TOLERANCE), name
  # gradient_norm pools the small replicated leaves and reduces sharded ones alone: same norm.
  assert run["grad_norms"] == pytest.approx(result["reference_grad_norms"], rel=1e-5), name
  assert run["update_size"] > 100 * TOLERANCE, f"{name}: the steps did not move the parameters"
  assert run["final_diff"] < TOLERANCE, f"{name}: parameters after {len(run['losses'])} steps differ"


# One test per script run: under pytest-xdist a module fixture would run once per worker.
@pytest.mark.slow
def test_tiny_model_on_8_devices(tmp_path):
  result = run_script("tiny", tmp_path)
  for name in ("data_parallel", "fsdp", "tensor_parallel"):
    check_matches_single_device(result, name)
  meshes = result["meshes"]
  # Shard shapes on one device. vocab 64 x d_model 32; query 32 x 8 heads x 4; wi 32 x d_ff 64.
  # Data parallel: everything replicated, 16 rows over data=8.
  assert meshes["data_parallel"]["shard_shapes"] == {"embedding": [64, 32], "query": [32, 8, 4],
                                                     "wi": [32, 64]}
  assert meshes["data_parallel"]["batch_shard_shape"] == [2, 12]
  # FSDP (data 2, fsdp 4): d_model split 4 ways (Adam moments too), the batch 8 ways.
  assert meshes["fsdp"]["shard_shapes"] == {"embedding": [64, 8], "query": [8, 8, 4], "wi": [8, 64]}
  assert meshes["fsdp"]["adam_mu_shard_shape"] == [8, 64]
  assert meshes["fsdp"]["batch_shard_shape"] == [2, 12]
  # Tensor parallel (data 2, tensor 4): vocab, heads and d_ff split 4 ways, the batch 2 ways.
  assert meshes["tensor_parallel"]["shard_shapes"] == {"embedding": [16, 32], "query": [32, 2, 4],
                                                       "wi": [32, 16]}
  assert meshes["tensor_parallel"]["adam_mu_shard_shape"] == [32, 16]
  assert meshes["tensor_parallel"]["batch_shard_shape"] == [8, 12]
  # gradient_norm pools only replicated leaves (all 12 are small): every leaf on one device and under
  # data parallelism; none under FSDP (each has an embed axis, split over fsdp); under tensor
  # parallelism the position table alone (position x embed: no heads, kv, vocab or mlp axis).
  assert result["reference_norm_groups"] == {"pooled": 12, "alone": 0, "alone_small": 0}
  assert meshes["data_parallel"]["norm_groups"] == {"pooled": 12, "alone": 0, "alone_small": 0}
  assert meshes["fsdp"]["norm_groups"] == {"pooled": 0, "alone": 12, "alone_small": 12}
  assert meshes["tensor_parallel"]["norm_groups"] == {"pooled": 1, "alone": 11, "alone_small": 11}
  # A sharded checkpoint (FSDP mesh) restores bit-identically with the same shardings.
  assert meshes["fsdp"]["checkpoint"] == {"bit_identical": True, "same_shardings": True,
                                          "data": {"position": 7}, "step": 2}


@pytest.mark.long  # a process of 8 devices compiling every mesh: CI runs it after the README's command
def test_transformer_on_8_devices(tmp_path):
  """The project's Transformer (1 + 1 layers) on a (2, 2, 2) mesh with 2 microbatches."""
  result = run_script("transformer", tmp_path)
  check_matches_single_device(result, "mixed")  # mesh (2, 2, 2), 2 microbatches
  assert result["meshes"]["mixed"]["shard_shapes"]["wi"] == [16, 32]  # d_model / fsdp, d_ff / tensor
  # Decoding runs under the training mesh with the sharded parameters and finds what one device finds.
  decode = result["meshes"]["mixed"]["decode"]
  assert decode["wi_replicated"] is False  # wi stays split over fsdp x tensor
  for name in ("beam", "greedy"):
    assert decode[name]["same_tokens"] and decode[name]["score_diff"] < 1e-4, decode
    assert decode[name]["output_tokens"] > 8, decode


@pytest.mark.long  # a process of 8 devices compiling every mesh: CI runs it after the README's command
def test_scanned_transformer_on_8_devices(tmp_path):
  """model.scan_layers (2 + 2 layers stacked) on the (2, 2, 2) mesh: each stacked weight is split
  as its layer's weight is and replicated along the layers axis; training and decoding equal one
  device's."""
  result = run_script("transformer_scan", tmp_path)
  check_matches_single_device(result, "mixed")
  mixed = result["meshes"]["mixed"]
  assert mixed["shapes"]["wi"] == [2, 32, 64]
  assert mixed["shard_shapes"]["wi"] == [2, 16, 32]  # layers whole, d_model / fsdp, d_ff / tensor
  assert mixed["shard_shapes"]["query"] == [2, 16, 4, 4]  # layers whole, d_model / fsdp, heads / tensor
  assert mixed["adam_mu_shard_shape"] == [2, 16, 32]
  beam = mixed["decode"]["beam"]  # decoded as the unrolled twin: greedy is the test above's
  assert beam["same_tokens"] and beam["score_diff"] < 1e-4 and beam["output_tokens"] > 8, beam


@pytest.mark.long  # a process of 8 devices compiling every form: CI runs it after the README's command
def test_the_accelerator_forms_on_8_devices(tmp_path):
  """The Transformer with dropout on the (2, 2, 2) mesh: with the select guard (a GPU's form of
  the non-finite guard) the same losses, gradient norms and parameters as on one device, and it
  decodes; with rbg dropout keys too, the same losses as rbg's on one device, twice the same, and
  other masks than threefry's."""
  result = run_script("transformer_forms", tmp_path)
  mixed, rbg = result["meshes"]["mixed"], result["meshes"]["mixed_rbg"]
  assert mixed["choices"] == ("train.input=inline, train.saves=background, train.guard=select, "
                              "train.dropout_prng=threefry")
  assert rbg["choices"].endswith("train.guard=select, train.dropout_prng=rbg")
  check_matches_single_device(result, "mixed")
  for name in ("beam", "greedy"):
    assert mixed["decode"][name]["same_tokens"], mixed["decode"]
  assert rbg["losses"] == pytest.approx(rbg["losses_one_device"], abs=TOLERANCE)
  assert rbg["losses"] == rbg["losses_again"] and rbg["update_size"] > 100 * TOLERANCE
  assert rbg["losses"] != pytest.approx(mixed["losses"], abs=TOLERANCE)  # other masks


@pytest.mark.long  # a process of 8 devices: CI runs it after the README's command
def test_an_ema_and_adafactor_on_8_devices(tmp_path):
  """The scanned Transformer with Adafactor (factored, per layer) and an EMA on a data x fsdp x
  tensor mesh: the single-device run's losses, parameters and EMA; the EMA sharded as the
  parameters; a checkpoint of it restored bit for bit in the same shardings."""
  result = run_script("ema_adafactor", tmp_path)
  check_matches_single_device(result, "mixed")
  run = result["meshes"]["mixed"]
  assert run["ema_shard_shapes"] == run["shard_shapes"]
  assert run["ema_diff"] < TOLERANCE and run["ema_moved"] > 100 * TOLERANCE
  assert run["checkpoint"]["bit_identical"] and run["checkpoint"]["same_shardings"]
