"""How a run executes on a platform: four choices that change how it runs, not what it computes.

  train.input         where the training batches are made: "inline" (this process, a thread) or
                      "process" (a spawned process of their own: tfm/data/batch_process.py)
  train.saves         how a checkpoint is written: "background" (Orbax's asynchronous write: the
                      collectives and the device-to-host copy on the training thread, in step
                      order, only the host's write to storage behind the next steps) or "sync"
                      (the step after a save waits for the write)
  train.guard         the non-finite guard's form (tfm/train/step.py: guarded): "branch" (lax.cond:
                      the update runs only when kept) or "select" (jnp.where: no control flow)
  train.dropout_prng  the dropout masks' generator (tfm/train/step.py: dropout_key): "threefry" or
                      "rbg" (XLA's RngBitGenerator)

Each key takes "auto" (the default) or one of its forms. "auto" is AUTO[platform]: the form that
platform's measured figures chose, and the CPU's where no figure exists for it, so that a
platform only ever runs a form that was measured there or that the CPU suite runs on every test.
Every form runs in the CPU suite, on 8 devices and on 2 processes (tests/train/test_multidevice.py,
tests/integration/test_multiprocess_choices.py), so what a GPU cluster gets is what the tests ran.

The figures behind AUTO:
  cpu  inline input and threefry masks: the published CPU results were trained so; background
       saves (the loop added nothing measurable at the quickstart's cadence:
       experiments/results/loop); branch: XLA:CPU runs a conditional on the host anyway, and
       skips the update's pass on a refused step.
  tpu  `tfm plan` of base on v5e:4x4, compiled on a CPU (experiments/results/tpu_choices): 1.72 GiB
       a chip and an estimated 17.2% MFU with branch and threefry, 1.86 GiB and 15.4% with
       select, 3.33 GiB and 9.6% with rbg: the CPU's forms. input and saves: no TPU figure, the
       CPU's.
  gpu  GPU_MEASURED: what the rule of experiments/gpu/forms.py chose from a GPU's figures (select,
       rbg and the batch process timed against the CPU's forms, the GPU queue's `forms` job;
       experiments/gpu_queue.py --import_from writes the line); the CPU's for every key it holds
       none of (until the job has run: all of them).
"""

from __future__ import annotations

import dataclasses

INPUTS = ("inline", "process")
SAVES = ("background", "sync")
GUARDS = ("branch", "select")
DROPOUT_PRNGS = ("threefry", "rbg")
KEYS = {"input": INPUTS, "saves": SAVES, "guard": GUARDS, "dropout_prng": DROPOUT_PRNGS}

CPU = {"input": "inline", "saves": "background", "guard": "branch", "dropout_prng": "threefry"}
GPU_MEASURED: dict[str, str] = {}  # written by experiments/gpu_queue.py --import_from (forms)
AUTO = {"cpu": CPU, "tpu": dict(CPU), "gpu": {**CPU, **GPU_MEASURED}}


@dataclasses.dataclass(frozen=True)
class Choices:
  """The four forms a run executes with on its platform (none is "auto")."""

  input: str
  saves: str
  guard: str
  dropout_prng: str

  def describe(self) -> str:
    return ", ".join(f"train.{k}={v}" for k, v in dataclasses.asdict(self).items())


def platform_name(platform: str) -> str:
  """AUTO's key for a jax platform name (jax says "gpu", "cuda" or "rocm" for GPUs)."""
  return "gpu" if platform in ("gpu", "cuda", "rocm") else platform


def resolve(train, platform: str, stacked: bool = False) -> Choices:
  """The Choices of a train section (TrainConfig) on `platform`: each "auto" key as AUTO says for
  that platform (the CPU's for a platform AUTO does not know). stacked: for a stack's step
  (tfm/train/stack.py), whose dropout masks only threefry draws member by member (stack.why_alone
  refuses an explicit rbg)."""
  auto = dict(AUTO.get(platform_name(platform), CPU))
  if stacked:
    auto["dropout_prng"] = "threefry"
  return Choices(**{key: auto[key] if getattr(train, key) == "auto" else getattr(train, key)
                    for key in KEYS})
