"""Mesh sizes, logical rules and the replicated fallback for dimensions a mesh axis does not divide."""

import logging

import flax.linen as nn
import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from tfm.model.config import ModelConfig
from tfm.train.config import DEFAULT_RULES
from tfm.train.mesh import create_mesh, mesh_shape
from tfm.train.sharding import (batch_spec, check_batch_size, fit_spec, rules_for_model,
                                state_shardings)
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
