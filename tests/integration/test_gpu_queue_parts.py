"""The GPU queue's parts that need no process: the table of measured seconds (its interpolations,
the cost it predicts, its refinement once a call), the carry's rule, the forms' rule and the line
the import writes, and where a run's seconds went, read from a sweep log."""

import json

import pytest

from experiments.gpu.import_call import write_choices
from experiments.gpu import carry, forms, run_seconds
from experiments.gpu.seconds import TABLE, Seconds

LOG = """
=== 2026-11-27 18:12:18 tfm train --config=configs/table3_v3.py:base --seeds=0,1
tfm: a stack of 2 runs, one step for all (tfm/train/stack.py): ...
tfm: train step compiled (or loaded from the compilation cache) in 3.0 s
[train base-s0] step 100/300 (33%) | loss 6.1 | step_s 1.000e-02 | eta 2s
[train base-s1] step 100/300 (33%) | loss 6.2 | step_s 1.000e-02 | eta 2s
[dev base-s0] step 100 | loss 5.0 | eval_s 0.5
[dev base-s1] step 100 | loss 5.1 | eval_s 0.4
[train base-s0] step 300/300 (100%) | loss 4.1 | step_s 2.000e-02 | eta 0s
[train base-s1] step 300/300 (100%) | loss 4.2 | step_s 2.000e-02 | eta 0s
=== 2026-11-27 18:12:30 tfm train exit 0

=== 2026-11-27 18:12:30 tfm eval --workdir=/r/base-s0 --split=dev --limit=200
      decode_compile_s: 4.5
=== 2026-11-27 18:12:40 tfm eval exit 0
"""


def test_a_logs_seconds_by_part():
  """12 s of training: 3 s compile, 100 x 10 ms + 200 x 20 ms of steps (the stack's lines once),
  0.5 s of dev evaluation (the first member's), the rest its start; 10 s of eval, 4.5 compiling."""
  train, evaluation = run_seconds.segments(LOG)
  assert (train.phase, train.wall, train.stack(), train.trained_steps()) == ("train", 12.0, 2, 300)
  assert train.parts() == pytest.approx({"compile": 3.0, "steps": 5.0, "dev": 0.5, "start": 3.5})
  assert evaluation.parts() == pytest.approx({"compile": 4.5, "beam": 5.5})
  # an older log without exit lines: the next process's start ends one, wall_s the last
  old = "\n".join(line for line in LOG.splitlines() if " exit " not in line)
  assert [s.wall for s in run_seconds.segments(old, wall_s=30.0)] == [12.0, 18.0]


def test_the_committed_table_predicts_a_stack_from_its_parts():
  s = Seconds.load(TABLE)
  assert s.concurrency(1) == 1.0 and s.concurrency(4) == s["concurrency/4"]
  assert s.concurrency(2) == pytest.approx(1 + (s["concurrency/4"] - 1) / 3)  # linear between
  assert s.stack(2) == 2.0  # no stack measured on a GPU yet: no gain assumed
  cost = s.train_cost("table3_v3", 6000, 250, 3.4, 2)  # big's two seeds as one stack
  assert cost.before == pytest.approx(s["process_start"] + s["train_compile"])
  assert cost.work == pytest.approx(6000 * s["step_s/table3_v3"] * 3.4 * 2)
  assert cost.after == pytest.approx(24 * s["dev_eval/table3_v3"] * 2 + 2 * (
      s["eval_compile/table3_v3"] + s["eval_rest/table3_v3"]))


def test_a_call_refines_the_table_once():
  s = Seconds({"entries": {"a": {"seconds": 10.0, "n": 2, "source": "x"},
                           "b": {"seconds": 99.0, "n": 0, "source": "estimate"}}, "calls": []})
  assert s.refine({"a": [13.0, 16.0], "b": [4.0], "stack/2": [1.2]}, "call1", "the call")
  assert (s["a"], s["b"], s.stack(2)) == (pytest.approx(12.25), 4.0, 1.2)  # the estimate replaced
  assert s.entries["a"]["n"] == 4 and s.entries["b"]["source"] == "1 from the call"
  before = json.dumps(s.data, sort_keys=True)
  assert not s.refine({"a": [100.0]}, "call1", "the call")
  assert json.dumps(s.data, sort_keys=True) == before


def stopped(name, saved, mib):
  return carry.Stopped("table3_v3", name, None, 100, "f", saved, int(mib * 2**20))


def test_the_carry_takes_the_runs_that_save_the_most_seconds_a_byte():
  runs = [stopped("a", 60.0, 20), stopped("b", 50.0, 10), stopped("c", 0.0, 1),
          stopped("d", 80.0, 30)]
  resumed, restarted = carry.choose(runs, 35 * 2**20)
  assert [s.name for s in resumed] == ["b", "a"]  # 5 s a MiB, 3, then d's 2.7 does not fit
  assert dict(restarted) == {"c": "nothing reached to resume",
                             "d": "its 30.0 MiB do not fit the 5.0 MiB left to carry"}
  assert carry.room(70 * 2**20) == 0
  assert carry.room(4 * 2**20) == carry.PARTS * carry.PART_BYTES  # OUT's parts the tighter
  assert carry.room(30 * 2**20) == (64 - 30 - 2) * 2**20


def test_the_forms_rule_takes_a_form_only_beyond_the_two_auto_runs_spread():
  timed = {"auto": 5.00, "select": 4.80, "rbg": 4.95, "process": 4.00, "auto_again": 5.10}
  rule = forms.choose(timed)
  # spread 0.10 ms: select (0.20 faster) and process (1.0) kept; rbg (0.05) is within it
  assert rule["chosen"] == {"guard": "select", "dropout_prng": "threefry", "input": "process"}
  assert forms.choose({"auto": 5.0, "select": 1.0}) == {}  # the auto form timed once: no rule


def test_the_import_writes_the_gpus_forms_once(tmp_path):
  path = tmp_path / "platform_choices.py"
  path.write_text("CPU = {}\nGPU_MEASURED: dict[str, str] = {}  # written by the import\n"
                  "AUTO = {}\n")
  chosen = {"input": "process", "guard": "branch", "dropout_prng": "threefry"}
  assert write_choices(path, chosen)
  assert ('GPU_MEASURED: dict[str, str] = {"dropout_prng": "threefry", "guard": "branch", '
          '"input": "process"}  # written by the import\n') in path.read_text()
  assert not write_choices(path, chosen)


def _published(folder, fingerprint, ppl):
  folder.mkdir(parents=True)
  (folder / "sweep_result.json").write_text(json.dumps(
      {"status": "ok", "fingerprint": fingerprint, "dev_ppl": ppl}))
  (folder / "sweep.log").write_text(f"ppl {ppl}\n")


def test_an_import_keeps_a_run_of_its_fingerprint_and_replaces_one_of_another(tmp_path):
  """The import over published runs: the same fingerprint (a later call took the run) is kept as
  it is, another fingerprint (trained under another config) replaced, a new run added."""
  from experiments.gpu.published import merge_runs  # pylint: disable=import-outside-toplevel
  publish, staging = tmp_path / "published", tmp_path / "staging"
  _published(publish / "base-s0", "a" * 64, 7.0)
  _published(publish / "D1-s0", "b" * 64, 9.0)
  _published(staging / "base-s0", "a" * 64, 7.5)
  _published(staging / "D1-s0", "c" * 64, 9.5)
  _published(staging / "D2-s0", "d" * 64, 8.0)
  assert merge_runs(staging, publish) == 2
  ppl = lambda name: json.loads((publish / name / "sweep_result.json").read_text())["dev_ppl"]
  assert (ppl("base-s0"), ppl("D1-s0"), ppl("D2-s0")) == (7.0, 9.5, 8.0)
