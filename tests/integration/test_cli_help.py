"""`tfm` and `tfm SUBCOMMAND --help`: the usage and each subcommand's own flags."""

import pytest

from tfm import cli


def test_usage_lists_every_subcommand(capsys):
  assert cli.main(["tfm", "--help"]) == 0
  out = capsys.readouterr().out
  assert all(name in out for name in cli.COMMANDS)


@pytest.mark.parametrize("name,flags", [("eval", ["--workdir", "--average", "--split", "--limit"]),
                                        ("translate", ["--workdir", "--average", "--input",
                                                       "--beam_size"]),
                                        ("params", ["--config", "--vocab_size", "json"]),
                                        ("plan", ["--config", "--topology", "--slices",
                                                  "--remedies", "json"]),
                                        ("convert", ["--workdir", "--out", "--scan_layers"]),
                                        ("attention", ["--workdir", "--text", "--layer", "--heads",
                                                       "--kinds", "--beam_size", "--out"])])
def test_subcommand_help_lists_its_flags(capsys, name, flags):
  assert cli.main(["tfm", name, "--helpfull"]) == 0
  out = capsys.readouterr().out
  assert out.startswith(f"usage: tfm {name}")
  assert all(f"{flag}:" in out for flag in flags), out  # booleans print as --[no]NAME


def test_unknown_flag_is_an_error(capsys):
  assert cli.main(["tfm", "translate", "--no_such_flag=1"]) == 2
  assert "no_such_flag" in capsys.readouterr().err


def _platforms_after_cli_start(env):
  import os
  import subprocess
  import sys
  code = ("import os, jax; from tfm.train import backend; backend.cpu_only_without_accelerator(); "
          "print(os.environ.get('JAX_PLATFORMS'), jax.config.jax_platforms)")
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"} | env
  return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        check=True).stdout.split()


def test_a_machine_without_accelerators_runs_jax_on_cpu_only():
  """No GPU and no TPU here: commands keep JAX from starting libtpu (installed for `tfm plan`), whose
  attempt printed its warnings into every command's console; the user's JAX_PLATFORMS wins."""
  from tfm.train import backend
  if backend.present_accelerator() is not None:
    pytest.skip("this machine has an accelerator")
  assert _platforms_after_cli_start({}) == ["cpu", "cpu"]
  assert _platforms_after_cli_start({"JAX_PLATFORMS": "cpu,tpu"}) == ["cpu,tpu", "cpu,tpu"]
