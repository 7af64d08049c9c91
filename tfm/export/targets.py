"""Which transformers class a tfm model exports to, chosen from its config, and why not.

  model.architecture   model.positions / model.norm         class (module)
  encoder_decoder      (any; refusals.py decides)           MarianMTModel (marian.py)
  decoder_only         positions rope                       LlamaForCausalLM (llama.py)
  decoder_only         positions learned or sinusoidal      GPT2LMHeadModel (gpt2.py)
  decoder_only         positions alibi, relative, none      refused: no class adds those
  encoder_only         norm post                            BertForMaskedLM (bert.py)
  encoder_only         norm pre                             RobertaPreLayerNormForMaskedLM (bert.py)

Each class's module lists the keys it cannot hold; `check` raises the first as one line naming
the key. Only the config is read: nothing is loaded before the refusal.
"""

from __future__ import annotations

from typing import NamedTuple

from tfm.model.config import ModelConfig


class Target(NamedTuple):
  """name: the transformers class; refusals(cfg) -> [lines]; export_files(config, params,
  spm_model, pieces, provenance) -> {file name: bytes}."""

  name: str
  refusals: object
  export_files: object


def target(cfg: ModelConfig) -> Target:
  """The class `cfg` exports to (see the module docstring); its refusals may still apply."""
  # pylint: disable=import-outside-toplevel
  from tfm.export import bert, gpt2, llama, marian, refusals
  if cfg.architecture == "encoder_only":
    return Target(bert.target_class(cfg), bert.refusals, bert.export_files)
  if cfg.architecture == "decoder_only":
    if cfg.positions == "rope":
      return Target(llama.CLASS, llama.refusals, llama.export_files)
    return Target(gpt2.CLASS, _gpt2_refusals, gpt2.export_files)
  return Target("MarianMTModel", refusals.refusals, marian.export_files)


def _gpt2_refusals(cfg: ModelConfig) -> list[str]:
  from tfm.export import gpt2  # pylint: disable=import-outside-toplevel
  out = []
  if cfg.positions not in ("learned", "sinusoidal"):
    out.append(f"config key model.positions: expected 'learned' or 'sinusoidal' (GPT2LMHeadModel's "
               f"table of absolute positions) or 'rope' (LlamaForCausalLM) to export a decoder-only "
               f"model, got {cfg.positions!r}")
  return out + gpt2.refusals(cfg)


def refusals(cfg: ModelConfig) -> list[str]:
  """Why `cfg` cannot be its class, one line each; [] when it can."""
  return target(cfg).refusals(cfg)


def check(cfg: ModelConfig) -> Target:
  """The class `cfg` exports to; raises ValueError with the first refusal's line, and how many
  more there are."""
  found = refusals(cfg)
  if found:
    more = f" (and {len(found) - 1} more: {'; '.join(found[1:])})" if found[1:] else ""
    raise ValueError(found[0] + more)
  return target(cfg)
