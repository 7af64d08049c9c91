"""Every command in the ```bash blocks of the README and of docs/*.md is one that runs (an example
that does not run is a bug), and the README keeps to what a user needs.

Each `tfm` command (through ./launch.sh, sbatch slurm.sbatch, .venv/bin/tfm or tfm) is parsed by
the real command line: subcommand, flags and `--config` file with its overrides, built and
validated as `tfm` would before it starts work (cli.main(run=False)). What they do is tested where
it is cheap enough (tests/integration/*); the first command is CI's own (.ci/run runs
./launch.sh setup). Scripts under experiments/ must exist and define every flag the README gives
them; pip extras must exist in pyproject.toml; launch.sh's mode flags must be ones it accepts.
"""

import contextlib
import io
import json
import pathlib
import re
import shlex
import tomllib

import pytest

from tfm import cli
from tfm.sweep import report
from tfm.sweep.result import RunResult

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LAUNCH_MODES = {"--processes": 1, "--slurm": 0, "--tpu": 1, "--zone": 1, "--project": 1}


def bash_commands(path: pathlib.Path) -> list[str]:
  """The commands of every ```bash block of a Markdown file: continuation lines joined, comments
  dropped, and `a && b`, `a | b`, `a; b` split into their parts."""
  commands = []
  for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
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


def readme_commands() -> list[str]:
  return bash_commands(README)


def documented_commands() -> list:
  """(file, command) for every command of the README and of every docs/*.md page."""
  return [pytest.param(path, command, id=f"{path.relative_to(ROOT)}: {command}")
          for path in [README, *DOCS] for command in bash_commands(path)]


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


def _check_other(words: list[str], page: str = "README") -> None:
  program = words[0]
  if program == "./launch.sh":  # setup
    setup = words[words.index("setup") + 1:]
    assert setup in ([], ["--accelerator", "cpu"], ["--accelerator", "cuda"],
                     ["--accelerator", "tpu"]), words
  elif program in ("python", "python3", ".venv/bin/python", ".venv-node/bin/python") and (
      words[1].startswith("experiments/")):  # python3, .venv-node: the GPU node's (docs/gpu.md)
    script = ROOT / words[1]
    assert script.exists(), f"{page} names {words[1]}, which does not exist"
    source = script.read_text()
    for name in re.findall(r"^import (\w+)", source, flags=re.M):  # flags of a sibling it imports
      sibling = script.parent / f"{name}.py"
      source += sibling.read_text() if sibling.exists() else ""
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
    pytest.fail(f"{page} command of an unknown kind: {shlex.join(words)}")


FAST_TESTS = '.venv/bin/python -m pytest -n 2 -q -m "not long"'


def test_readme_has_the_two_commands_first():
  first = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
  assert first.strip().startswith("./launch.sh setup && ./launch.sh train --config configs/quickstart.py")
  whole = ".venv/bin/python -m pytest -n 2 -q"
  assert shlex.join(shlex.split(FAST_TESTS)) in readme_commands() and whole in readme_commands()
  ci = (ROOT / ".ci" / "run").read_text()
  # CI runs the README's fast command, then the rest: together the whole suite.
  assert "./launch.sh setup" in ci and FAST_TESTS in ci and f"{whole} -m long" in ci


def check_command(page: str, command: str) -> None:
  """Raises AssertionError when `command` (from `page`) would not run: a bare tfm/python/pip, an
  unknown subcommand, flag, config key or script flag, or a command of an unknown kind."""
  words = shlex.split(command)
  assert words[0] not in ("tfm", "python", "pip"), (
      f"{page}: bare {words[0]!r} (the venv's is .venv/bin/{words[0]}): {command}")
  argv = _tfm_argv(words)
  if argv is None:
    _check_other(words, page)
    return
  assert argv[1] in cli.COMMANDS, f"{page} runs tfm {argv[1]}, which is no subcommand"
  err = io.StringIO()
  with contextlib.redirect_stderr(err):
    code = cli.main(argv, run=False)
  assert code == 0, f"{page}: {command}: {err.getvalue().strip()}"


@pytest.mark.parametrize("path,command", documented_commands())
def test_documented_command_parses(path, command, monkeypatch):
  monkeypatch.chdir(ROOT)
  check_command(str(path.relative_to(ROOT)), command)


def test_docs_pages_have_commands_to_check():
  """The parametrized test above sees docs/ (a glob that found nothing would check nothing)."""
  assert {p.name for p in DOCS} >= {"results.md", "commands.md", "performance.md", "data.md",
                                    "tpu.md", "table3.md", "configs.md", "architecture.md"}
  assert sum(len(bash_commands(p)) for p in DOCS) >= 20


@pytest.mark.parametrize("command,message", [
    (".venv/bin/tfm eval --workdir w --no_such_flag=1", "no_such_flag"),
    (".venv/bin/tfm evaluate --workdir w", "which is no subcommand"),
    ("./launch.sh train --config configs/quickstart.py --config.model.no_such_key=1", "no_such_key"),
    (".venv/bin/python experiments/soak.py --no_such_flag 1", "has no --no_such_flag"),
    ("tfm params --config configs/base.py", "bare 'tfm'"),
])
def test_a_docs_command_that_would_not_run_fails(command, message, tmp_path, monkeypatch):
  """The check is real: a page whose command names a flag, subcommand or key that does not exist
  fails it, with the page named."""
  monkeypatch.chdir(ROOT)
  page = tmp_path / "page.md"
  page.write_text(f"```bash\n{command}\n```\n")
  [parsed] = bash_commands(page)
  with pytest.raises(AssertionError, match=message):
    check_command("docs/page.md", parsed)


def test_readme_keeps_to_what_a_user_needs():
  """A front page: at most 250 lines and 1,500 words (a feature's detail lives in docs/), and none
  of a lab notebook's history: no commit hashes, CPU models or "Nth pass", and no link into
  ../shared (a clone lacks it)."""
  text = README.read_text()
  assert len(text.splitlines()) <= 250
  assert len(text.split()) <= 1500, f"README.md has {len(text.split())} words"
  hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text)
            if re.search(r"[a-f]", w) and re.search(r"\d", w)]
  assert not hashes, f"commit hashes in README.md: {hashes}"
  cpus = re.findall(r"\b(?:Zen \d|EPYC|Xeon|Ryzen|Core i\d|Skylake|Ice Lake|Sapphire Rapids)\b", text)
  assert not cpus, f"CPU models in README.md: {cpus}"
  assert not re.search(r"\b\w+(?:st|nd|rd|th) pass\b", text, flags=re.I)
  assert "../shared" not in text


def _section(text: str, heading: str) -> str:
  start = text.index(heading)
  following = re.search(r"^#{1,3} ", text[start + len(heading):], flags=re.M)
  return text[start:start + len(heading) + following.start()] if following else text[start:]


def test_table3_glance_is_the_committed_sweeps():
  """docs/table3.md's glance tables of the reduced-scale protocol are the report's glance tables of
  the committed results.jsonl, verbatim: a figure edited by hand, or results committed without the
  page, fail here."""
  results_file = ROOT / "experiments" / "results" / "table3_mini" / "results.jsonl"
  results = [RunResult.from_json(json.loads(line)) for line in results_file.read_text().splitlines()]
  glance = report.glance_markdown(results)
  page = ROOT / "docs" / "table3.md"
  assert glance and glance in _section(page.read_text(), "## The new protocol"), (
      "docs/table3.md's glance tables differ from tfm.sweep.report.glance_markdown of "
      f"{results_file.relative_to(ROOT)}:\n{glance}")


def test_docs_list_every_experiment_script():
  listed = _section((ROOT / "docs" / "performance.md").read_text(), "## Experiment scripts")
  missing = [p.name for p in sorted((ROOT / "experiments").glob("*.py"))
             if f"`experiments/{p.name}`" not in listed]
  assert not missing, f"docs/performance.md's Experiment scripts list misses {missing}"


def test_docs_commands_table_is_the_cli_help():
  rows = re.findall(r"^\| `([\w-]+)` \| (.*) \|$",
                    _section((ROOT / "docs" / "commands.md").read_text(), "## Commands"),
                    flags=re.M)
  assert rows == [(name, text) for name, (_, text, _) in cli.COMMANDS.items()]


def _anchors(path: pathlib.Path) -> set[str]:
  """GitHub's anchors of a Markdown file's headings."""
  return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
          for h in re.findall(r"^#+ (.*)$", path.read_text(), flags=re.M)}


def test_relative_links_resolve():
  """Every relative link of the README and of docs/ names a file or folder of the repository, and a
  heading of it where the link names one."""
  missing = []
  for path in [README, *DOCS]:
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
      if re.match(r"[a-z]+:", target):
        continue
      file, _, anchor = target.partition("#")
      resolved = (path.parent / file).resolve() if file else path
      if not resolved.exists():
        missing.append(f"{path.relative_to(ROOT)} -> {target}")
      elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
        missing.append(f"{path.relative_to(ROOT)} -> {target} (no such heading)")
  assert not missing, missing

