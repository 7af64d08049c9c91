"""The training loop: an Experiment's step over the data, with dev loss, dev BLEU and checkpoints.

One loop and one step for every task (config.task): translation pairs packed into rows, or for
'lm' and 'mlm' a stream of monolingual texts cut into rows (mlm's masked), which the same loss
scores (tfm/train/loss.py: real target tokens; an mlm batch's targets are 0 but at its masked
positions). What differs is the batches and what evaluation reports (tfm/eval/dev_loss.py: lm adds
the per-word perplexity; lm and mlm have no dev BLEU, so eval.bleu_every is ignored for them).

  config.data  -> tokenizer, per-host packed batches (in this process or, with train.input=process,
                  one of their own: train_batches), prefetched onto the mesh by a thread
  Experiment   -> mesh, rules, model, optimizer, sharded state, the jitted steps (tfm/experiment.py)
  state:  restored from the workdir's latest readable checkpoint (with the data iterator's position),
          else initialized directly in its shards (or from another run: train.init_from)
  loop:   tfm/train/runner.py's run_steps: step (one jit, state donated; the first one's
          compilation timed and shown) ... every
          train.log_every steps the only host sync: metrics fetched, non-finite updates checked,
          a console line (step/total, ETA, MFU on accelerators) and the figures to the run's
          trackers (train.trackers: TensorBoard by default, MLflow, W&B; tfm/train/trackers/__init__.py);
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
import logging
import os
import sys
from typing import Sequence

import jax

from tfm import logs, tasks
from tfm.config import Config
from tfm.data import batch_process, bucketing, pipeline, prefetch, sources, vocabulary
from tfm.decode.text import source_limit
from tfm.eval.dev_bleu import DevBleu
from tfm.eval.dev_loss import DevLoss
from tfm.experiment import Experiment
from tfm.model.params import parameter_count
from tfm.train import checkpoint as ckpt_lib
from tfm.train import backend, distributed, runner, stack, trackers
from tfm.train.checkpoint import best as best_lib
from tfm.train import init_from as init_from_lib
from tfm.train.cadence import Cadence
from tfm.train.metrics_writer import MetricsWriter
from tfm.train.preemption import Preemption
from tfm.train.progress import Progress
from tfm.train.step import member_sharding
from tfm.train.workdir import Workdir

logger = logging.getLogger(__name__)


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
    vocabulary.get_tokenizer(config.data, workdir, source=source,
                                train=not ckpt_lib.available_steps(workdir),
                             task=tasks.get(config.task))
  distributed.barrier("tfm-data-ready")
  if not lead:
    sources.prepare(source, create_data_dir=True)  # the lead checked that the path exists
  tokenizer = vocabulary.get_tokenizer(config.data, workdir, task=tasks.get(config.task))
  vocabulary.check_size(config.data, tokenizer.vocab_size, config.model.vocab_size,
                         tokenizer.sentinels)
  distributed.barrier("tfm-data-everywhere")
  return tokenizer


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
  # lm, mlm: a stream of texts cut into rows (mlm: then masked), which the batcher's state resumes
  keywords = dict(process_index=jax.process_index(), process_count=jax.process_count(),
                  row_multiple=exp.batch_row_multiple, task=tasks.get(config.task))
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


def _restore(checkpointers: list, exps: list, iterators: list) -> tuple[list, int]:
  """(each run's restored (state, data state, step) or None, the step they resume from: 0 where
  none has a checkpoint). A stack's members restore the newest step all of them hold (0 where
  there is none): their asynchronous saves of one step end apart, so a kill in between leaves
  some members a step ahead. Their checkpoints after that step are set aside (`<step>.ahead`) and
  written again as the stack reaches them, so every member's series is the stack's. A member
  whose checkpoint at that step cannot be read falls back to an older one, and the others follow
  it down."""
  held = [set(ck.all_steps()) for ck in checkpointers]
  newest = max(set.intersection(*held) | {0}) if len(held) > 1 else None
  while True:
    restored = [ck.restore(e.abstract_state, accept=_data_position(it), newest=newest)
                for ck, e, it in zip(checkpointers, exps, iterators)]
    steps = {0 if r is None else r[2] for r in restored}
    if len(steps) == 1:
      break
    newest = min(steps)  # a member fell back past a bad checkpoint: the others follow
  start = steps.pop()
  if len(checkpointers) > 1:
    for ck in checkpointers:
      ahead = ck.set_aside_after(start)
      if ahead:
        logger.warning("%s: checkpoint(s) %s ahead of the step every member of the stack holds "
                       "(%d): set aside as <step>.ahead, to be written again", ck.directory, ahead,
                       start)
  return restored, start


def _train(configs: list[Config], held: list[Workdir], log: logs.WorkdirLog, stream,
           preemption: Preemption):
  workdirs = [os.fspath(h.path) for h in held]
  for h, c in zip(held, configs):
    h.check_config(c.to_dict())  # before anything is written: a resume is the same model
  if distributed.is_lead_host():  # the trackers answer (train.trackers), before anything is written
    for c, w in zip(configs, workdirs):
      trackers.check(c.train, w)
  exps = [Experiment(c) for c in configs]
  config, exp = configs[0], exps[0]
  members = len(configs) if len(configs) > 1 else None  # a stack's member count
  if members is not None and config.train.patience:
    raise ValueError(f"config key train.patience ({config.train.patience}): early stopping ends "
                     "one run, and a stack (--seeds) steps its runs together; train them alone, "
                     "or set train.patience=0")
  # A stack's model and step: built from the members' largest dropout rates (tfm/train/stack.py).
  stacked = None if members is None else Experiment(stack.structure_config(configs))
  source_vocab = {k: init_from_lib.share_vocabulary(c, w)  # a run from another: the source's
                  for k, (c, w) in enumerate(zip(configs, workdirs))
                  if c.train.init_from and not ckpt_lib.available_steps(w)}  # a resume: its own
  tokenizers = [prepare_data(config, exp.data_source, workdirs[0])]
  for c, e, w in zip(configs[1:], exps[1:], workdirs[1:]):  # a stack's other members: the first's
    vocabulary.take(vocabulary.path_of(config.data, workdirs[0], task=tasks.get(config.task)),
                    c.data, w, workdirs[0], "a stack's members share one vocabulary",
                    task=tasks.get(c.task))
    tokenizers.append(prepare_data(c, e.data_source, w))
  for k, sha256 in source_vocab.items():
    init_from_lib.check_tokenizer(configs[k], tokenizers[k], sha256)
  # The members share the evaluation sets and the model; a member's loss is smoothed as its own.
  # Built before the workdir gets a checkpoint directory or config.json: a set that cannot be
  # scored (an lm / mlm set with no text) is refused with nothing written.
  tokenizer = tokenizers[0]
  eval_sets = exp.data_source.eval_set_names  # data.eval_sets; ('dev',) by default
  evaluate_dev = [{name: DevLoss(config.data, exp.data_source, tokenizer, e.eval_step,
                                 exp.batch_sharding, split=name, row_multiple=exp.batch_shards,
                                 task=tasks.get(config.task))
                   for name in eval_sets} for e in exps]
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
      checkpointer.peers = [c for c in checkpointers if c is not checkpointer]  # a stack's
    restored, start = _restore(checkpointers, exps, iterators)
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
    writers = [cleanup.enter_context(MetricsWriter(w, progress, total_steps=tc.steps, name=n,
                                                   config=c))
               for w, n, c in zip(workdirs, names, configs)]
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
    decode = None
    if cadence.bleu_every:  # translation only: lm and mlm have no dev BLEU
      translate = exp.translate_fn(eos_id=tokenizer.eos_id)
      decode = {name: DevBleu(config.data, exp.data_source, tokenizer, translate,
                              batch_size=exp.decode_rows(config.eval.batch_size), split=name,
                              limit=config.eval.bleu_examples, compounds=config.eval.compounds,
                              max_input_length=source_limit(config.model,
                                                            config.eval.max_extra_length))
                for name in eval_sets}
    runs = [runner.Run(w, wr, ck, *_best(tc, w, start, exp.choices.saves == "background", cleanup))
            for w, wr, ck in zip(workdirs, writers, checkpointers)]
    state = runner.run_steps(runner.StepRunner(
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
