"""GPT-2 small and BERT-base as tfm builds them (configs/gpt2_small.py, configs/bert_base.py):
their parameters, component by component, against counts written from the architectures, and
(long tier) against transformers' models built from the released configurations.

The published totals are the released checkpoints' (GPT-2's paper printed 117M, a miscount its
repository later corrected to 124M; BERT's paper rounds to 110M):
  GPT-2 small  124,439,808 = tokens 50257 x 768 + positions 1024 x 768 + 12 pre-norm layers
                             + the final LayerNorm (output tied to the token embedding)
  BERT-base    109,482,240 = tokens 30522 x 768 + positions 512 x 768 + token types 2 x 768
                             + the embeddings' LayerNorm + 12 post-norm layers + the pooler
tfm's BERT-base is the masked language model, BertForMaskedLM of bert-base-uncased's
configuration: 109,514,298, the encoder and embeddings without the pooler and with the MLM head
(its transform, 768 x 768 + 768, its LayerNorm and a 30,522 output bias: 622,650).
"""

import math

import jax
import pytest

from configs import bert_base, gpt2_small
from tfm.model.config import from_config
from tfm.model.params import count_params, param_shapes

GPT2_PUBLISHED = 124_439_808
BERT_PUBLISHED = 109_482_240
BERT_MLM = 109_514_298  # BertForMaskedLM of bert-base-uncased's configuration
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
  each layer's sub-layers, the final LayerNorm; anything else is a component of its own name (the
  module's path, or the parameter's where it is no kernel, bias, scale or embedding)."""
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
    elif keys[-1] in ("kernel", "bias", "scale", "embedding", "rel_embedding"):
      name = "/".join(keys[:-1])
    else:
      name = "/".join(keys)
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


def bert_mlm_components():
  """BertForMaskedLM of bert-base-uncased's configuration: BERT's embeddings and encoder, no
  pooler, and the masked-LM head (its decoder tied to the token embedding)."""
  return dict(token_embedding=30522 * D, positions=512 * D, layers=LAYERS * sum(layer().values()),
              token_types=2 * D, embedding_norm=layer_norm(), transform=D * D + D,
              transform_norm=layer_norm(), output_bias=30522)


def test_bert_base_is_bert_for_masked_lm_component_by_component():
  model = from_config(bert_base.get_config().model)
  components = tfm_components(param_shapes(model))
  published, mlm = bert_published_components(), bert_mlm_components()
  assert sum(published.values()) == BERT_PUBLISHED
  assert components.pop("token_embedding") == mlm["token_embedding"]  # tied: no output matrix
  assert components.pop("positions") == mlm["positions"]
  check_layers(components, LAYERS)
  assert components == {  # post-norm: no final LayerNorm; nothing else
      "encoder/inputs/token_type_embedding": mlm["token_types"],  # 2 types, as BERT's table
      "encoder/inputs/embedding_norm": mlm["embedding_norm"],
      "mlm_head/transform": mlm["transform"], "mlm_head/transform_norm": mlm["transform_norm"],
      "mlm_head/output_bias": mlm["output_bias"]}
  # The published total has the pooler (590,592) where the masked LM has its head (622,650).
  head = mlm["transform"] + mlm["transform_norm"] + mlm["output_bias"]
  assert (published["pooler"], head) == (590_592, 622_650)
  assert count_params(model) == BERT_MLM == BERT_PUBLISHED - published["pooler"] + head


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


def transformers_bert_components(model):
  """transformers' BertForMaskedLM summed by tfm's components (tfm_components' names); a
  parameter this mapping does not know fails the test."""
  names = {"word_embeddings": "token_embedding", "position_embeddings": "positions",
           "token_type_embeddings": "encoder/inputs/token_type_embedding",
           "LayerNorm": "encoder/inputs/embedding_norm"}
  out = {}
  for name, p in model.named_parameters():  # tied parameters once: the decoder is word_embeddings
    parts = name.split(".")
    if parts[:2] == ["bert", "embeddings"]:
      component = names[parts[2]]
    elif parts[:3] == ["bert", "encoder", "layer"]:
      rest = ".".join(parts[4:])
      part = ("norms" if "LayerNorm" in rest else
              "self_attention" if rest.startswith("attention.") else
              "ffn" if rest.startswith(("intermediate.dense", "output.dense")) else None)
      assert part is not None, name
      component = f"layer_{parts[3]}/{part}"
    else:
      component = {"cls.predictions.transform.dense": "mlm_head/transform",
                   "cls.predictions.transform.LayerNorm": "mlm_head/transform_norm",
                   "cls.predictions": "mlm_head/output_bias"}[".".join(parts[:-1])]
    out[component] = out.get(component, 0) + p.numel()
  return out


@pytest.mark.long  # imports torch: CI runs it after the README's command
def test_bert_base_is_transformers_bert_for_masked_lm_component_by_component():
  """configs/bert_base.py against BertForMaskedLM built (on the meta device: no weights) from
  bert-base-uncased's published configuration, written out here: every component's count."""
  pytest.importorskip("tensorflow")
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  config = transformers.BertConfig(
      vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
      intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
      layer_norm_eps=1e-12, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  with torch.device("meta"):
    theirs = transformers.BertForMaskedLM(config)
  assert theirs.cls.predictions.decoder.weight is theirs.bert.embeddings.word_embeddings.weight
  ours = tfm_components(param_shapes(from_config(bert_base.get_config().model)))
  assert transformers_bert_components(theirs) == ours
  assert sum(p.numel() for p in theirs.parameters()) == sum(ours.values()) == BERT_MLM
