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
                                        ("generate", ["--workdir", "--prompt", "--max_new_tokens",
                                                      "--temperature", "--top_k", "--top_p",
                                                      "--[no]greedy", "--seed", "--checkpoint",
                                                      "--average", "--[no]stream", "--[no]echo"]),
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


def test_eval_help_says_what_its_splits_and_limits_cover(capsys):
  """The dev/test split is the workdir's dataset's (the Bible corpora have their own), and both
  figures are capped by data.eval_max_examples when it is set."""
  from tfm.commands import eval as eval_command
  assert cli.main(["tfm", "eval", "--help"]) == 0
  out = " ".join(capsys.readouterr().out.split())
  assert " ".join(eval_command.SPLIT_HELP.split()) in out and "Bible" in out
  assert "dev = newstest2013, test = newstest2014" not in out
  assert "data.eval_max_examples" in out and "always covers the whole split" not in out


def test_train_help_says_the_compilation_cache_is_on_by_default(capsys):
  from tfm.train import compile_cache
  assert cli.main(["tfm", "train", "--help"]) == 0
  out = " ".join(capsys.readouterr().out.split())
  assert "on by default" in out and compile_cache.DEFAULT_DIR in out
  assert 'train.compilation_cache_dir=DIR' in out and '="" turns it off' in out


def test_unknown_flag_is_an_error(capsys):
  assert cli.main(["tfm", "translate", "--no_such_flag=1"]) == 2
  assert "no_such_flag" in capsys.readouterr().err


def _platforms_after_cli_start(env):
  import os
  import subprocess
  import sys
  code = ("import os, jax; from tfm.train import backend; backend.limit_platforms(); "
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


def test_a_gpu_machine_runs_jax_on_its_gpu_and_cpu_only(tmp_path):
  """A GPU machine (here: an nvidia-smi that lists one GPU) with libtpu installed: JAX must not try
  libtpu there either. Where jax's CUDA plugin registers a backend (a plugin module named like jax's
  own, whose initialize() registers one that is never started here) JAX may start the GPU and the
  CPU; without a plugin, or with one whose library does not load (its initialize() registers
  nothing), the CPU alone, and unused_accelerator says so."""
  import os
  from tfm.train import backend
  if backend.gpu_plugins():
    pytest.skip("this machine's jax has a GPU plugin")
  fake_bin = tmp_path / "bin"
  fake_bin.mkdir()
  smi = fake_bin / "nvidia-smi"
  smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
  smi.chmod(0o755)
  env = {"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
  assert _platforms_after_cli_start(env) == ["cpu", "cpu"]
  plugin = tmp_path / "site" / "jax_plugins" / "xla_cuda12"
  plugin.mkdir(parents=True)
  env["PYTHONPATH"] = f"{tmp_path / 'site'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
  (plugin / "__init__.py").write_text("def initialize():\n  pass  # its library did not load\n")
  assert _platforms_after_cli_start(env) == ["cpu", "cpu"]
  (plugin / "__init__.py").write_text(
      "def initialize():\n"
      "  from jax._src import xla_bridge\n"
      "  def never_started():\n"
      "    raise RuntimeError('no backend is started here')\n"
      "  xla_bridge.register_backend_factory('cuda', never_started, priority=500)\n")
  assert _platforms_after_cli_start(env) == ["cuda,cpu", "cuda,cpu"]


def test_unused_gpu_is_named_with_its_remedy(monkeypatch):
  """JAX on the CPU of a machine with GPUs: one warning naming the hardware and the install."""
  from tfm.train import backend
  monkeypatch.setattr(backend, "present_accelerator", lambda: "rocm")
  assert "AMD GPUs" in backend.unused_accelerator() and "rocm7-local" in backend.unused_accelerator()
  monkeypatch.setattr(backend, "present_accelerator", lambda: "cuda")
  assert "NVIDIA GPUs" in backend.unused_accelerator() and "jax[cuda12]" in backend.unused_accelerator()
