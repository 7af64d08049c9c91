"""A run that starts from another run's parameters (train.init_from = that run's workdir).

The new run's state is a fresh one (train.seed's init, step 0, a fresh optimizer and learning-rate
schedule) with the parameters replaced by those of the source's last checkpoint, or of its best
(train.init_checkpoint='best', tfm/train/checkpoint/best.py); train.init_optimizer=True takes the source's
whole state instead: its Adam moments, its step (the schedule and the dropout key go on from it)
and its parameters. The model must be the same shape: the first parameter (or optimizer array)
whose shape differs, or that one side lacks, is named with both shapes in one line.
Across tasks: a run starts from one of another task on the same model.architecture (a translation
run from a span-corruption run, T5's pretraining; both encoder-decoders), taking its vocabulary;
a span run's sentinels stay the top ids of a translation run started from it (data.sentinels),
never in its data. Another architecture is refused in one line before anything is written. A run that
keeps an EMA of its parameters (train.ema_decay) starts it from the parameters it starts from, or,
with init_optimizer, takes the source's EMA where the source kept one.
WORKDIR/init_from.json records where the run started ({"workdir", "checkpoint", "step",
"optimizer"}). Only a run without checkpoints of its own starts so: a resume continues its own
checkpoints.
"""

from __future__ import annotations


import jax
from etils import epath

from tfm import config as config_lib
from tfm import storage, tasks
from tfm.data import vocabulary
from tfm.train.checkpoint import best as best_lib
from tfm.train import checkpoint as ckpt_lib
from tfm.train.checkpoint import compat as checkpoint_compat
from tfm.train.ema import init_ema

RECORD = "init_from.json"
KEY = "config key train.init_from"


def source_checkpoint(source: str, which: str) -> tuple[epath.Path, int]:
  """(the directory whose checkpoints/ holds it, step) of a source run's 'last' or 'best'
  checkpoint; raises ValueError naming train.init_from where there is none."""
  where = storage.path(source) if which == "last" else best_lib.best_dir(source)
  steps = ckpt_lib.available_steps(where) if (where / "checkpoints").exists() else []
  if not steps:
    what = "no checkpoint" if which == "last" else "no best checkpoint (train.best_metric)"
    raise ValueError(f"config key train.init_from: {source} holds {what} in {where / 'checkpoints'}; "
                     "expected the workdir of a trained run")
  return where, steps[-1]


def share_vocabulary(config, workdir: str) -> str:
  """The source's vocabulary for a run that starts from it (tfm/data/vocabulary.py's from_run);
  returns its SHA-256, which the tokenizer the run prepares must have (check_tokenizer). A source
  of another architecture, or whose vocabulary reserves other ids above its pieces, is refused
  first (`check_source`), before anything is written."""
  source = config.train.init_from
  try:
    their_config = config_lib.build(ckpt_lib.read_config(source))
  except (OSError, ValueError) as e:
    raise ValueError(f"{KEY}: {source}/config.json cannot be read as a run's config "
                     f"({' '.join(str(e).split())}); expected the workdir of a trained "
                     "run") from None
  check_source(config, their_config)
  return vocabulary.from_run(source, their_config.data, tasks.get(their_config.task), config.data,
                             workdir, tasks.get(config.task), KEY)


def check_source(config, theirs) -> None:
  """Raises ValueError (one line naming train.init_from) unless the source run's config `theirs`
  can start the run of `config`: the same model.architecture (a decoder-only lm, an encoder-only
  mlm and an encoder-decoder are other parameter trees, and no mapping between them is made
  here), and a vocabulary with as many ids above its pieces (a span run's sentinels: a
  translation run started from one keeps them, data.sentinels, so that its ids and
  model.vocab_size are the source's). Shapes are compared later, parameter by parameter."""
  source = config.train.init_from
  their_task, task = tasks.get(theirs.task), tasks.get(config.task)
  arch, their_arch = config.model.architecture, theirs.model.architecture
  if arch != their_arch:
    raise ValueError(f"{KEY}: {source} is a run of task {their_task.name!r} on "
                     f"model.architecture={their_arch!r}, this run's is {arch!r}: another "
                     "parameter tree, which tfm maps to no other; start from a run of "
                     f"{arch!r}")
  theirs_n, ours_n = their_task.sentinels(theirs.data), task.sentinels(config.data)
  if theirs_n != ours_n:
    fix = (f"set data.sentinels={theirs_n} (kept above the pieces, never in this run's data)"
           if task.keeps_sentinels else
           f"task {task.name!r} reserves its own {ours_n}; start from a run whose vocabulary "
           "holds as many")
    raise ValueError(f"{KEY}: {source}'s vocabulary (task {their_task.name!r}) holds {theirs_n} "
                     f"sentinel ids above its pieces and this run's {ours_n}, so the ids would "
                     f"differ; {fix}")


def check_tokenizer(config, tokenizer, sha256: str) -> None:
  """Raises ValueError unless the tokenizer a run from train.init_from prepared is its source's
  vocabulary (sha256: share_vocabulary's)."""
  vocabulary.check_same(tokenizer, sha256, config.train.init_from, "config key train.init_from")


def first_difference(saved: dict[str, tuple], wanted: dict[str, tuple]) -> str | None:
  """'NAME: SHAPE there, SHAPE here' for the first parameter (in name order) whose shapes differ
  between two {name: shape} maps (`absent` where one lacks it), else None."""
  for name in sorted(set(saved) | set(wanted)):
    if saved.get(name) != wanted.get(name):
      shape = lambda s: "absent" if s is None else str(s)
      return f"{name}: {shape(saved.get(name))} there, {shape(wanted.get(name))} here"
  return None


def start_state(config, experiment, workdir: str):
  """A fresh TrainState of `experiment` holding the parameters of config.train.init_from's chosen
  checkpoint; writes WORKDIR/init_from.json (lead host)."""
  source, which = config.train.init_from, config.train.init_checkpoint
  where, step = source_checkpoint(source, which)
  whole = config.train.init_optimizer
  state_dir = ckpt_lib.checkpoint_dir(where) / str(step) / ckpt_lib.STATE
  prefix = "" if whole else "params/"
  saved = {k[len(prefix):]: v for k, v in ckpt_lib.saved_shapes(state_dir).items()
           if k.startswith(prefix)}
  # The source's EMA (train.ema_decay) is read as it is saved, a tree like the parameters, and
  # kept where this run keeps one (init_optimizer), else dropped; this run's EMA starts from the
  # parameters it starts from otherwise.
  source_ema = any(k.startswith("ema/") for k in saved)
  abstract = experiment.abstract_state
  if whole:
    target = abstract.replace(ema=abstract.params if source_ema else None)
  else:
    target = experiment.abstract_params
  wanted = ckpt_lib._shapes(target)  # pylint: disable=protected-access
  optimizer = checkpoint_compat.optimizer_difference(saved, wanted) if whole else None
  if optimizer:
    raise ValueError(f"{optimizer} ({source}, {which} checkpoint, step {step}): "
                     "train.init_optimizer=True takes the source's optimizer state, so it needs "
                     "the source's optimizer; set init_optimizer=False for a fresh one")
  differs = first_difference(saved, wanted)
  if differs:
    what = "array" if whole else "parameter"
    raise ValueError(f"config key train.init_from: {source} ({which} checkpoint, step {step}) is "
                     f"another model: {what} {differs}")
  if whole:
    state, _ = ckpt_lib.restore_state(where, step, target)
    if abstract.ema is None:
      state = state.replace(ema=None)
  else:
    params = ckpt_lib.restore_params(where, step, experiment.abstract_params)
    state = experiment.init_state().replace(params=params)
  if abstract.ema is not None and not (whole and source_ema):
    state = state.replace(ema=_ema_of(state.params, experiment.state_shardings.ema))
  if jax.process_index() == 0:
    storage.path(workdir).mkdir(parents=True, exist_ok=True)
    storage.write_json(storage.path(workdir) / RECORD,
                       {"workdir": str(storage.path(source)), "checkpoint": which, "step": step,
                        "optimizer": "source" if whole else "fresh"})
  return state


def _ema_of(params, shardings):
  """A fresh EMA of `params` (their float32 copy, tfm/train/ema.py) in `shardings`: new buffers,
  as the step donates the state's arrays."""
  return jax.jit(init_ema, out_shardings=shardings)(params)


def describe(workdir: str) -> str:
  """The line saying where a run started (its init_from.json)."""
  record = storage.read_json(storage.path(workdir) / RECORD)
  if record.get("optimizer") == "source":
    return (f"started from the state of {record['workdir']} ({record['checkpoint']} checkpoint, "
            f"step {record['step']}): its parameters, optimizer moments and schedule")
  return (f"started from the parameters of {record['workdir']} ({record['checkpoint']} checkpoint,"
          f" step {record['step']}), with a fresh optimizer and schedule")
