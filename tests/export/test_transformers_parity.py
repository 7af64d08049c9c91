"""`tfm export` end to end with the real libraries: a tiny model trained on the fake corpus, exported,
loaded by transformers' MarianMTModel and MarianTokenizer (offline), and converted by CTranslate2.

Needs the export-check extra (torch, transformers, ctranslate2): skipped where it is missing, a
failure under CI (TFM_CI=1, where .ci/run installs it). Long tier: it imports torch and starts the
converter's process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.integration.conftest import _experiment, corpus, run_train  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def exported(corpus, tmp_path_factory):  # noqa: F811  pylint: disable=redefined-outer-name
  from tfm import cli  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp("export")
  config = _experiment(corpus)("train.steps=30", "train.checkpoint_every=30",
                               "train.average_checkpoints=1", "train.learning_rate=2.0")
  run_train(config, root / "run")
  assert cli.main(["tfm", "export", f"--workdir={root / 'run'}", f"--out={root / 'hf'}"]) == 0
  return root / "run", root / "hf"


def _dev(workdir):
  from tfm.data import pipeline  # pylint: disable=import-outside-toplevel
  from tfm.eval.restore import load_trained  # pylint: disable=import-outside-toplevel
  t = load_trained(str(workdir))
  pairs = pipeline.eval_text_pairs(t.config.data, t.experiment.data_source, "dev")
  return t, pairs, t.tokenizer.encode  # whole texts, as tfm translates them


def _tfm_greedy(t, pairs) -> list:
  """tfm's greedy translations of the pairs' sources at the run's eval settings (as tfm eval)."""
  from tfm.decode.text import translate_texts  # pylint: disable=import-outside-toplevel
  e = t.config.eval
  translate = t.experiment.translate_fn(beam_size=1, length_penalty=e.length_penalty,
                                        max_extra_length=e.max_extra_length, eos_id=1)
  ours, _ = translate_texts(translate, t.params, t.tokenizer, [s for s, _ in pairs],
                            batch_size=t.experiment.decode_rows(e.batch_size))
  return ours


def test_transformers_computes_tfm_logits_and_greedy_outputs(libraries, exported, monkeypatch):
  torch, transformers, _ = libraries
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  from tfm.export import marian  # pylint: disable=import-outside-toplevel
  workdir, directory = exported
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # loads from the directory alone
  model = transformers.MarianMTModel.from_pretrained(directory).eval()
  tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
  t, pairs, encode = _dev(workdir)
  V, cfg = t.config.model.vocab_size, t.config.model
  to_marian = np.vectorize(lambda i: marian.marian_id(int(i), V), otypes=[np.int64])
  sources = [encode(s) for s, _ in pairs]
  targets = [encode(r) for _, r in pairs]
  assert max(map(len, sources)) > t.config.data.max_length  # sources past the training rows
  assert [tokenizer(s)["input_ids"] for s, _ in pairs] == [list(to_marian(ids)) for ids in sources]

  def padded(rows):
    a = np.zeros((len(rows), max(map(len, rows))), np.int32)
    for r, ids in enumerate(rows):
      a[r, :len(ids)] = ids
    return a

  inputs, tgt = padded(sources), padded(targets)
  params = jax.device_get(nn.meta.unbox(t.params))
  ours = np.asarray(t.model.apply({"params": params}, inputs, tgt))[..., marian.id_order(V)]
  for module in model.modules():  # epsilon made tfm's (Marian's is fixed at 1e-5)
    if isinstance(module, torch.nn.LayerNorm):
      module.eps = cfg.norm_epsilon
  with torch.no_grad():
    theirs = model(input_ids=torch.tensor(to_marian(inputs)), attention_mask=torch.tensor(inputs != 0),
                   decoder_input_ids=torch.tensor(to_marian(np.pad(tgt, ((0, 0), (1, 0)))[:, :-1])),
                   ).logits.numpy()
  difference = np.abs(theirs - ours)[tgt != 0].max()
  assert difference < 1e-4, difference

  ours = _tfm_greedy(t, pairs)
  theirs, texts = [], []
  order = marian.id_order(V)
  for ids in sources:
    with torch.no_grad():
      out = model.generate(torch.tensor([list(to_marian(ids))]), num_beams=1,
                           max_new_tokens=len(ids) + t.config.eval.max_extra_length,
                           max_length=None)
    theirs.append(t.tokenizer.decode([int(order[j]) for j in out[0].tolist()[1:]]))
    texts.append(tokenizer.decode(out[0], skip_special_tokens=True))
  assert theirs == ours  # the same tokens
  # MarianTokenizer's texts: tfm's, but for <unk>, which it drops where tfm writes ' ⁇ '.
  assert [a for a, b in zip(texts, ours) if "⁇" not in b] == [b for b in ours if "⁇" not in b]


def test_marian_tokenizer_encodes_as_tfm_texts_quoting_special_pieces(libraries, exported,
                                                                     monkeypatch):
  """Texts holding "</s>", "<unk>" or "<pad>" as characters, unknown characters and odd spacing:
  MarianTokenizer gives tfm's ids (transformers' default cut the pieces out as special ids)."""
  _, transformers, _ = libraries
  from tfm.data.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
  from tfm.export import marian  # pylint: disable=import-outside-toplevel
  _, directory = exported
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  ours = Tokenizer.load(directory / "source.spm")
  theirs = transformers.MarianTokenizer.from_pretrained(directory)
  vocab_size = len(json.loads((directory / "vocab.json").read_text()))
  texts = ["In the beginning </s> God", "a <unk> b <pad> c", "</s>", "Zürich — «» ☃ 😀 日本語",
           "  two  spaces\tand a tab ", ""]
  for text in texts:
    assert theirs(text)["input_ids"] == [marian.marian_id(i, vocab_size)
                                         for i in ours.encode(text)], text


def test_ctranslate2_converts_the_export(libraries, exported):
  _, _, ctranslate2 = libraries
  workdir, directory = exported
  converter = Path(sys.executable).parent / "ct2-transformers-converter"
  subprocess.run([str(converter), "--model", str(directory), "--output_dir",
                  str(directory.parent / "ct2")], check=True, capture_output=True)
  vocabulary = json.loads((directory.parent / "ct2" / "shared_vocabulary.json").read_text())
  marian_vocab = json.loads((directory / "vocab.json").read_text())
  # CTranslate2's Marian loader drops the last id, pad (decoding starts from a zero embedding).
  assert vocabulary == sorted(marian_vocab, key=marian_vocab.get)[:-1]
  t, pairs, encode = _dev(workdir)
  translator = ctranslate2.Translator(str(directory.parent / "ct2"), device="cpu")
  results = translator.translate_batch([t.tokenizer.pieces(encode(s)) for s, _ in pairs[:4]],
                                       beam_size=2, max_decoding_length=20)
  assert len(results) == 4 and all(r.hypotheses[0] for r in results)


def test_tfm_export_ct2_decodes_as_tfm(libraries, exported):
  """`tfm export --ct2` keeps the start token's embedding: greedy outputs are tfm's."""
  _, _, ctranslate2 = libraries
  from tfm import cli  # pylint: disable=import-outside-toplevel
  workdir, directory = exported
  target = directory.parent / "tfm_ct2"
  assert cli.main(["tfm", "export", f"--workdir={workdir}", f"--out={directory.parent / 'hf2'}",
                   f"--ct2={target}"]) == 0
  vocabulary = json.loads((target / "shared_vocabulary.json").read_text())
  marian_vocab = json.loads((directory / "vocab.json").read_text())
  assert vocabulary == sorted(marian_vocab, key=marian_vocab.get)  # pad kept, last
  t, pairs, encode = _dev(workdir)
  ours = _tfm_greedy(t, pairs)
  translator = ctranslate2.Translator(str(target), device="cpu")
  sources = [encode(s) for s, _ in pairs]
  results = [translator.translate_batch([t.tokenizer.pieces(ids)], beam_size=1,
                                        suppress_sequences=[["<pad>"]],
                                        max_decoding_length=(len(ids)
                                                             + t.config.eval.max_extra_length))[0]
             for ids in sources]
  sp = t.tokenizer.__getstate__()["proto"]
  import sentencepiece  # pylint: disable=import-outside-toplevel
  processor = sentencepiece.SentencePieceProcessor(model_proto=sp)
  assert [processor.decode_pieces(r.hypotheses[0]) for r in results] == ours


def test_tfm_export_killed_while_converting_leaves_nothing_and_reruns(libraries, exported):
  """SIGKILL while --ct2 converts: neither --out nor --ct2 appears (a rerun would have refused an
  existing --out); the rerun succeeds and removes the killed run's scratch directories."""
  import signal  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  workdir, directory = exported
  root = directory.parent / "killed"
  root.mkdir()
  root_of_repo = Path(__file__).resolve().parents[2]
  command = [sys.executable, "-m", "tfm.cli", "export", f"--workdir={workdir}",
             f"--out={root / 'hf'}", f"--ct2={root / 'ct2'}"]
  env = dict(os.environ, PYTHONPATH=str(root_of_repo), JAX_PLATFORMS="cpu")
  process = subprocess.Popen(command, cwd=root_of_repo, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  deadline = time.time() + 120
  while not any(n.startswith(".ct2.") for n in os.listdir(root)):  # converting
    assert process.poll() is None and time.time() < deadline, "the export ended before converting"
    time.sleep(0.01)
  process.send_signal(signal.SIGKILL)
  process.wait()
  assert sorted(n for n in os.listdir(root) if not n.startswith(".")) == []
  rerun = subprocess.run(command, cwd=root_of_repo, env=env, capture_output=True, text=True)
  assert rerun.returncode == 0, rerun.stderr[-2000:]
  assert sorted(os.listdir(root)) == ["ct2", "hf"]
  assert sorted(os.listdir(root / "ct2")) == ["config.json", "model.bin", "shared_vocabulary.json"]


def test_an_unknown_ct2_quantization_is_refused_before_loading(libraries, tmp_path, capsys):
  """Checked against CTranslate2's own list (its import loads torch: long tier)."""
  from tfm import cli  # pylint: disable=import-outside-toplevel
  # No workdir: the flag is refused before the workdir is read, nothing written.
  assert cli.main(["tfm", "export", f"--workdir={tmp_path / 'none'}", f"--out={tmp_path / 'hf'}",
                   f"--ct2={tmp_path / 'ct2'}", "--ct2_quantization=int3"]) == 2
  error = capsys.readouterr().err.strip().splitlines()
  assert error[-1].startswith("tfm export: --ct2_quantization int3: expected one of CTranslate2's "
                              "int8, "), error
  assert os.listdir(tmp_path) == []
