"""Parity of `tfm export` on trained language models: tfm against GPT2LMHeadModel / LlamaForCausalLM
(transformers) and CTranslate2's Generator, and masked ones against BertForMaskedLM /
RobertaPreLayerNormForMaskedLM.

  python experiments/export_lm_parity.py --workdir=NAME=DIR [--workdir=NAME=DIR ...] \
      --out=experiments/results/export [--scratch=/tmp/tfm_export_lm] [--prompts=100]

For each task lm workdir (float32, CPU, this machine's cores):
- `tfm export --ct2` (the command, into --scratch), then with the directory loaded by the class:
  the largest absolute difference of the logits on the run's dev rows (every vocabulary entry at
  every position of the rows `tfm eval` scores), and the largest logit for scale;
- greedy continuations of --new_tokens tokens of the first --prompts dev verses' first
  --prompt_pieces pieces: tfm's batched generator (`tfm generate --greedy --nostream`'s), the
  class's generate() and CTranslate2's Generator (float32), token for token;
- speed: new tokens a second of tfm's generator (compiled first, one batch of all prompts) and of
  CTranslate2's (intra_threads = the cores, one batch), the second of two runs each, counting
  every row's --new_tokens (EOS and what follows included in both).
For each task mlm workdir: `tfm export` (no --ct2: a masked LM has no CTranslate2 counterpart),
the largest logit difference on the dev rows `tfm eval` scores (masked with the fixed evaluation
seed) and the largest logit, how many of the scored pieces have the same argmax in both, and
tfm's dev perplexity over them (lm_parity.logits); no greedy or speed figures.
tfm/export/lm_parity.py computes each figure. The runs measured merge into --out's lm_parity.json
(a name measured again replaces its entry, the others stay), lm_table.md is rebuilt from the
merged file, and the commands run are logged (commands.log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tfm of this checkout, installed or not

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("workdir", [], "NAME=DIR: a trained task lm or mlm workdir (only read)")
flags.DEFINE_string("out", "experiments/results/export", "where the results go")
flags.DEFINE_string("scratch", "/tmp/tfm_export_lm", "where the exports and CT2 models go")
flags.DEFINE_integer("rows", 64, "dev rows for the logits")
flags.DEFINE_integer("prompts", 100, "greedy prompts: the first N dev verses")
flags.DEFINE_integer("prompt_pieces", 8, "pieces a prompt (the verse's first)")
flags.DEFINE_integer("new_tokens", 32, "new tokens a continuation")


def _log(out: Path, line: str) -> None:
  print(line, flush=True)
  with open(out / "commands.log", "a", encoding="utf-8") as f:
    f.write(line + "\n")


def _export(out: Path, workdir: str, target: Path, ct2: bool) -> None:
  argv = [sys.executable, "-m", "tfm.cli", "export", f"--workdir={workdir}",
          f"--out={target / 'hf'}"] + ([f"--ct2={target / 'ct2'}"] if ct2 else [])
  _log(out, "$ " + " ".join(argv))
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
  with open(out / "commands.log", "a", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in (done.stdout + done.stderr).splitlines()
                    if line.startswith("tfm")))
  if done.returncode:
    raise RuntimeError(f"tfm export failed ({done.returncode}): {done.stderr[-2000:]}")


def measure(name: str, workdir: str, out: Path) -> dict:
  # pylint: disable=import-outside-toplevel
  import ctranslate2
  import jax
  import torch
  import transformers
  from tfm.eval.restore import load_trained
  from tfm.export import lm_parity
  target = Path(FLAGS.scratch) / name
  if target.exists():
    subprocess.run(["rm", "-rf", str(target)], check=True)
  t = load_trained(workdir)
  masked = t.config.task == "mlm"
  _export(out, workdir, target, ct2=not masked)
  config = json.loads((target / "hf" / "config.json").read_text())
  model = getattr(transformers, config["architectures"][0]).from_pretrained(target / "hf").eval()
  rows = lm_parity.dev_rows(t, most=FLAGS.rows)
  result = {"class": config["architectures"][0], "task": t.config.task, "steps": t.steps,
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "tfm_parameters": int(sum(x.size for x in jax.tree_util.tree_leaves(t.params)))}
  result.update(lm_parity.logits(t, model, torch, rows))
  if masked:
    _log(out, f"{name}: {result}")
    return result
  prompts = lm_parity.prompts(t, FLAGS.prompts, FLAGS.prompt_pieces)
  new = FLAGS.new_tokens
  ours, tfm_s = lm_parity.tfm_greedy(t, prompts, new)
  theirs = lm_parity.transformers_greedy(model, torch, prompts, new)
  ct2, ct2_s = lm_parity.ct2_greedy(ctranslate2, str(target / "ct2"), t, prompts, new,
                                    threads=os.cpu_count())
  tokens = len(prompts) * new
  result.update(
      prompts=len(prompts), prompt_pieces=FLAGS.prompt_pieces, new_tokens=new,
      greedy_identical_transformers=sum(a == b for a, b in zip(ours, theirs)),
      greedy_identical_ct2=sum(a == b for a, b in zip(ours, ct2)),
      tfm_tokens_per_s=round(tokens / tfm_s, 1), ct2_tokens_per_s=round(tokens / ct2_s, 1),
      tfm_s=round(tfm_s, 3), ct2_s=round(ct2_s, 3))
  _log(out, f"{name}: {result}")
  return result


def _parameters(r: dict) -> str:
  """The class's parameters, and tfm's where recorded: '= tfm's' or tfm's own count."""
  ours = r.get("tfm_parameters")
  if ours is None:
    return f"{r['parameters']:,}"
  return f"{r['parameters']:,} ({'= tfm' if ours == r['parameters'] else f'tfm {ours:,}'})"


def table(results: dict, versions: dict) -> str:
  """The markdown table of `results` (lm_parity.json's runs), a column a run; '–' where a figure
  does not apply (greedy and speed for a masked LM, masked pieces for a causal one)."""
  rows = [f"| language models, float32 on {os.cpu_count()} CPU cores | "
          + " | ".join(f"{n} ({r['class']})" for n, r in results.items()) + " |",
          "|---|" + "---|" * len(results)]

  def line(label, keys, f):
    rows.append(f"| {label} | " + " | ".join(f(r) if all(k in r for k in keys) else "–"
                                              for r in results.values()) + " |")

  line("parameters (tfm's), training steps", ["parameters"],
       lambda r: f"{_parameters(r)}, {r['steps'][-1]}")
  line("dev rows, positions", ["rows"], lambda r: f"{r['rows']}, {r['positions']:,}")
  line("largest logit difference (largest logit)", ["largest_logit_difference"],
       lambda r: f"{r['largest_logit_difference']:.2e} ({r['largest_logit']:.1f})")
  line("greedy continuations identical: transformers", ["greedy_identical_transformers"],
       lambda r: f"{r['greedy_identical_transformers']}/{r['prompts']}")
  line(f"greedy continuations identical: CTranslate2 {versions['ctranslate2']}",
       ["greedy_identical_ct2"], lambda r: f"{r['greedy_identical_ct2']}/{r['prompts']}")
  line("new tokens/s: tfm generator / CTranslate2 (one batch)", ["tfm_tokens_per_s"],
       lambda r: f"{r['tfm_tokens_per_s']:,} / {r['ct2_tokens_per_s']:,}")
  line("masked pieces: argmax identical", ["masked_pieces"],
       lambda r: f"{r['masked_argmax_identical']}/{r['masked_pieces']}")
  line("dev perplexity over the masked pieces", ["dev_perplexity"],
       lambda r: f"{r['dev_perplexity']:.1f}")
  return "\n".join(rows) + "\n"


def main(argv):
  del argv
  import ctranslate2  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(os.cpu_count())
  out = Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  _log(out, f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: export_lm_parity.py "
       f"{' '.join('--workdir=' + w for w in FLAGS.workdir)}; nproc={os.cpu_count()}; load "
       f"average {os.getloadavg()}")
  versions = {"transformers": transformers.__version__, "torch": torch.__version__,
              "ctranslate2": ctranslate2.__version__}
  stored = out / "lm_parity.json"
  results = {}
  if stored.exists():  # the runs measured before stay; the same libraries or no merge
    before = json.loads(stored.read_text())
    changed = {k: (before[k], v) for k, v in versions.items() if before.get(k) != v}
    if changed:
      raise SystemExit(f"{stored} was measured with other library versions {changed} (before, "
                       "now): rerun every workdir into an empty --out")
    results = before["runs"]
  for item in FLAGS.workdir:
    name, workdir = item.split("=", 1)
    results[name] = measure(name, workdir, out)
  stored.write_text(json.dumps({**versions, "runs": results}, indent=2) + "\n")
  (out / "lm_table.md").write_text(table(results, versions))


if __name__ == "__main__":
  app.run(main)
