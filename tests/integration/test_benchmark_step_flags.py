"""experiments/benchmark_step.py with a step's choices as config keys (train.dropout_prng,
train.guard): a bad value is one line on stderr naming the key and the values it takes, exit
status 2, before anything is built."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag,expected", [
    ("--config.train.dropout_prng=philox", "config key train.dropout_prng: expected one of "
     "('auto', 'threefry', 'rbg'), got 'philox'"),
    # long: the script's same one-line refusal as [dropout_prng]'s, and train.guard's message is
    # tfm train's too (tests/integration/test_bad_inputs.py::test_bad_input[train_unknown_form])
    pytest.param("--config.train.guard=where", "config key train.guard: expected one of ('auto', "
                 "'branch', 'select'), got 'where'", marks=pytest.mark.long),
])
def test_a_bad_choice_is_one_line_naming_the_flag(flag, expected):
  done = subprocess.run([sys.executable, "experiments/benchmark_step.py",
                         "--config=configs/quickstart.py", flag], cwd=ROOT, capture_output=True,
                        text=True, check=False, timeout=120, env={"JAX_PLATFORMS": "cpu",
                                                                  "PATH": "/usr/bin:/bin"})
  assert done.returncode == 2, done.stderr[-2000:]
  assert done.stderr.strip() == f"benchmark_step.py: {expected}", done.stderr
  assert "step_seconds" not in done.stdout
