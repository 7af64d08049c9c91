"""Soak test: kill training at random moments, resume, and compare with an uninterrupted run.

  python experiments/soak.py --root /tmp/soak --kills 10 --processes 1
  python experiments/soak.py --root /tmp/soak2 --kills 10 --processes 2 --seed 1
  python experiments/soak.py ... --config=configs/quickstart.py --config.train.steps=60 ...

1. A reference run trains the config uninterrupted (`launch.sh [--processes P] train`), timing
   its start-up.
2. The soak run starts the same command again and again; each attempt is killed at a random
   moment (a time in start-up, or a random step of the attempt, at most 90% of what is left, plus
   a random fraction of a step, so that every kill lands before the run can finish), with SIGTERM to the launcher (a preemption: launch.sh forwards it to its workers, which
   save and exit) or SIGKILL to its whole process group (a lost machine: nothing is saved). The
   phase each kill lands in is read from the run's output and checkpoint directory: start-up,
   compile (before the first step of the attempt), training, checkpoint write (an Orbax temporary
   directory exists), evaluation.
3. After the kills the run is left to finish, and its final checkpoint is compared with the
   reference's leaf by leaf (bit for bit), with the data iterator state and the kept steps.

Prints one line per kill and a verdict, writes ROOT/soak.json, and exits 1 unless bit-exact.
Default config: a 2-layer d_model=32 Transformer on the offline Bible corpus (configs/quickstart.py
with the overrides below); any --config / --config.KEY=VALUE replaces or adds to them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT = ["--config=configs/quickstart.py", "--config.model.d_model=32", "--config.model.d_ff=64",
           "--config.model.num_heads=2", "--config.model.d_k=16", "--config.model.d_v=16",
           "--config.train.steps=60", "--config.train.checkpoint_every=10",
           "--config.train.eval_every=30", "--config.eval.bleu_every=0"]
# Every attempt logs every step (the phase of a kill is read from the log); numerics are unchanged.
ALWAYS = ["--config.train.log_every=1"]


class Attempt:
  """One `launch.sh ... train` in its own process group, its output timestamped line by line."""

  def __init__(self, argv: list[str], log_path: pathlib.Path, env: dict):
    self.lines: list[tuple[float, str]] = []
    self.start = time.monotonic()
    self.log = open(log_path, "a", encoding="utf-8")
    self.log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n")
    self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                 cwd=ROOT, start_new_session=True, text=True, errors="replace")
    self.reader = threading.Thread(target=self._read, daemon=True)
    self.reader.start()

  def _read(self):
    for line in self.proc.stdout:
      self.lines.append((time.monotonic() - self.start, line.rstrip("\n")))
      self.log.write(line)
    self.log.flush()

  def wait(self, timeout: float) -> int:
    try:
      code = self.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      os.killpg(self.proc.pid, signal.SIGKILL)
      code = self.proc.wait()
      self.reader.join()
      raise RuntimeError(f"the run did not end within {timeout:.0f} s (see {self.log.name})")
    self.reader.join()
    self.log.close()
    return code

  def wait_until(self, condition, poll: float = 0.02) -> bool:
    """Waits until condition() holds; False if the run ended first."""
    while not condition():
      if self.proc.poll() is not None:
        return False
      time.sleep(poll)
    return self.proc.poll() is None

  def last_step(self) -> int:
    """The last training step the run logged (train.log_every=1), 0 before any."""
    steps = [int(line.split()[2].split("/")[0]) for _, line in list(self.lines)
             if line.startswith("[train] step ")]
    return steps[-1] if steps else 0

  def first(self, text: str) -> float | None:
    """Seconds from the start to the first output line containing `text`."""
    return next((t for t, line in self.lines if text in line), None)


def phase(attempt: Attempt, workdir: pathlib.Path, eval_every: int) -> str:
  """What the run was doing at this moment, from its output so far and its checkpoint directory."""
  directory = workdir / "checkpoints"
  if directory.exists() and any("tmp" in p.name for p in directory.iterdir()):
    return "checkpoint write"
  lines = [line for _, line in list(attempt.lines)]
  if not any("parameters; mesh" in line for line in lines):
    return "start-up"
  step = attempt.last_step()
  if not step:
    return "compile"
  if step % eval_every == 0 and not any(line.startswith(f"[dev] step {step} ") for line in lines):
    return "evaluation"
  return "training"


def launch_argv(processes: int, config_args: list[str], workdir: pathlib.Path) -> list[str]:
  mode = ["--processes", str(processes)] if processes > 1 else []
  return ["bash", str(ROOT / "launch.sh"), *mode, "train", *config_args, f"--workdir={workdir}"]


def saved_tree(workdir: pathlib.Path, step: int):
  """A checkpoint's arrays as host numpy arrays, whatever mesh and process count wrote them."""
  import jax  # pylint: disable=import-outside-toplevel
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  path = workdir / "checkpoints" / str(step) / "state"
  with ocp.PyTreeCheckpointer() as checkpointer:
    metadata = checkpointer.metadata(path).item_metadata.tree
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), metadata)
    return checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=as_numpy))


def compare(reference: pathlib.Path, soaked: pathlib.Path, step: int) -> dict:
  """Leaf-by-leaf comparison of checkpoint `step` of two workdirs (arrays, data state, kept steps)."""
  import jax  # pylint: disable=import-outside-toplevel
  from tfm.train import checkpoint as ckpt_lib  # pylint: disable=import-outside-toplevel
  a = jax.tree_util.tree_flatten_with_path(saved_tree(reference, step))[0]
  b = dict(jax.tree_util.tree_flatten_with_path(saved_tree(soaked, step))[0])
  differing = [jax.tree_util.keystr(path) for path, x in a
               if path not in b or not np.array_equal(np.asarray(x), np.asarray(b[path]))]
  return dict(leaves=len(a), differing_leaves=differing,
              data_state_equal=ckpt_lib.read_data_state(reference, step)
              == ckpt_lib.read_data_state(soaked, step),
              kept_steps=[ckpt_lib.available_steps(reference), ckpt_lib.available_steps(soaked)])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--root", required=True, help="workdirs and logs go here")
  parser.add_argument("--kills", type=int, default=10, help="how many attempts to kill")
  parser.add_argument("--processes", type=int, default=1, help="JAX processes (launch.sh)")
  parser.add_argument("--seed", type=int, default=0, help="seed of the kill times and signals")
  parser.add_argument("--signals", default="TERM,KILL", help="signals to choose from")
  parser.add_argument("--timeout", type=float, default=600, help="seconds an attempt may take")
  args, config_args = parser.parse_known_args(argv)
  bad = [a for a in config_args if not a.startswith("--config")]
  if bad or args.kills < 0 or args.processes < 1:
    parser.error(f"unexpected arguments {bad}; expected --config=FILE and --config.KEY=VALUE"
                 if bad else "--kills >= 0 and --processes >= 1")
  signals = [getattr(signal, "SIG" + s.strip()) for s in args.signals.split(",")]
  has_file = any(a.startswith("--config=") for a in config_args)
  config_args = ([] if has_file else DEFAULT) + config_args + ALWAYS
  sys.path.insert(0, str(ROOT))
  from tfm.config import load_config  # pylint: disable=import-outside-toplevel
  from tfm.train import checkpoint as ckpt_lib  # pylint: disable=import-outside-toplevel
  spec = next(a.split("=", 1)[1] for a in config_args if a.startswith("--config="))
  config = load_config(spec, [a[len("--config."):] for a in config_args
                              if a.startswith("--config.")])
  steps, eval_every = config.train.steps, config.train.eval_every

  root = pathlib.Path(args.root).resolve()
  root.mkdir(parents=True, exist_ok=True)
  reference, soaked = root / "reference", root / "soak"
  for path in (reference, soaked):
    shutil.rmtree(path, ignore_errors=True)
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  env.setdefault("JAX_COMPILATION_CACHE_DIR", str(root / "xla_cache"))  # restarts compile once
  rng = random.Random(args.seed)

  ref = Attempt(launch_argv(args.processes, config_args, reference), root / "reference.log", env)
  if ref.wait(args.timeout) != 0:
    print(f"soak: the reference run failed; see {root / 'reference.log'}", file=sys.stderr)
    return 1
  total = ref.lines[-1][0] if ref.lines else time.monotonic() - ref.start
  startup = ref.first("[train] step ") or total  # to the end of the first step: imports, data, compile
  step_s = max(total - startup, 0.1) / max(steps - 1, 1)
  print(f"soak: reference {steps} steps in {total:.1f} s (start-up {startup:.1f} s, then "
        f"{step_s:.2f} s a step), {args.processes} process(es)")

  kills = []
  for number in range(1, args.kills + 1):
    done = max(ckpt_lib.available_steps(soaked), default=0)
    attempt = Attempt(launch_argv(args.processes, config_args, soaked), root / "soak.log", env)
    # A moment in start-up, or a step of this attempt (at most 90% of what is left) plus a random
    # fraction of a step: every kill lands before the run can finish, in any phase.
    target = rng.uniform(0.2, startup + 0.9 * max(steps - done - 1, 0) * step_s)
    sig = rng.choice(signals)
    if target <= startup:
      # (or at the attempt's first step: a later start-up is faster, its compile cached)
      alive = attempt.wait_until(lambda: time.monotonic() - attempt.start >= target
                                 or attempt.last_step() > done)
    else:
      step = done + max(1, math.ceil((target - startup) / step_s))
      jitter = rng.uniform(0, step_s)
      alive = attempt.wait_until(lambda: attempt.last_step() >= step) and attempt.wait_until(
          lambda start=time.monotonic(): time.monotonic() - start >= jitter)
    if not alive:
      attempt.wait(args.timeout)
      print(f"soak: the run ended before kill {number}; {len(kills)} kills")
      break
    where = phase(attempt, soaked, eval_every)
    elapsed = time.monotonic() - attempt.start
    if sig == signal.SIGKILL:
      os.killpg(attempt.proc.pid, signal.SIGKILL)  # the launcher and every worker
    else:
      attempt.proc.send_signal(sig)  # the launcher forwards it to its workers
    code = attempt.wait(args.timeout)
    saved = [int(m[1]) for _, line in attempt.lines
             if (m := re.search(r"SIGTERM: saved step (\d+)", line))]
    kills.append(dict(after_s=round(elapsed, 2), signal=signal.Signals(sig).name, phase=where,
                      resumed_from=done, exit_code=code, saved=saved[-1] if saved else None))
    print(f"soak: kill {number}: {kills[-1]['signal']} {elapsed:.1f} s after a start from step "
          f"{done}, in {where}; exit {code}" + (f"; saved step {saved[-1]}" if saved else ""),
          flush=True)

  final = Attempt(launch_argv(args.processes, config_args, soaked), root / "soak.log", env)
  if final.wait(args.timeout) != 0:
    print(f"soak: the final resume failed; see {root / 'soak.log'}", file=sys.stderr)
    return 1
  result = compare(reference, soaked, steps)
  exact = not result["differing_leaves"] and result["data_state_equal"] and (
      result["kept_steps"][0] == result["kept_steps"][1])
  report = dict(processes=args.processes, steps=steps, kills=kills, bit_exact=exact, **result)
  (root / "soak.json").write_text(json.dumps(report, indent=1))
  phases = {}
  for k in kills:
    phases[k["phase"]] = phases.get(k["phase"], 0) + 1
  print(f"soak: {len(kills)} kills ({', '.join(f'{n} {p}' for p, n in sorted(phases.items()))}); "
        f"final step {steps}: {result['leaves'] - len(result['differing_leaves'])}/"
        f"{result['leaves']} leaves equal, data state "
        f"{'equal' if result['data_state_equal'] else 'DIFFERENT'}, kept steps "
        f"{result['kept_steps'][1]} -> {'BIT-EXACT' if exact else 'NOT EXACT'}")
  return 0 if exact else 1


if __name__ == "__main__":
  sys.exit(main())
