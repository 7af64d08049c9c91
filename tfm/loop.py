"""The training loop: an Experiment's step over the data, with dev loss, dev BLEU and checkpoints.

  config.data  -> tokenizer, per-host packed batches (in this process or, with train.input=process,
                  one of their own: train_batches), prefetched onto the mesh by a thread
  Experiment   -> mesh, rules, model, optimizer, sharded state, the jitted steps (tfm/experiment.py)
  state:  restored from the workdir's latest readable checkpoint (with the data iterator's position),
          else initialized directly in its shards
  loop:   step (one jit, state donated; the first one's compilation timed and shown) ... every
          train.log_every steps the only host sync: metrics fetched, non-finite updates checked,
          a console line (step/total, ETA, MFU on accelerators) and TensorBoard scalars;
          every train.eval_every the input pipeline's packing efficiency and dropped-example
          counts, dev loss / perplexity (and dev BLEU every eval.bleu_every);
          every train.checkpoint_every and at the end an Orbax checkpoint, its collectives on this
          thread in step order, its write to storage in the background (train.saves=sync: waited
          for);
          train.profile_steps=(a, b): a profiler trace of steps a+1..b.
How the run executes on its platform (train.input, saves, guard, dropout_prng: "auto" resolved by
tfm/train/platform_choices.py) is printed with the devices at the start.
Console lines: tfm/train/progress.py (a progress bar on terminals).
Preemption: a SIGTERM lets the current step finish, saves it and returns; with several hosts, at the
step JAX's preemption service agrees on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from typing import Any, Callable

import jax

from tfm import logs, storage
from tfm.config import Config, check_vocabulary
from tfm.data import (batch_process, bucketing, pipeline, prefetch, sources,
                      tokenizer as tokenizer_lib)
from tfm.eval.dev_bleu import DevBleu
from tfm.eval.dev_loss import DevLoss
from tfm.experiment import Experiment
from tfm.figures import curves
from tfm.model.params import parameter_count
from tfm.train import checkpoint as ckpt_lib
from tfm.train import backend, distributed
from tfm.train import flops as flops_lib
from tfm.train.cadence import Cadence
from tfm.train.metrics_writer import MetricsWriter
from tfm.train.preemption import Preemption
from tfm.train.progress import Progress
from tfm.train.trace import ProfileTrace
from tfm.train.window import Window
from tfm.train.workdir import Workdir

# Input-pipeline figures logged beside the train metrics (TrainIterator.stats()).
DATA_STATS = ("inputs_efficiency", "targets_efficiency", "examples_read", "examples_kept",
              "skipped_empty", "skipped_non_utf8", "filtered_overlong", "truncated")


def prepare_data(config: Config, source: sources.DataSource, workdir: str):
  """The dataset (the Experiment's data source) on every host and the vocabulary in the workdir;
  returns the tokenizer.

  The lead host prepares the dataset in data.data_dir and trains the vocabulary (into
  data.vocab_dir or the workdir, storage every host reads); then every other host prepares the
  dataset in its own data.data_dir, which is a no-op where that directory is shared (it is ready)
  and builds a local copy where each host has its own disk (e.g. the default ~/tensorflow_datasets
  on every TPU VM). The build is deterministic, so every host's copy is the same dataset.
  """
  lead = distributed.is_lead_host()
  if lead:
    sources.prepare(source)
    # A resumed run's model learned the vocabulary already there: never train another one.
    tokenizer_lib.get_tokenizer(config.data, workdir, source=source,
                                train=not ckpt_lib.available_steps(workdir))
  distributed.barrier("tfm-data-ready")
  if not lead:
    sources.prepare(source, create_data_dir=True)  # the lead checked that the path exists
  tokenizer = tokenizer_lib.get_tokenizer(config.data, workdir)
  check_vocabulary(config, tokenizer.vocab_size)
  distributed.barrier("tfm-data-everywhere")
  return tokenizer


def train(config: Config, workdir: str, stream=None):
  """Trains (or resumes) the experiment `config` in `workdir`; returns the final TrainState.
  stream: where the progress lines go (default: sys.stdout as it is when called)."""
  stream = stream or sys.stdout
  preemption = Preemption()  # from the start: a SIGTERM during set-up still ends with a checkpoint
  try:
    distributed.initialize_from_env()
    with logs.workdir_log(jax.process_index()) as log, Workdir(workdir) as held:
      return _train(config, held, log, stream, preemption)
  finally:
    preemption.restore()


def train_batches(config: Config, tokenizer, exp: Experiment):
  """This host's train batches (pipeline.train_iterator): in this process, or with
  train.input=process in a process of their own (tfm/data/batch_process.py), where the packer
  cannot hold the GIL the thread dispatching the steps needs. The same batches either way."""
  keywords = dict(process_index=jax.process_index(), process_count=jax.process_count(),
                  row_multiple=exp.batch_row_multiple)
  if exp.choices.input == "inline":
    return pipeline.train_iterator(config.data, exp.data_source, tokenizer, **keywords)
  return batch_process.BatchProcess(config.data, exp.data_source, tokenizer, **keywords)


def _data_position(iterator):
  """Checkpointer.restore's accept: puts the data iterator at the checkpoint's position; a position
  this run's batches cannot continue from refuses the resume (every older checkpoint would too)."""
  def accept(state, data_state):
    del state
    try:
      iterator.set_state(data_state)
    except bucketing.LayoutChanged as error:
      raise ckpt_lib.ResumeRefused(str(error)) from None
  return accept


def _train(config: Config, held: Workdir, log: logs.WorkdirLog, stream, preemption: Preemption):
  workdir = os.fspath(held.path)
  held.check_config(config.to_dict())  # before anything is written: a resume is the same model
  exp = Experiment(config)
  tokenizer = prepare_data(config, exp.data_source, workdir)
  tc = config.train
  with contextlib.ExitStack() as cleanup:  # closed in reverse order, whatever happens
    iterator = train_batches(config, tokenizer, exp)
    cleanup.callback(iterator.close)
    checkpointer = ckpt_lib.Checkpointer(workdir, keep=tc.keep_checkpoints,
                                         period=tc.checkpoint_every, final_step=tc.steps,
                                         async_save=exp.choices.saves == "background")
    cleanup.callback(checkpointer.close)
    cleanup.callback(checkpointer.wait)
    restored = checkpointer.restore(exp.abstract_state, accept=_data_position(iterator))
    state, start = (exp.init_state(), 0) if restored is None else (restored[0], restored[2])
    held.commit(config.to_dict())  # config.json only now that the state is known to fit it
    log.publish(held.path)  # and the log file (every host's, into WORKDIR/logs/)
    cadence = Cadence.of(config)
    progress = Progress(tc.steps, start, stream, evals_left=cadence.evaluations_left(start))
    cleanup.callback(progress.close)
    writer = MetricsWriter(workdir, progress, total_steps=tc.steps)
    cleanup.callback(writer.close)
    writer.text(f"tfm: {backend.describe()}; {exp.choices.describe()}")
    if backend.unused_accelerator():
      writer.text(f"tfm: {backend.unused_accelerator()}")
    writer.text(f"tfm: {parameter_count(exp.abstract_state.params):,} parameters; mesh "
                f"{dict(exp.mesh.shape)}; {jax.process_count()} host(s), {jax.device_count()} "
                "device(s)")
    # Batches (packed, bucketed, dev) are rounded up to split over the hosts and the step.
    rows_note = exp.rows_note(jax.process_count())
    if rows_note:
      writer.text(f"tfm: {rows_note}")
    if restored is not None:
      writer.text(f"tfm: resumed from step {start} in {workdir}")
    batches = prefetch.prefetch_to_device(iterator, exp.batch_sharding)
    cleanup.callback(batches.close)
    evaluate_dev = DevLoss(config.data, exp.data_source, tokenizer, exp.eval_step, exp.batch_sharding,
                           row_multiple=exp.batch_shards)
    evaluate_bleu = None
    if config.eval.bleu_every:
      evaluate_bleu = DevBleu(config.data, exp.data_source, tokenizer,
                              exp.translate_fn(eos_id=tokenizer.eos_id),
                              batch_size=exp.decode_rows(config.eval.batch_size),
                              limit=config.eval.bleu_examples, compounds=config.eval.compounds)
    return run_steps(StepRunner(
        config=config, train_step=exp.train_step, batches=batches, checkpointer=checkpointer,
        writer=writer, evaluate_dev=evaluate_dev, evaluate_bleu=evaluate_bleu,
        preemption=preemption, progress=progress, workdir=workdir), state, start)


def _draw_curves(writer: MetricsWriter, workdir: str) -> None:
  """WORKDIR/curves.png (tfm plot's figure) from every run's events so far; lead host, where
  the events are written (not without tensorboardX: metrics_writer.py)."""
  if jax.process_index() == 0 and writer.tensorboard is not None:
    writer.sync()
    curves.write_png([workdir], storage.path(workdir) / "curves.png")


@dataclasses.dataclass(frozen=True)
class StepRunner:
  """What run_steps works with, besides the state: the run's config, its compiled step, its
  batches and the parts the cadence calls.

  train_step: (state, batch) -> (state, metrics), the state donated. batches: an iterator of device
  batches with get_state() (saved with each checkpoint) and stats() (the pipeline's figures).
  checkpointer: save(step, state, data_state). evaluate_dev, evaluate_bleu: params -> a dict of
  figures (evaluate_bleu None when eval.bleu_every is 0). preemption: stop() is True once a SIGTERM
  came. workdir: where profiles and curves.png go.
  """
  config: Any
  train_step: Callable
  batches: Any
  checkpointer: Any
  writer: MetricsWriter
  evaluate_dev: Callable
  evaluate_bleu: Callable | None
  preemption: Preemption
  progress: Progress
  workdir: str


def run_steps(runner: StepRunner, state, step: int):
  """Steps from `step` to train.steps (or a preemption); returns the last state. Cadence.of(config)
  says which periodic actions a step is due for."""
  r = runner
  cadence = Cadence.of(r.config)
  tc = r.config.train
  window = Window(devices=jax.device_count(), peak=flops_lib.peak_flops())
  compiled = False
  with ProfileTrace(tc.profile_steps, step, r.workdir, r.writer.text) as trace:
    while step < tc.steps:
      trace.before(step)
      batch = next(r.batches)
      if compiled:
        flops = flops_lib.batch_flops(r.config.model, batch)  # shapes only, no device sync
        state, metrics = r.train_step(state, batch)
        window.add(metrics, flops)
      else:  # the first step of this process compiles (or loads the cached step)
        state, metrics = _compile_and_step(r.train_step, state, batch, r.progress, r.writer)
        window.add_compiled(metrics)  # its time is the compile's, not in the window's rates
        compiled = True
      step += 1
      r.progress.dispatched(step)
      due = cadence.due(step, stop=r.preemption.stop())
      trace.after(step, state)
      if due.flush:
        _log_window(step, *window.end(step, tc.nonfinite), r.progress, r.writer)
      # Saved before any evaluation: after SIGTERM an evaluation could outlast the grace period.
      if due.save:
        r.checkpointer.save(step, state, r.batches.get_state())
      if due.stop and not due.last:
        r.checkpointer.wait()  # on disk before it says so: SLURM's SIGKILL may follow (KillWait)
        r.writer.text(f"tfm: SIGTERM: saved step {step}, exiting")
        break
      if due.evaluate:
        stats = r.batches.stats()  # this host's pipeline so far (it reads a few batches ahead)
        r.writer.write(step, {k: stats[k] for k in DATA_STATS if k in stats}, prefix="data")
        with r.progress.timed("evaluating dev loss", evaluation=True) as timed:
          dev = r.evaluate_dev(state.params)
        r.writer.write(step, {**dev, "eval_s": timed["seconds"]}, prefix="dev")
      if due.decode:
        with r.progress.timed("decoding dev BLEU", evaluation=True) as timed:
          bleu = r.evaluate_bleu(state.params)
        r.writer.write(step, {**bleu, "eval_s": timed["seconds"]}, prefix="dev")
      if tc.curves and (due.evaluate or due.decode):
        _draw_curves(r.writer, r.workdir)
      if due.flush:
        window.restart()
  return state


def _compile_and_step(train_step, state, batch, progress: Progress, writer: MetricsWriter):
  """The first train step of this process, timed apart: it compiles (or loads the cached step)."""
  with progress.timed("compiling the train step") as compiled:
    state, metrics = train_step(state, batch)
    jax.block_until_ready(metrics)
  writer.text(f"tfm: train step compiled (or loaded from the compilation cache) in "
              f"{compiled['seconds']:.1f} s")
  return state, metrics


def _log_window(step: int, summary: dict, timed: int, seconds: float, progress: Progress,
                writer: MetricsWriter) -> None:
  """The window ending at `step`: the console line and the TensorBoard scalars."""
  progress.window(timed, seconds, {
      "loss": f"{summary['loss']:.3f}", "lr": f"{summary['learning_rate']:.2e}",
      **({"tok/s": f"{summary['target_tokens_per_s']:,.0f}"} if timed else {}),
      **({"mfu": f"{summary['mfu']:.1%}"} if "mfu" in summary else {})})
  writer.write(step, {**summary, "eta": progress.eta_text()})
