"""T5's parts as model keys, on a tiny encoder-decoder: the relative bias is one table a stack
(bidirectional buckets in the encoder, causal in the decoder, none in encoder-decoder attention),
model.share_embeddings reads one input table in both stacks with the output projection its own,
and use_bias=False with norm_kind='rms' leaves no bias anywhere."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests.model.helpers import draw, tiny
from tfm.model import masks
from tfm.model.attention import Attention
from tfm.model.params import param_shapes
from tfm.model.positions import relative_buckets

T5_PARTS = dict(norm="pre", norm_kind="rms", ffn="gated_gelu", use_bias=False,
                positions="relative", relative_buckets=8, relative_max_distance=16,
                tie_embeddings=False, share_embeddings=True)
INPUTS = jnp.array([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
TARGETS = jnp.array([[11, 12, 1, 0], [13, 14, 15, 1]])


def _paths(tree):
  return {"/".join(str(getattr(k, "key", k)) for k in path): leaf.shape
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_one_relative_table_a_stack_read_by_every_self_attention_and_no_cross_attention():
  cfg = tiny(**T5_PARTS)
  model, variables = draw(cfg, INPUTS, TARGETS)
  tables = {k: s for k, s in _paths(variables["params"]).items() if "rel" in k}
  assert tables == {"encoder/inputs/relative_bias/rel_embedding": (8, 4),
                    "decoder/inputs/relative_bias/rel_embedding": (8, 4)}  # [buckets, heads]

  @jax.jit
  def biases(variables):
    """{attention sub-layer: the bias it was called with} (traced under jit: one compile)."""
    seen = {}

    def record(next_fun, args, kwargs, context):
      if isinstance(context.module, Attention) and context.method_name == "__call__":
        seen["/".join(context.module.path)] = kwargs.get("bias")
      return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
      model.apply(variables, INPUTS, TARGETS)
    return seen

  seen = biases(variables)
  params = variables["params"]
  # bias[b, h, q, k] = table[bucket(k - q), h]: one table a stack, rows by each stack's buckets
  # (positions as the model takes them without a batch's: the encoder's from the segment ids,
  # padding counting on from 0; the decoder's 0, 1, ...)
  positions = lambda tokens: np.asarray(
      masks.positions_from_segments(masks.segments_from_tokens(tokens)) if tokens is INPUTS
      else masks.positions_from_tokens(tokens))
  expect = lambda stack, p, both: np.transpose(np.asarray(params[stack]["inputs"][
      "relative_bias"]["rel_embedding"])[np.asarray(relative_buckets(
          p[:, None, :] - p[:, :, None], 8, 16, both))], (0, 3, 1, 2))
  for stack, tokens, both in (("encoder", INPUTS, True), ("decoder", TARGETS, False)):
    want = expect(stack, positions(tokens), both)
    for layer in ("layer_0", "layer_1"):
      np.testing.assert_array_equal(np.asarray(seen[f"{stack}/{layer}/self_attention"]), want)
  assert seen["decoder/layer_0/cross_attention"] is None
  assert seen["decoder/layer_1/cross_attention"] is None
  # causal buckets: every key after the query (masked anyway) shares the distance-0 bucket
  decoder = expect("decoder", positions(TARGETS), False)
  assert np.all(decoder[:, :, 0, 1:] == decoder[:, :, 0, :1])


def test_shared_input_embeddings_feed_both_stacks_and_the_output_is_its_own():
  """share_embeddings: one table, 'shared_embedding', looked up by both stacks (traced, not
  compiled: the calls are what is checked), the logits from 'decoder/logits'; the untied model's
  tree less its source and target tables, one table more."""
  shared = tiny(tie_embeddings=False, share_embeddings=True)
  model, variables = draw(shared, INPUTS, TARGETS)
  calls = []

  def record(next_fun, args, kwargs, context):
    if context.method_name in ("__call__", "attend") and context.module.path[-1:] in (
        ("shared_embedding",), ("logits",)):
      calls.append(("/".join(context.module.path), context.method_name, args[0].shape))
    return next_fun(*args, **kwargs)

  with nn.intercept_methods(record):
    jax.eval_shape(model.apply, variables, INPUTS, TARGETS)
  assert calls == [("shared_embedding", "__call__", (2, 5)),  # the encoder's inputs
                   ("shared_embedding", "__call__", (2, 4)),  # the decoder's
                   ("decoder/logits", "__call__", (2, 4, 16))]
  untied = _paths(param_shapes(tiny(tie_embeddings=False)))
  tables = {"source_embedding/embedding", "target_embedding/embedding"}
  assert _paths(variables["params"]) == {**{k: v for k, v in untied.items() if k not in tables},
                                         "shared_embedding/embedding": (40, 16)}


def test_t5s_parts_leave_no_bias_and_a_scale_per_norm():
  paths = _paths(param_shapes(tiny(**T5_PARTS)))
  assert not [k for k in paths if k.endswith("/bias")]
  norms = sorted(k for k in paths if k.endswith("/scale"))
  assert len(norms) == 2 * 2 + 2 * 3 + 2 and all(paths[k] == (16,) for k in norms)
  ffn = {k.split("/")[-2] for k in paths if "/ffn/" in k}
  assert ffn == {"wi_gate", "wi", "wo"}
