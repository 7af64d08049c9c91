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
          counts, dev loss / perplexity (and dev BLEU every eval.bleu_every), for each
          evaluation set of data.eval_sets under its name (the dev split as 'dev' by default);
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
from typing import Any, Callable, Sequence

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
from tfm.train import backend, distributed, stack
from tfm.train import best as best_lib
from tfm.train import init_from as init_from_lib
from tfm.train import flops as flops_lib
from tfm.train.cadence import Cadence
from tfm.train.metrics_writer import MetricsWriter
from tfm.train.preemption import Preemption
from tfm.train.progress import Progress
from tfm.train.trace import ProfileTrace
from tfm.train.step import member_sharding
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


def _share_vocabulary(config: Config, first: str, workdir: str) -> None:
  """A stack member's vocabulary, where it lives in its workdir (data.vocab_dir unset): the first
  member's, which its data would train again (members share their data but the order)."""
  if config.data.vocab_dir is None and distributed.is_lead_host():
    name = tokenizer_lib.vocab_filename(config.data)
    source, target = storage.path(first) / name, storage.path(workdir) / name
    if source.exists() and not target.exists():
      storage.write_atomically(target, source.read_bytes())


def train(config: Config, workdir: str, stream=None):
  """Trains (or resumes) the experiment `config` in `workdir`; returns the final TrainState.
  stream: where the progress lines go (default: sys.stdout as it is when called)."""
  return _run([config], [workdir], stream)[0]


def train_stack(configs: Sequence[Config], workdirs: Sequence[str], stream=None) -> list:
  """Trains (or resumes) runs that differ only in their seeds, dropout rates and label smoothing
  as one stack (tfm/train/stack.py), each into its own workdir as its solo run would be; returns
  each run's final TrainState."""
  stack.check_members(configs)
  if len(set(map(os.path.abspath, workdirs))) != len(configs):
    raise ValueError(f"a stack of {len(configs)} runs needs as many distinct workdirs, got "
                     f"{list(workdirs)}")
  return _run(list(configs), list(workdirs), stream)


def _run(configs: list[Config], workdirs: list[str], stream) -> list:
  stream = stream or sys.stdout
  preemption = Preemption()  # from the start: a SIGTERM during set-up still ends with a checkpoint
  try:
    distributed.initialize_from_env()
    for data in {c.data for c in configs}:  # bad text files: one line, before any workdir is made
      sources.check_text_files(sources.DataSource.of(data))
    with logs.workdir_log(jax.process_index()) as log, contextlib.ExitStack() as held:
      held_dirs = [held.enter_context(Workdir(w)) for w in workdirs]
      return _train(configs, held_dirs, log, stream, preemption)
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


def _restored_start(restored: list, workdirs: list[str]) -> int:
  """The step every member resumes from (0: none has a checkpoint); members of a stack at
  different steps cannot step together: one line names them."""
  steps = [None if r is None else r[2] for r in restored]
  if len(set(steps)) > 1:
    found = ", ".join(f"{w}: {'none' if s is None else s}" for w, s in zip(workdirs, steps))
    raise ckpt_lib.CheckpointError(f"the stack's runs have their latest checkpoints at different "
                                   f"steps ({found}); resume each alone, or train the stack into "
                                   "new workdirs")
  return steps[0] or 0


def _train(configs: list[Config], held: list[Workdir], log: logs.WorkdirLog, stream,
           preemption: Preemption):
  workdirs = [os.fspath(h.path) for h in held]
  for h, c in zip(held, configs):
    h.check_config(c.to_dict())  # before anything is written: a resume is the same model
  exps = [Experiment(c) for c in configs]
  config, exp = configs[0], exps[0]
  members = len(configs) if len(configs) > 1 else None  # a stack's member count
  if members is not None and config.train.patience:
    raise ValueError(f"config key train.patience ({config.train.patience}): early stopping ends "
                     "one run, and a stack (--seeds) steps its runs together; train them alone, "
                     "or set train.patience=0")
  # A stack's model and step: built from the members' largest dropout rates (tfm/train/stack.py).
  stacked = None if members is None else Experiment(stack.structure_config(configs))
  for c, w in zip(configs, workdirs):
    if c.train.init_from and not ckpt_lib.available_steps(w):  # a resume keeps its own
      init_from_lib.share_vocabulary(c, w)
  tokenizers = [prepare_data(config, exp.data_source, workdirs[0])]
  for c, e, w in zip(configs[1:], exps[1:], workdirs[1:]):  # a stack's other members
    _share_vocabulary(c, workdirs[0], w)
    tokenizers.append(prepare_data(c, e.data_source, w))
  tc = config.train
  with contextlib.ExitStack() as cleanup:  # closed in reverse order, whatever happens
    iterators = [train_batches(c, t, e) for c, t, e in zip(configs, tokenizers, exps)]
    for iterator in iterators:
      cleanup.callback(iterator.close)
    checkpointers = [ckpt_lib.Checkpointer(w, keep=tc.keep_checkpoints, period=tc.checkpoint_every,
                                           final_step=tc.steps,
                                           async_save=exp.choices.saves == "background")
                     for w in workdirs]
    for checkpointer in checkpointers:
      cleanup.callback(checkpointer.close)
      cleanup.callback(checkpointer.wait)
    restored = [ck.restore(e.abstract_state, accept=_data_position(it))
                for ck, e, it in zip(checkpointers, exps, iterators)]
    start = _restored_start(restored, workdirs)
    states = [r[0] if r is not None else init_from_lib.start_state(c, e, w) if c.train.init_from
              else e.init_state() for c, e, w, r in zip(configs, exps, workdirs, restored)]
    state = states[0] if members is None else stack.stack_states(states, exp.state_shardings)
    for h, c in zip(held, configs):
      h.commit(c.to_dict())  # config.json only now that the state is known to fit it
    log.publish(*(h.path for h in held))  # and the log file (every host's, into WORKDIR/logs/)
    cadence = Cadence.of(config)
    progress = Progress(tc.steps, start, stream, evals_left=cadence.evaluations_left(start))
    cleanup.callback(progress.close)
    names = [None] * len(workdirs) if members is None else [os.path.basename(w) for w in workdirs]
    writers = [MetricsWriter(w, progress, total_steps=tc.steps, name=n)
               for w, n in zip(workdirs, names)]
    for writer in writers:
      cleanup.callback(writer.close)
    say = writers[0].text
    say(f"tfm: {backend.describe()}; {exp.choices.describe()}")
    if backend.unused_accelerator():
      say(f"tfm: {backend.unused_accelerator()}")
    say(f"tfm: {parameter_count(exp.abstract_state.params):,} parameters; mesh "
        f"{dict(exp.mesh.shape)}; {jax.process_count()} host(s), {jax.device_count()} device(s)")
    if members is not None:
      say(f"tfm: a stack of {members} runs, one step for all (tfm/train/stack.py): "
          + ", ".join(f"{n} (train.seed={c.train.seed}, data.shuffle_seed={c.data.shuffle_seed})"
                      for n, c in zip(names, configs)))
    # Batches (packed, bucketed, dev) are rounded up to split over the hosts and the step.
    rows_note = exp.rows_note(jax.process_count())
    if rows_note:
      say(f"tfm: {rows_note}")
    if any(r is not None for r in restored):
      for w in workdirs:
        say(f"tfm: resumed from step {start} in {w}")
    elif tc.init_from and jax.process_index() == 0:
      for w in workdirs:
        say(f"tfm: {init_from_lib.describe(w)}")
    ended = best_lib.stopped(workdirs[0]) if members is None else None
    if ended is not None and start >= ended["step"]:
      say(f"tfm: this run stopped early at step {ended['step']} ({ended['reason']}): finished")
      return [state]
    batches = (prefetch.prefetch_to_device(iterators[0], exp.batch_sharding) if members is None
               else prefetch.prefetch_to_device(stack.MemberBatches(iterators),
                                                member_sharding(exp.batch_sharding)))
    cleanup.callback(batches.close)
    # The members share the evaluation sets and the model; a member's loss is smoothed as its own.
    tokenizer = tokenizers[0]
    eval_sets = exp.data_source.eval_set_names  # data.eval_sets; ('dev',) by default
    evaluate_dev = [{name: DevLoss(config.data, exp.data_source, tokenizer, e.eval_step,
                                   exp.batch_sharding, split=name, row_multiple=exp.batch_shards)
                     for name in eval_sets} for e in exps]
    decode = None
    if config.eval.bleu_every:
      translate = exp.translate_fn(eos_id=tokenizer.eos_id)
      decode = {name: DevBleu(config.data, exp.data_source, tokenizer, translate,
                              batch_size=exp.decode_rows(config.eval.batch_size), split=name,
                              limit=config.eval.bleu_examples, compounds=config.eval.compounds)
                for name in eval_sets}
    runs = [Run(w, wr, ck, *_best(tc, w, start, exp.choices.saves == "background", cleanup))
            for w, wr, ck in zip(workdirs, writers, checkpointers)]
    state = run_steps(StepRunner(
        config=config, train_step=(exp.train_step if members is None else
                                   stacked.stacked_train_step(
                                       members, stack.MemberScalars.of(configs))),
        batches=batches, runs=runs, state_shardings=exp.state_shardings,
        evaluate_dev=lambda params, k, name: evaluate_dev[k][name](params),
        evaluate_bleu=None if decode is None else lambda params, k, name: decode[name](params),
        preemption=preemption,
        progress=progress, eval_sets=eval_sets), state, start)
    return [state] if members is None else [
        stack.member_state(state, k, exp.state_shardings) for k in range(members)]


def _best(tc, workdir: str, start: int, async_save: bool, cleanup: contextlib.ExitStack) -> tuple:
  """(BestTracker, the Checkpointer of WORKDIR/best keeping one) of a run with a
  train.best_metric, else (None, None)."""
  if tc.best_metric == "none":
    return None, None
  checkpointer = ckpt_lib.Checkpointer(best_lib.best_dir(workdir), keep=1, async_save=async_save)
  cleanup.callback(checkpointer.close)
  cleanup.callback(checkpointer.wait)
  return best_lib.BestTracker(workdir, tc.best_metric, tc.patience, start), checkpointer


@dataclasses.dataclass(frozen=True)
class Run:
  """One run of the loop (a stack's member, or the run alone): its workdir, its metrics writer
  and its checkpointer (save(step, state, data_state), wait()); with train.best_metric, its
  BestTracker and the checkpointer of its best checkpoint (tfm/train/best.py)."""
  workdir: str
  writer: MetricsWriter
  checkpointer: Any
  best: Any = None
  best_checkpointer: Any = None


def _draw_curves(writer: MetricsWriter, workdir: str) -> None:
  """WORKDIR/curves.png (tfm plot's figure) from every run's events so far; lead host, where
  the events are written (not without tensorboardX: metrics_writer.py)."""
  if jax.process_index() == 0 and writer.tensorboard is not None:
    writer.sync()
    curves.write_png([workdir], storage.path(workdir) / "curves.png")


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
  """Steps from `step` to train.steps (or a preemption); returns the last state. Cadence.of(config)
  says which periodic actions a step is due for; each run gets its own lines, checkpoints and
  evaluations."""
  r = runner
  cadence = Cadence.of(r.config)
  tc = r.config.train
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
      figures = [{} for _ in r.runs]  # this step's dev evaluations of each run, by metric
      if due.evaluate:
        stats = r.per_run(r.batches.stats())  # the pipeline so far (it reads a few batches ahead)
        for k, run in enumerate(r.runs):
          run.writer.write(step, {s: stats[k][s] for s in DATA_STATS if s in stats[k]},
                           prefix="data")
          for name in r.eval_sets:
            with r.progress.timed(f"evaluating {name} loss", evaluation=True) as timed:
              dev = r.evaluate_dev(r.member_params(state.params, k), k, name)
            run.writer.write(step, {**dev, "eval_s": timed["seconds"]}, prefix=name)
            if name == r.eval_sets[0]:  # the best checkpoint's set: 'dev' by default
              figures[k]["dev_ppl"] = dev
      if due.decode:
        for k, run in enumerate(r.runs):
          for name in r.eval_sets:
            with r.progress.timed(f"decoding {name} BLEU", evaluation=True) as timed:
              bleu = r.evaluate_bleu(r.member_params(state.params, k), k, name)
            run.writer.write(step, {**bleu, "eval_s": timed["seconds"]}, prefix=name)
            if name == r.eval_sets[0]:
              figures[k]["dev_bleu"] = bleu
      stop_early = _keep_best(r, state, step, figures, due.last)
      if tc.curves and (due.evaluate or due.decode):
        for run in r.runs:
          _draw_curves(run.writer, run.workdir)
      if due.flush:
        window.restart()
      if stop_early:
        break
  return state


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
