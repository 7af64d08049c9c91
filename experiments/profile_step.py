"""Where a train step's time goes, op by op, for tfm and the Flax WMT example side by side.

  python experiments/profile_step.py --flax_wmt_dir=/tmp/flax/examples/wmt            # base, 8 x 64
  python experiments/profile_step.py --size=small --flax_wmt_dir=...                   # 16 x 128
  python experiments/profile_step.py --tfm_overrides=model.norm=pre                    # tfm alone

Each side's step (the same ones experiments/compare_flax_wmt.py times: same model, batch and
dtype) runs a few warm calls, then `--traced` calls under `jax.profiler.trace`. Every executed HLO op
in the trace is joined with the compiled program's text and sorted by what it computes:
  products        a fusion or op holding a dot or convolution (with whatever XLA fused into it)
  copies          copies and transposes alone: data moved into another layout
  reductions      reductions and exponentials without a product (softmax, layer norm, the loss)
  random          random bits (dropout masks: threefry, by the op's source)
  elementwise     everything else (adds, selects, casts, the optimizer's arithmetic)
Times are op time per step summed over the host's threads (XLA:CPU runs independent ops side by
side, so the sum exceeds the step's wall time); containers (while, conditional, call) are not
counted, their ops are. Then the `--top` ops of each side with the source op they came from.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import re
import sys
import tempfile
from pathlib import Path

import jax
from absl import app, flags

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import compare_flax_wmt as compare  # noqa: E402
from tfm.train import backend  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("size", "base", ["small", "base", "big"], "which of the comparison's models")
flags.DEFINE_integer("traced", 3, "traced steps (after 3 warm ones)")
flags.DEFINE_integer("top", 12, "the most expensive ops listed per side")
# --flax_wmt_dir (default: the vendored example; --flax_wmt_dir= for tfm alone), --dtype and --tfm_overrides are compare_flax_wmt.py's flags.

KINDS = ("products", "copies", "reductions", "random", "elementwise")
CONTAINERS = ("while", "conditional", "call")
SHAPES = {"small": (16, 128), "base": (8, 64), "big": (8, 64)}
RANDOM = re.compile(r'op_name="[^"]*(threefry|random_bits)')  # dropout's bits, whatever XLA fused


def hlo_ops(text: str) -> dict[str, tuple[str, str]]:
  """{op name: (kind, source op_name)} for every instruction of a compiled module's text."""
  computations, current = {}, None
  for line in text.splitlines():
    header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
    if header:
      current = computations[header.group(1)] = []
    elif current is not None:
      current.append(line)

  def opcodes(name: str, seen: set) -> set[str]:
    if name in seen or name not in computations:
      return set()
    seen.add(name)
    found = set()
    for line in computations[name]:
      op = re.match(r"\s*(?:ROOT )?%?[\w.\-]+ = \S+(?: \S+)*? ([a-z\-]+)\(", line)
      if op:
        found.add(op.group(1))
      if RANDOM.search(line):
        found.add("random")
      for callee in re.findall(r"calls=%?([\w.\-]+)", line):
        found |= opcodes(callee, seen)
    return found

  ops = {}
  for lines in computations.values():
    for line in lines:
      m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = \S+(?: \S+)*? ([a-z\-]+)\(", line)
      if not m:
        continue
      name, opcode = m.groups()
      callee = re.search(r"calls=%?([\w.\-]+)", line)
      found = ({opcode} | opcodes(callee.group(1), set())) if callee and opcode == "fusion" \
          else {opcode}
      if RANDOM.search(line):
        found.add("random")
      source = re.search(r'op_name="([^"]*)"', line)
      ops[name] = (kind_of(found - {"fusion"}), source.group(1) if source else "")
  return ops


def kind_of(opcodes: set[str]) -> str:
  if opcodes & {"while", "conditional", "call"} and len(opcodes) == 1:
    return "container"
  if opcodes & {"dot", "convolution"}:
    return "products"
  if opcodes & {"random", "rng", "rng-bit-generator", "rng-get-and-update-state"}:
    return "random"
  if opcodes & {"reduce", "reduce-window", "exponential", "log", "sort"}:
    return "reductions"
  if opcodes <= {"copy", "transpose", "bitcast", "parameter", "reshape", "slice", "broadcast",
                 "concatenate", "dynamic-slice", "dynamic-update-slice", "pad", "tuple",
                 "get-tuple-element", "constant"} and opcodes & {"copy", "transpose"}:
    return "copies"
  return "elementwise"


def traced_op_seconds(run, steps: int) -> dict[tuple[str, str], float]:
  """{(module, op name): seconds per step} from a profiler trace of `steps` calls of run()."""
  for _ in range(3):
    jax.block_until_ready(run())
  with tempfile.TemporaryDirectory() as directory:
    with jax.profiler.trace(directory, create_perfetto_trace=True):
      for _ in range(steps):
        jax.block_until_ready(run())
    (path,) = glob.glob(f"{directory}/**/*.trace.json.gz", recursive=True)
    with gzip.open(path) as f:
      trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  seconds = collections.Counter()
  for event in events:
    args = event.get("args", {})
    if event.get("ph") == "X" and "hlo_op" in args:
      seconds[(args.get("hlo_module", ""), args["hlo_op"])] += event["dur"] / 1e6 / steps
  return seconds


def profile(run, compiled_text: str, steps: int) -> tuple[dict[str, float], list]:
  """(seconds per step by kind, [(seconds, op, kind, source)] most expensive first)."""
  ops = hlo_ops(compiled_text)
  timed = traced_op_seconds(run, steps)
  modules = collections.Counter()
  for (module, op), s in timed.items():
    modules[module] += s if op in ops else 0
  step_module = modules.most_common(1)[0][0]  # the step's own module, not the trace's helpers
  by_kind, rows = collections.Counter(), []
  for (module, op), s in timed.items():
    if module != step_module or op not in ops or ops[op][0] == "container":
      continue
    kind, source = ops[op]
    by_kind[kind] += s
    rows.append((s, op, kind, source))
  return by_kind, sorted(rows, reverse=True)


def main(argv):
  del argv
  backend.limit_platforms()
  rows, length = SHAPES[FLAGS.size]
  config = compare.tfm_config(FLAGS.size, FLAGS.tfm_overrides, FLAGS.dtype)
  sides = {}
  tfm = compare.TfmTrain(config, rows, length)
  sides["tfm"] = profile(tfm, tfm.lower().compile().as_text(), FLAGS.traced)
  if FLAGS.flax_wmt_dir:
    flax = compare.FlaxTrain(compare.load_flax_wmt(FLAGS.flax_wmt_dir), config, rows, length)
    text = flax.step_fn.lower(flax.state, flax.batch, dropout_rng=flax.rngs).compile().as_text()
    sides["flax"] = profile(flax, text, FLAGS.traced)
  print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; train step, {FLAGS.size} "
        f"({rows} x {length} a side, {FLAGS.dtype}); op time per step, summed over threads")
  print("| kind | " + " | ".join(sides) + " |")
  print("|---|" + "---|" * len(sides))
  for kind in KINDS + ("total",):
    cells = []
    for by_kind, _ in sides.values():
      total = sum(by_kind.values())
      s = total if kind == "total" else by_kind.get(kind, 0.0)
      cells.append(f"{1e3 * s:.0f} ms ({s / total:.0%})")
    print(f"| {kind} | " + " | ".join(cells) + " |")
  for name, (_, top) in sides.items():
    print(f"\n{name}: the {FLAGS.top} most expensive ops")
    for s, op, kind, source in top[:FLAGS.top]:
      print(f"  {1e3 * s:7.1f} ms  {kind:<11} {op:<28} {source[-90:]}")


if __name__ == "__main__":
  app.run(main)
