"""`tfm export`'s MarianMTModel files against tfm's logits, with no torch: a numpy Marian.

`marian_logits` below is MarianMTModel's forward pass (transformers' modeling_marian.py) written
out in numpy float64 from its semantics, reading only the exported files (config.json and
model.safetensors): sines-then-cosines positions, embeddings times sqrt(d_model), post-LN layers
with a bias on every Linear, torch.nn.LayerNorm's epsilon, the logits bias. It shares no code with
tfm/model or tfm/export/marian.py's mapping; the tfm model's parameters are randomised (biases
and LayerNorm parameters too) so that no mapped tensor passes by being zeros or ones.
"""

import json
import math
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
from safetensors.numpy import load

from tfm.config import load_config
from tfm.export import marian, refusals
from tfm.model.config import ModelConfig
from tfm.model.transformer import Transformer


def _layer_norm(x, weight, bias, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * weight + bias


def _activation(name):
  if name == "relu":
    return lambda x: np.maximum(x, 0.0)
  if name == "gelu":  # transformers' GELUActivation: the exact form, x Phi(x)
    return lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
  assert name == "gelu_new"  # transformers' NewGELUActivation: the tanh approximation
  return lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def marian_logits(files, input_ids, decoder_input_ids, eps=1e-5):
  """MarianMTModel(input_ids, attention_mask=input_ids != pad, decoder_input_ids).logits, float64.

  input_ids [b, s], decoder_input_ids [b, t] (Marian ids) -> [b, t, vocab]."""
  conf = json.loads(files["config.json"])
  sd = {k: v.astype(np.float64) for k, v in load(files["model.safetensors"]).items()}
  d, heads = conf["d_model"], conf["encoder_attention_heads"]
  width = d // heads
  act = _activation(conf["activation_function"])
  scale = math.sqrt(d) if conf["scale_embedding"] else 1.0

  def positions(n):  # MarianSinusoidalPositionalEmbedding.create_weight
    angle = np.arange(n)[:, None] / np.power(10000, 2 * (np.arange(d)[None] // 2) / d)
    return np.concatenate([np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])], axis=1)

  linear = lambda x, name: x @ sd[f"{name}.weight"].T + sd[f"{name}.bias"]
  norm = lambda x, name: _layer_norm(x, sd[f"{name}.weight"], sd[f"{name}.bias"], eps)

  def attention(x, kv, name, allowed):  # allowed [b, t, s]
    split = lambda y: y.reshape(*y.shape[:2], heads, width).transpose(0, 2, 1, 3)
    q, k, v = (split(linear(y, f"{name}.{p}_proj")) for y, p in ((x, "q"), (kv, "k"), (kv, "v")))
    scores = np.where(allowed[:, None], (q * width**-0.5) @ k.transpose(0, 1, 3, 2), -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    y = (weights @ v).transpose(0, 2, 1, 3).reshape(*x.shape[:2], d)
    return linear(y, f"{name}.out_proj")

  def feed_forward(x, name):
    return linear(act(linear(x, f"{name}.fc1")), f"{name}.fc2")

  shared = sd.get("model.shared.weight")
  source_table = shared if shared is not None else sd["model.encoder.embed_tokens.weight"]
  target_table = shared if shared is not None else sd["model.decoder.embed_tokens.weight"]
  output = shared if conf["tie_word_embeddings"] else sd["lm_head.weight"]

  keep = input_ids != conf["pad_token_id"]
  x = source_table[input_ids] * scale + positions(input_ids.shape[1])
  for i in range(conf["encoder_layers"]):
    name = f"model.encoder.layers.{i}"
    x = norm(x + attention(x, x, f"{name}.self_attn", keep[:, None, :]), f"{name}.self_attn_layer_norm")
    x = norm(x + feed_forward(x, name), f"{name}.final_layer_norm")
  t = decoder_input_ids.shape[1]
  causal = np.broadcast_to(np.tril(np.ones((t, t), bool)), (len(decoder_input_ids), t, t))
  y = target_table[decoder_input_ids] * scale + positions(t)
  for i in range(conf["decoder_layers"]):
    name = f"model.decoder.layers.{i}"
    y = norm(y + attention(y, y, f"{name}.self_attn", causal), f"{name}.self_attn_layer_norm")
    y = norm(y + attention(y, x, f"{name}.encoder_attn", keep[:, None, :]),
             f"{name}.encoder_attn_layer_norm")
    y = norm(y + feed_forward(y, name), f"{name}.final_layer_norm")
  return y @ output.T + sd["final_logits_bias"]


TINY = dict(vocab_size=40, d_model=16, d_ff=24, num_heads=2, d_k=8, d_v=8, num_encoder_layers=2,
            num_decoder_layers=1, dropout_rate=0.0, norm_epsilon=1e-5)  # epsilon made Marian's


class _Run:
  """The parts of a tfm Config export_files reads."""

  def __init__(self, cfg):
    self.model = cfg
    self.data = type("D", (), dict(max_length=12, source_lang="en", target_lang="es"))()
    self.eval = type("E", (), dict(beam_size=4, length_penalty=0.6, max_extra_length=5))()


def _pieces(vocab_size):
  return ["<pad>", "</s>", "<unk>"] + [f"p{i}" for i in range(3, vocab_size)]


@pytest.mark.parametrize("changes", [
    {},  # the paper's layout: tied embeddings, biases, ReLU
    dict(tie_embeddings=False, use_bias=False, ffn="gelu", scan_layers=True),
    dict(ffn="gelu", gelu="erf"),
], ids=["tied", "untied-nobias-gelu-scanned", "gelu-erf"])
def test_exported_files_compute_tfm_logits(changes):
  cfg = ModelConfig(**{**TINY, **changes})
  rng = np.random.default_rng(0)
  inputs = np.array([[5, 9, 3, 17, 1, 0, 0], [8, 30, 4, 12, 22, 39, 1]], np.int32)
  targets = np.array([[7, 11, 1, 0], [13, 6, 25, 1]], np.int32)
  model = Transformer(cfg)
  # Random values for every parameter (no init compiled: its shapes only), applied in one program.
  shapes = jax.eval_shape(
      lambda: nn.meta.unbox(model.init(jax.random.PRNGKey(0), inputs, targets)["params"]))
  params = jax.tree.map(lambda s: rng.normal(0.0, 0.3, s.shape).astype(np.float32), shapes)
  ours = np.asarray(jax.jit(model.apply)({"params": params}, inputs, targets))

  host = jax.device_get(params)
  if cfg.scan_layers:
    assert "layers" in host["encoder"]  # the export unstacks it
  files = marian.export_files(_Run(cfg), host, b"spm", _pieces(cfg.vocab_size), {"test": True})
  to_marian = np.vectorize(lambda i: marian.marian_id(int(i), cfg.vocab_size))
  start = json.loads(files["config.json"])["decoder_start_token_id"]
  decoder_inputs = np.concatenate([np.full((2, 1), start), to_marian(targets[:, :-1])], axis=1)
  theirs = marian_logits(files, to_marian(inputs), decoder_inputs)
  real = targets != 0
  # Marian's logit j is tfm's logit of id V[j]: pad's column last.
  order = np.array([1 + j if j < cfg.vocab_size - 1 else 0 for j in range(cfg.vocab_size)])
  difference = np.abs(theirs - ours[..., order])[real].max()
  assert difference < 1e-4, difference
  assert np.abs(ours).max() > 1.0  # logits large enough that the check means something
  assert json.loads(files["config.json"])["activation_function"] == (
      "relu" if cfg.ffn == "relu" else {"tanh": "gelu_new", "erf": "gelu"}[cfg.gelu])
  # The tokenizer takes every input the export translates as tfm does (its output, up to the
  # input + eval.max_extra_length 5 after the start token, within the 1024 positions): not only
  # data.max_length's 12, the training rows, past which transformers warned on every input.
  assert json.loads(files["config.json"])["max_position_embeddings"] == 1024
  assert json.loads(files["tokenizer_config.json"])["model_max_length"] == 1024 - 5 - 1


def test_the_files_say_what_marian_reads():
  cfg = ModelConfig(**TINY)
  conf = marian.model_config(cfg, data_max_length=300, max_extra_length=50)
  assert (conf["pad_token_id"], conf["eos_token_id"], conf["decoder_start_token_id"]) == (39, 0, 39)
  assert conf["max_position_embeddings"] == 1024  # model.max_length; 351 positions are needed
  assert marian.model_config(ModelConfig(**TINY, max_length=64), data_max_length=300,
                             max_extra_length=50)["max_position_embeddings"] == 351
  assert marian.longest_input(cfg, 300, 50) == 1024 - 51  # (a table of 1024 rows)
  assert marian.longest_input(ModelConfig(**TINY, max_length=64), 300, 50) == 300
  generation = marian.generation_config(cfg, beam_size=4, length_penalty=0.6, data_max_length=300,
                                        max_extra_length=50)
  assert generation["max_length"] == 351 and generation["bad_words_ids"] == [[39]]
  pieces = _pieces(30)  # a model of 40 rows over 30 pieces: 10 unused rows
  vocab = marian.vocabulary(pieces, 40)
  assert len(vocab) == 40 and sorted(vocab.values()) == list(range(40))
  assert (vocab["</s>"], vocab["<unk>"], vocab["p3"], vocab["<pad>"]) == (0, 1, 2, 39)
  assert vocab[marian.UNUSED.format(35)] == 34
  with pytest.raises(ValueError, match="config key model.vocab_size: expected at least the "
                     "vocabulary's 50 pieces, got 40"):
    marian.vocabulary(_pieces(50), 40)


@pytest.mark.parametrize("key,changes", [
    ("architecture", dict(architecture="decoder_only", num_encoder_layers=0)),
    ("architecture", dict(architecture="encoder_only", num_decoder_layers=0)),
    ("norm", dict(norm="pre")),
    ("positions", dict(positions="learned")),
    ("positions", dict(positions="rope")),
    ("positions", dict(positions="alibi")),
    ("positions", dict(positions="relative")),
    ("positions", dict(positions="none")),
    ("num_kv_heads", dict(num_kv_heads=1)),
    ("d_k", dict(d_k=4, d_v=4)),
    ("d_v", dict(d_v=4)),
    ("ffn", dict(ffn="swiglu")),
    ("ffn", dict(ffn="gated_gelu")),
    ("norm_kind", dict(norm_kind="rms")),
    ("share_embeddings", dict(tie_embeddings=False, share_embeddings=True)),
    ("embedding_norm", dict(embedding_norm=True)),
])
def test_what_marian_cannot_hold_is_refused_by_key(key, changes):
  cfg = ModelConfig(**{**TINY, **changes})
  found = refusals.refusals(cfg)
  assert len(found) == 1 and found[0].startswith(f"config key model.{key}: expected "), found
  with pytest.raises(ValueError, match=f"^config key model.{key}: "):
    refusals.check(cfg)


def test_a_language_model_is_refused_for_what_it_is():
  """An lm run (decoder-only) or an mlm run (encoder-only) is refused as a MarianMTModel naming its
  task and the half of a translation model it lacks (the command exports it to a language-model
  class instead: tests/export/test_lm_exports.py)."""
  lm = refusals.refusals(ModelConfig(**{**TINY, "architecture": "decoder_only",
                                        "num_encoder_layers": 0}))
  mlm = refusals.refusals(ModelConfig(**{**TINY, "architecture": "encoder_only",
                                         "num_decoder_layers": 0}))
  assert "decoder-only language model (task lm) has no encoder" in lm[0]
  assert "encoder-only masked language model (task mlm) has no decoder" in mlm[0]
  for found in (lm, mlm):
    assert "once tfm has" not in found[0] and "GPT-2" not in found[0]
  assert "decoder-only" not in mlm[0]


def test_what_marian_holds_is_not_refused():
  for changes in ({}, dict(tie_embeddings=False), dict(use_bias=False), dict(ffn="gelu"),
                  dict(num_kv_heads=2), dict(dtype="bfloat16", scan_layers=True, remat="full"),
                  dict(num_heads=4, d_k=4, d_v=4), dict(num_decoder_layers=3, d_ff=7)):
    assert refusals.refusals(ModelConfig(**{**TINY, **changes})) == [], changes


def test_a_refused_workdir_writes_nothing(tmp_path, capsys):
  from tfm import cli  # pylint: disable=import-outside-toplevel
  from tfm.train import checkpoint  # pylint: disable=import-outside-toplevel
  config = load_config("configs/quickstart.py", ["model.norm=pre"])
  workdir, out = tmp_path / "run", tmp_path / "export"
  workdir.mkdir()
  checkpoint.write_config(workdir, config.to_dict())
  assert cli.main(["tfm", "export", f"--workdir={workdir}", f"--out={out}"]) == 1
  error = capsys.readouterr().err.strip().splitlines()
  assert error == ["tfm export: error: config key model.norm: expected 'post' (MarianMTModel's "
                   "layers are LayerNorm(x + Sublayer(x))) to export to MarianMTModel, got 'pre'"]
  assert not out.exists() and sorted(os.listdir(tmp_path)) == ["run"]
  out.mkdir()
  (out / "x").write_text("")
  assert cli.main(["tfm", "export", f"--workdir={workdir}", f"--out={out}"]) == 2
  assert "expected a new or empty directory" in capsys.readouterr().err
  assert cli.main(["tfm", "export", f"--workdir={workdir}", f"--out={tmp_path / 'new'}",
                   "--ct2_quantization=int8"]) == 2
  assert "--ct2_quantization applies with --ct2" in capsys.readouterr().err
  for ct2 in (tmp_path / "new", tmp_path / "new" / "ct2", tmp_path):
    assert cli.main(["tfm", "export", f"--workdir={workdir}", f"--out={tmp_path / 'new'}",
                     f"--ct2={ct2}"]) == 2
    assert "expected a directory apart from --out" in capsys.readouterr().err, ct2
  assert cli.main(["tfm", "export", f"--workdir={workdir}", f"--out={tmp_path / 'new'}",
                   "--ct2=gs://bucket/ct2"]) == 2
  assert "--ct2 gs://bucket/ct2: expected a local directory" in capsys.readouterr().err
  assert sorted(os.listdir(tmp_path)) == ["export", "run"]


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
  from tfm.commands import export  # pylint: disable=import-outside-toplevel
  files = {"a.json": b"{}", "b.bin": b"x" * 10}
  export.write_directory(tmp_path / "whole", files)
  assert sorted(os.listdir(tmp_path / "whole")) == ["a.json", "b.bin"]
  umask = os.umask(0o022)
  os.umask(umask)
  assert os.stat(tmp_path / "whole").st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700

  class Broken(dict):
    def items(self):
      yield "a.json", b"{}"
      raise OSError("disk full")

  with pytest.raises(OSError, match="disk full"):
    export.write_directory(tmp_path / "broken", Broken())
  assert sorted(os.listdir(tmp_path)) == ["whole"]


def test_a_failed_conversion_leaves_neither_directory(tmp_path, monkeypatch):
  """--ct2's conversion runs before either directory is placed: its failure leaves no --out that
  a rerun would refuse as existing."""
  from tfm.commands import export  # pylint: disable=import-outside-toplevel
  from tfm.export import ct2  # pylint: disable=import-outside-toplevel
  files = {"config.json": b"{}", "model.safetensors": b"x" * 10}

  def failing(export_dir, output_dir, quantization=None):
    assert sorted(os.listdir(export_dir)) == sorted(files)  # the whole export, not yet placed
    os.makedirs(output_dir)
    (open(os.path.join(output_dir, "model.bin"), "wb")).close()  # half written
    raise RuntimeError("converter failed")

  monkeypatch.setattr(ct2, "convert", failing)
  with pytest.raises(RuntimeError, match="converter failed"):
    export.write_directory(tmp_path / "hf", files, str(tmp_path / "ct2"))
  assert os.listdir(tmp_path) == []

  def converting(export_dir, output_dir, quantization=None):
    os.makedirs(output_dir)
    with open(os.path.join(output_dir, "model.bin"), "wb") as f:
      f.write(quantization.encode())

  monkeypatch.setattr(ct2, "convert", converting)
  export.write_directory(tmp_path / "hf", files, str(tmp_path / "sub" / "ct2"), "int8")
  assert sorted(os.listdir(tmp_path)) == ["hf", "sub"] and os.listdir(tmp_path / "sub") == ["ct2"]
  assert (tmp_path / "sub" / "ct2" / "model.bin").read_bytes() == b"int8"
  assert sorted(os.listdir(tmp_path / "hf")) == sorted(files)


def test_a_killed_exports_scratch_is_removed_by_the_next(tmp_path):
  """A SIGKILLed export leaves its scratch directory beside --out; the next export on the host
  removes those whose process is gone, and keeps a running one's."""
  import socket  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  from tfm.commands import export  # pylint: disable=import-outside-toplevel
  gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  stem = f".hf.tfm-export.{socket.gethostname()}."
  dead, live = tmp_path / f"{stem}{gone}.abc", tmp_path / f"{stem}{os.getppid()}.def"
  for scratch in (dead, live):
    scratch.mkdir()
    (scratch / "model.safetensors").write_bytes(b"half")
  export.write_directory(tmp_path / "hf", {"a.json": b"{}"})
  assert sorted(os.listdir(tmp_path)) == sorted([live.name, "hf"])


def test_table3_rows_export_but_b_and_e():
  from configs import table3  # pylint: disable=import-outside-toplevel
  rows = list(table3.ROWS)
  refused = {row for row in rows
             if refusals.refusals(load_config(f"configs/table3.py:{row}").model)}
  assert refused == {"B1", "B2", "E"}
