"""Mesh sizes, logical rules and the replicated fallback for dimensions a mesh axis does not divide."""

import dataclasses
import logging

import flax.linen as nn
import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer
from tfm.train.config import DEFAULT_RULES
from tfm.train.mesh import create_mesh, mesh_shape
from tfm.train.sharding import (batch_spec, check_batch_size, fit_spec, rules_for_model,
                                state_shardings)
from tfm.train.state import abstract_params
from tests.train.helpers import mesh_cfg


def abstract_mesh(data=1, fsdp=1, tensor=1):
  return AbstractMesh((data, fsdp, tensor), ("data", "fsdp", "tensor"))


def test_mesh_shape():
  assert mesh_shape(mesh_cfg(-1, 2, 2), 16) == (4, 2, 2)
  assert mesh_shape(mesh_cfg(2, -1, 1), 8) == (2, 4, 1)
  with pytest.raises(ValueError, match=r"mesh\.data"):
    mesh_shape(mesh_cfg(-1, 3, 1), 8)
  with pytest.raises(ValueError, match=r"mesh\.data x mesh\.fsdp x mesh\.tensor"):
    mesh_shape(mesh_cfg(2, 2, 1), 8)


def test_create_mesh_on_this_host():
  mesh = create_mesh(mesh_cfg(-1), jax.devices())
  assert mesh.axis_names == ("data", "fsdp", "tensor")
  assert mesh.shape["data"] == jax.device_count()


def test_indivisible_dimensions_fall_back_to_replicated(caplog):
  cfg = ModelConfig(vocab_size=37001, num_kv_heads=1)  # odd vocabulary, multi-query attention
  with caplog.at_level(logging.WARNING):
    rules = dict(rules_for_model(DEFAULT_RULES, abstract_mesh(tensor=4), cfg))
  for name in ("vocab", "act_vocab", "kv_heads", "act_kv_heads"):
    assert rules[name] is None, name
    assert any(repr(name) in r.getMessage() for r in caplog.records), name
  assert rules["heads"] == rules["mlp"] == "tensor" and rules["embed"] == "fsdp"
  # On a mesh whose tensor axis has size 1 nothing needs to change.
  assert rules_for_model(DEFAULT_RULES, abstract_mesh(data=8), cfg) == DEFAULT_RULES


def test_fit_spec():
  mesh = abstract_mesh(data=2, fsdp=2, tensor=4)
  assert fit_spec(P("fsdp", "tensor"), (8, 6), mesh) == P("fsdp", None)
  assert fit_spec(P(("data", "fsdp"), None), (6, 3), mesh) == P(None, None)
  assert fit_spec(P(("data", "fsdp")), (8, 3), mesh) == P(("data", "fsdp"), None)


def test_state_shardings_map_names_and_fall_back():
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1), ("data", "fsdp", "tensor"))
  boxed = {"w": nn.LogicallyPartitioned(jax.ShapeDtypeStruct((8, 6), np.float32), ("embed", "mlp")),
           "count": jax.ShapeDtypeStruct((), np.int32)}
  shardings = state_shardings(boxed, mesh, DEFAULT_RULES)
  assert shardings["w"].spec == P("fsdp", "tensor")
  assert shardings["count"].spec == P()


def test_batch_split():
  assert batch_spec(DEFAULT_RULES) == P(("data", "fsdp"), None)
  mesh = abstract_mesh(data=2, fsdp=4)
  check_batch_size(32, mesh, DEFAULT_RULES, microbatches=4)
  with pytest.raises(ValueError, match=r"train\.microbatches=3"):
    check_batch_size(32, mesh, DEFAULT_RULES, microbatches=3)
  with pytest.raises(ValueError, match="data.tokens_per_batch"):
    check_batch_size(12, mesh, DEFAULT_RULES)


def test_scanned_layers_are_unsharded_along_layers_and_sharded_as_before_otherwise():
  """The `layers` rule maps to no mesh axis: each stacked parameter keeps its layer's sharding."""
  assert dict(DEFAULT_RULES)["layers"] is None
  cfg = ModelConfig(vocab_size=64, d_model=16, d_ff=32, num_heads=2, d_k=8, d_v=8,
                    num_encoder_layers=2, num_decoder_layers=3)
  mesh = create_mesh(mesh_cfg(-1), jax.devices())
  specs = lambda c: jax.tree.map(lambda s: s.spec, abstract_params(Transformer(c), mesh, DEFAULT_RULES)[1])
  unrolled, scanned = specs(cfg), specs(dataclasses.replace(cfg, scan_layers=True))
  for stack in ("encoder", "decoder"):
    want = jax.tree.map(lambda spec: P(None, *spec), unrolled[stack]["layer_0"],
                        is_leaf=lambda x: isinstance(x, P))
    assert scanned[stack]["layers"] == want
    assert {k: v for k, v in scanned[stack].items() if k != "layers"} == \
        {k: v for k, v in unrolled[stack].items() if not k.startswith("layer_")}
  assert scanned["decoder"]["layers"]["ffn"]["wi"]["kernel"] == P(None, "fsdp", "tensor")
