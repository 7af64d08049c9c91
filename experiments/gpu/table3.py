"""A table config's runs on one GPU node with no network, inside a time box: Table 3
(configs/table3_v3.py, 40 runs, the default), the positional encodings by length
(--config=configs/positions.py, 12 runs) or their language-model form by context length
(--config=configs/positions.py:lm, 12 runs).

  python3 experiments/gpu/table3.py --out=DIR [--config=C]         # on the node (docs/table3.md)
  python3 experiments/gpu/table3.py --import_from=DIR [--config=C]  # here: its runs into the results
  python3 experiments/gpu/table3.py --quick --out=DIR --publish=P --root=R   # the plumbing on CPU

On the node it runs `tfm sweep` from this checkout on the node's own Python, with the packages the
node lacks from the bundle's wheels and the Bible corpus, vocabulary and token cache from the bundle
of the config (experiments/gpu/make_bundle.py --config=configs/table3_v3.py:base
--out=experiments/gpu/bundle_table3; --config=configs/positions.py:sinusoidal
--out=experiments/gpu/bundle_positions; --config=configs/positions.py:lm_sinusoidal
--out=experiments/gpu/bundle_positions_lm). Several runs share the GPU (--parallel at once, each
with its part of the GPU's memory: tfm sweep --runs_per_gpu), so one run's compilation, evaluation
and host work overlap the others' steps; NVIDIA's MPS, where the node has it, lets their kernels run
side by side. Each row's seeds train as one stack (--stack, tfm/train/stack.py: one step for all of
them), the longest rows first (big, 3x base's steps, then by model FLOPs); with --nostack every
row's seed 0 starts before any seed 1, so that a time box that ends early leaves a table of every
row once. Beside the sweep, base at twice the rate checks the learning-rate rule (--pilot_steps).
Every run compiles with the kernels of --kernels (experiments/gpu/kernels.py: XLA's flags, and
model.matmul_precision, which is in the runs' fingerprints; the flags are in every run's log): c,
cuBLAS products in TF32, which the kernel probe chose on an H200 for all 40 runs. --probe_minutes
runs the probe first instead (base for 500 steps under each candidate) and the sweep under the one
its rule picks.

Finished runs are published (tfm sweep --publish) into --publish, experiments/results/<config> by
default (table3_v3, positions, positions_lm): a run already there, with the same fingerprint, is
taken and not trained again. So a second call finishes what the first left, whether it finds the
first one's root (the same machine: stopped runs resume from their checkpoints) or a fresh machine
(after --import_from here).

At --deadline the sweep is stopped (SIGTERM: each running run saves its step) and OUT receives, as
at most 8 plain files: runs.tar.gz (each finished run's sweep_result.json, dev evaluation and log,
and the vocabulary, as --publish holds them), logs.tar.gz (every run's log in the root, finished
or not), table.md (the report over every published run), sweep.txt (the sweep's output), pilot.txt
(the pilot's), probe.txt (the probe's runs), summary.json (device, versions, MPS, the probe's
figures and the kernels chosen, how many runs ended how, the time box's seconds). --import_from=OUT unpacks runs.tar.gz into --publish here, appends
summary.json to its gpu_calls.jsonl and rebuilds the report (tfm sweep --report). A run published
there before with the same fingerprint is kept, one of another fingerprint replaced (it was trained
under another config), and an OUT imported twice adds its GPU time once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from absl import app, flags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from experiments.gpu import kernels  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.mps import start_mps, stop_mps  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.published import finished_runs, import_runs  # noqa: E402  pylint: disable=wrong-import-position
from experiments.gpu.node import carried_site, device_name  # noqa: E402  pylint: disable=wrong-import-position

START = time.monotonic()  # the time box counts from the process's start

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "where the files that come back go")
flags.DEFINE_string("import_from", None, "here, after a node's run: its OUT, whose runs go into "
                    "--publish")
flags.DEFINE_string("config", "configs/table3_v3.py", "the table config whose rows run: "
                    "configs/table3_v3.py, configs/positions.py or its lm form "
                    "configs/positions.py:lm")
flags.DEFINE_string("publish", None, "the published runs: taken instead of trained, and where "
                    "finished runs go (default experiments/results/<the config's name>)")
flags.DEFINE_string("root", None, "the sweep's root (every run's workdir; default "
                    "/tmp/tfm_<the config's name>); on the same machine, a second call resumes the "
                    "runs the first one stopped")
flags.DEFINE_float("deadline", 7.0, "minutes for the whole call", lower_bound=0.5)
flags.DEFINE_integer("parallel", 4, "runs at once on the GPU: one run's compilation, evaluation and "
                     "host work overlap the others' steps (4 base runs at once under MPS made 2x "
                     "one's steps a second: experiments/results/gpu/2026-11-27_h200_kernels)",
                     lower_bound=1)
flags.DEFINE_integer("seeds", 2, "seeds a row", lower_bound=1)
flags.DEFINE_bool("stack", True, "train each row's seeds as one stack (tfm sweep --stack: one "
                  "step for all of them, tfm/train/stack.py); --parallel counts stacks")
flags.DEFINE_list("rows", None, "rows to run (default: every row, longest first)")
flags.DEFINE_enum("mps", "auto", ["auto", "off"], "auto: start NVIDIA's MPS daemon where the node "
                  "has nvidia-cuda-mps-control, and use it if a JAX process starts under it")
flags.DEFINE_integer("pilot_steps", 0, "configs/table3_v3.py's learning-rate rule's check beside "
                     "the sweep: base at twice the rate (train.learning_rate 2 x LR_SCALE) for this "
                     "many steps, seed 0, its log in OUT/pilot.txt (0: none; it ran 2000 steps on "
                     "an H200, experiments/results/gpu/2026-11-27_h200_kernels)", lower_bound=0)
flags.DEFINE_float("probe_minutes", 0, "the kernel probe's most minutes before the sweep, which then "
                   "runs under the probe's choice (0: no probe; 3 fits its three candidates)",
                   lower_bound=0)
flags.DEFINE_enum("kernels", "c", [c.name for c in kernels.CANDIDATES], "the candidate the sweep "
                  "runs under when there is no probe (experiments/gpu/kernels.py): c, the probe's "
                  "choice on an H200, for every run of the table")
flags.DEFINE_list("set", [], "config overrides (key=value) for every run, the pilot's and the "
                  "probe's too (the candidate's precision aside): e.g. a shorter protocol")
flags.DEFINE_bool("quick", False, "on the CPU: the config's 2 cheapest rows x 2 seeds of tens of "
                  "steps (the plumbing)")
flags.DEFINE_string("bundle", None, "the bundle (make_bundle.py --config=<the config>:<its first "
                    "row>); default experiments/gpu/" + "bundle_<the config's name, table3 for "
                    "table3_v3>")

PILOT_CONFIG = "configs/table3_v3.py"  # the pilot checks this protocol's learning-rate rule
STOP_MARGIN_S = 50  # before the deadline: SIGTERM, the runs save, the sweep writes its report
QUICK = ["train.steps=12", "train.warmup_steps=4", "train.log_every=6", "train.eval_every=6",
         "train.checkpoint_every=6", "data.tokens_per_batch=256", "data.eval_max_examples=16",
         "eval.batch_size=4", "eval.beam_size=2", "eval.max_extra_length=4", "data.num_workers=0"]
QUICK_EVAL_LIMIT = 4
FAILED_FIRST = 3  # this many failed runs before any finished: a broken setup, the sweep stops


def log(message: str) -> None:
  print(f"[table3] {message}", flush=True)


def config_name() -> str:
  """The config's name: positions for configs/positions.py, and a form's after it (positions_lm
  for configs/positions.py:lm, the table's language-model form), so that each form has its own
  bundle, published runs and root."""
  path, _, form = FLAGS.config.partition(":")
  return Path(path).stem + (f"_{form}" if form else "")


def first_row() -> str:
  """The config's first row (base in Table 3, sinusoidal in configs/positions.py): the kernel
  probe's model and the row the bundle's data settings are read from."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  return config_lib.load_config(str(ROOT / FLAGS.config)).rows[0]


def publish_dir() -> Path:
  return Path(FLAGS.publish or ROOT / "experiments" / "results" / config_name()).resolve()


def root_dir() -> Path:
  return Path(FLAGS.root or f"/tmp/tfm_{config_name()}").resolve()


def bundle_dir() -> Path:
  name = "table3" if config_name() == "table3_v3" else config_name()
  return Path(FLAGS.bundle or ROOT / "experiments" / "gpu" / f"bundle_{name}").resolve()


def child_env(site: Path | None, quick: bool) -> dict[str, str]:
  paths = [str(ROOT), *([str(site)] if site else []), *filter(None, [os.environ.get("PYTHONPATH")])]
  env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(paths)}
  env["JAX_PLATFORMS"] = env.get("JAX_PLATFORMS") or ("cpu" if quick else "cuda")
  return env  # the kernels' flags and precision: a Candidate's (experiments/gpu/kernels.py)


def rows_longest_first(rows: list[str] | None) -> list[str]:
  """The config's rows by training FLOPs (model FLOPs of a 128 x 128 example x steps), largest
  first: the longest runs start first."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  from tfm.train import flops  # pylint: disable=import-outside-toplevel
  names = rows or list(config_lib.load_config(str(ROOT / FLAGS.config)).rows)
  cost = {}
  for row in names:
    c = config_lib.load_config(f"{ROOT / FLAGS.config}:{row}")
    cost[row] = flops.train_flops(c.model, 128, 128) * c.train.steps
  return sorted(names, key=lambda r: -cost[r])


def bundle_data(bundle: Path) -> list[str]:
  """The bundle's data settings as config overrides. They must be the config's (the vocabulary
  and the token cache are keyed by them), except with --quick, whose bundle may be the tests'."""
  from tfm import config as config_lib  # pylint: disable=import-outside-toplevel
  manifest = bundle / "manifest.json"
  if not manifest.exists():
    raise app.UsageError(f"--bundle {bundle}: no manifest.json; build it with python "
                         f"experiments/gpu/make_bundle.py --config={FLAGS.config}:{first_row()} "
                         f"--out={bundle}")
  data = json.loads(manifest.read_text())["data"]
  wanted = config_lib.load_config(f"{ROOT / FLAGS.config}:{first_row()}").data
  data.setdefault("text_key", None)  # a bundle built before language models: pairs
  wrong = {k: v for k, v in data.items() if getattr(wanted, k) != v}
  if "text_key" in wrong:  # a vocabulary of pairs for a language model, or the other way round
    raise app.UsageError(f"--bundle {bundle}: its data.text_key is {data['text_key']!r}, "
                         f"{FLAGS.config}'s {wanted.text_key!r}; build it with python "
                         f"experiments/gpu/make_bundle.py --config={FLAGS.config}:{first_row()} "
                         f"--out={bundle}")
  if wrong and not FLAGS.quick:
    raise app.UsageError(f"--bundle {bundle}: its data {wrong} is not {FLAGS.config}'s; rebuild it")
  overrides = [f"data.data_dir={bundle / 'data'}", f"data.vocab_dir={bundle / 'data' / 'vocab'}"]
  if wrong:
    overrides += [f"data.{k}={v}" for k, v in wrong.items() if v is not None]
    overrides += [f"model.vocab_size={wrong['vocab_size']}"] if "vocab_size" in wrong else []
  return overrides


def versions(env: dict[str, str]) -> str:
  code = ("import jax, jaxlib, flax, optax; print(f'jax {jax.__version__}, jaxlib "
          "{jaxlib.__version__}, flax {flax.__version__}, optax {optax.__version__}')")
  ran = subprocess.run([sys.executable, "-c", code], env={**env, "JAX_PLATFORMS": "cpu"},
                       capture_output=True, text=True, check=False, timeout=120)
  return ran.stdout.strip() or f"unknown ({ran.stderr.strip()[-200:]})"


def sweep_argv(data: list[str], root: Path, publish: Path, rows: list[str]) -> list[str]:
  """tfm sweep over `rows` (data: the overrides of every run: the bundle's, --quick's, the
  kernels' precision, --set), every row's seed 0 first."""
  argv = [sys.executable, "-m", "tfm.cli", "sweep", f"--config={FLAGS.config}", f"--root={root}",
          f"--publish={publish}", f"--seeds={FLAGS.seeds}", f"--rows={','.join(rows)}",
          *(["--stack"] if FLAGS.stack else ["--order=seeds"]), *(f"--config.{o}" for o in data),
          f"--config.train.compilation_cache_dir={root / 'jax_cache'}"]
  if FLAGS.quick:
    return argv + [f"--eval_limit={QUICK_EVAL_LIMIT}", "--parallel=2"]
  # The pilot takes one more of the GPU's shares while it runs.
  shares = FLAGS.parallel + (1 if FLAGS.pilot_steps else 0)
  return argv + [f"--parallel={FLAGS.parallel}", f"--runs_per_gpu={shares}"]


def run_sweep(argv: list[str], env: dict[str, str], log_path: Path, stop_at: float,
              pilot: subprocess.Popen | None) -> int | str:
  """The sweep, its output into log_path; stopped (SIGTERM: its runs save their steps) at stop_at,
  or as soon as FAILED_FIRST runs have failed and none finished (a setup that fails every run
  should not spend the time box). The pilot gets its SIGTERM at the same moment; whatever has not
  ended STOP_MARGIN_S - 10 s later is killed. Returns the sweep's exit code, or why it was
  stopped."""
  with open(log_path, "a", encoding="utf-8") as f:
    f.write(f"$ {' '.join(argv)}\n")
    f.flush()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                            start_new_session=True)
    why = "stopped at the deadline"
    while proc.poll() is None and time.monotonic() < stop_at:
      time.sleep(2)
      ended = re.findall(r"^\[sweep\] \d+/\d+ done .*\| \S+ (ok|failed|stopped)",
                         log_path.read_text(encoding="utf-8", errors="replace"), re.M)
      if ended.count("failed") >= FAILED_FIRST and "ok" not in ended:
        why = f"stopped: the first {ended.count('failed')} runs failed"
        break
    if proc.poll() is not None:
      return proc.returncode
    log(f"{why}: stopping the sweep (its running runs save their step) and the pilot")
    stop([proc, pilot], time.monotonic() + STOP_MARGIN_S - 10)
    return why


def stop(processes: list[subprocess.Popen | None], kill_at: float) -> None:
  """SIGTERM to each running process at once, SIGKILL to its group at kill_at if it runs still."""
  running = [p for p in processes if p is not None and p.poll() is None]
  for p in running:
    p.send_signal(signal.SIGTERM)
  for p in running:
    try:
      p.wait(timeout=max(0.1, kill_at - time.monotonic()))
    except subprocess.TimeoutExpired:
      os.killpg(p.pid, signal.SIGKILL)
      p.wait()


def start_pilot(env: dict[str, str], data: list[str], root: Path, out: Path
                ) -> subprocess.Popen | None:
  """Base at twice the protocol's rate, seed 0, on the GPU beside the sweep (one more share): the
  learning-rate rule's check at this width (configs/table3_v3.py). Its log: OUT/pilot.txt."""
  if not FLAGS.pilot_steps:
    return None
  from configs import table3_v3  # pylint: disable=import-outside-toplevel
  from tfm.sweep.shares import SHARED_GPU_MEMORY  # pylint: disable=import-outside-toplevel
  steps = min(FLAGS.pilot_steps, 12) if FLAGS.quick else FLAGS.pilot_steps
  argv = [sys.executable, "-m", "tfm.cli", "train", f"--config={PILOT_CONFIG}:base",
          f"--workdir={root / 'pilot-lr2x'}", *(f"--config.{o}" for o in data),
          f"--config.train.compilation_cache_dir={root / 'jax_cache'}",
          f"--config.train.learning_rate={2 * table3_v3.LR_SCALE}", f"--config.train.steps={steps}",
          "--config.train.checkpoint_every=1000000"]  # the final step's only
  share = {} if FLAGS.quick else {"XLA_PYTHON_CLIENT_MEM_FRACTION":
                                  f"{SHARED_GPU_MEMORY / (FLAGS.parallel + 1):.4f}"}
  with open(out / "pilot.txt", "a", encoding="utf-8") as f:
    f.write(f"$ {' '.join(argv)}\n")
    f.flush()
    return subprocess.Popen(argv, cwd=ROOT, env={**env, **share}, stdout=f,
                            stderr=subprocess.STDOUT, start_new_session=True)


def end_pilot(pilot: subprocess.Popen | None) -> str:
  """How the pilot ended; stopped now (SIGTERM, SIGKILL 10 s later) if it runs still."""
  if pilot is None:
    return "none"
  if pilot.poll() is None:
    stop([pilot], time.monotonic() + 10)
    return f"stopped at the sweep's end (exit {pilot.returncode})"
  return f"ended (exit {pilot.returncode})"


def write_tar(files: list[tuple[Path, str]], target: Path) -> None:
  """(path, name in the archive) pairs into target, a tar.gz written whole or not at all."""
  with tarfile.open(target.with_suffix(".tmp"), "w:gz") as tar:
    for path, name in files:
      tar.add(path, arcname=name)
  os.replace(target.with_suffix(".tmp"), target)


def pack(publish: Path, target: Path) -> int:
  """Every finished run's folder and the vocabulary of `publish` into a tar.gz; the run count."""
  runs = [publish / r["name"] for r in finished_runs(publish)]
  write_tar([(path, f"{folder.name}/{path.name}") for folder in runs + [publish / "vocab"]
             if folder.is_dir() for path in sorted(folder.iterdir())], target)
  return len(runs)


def pack_logs(root: Path, target: Path) -> None:
  """Every run's log under the root, finished or not (a run stopped or failed here says why)."""
  write_tar([(path, f"{path.parent.name}/{path.name}") for path in sorted(root.glob("*/sweep.log"))],
            target)


def choose_kernels(env: dict[str, str], data: list[str], root: Path, out: Path,
                   deadline_at: float, summary: dict) -> kernels.Candidate:
  """The kernel probe's choice (or --kernels' without a probe), recorded in summary and written to
  OUT/summary.json at once, so that the probe's figures come back whatever follows."""
  if FLAGS.probe_minutes:
    train = [sys.executable, "-m", "tfm.cli", "train", f"--config={FLAGS.config}:{first_row()}",
             *(f"--config.{o}" for o in data + FLAGS.set),
             f"--config.train.compilation_cache_dir={root / 'jax_cache'}"]
    ends_at = min(time.monotonic() + 60 * FLAGS.probe_minutes, deadline_at - 2 * STOP_MARGIN_S)
    chosen, summary["probe"] = kernels.probe(env, train, ROOT, root, out, ends_at, FLAGS.quick)
    summary["probe_seconds"] = round(time.monotonic() - START, 1)
  else:
    chosen = next(c for c in kernels.CANDIDATES if c.name == FLAGS.kernels)
  summary["kernels"] = chosen.record()
  log(f"kernels: {chosen.name} ({chosen.what}; XLA_FLAGS {' '.join(chosen.xla_flags)}, "
      f"model.matmul_precision={chosen.precision})")
  (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
  return chosen


def on_node(out: Path) -> int:
  deadline_at = START + 60 * FLAGS.deadline
  bundle = bundle_dir()
  try:
    site = carried_site(bundle)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  if site:
    sys.path.insert(0, str(site))  # ml_collections, for the configs
  data = bundle_data(bundle) + (QUICK if FLAGS.quick else [])
  out.mkdir(parents=True, exist_ok=True)
  env = child_env(site, FLAGS.quick)
  root, publish = root_dir(), publish_dir()
  root.mkdir(parents=True, exist_ok=True)
  summary = {"device": "CPU (--quick)" if FLAGS.quick else device_name(),
             "versions": versions(env), "config": FLAGS.config, "parallel": FLAGS.parallel,
             "published_before": len(finished_runs(publish))}
  summary["mps"] = ("off: --quick" if FLAGS.quick else "off: --mps=off" if FLAGS.mps == "off"
                    else start_mps(env))
  log(f"{summary['device']}; {summary['versions']}; MPS {summary['mps']}")
  chosen = choose_kernels(env, data, root, out, deadline_at, summary)
  env, data = chosen.env(env), data + chosen.overrides() + FLAGS.set
  rows = rows_longest_first(FLAGS.rows)[-2:] if FLAGS.quick else rows_longest_first(FLAGS.rows)
  argv = sweep_argv(data, root, publish, rows)
  pilot = start_pilot(env, data, root, out)
  try:
    ended = run_sweep(argv, env, out / "sweep.txt", deadline_at - STOP_MARGIN_S, pilot)
  finally:
    summary["pilot"] = end_pilot(pilot)
    if not FLAGS.quick and FLAGS.mps == "auto":
      stop_mps(env)
  summary["sweep"] = ended
  summary["published_after"] = pack(publish, out / "runs.tar.gz")
  pack_logs(root, out / "logs.tar.gz")
  summary["seconds"] = round(time.monotonic() - START, 1)
  states = {}
  for path in root.glob("*/sweep_result.json"):
    status = json.loads(path.read_text()).get("status")
    states[status] = states.get(status, 0) + 1
  summary["runs_in_root"] = states
  (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
  if (publish / "table.md").exists():
    shutil.copyfile(publish / "table.md", out / "table.md")
  log(f"{summary['published_after']} runs published ({summary['published_before']} before), "
      f"sweep: {ended}, {summary['seconds']:.0f} s")
  return 0 if ended == 0 else 1


def main(argv):
  del argv
  if FLAGS.import_from:
    import_runs(Path(FLAGS.import_from).resolve(), publish_dir())
    return 0
  if not FLAGS.out:
    raise app.UsageError("--out=DIR is required (or --import_from=DIR)")
  if FLAGS.quick and not FLAGS.publish:
    raise app.UsageError("--quick: give --publish (its runs are no results)")
  if FLAGS.pilot_steps and FLAGS.config != PILOT_CONFIG:
    raise app.UsageError(f"--pilot_steps checks {PILOT_CONFIG}'s learning-rate rule; with "
                         f"--config={FLAGS.config} give --pilot_steps=0")
  return on_node(Path(FLAGS.out).resolve())


if __name__ == "__main__":
  app.run(main)
