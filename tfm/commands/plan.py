"""`tfm plan`: will a config's train step fit a TPU topology, and how fast might it run?

  tfm plan --config configs/base.py --topology v5e:4x4 [--slices 2] [--config.mesh.fsdp=16] [--json]

Compiles the train step `tfm train` would run (same Experiment, same step, same batch rows) for the
topology's chips ahead of time with libtpu, on any machine, and prints per-chip memory against HBM,
fits yes/no, compiled FLOPs, a roofline step time, tokens/s and MFU (tfm/plan/step_plan.py,
tfm/plan/roofline.py). When the step does not fit, it compiles the most promising single changes
(tfm/plan/remedies.py) and says what each would take. --json prints one JSON object instead.
"""

from __future__ import annotations

import json

from absl import flags

from tfm.commands import UsageError, one_row
from tfm.train import platform_choices
from tfm.train.tpu_chips import GIB


def _step_choices(config) -> dict:
  """The forms the planned step compiles with on TPUs (train.guard and train.dropout_prng, "auto"
  resolved: tfm/train/platform_choices.py): each changes the step's memory and time."""
  choices = platform_choices.resolve(config.train, "tpu")
  return {"train.guard": choices.guard, "train.dropout_prng": choices.dropout_prng}


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_string("topology", None, "TPU topology, CHIP:XxY or CHIP:XxYxZ, e.g. v5e:4x4, "
                      "v5p:2x2x2 (chips: v4, v5e, v5p, v6e)", flag_values=fv)
  flags.DEFINE_integer("slices", 1, "number of such slices (multi-slice over the data-centre "
                       "network; mesh.data must be a multiple of it)", flag_values=fv)
  flags.DEFINE_integer("remedies", 3, "when the step does not fit, compile up to this many single "
                       "changes (mesh.fsdp, train.microbatches, model.remat) to find one that does",
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_boolean("json", False, "print one JSON object", flag_values=fv)


def _figures(plan, config) -> dict:
  """The JSON-ready figures of a StepPlan (compiled figures null when XLA refused the program)."""
  estimate = plan.estimate
  return dict(
      topology=plan.topology, chips=plan.chips, hosts=plan.hosts, device_kind=plan.device_kind,
      mesh=plan.mesh, microbatches=config.train.microbatches, remat=config.model.remat,
      choices=_step_choices(config),
      rows=plan.rows, length=plan.length, target_length=plan.target_length,
      tokens_per_step=plan.tokens_per_step,
      rows_note=plan.rows_note, fits=plan.fits, hbm_bytes=plan.hbm_bytes,
      bytes_per_chip=plan.bytes_per_chip,
      bytes=dict(params=plan.params_bytes, optimizer=plan.optimizer_bytes, batch=plan.batch_bytes,
                 other_state=plan.other_state_bytes, temporaries=plan.temp_bytes,
                 program=plan.program_bytes),
      memory_analysis=dict(arguments=plan.argument_bytes, outputs=plan.output_bytes,
                           aliased=plan.alias_bytes),
      out_of_memory=None if plan.oom is None else dict(
          message=plan.oom.message, usable_hbm_bytes=plan.oom.usable_hbm_bytes),
      flops_per_step=plan.flops_per_step, flops_per_chip=plan.flops_per_chip,
      model_flops_per_step=plan.model_flops_per_step,
      bytes_accessed_per_chip=plan.bytes_accessed_per_chip, compile_s=plan.compile_s,
      est_step_s=estimate and estimate.step_s, est_compute_s=estimate and estimate.compute_s,
      est_memory_s=estimate and estimate.memory_s, bound=estimate and estimate.bound,
      est_tokens_per_s=plan.est_tokens_per_s, est_mfu=plan.est_mfu,
      estimate_note=plan.estimate_note, xla_warnings=list(plan.xla_warnings))


def _remedy_figures(remedy) -> dict:
  out = dict(change=remedy.change, error=remedy.error)
  if remedy.plan is not None:
    p = remedy.plan
    out.update(fits=p.fits, bytes_per_chip=p.bytes_per_chip, rows=p.rows,
               est_step_s=p.estimate and p.estimate.step_s, est_mfu=p.est_mfu,
               estimate_note=p.estimate_note, compile_s=p.compile_s)
  return out


def _gib(n: float | None) -> str:
  return "?" if n is None else f"{n / GIB:.2f}"


def _remedy_line(remedy) -> str:
  if remedy.plan is None:
    return f"with {remedy.change}: does not compile ({remedy.error})"
  p = remedy.plan
  if not p.fits:
    return f"with {remedy.change}: ~{_gib(p.bytes_per_chip)} GiB per chip (still does not fit)"
  if p.estimate is None:
    return (f"with {remedy.change}: ~{_gib(p.bytes_per_chip)} GiB per chip (fits; step time "
            f"{p.estimate_note})")
  return (f"with {remedy.change}: ~{_gib(p.bytes_per_chip)} GiB per chip (fits; est. step "
          f"{p.estimate.step_s * 1e3:.1f} ms, MFU {p.est_mfu:.1%})")


def _print_human(plan, config, remedies):
  p = plan
  print(f"{p.topology}: {p.chips} x {p.device_kind} ({p.hosts} host(s)), mesh {p.mesh}, "
        f"train.microbatches={config.train.microbatches}, model.remat={config.model.remat}, "
        + ", ".join(f"{k}={v}" for k, v in _step_choices(config).items()))
  wide = (f"{p.length} tokens" if p.target_length == p.length
          else f"{p.length} input and {p.target_length} target tokens")
  print(f"batch: {p.rows} rows x {wide} = {p.tokens_per_step:,} target tokens per step")
  if p.rows_note:
    print(f"note: {p.rows_note}")
  rows = [("parameters", p.params_bytes), ("optimizer state", p.optimizer_bytes),
          ("batch + counters", p.batch_bytes + p.other_state_bytes),
          ("temporaries", p.temp_bytes), ("program", p.program_bytes),
          ("total", p.bytes_per_chip), ("HBM", p.hbm_bytes)]
  print(f"\n{'per chip':<18}{'GiB':>9}")
  for name, value in rows:
    print(f"  {name:<16}{_gib(value):>9}")
  print(f"fits: {'yes' if p.fits else 'NO'} ({p.bytes_per_chip / p.hbm_bytes:.0%} of HBM)")
  e = p.estimate
  if p.oom is not None:
    print(f"XLA: {p.oom.message}")
  else:
    print(f"\n{'compiled FLOPs':<22}{p.flops_per_chip / 1e12:.3f} TFLOP per chip, "
          f"{p.flops_per_step / 1e12:.3f} TFLOP per step (model: "
          f"{p.model_flops_per_step / 1e12:.3f})")
    print(f"{'HBM traffic':<22}{p.bytes_accessed_per_chip / 1e9:.2f} GB per chip")
  if p.oom is None and e is None:
    print(f"{'est. step time':<22}{p.estimate_note}")
  elif p.oom is None:
    print(f"{'est. step time':<22}{e.step_s * 1e3:.2f} ms ({e.bound} bound: compute "
          f"{e.compute_s * 1e3:.2f} ms, HBM {e.memory_s * 1e3:.2f} ms; no collectives)")
    print(f"{'est. tokens/s':<22}{p.est_tokens_per_s:,.0f} target tokens/s")
    print(f"{'est. MFU':<22}{p.est_mfu:.1%}")
  print(f"{'compile':<22}{p.compile_s:.1f} s")
  for warning in p.xla_warnings:
    print(f"XLA: {warning}")
  for remedy in remedies:
    print(_remedy_line(remedy))
  if not p.fits and not any(r.plan is not None and r.plan.fits for r in remedies):
    print("no single change tried fits: combine them, or use more chips (--remedies N tries more)")


def run(fv: flags.FlagValues, config):
  one_row(config, fv)
  if not fv.topology:
    raise UsageError("--topology is required, e.g. --topology=v5e:4x4")
  # pylint: disable=import-outside-toplevel  (jax and libtpu load only once the flags are good)
  from tfm.plan.remedies import try_remedies
  from tfm.plan.step_plan import plan_step
  from tfm.plan.topology import load_topology

  topology = load_topology(fv.topology, fv.slices)
  plan = plan_step(config, topology)
  remedies = [] if plan.fits else try_remedies(config, topology, plan, fv.remedies)
  if fv.json:
    out = _figures(plan, config)
    out["remedies"] = [_remedy_figures(r) for r in remedies]
    print(json.dumps(out, indent=1))
  else:
    _print_human(plan, config, remedies)
