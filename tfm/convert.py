"""A workdir in the other layer layout: tfm convert --workdir A --out B --scan_layers true|false.

B gets A's config with model.scan_layers changed, every checkpoint of A with its TrainState converted
(parameters and Adam's moments stacked or unstacked: tfm/model/scan_convert.py; step, rng and
counters as they are), A's data-iterator states unchanged, A's best checkpoint (WORKDIR/best:
converted as the others, with its record best.json), A's stopped.json (an early-stopped run stays
finished) and A's vocabulary when A holds it. So `tfm eval` (with --checkpoint best too),
`tfm translate` and `tfm train` (resuming, or refusing to train past an early stop) work on B as
on A, with the other layout. Logs, TensorBoard events and evaluation results stay in A. A is only
read.

Each checkpoint is restored onto this machine's mesh (verified against its checksums), converted
by one jit whose outputs are laid out on B's shardings (no host gathers the state), and saved before
the next is read, so the peak is about two train states. Where A's mesh does not fit the devices
here (trained on a pod, converted on a laptop), the conversion runs data parallel over them
(`mesh_here`; checkpoints restore onto any mesh) and B's config keeps A's mesh.
"""

from __future__ import annotations

import dataclasses
import logging

import jax
from etils import epath

from tfm import storage, tasks
from tfm.config import Config
from tfm.data import vocabulary
from tfm.eval.restore import mesh_here
from tfm.experiment import Experiment
from tfm.model.scan_convert import convert_layers
from tfm.train import checkpoint as ckpt_lib
from tfm.train import workdir as workdir_lib
from tfm.train.checkpoint import best as best_lib
from tfm.train.workdir import Workdir

log = logging.getLogger(__name__)


def converted_config(config: Config, scan_layers: bool) -> Config:
  """`config` with model.scan_layers = scan_layers (validated again)."""
  return config.replace(model=dataclasses.replace(config.model, scan_layers=scan_layers))


def _convert_series(workdir, out, steps: list[int], source: Experiment, convert) -> None:
  """Each checkpoint `steps` of workdir (a run's, or its best/) restored, converted and saved in
  `out` before the next is read."""
  writer = ckpt_lib.Checkpointer(out, keep=len(steps), async_save=False)
  for step in steps:
    try:
      state, payload = ckpt_lib.restore_state(workdir, step, source.abstract_state)
    except Exception as e:  # noqa: BLE001 -- said in one line, naming the checkpoint
      raise ValueError(f"--workdir {workdir}: checkpoint {step} cannot be read "
                       f"({type(e).__name__}: {' '.join(str(e).split())})") from e
    writer.save(step, convert(state), data_payload=payload)
    writer.wait()
    log.info("converted checkpoint %d of %s", step, workdir)
    del state
  writer.close()


def interrupted(out) -> dict | None:
  """The lock owner of directory `out` when `out` is what a conversion stopped before it finished
  left (killed: its process on this host gone): no config.json (convert_workdir's last write),
  nothing but what a conversion writes (its lock, checkpoints/, best/, stopped.json, a vocabulary
  spm_*.model), and a lock whose process is gone. None otherwise: anything else is no conversion's
  to remove (nor on several hosts, which do not share one host's view of the lock's process)."""
  if jax.process_count() > 1:
    return None
  names = {p.name for p in epath.Path(out).iterdir()}
  ours = {workdir_lib.LOCK, "checkpoints", best_lib.BEST, best_lib.STOPPED}
  if "config.json" in names or workdir_lib.LOCK not in names or any(
      n not in ours and not (n.startswith("spm_") and n.endswith(".model")) for n in names):
    return None
  return workdir_lib.dead_owner(out)


def convert_workdir(workdir: str, out: str, scan_layers: bool,
                    config: Config) -> tuple[list[int], str | None]:
  """Writes workdir's checkpoints into the new workdir `out` with model.scan_layers = scan_layers.

  config: workdir's own (validated) config. Returns the converted steps and mesh_here's note (None
  when workdir's mesh fits the devices here). Raises ValueError if the layout is already
  scan_layers, if workdir has no checkpoint, or if out exists and is not empty (unless it is what
  a conversion killed before it finished left, `interrupted`: then it is converted again from the
  start); on any failure out is left as it was (a new directory is removed again).
  """
  if config.model.scan_layers == scan_layers:
    raise ValueError(f"--workdir {workdir}: its checkpoints already have model.scan_layers="
                     f"{scan_layers}; nothing to convert")
  steps = ckpt_lib.available_steps(workdir)
  if not steps:
    raise ValueError(f"no checkpoint in {workdir}/checkpoints: nothing to convert")
  if epath.Path(out).exists() and any(epath.Path(out).iterdir()):
    killed = interrupted(out)
    if killed is None:
      raise ValueError(f"--out {out}: exists and is not empty; expected a new directory")
    log.warning("--out %s: what a tfm convert (pid %s, since %s) left when it was stopped before "
                "it finished; converting again", out, killed.get("pid"), killed.get("since"))
    epath.Path(out).rmtree()  # a new directory again: a failure below leaves nothing behind
  here, note = mesh_here(config)
  source, dest = Experiment(here), Experiment(converted_config(here, scan_layers))
  convert = jax.jit(lambda state: convert_layers(state, scan_layers),
                    out_shardings=dest.state_shardings)
  with Workdir(out) as w:
    _convert_series(workdir, out, steps, source, convert)
    best_steps = ckpt_lib.available_steps(best_lib.best_dir(workdir))
    if best_steps:  # the best checkpoint by train.best_metric, apart from the series
      _convert_series(best_lib.best_dir(workdir), best_lib.best_dir(out), best_steps, source,
                      convert)
    if jax.process_index() == 0:  # local or gs://
      kept = [best_lib.best_dir(workdir) / best_lib.RECORD, storage.path(workdir) / best_lib.STOPPED]
      if config.data.vocab_dir is None:  # the vocabulary lives in the workdir: B needs its copy
        kept.append(storage.path(workdir) / vocabulary.vocab_filename(config.data,
                                                                          tasks.get(config.task)))
      for path in kept:
        if path.exists():
          there = storage.path(out) / path.relative_to(storage.path(workdir))
          storage.write_atomically(there, path.read_bytes())
    w.commit(converted_config(config, scan_layers).to_dict())  # A's mesh, whatever ran here
  return steps, note
