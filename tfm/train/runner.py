"""The step runner: a compiled train step over the batches, with the periodic work its cadence says.

  run_steps(StepRunner(...), state, step)   steps step+1 .. train.steps (or a preemption, or an
                                            early stop); returns the last state

Each step, in this order (tfm/train/cadence.py says what a step is due for):
  the step (the first one of the process compiles and is timed apart), then at a log window's end
  the metrics fetched (the one host sync) and each run's console line and TensorBoard scalars; a
  checkpoint (before any evaluation: after a SIGTERM an evaluation could outlast the grace period);
  after a SIGTERM the save waited for and the loop left; the input pipeline's figures and each
  evaluation set's dev loss, then dev BLEU, of the parameters and, with train.ema_decay, of their
  EMA (under `<set>_ema/`: dev_ema/perplexity beside dev/perplexity); the best checkpoint (of the
  raw parameters) and early stopping
  (tfm/train/checkpoint/best.py); curves.png.
A run resumed at a step due for evaluation first evaluates that step: its checkpoint was written
before the step's evaluations, which a SIGTERM skipped (or a kill cut short), so the resumed run
sees every evaluation an uninterrupted run sees, and keeps the same best checkpoints and early stop.

The runner knows nothing of models or data: tfm/loop.py assembles it (the step, the batches, the
evaluations as callables), and the tests drive it with stand-ins.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax

from tfm import storage
from tfm.figures import curves
from tfm.train.checkpoint import best as best_lib
from tfm.train import flops as flops_lib
from tfm.train import stack
from tfm.train.cadence import Cadence, Due
from tfm.train.metrics_writer import MetricsWriter
from tfm.train.preemption import Preemption
from tfm.train.progress import Progress
from tfm.train.trace import ProfileTrace
from tfm.train.window import Window

# Input-pipeline figures logged beside the train metrics (TrainIterator.stats()).
DATA_STATS = ("inputs_efficiency", "targets_efficiency", "examples_read", "examples_kept",
              "skipped_empty", "skipped_non_utf8", "filtered_overlong", "truncated")


@dataclasses.dataclass(frozen=True)
class Run:
  """One run of the loop (a stack's member, or the run alone): its workdir, its metrics writer
  and its checkpointer (save(step, state, data_state), wait()); with train.best_metric, its
  BestTracker and the checkpointer of its best checkpoint (tfm/train/checkpoint/best.py)."""
  workdir: str
  writer: MetricsWriter
  checkpointer: Any
  best: Any = None
  best_checkpointer: Any = None


@dataclasses.dataclass(frozen=True)
class StepRunner:
  """What run_steps works with, besides the state: the config, the compiled step, the batches,
  the runs it trains and the parts the cadence calls.

  train_step: (state, batch) -> (state, metrics), the state donated. batches: an iterator of device
  batches with get_state() (saved with each checkpoint) and stats() (the pipeline's figures).
  runs: one Run, or a stack's members (tfm/train/stack.py): then the state, the batch and the
  metrics have a leading member axis, and get_state() and stats() are lists, a member each.
  state_shardings: a run's own (a member's slice of a stacked state is laid out so).
  evaluate_dev, evaluate_bleu: (run k's params, k, evaluation set) -> a dict of figures
  (evaluate_bleu None when eval.bleu_every is 0). eval_sets: the evaluation sets' names
  (data.eval_sets), each evaluated in turn and written under its name ('dev': `dev/perplexity`).
  preemption: stop() is True once a SIGTERM came. The first run's workdir takes the profiles.
  """
  config: Any
  train_step: Callable
  batches: Any
  runs: list
  state_shardings: Any
  evaluate_dev: Callable
  evaluate_bleu: Callable | None
  preemption: Preemption
  progress: Progress
  eval_sets: tuple[str, ...] = ("dev",)

  @property
  def stacked(self) -> bool:
    return len(self.runs) > 1

  def member(self, state, k: int):
    """Run k's own state (the state itself for a run alone)."""
    return stack.member_state(state, k, self.state_shardings) if self.stacked else state

  def member_params(self, params, k: int):
    """Run k's own parameters (the parameters themselves for a run alone)."""
    return (stack.member_state(params, k, self.state_shardings.params) if self.stacked
            else params)

  def per_run(self, value) -> list:
    """A list a run of what the batches give (get_state, stats): lists already for a stack."""
    return list(value) if self.stacked else [value]


def run_steps(runner: StepRunner, state, step: int):
  """Steps from `step` to train.steps (or a preemption, or an early stop); returns the last state.
  Cadence.of(config) says which periodic actions a step is due for; each run gets its own lines,
  checkpoints and evaluations."""
  r = runner
  cadence = Cadence.of(r.config)
  tc = r.config.train
  owed = cadence.owed(step)  # a resume at an evaluation step: its save came before them
  if owed is not None and _evaluate_and_keep_best(r, state, step, owed):
    return state
  window = Window(devices=jax.device_count(), peak=flops_lib.peak_flops(),
                  members=len(r.runs) if r.stacked else None)
  compiled = False
  first = r.runs[0]
  with ProfileTrace(tc.profile_steps, step, first.workdir, first.writer.text) as trace:
    while step < tc.steps:
      trace.before(step)
      batch = next(r.batches)
      if compiled:
        flops = len(r.runs) * flops_lib.batch_flops(r.config.model, _run_shapes(batch, r.stacked))
        state, metrics = r.train_step(state, batch)
        window.add(metrics, flops)
      else:  # the first step of this process compiles (or loads the cached step)
        state, metrics = _compile_and_step(r.train_step, state, batch, r.progress, first.writer)
        window.add_compiled(metrics)  # its time is the compile's, not in the window's rates
        compiled = True
      step += 1
      r.progress.dispatched(step)
      due = cadence.due(step, stop=r.preemption.stop())
      trace.after(step, state)
      if due.flush:
        summaries, timed, seconds = window.end(step, tc.nonfinite)
        _log_window(step, summaries, timed, seconds, r.progress, [run.writer for run in r.runs])
      # Saved before any evaluation: after SIGTERM an evaluation could outlast the grace period.
      if due.save:
        for k, (run, data_state) in enumerate(zip(r.runs, r.per_run(r.batches.get_state()))):
          run.checkpointer.save(step, r.member(state, k), data_state)
      if due.stop and not due.last:
        for run in r.runs:
          run.checkpointer.wait()  # on disk before it says so: SLURM's SIGKILL may follow (KillWait)
        first.writer.text(f"tfm: SIGTERM: saved step {step}, exiting")
        break
      stop_early = _evaluate_and_keep_best(r, state, step, due)
      if due.flush:
        window.restart()
      if stop_early:
        break
  return state


def _evaluate_and_keep_best(r: StepRunner, state, step: int, due: Due) -> bool:
  """The evaluations `due` asks for at `step`, each run's best checkpoint and curves.png; True
  when the run has run out of train.patience (_keep_best)."""
  figures = [{} for _ in r.runs]  # this step's dev evaluations of each run, by metric
  if due.evaluate:
    stats = r.per_run(r.batches.stats())  # the pipeline's, after the batches trained on
    for k, run in enumerate(r.runs):
      run.writer.write(step, {s: v for s, v in stats[k].items()  # from_<source>: data.mixture
                              if s in DATA_STATS or s.startswith("from_")}, prefix="data")
      for name in r.eval_sets:
        with r.progress.timed(f"evaluating {name} loss", evaluation=True):
          for tree, suffix in _trees(state):
            dev, seconds = _timed(r.evaluate_dev, r.member_params(tree, k), k, name)
            run.writer.write(step, {**dev, "eval_s": seconds}, prefix=name + suffix)
            if name == r.eval_sets[0] and not suffix:  # the best checkpoint's: raw, 'dev'
              figures[k]["dev_ppl"] = dev
  if due.decode:
    for k, run in enumerate(r.runs):
      for name in r.eval_sets:
        with r.progress.timed(f"decoding {name} BLEU", evaluation=True):
          for tree, suffix in _trees(state):
            bleu, seconds = _timed(r.evaluate_bleu, r.member_params(tree, k), k, name)
            run.writer.write(step, {**bleu, "eval_s": seconds}, prefix=name + suffix)
            if name == r.eval_sets[0] and not suffix:
              figures[k]["dev_bleu"] = bleu
  stop_early = _keep_best(r, state, step, figures, due.last)
  if r.config.train.curves and (due.evaluate or due.decode):
    for run in r.runs:
      _draw_curves(run.writer, run.workdir)
  return stop_early


EMA_SUFFIX = "_ema"  # an evaluation set's figures of the EMA (train.ema_decay): dev_ema/perplexity


def _trees(state) -> list[tuple]:
  """(parameters, the suffix of their figures' prefix) to evaluate: the raw parameters, then the
  EMA where the state keeps one (tfm/train/ema.py)."""
  ema = getattr(state, "ema", None)
  return [(state.params, "")] + ([] if ema is None else [(ema, EMA_SUFFIX)])


def _timed(evaluate, params, k: int, name: str) -> tuple[dict, float]:
  """(evaluate(params, k, name), its seconds)."""
  start = time.perf_counter()
  figures = evaluate(params, k, name)
  return figures, time.perf_counter() - start


def _keep_best(r: StepRunner, state, step: int, figures: list[dict], last: bool) -> bool:
  """Each run's evaluation of its train.best_metric at `step`, if one ran: a new best is saved as
  its best checkpoint. True when a run alone has run out of train.patience: its step is then
  saved as its last checkpoint and the run marked stopped (a finished run)."""
  data_states = None
  for k, run in enumerate(r.runs):
    if run.best is None or run.best.metric not in figures[k]:
      continue
    if run.best.observe(step, figures[k][run.best.metric]):
      data_states = data_states or r.per_run(r.batches.get_state())
      run.best_checkpointer.save(step, r.member(state, k), data_states[k])
      run.writer.text(f"tfm: step {step}: best {run.best.metric} so far, "
                      f"{run.best.best[1]:.4f}: saved in {best_lib.best_dir(run.workdir)}")
  first = r.runs[0]
  if last or r.stacked or first.best is None or not first.best.exhausted():
    return False
  reason = first.best.reason()
  first.checkpointer.save(step, state, r.batches.get_state())
  first.checkpointer.wait()
  first.best_checkpointer.wait()
  best_lib.write_stopped(first.workdir, step, reason)
  first.writer.text(f"tfm: early stop at step {step}: {reason}")
  return True


def _draw_curves(writer: MetricsWriter, workdir: str) -> None:
  """WORKDIR/curves.png (tfm plot's figure) from every run's events so far, kept with the run's
  other trackers' runs too; lead host, where the events are written (not without the tensorboard
  tracker or tensorboardX: tfm/train/trackers/tensorboard.py)."""
  if jax.process_index() == 0 and writer.tensorboard is not None:
    writer.sync()
    path = storage.path(workdir) / "curves.png"
    curves.write_png([workdir], path)
    writer.artifact(path)  # and with the run in MLflow / W&B (train.trackers)


def _run_shapes(batch: dict, stacked: bool) -> dict:
  """One run's batch shapes: a stacked batch's without its member axis (no device work)."""
  if not stacked:
    return batch
  return {k: jax.ShapeDtypeStruct(v.shape[1:], v.dtype) for k, v in batch.items()}


def _compile_and_step(train_step, state, batch, progress: Progress, writer: MetricsWriter):
  """The first train step of this process, timed apart: it compiles (or loads the cached step)."""
  with progress.timed("compiling the train step") as compiled:
    state, metrics = train_step(state, batch)
    jax.block_until_ready(metrics)
  writer.text(f"tfm: train step compiled (or loaded from the compilation cache) in "
              f"{compiled['seconds']:.1f} s")
  return state, metrics


def _log_window(step: int, summaries: list[dict], timed: int, seconds: float, progress: Progress,
                writers: list[MetricsWriter]) -> None:
  """The window ending at `step`: the progress bar (the first run's figures) and each run's
  console line and TensorBoard scalars."""
  summary = summaries[0]
  progress.window(timed, seconds, {
      "loss": f"{summary['loss']:.3f}", "lr": f"{summary['learning_rate']:.2e}",
      **({"tok/s": f"{summary['target_tokens_per_s']:,.0f}"} if timed else {}),
      **({"mfu": f"{summary['mfu']:.1%}"} if "mfu" in summary else {})})
  for writer, figures in zip(writers, summaries):
    writer.write(step, {**figures, "eta": progress.eta_text()})
