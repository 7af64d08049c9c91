"""tfm parameters as torch modules hold them: the pieces every export shares.

- Stacks: a scanned stack's [N, ...] leaves are split into `layer_i` subtrees (`unrolled`), so
  every export reads layer i alone.
- Dense kernels: tfm's kernel is [*in, *out] (a query projection [d_model, heads, d_k], an output
  projection [heads, d_v, d_model]); torch's nn.Linear weight is [OUT, IN] (`linear`: flattened
  and transposed), GPT-2's Conv1D weight [IN, OUT] (`conv1d`: flattened, no transpose). Head axes
  flatten head-major (index h * d_k + j), as every transformers class splits its projections
  (`view(..., heads, head_dim)`).
- Biases: a tfm model with model.use_bias=False has none; a class whose layers always carry one
  gets zeros (`bias`), the same function.
- Activations: transformers' name for tfm's one-projection FFN activation (`activation`), GELU
  in model.gelu's form: 'tanh' is "gelu_new" (NewGELUActivation), 'erf' "gelu" (GELUActivation).
- Embedding scale: tfm multiplies its token embedding by sqrt(d_model) on the way in
  (tfm/model/embedding.py) and not on the way out (logits = h E^T). The language-model classes
  look their embeddings up unscaled, so the export writes sqrt(d_model) E as the input table. With
  tied embeddings the output projection is that same table, so the norm feeding it (the final norm,
  or BERT's head norm) is divided by sqrt(d_model): (h / s) (s E)^T = h E^T (`scaled_input`).

Only numpy here.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np


GELU_NAMES = {"tanh": "gelu_new", "erf": "gelu"}  # model.gelu -> transformers' ACT2FN name


def activation(ffn: str, gelu: str) -> str:
  """transformers' ACT2FN name of model.ffn 'relu' or 'gelu' (the latter in model.gelu's form)."""
  return "relu" if ffn == "relu" else GELU_NAMES[gelu]


def f32(x) -> np.ndarray:
  return np.asarray(x, np.float32)


def unrolled(stack: Mapping[str, Any]) -> dict:
  """A stack's layers as {layer_i: ...}: a scanned stack's [N, ...] leaves split per layer."""
  if "layers" not in stack:
    return dict(stack)
  stacked = stack["layers"]

  def split(tree, i):
    return {k: split(v, i) if isinstance(v, Mapping) else v[i] for k, v in tree.items()}

  def first_leaf(tree):
    leaf = next(iter(tree.values()))
    return first_leaf(leaf) if isinstance(leaf, Mapping) else leaf

  count = first_leaf(stacked).shape[0]
  return {**{k: v for k, v in stack.items() if k != "layers"},
          **{f"layer_{i}": split(stacked, i) for i in range(count)}}


def conv1d(node: Mapping[str, Any], in_dims: int) -> np.ndarray:
  """A Dense node's kernel [*in, *out] -> [IN, OUT] (GPT-2's Conv1D weight)."""
  kernel = f32(node["kernel"])
  ins = int(np.prod(kernel.shape[:in_dims]))
  return kernel.reshape(ins, -1)


def linear(node: Mapping[str, Any], in_dims: int) -> np.ndarray:
  """A Dense node's kernel [*in, *out] -> [OUT, IN] (torch.nn.Linear's weight)."""
  return conv1d(node, in_dims).T


def bias(node: Mapping[str, Any], width: int) -> np.ndarray:
  """A Dense node's bias [*out] flattened to [OUT], or zeros [width] where it has none."""
  return f32(node["bias"]).reshape(-1) if "bias" in node else np.zeros(width, np.float32)


def scaled_input(table, d_model: int) -> np.ndarray:
  """An input embedding table [vocab, d_model] times sqrt(d_model), as tfm looks it up."""
  return f32(table) * np.float32(math.sqrt(d_model))


def sinusoid_table(rows: int, d_model: int) -> np.ndarray:
  """tfm's interleaved sinusoids (tfm/model/positions.py) for positions 0 .. rows - 1 as a table
  [rows, d_model]: column 2i sin(pos w_i), 2i+1 cos(pos w_i), w_i = 10000^(-2i/d_model)."""
  i = np.arange(d_model // 2, dtype=np.float32)
  inv = (1.0 / (10000.0 ** (2.0 * i / d_model))).astype(np.float32)
  angles = np.arange(rows, dtype=np.float32)[:, None] * inv
  return np.stack([np.sin(angles), np.cos(angles)], -1).reshape(rows, d_model).astype(np.float32)


def position_table(params_inputs: Mapping[str, Any], positions: str, rows: int,
                   d_model: int) -> np.ndarray:
  """The absolute positions a stack adds, as a table [rows, d_model]: its learned table, or its
  sinusoids written out for positions 0 .. rows - 1."""
  if positions == "learned":
    return f32(params_inputs["positions"]["pos_embedding"])
  return sinusoid_table(rows, d_model)


def to_json(value: Any) -> bytes:
  return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def contiguous(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  return {k: np.ascontiguousarray(x, dtype=np.float32) for k, x in state.items()}
