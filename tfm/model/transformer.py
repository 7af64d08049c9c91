"""The Transformer (section 3): encoder-decoder as in the paper, or decoder-only / encoder-only.

Embeddings: one table for the source, the target and the output projection (model.tie_embeddings,
'token_embedding'); untied, a table for each stack's input ('source_embedding', 'target_embedding')
and the output projection 'logits' in the decoder, or with model.share_embeddings one input table
for both stacks ('shared_embedding', T5 v1.1's layout) and 'logits'. An encoder-only model's logits
may pass through BERT's masked-LM head first (model.mlm_head, tfm/model/mlm_head.py).

Token conventions: pad = 0 (also the decoder's start token), eos = 1. Batches may be packed: several
examples per row, told apart by segment ids (1, 2, ... per example, 0 on padding) with positions that
restart at 0 for each example. Unpacked batches may omit segmentation and positions; packed ones
may omit the positions (they follow from the segment ids).

Decoding with a cache:
  encoded = model.apply(v, inputs, method=Transformer.encode)
  _, vs = model.apply(v, encoded, inputs_segmentation, batch_size, max_len,
                      method=Transformer.init_cache, mutable=["cache"])
  logits, vs = model.apply({**v, **vs}, token, method=Transformer.decode_step, mutable=["cache"])
A decoder-only model's prompt goes into the fresh cache in one pass (`Transformer.prefill`) before
the steps.
Every cache leaf has a leading batch dimension, so beam search can tile and reorder it (with
model.scan_layers the per-layer leaves are [b, N, ...]: tfm/model/layer_stack.py).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from tfm.model import masks
from tfm.model import partitioning as P
from tfm.model.config import ModelConfig
from tfm.model.dense import vocab_projection
from tfm.model.embedding import Embed
from tfm.model.layers import norm
from tfm.model.mlm_head import MlmHead
from tfm.model.stacks import Decoder, Encoder


def shift_right(targets: jax.Array, segmentation: jax.Array | None = None) -> jax.Array:
  """Decoder inputs: targets moved one step right with 0 (the start token) in front of each segment.

  targets, segmentation [b, t] -> [b, t]. With packing, a segment's first input is 0, never the last
  token of the previous segment.
  """
  shifted = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
  if segmentation is not None:
    previous = jnp.pad(segmentation, ((0, 0), (1, 0)))[:, :-1]
    shifted = jnp.where(previous == segmentation, shifted, 0)
  return shifted


def _defaults(tokens, segmentation, positions):
  """Segment ids and positions where a batch leaves them out: one segment per row (id 1 on real
  tokens), and positions from the segment ids, restarting with each packed segment."""
  if positions is None:
    positions = (masks.positions_from_tokens(tokens) if segmentation is None
                 else masks.positions_from_segments(segmentation))
  if segmentation is None:
    segmentation = masks.segments_from_tokens(tokens)
  return segmentation, positions


class Transformer(nn.Module):
  cfg: ModelConfig

  def setup(self):
    cfg = self.cfg
    make = lambda name: Embed(cfg.vocab_size, cfg.d_model, cfg.compute_dtype, name=name)
    if cfg.tie_embeddings:
      shared = make("token_embedding")
      source, target, output = shared, shared, shared
    elif cfg.share_embeddings:  # T5 v1.1: one input table for both stacks, the output its own
      shared = make("shared_embedding")
      source, target, output = shared, shared, None
    else:
      source = make("source_embedding") if cfg.has_encoder else None
      target = make("target_embedding") if cfg.has_decoder else None
      output = None
    if cfg.has_encoder:
      self.encoder = Encoder(cfg, source, name="encoder")
    if cfg.has_decoder:
      self.decoder = Decoder(cfg, target, output, name="decoder")
    if cfg.architecture == "encoder_only":
      self.output = output if output is not None else vocab_projection(cfg.vocab_size,
                                                                       cfg.compute_dtype)
      if cfg.mlm_head:
        self.mlm_head = MlmHead(cfg.vocab_size, functools.partial(norm, cfg), cfg.dtype,
                                cfg.use_bias, cfg.gelu_approximate, name="mlm_head")

  def encode(self, inputs, inputs_segmentation=None, inputs_positions=None, *,
             train: bool = False):
    """inputs [b, s] -> encoded [b, s, d_model]."""
    segmentation, positions = _defaults(inputs, inputs_segmentation, inputs_positions)
    return self.encoder(inputs, segmentation, positions, train=train)

  def decode(self, encoded, targets, inputs_segmentation=None, targets_segmentation=None,
             targets_positions=None, *, train: bool = False):
    """Teacher-forced decoder: targets [b, t] (not yet shifted) -> logits [b, t, vocab] float32."""
    segmentation, positions = _defaults(targets, targets_segmentation, targets_positions)
    decoder_inputs = shift_right(targets, segmentation if targets_segmentation is not None else None)
    return self.decoder(decoder_inputs, segmentation, positions, encoded, inputs_segmentation,
                        train=train)

  def __call__(self, inputs, targets, *, inputs_segmentation=None, targets_segmentation=None,
               inputs_positions=None, targets_positions=None, train: bool = False):
    """inputs [b, s] (None for decoder-only), targets [b, t] (None for encoder-only).

    Returns float32 logits [b, t, vocab] (encoder-only: [b, s, vocab], one per input token).
    """
    arch = self.cfg.architecture
    if arch == "decoder_only":
      return self.decode(None, targets, None, targets_segmentation, targets_positions, train=train)
    if inputs_segmentation is None:
      inputs_segmentation = masks.segments_from_tokens(inputs)
    encoded = self.encode(inputs, inputs_segmentation, inputs_positions, train=train)
    if arch == "encoder_only":
      project = self.output.attend if self.cfg.tie_embeddings else self.output
      logits = self.mlm_head(encoded, project) if self.cfg.mlm_head else project(encoded)
      return P.constrain(logits.astype(jnp.float32), P.BLV)
    return self.decode(encoded, targets, inputs_segmentation, targets_segmentation, targets_positions,
                       train=train)

  def init_cache(self, encoded, inputs_segmentation, batch_size: int, max_decode_len: int):
    """Creates the decode cache (run with mutable=['cache']). encoded [b, s, d_model] or None."""
    dummy = jnp.zeros((batch_size, max_decode_len), jnp.int32)
    self.decoder(dummy, encoded=encoded, encoder_segmentation=inputs_segmentation, mode="init_cache")

  def prefill(self, tokens, lengths):
    """A prompt in one pass into a fresh cache of init_cache (run with mutable=['cache']; decoder-
    only): tokens [b, P], row r's first lengths[r] of them (decoder inputs, the start token 0
    first), lengths int32[b] -> logits [b, vocab] at each row's position lengths - 1, with the
    cache holding the prompts' keys and values and its index at lengths: decode_step continues
    as after lengths one-token steps."""
    return self.decoder(tokens, mode="prefill", lengths=lengths)[:, 0]

  def decode_step(self, tokens):
    """One decoding step (run with mutable=['cache']): tokens [b, 1] -> logits [b, vocab]."""
    return self.decoder(tokens, mode="decode")[:, 0]
