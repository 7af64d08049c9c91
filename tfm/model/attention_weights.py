"""The attention weights of one teacher-forced forward pass, per kind of attention and layer.

The model's own softmax probabilities, sown by every Attention sub-layer when the 'intermediates'
collection is mutable (tfm/model/attention.py), gathered from the unrolled (`layer_0` ...) or the
scanned (`layers`, stacked on axis 0 by nn.scan) layout into one array per kind:
  encoder   encoder self-attention          [layers, batch, heads, s, s]
  decoder   masked decoder self-attention   [layers, batch, heads, t, t]
  cross     encoder-decoder attention       [layers, batch, heads, t, s]
Decoder query i reads the shifted-right input (0, y_1, ..., y_{t-1})[i] and predicts y_{i+1}.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from tfm.model.attention import WEIGHTS
from tfm.model.layer_stack import SCANNED, unrolled_name

# kind -> (stack, sub-layer) in the parameter and intermediates trees
SUBLAYERS = {"encoder": ("encoder", "self_attention"), "decoder": ("decoder", "self_attention"),
             "cross": ("decoder", "cross_attention")}
TITLES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention",
          "cross": "encoder-decoder attention"}


def stacked_weights(intermediates: dict[str, Any]) -> dict[str, jnp.ndarray]:
  """{kind: [layers, batch, heads, q_length, kv_length]} from a model's 'intermediates' collection,
  for the kinds the model has (an encoder-only model has no decoder or cross kind)."""
  out = {}
  for kind, (stack, sublayer) in SUBLAYERS.items():
    layers = intermediates.get(stack)
    if layers is None:
      continue
    if SCANNED in layers:
      if sublayer in layers[SCANNED]:
        (out[kind],) = layers[SCANNED][sublayer][WEIGHTS]
      continue
    found = []
    while unrolled_name(len(found)) in layers and sublayer in layers[unrolled_name(len(found))]:
      (weights,) = layers[unrolled_name(len(found))][sublayer][WEIGHTS]
      found.append(weights)
    if found:
      out[kind] = jnp.stack(found)
  return out


def attention_weights(model, params, inputs, targets) -> dict[str, jnp.ndarray]:
  """{kind: float32 [layers, batch, heads, q_length, kv_length]} of a teacher-forced forward pass.

  model: a tfm Transformer; inputs [b, s] (None for decoder-only), targets [b, t] (None for
  encoder-only), not shifted; 0 is padding. Rows of padding queries are meaningless (uniform).
  """
  _, state = model.apply({"params": params}, inputs, targets, mutable=["intermediates"])
  return stacked_weights(state["intermediates"])
