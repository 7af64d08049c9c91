"""`tfm convert --workdir A --out B --scan_layers true|false`: A's checkpoints in the other layout.

B is a new workdir: A's config with model.scan_layers set, every checkpoint of A converted (the
parameters and Adam's moments stacked on a leading layers axis or split into layer_0..layer_{N-1};
see tfm/convert.py), so eval, translate and resumed training use B with that layout. A is only read.
"""

from __future__ import annotations

from absl import flags

from tfm.commands import UsageError, announce_backend, refuse_config, require_workdir


def define_flags(fv: flags.FlagValues):
  flags.DEFINE_string("workdir", None, "a workdir written by `tfm train` (only read)", flag_values=fv)
  flags.DEFINE_string("out", None, "the new workdir to write (must not exist, or be empty)",
                      flag_values=fv)
  flags.DEFINE_enum("scan_layers", None, ["true", "false"],
                    "model.scan_layers of the checkpoints written to --out", flag_values=fv)


def run(fv: flags.FlagValues, config):
  refuse_config(config)
  require_workdir(fv)
  if not fv.out:
    raise UsageError("--out is required")
  if fv.scan_layers is None:
    raise UsageError("--scan_layers is required: true (stack the layers) or false (unroll them)")
  # pylint: disable=import-outside-toplevel
  from tfm.convert import convert_workdir
  from tfm.train import checkpoint as ckpt_lib
  from tfm.train.checkpoint import best as best_lib
  from tfm.eval.restore import read_workdir_config

  steps, note = convert_workdir(fv.workdir, fv.out, fv.scan_layers == "true",
                                read_workdir_config(fv.workdir))
  announce_backend(note)
  best = ckpt_lib.available_steps(best_lib.best_dir(fv.out))
  print(f"tfm convert: {len(steps)} checkpoint(s) {steps} of {fv.workdir} written to {fv.out} with "
        f"model.scan_layers={fv.scan_layers}" + (f", and its best checkpoint (step {best[0]})"
                                                 if best else ""))
