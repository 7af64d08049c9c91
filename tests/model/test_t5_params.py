"""T5 v1.1 small as tfm builds it (configs/t5_small.py): its parameters, component by component,
against counts written from the architecture, and (long tier) against transformers'
T5ForConditionalGeneration built from t5-v1_1-small's published configuration, with T5's own
functions (relative buckets, RMS norm, gated-GELU's activation) against tfm's.

The released layout: one input table for both stacks (`shared`), the output layer (`lm_head`) its
own matrix (tie_word_embeddings false). transformers 5's T5 ties every embedding to `shared`
whatever the configuration says, so the long test builds the model untied and counts `shared` once
for the two stacks' input tables (one tensor in the release), and lm_head as the output layer.
"""

import math

import flax.linen as nn
import jax
import numpy as np
import pytest

from configs import t5_small
from tfm.config import load_config
from tfm.model.config import from_config
from tfm.model.params import count_params, param_shapes
from tfm.model.positions import relative_buckets
from tfm.model.rms_norm import rms_norm

T5_SMALL = 76_961_152  # T5ForConditionalGeneration of t5-v1_1-small's configuration
D, FF, HEADS, D_KV, LAYERS, VOCAB, BUCKETS = 512, 1024, 6, 64, 8, 32128, 32


def attention(d=D, inner=HEADS * D_KV):
  return 4 * d * inner  # query, key, value [d, heads, d_kv] and output [heads, d_kv, d]; no bias


def t5_components():
  """T5 v1.1 small by component: the names tfm's tree gives them (`components`)."""
  out = {"shared_embedding": VOCAB * D, "decoder/logits": D * VOCAB,
         "encoder/inputs/relative_bias": BUCKETS * HEADS,
         "decoder/inputs/relative_bias": BUCKETS * HEADS,
         "encoder/final_norm": D, "decoder/final_norm": D}  # RMS norms: a scale alone
  for i in range(LAYERS):
    out.update({f"encoder/layer_{i}/self_attention": attention(),
                f"encoder/layer_{i}/ffn": 3 * D * FF,  # gated: wi_gate, wi, wo
                f"encoder/layer_{i}/norms": 2 * D,
                f"decoder/layer_{i}/self_attention": attention(),
                f"decoder/layer_{i}/cross_attention": attention(),
                f"decoder/layer_{i}/ffn": 3 * D * FF, f"decoder/layer_{i}/norms": 3 * D})
  return out


def components(shapes):
  """tfm's tree summed by module: a layer's sub-layers, its norms together, the rest by path."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
    keys = [getattr(k, "key", str(k)) for k in path]
    if len(keys) > 2 and keys[1].startswith("layer_"):
      part = keys[2]
      name = "/".join(keys[:2] + ["norms" if part.endswith("_norm") else part])
    else:
      name = "/".join(keys[:-1])
    out[name] = out.get(name, 0) + math.prod(leaf.shape)
  return out


def test_t5_small_is_t5_v1_1_small_component_by_component():
  model = from_config(t5_small.get_config().model)
  expected = t5_components()
  assert sum(expected.values()) == T5_SMALL
  assert components(param_shapes(model)) == expected
  assert count_params(model) == T5_SMALL
  c = load_config("configs/t5_small.py")  # the whole config builds: T5's fine-tuning batch
  assert (c.data.vocab_size, c.data.tokens_per_batch // c.data.max_length) == (VOCAB, 128)
  assert (c.train.optimizer, c.train.schedule, c.train.learning_rate) == ("adafactor",
                                                                           "constant", 1e-3)


def transformers_t5_components(model):
  """transformers' T5ForConditionalGeneration (built untied) summed by tfm's component names;
  a parameter this mapping does not know fails the test."""
  out = {}
  for name, p in model.named_parameters():
    parts = name.split(".")
    if parts[1:] == ["embed_tokens", "weight"]:  # the release's `shared`: counted there, once
      assert p.shape == model.shared.weight.shape
      continue
    if parts[0] in ("shared", "lm_head"):
      component = {"shared": "shared_embedding", "lm_head": "decoder/logits"}[parts[0]]
    elif parts[1] == "final_layer_norm":
      component = f"{parts[0]}/final_norm"
    else:  # {encoder,decoder}.block.i.layer.j.<sub-layer>.<parameter>
      stack, i, j, sub = parts[0], int(parts[2]), int(parts[4]), parts[5]
      if sub == "SelfAttention" and parts[6] == "relative_attention_bias":
        assert i == 0, name  # one table a stack: in its first block, the others use it
        component = f"{stack}/inputs/relative_bias"
      else:
        part = ("norms" if sub == "layer_norm" else
                {"SelfAttention": "self_attention", "EncDecAttention": "cross_attention",
                 "DenseReluDense": "ffn"}[sub])
        assert (stack, j, sub) != ("encoder", 1, "EncDecAttention"), name
        component = f"{stack}/layer_{i}/{part}"
    out[component] = out.get(component, 0) + p.numel()
  return out


@pytest.mark.long  # imports torch: CI runs it after the README's command
def test_t5_small_is_transformers_t5_v1_1_small_component_by_component():
  """configs/t5_small.py against T5ForConditionalGeneration built (on the meta device: no
  weights) from t5-v1_1-small's published configuration, written out here; and T5's bucket,
  norm and activation functions against tfm's on a few numbers."""
  pytest.importorskip("tensorflow")
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from transformers.activations import ACT2FN  # pylint: disable=import-outside-toplevel
  from transformers.models.t5 import modeling_t5  # pylint: disable=import-outside-toplevel
  config = transformers.T5Config(
      vocab_size=VOCAB, d_model=D, d_kv=D_KV, d_ff=FF, num_layers=LAYERS, num_decoder_layers=LAYERS,
      num_heads=HEADS, relative_attention_num_buckets=BUCKETS, relative_attention_max_distance=128,
      dropout_rate=0.1, layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu",
      tie_word_embeddings=False)
  config.tie_word_embeddings = False  # transformers 5 sets it True whatever it is given: untie
  with torch.device("meta"):
    theirs = transformers.T5ForConditionalGeneration(config)
  assert theirs.lm_head.weight is not theirs.shared.weight
  cfg = from_config(t5_small.get_config().model)
  ours = components(param_shapes(cfg))
  assert transformers_t5_components(theirs) == ours == t5_components()
  assert sum(ours.values()) == T5_SMALL

  relative = np.arange(-300, 301)[None, :] - np.arange(0, 5)[:, None]  # key - query
  for both in (True, False):  # the encoder's buckets, the decoder's
    want = modeling_t5.T5Attention._relative_position_bucket(  # pylint: disable=protected-access
        torch.tensor(relative), bidirectional=both, num_buckets=BUCKETS, max_distance=128)
    np.testing.assert_array_equal(np.asarray(relative_buckets(relative, BUCKETS, 128, both)),
                                  want.numpy())
  assert config.dense_act_fn == "gelu_new" and config.is_gated_act
  x = np.random.default_rng(0).normal(0.0, 3.0, (4, D)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(nn.gelu(x)),
                             ACT2FN["gelu_new"](torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
  norm = modeling_t5.T5LayerNorm(D, eps=1e-6)
  with torch.no_grad():
    norm.weight.copy_(torch.linspace(0.5, 1.5, D))
    want = norm(torch.tensor(x)).numpy()
  np.testing.assert_allclose(np.asarray(rms_norm(x, np.linspace(0.5, 1.5, D, dtype=np.float32),
                                                 1e-6)), want, rtol=1e-5, atol=1e-6)
