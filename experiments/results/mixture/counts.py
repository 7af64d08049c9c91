"""A mixture's per-source counts against its weights, from a training log's [data] lines.

  .venv/bin/python experiments/results/mixture/counts.py RUN.log --weights web=0.7,kjv=0.3

For each [data] line (step s, n = examples_kept, c_i = from_<name>), prints a markdown table row a
source: c_i, the expectation n w_i, the binomial standard deviation sqrt(n w_i (1 - w_i)), the
4-sigma interval and the z-score (c_i - n w_i) / sd. Under the mixture's draws (tfm/data/mixture.py)
c_i ~ Binomial(n, w_i), so |z| <= 4 but for a 6e-5 chance. The counts are cumulative: the rows of
one run are not independent draws.
"""

import argparse
import math
import re


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("log")
  parser.add_argument("--weights", required=True, help="name=w,... (normalized here)")
  args = parser.parse_args()
  raw = [part.split("=") for part in args.weights.split(",")]
  total = sum(float(w) for _, w in raw)
  weights = {name: float(w) / total for name, w in raw}
  print("| step | source | count | n w | sd | 4-sigma interval | z |")
  print("|---|---|---|---|---|---|---|")
  with open(args.log, encoding="utf-8", errors="replace") as f:
    for line in f:
      if not line.startswith("[data] step "):
        continue
      fields = dict(re.findall(r"(\w+) ([0-9.]+)", line))
      step, n = int(fields["step"]), int(fields["examples_kept"])
      for name, w in weights.items():
        count, mean = int(fields[f"from_{name}"]), n * w
        sd = math.sqrt(n * w * (1 - w))
        print(f"| {step} | {name} (w={w:g}) | {count} | {mean:.1f} | {sd:.1f} | "
              f"[{mean - 4 * sd:.0f}, {mean + 4 * sd:.0f}] | {(count - mean) / sd:+.2f} |")


if __name__ == "__main__":
  main()
