"""GPT2LMHeadModel, LlamaForCausalLM, BertForMaskedLM and RobertaPreLayerNormForMaskedLM forward
passes in numpy float64, written from transformers' modeling files' semantics and reading only an
export's config.json and model.safetensors. They share no code with tfm/model or tfm/export, so
tests/export/test_lm_exports.py checks the mapping against an independent computation without
torch."""

import json
import math

import numpy as np
from safetensors.numpy import load


def _state(files):
  conf = json.loads(files["config.json"])
  return conf, {k: v.astype(np.float64) for k, v in load(files["model.safetensors"]).items()}


def layer_norm(x, weight, bias, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu_tanh(x):  # transformers' NewGELUActivation ("gelu_new")
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gelu_erf(x):  # transformers' GELUActivation ("gelu"): x Phi(x)
  return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


ACTIVATIONS = {"gelu_new": gelu_tanh, "gelu": gelu_erf, "relu": lambda x: np.maximum(x, 0.0),
               "silu": lambda x: x / (1.0 + np.exp(-x))}


def attend(q, k, v, allowed):
  """q [b, h, t, w], k, v [b, h, s, w], allowed bool [b, t, s] -> [b, t, h * w]."""
  scores = np.where(allowed[:, None], q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]), -np.inf)
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  y = weights @ v
  return y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)


def _heads(y, heads):
  b, t, _ = y.shape
  return y.reshape(b, t, heads, -1).transpose(0, 2, 1, 3)


def _causal(ids):
  t = ids.shape[1]
  return np.broadcast_to(np.tril(np.ones((t, t), bool)), (len(ids), t, t))


def gpt2_logits(files, ids):
  """GPT2LMHeadModel(ids).logits: ids [b, t] -> [b, t, vocab]."""
  conf, sd = _state(files)
  eps, act, heads = conf["layer_norm_epsilon"], ACTIVATIONS[conf["activation_function"]], conf["n_head"]
  conv = lambda x, name: x @ sd[f"{name}.weight"] + sd[f"{name}.bias"]  # Conv1D: x W + b
  norm = lambda x, name: layer_norm(x, sd[f"{name}.weight"], sd[f"{name}.bias"], eps)
  x = sd["transformer.wte.weight"][ids] + sd["transformer.wpe.weight"][np.arange(ids.shape[1])]
  for i in range(conf["n_layer"]):
    name = f"transformer.h.{i}"
    q, k, v = np.split(conv(norm(x, f"{name}.ln_1"), f"{name}.attn.c_attn"), 3, axis=-1)
    y = attend(_heads(q, heads), _heads(k, heads), _heads(v, heads), _causal(ids))
    x = x + conv(y, f"{name}.attn.c_proj")
    x = x + conv(act(conv(norm(x, f"{name}.ln_2"), f"{name}.mlp.c_fc")), f"{name}.mlp.c_proj")
  x = norm(x, "transformer.ln_f")
  output = sd["transformer.wte.weight"] if conf["tie_word_embeddings"] else sd["lm_head.weight"]
  return x @ output.T


def rotate_half(x):
  half = x.shape[-1] // 2
  return np.concatenate([-x[..., half:], x[..., :half]], -1)


def llama_rope(x, theta):
  """Llama's apply_rotary_pos_emb on x [b, h, t, w] at positions 0 .. t - 1."""
  w, t = x.shape[-1], x.shape[2]
  inv_freq = 1.0 / theta ** (np.arange(0, w, 2) / w)
  freqs = np.arange(t)[:, None] * inv_freq
  emb = np.concatenate([freqs, freqs], -1)
  return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def llama_logits(files, ids):
  """LlamaForCausalLM(ids).logits: ids [b, t] -> [b, t, vocab]."""
  conf, sd = _state(files)
  eps, heads, kv = conf["rms_norm_eps"], conf["num_attention_heads"], conf["num_key_value_heads"]
  theta = conf["rope_parameters"]["rope_theta"]
  lin = lambda x, name: x @ sd[f"{name}.weight"].T
  rms = lambda x, name: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * sd[f"{name}.weight"]
  x = sd["model.embed_tokens.weight"][ids]
  for i in range(conf["num_hidden_layers"]):
    name = f"model.layers.{i}"
    h = rms(x, f"{name}.input_layernorm")
    q = llama_rope(_heads(lin(h, f"{name}.self_attn.q_proj"), heads), theta)
    k = llama_rope(_heads(lin(h, f"{name}.self_attn.k_proj"), kv), theta)
    v = _heads(lin(h, f"{name}.self_attn.v_proj"), kv)
    k, v = (np.repeat(y, heads // kv, axis=1) for y in (k, v))  # repeat_kv
    x = x + lin(attend(q, k, v, _causal(ids)), f"{name}.self_attn.o_proj")
    h = rms(x, f"{name}.post_attention_layernorm")
    gate = ACTIVATIONS["silu"](lin(h, f"{name}.mlp.gate_proj"))
    x = x + lin(gate * lin(h, f"{name}.mlp.up_proj"), f"{name}.mlp.down_proj")
  x = rms(x, "model.norm")
  output = sd["model.embed_tokens.weight"] if conf["tie_word_embeddings"] else sd["lm_head.weight"]
  return x @ output.T


def mlm_logits(files, ids):
  """BertForMaskedLM or RobertaPreLayerNormForMaskedLM (config.json's class) (ids, attention_mask=
  ids != pad).logits: ids [b, s] -> [b, s, vocab]. BERT's head transform uses hidden_act,
  RoBERTa-PreLayerNorm's the exact GELU whatever hidden_act is (its code calls `gelu`)."""
  conf, sd = _state(files)
  pre = conf["architectures"] == ["RobertaPreLayerNormForMaskedLM"]
  base, eps, heads = "roberta_prelayernorm" if pre else "bert", conf["layer_norm_eps"], conf["num_attention_heads"]
  act = ACTIVATIONS[conf["hidden_act"]]
  lin = lambda x, name: x @ sd[f"{name}.weight"].T + sd[f"{name}.bias"]
  norm = lambda x, name: layer_norm(x, sd[f"{name}.weight"], sd[f"{name}.bias"], eps)
  keep = ids != conf["pad_token_id"]
  if pre:  # create_position_ids_from_input_ids: padding_idx + 1 onwards, pad at padding_idx
    positions = np.cumsum(keep, 1) * keep + conf["pad_token_id"]
  else:
    positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
  e = f"{base}.embeddings"
  x = (sd[f"{e}.word_embeddings.weight"][ids] + sd[f"{e}.position_embeddings.weight"][positions]
       + sd[f"{e}.token_type_embeddings.weight"][0])
  x = norm(x, f"{e}.LayerNorm")
  allowed = np.broadcast_to(keep[:, None, :], (len(ids), ids.shape[1], ids.shape[1]))
  for i in range(conf["num_hidden_layers"]):
    name = f"{base}.encoder.layer.{i}"
    h = norm(x, f"{name}.attention.LayerNorm") if pre else x
    q, k, v = (_heads(lin(h, f"{name}.attention.self.{p}"), heads) for p in ("query", "key", "value"))
    a = lin(attend(q, k, v, allowed), f"{name}.attention.output.dense")
    x = x + a if pre else norm(x + a, f"{name}.attention.output.LayerNorm")
    h = norm(x, f"{name}.intermediate.LayerNorm") if pre else x
    f = lin(act(lin(h, f"{name}.intermediate.dense")), f"{name}.output.dense")
    x = x + f if pre else norm(x + f, f"{name}.output.LayerNorm")
  if pre:
    x = norm(x, f"{base}.LayerNorm")
    h = norm(gelu_erf(lin(x, "lm_head.dense")), "lm_head.layer_norm")
    head = "lm_head"
  else:
    h = norm(act(lin(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
    head = "cls.predictions"
  output = (sd[f"{e}.word_embeddings.weight"] if conf["tie_word_embeddings"]
            else sd[f"{head}.decoder.weight"])
  return h @ output.T + sd[f"{head}.bias"]
