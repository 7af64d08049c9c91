import pytest

from tfm.config import load_config
from tfm.model.config import ModelConfig, from_config

CASES = [
    (dict(num_heads=8, num_kv_heads=3), "model.num_kv_heads"),
    (dict(positions="fourier"), "model.positions"),
    (dict(dropout_rate=1.0), "model.dropout_rate"),
    (dict(attention_dropout_rate=-0.1), "model.attention_dropout_rate"),
    (dict(d_model=511), "model.d_model"),
    (dict(ffn="tanh"), "model.ffn"),
    (dict(gelu="exact"), "model.gelu"),
    (dict(gelu=True), "model.gelu"),
    (dict(norm="sandwich"), "model.norm"),
    (dict(architecture="mixture"), "model.architecture"),
    (dict(d_k=0), "model.d_k"),
    (dict(positions="rope", d_k=7), "model.d_k"),
    (dict(attention_impl="xla", d_k=16, d_v=64), "model.attention_impl"),
    (dict(attention_impl="cudnn", d_k=512, d_v=512, num_heads=1), "model.attention_impl"),  # A1
    (dict(attention_impl="cudnn", d_k=12, d_v=12), "model.attention_impl"),
    (dict(dtype="float8"), "model.dtype"),
    (dict(dtype="float16"), "model.dtype"),  # no loss scaling
    (dict(attention_impl="cudnn", dtype="float32"), "model.attention_impl"),
    (dict(vocab_size=2), "model.vocab_size"),  # label smoothing spreads eps over vocab - 1 words
    (dict(scan_layers="yes"), "model.scan_layers"),
    (dict(remat="selective"), "model.remat"),
    (dict(layer_norm_grad="manual"), "model.layer_norm_grad"),
    (dict(norm_kind="batch"), "model.norm_kind"),
    (dict(norm_kind="rms", layer_norm_grad="written"), "model.layer_norm_grad"),
    (dict(share_embeddings=True), "model.share_embeddings"),  # tied already: one table
    (dict(share_embeddings=True, tie_embeddings=False, architecture="decoder_only",
          num_encoder_layers=0), "model.share_embeddings"),
    (dict(share_embeddings=1, tie_embeddings=False), "model.share_embeddings"),
    (dict(token_types=2), "model.token_types"),  # encoder_decoder: BERT's are encoder-only
    (dict(token_types=-1, architecture="encoder_only"), "model.token_types"),
    (dict(token_types=1.5, architecture="encoder_only"), "model.token_types"),
    (dict(embedding_norm="yes"), "model.embedding_norm"),
    (dict(mlm_head=True, architecture="decoder_only", num_encoder_layers=0), "model.mlm_head"),
]


@pytest.mark.parametrize("change,key", CASES)
def test_invalid_model_configs_name_the_key(change, key):
  with pytest.raises(ValueError, match=key.replace(".", r"\.")):
    ModelConfig(**change)


def test_unknown_key_is_reported():
  with pytest.raises(ValueError, match="model.num_layers"):
    from_config({"num_layers": 3})


def test_bad_override_fails_when_the_config_is_built():
  with pytest.raises(ValueError, match=r"model\.num_kv_heads"):
    load_config("configs/table3.py:A2", ["model.num_kv_heads=3"])


def test_table3_rows_change_only_what_the_paper_changes():
  base = load_config("configs/table3.py:base")
  b1 = load_config("configs/table3.py:B1")
  assert (b1.model.d_k, b1.model.d_v, b1.model.num_heads) == (16, 64, 8)
  c4 = load_config("configs/table3.py:C4")
  assert (c4.model.d_model, c4.model.d_k, c4.model.num_heads) == (256, 32, 8)
  big = load_config("configs/table3.py:big")
  assert (big.model.d_model, big.model.dropout_rate, big.train.steps) == (1024, 0.3, 300_000)
  d3 = load_config("configs/table3.py:D3")
  assert d3.train.label_smoothing == 0.0 and base.train.label_smoothing == 0.1
  assert load_config("configs/table3.py:E").model.positions == "learned"
  with pytest.raises(ValueError, match="unknown row 'Z9'"):
    load_config("configs/table3.py:Z9")


def test_a_learned_position_table_covers_every_decoded_position():
  """Beam search decodes up to data.max_length + eval.max_extra_length positions, and a position
  past a learned table reads NaN (jnp.take's fill): row E's table must hold them all."""
  with pytest.raises(ValueError, match=r"model\.max_length \(128\) must be at least .* = 178"):
    load_config("configs/table3_mini.py:E", ["model.max_length=128"])
  for spec in ("configs/table3.py:E", "configs/table3_mini.py:E"):
    c = load_config(spec)
    assert c.model.max_length >= c.data.max_length + c.eval.max_extra_length, spec
  assert load_config("configs/table3_mini.py:base", ["model.max_length=128"])  # sinusoids: no table


def test_length_buckets_are_checked_and_a_learned_table_covers_the_last():
  """eval.length_buckets: increasing positive edges, named in the error; with learned positions
  the table must hold the last edge's sources and their decoded outputs."""
  c = load_config("configs/table3_mini.py:base", ["eval.length_buckets=(32,64,128)"])
  assert c.eval.length_buckets == (32, 64, 128)
  for bad in ("(64,32)", "(0,32)", "(32,32)"):
    with pytest.raises(ValueError, match=r"config key eval\.length_buckets: expected strictly"):
      load_config("configs/table3_mini.py:base", [f"eval.length_buckets={bad}"])
  with pytest.raises(ValueError, match=r"model\.max_length \(178\) must be at least eval\.length_"
                                       r"buckets' last edge \+ eval\.max_extra_length = 306"):
    load_config("configs/table3_mini.py:E", ["eval.length_buckets=(128,256)"])
  assert load_config("configs/table3_mini.py:E", ["eval.length_buckets=(64,128)"])


def test_later_parts_are_off_by_default_and_read_so_from_older_configs():
  """The keys of T5's and BERT's parts default to the model before them (every existing config
  builds the same parameters), and a config.json written before them reads them so: they are in
  ADDED_LATER at their defaults, so sweeps' fingerprints and resumes are unchanged."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  default = ModelConfig()
  for key in ("norm_kind", "share_embeddings", "token_types", "embedding_norm", "mlm_head",
              "gelu"):
    assert config_lib.ADDED_LATER[f"model.{key}"] == getattr(default, key), key
  assert (default.norm_kind, default.ffn, default.token_types, default.gelu) == (
      "layer", "relu", 0, "tanh")
  assert not (default.share_embeddings or default.embedding_norm or default.mlm_head)
  older = load_config("configs/quickstart.py").to_dict()
  for key in ("norm_kind", "share_embeddings", "token_types", "embedding_norm", "mlm_head",
              "gelu"):
    del older["model"][key]
  assert config_lib.build(older).model == load_config("configs/quickstart.py").model
