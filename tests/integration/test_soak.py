"""Killed and resumed training equals uninterrupted training: experiments/soak.py's short version
(random SIGTERM / SIGKILL, one process) and a 2-process run stopped twice, through launch.sh."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from experiments import soak
from tests.integration.conftest import tiny_flags
from tfm import cli

pytestmark = pytest.mark.long  # outside the README's fast command; CI runs it after

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TFM_VENV": sys.prefix, "PYTHONUNBUFFERED": "1"}  # launch.sh runs this venv
# The 2-process run's length: the hosts agree on a SIGTERM's step a few steps after it (JAX's sync
# point), and each of its two stops must still find steps left to save at.
STEPS = 16


@pytest.mark.slow
def test_three_random_kills_resume_bit_exact(corpus, tmp_path):
  argv = [sys.executable, str(ROOT / "experiments" / "soak.py"), f"--root={tmp_path}", "--kills=3",
          "--seed=3", "--timeout=300"] + tiny_flags(corpus, "train.steps=12",
                                                    "train.checkpoint_every=4", "train.eval_every=6")
  proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=ENV, cwd=ROOT)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  report = json.loads((tmp_path / "soak.json").read_text())
  assert len(report["kills"]) == 3 and report["bit_exact"], report
  assert {k["signal"] for k in report["kills"]} == {"SIGTERM", "SIGKILL"}  # this seed's draws
  assert not report["differing_leaves"] and report["leaves"] > 20
  assert "BIT-EXACT" in proc.stdout


def _attempt(corpus, workdir, log, *extra):
  argv = soak.launch_argv(2, tiny_flags(corpus, f"train.steps={STEPS}", "train.log_every=1", *extra),
                          workdir)
  return soak.Attempt(argv, log, ENV)


@pytest.mark.slow
def test_two_processes_stopped_twice_resume_bit_exact(corpus, tmp_path, capsys):
  """SIGTERM to launch.sh reaches both workers, which agree on a step and save it, also while a
  resumed run is still compiling (JAX's sync point counts calls, not steps); the resumed run ends
  bit-identical to an uninterrupted one: every host's data position is restored. Resuming it on
  one host is refused. The uninterrupted run also decodes dev BLEU at its last step, on both hosts,
  and gets the scores one process gets from the same checkpoint."""
  reference = _attempt(corpus, tmp_path / "a", tmp_path / "a.log", f"eval.bleu_every={STEPS}",
                       "eval.bleu_examples=8")
  assert reference.wait(300) == 0
  logged = [re.search(r"\| bleu ([0-9.]+) \| tokenized_bleu ([0-9.]+) \|", line)
            for _, line in reference.lines if line.startswith(f"[dev] step {STEPS} ")]
  logged = [m.groups() for m in logged if m]
  assert len(logged) == 1, reference.lines[-10:]
  capsys.readouterr()
  assert cli.main(["tfm", "eval", f"--workdir={tmp_path / 'a'}", "--average=1", "--limit=8"]) == 0
  alone = json.loads((tmp_path / "a" / f"eval_dev_{STEPS}_avg1_first8.json").read_text())
  assert [float(v) for v in logged[0]] == pytest.approx([alone["bleu"], alone["tokenized_bleu"]],
                                                        abs=1e-4)
  (tmp_path / "a" / f"eval_dev_{STEPS}_avg1_first8.json").unlink()  # `tfm eval` on both hosts, as one cluster
  proc = subprocess.run(["bash", str(ROOT / "launch.sh"), "--processes", "2", "eval",
                         f"--workdir={tmp_path / 'a'}", "--average=1", "--limit=8"], env=ENV,
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  together = json.loads((tmp_path / "a" / f"eval_dev_{STEPS}_avg1_first8.json").read_text())
  assert {k: together[k] for k in ("bleu", "tokenized_bleu", "perplexity")} == pytest.approx(
      {k: alone[k] for k in ("bleu", "tokenized_bleu", "perplexity")}, rel=1e-5)
  stopped = tmp_path / "b"
  saved = []
  for ready in (lambda a: a.last_step() >= 2,  # in training
                lambda a: a.first("resumed from step") is not None):  # compiling a resumed run
    attempt = _attempt(corpus, stopped, tmp_path / "b.log")
    assert attempt.wait_until(lambda a=attempt: ready(a)), attempt.lines[-5:]
    attempt.proc.terminate()
    assert attempt.wait(300) == 0
    lines = [line for _, line in attempt.lines if "SIGTERM: saved step" in line]
    assert len(lines) == 1, attempt.lines[-10:]
    saved.append(int(lines[0].split()[4].rstrip(",")))
  assert 2 <= saved[0] < saved[1] < STEPS, saved
  final = _attempt(corpus, stopped, tmp_path / "b.log")
  assert final.wait(300) == 0 and final.first(f"resumed from step {saved[1]}") is not None
  result = soak.compare(tmp_path / "a", stopped, STEPS)
  assert not result["differing_leaves"] and result["data_state_equal"], result
  assert result["kept_steps"][0] == result["kept_steps"][1]
  # One host cannot continue the two hosts' epoch: refused in one line, the workdir untouched.
  before = sorted((p.name, p.stat().st_mtime_ns) for p in stopped.rglob("*"))
  capsys.readouterr()  # what comparing the checkpoints logged (Orbax's warnings) is not the command's
  code = cli.main(["tfm", "train", *tiny_flags(corpus, f"train.steps={STEPS + 2}"), f"--workdir={stopped}"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1 and len(err) == 1, err
  assert "holds the data positions of 2 host(s) and this run has 1" in err[0]
  assert "Resume with 2 host(s)" in err[0]
  assert sorted((p.name, p.stat().st_mtime_ns) for p in stopped.rglob("*")) == before
