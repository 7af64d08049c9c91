"""A stack of runs differing in their seeds trained through the loop (tfm.loop.train_stack): each
member logs, evaluates, checkpoints and resumes in its own workdir as its solo run does, with its
solo run's numbers."""

import io
import re

import numpy as np
import pytest

from tests.integration.conftest import run_train
from tests.train import helpers
from tfm import loop
from tfm.train import checkpoint as ckpt_lib

SEEDS = (0, 1)
CADENCE = ("train.steps=6", "train.log_every=2", "train.eval_every=3", "train.checkpoint_every=3",
           "model.dropout_rate=0.2")


def _member(experiment, seed, *extra):
  return experiment(*CADENCE, f"train.seed={seed}", f"data.shuffle_seed={seed}", *extra)


def _figures(log: str, prefix: str, name: str, tag: str | None) -> dict[int, float]:
  """{step: value} of `name` in the `prefix` lines of one run (tag: a stack member's)."""
  head = re.escape(f"[{prefix}{'' if tag is None else ' ' + tag}] step ")
  return {int(m.group(1)): float(m.group(2)) for m in re.finditer(
      head + r"(\d+)\S* .*?\| " + re.escape(name) + r" ([-\d.e+]+)", log)}


@pytest.fixture(scope="module")
def stack(experiment_module, tmp_path_factory):
  """(workdirs, final states, log) of the members trained to the end as one stack, never stopped:
  what the tests compare solo runs and a killed stack's resume with."""
  root = tmp_path_factory.mktemp("stack")
  workdirs = [root / f"run-s{s}" for s in SEEDS]
  out = io.StringIO()
  states = loop.train_stack([_member(experiment_module, s) for s in SEEDS],
                            [str(w) for w in workdirs], stream=out)
  return workdirs, states, out.getvalue()


@pytest.mark.slow
def test_each_member_is_its_solo_run(experiment, tmp_path, stack):
  solo = {s: run_train(_member(experiment, s), tmp_path / f"solo-s{s}") for s in SEEDS}
  workdirs, states, log = stack
  assert "tfm: a stack of 2 runs" in log
  differences = []
  for s, state, workdir in zip(SEEDS, states, workdirs):
    solo_state, solo_log = solo[s]
    for prefix, name in (("train", "loss"), ("train", "grad_norm"), ("dev", "perplexity")):
      got, want = _figures(log, prefix, name, f"run-s{s}"), _figures(solo_log, prefix, name, None)
      assert sorted(got) == sorted(want) and got, (prefix, name, got, want)
      np.testing.assert_allclose([got[k] for k in sorted(got)], [want[k] for k in sorted(want)],
                                 rtol=1e-5)
    differences.append(helpers.max_diff(state.params, solo_state.params, key_biases=False))
    assert ckpt_lib.available_steps(workdir) == [3, 6]
    assert ckpt_lib.read_config(workdir)["train"]["seed"] == s
    assert (workdir / "tensorboard").is_dir() and list((workdir / "logs").iterdir())
  print(f"largest parameter difference, member against its solo run: {max(differences):.3g}")
  assert max(differences) < 1e-4  # float rounding of a vmapped step, at learning rate 4
  assert helpers.max_diff(states[0].params, states[1].params) > 1e-3  # two seeds, two runs


@pytest.mark.long  # the kill between members' saves resumes a stack bit-exact in the fast tier
def test_a_stack_stopped_short_resumes_longer_bit_exact(experiment, tmp_path):
  """Stopped at step 3 (train.steps=3: a shorter run, which a resume may lengthen), then resumed
  to 6: every member's checkpoint is the uninterrupted stack's, to the bit."""
  states = loop.train_stack([_member(experiment, s) for s in SEEDS],
                            [str(tmp_path / f"run-s{s}") for s in SEEDS], stream=io.StringIO())
  resumed = [tmp_path / f"again-s{s}" for s in SEEDS]
  loop.train_stack([_member(experiment, s, "train.steps=3") for s in SEEDS],
                   [str(w) for w in resumed], stream=io.StringIO())
  out = io.StringIO()
  again = loop.train_stack([_member(experiment, s) for s in SEEDS], [str(w) for w in resumed],
                           stream=out)
  assert out.getvalue().count("resumed from step 3 in") == 2
  for state, other in zip(states, again):
    assert helpers.max_diff(state, other) == 0.0


# A child that trains a stack and is killed between its members' saves of step 6 (the last):
# member 0's save written, member 1's never started (os._exit: no handler, no cleanup, as SIGKILL).
_KILLED_MID_SAVE = """
import json, os, sys
from tfm import loop
from tfm.config import load_config
from tfm.train import checkpoint as ckpt_lib
overrides, workdirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
made, save = [], ckpt_lib.Checkpointer.save
def save_or_die(self, step, *args, **kwargs):
  if step == 6 and str(self.directory).startswith(workdirs[1]):
    for other in made:
      other.wait()
    os._exit(9)
  made.append(self)
  return save(self, step, *args, **kwargs)
ckpt_lib.Checkpointer.save = save_or_die
loop.train_stack([load_config("configs/quickstart.py", o) for o in overrides], workdirs)
"""


@pytest.mark.slow
def test_a_kill_between_the_members_saves_resumes_every_member_bit_exact(corpus, experiment,
                                                                         tmp_path, caplog, stack):
  """Killed after member 0 saved step 6 and before member 1 did: the stack resumes both at step 3,
  the newest step both hold (member 0's step 6 set aside, and gone once written again), and ends
  at step 6 with the checkpoints of a stack that was never stopped, to the bit."""
  import json  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  from tests.integration.conftest import tiny_overrides  # pylint: disable=import-outside-toplevel
  overrides = [tiny_overrides(corpus, *CADENCE, f"train.seed={s}", f"data.shuffle_seed={s}")
               for s in SEEDS]
  workdirs = [str(tmp_path / f"run-s{s}") for s in SEEDS]
  child = subprocess.run([sys.executable, "-c", _KILLED_MID_SAVE, json.dumps(overrides),
                          json.dumps(workdirs)], capture_output=True, text=True, timeout=300,
                         check=False)
  assert child.returncode == 9, child.stderr[-2000:]
  assert [ckpt_lib.available_steps(w) for w in workdirs] == [[3, 6], [3]]
  resumed = loop.train_stack([_member(experiment, s) for s in SEEDS], workdirs,
                             stream=io.StringIO())
  assert "checkpoint(s) [6] ahead of the step every member of the stack holds (3)" in caplog.text
  assert not list((tmp_path / "run-s0" / "checkpoints").glob("*.ahead*"))
  _, straight, _ = stack
  for w, a, b in zip(workdirs, resumed, straight):
    assert ckpt_lib.available_steps(w) == [3, 6] and int(a.step) == 6
    assert helpers.max_diff(a, b) == 0.0


def test_configs_that_differ_in_more_than_seeds_and_scalars_are_refused(experiment, tmp_path):
  with pytest.raises(ValueError, match=r"differs from member 0 in model\.d_ff"):
    loop.train_stack([_member(experiment, 0), _member(experiment, 1, "model.d_ff=96")],
                     [str(tmp_path / "a"), str(tmp_path / "b")], stream=io.StringIO())
  assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()



def test_tfm_train_seeds_trains_a_stack_into_a_workdir_a_seed(corpus, tmp_path, capsys):
  """`tfm train --seeds=3,5 --workdir=W`: runs W-s3 and W-s5, each with its seed as train.seed and
  data.shuffle_seed; a bad --seeds is one line naming the flag, and nothing is written."""
  from tests.integration.conftest import tiny_flags  # pylint: disable=import-outside-toplevel
  from tfm import cli  # pylint: disable=import-outside-toplevel
  # CADENCE's model (dropout 0.2): the stack's steps are those the module's other stacks built
  flags = tiny_flags(corpus, "train.steps=2", "train.log_every=1", "train.eval_every=2",
                     "model.dropout_rate=0.2")
  assert cli.main(["tfm", "train", *flags, f"--workdir={tmp_path / 'run'}", "--seeds=3,5"]) == 0
  for seed in (3, 5):
    saved = ckpt_lib.read_config(tmp_path / f"run-s{seed}")
    assert (saved["train"]["seed"], saved["data"]["shuffle_seed"]) == (seed, seed)
    assert ckpt_lib.available_steps(tmp_path / f"run-s{seed}") == [2]
  assert "[train run-s5] step 2/2" in capsys.readouterr().out
  for bad in ("3,3", "-1", "x"):
    assert cli.main(["tfm", "train", *flags, f"--workdir={tmp_path / 'bad'}",
                     f"--seeds={bad}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tfm train: --seeds={bad}: expected distinct non-negative integers, "
                   "e.g. --seeds=0,1,2"], err
  assert not list(tmp_path.glob("bad*"))


@pytest.mark.long  # the kill between members resumes bit-exact in the fast tier
def test_a_sigterm_saves_every_member_at_one_step_and_the_stack_resumes_bit_exact(experiment,
                                                                                  tmp_path):
  """A SIGTERM in mid-run: every member saves the same step, and the stack resumed from there
  ends with the uninterrupted stack's checkpoints, to the bit."""
  import os  # pylint: disable=import-outside-toplevel
  import signal  # pylint: disable=import-outside-toplevel
  import threading  # pylint: disable=import-outside-toplevel
  long = ("train.steps=400", "train.log_every=1000", "train.eval_every=1000",
          "train.checkpoint_every=1000")
  stopped = [str(tmp_path / f"run-s{s}") for s in SEEDS]
  timer = threading.Timer(4.0, lambda: os.kill(os.getpid(), signal.SIGTERM))
  timer.start()
  try:
    out = io.StringIO()
    states = loop.train_stack([_member(experiment, s, *long) for s in SEEDS], stopped, stream=out)
  finally:
    timer.cancel()
  step = int(states[0].step)
  assert 0 < step < 400 and "SIGTERM: saved step" in out.getvalue()
  assert [ckpt_lib.available_steps(w) for w in stopped] == [[step], [step]]
  # Resumed to step + 3, against a stack that ran to step + 3 without a stop.
  more = (f"train.steps={step + 3}",) + long[1:]
  resumed = loop.train_stack([_member(experiment, s, *more) for s in SEEDS], stopped,
                             stream=io.StringIO())
  straight = loop.train_stack([_member(experiment, s, *more) for s in SEEDS],
                              [str(tmp_path / f"straight-s{s}") for s in SEEDS],
                              stream=io.StringIO())
  for a, b in zip(resumed, straight):
    assert int(a.step) == step + 3 and helpers.max_diff(a, b) == 0.0


@pytest.mark.long  # tests/train/test_stack.py checks the same members step by step, fast
def test_members_of_other_dropout_and_smoothing_are_their_solo_runs(experiment, tmp_path):
  """Base and two D-like rows in one stack (dropout 0.2, 0 and 0.2; label smoothing 0.1, 0.1 and
  0): each member's train losses and dev perplexity are its solo run's, and its dev loss is
  smoothed as its own."""
  rows = [(0, "model.dropout_rate=0.2", "train.label_smoothing=0.1"),
          (1, "model.dropout_rate=0.0", "train.label_smoothing=0.1"),
          (2, "model.dropout_rate=0.2", "train.label_smoothing=0.0")]
  configs = [_member(experiment, seed, *changes) for seed, *changes in rows]
  out = io.StringIO()
  loop.train_stack(configs, [str(tmp_path / f"run-s{seed}") for seed, *_ in rows], stream=out)
  log = out.getvalue()
  for config, (seed, *_) in zip(configs, rows):
    _, solo_log = run_train(config, tmp_path / f"solo-s{seed}")
    for prefix, name in (("train", "loss"), ("dev", "perplexity"), ("dev", "loss")):
      got, want = _figures(log, prefix, name, f"run-s{seed}"), _figures(solo_log, prefix, name, None)
      assert sorted(got) == sorted(want) and got, (seed, prefix, name)
      np.testing.assert_allclose([got[k] for k in sorted(got)], [want[k] for k in sorted(want)],
                                 rtol=1e-5)
