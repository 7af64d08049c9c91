"""Every command in the README's ```bash blocks is one that runs (a README example that does not run
is a bug).

Each `tfm` command (through ./launch.sh, sbatch slurm.sbatch, .venv/bin/tfm or tfm) is parsed by
the real command line: subcommand, flags and `--config` file with its overrides, built and
validated as `tfm` would before it starts work (cli.main(run=False)). What they do is tested where
it is cheap enough (tests/integration/*); the first command is CI's own (.ci/run runs
./launch.sh setup). Scripts under experiments/ must exist and define every flag the README gives
them; pip extras must exist in pyproject.toml; launch.sh's mode flags must be ones it accepts.
"""

import pathlib
import re
import shlex
import tomllib

import pytest

from tfm import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LAUNCH_MODES = {"--processes": 1, "--slurm": 0, "--tpu": 1, "--zone": 1, "--project": 1}


def readme_commands() -> list[str]:
  """The commands of every ```bash block: continuation lines joined, comments dropped, and
  `a && b`, `a | b`, `a; b` split into their parts."""
  text = README.read_text()
  commands = []
  for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
    for line in block.replace("\\\n", " ").splitlines():
      words = shlex.split(line, comments=True)
      part: list[str] = []
      for word in words + ["&&"]:
        if word in ("&&", "|", ";", "||"):
          if part:
            commands.append(shlex.join(part))
          part = []
        else:
          part.append(word)
  return commands


def _tfm_argv(words: list[str]) -> list[str] | None:
  """['tfm', SUBCOMMAND, ...] for a command that runs tfm, else None."""
  if words[0] == "sbatch":
    words = words[words.index("slurm.sbatch") + 1:]
    return ["tfm", *words]
  if words[0] == "./launch.sh":
    rest = words[1:]
    while rest and rest[0] in LAUNCH_MODES:
      rest = rest[1 + LAUNCH_MODES[rest[0]]:]
    assert rest, f"launch.sh without a subcommand: {words}"
    return None if rest[0] == "setup" else ["tfm", *rest]
  if words[0] in ("tfm", ".venv/bin/tfm"):
    return ["tfm", *words[1:]]
  return None


def _check_other(words: list[str]) -> None:
  program = words[0]
  if program == "./launch.sh":  # setup
    setup = words[words.index("setup") + 1:]
    assert setup in ([], ["--accelerator", "cpu"], ["--accelerator", "cuda"],
                     ["--accelerator", "tpu"]), words
  elif program in ("python", ".venv/bin/python") and words[1].startswith("experiments/"):
    script = ROOT / words[1]
    assert script.exists(), f"README names {words[1]}, which does not exist"
    source = script.read_text()
    for word in words[2:]:
      name = word[2:].split("=")[0]
      if word.startswith("--") and not name.startswith("config"):
        defined = (rf"DEFINE_\w+\(\s*['\"]{name}['\"]",  # absl
                   rf"add_argument\(\s*['\"]--{name}['\"]")  # argparse
        assert any(re.search(d, source) for d in defined), f"{words[1]} has no --{name}"
  elif program in ("python", ".venv/bin/python") and words[1:3] == ["-m", "pytest"]:
    pass
  elif program in ("pip", ".venv/bin/pip"):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    for word in words:
      for extra in re.findall(r"\.\[([\w,-]+)\]", word):
        assert set(extra.split(",")) <= set(extras), f"no extra {extra} in pyproject.toml"
  elif program in ("echo", "git", "cd", "export", "gcloud", "sudo", "tensorboard"):
    pass
  else:
    pytest.fail(f"README command of an unknown kind: {shlex.join(words)}")


def test_readme_has_the_two_commands_first():
  first = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
  assert first.strip().startswith("./launch.sh setup && ./launch.sh train --config configs/quickstart.py")
  assert any(c == ".venv/bin/python -m pytest -n 2 -q" for c in readme_commands())
  ci = (ROOT / ".ci" / "run").read_text()
  assert "./launch.sh setup" in ci and ".venv/bin/python -m pytest -n 2 -q" in ci


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_parses(command, monkeypatch, capsys):
  monkeypatch.chdir(ROOT)
  words = shlex.split(command)
  argv = _tfm_argv(words)
  if argv is None:
    _check_other(words)
    return
  assert argv[1] in cli.COMMANDS, f"README runs tfm {argv[1]}, which is no subcommand"
  code = cli.main(argv, run=False)
  assert code == 0, f"{command}: {capsys.readouterr().err.strip()}"
