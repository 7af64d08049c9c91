"""`tfm export` of language models with no torch: the exported files, read by numpy forward passes
of GPT-2, Llama, BERT and RoBERTa-PreLayerNorm (tests/export/lm_reference.py), compute tfm's
logits; the class follows from the config and what it cannot hold is refused in one line.

The tfm parameters are randomised (norms and biases too) so that no mapped tensor passes by being
zeros or ones. The real classes run in tests/export/test_lm_parity.py (long tier).
"""

import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
from safetensors.numpy import load

from tests.export import lm_reference as ref
from tfm.config import load_config
from tfm.export import bert, ct2, gpt2, layout, llama, targets
from tfm.model.config import ModelConfig
from tfm.model.positions import apply_rope
from tfm.model.transformer import Transformer

LM = dict(vocab_size=40, d_model=16, d_ff=24, num_heads=2, d_k=8, d_v=8, num_encoder_layers=0,
          num_decoder_layers=2, architecture="decoder_only", norm="pre", dropout_rate=0.0,
          max_length=12)
GPT2 = dict(LM, positions="learned", ffn="gelu")
LLAMA = dict(LM, positions="rope", ffn="swiglu", norm_kind="rms", use_bias=False, num_heads=4,
             d_k=4, d_v=4, num_kv_heads=2)
MLM = dict(LM, architecture="encoder_only", num_encoder_layers=2, num_decoder_layers=0,
           norm="post", positions="learned", ffn="gelu", embedding_norm=True, mlm_head=True,
           token_types=2, norm_epsilon=1e-12)
ROBERTA = dict(MLM, norm="pre", gelu="erf")  # its head's GELU is the exact one, fixed


class _Run:
  """The parts of a tfm Config the exports read."""

  def __init__(self, cfg):
    self.model = cfg


def _pieces(vocab_size, mask=False):
  return ["<pad>", "</s>", "<unk>"] + (["<mask>"] if mask else []) + [
      f"p{i}" for i in range(3 + mask, vocab_size)]


def _random(model, *args, spread=0.3):
  """Random values ~ N(0, spread^2) for every parameter (init traced for its shapes only), host
  numpy."""
  shapes = jax.eval_shape(lambda: nn.meta.unbox(model.init(jax.random.PRNGKey(0), *args)["params"]))
  rng = np.random.default_rng(0)
  return jax.tree.map(lambda s: rng.normal(0.0, spread, s.shape).astype(np.float32), shapes)


TOKENS = np.array([[5, 9, 3, 17, 1, 0, 0], [8, 30, 4, 12, 22, 39, 1]], np.int32)


def _lm_case(cfg, reference):
  model = Transformer(cfg)
  params = _random(model, None, TOKENS)
  ours = np.asarray(jax.jit(model.apply)({"params": params}, None, TOKENS))
  files = (llama if cfg.positions == "rope" else gpt2).export_files(
      _Run(cfg), jax.device_get(params), b"spm", _pieces(cfg.vocab_size), {"test": True})
  inputs = np.pad(TOKENS, ((0, 0), (1, 0)))[:, :-1]  # [0] + pieces: the start token first
  theirs = reference(files, inputs)
  difference = np.abs(theirs - ours)[TOKENS != 0].max()
  assert difference < 1e-4, difference
  assert np.abs(ours).max() > 1.0
  return files, params


@pytest.mark.parametrize("changes", [
    {}, dict(tie_embeddings=False, use_bias=False, ffn="relu", scan_layers=True),
    dict(positions="sinusoidal", norm_epsilon=1e-5, gelu="erf")],
    ids=["tied", "untied-nobias-relu-scanned", "sinusoidal-erf"])
def test_gpt2_files_compute_tfm_logits(changes):
  cfg = ModelConfig(**{**GPT2, **changes})
  files, params = _lm_case(cfg, ref.gpt2_logits)
  conf = json.loads(files["config.json"])
  assert conf["activation_function"] == (
      "relu" if cfg.ffn == "relu" else {"tanh": "gelu_new", "erf": "gelu"}[cfg.gelu])
  assert (conf["n_positions"], conf["layer_norm_epsilon"]) == (12, cfg.norm_epsilon)
  assert (conf["bos_token_id"], conf["eos_token_id"], conf["pad_token_id"]) == (0, 1, 0)
  zero_biases = 0 if cfg.use_bias else 2 * (3 * 16 + 16 + 24 + 16)
  _same_count(files, params, extra=zero_biases + (12 * 16 if cfg.positions == "sinusoidal" else 0))


@pytest.mark.parametrize("changes", [{}, dict(tie_embeddings=False, scan_layers=True,
                                              num_kv_heads=None, rope_base=500.0)],
                         ids=["tied-gqa", "untied-mha-scanned-base500"])
def test_llama_files_compute_tfm_logits(changes):
  cfg = ModelConfig(**{**LLAMA, **changes})
  files, params = _lm_case(cfg, ref.llama_logits)
  conf = json.loads(files["config.json"])
  assert (conf["num_key_value_heads"], conf["head_dim"]) == (cfg.kv_heads, 4)
  assert conf["rope_parameters"] == {"rope_type": "default", "rope_theta": cfg.rope_base}
  _same_count(files, params, extra=0)


def test_tfm_rope_is_llamas_rotate_half():
  """tfm's apply_rope and Llama's rotate_half formula (written out in lm_reference) agree: the
  q and k projections export unpermuted."""
  x = np.random.default_rng(1).normal(size=(2, 5, 3, 8)).astype(np.float32)  # [b, t, h, w]
  positions = np.broadcast_to(np.arange(5), (2, 5))
  ours = np.asarray(apply_rope(x, positions, 500.0))
  theirs = ref.llama_rope(x.transpose(0, 2, 1, 3).astype(np.float64), 500.0).transpose(0, 2, 1, 3)
  assert np.abs(ours - theirs).max() < 1e-5


def _mlm_case(cfg, spread=0.3):
  model = Transformer(cfg)
  inputs = np.where(TOKENS == 5, 3, TOKENS)  # a <mask> (3) among the pieces
  params = _random(model, inputs, None, spread=spread)
  ours = np.asarray(jax.jit(model.apply)({"params": params}, inputs, None))
  files = bert.export_files(_Run(cfg), jax.device_get(params), b"spm",
                            _pieces(cfg.vocab_size, mask=True), {"test": True})
  theirs = ref.mlm_logits(files, inputs)
  return files, params, np.abs(theirs - ours)[inputs != 0].max(), np.abs(ours).max()


@pytest.mark.parametrize("changes", [
    {}, dict(tie_embeddings=False, use_bias=False, token_types=0, scan_layers=True),
    dict(positions="sinusoidal", gelu="erf")],
    ids=["bert", "untied-nobias-notypes-scanned", "sinusoidal-erf"])
def test_bert_files_compute_tfm_logits(changes):
  cfg = ModelConfig(**{**MLM, **changes})
  files, params, difference, scale = _mlm_case(cfg)
  assert difference < 1e-4 and scale > 0.5, difference
  conf = json.loads(files["config.json"])
  assert conf["architectures"] == ["BertForMaskedLM"]
  assert conf["hidden_act"] == {"tanh": "gelu_new", "erf": "gelu"}[cfg.gelu]
  assert conf["type_vocab_size"] == max(1, cfg.token_types) and conf["layer_norm_eps"] == 1e-12
  extra = 0 if cfg.use_bias else 2 * (3 * 16 + 16 + 24 + 16) + 16 + 40
  extra += (16 if not cfg.token_types else 0) + (12 * 16 if cfg.positions == "sinusoidal" else 0)
  _same_count(files, params, extra=extra)


@pytest.mark.parametrize("changes", [{}, dict(tie_embeddings=False, scan_layers=True)],
                         ids=["tied", "untied-scanned"])
def test_pre_ln_mlm_files_are_roberta_prelayernorms(changes):
  """Pre-LN with model.gelu='erf': RobertaPreLayerNormForMaskedLM, positions one row down (pad's
  row 0 in front), hidden_act "gelu": the layers' GELU and the head's (the exact one, fixed in
  transformers) both tfm's, so the logits are tfm's."""
  cfg = ModelConfig(**{**ROBERTA, **changes})
  files, params, difference, scale = _mlm_case(cfg)
  assert difference < 1e-4 and scale > 0.5, difference
  conf = json.loads(files["config.json"])
  assert conf["architectures"] == ["RobertaPreLayerNormForMaskedLM"]
  assert conf["hidden_act"] == "gelu"
  assert conf["max_position_embeddings"] == 13
  state = load(files["model.safetensors"])
  assert not state["roberta_prelayernorm.embeddings.position_embeddings.weight"][0].any()
  _same_count(files, params, extra=16)


def test_a_pre_ln_mlm_of_tanh_gelus_is_refused():
  """Pre-LN with model.gelu='tanh' is refused in one line naming model.gelu: the class's head
  computes the exact GELU, tfm's the tanh form. Its files, written past the refusal, show why:
  their logits differ from tfm's by several times what an export may (1e-4), where the same
  parameters under 'erf' agree to float rounding (weights of spread 0.7: larger inputs to the
  head's GELU, a larger gap between its forms)."""
  cfg = ModelConfig(**{**ROBERTA, "gelu": "tanh"})
  assert targets.refusals(cfg) == [
      "config key model.gelu: expected 'erf' (the class's masked-LM head calls the exact GELU "
      "whatever its config says: another form's logits would not be tfm's) to export to "
      "RobertaPreLayerNormForMaskedLM, got 'tanh'"]
  _, _, difference, _ = _mlm_case(cfg, spread=0.7)
  assert 5e-4 < difference < 1e-2, difference
  _, _, exact, _ = _mlm_case(ModelConfig(**ROBERTA), spread=0.7)
  assert exact < 1e-5, exact


def _same_count(files, params, extra):
  """The export holds tfm's parameters, plus `extra` values (zero biases, rows) of its own."""
  exported = sum(x.size for x in load(files["model.safetensors"]).values())
  ours = sum(x.size for x in jax.tree.leaves(params))
  assert exported == ours + extra, (exported, ours, extra)


def test_gpt2_names_and_shapes():
  cfg = ModelConfig(**{**GPT2, "tie_embeddings": False})
  params = _random(Transformer(cfg), None, TOKENS)
  state = gpt2.state_dict(jax.device_get(params), cfg)
  layer = {"ln_1.weight": (16,), "ln_1.bias": (16,), "attn.c_attn.weight": (16, 48),
           "attn.c_attn.bias": (48,), "attn.c_proj.weight": (16, 16), "attn.c_proj.bias": (16,),
           "ln_2.weight": (16,), "ln_2.bias": (16,), "mlp.c_fc.weight": (16, 24),
           "mlp.c_fc.bias": (24,), "mlp.c_proj.weight": (24, 16), "mlp.c_proj.bias": (16,)}
  expected = {"transformer.wte.weight": (40, 16), "transformer.wpe.weight": (12, 16),
              "transformer.ln_f.weight": (16,), "transformer.ln_f.bias": (16,),
              "lm_head.weight": (40, 16),
              **{f"transformer.h.{i}.{k}": s for i in range(2) for k, s in layer.items()}}
  assert {k: v.shape for k, v in state.items()} == expected
  # Conv1D is x W: c_fc is tfm's wi kernel untransposed; wte is sqrt(d_model) E.
  np.testing.assert_array_equal(state["transformer.h.1.mlp.c_fc.weight"],
                                params["decoder"]["layer_1"]["ffn"]["wi"]["kernel"])
  np.testing.assert_allclose(state["transformer.wte.weight"],
                             params["target_embedding"]["embedding"] * 4.0, rtol=1e-6)


def test_the_class_follows_from_the_config():
  named = lambda **c: targets.check(ModelConfig(**c)).name
  assert named(**GPT2) == "GPT2LMHeadModel" and named(**LLAMA) == "LlamaForCausalLM"
  assert named(**MLM) == "BertForMaskedLM" and named(**ROBERTA) == "RobertaPreLayerNormForMaskedLM"
  assert named(**{**MLM, "gelu": "erf"}) == "BertForMaskedLM"  # hidden_act serves its head too
  assert named(**{**GPT2, "architecture": "encoder_decoder", "num_encoder_layers": 1,
                  "norm": "post", "positions": "sinusoidal"}) == "MarianMTModel"


@pytest.mark.parametrize("base,changes,line", [
    (GPT2, dict(positions="alibi"), "model.positions: expected 'learned' or 'sinusoidal' "
     "(GPT2LMHeadModel's table of absolute positions) or 'rope' (LlamaForCausalLM)"),
    (GPT2, dict(norm="post"), "model.norm: expected 'pre' (GPT-2's blocks"),
    (GPT2, dict(norm_kind="rms"), "model.norm_kind: expected 'layer'"),
    (GPT2, dict(ffn="swiglu"), "model.ffn: expected 'gelu' or 'relu'"),
    (GPT2, dict(num_kv_heads=1), "model.num_kv_heads: expected None or model.num_heads=2"),
    (GPT2, dict(d_k=4, d_v=4), "model.d_k: expected model.d_model / model.num_heads = 8"),
    (GPT2, dict(embedding_norm=True), "model.embedding_norm: expected False"),
    (LLAMA, dict(norm_kind="layer"), "model.norm_kind: expected 'rms'"),
    (LLAMA, dict(ffn="gelu"), "model.ffn: expected 'swiglu'"),
    (LLAMA, dict(use_bias=True), "model.use_bias: expected False"),
    (LLAMA, dict(d_v=8), "model.d_v: expected model.d_k=4"),
    (LLAMA, dict(norm="post"), "model.norm: expected 'pre'"),
    (MLM, dict(embedding_norm=False), "model.embedding_norm: expected True"),
    (MLM, dict(mlm_head=False), "model.mlm_head: expected True"),
    (MLM, dict(positions="rope"), "model.positions: expected 'learned' or 'sinusoidal'"),
    (MLM, dict(ffn="relu"), "model.ffn: expected 'gelu'"),
    (MLM, dict(norm_kind="rms"), "model.norm_kind: expected 'layer'"),
    (MLM, dict(num_kv_heads=1), "model.num_kv_heads: expected None"),
    (ROBERTA, dict(gelu="tanh"), "model.gelu: expected 'erf'"),
    (ROBERTA, dict(ffn="relu"), "model.ffn: expected 'gelu'"),
])
def test_each_key_a_class_cannot_hold_is_refused_alone(base, changes, line):
  cfg = ModelConfig(**{**base, **changes})
  found = targets.refusals(cfg)
  assert len(found) == 1 and found[0].startswith("config key " + line), found
  assert f"to export {'a decoder-only model' if 'positions' in changes and base is GPT2 else 'to ' + targets.target(cfg).name}, got " in found[0]
  assert targets.refusals(ModelConfig(**base)) == []
  with pytest.raises(ValueError, match="^config key "):
    targets.check(cfg)


def test_ct2_takes_the_causal_lms_only():
  assert ct2.refusal("GPT2LMHeadModel", 8, 16, 2) is None
  assert ct2.refusal("LlamaForCausalLM", 8, 16, 2) is None
  assert "Llama loader takes heads" in ct2.refusal("LlamaForCausalLM", 4, 16, 2)
  assert "a BertForMaskedLM export has no CTranslate2" in ct2.refusal("BertForMaskedLM", 8, 16, 2)


@pytest.mark.parametrize("config,line", [
    ("configs/lm_quickstart.py", "config key model.norm: expected 'pre' (GPT-2's blocks are x + "
     "Sublayer(LayerNorm(x)), ending in a final LayerNorm) to export to GPT2LMHeadModel, got "
     "'post'"),
    ("configs/mlm_recipes.py:bert", "config key model.embedding_norm: expected True (the class "
     "puts its summed embeddings through a LayerNorm) to export to BertForMaskedLM, got False"),
])
def test_quickstart_language_models_are_refused_in_one_line(tmp_path, capsys, config, line):
  from tfm import cli  # pylint: disable=import-outside-toplevel
  from tfm.train import checkpoint  # pylint: disable=import-outside-toplevel
  workdir = tmp_path / "run"
  workdir.mkdir()
  checkpoint.write_config(workdir, load_config(config).to_dict())
  assert cli.main(["tfm", "export", f"--workdir={workdir}", f"--out={tmp_path / 'out'}"]) == 1
  error = capsys.readouterr().err.strip().splitlines()
  assert len(error) == 1 and error[0].startswith("tfm export: error: " + line), error
  assert sorted(os.listdir(tmp_path)) == ["run"]


def test_an_mlm_export_refuses_ct2_before_loading(tmp_path, capsys, monkeypatch):
  from tfm import cli  # pylint: disable=import-outside-toplevel
  from tfm.commands import export  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(export, "_check_ct2", lambda quantization: None)  # no ctranslate2 needed
  from tfm.train import checkpoint  # pylint: disable=import-outside-toplevel
  workdir = tmp_path / "run"
  workdir.mkdir()
  config = load_config("configs/mlm_recipes.py:bert", [
      "model.embedding_norm=True", "model.mlm_head=True", "model.ffn=gelu",
      "model.positions=learned"])
  checkpoint.write_config(workdir, config.to_dict())  # no checkpoint: refused before loading
  assert cli.main(["tfm", "export", f"--workdir={workdir}", f"--out={tmp_path / 'out'}",
                   f"--ct2={tmp_path / 'ct2'}"]) == 2
  assert "a BertForMaskedLM export has no CTranslate2 counterpart" in capsys.readouterr().err
  assert sorted(os.listdir(tmp_path)) == ["run"]


def test_sinusoid_table_is_tfms():
  from tfm.model.positions import sinusoids  # pylint: disable=import-outside-toplevel
  ours = np.asarray(sinusoids(np.arange(7)[None], 16))[0]
  assert np.abs(layout.sinusoid_table(7, 16) - ours).max() < 1e-6


def test_tokenizer_and_generation_files():
  """The tokenizer files name every special token by its piece (none added), keep SentencePiece's
  splitting of texts quoting them, and carry the run's model bytes; generation never emits pad."""
  cfg = ModelConfig(**GPT2)
  params = jax.device_get(_random(Transformer(cfg), None, TOKENS))
  files = gpt2.export_files(_Run(cfg), params, b"the spm bytes", _pieces(40), {})
  assert files["spiece.model"] == b"the spm bytes"
  tokenizer = json.loads(files["tokenizer_config.json"])
  assert tokenizer["tokenizer_class"] == "BertGenerationTokenizer"
  assert (tokenizer["bos_token"], tokenizer["pad_token"], tokenizer["eos_token"],
          tokenizer["unk_token"]) == ("<pad>", "<pad>", "</s>", "<unk>")
  assert tokenizer["split_special_tokens"] and "mask_token" not in tokenizer
  assert tokenizer["model_max_length"] == 11  # the start token takes the table's first row
  generation = json.loads(files["generation_config.json"])
  assert generation["bad_words_ids"] == [[0]] and generation["eos_token_id"] == 1
  cfg = ModelConfig(**MLM)
  params = jax.device_get(_random(Transformer(cfg), TOKENS, None))
  files = bert.export_files(_Run(cfg), params, b"spm", _pieces(40, mask=True), {})
  assert json.loads(files["tokenizer_config.json"])["mask_token"] == "<mask>"
  assert "generation_config.json" not in files
  with pytest.raises(ValueError, match="no <mask> at id 3"):
    bert.export_files(_Run(cfg), params, b"spm", _pieces(40), {})
