"""The sweep's ETA (tfm/sweep/execute.eta_seconds) against schedules worked out by hand."""

import pytest

from tfm.sweep.execute import eta_seconds


@pytest.mark.parametrize("durations, pending, running_for, slots, left", [
    # 8 runs of 100 s, 2 at a time. t=100: the first result, the other slot's run just ended too
    # (not yet polled), 6 to start: 3 more rounds.
    ([100.0], 6, [100.0], 2, 300.0),
    # t=200, 4 results, 2 just started, 2 to start: 2 more rounds.
    ([100.0] * 4, 2, [0.0, 0.0], 2, 200.0),
    # t=250: halfway through those two.
    ([100.0] * 4, 2, [50.0, 50.0], 2, 150.0),
    # One at a time, the last run 30 s in: 70 s.
    ([90.0, 110.0], 0, [30.0], 1, 70.0),
    # A run past the mean is counted as about to end, not as negative time.
    ([100.0], 0, [140.0], 1, 0.0),
])
def test_eta_is_the_work_left_shared_by_the_slots(durations, pending, running_for, slots, left):
  assert eta_seconds(durations, pending, running_for, slots) == pytest.approx(left)
