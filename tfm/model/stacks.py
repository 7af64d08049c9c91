"""The encoder and decoder stacks (section 3.1): embeddings + positions, N layers, output.

Position handling is chosen once per stack: sinusoidal and learned encodings are added to the scaled
embeddings; alibi and relative biases are computed once per stack and added to every layer's
self-attention logits (relative: one [buckets, heads] table a stack, T5's, bidirectional in the
encoder and causal in the decoder; encoder-decoder attention gets no bias); rope is applied inside
self-attention. The layers run as a loop or as one scan (model.scan_layers;
tfm/model/layer_stack.py), each rematerialised by model.remat (tfm/model/remat.py).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from tfm.model import masks
from tfm.model import partitioning as P
from tfm.model.config import ModelConfig
from tfm.model.dense import vocab_projection
from tfm.model.dropout import Dropout
from tfm.model.embedding import Embed
from tfm.model.layer_stack import SCANNED, apply_stack, unrolled_name
from tfm.model.layers import DecoderLayer, EncoderLayer, norm
from tfm.model.positions import LearnedPositions, RelativeBias, alibi_bias, sinusoids
from tfm.model.remat import remat


class _Inputs(nn.Module):
  """Embedding + absolute positions (+ token type, norm) + dropout, and the stack-level attention
  bias.

  tokens, positions [b, l] -> x [b, l, d_model], bias [b, h, l, k] or None (k = k_positions' length).
  With model.token_types > 0 a [token_types, d_model] table 'token_type_embedding' (BERT's segment
  embeddings) is added; tfm reads one segment an example (no sentence pairs), so every token is of
  type 0 and adds row 0 (the other rows are BERT's layout, untrained). With model.embedding_norm
  the sum goes through a norm ('embedding_norm') before the dropout, as BERT's embeddings do.
  """

  cfg: ModelConfig
  embed: Embed
  bidirectional: bool

  @nn.compact
  def __call__(self, tokens, positions, k_positions, *, train: bool):
    cfg = self.cfg
    x = self.embed(tokens)
    if cfg.positions == "sinusoidal":
      x = x + sinusoids(positions, cfg.d_model).astype(x.dtype)
    elif cfg.positions == "learned":
      x = x + LearnedPositions(cfg.max_length, cfg.d_model, name="positions")(positions).astype(x.dtype)
    if cfg.token_types:
      # rows: a handful, never split (no logical name); N(0, 0.02) as the learned positions
      types = self.param("token_type_embedding", P.with_axes(nn.initializers.normal(0.02),
                                                             (None, "embed")),
                         (cfg.token_types, cfg.d_model), jnp.float32)
      x = x + types[0].astype(x.dtype)  # type 0 at every token
    if cfg.embedding_norm:
      x = norm(cfg, "embedding_norm")(x)
    x = Dropout(cfg.dropout_rate)(x, deterministic=not train)
    bias = None
    if cfg.positions == "alibi":
      bias = alibi_bias(positions, k_positions, cfg.num_heads)
    elif cfg.positions == "relative":
      bias = RelativeBias(cfg.num_heads, cfg.relative_buckets, cfg.relative_max_distance,
                          self.bidirectional, name="relative_bias")(positions, k_positions)
    return P.constrain(x, P.BLD), bias


class Encoder(nn.Module):
  """tokens, segmentation, positions [b, s] -> encoded [b, s, d_model]."""

  cfg: ModelConfig
  embed: Embed

  @nn.compact
  def __call__(self, tokens, segmentation, positions, *, train: bool = False):
    cfg = self.cfg
    x, bias = _Inputs(cfg, self.embed, bidirectional=True, name="inputs")(
        tokens, positions, positions, train=train)
    mask = masks.segment_mask(segmentation, segmentation)
    call = remat(lambda layer, y, *inputs: layer(y, *inputs, train=train), cfg.remat,
                 scanned=cfg.scan_layers)
    x = apply_stack(lambda name: EncoderLayer(cfg, name=name), call, cfg.num_encoder_layers,
                    cfg.scan_layers, x, mask, bias, positions)
    if cfg.norm == "pre":
      x = norm(cfg, "final_norm")(x)
    return x


class Decoder(nn.Module):
  """Auto-regressive decoder stack ending in vocabulary logits.

  'full': tokens (targets shifted right), segmentation, positions [b, t] -> logits [b, t, vocab].
  'init_cache': tokens [b, max_len] give the cache shapes; creates the cache and returns None.
  'decode': tokens [b, 1], the previous output token; returns logits [b, 1, vocab] and advances the
  cache index.
  'prefill' (decoder-only): tokens [b, P], row r's first lengths[r] of them its prompt (decoder
  inputs, the start token first), run in one causal pass at positions 0 .. P - 1 into a fresh
  cache of init_cache (P <= its length); sets the cache index to lengths and returns the logits
  [b, 1, vocab] at position lengths - 1 (a row with lengths 0: position 0's, meaningless). A prompt
  token sees the tokens before it and none after, so what it writes into the cache and its logits
  are those of one 'decode' step a token. The padding past a row's prompt runs at position 0 (a
  learned table's lookup past its end would give NaN, which a masked key's zero weight does not
  cancel); what it writes is masked until 'decode' overwrites it.
  encoded [b, s, d_model] and encoder_segmentation [b, s] are needed in 'full' and 'init_cache'
  (they are cached for 'decode'); None for decoder-only models. segmentation and positions are
  None in 'init_cache', 'decode' and 'prefill'. train, mode and lengths are keyword-only.
  """

  cfg: ModelConfig
  embed: Embed
  output_embed: Embed | None = None  # the tied matrix for logits; None: a separate projection

  @nn.compact
  def __call__(self, tokens, segmentation=None, positions=None, encoded=None,
               encoder_segmentation=None, *, train: bool = False, mode: str = "full",
               lengths=None):
    cfg = self.cfg
    cross = cfg.architecture == "encoder_decoder"
    index = None
    if mode == "prefill" and cross:
      raise ValueError("prefill: a decoder-only model's prompt (model.architecture="
                       f"'decoder_only'), not {cfg.architecture!r}")
    if mode == "init_cache":
      b, max_len = tokens.shape
      self.variable("cache", "index", jnp.zeros, (b,), jnp.int32)
      if cross:
        self.variable("cache", "encoder_segmentation", lambda: encoder_segmentation.astype(jnp.int32))
      apply_stack(lambda name: DecoderLayer(cfg, cross, name=name),
                  lambda layer, y, enc: layer(y, enc, mode=mode),
                  cfg.num_decoder_layers, cfg.scan_layers,
                  jnp.zeros((b, max_len, cfg.d_model), cfg.compute_dtype), encoded)
      return None
    if mode == "decode":
      index_var = self.variable("cache", "index")
      index = index_var.value
      first = SCANNED if cfg.scan_layers else unrolled_name(0)
      keys = self.get_variable("cache", first)["self_attention"]["cached_key"]
      max_len = keys.shape[-1]  # [b, (N,) kvh, d_k, max_len]
      positions = index[:, None]
      k_positions = jnp.broadcast_to(jnp.arange(max_len, dtype=jnp.int32), (tokens.shape[0], max_len))
      self_mask = masks.decode_mask(index, max_len)
      if cross:
        encoder_segmentation = self.get_variable("cache", "encoder_segmentation")
        cross_mask = (encoder_segmentation != 0)[:, None, None, :]
    elif mode == "prefill":
      index_var = self.variable("cache", "index")
      order = masks.positions_from_tokens(tokens)
      positions = jnp.where(order < lengths[:, None], order, 0)  # padding at 0: in every table
      k_positions = positions
      self_mask = masks.causal_mask(tokens.shape[1], tokens.shape[1])
    else:
      k_positions = positions
      length = tokens.shape[1]
      self_mask = masks.segment_mask(segmentation, segmentation) & masks.causal_mask(length, length)
      if cross:
        cross_mask = masks.segment_mask(segmentation, encoder_segmentation)
    if not cross:
      cross_mask = None

    x, bias = _Inputs(cfg, self.embed, bidirectional=False, name="inputs")(
        tokens, positions, k_positions, train=train)
    call = lambda layer, y, *inputs: layer(y, *inputs, train=train, mode=mode)
    if mode == "full":  # decoding has no backward pass to rematerialise for
      call = remat(call, cfg.remat, scanned=cfg.scan_layers)
    x = apply_stack(lambda name: DecoderLayer(cfg, cross, name=name), call, cfg.num_decoder_layers,
                    cfg.scan_layers, x, encoded, self_mask, cross_mask, bias, positions, index)
    if cfg.norm == "pre":
      x = norm(cfg, "final_norm")(x)
    if mode == "decode":
      index_var.value = index + 1
    if mode == "prefill":  # only the last prompt position's logits: [b, 1, d_model] on
      index_var.value = lengths.astype(jnp.int32)
      last = jnp.maximum(lengths - 1, 0).astype(jnp.int32)
      x = jnp.take_along_axis(x, last[:, None, None], axis=1)
    if self.output_embed is not None:
      logits = self.output_embed.attend(x)
    else:
      logits = vocab_projection(cfg.vocab_size, cfg.compute_dtype)(x)
    return P.constrain(logits.astype(jnp.float32), P.BLV)
