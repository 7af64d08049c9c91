"""BERT's parts as model keys, on a tiny encoder-only model: the token-type embeddings and the
embeddings' norm (model.token_types, model.embedding_norm) and the masked-LM head (model.mlm_head)
against numpy's formulas, and their parameters."""

import math

import flax.linen as nn
import jax
import numpy as np
import pytest

from tests.model.helpers import draw, tiny
from tfm.model import masks
from tfm.model.layers import EncoderLayer
from tfm.model.params import param_shapes
from tfm.model.stacks import Encoder

BERT_PARTS = dict(architecture="encoder_only", num_decoder_layers=0, positions="learned",
                  ffn="gelu", token_types=2, embedding_norm=True, mlm_head=True,
                  norm_epsilon=1e-12)
TOKENS = np.array([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]], np.int32)


def _layer_norm(x, scale, bias, eps=1e-12):
  mean = x.mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps) * scale + bias


def _gelu_tanh(x):
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_erf(x):
  return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


@pytest.mark.parametrize("gelu, form", [("tanh", _gelu_tanh), ("erf", _gelu_erf)])
def test_embeddings_and_the_mlm_head_are_berts_formulas(gelu, form):
  """x_0 = LayerNorm(E[token] sqrt(d) + P[position] + T[0]) enters the first layer (every token
  of type 0: tfm reads no sentence pairs); logits = LayerNorm(GELU(h W + b)) E^T + b_out from
  the encoder's output h, E the tied embedding, GELU model.gelu's form."""
  model, variables = draw(tiny(**BERT_PARTS, gelu=gelu), TOKENS, None)

  @jax.jit
  def run(variables):
    seen = {}

    def record(next_fun, args, kwargs, context):
      out = next_fun(*args, **kwargs)
      if isinstance(context.module, EncoderLayer) and context.module.name == "layer_0":
        seen["x0"] = args[0]
      if isinstance(context.module, Encoder):
        seen["encoded"] = out
      return out

    with nn.intercept_methods(record):
      seen["logits"] = model.apply(variables, TOKENS, None)
    return seen

  seen = jax.tree.map(lambda a: np.asarray(a, np.float64), run(variables))
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), variables["params"])
  inputs, head, table = p["encoder"]["inputs"], p["mlm_head"], p["token_embedding"]["embedding"]
  positions = masks.positions_from_segments(masks.segments_from_tokens(TOKENS))  # the model's
  summed = (table[TOKENS] * math.sqrt(16) + inputs["positions"]["pos_embedding"][positions]
            + inputs["token_type_embedding"][0])
  norm = inputs["embedding_norm"]
  np.testing.assert_allclose(seen["x0"], _layer_norm(summed, norm["scale"], norm["bias"]),
                             rtol=1e-5, atol=1e-5)
  transformed = seen["encoded"] @ head["transform"]["kernel"] + head["transform"]["bias"]
  norm = head["transform_norm"]
  logits = lambda gelu: (_layer_norm(gelu(transformed), norm["scale"], norm["bias"]) @ table.T
                         + head["output_bias"])
  np.testing.assert_allclose(seen["logits"], logits(form), rtol=1e-5, atol=1e-5)
  other = _gelu_erf if form is _gelu_tanh else _gelu_tanh
  assert np.abs(seen["logits"] - logits(other)).max() > 4e-4  # the form asked for (8e-4 apart)


def test_berts_parameters_and_where_they_are():
  d, vocab = 16, 40
  base = param_shapes(tiny(**{**BERT_PARTS, "token_types": 0, "embedding_norm": False,
                              "mlm_head": False}))
  for tie in (True, False):  # the head projects through the tied table or the untied 'logits'
    params = param_shapes(tiny(**{**BERT_PARTS, "tie_embeddings": tie}))
    added = {k: v for k, v in params.items() if k != "encoder"}
    assert jax.tree.map(lambda s: s.shape, added.pop("mlm_head")) == {
        "transform": {"kernel": (d, d), "bias": (d,)},
        "transform_norm": {"scale": (d,), "bias": (d,)}, "output_bias": (vocab,)}
    assert added.keys() == ({"token_embedding"} if tie else {"source_embedding", "logits"})
    inputs = jax.tree.map(lambda s: s.shape, params["encoder"]["inputs"])
    assert inputs.pop("token_type_embedding") == (2, d)
    assert inputs.pop("embedding_norm") == {"scale": (d,), "bias": (d,)}
    assert inputs == jax.tree.map(lambda s: s.shape, base["encoder"]["inputs"])
  # logical axes: the handful of type rows is never split; the rest as their neighbours
  boxed = jax.eval_shape(draw(tiny(**BERT_PARTS), TOKENS, None)[0].init, jax.random.PRNGKey(0),
                         TOKENS, None)["params"]
  assert boxed["encoder"]["inputs"]["token_type_embedding"].names == (None, "embed")
  assert boxed["mlm_head"]["transform"]["kernel"].names == ("embed", "mlp")
  assert boxed["mlm_head"]["output_bias"].names == ("vocab",)
  # model.use_bias=False: the head's two biases go with every other
  bare = param_shapes(tiny(**BERT_PARTS, use_bias=False))["mlm_head"]
  assert jax.tree.map(lambda s: s.shape, bare) == {"transform": {"kernel": (d, d)},
                                                   "transform_norm": {"scale": (d,), "bias": (d,)}}
