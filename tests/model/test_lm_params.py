"""GPT-2 small and BERT-base as tfm builds them (configs/gpt2_small.py, configs/bert_base.py):
their parameters, component by component, against counts written from the architectures, and the
totals against the published ones with every difference named.

The published totals are the released checkpoints' (GPT-2's paper printed 117M, a miscount its
repository later corrected to 124M; BERT's paper rounds to 110M):
  GPT-2 small  124,439,808 = tokens 50257 x 768 + positions 1024 x 768 + 12 pre-norm layers
                             + the final LayerNorm (output tied to the token embedding)
  BERT-base    109,482,240 = tokens 30522 x 768 + positions 512 x 768 + token types 2 x 768
                             + the embeddings' LayerNorm + 12 post-norm layers + the pooler
                             (its MLM head, 622,650 more, is not in this total)
"""

import math

import jax
import pytest

from configs import bert_base, gpt2_small
from tfm.model.config import from_config
from tfm.model.params import count_params, param_shapes

GPT2_PUBLISHED = 124_439_808
BERT_PUBLISHED = 109_482_240
D, FF, LAYERS = 768, 3072, 12


def layer_norm(d=D):
  return 2 * d  # scale and bias


def layer(d=D, ff=FF):
  """One Transformer layer with biases on every projection: self-attention (query, key, value
  and output, d x d each plus a bias), the FFN (d x ff and ff x d plus biases), two LayerNorms."""
  return dict(self_attention=4 * (d * d + d), ffn=d * ff + ff + ff * d + d,
              norms=2 * layer_norm(d))


def gpt2_published_components():
  """GPT-2 small as released (the original checkpoint's tensors: wte, wpe, h.0-11, ln_f)."""
  return dict(token_embedding=50257 * D, positions=1024 * D, layers=LAYERS * sum(layer().values()),
              final_norm=layer_norm())


def bert_published_components():
  """BERT-base as released (bert/embeddings, bert/encoder, bert/pooler of the checkpoint)."""
  return dict(token_embedding=30522 * D, positions=512 * D, layers=LAYERS * sum(layer().values()),
              token_types=2 * D, embedding_norm=layer_norm(), pooler=D * D + D)


def tfm_components(shapes):
  """tfm's parameter tree summed by component: the token embedding, the learned position table,
  each layer's sub-layers, the final LayerNorm; anything else is a component of its own name."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
    keys = [getattr(k, "key", str(k)) for k in path]
    if keys[0] == "token_embedding":  # tied: the source, target and output embedding at once
      name = "token_embedding"
    elif "positions" in keys:
      name = "positions"
    elif any(k.startswith("layer_") for k in keys):
      index = next(k for k in keys if k.startswith("layer_"))
      part = keys[keys.index(index) + 1]
      name = f"{index}/{'norms' if part.endswith('_norm') else part}"
    else:
      name = "/".join(keys[:-1])
    out[name] = out.get(name, 0) + math.prod(leaf.shape)
  return out


def check_layers(components, stack_layers):
  for i in range(stack_layers):
    for part, count in layer().items():
      assert components.pop(f"layer_{i}/{part}") == count, (i, part)


def test_gpt2_small_is_the_published_count_component_by_component():
  model = from_config(gpt2_small.get_config().model)
  components = tfm_components(param_shapes(model))
  published = gpt2_published_components()
  assert sum(published.values()) == GPT2_PUBLISHED  # the architecture adds up to the release
  assert components.pop("token_embedding") == published["token_embedding"]  # tied: no output matrix
  assert components.pop("positions") == published["positions"]
  check_layers(components, LAYERS)
  assert components == {"decoder/final_norm": published["final_norm"]}  # nothing else
  assert count_params(model) == GPT2_PUBLISHED


def test_bert_base_differs_from_the_published_count_by_three_named_parts():
  model = from_config(bert_base.get_config().model)
  components = tfm_components(param_shapes(model))
  published = bert_published_components()
  assert sum(published.values()) == BERT_PUBLISHED
  assert components.pop("token_embedding") == published["token_embedding"]
  assert components.pop("positions") == published["positions"]
  check_layers(components, LAYERS)
  assert components == {}  # post-norm: no final LayerNorm; tied output: no output matrix or bias
  # What BERT has and tfm does not build: 1,536 + 1,536 + 590,592 = 593,664.
  missing = dict(token_types=1_536, embedding_norm=1_536, pooler=590_592)
  assert {k: published[k] for k in missing} == missing
  assert count_params(model) == 108_888_576 == BERT_PUBLISHED - sum(missing.values())


@pytest.mark.long  # imports torch: CI runs it after the README's command
def test_the_published_counts_are_the_transformers_models():
  """An independent check of the figures above: Hugging Face's GPT-2 and BERT at their default
  (small / base) configurations, built on the meta device (no weights allocated). TensorFlow is
  imported first, as a worker that ran the TFDS tests has it (tests/conftest.py: triton)."""
  pytest.importorskip("tensorflow")
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  count = lambda m: sum(p.numel() for p in m.parameters())
  with torch.device("meta"):
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config())
    bert = transformers.BertModel(transformers.BertConfig())
    bert_mlm = transformers.BertForMaskedLM(transformers.BertConfig())
  assert count(gpt2) == GPT2_PUBLISHED  # the LM head is tied to wte
  assert count(bert) == BERT_PUBLISHED
  # BertForMaskedLM drops the pooler and adds the MLM head: transform 768 x 768 + 768, its
  # LayerNorm 1,536, the output bias 30,522 (the output matrix tied to the word embeddings).
  pooler, transform = D * D + D, D * D + D
  assert count(bert_mlm) == BERT_PUBLISHED - pooler + transform + layer_norm() + 30522
