"""A trained model for inference: the workdir's config, vocabulary and (averaged) parameters."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from tfm import config as config_lib
from tfm import storage, tasks
from tfm.data import vocabulary
from tfm.eval.averaging import average_params
from tfm.experiment import Experiment
from tfm.train.checkpoint import best as best_lib
from tfm.train import checkpoint as ckpt_lib
from tfm.train import distributed
from tfm.train import mesh as mesh_lib


@dataclasses.dataclass
class Trained:
  experiment: Experiment  # built from the workdir's config.json, on this machine's devices
  params: Any  # sharded on experiment.mesh
  tokenizer: Any
  steps: list[int]  # the checkpoints whose parameters were averaged
  note: str | None = None  # how the mesh differs from the workdir's, when it does
  checkpoints_in: Any = None  # the directory whose checkpoints/ held them (the workdir, or its best/)
  best: dict | None = None  # the best checkpoint's {"metric", "value"} when that was loaded
  checkpoint: str = "last"  # which parameters: 'last' (averaged), 'best' or 'ema' (CHECKPOINTS)

  @property
  def config(self) -> config_lib.Config:
    return self.experiment.config

  @property
  def model(self):
    return self.experiment.model


def read_workdir_config(workdir: str) -> config_lib.Config:
  """The validated Config a `tfm train` run wrote to workdir/config.json."""
  try:
    values = ckpt_lib.read_config(workdir)
  except FileNotFoundError:
    raise ValueError(f"{workdir}/config.json not found: expected a workdir written by `tfm train`") from None
  except ValueError as e:
    raise ValueError(f"{workdir}/config.json: not valid JSON ({e}); expected the config `tfm train` "
                     "wrote") from None
  try:
    return config_lib.build(values)
  except ValueError as e:
    raise ValueError(f"{workdir}/config.json: {e}") from None


def mesh_here(config: config_lib.Config) -> tuple[config_lib.Config, str | None]:
  """`config` with a mesh this machine's devices take: the workdir's own where they do, else data
  parallel over all of them (a mesh is a layout; checkpoints restore onto any), and a note saying
  so. A model trained on fsdp x tensor = 4 devices is evaluated on one."""
  try:
    mesh_lib.mesh_shape(config.mesh, jax.device_count())
    return config, None
  except ValueError:
    m = config.mesh
    here = config.replace(mesh=dataclasses.replace(m, data=-1, fsdp=1, tensor=1))
    return here, (f"the workdir's mesh (data={m.data}, fsdp={m.fsdp}, tensor={m.tensor}) does not "
                  f"fit the {jax.device_count()} device(s) here: data parallel over them instead")


# --checkpoint's choices: the last checkpoints averaged (--average), the best checkpoint by
# train.best_metric, the EMA of the parameters the last checkpoint holds (train.ema_decay).
CHECKPOINTS = ("last", "best", "ema")


def load_trained(workdir: str, average: int | None = None, checkpoint: str = "last") -> Trained:
  """Loads workdir/config.json, the vocabulary and the mean of the last `average` checkpoints
  (default train.average_checkpoints; 1 = the latest only), sharded on this machine's mesh
  (`mesh_here`); checkpoint='best': the run's best checkpoint alone (train.best_metric,
  tfm/train/checkpoint/best.py); checkpoint='ema': the EMA of the parameters (train.ema_decay,
  tfm/train/ema.py) of the last checkpoint. Under launch.sh's multi-host modes the processes first
  join one JAX cluster, as `tfm train`'s do, so they evaluate together (the lead host writes the
  results)."""
  if checkpoint not in CHECKPOINTS:
    raise ValueError(f"--checkpoint={checkpoint!r}: expected one of {CHECKPOINTS}")
  distributed.initialize_from_env()
  config, note = mesh_here(read_workdir_config(workdir))
  if not ckpt_lib.available_steps(workdir):
    raise ValueError(f"no checkpoint in {workdir}/checkpoints: train first (`tfm train --workdir {workdir}`)")
  experiment = Experiment(config)
  if checkpoint == "ema":
    if average not in (None, 1):
      raise ValueError(f"--average={average} with --checkpoint=ema: the EMA is an average already, "
                       "read from the last checkpoint; drop --average")
    if config.train.ema_decay <= 0:
      raise ValueError(f"--checkpoint=ema: {workdir} kept no EMA of its parameters (its "
                       "train.ema_decay is 0; train with train.ema_decay=0.999, say)")
    step = ckpt_lib.available_steps(workdir)[-1]  # the EMA of the latest parameters
    params = ckpt_lib.restore_params(workdir, step, experiment.abstract_params, tree="ema")
    tokenizer = vocabulary.get_tokenizer(config.data, workdir, train=False,
                                           task=tasks.get(config.task))
    return Trained(experiment, params, tokenizer, [step], note, storage.path(workdir),
                   checkpoint="ema")
  if checkpoint == "best":
    if average not in (None, 1):
      raise ValueError(f"--average={average} with --checkpoint=best: the best checkpoint is one "
                       "checkpoint; drop --average")
    where = best_lib.best_dir(workdir)
    steps = ckpt_lib.available_steps(where) if (where / "checkpoints").exists() else []
    if not steps:
      raise ValueError(f"--checkpoint=best: {workdir} kept no best checkpoint (its "
                       f"train.best_metric is {config.train.best_metric!r}; train with "
                       "train.best_metric=dev_ppl or dev_bleu)")
    params = ckpt_lib.restore_params(where, steps[-1], experiment.abstract_params)
    record = best_lib.read_record(workdir) or {}
    value = dict(record.get("history", [])).get(steps[-1])
    tokenizer = vocabulary.get_tokenizer(config.data, workdir, train=False,
                                           task=tasks.get(config.task))
    return Trained(experiment, params, tokenizer, [steps[-1]], note, where,
                   {"metric": record.get("metric"), "value": value}, checkpoint="best")
  average = config.train.average_checkpoints if average is None else average
  ended = best_lib.stopped(workdir)  # an early-stopped run's last checkpoint ends its series
  params, steps = average_params(workdir, experiment.abstract_params, average,
                                 period=config.train.checkpoint_every,
                                 final_step=ended["step"] if ended else config.train.steps)
  tokenizer = vocabulary.get_tokenizer(config.data, workdir, train=False,
                                           task=tasks.get(config.task))
  return Trained(experiment, params, tokenizer, steps, note, storage.path(workdir))
