"""Parity of `tfm export` on a trained model: tfm against transformers' MarianMTModel and CTranslate2.

  python experiments/export_parity.py --workdir=workdirs/quickstart \
      --out=experiments/results/export [--parts=parity,ct2,speed] [--scratch=/tmp/tfm_export]

On the run's first --sentences dev pairs (the quickstart's dev BLEU set: its first 200 dev verses):
- parity: `tfm export` (the command, into --scratch) and, with the exported directory loaded by
  MarianMTModel and MarianTokenizer (float32, CPU): the tokenizations compared; the largest absolute
  difference of the teacher-forced logits (every vocabulary entry at every target position),
  with Marian's LayerNorm epsilon as exported (1e-5) and made equal to tfm's; greedy outputs
  (tfm's search against generate(num_beams=1), each sentence limited to its input length +
  eval.max_extra_length as tfm limits it) compared; beam search at the run's beam size and alpha,
  tfm's ((5 + |Y|) / 6)^alpha against generate's |Y|^alpha: BLEU of each, share identical.
- ct2: the export converted to CTranslate2 two ways, float32 and int8: `tfm export --ct2`
  (tfm/export/ct2.py: decoding from the start token's embedding, as tfm) and
  `ct2-transformers-converter` (its Marian loader: from a zero embedding); greedy and beam (the
  run's beam size, its alpha as CTranslate2's |Y|^alpha penalty) BLEU beside tfm's, outputs
  identical to tfm's.
- speed: the dev sentences translated with beam search on this machine's cores: tfm's search
  (compiled before timing, eval.batch_size rows a batch) and CTranslate2 float32 and int8 (of
  `tfm export --ct2`)
  (intra_threads = the cores, the same batch size), decoding time only; and the whole
  `tfm translate --input` command's wall time beside a CTranslate2 script's (load + translate).
Writes parity.json, ct2.json, speed.json and table.md (from whichever parts exist) under --out,
and logs each command it runs there (commands.log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tfm of this checkout, installed or not

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "a trained workdir (only read)", required=True)
flags.DEFINE_string("out", "experiments/results/export", "where the results go")
flags.DEFINE_string("scratch", "/tmp/tfm_export_parity", "where the export and CT2 models go")
flags.DEFINE_list("parts", ["parity", "ct2", "speed"], "parity, ct2, speed")
flags.DEFINE_integer("sentences", 200, "the first N dev pairs")
flags.DEFINE_integer("batch_rows", 20, "rows per teacher-forced batch")


def _log(out: Path, line: str) -> None:
  print(line, flush=True)
  with open(out / "commands.log", "a", encoding="utf-8") as f:
    f.write(line + "\n")


def _run(out: Path, argv: list[str], **kwargs) -> float:
  """Runs a command (logged), returns its wall time; raises if it fails."""
  _log(out, "$ " + " ".join(argv))
  start = time.perf_counter()
  kwargs.setdefault("stdout", subprocess.PIPE)
  done = subprocess.run(argv, stderr=subprocess.PIPE, text=True, cwd=ROOT, **kwargs)
  seconds = time.perf_counter() - start
  with open(out / "commands.log", "a", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in done.stderr.splitlines()
                    if "TPU" not in line and "libtpu" not in line and line.strip())[-4000:])
  if done.returncode:
    raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
  return seconds


class Setup:
  """The trained model, its dev pairs and the exported directory."""

  def __init__(self, workdir: str, scratch: Path, out: Path, sentences: int):
    import flax.linen as nn  # pylint: disable=import-outside-toplevel
    import jax  # pylint: disable=import-outside-toplevel
    from tfm.data import pipeline  # pylint: disable=import-outside-toplevel
    from tfm.eval.restore import load_trained  # pylint: disable=import-outside-toplevel
    self.trained = t = load_trained(workdir)
    self.config, self.tokenizer = t.config, t.tokenizer
    self.params = jax.device_get(nn.meta.unbox(t.params))
    self.pairs = pipeline.eval_text_pairs(t.config.data, t.experiment.data_source, "dev")[:sentences]
    self.export = scratch / "export"
    self.ct2_vocab: list[str] = []
    if not (self.export / "model.safetensors").exists():
      _run(out, [sys.executable, "-m", "tfm.cli", "export", f"--workdir={workdir}",
                 f"--out={self.export}"])

  def encode(self, text: str) -> list[int]:
    """The whole text's ids, EOS included: tfm translates every source whole (sinusoids)."""
    return self.tokenizer.encode(text)

  def tfm_texts(self, beam_size: int) -> tuple[list[str], dict]:
    from tfm.decode.text import translate_texts  # pylint: disable=import-outside-toplevel
    exp, e = self.trained.experiment, self.config.eval
    translate = exp.translate_fn(beam_size=beam_size, length_penalty=e.length_penalty,
                                 max_extra_length=e.max_extra_length, eos_id=self.tokenizer.eos_id)
    return translate_texts(translate, self.trained.params, self.tokenizer,
                           [s for s, _ in self.pairs], batch_size=exp.decode_rows(e.batch_size))

  def bleu(self, hypotheses: list[str]) -> float:
    from tfm.eval.bleu import score  # pylint: disable=import-outside-toplevel
    return round(score(hypotheses, [t for _, t in self.pairs],
                       self.config.data.target_lang)["sacrebleu"], 2)


def _same(a: list[str], b: list[str]) -> int:
  return sum(x == y for x, y in zip(a, b))


def parity(s: Setup, out: Path) -> dict:
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from tfm.export import marian  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(os.cpu_count() or 1)
  model = transformers.MarianMTModel.from_pretrained(s.export).eval()
  hf_tok = transformers.MarianTokenizer.from_pretrained(s.export)
  cfg, e = s.config.model, s.config.eval
  V, order = cfg.vocab_size, marian.id_order(cfg.vocab_size)
  to_marian = np.vectorize(lambda i: marian.marian_id(int(i), V), otypes=[np.int64])
  sources = [s.encode(x) for x, _ in s.pairs]
  targets = [s.encode(y) for _, y in s.pairs]
  hf_ids = [hf_tok(x)["input_ids"] for x, _ in s.pairs]  # whole, as tfm reads them
  same_ids = sum(list(to_marian(a)) == b for a, b in zip(sources, hf_ids))

  def pad(rows):
    a = np.zeros((len(rows), max(map(len, rows))), np.int32)
    for r, ids in enumerate(rows):
      a[r, :len(ids)] = ids
    return a

  def largest_difference() -> tuple[float, float]:
    worst, scale = 0.0, 0.0
    for first in range(0, len(sources), FLAGS.batch_rows):
      inputs, tgt = pad(sources[first:first + FLAGS.batch_rows]), pad(targets[first:first + FLAGS.batch_rows])
      ours = np.asarray(s.trained.model.apply({"params": s.params}, inputs, tgt))[..., order]
      decoder_inputs = np.zeros_like(tgt)
      decoder_inputs[:, 1:] = tgt[:, :-1]
      with torch.no_grad():
        theirs = model(input_ids=torch.tensor(to_marian(inputs)),
                       attention_mask=torch.tensor(inputs != 0),
                       decoder_input_ids=torch.tensor(to_marian(decoder_inputs))).logits.numpy()
      real = tgt != 0
      worst = max(worst, float(np.abs(theirs - ours)[real].max()))
      scale = max(scale, float(np.abs(ours)[real].max()))
    return worst, scale

  exported_eps, scale = largest_difference()
  for module in model.modules():
    if isinstance(module, torch.nn.LayerNorm):
      module.eps = cfg.norm_epsilon
  equal_eps, _ = largest_difference()
  for module in model.modules():
    if isinstance(module, torch.nn.LayerNorm):
      module.eps = marian.EPSILON  # generation below runs the export as a user loads it

  def generate(beam_size: int) -> tuple[list[str], list[str]]:
    """MarianTokenizer's texts of generate's outputs, and tfm's texts of the same token ids
    (mapped back to tfm's ids): the second compares the searches' tokens, the first is what a
    transformers user reads (MarianTokenizer drops <unk>, which tfm's decoding writes as ' ⁇ ')."""
    texts, ids_as_tfm = [], []
    for ids in hf_ids:
      with torch.no_grad():
        result = model.generate(torch.tensor([ids]), num_beams=beam_size,
                                max_new_tokens=len(ids) + e.max_extra_length,
                                max_length=None, early_stopping="never" if beam_size > 1 else False)
      texts.append(hf_tok.decode(result[0], skip_special_tokens=True))
      ids_as_tfm.append(s.tokenizer.decode([int(order[j]) for j in result[0].tolist()[1:]]))
    return texts, ids_as_tfm

  results = {"transformers": transformers.__version__, "torch": torch.__version__,
             "sentences": len(s.pairs), "same_source_ids": same_ids,
             "tfm_norm_epsilon": cfg.norm_epsilon, "marian_norm_epsilon": marian.EPSILON,
             "largest_logit_difference_exported": exported_eps,
             "largest_logit_difference_equal_epsilon": equal_eps, "largest_logit": scale}
  _log(out, f"logits: {results}")
  tfm_greedy, _ = s.tfm_texts(1)
  hf_greedy, hf_greedy_ids = generate(1)
  tfm_beam, _ = s.tfm_texts(e.beam_size)
  hf_beam, hf_beam_ids = generate(e.beam_size)
  results.update(
      greedy_identical=_same(tfm_greedy, hf_greedy_ids),
      greedy_identical_texts=_same(tfm_greedy, hf_greedy), greedy_bleu_tfm=s.bleu(tfm_greedy),
      greedy_bleu_transformers=s.bleu(hf_greedy), beam_size=e.beam_size, alpha=e.length_penalty,
      beam_identical=_same(tfm_beam, hf_beam_ids), beam_identical_texts=_same(tfm_beam, hf_beam),
      beam_bleu_tfm=s.bleu(tfm_beam), beam_bleu_transformers=s.bleu(hf_beam),
      greedy_differences=[dict(source=s.pairs[i][0], tfm=a, transformers=b)
                          for i, (a, b) in enumerate(zip(tfm_greedy, hf_greedy_ids)) if a != b][:5],
      greedy_text_differences=[dict(source=s.pairs[i][0], tfm=a, transformers=b)
                               for i, (a, b) in enumerate(zip(tfm_greedy, hf_greedy)) if a != b][:5])
  return results


def _ct2_model(s: Setup, out: Path, quantization: str, converter: str = "tfm") -> Path:
  """A CTranslate2 model of the export: converter 'tfm' (`tfm export --ct2`, the start token's
  embedding kept) or 'ct2' (`ct2-transformers-converter`, Marian-NMT's zero start embedding)."""
  target = s.export.parent / f"ct2_{converter}_{quantization}"
  if not (target / "model.bin").exists():
    if converter == "ct2":
      _run(out, [str(Path(sys.executable).parent / "ct2-transformers-converter"), "--model",
                 str(s.export), "--output_dir", str(target), "--quantization", quantization])
    else:
      _run(out, [sys.executable, "-m", "tfm.cli", "export", f"--workdir={FLAGS.workdir}",
                 f"--out={s.export.parent / f'export_for_{quantization}'}", f"--ct2={target}",
                 f"--ct2_quantization={quantization}"])
  return target


def _ct2_translate(translator, s: Setup, beam_size: int, batch: int) -> list[str]:
  tokens = [s.tokenizer.pieces(s.encode(x)) for x, _ in s.pairs]  # ends in </s>, as tfm's inputs
  results = translator.translate_batch(tokens, beam_size=beam_size, max_batch_size=batch,
                                       suppress_sequences=[["<pad>"]] if "<pad>" in s.ct2_vocab
                                       else None,
                                       length_penalty=s.config.eval.length_penalty,
                                       max_decoding_length=max(map(len, tokens))
                                       + s.config.eval.max_extra_length)
  sp = s.tokenizer._sp  # pylint: disable=protected-access
  return [sp.decode_pieces(r.hypotheses[0]) for r in results]


def ct2(s: Setup, out: Path) -> dict:
  import ctranslate2  # pylint: disable=import-outside-toplevel
  e = s.config.eval
  tfm_greedy, _ = s.tfm_texts(1)
  tfm_beam, _ = s.tfm_texts(e.beam_size)
  results = {"ctranslate2": ctranslate2.__version__, "sentences": len(s.pairs),
             "beam_size": e.beam_size, "alpha": e.length_penalty,
             "tfm": {"greedy_bleu": s.bleu(tfm_greedy), "beam_bleu": s.bleu(tfm_beam)}}
  for converter in ("tfm", "ct2"):
    for quantization in ("float32", "int8"):
      model = _ct2_model(s, out, quantization, converter)
      s.ct2_vocab = json.loads((model / "shared_vocabulary.json").read_text())
      translator = ctranslate2.Translator(str(model), device="cpu",
                                          intra_threads=os.cpu_count() or 1)
      greedy = _ct2_translate(translator, s, 1, e.batch_size)
      beam = _ct2_translate(translator, s, e.beam_size, e.batch_size)
      name = f"{converter}_{quantization}"
      results[name] = dict(greedy_bleu=s.bleu(greedy), beam_bleu=s.bleu(beam),
                           greedy_identical_to_tfm=_same(greedy, tfm_greedy),
                           beam_identical_to_tfm=_same(beam, tfm_beam))
      _log(out, f"ct2 {name}: {results[name]}")
  return results


def speed(s: Setup, out: Path) -> dict:
  import ctranslate2  # pylint: disable=import-outside-toplevel
  e = s.config.eval
  results = {"cores": os.cpu_count(), "sentences": len(s.pairs), "beam_size": e.beam_size,
             "batch_size": e.batch_size}
  s.tfm_texts(e.beam_size)  # compiles every padded length
  _, stats = s.tfm_texts(e.beam_size)
  results["tfm_decode_s"] = round(stats["seconds"], 2)
  for quantization in ("float32", "int8"):
    model = _ct2_model(s, out, quantization)
    s.ct2_vocab = json.loads((model / "shared_vocabulary.json").read_text())
    translator = ctranslate2.Translator(str(model), device="cpu", intra_threads=os.cpu_count() or 1)
    _ct2_translate(translator, s, e.beam_size, e.batch_size)  # warm
    start = time.perf_counter()
    _ct2_translate(translator, s, e.beam_size, e.batch_size)
    results[f"ct2_{quantization}_decode_s"] = round(time.perf_counter() - start, 2)
  sources = s.export.parent / "dev_sources.txt"
  sources.write_text("".join(x + "\n" for x, _ in s.pairs), encoding="utf-8")
  results["tfm_translate_command_s"] = round(_run(
      out, [sys.executable, "-m", "tfm.cli", "translate", f"--workdir={FLAGS.workdir}",
            f"--input={sources}"], stdout=subprocess.DEVNULL), 2)
  script = ("import ctranslate2, sentencepiece as spm, sys\n"
            "d, src, beam, batch, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])\n"
            "sp = spm.SentencePieceProcessor(model_file=sys.argv[6])\n"
            "t = ctranslate2.Translator(d, device='cpu', intra_threads=%d)\n"
            "lines = open(src, encoding='utf-8').read().splitlines()\n"
            "r = t.translate_batch([sp.encode(l, out_type=str)[:limit - 1] + ['</s>'] for l in lines],"
            " beam_size=beam, max_batch_size=batch, suppress_sequences=[['<pad>']])\n"
            "print('\\n'.join(sp.decode_pieces(x.hypotheses[0]) for x in r))\n") % (os.cpu_count() or 1)
  for quantization in ("float32", "int8"):
    results[f"ct2_{quantization}_script_s"] = round(_run(
        out, [sys.executable, "-c", script, str(_ct2_model(s, out, quantization)), str(sources),
              str(e.beam_size), str(e.batch_size), str(s.config.data.max_length),
              str(s.export / "source.spm")], stdout=subprocess.DEVNULL), 2)
  _log(out, f"speed: {results}")
  return results


def table(out: Path) -> str:
  """table.md from the parts' JSON files."""
  read = lambda name: json.loads((out / name).read_text()) if (out / name).exists() else None
  p, c, sp = read("parity.json"), read("ct2.json"), read("speed.json")
  lines = []
  if p:
    n = p["sentences"]
    lines += ["| transformers (MarianMTModel, float32) vs tfm | |", "|---|---|",
              f"| same source token ids | {p['same_source_ids']}/{n} |",
              f"| largest teacher-forced logit difference, epsilon made equal "
              f"({p['tfm_norm_epsilon']:g}) | {p['largest_logit_difference_equal_epsilon']:.2e} |",
              f"| the same, Marian's epsilon as exported ({p['marian_norm_epsilon']:g}) | "
              f"{p['largest_logit_difference_exported']:.2e} |",
              f"| largest logit (scale) | {p['largest_logit']:.1f} |",
              f"| greedy outputs identical (tokens) | {p['greedy_identical']}/{n} |",
              f"| the same, MarianTokenizer's texts (it drops `<unk>`) | {p['greedy_identical_texts']}/{n} |",
              f"| greedy BLEU: tfm / transformers | {p['greedy_bleu_tfm']} / "
              f"{p['greedy_bleu_transformers']} |",
              f"| beam {p['beam_size']}, alpha {p['alpha']:g}: BLEU tfm ((5+\\|Y\\|)/6)^a / "
              f"transformers \\|Y\\|^a | {p['beam_bleu_tfm']} / {p['beam_bleu_transformers']} |",
              f"| beam outputs identical (tokens) | {p['beam_identical']}/{n} "
              f"({100 * p['beam_identical'] / n:.0f}%) |", ""]
  if c:
    n = c["sentences"]
    lines += [f"| CTranslate2 {c['ctranslate2']} | greedy BLEU | greedy identical to tfm | "
              f"beam {c['beam_size']} BLEU | beam identical to tfm |", "|---|---|---|---|---|",
              f"| tfm | {c['tfm']['greedy_bleu']} | - | {c['tfm']['beam_bleu']} | - |"]
    names = {"tfm": "`tfm export --ct2`", "ct2": "`ct2-transformers-converter` (zero start)"}
    for converter in ("tfm", "ct2"):
      for q in ("float32", "int8"):
        r = c[f"{converter}_{q}"]
        lines.append(f"| {names[converter]} {q} | {r['greedy_bleu']} | "
                     f"{r['greedy_identical_to_tfm']}/{n} | {r['beam_bleu']} | "
                     f"{r['beam_identical_to_tfm']}/{n} |")
    lines.append("")
  if sp:
    lines += [f"| {sp['sentences']} sentences, beam {sp['beam_size']}, {sp['cores']} cores | "
              "decoding (s) | whole command (s) |", "|---|---|---|",
              f"| tfm | {sp['tfm_decode_s']} | {sp['tfm_translate_command_s']} |",
              f"| CTranslate2 float32 | {sp['ct2_float32_decode_s']} | {sp['ct2_float32_script_s']} |",
              f"| CTranslate2 int8 | {sp['ct2_int8_decode_s']} | {sp['ct2_int8_script_s']} |", ""]
  return "\n".join(lines)


def main(argv):
  del argv
  out = Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  scratch = Path(FLAGS.scratch)
  scratch.mkdir(parents=True, exist_ok=True)
  _log(out, f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: export_parity.py "
       f"--workdir={FLAGS.workdir} --parts={','.join(FLAGS.parts)}; nproc={os.cpu_count()}; "
       f"load average {os.getloadavg()}")
  s = Setup(FLAGS.workdir, scratch, out, FLAGS.sentences)
  for part, fn in (("parity", parity), ("ct2", ct2), ("speed", speed)):
    if part in FLAGS.parts:
      result = fn(s, out)
      result["load_average_after"] = os.getloadavg()
      (out / f"{part}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
  text = table(out)
  (out / "table.md").write_text(text)
  print(text)


if __name__ == "__main__":
  app.run(main)
