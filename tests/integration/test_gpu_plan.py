"""experiments/gpu/plan.py and dispatch.py, the GPU queue's planner and loop, driven by a fake clock
and fake jobs whose true durations may differ from their predictions: no job starts that is
predicted to end past the horizon, small jobs pack around a long one, an exclusive job runs alone,
big starts only at the start of a call, and what runs at the stop time is stopped."""

import pytest

from experiments.gpu import dispatch
from experiments.gpu.plan import Cost, Job, Running, plan, simulate


def flat(n):  # no slowdown from concurrency
  return 1.0


def job(name, seconds, **kw):
  return Job(name, Cost(0.0, float(seconds), 0.0), **kw)


class Fake:
  """A fake clock and fake jobs: each job takes its true seconds (default: its prediction,
  stretched by `concurrency` as the planner assumes) from its launch."""

  def __init__(self, true=None, concurrency=flat):
    self.now, self.true, self.concurrency = 0.0, true or {}, concurrency
    self.done, self.stopped, self.work = {}, [], {}

  def clock(self):
    return self.now

  def sleep(self, seconds):
    # the jobs' work advances at 1 / concurrency(n) while n run
    for _ in range(int(round(seconds / 0.5))):
      live = [n for n in self.work if n not in self.done]
      for name in live:
        self.work[name] -= 0.5 / self.concurrency(len(live))
        if self.work[name] <= 1e-9:
          self.done[name] = "ok"
      self.now += 0.5

  def launch(self, j):
    self.work[j.name] = self.true.get(j.name, j.cost.alone)
    return j.name

  def poll(self, name):
    return self.done.get(name)

  def stop(self, names):
    self.stopped += names
    for name in names:
      self.done[name] = "stopped"


def drive(queue, fake, *, slots, horizon, stop=None, concurrency=flat):
  return dispatch.run(queue, slots=slots, horizon_at=horizon, stop_at=stop or horizon + 30,
                      concurrency=concurrency, clock=fake.clock, sleep=fake.sleep,
                      launch=fake.launch, poll=fake.poll, stop=fake.stop, poll_s=0.5)


def test_concurrency_stretches_the_work_alone_exactly():
  """Two jobs at once, each 1.5x slower: the 50 s one ends at 75 s, when the other has done 50 of
  its 100 s; alone again, it ends 50 s later. The parts before and after are not stretched."""
  a, b = job("a", 100), Job("b", Cost(10.0, 50.0, 5.0))
  ends = {s.job.name: (s.start, s.end) for s in simulate(
      [], [a, b], 2, lambda n: 1.5 if n == 2 else 1.0)}
  # b: 10 s before, 75 s of work, 5 s after, while a does 90 / 1.5 of its work; a alone the rest
  assert ends["b"] == (0.0, pytest.approx(90.0))
  assert ends["a"] == (0.0, pytest.approx(90.0 + (100 - 90 / 1.5)))


def test_small_jobs_pack_around_a_long_one_and_none_ends_past_the_horizon():
  """Slots 2, horizon 480 s: the long job (first in the queue) and the medium one start at 0; a job
  of 500 s is left for a call of its own; the small ones fill the slots to the horizon."""
  queue = [job("long", 400, first=True), job("medium", 300), job("too_long", 500)] + [
      job(f"small{i}", 60) for i in range(6)]
  fake = Fake()
  started = drive(queue, fake, slots=2, horizon=480)
  names = [s.job.name for s in started]
  assert names[:2] == ["long", "medium"] and "too_long" not in names
  assert names[2:] == ["small0", "small1", "small2", "small3"]  # 300-480 and 400-460
  assert all(s.start + s.job.cost.alone <= 480 + 1e-6 for s in started)
  assert all(s.planned_end <= 480 + 1e-6 and s.end <= 480 + 1.0 for s in started)
  assert fake.stopped == []


def test_a_job_that_overruns_moves_the_plan_and_nothing_starts_that_would_end_late():
  """The first job takes 200 s, not its predicted 100: when it ends the loop plans again from the
  clock, and starts no job whose predicted end is past the horizon."""
  queue = [job("slow", 100)] + [job(f"j{i}", 90) for i in range(5)]
  fake = Fake(true={"slow": 200.0})
  started = drive(queue, fake, slots=1, horizon=300, stop=330)
  assert [s.job.name for s in started] == ["slow", "j0"]  # 200 + 90 <= 300; a second 90 is not
  assert started[1].start == pytest.approx(200.0, abs=0.6)
  assert all(s.planned_end <= 300 + 1e-6 for s in started) and fake.stopped == []


def test_the_stop_time_stops_what_runs():
  queue = [job("a", 100)]
  fake = Fake(true={"a": 1000.0})
  started = drive(queue, fake, slots=1, horizon=200, stop=230)
  assert fake.stopped == ["a"] and started[0].outcome == "stopped"
  assert started[0].end == pytest.approx(230.0, abs=0.6)


def test_an_exclusive_job_runs_with_nothing_beside_it():
  """The timing (exclusive) runs first and alone; the others share the slots after it."""
  queue = [job("run1", 100), job("run2", 100), job("timing", 50, exclusive=True)]
  fake = Fake()
  started = drive(queue, fake, slots=2, horizon=400)
  by = {s.job.name: s for s in started}
  assert by["timing"].start == 0.0 and by["run1"].start == pytest.approx(50.0, abs=0.6)
  assert by["run2"].start == pytest.approx(50.0, abs=0.6)


def test_a_timing_that_would_push_a_table_run_out_is_left():
  """The queue's order is its priority: a timing that would make an earlier run miss the horizon is
  not taken."""
  queue = [job("run1", 100), job("run2", 150), job("timing", 80, exclusive=True)]
  assert [s.job.name for s in plan(queue, [], 200, 2, flat)] == ["run1", "run2"]


def test_big_starts_only_at_the_start_of_a_call_and_alone_where_it_must():
  """Big does not start once other jobs have started in the call (it waits for a call of its own);
  at a call's start it runs alone when a job beside it would slow it past the horizon."""
  big, small = job("big", 400, first=True), job("small", 100)
  assert plan([big, small], [], 480, 2, flat, started=True)[0].job.name == "small"
  assert [s.job.name for s in plan([big, small], [], 480, 2, flat, started=True)] == ["small"]
  slow = lambda n: 1.0 if n == 1 else 1.3  # two at once: each 1.3x slower
  # beside small, big does 100 of its 400 s in small's 130 s: it ends at 430
  assert [s.job.name for s in plan([big, small], [], 420, 2, slow)] == ["big"]
  assert [s.job.name for s in plan([big, small], [], 430, 2, slow)] == ["big", "small"]


def test_a_running_job_already_late_does_not_stop_others_from_starting():
  late = Running(job("late", 500), Cost(0.0, 400.0, 0.0))
  assert [s.job.name for s in plan([job("next", 50)], [late], 100, 2, flat)] == ["next"]
  on_time = Running(job("on_time", 100), Cost(0.0, 90.0, 0.0))
  slow = lambda n: 1.0 if n == 1 else 1.2
  # beside 'next', on_time does 50 of its 90 s in 60 s and ends at 100: past a horizon of 95
  assert plan([job("next", 50)], [on_time], 95, 2, slow) == []
  assert [s.job.name for s in plan([job("next", 50)], [on_time], 100, 2, slow)] == ["next"]


def test_a_stack_that_does_not_fit_runs_as_its_runs():
  """A row's two seeds as one stack (one start and compile for both, 250 s) do not fit in 200 s;
  its runs (130 s each) do, one in each slot, each started once, and the next job after them."""
  parts = (job("r-s0", 130), job("r-s1", 130))
  stack = Job("r-s0,r-s1", Cost(0.0, 250.0, 0.0), split=parts)
  started = drive([stack, job("next", 60)], Fake(), slots=2, horizon=200)
  assert [(s.job.name, s.start) for s in started] == [("r-s0", 0.0), ("r-s1", 0.0),
                                                       ("next", pytest.approx(130.0, abs=0.6))]
  assert [s.job.name for s in plan([stack], [], 300, 2, flat)] == ["r-s0,r-s1"]
