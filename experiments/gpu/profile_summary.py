"""A profiler trace of training steps in a few lines: the top device ops and the gaps between steps.

  python experiments/gpu/profile_summary.py TRACE_DIR    # the newest *.xplane.pb under it

Read with jaxlib's own reader of the trace (no TensorBoard or xprof needed, as on the GPU node):
  device ops   on a GPU, the "XLA Ops" lines of the /device planes, total time by op name; on a CPU
               (no device plane) the XLA threads' events of the /host:CPU plane
  device gaps  on a GPU, the idle time between one train step's module ending on the device and the
               next one starting ("XLA Modules" events whose name holds "step"): what the host
               fails to hide
  host steps   the Python thread's dispatches of the train step (PjitFunction(step...), on the
               thread with the most of them): the time
               from one dispatch's start to the next one's, and the part of it outside the dispatch
               (the loop's own Python, the next batch, metrics)
summarize() returns those figures as numbers; lines() formats them.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import statistics
import sys

STEP = re.compile(r"step", re.I)
NOT_OPS = re.compile(r"^(ThreadpoolListener|end: |ThunkExecutor|PjitFunction|ParseArguments|"
                     r"PythonRefManager|\$)")


def newest_trace(root: str) -> str | None:
  found = sorted(glob.glob(os.path.join(root, "**", "*.xplane.pb"), recursive=True),
                 key=os.path.getmtime)
  return found[-1] if found else None


def _spread(values: list[float]) -> dict[str, float]:
  """count, median, p90 and max of `values` (milliseconds)."""
  if not values:
    return {"count": 0}
  ordered = sorted(values)
  return {"count": len(values), "median_ms": statistics.median(ordered),
          "p90_ms": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
          "max_ms": ordered[-1]}


def outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
  """The spans (start, end) not inside an earlier one (a dispatch's trace holds nested events of
  the same name), sorted."""
  kept: list[tuple[int, int]] = []
  for start, end in sorted(spans):
    if not kept or start >= kept[-1][1]:
      kept.append((start, end))
  return kept


def summarize(path: str, top: int = 10) -> dict:
  """{'device_ops': [(name, total ms, share of all op time)], 'device_gaps': spread,
  'host_step_interval': spread, 'host_outside_dispatch': spread, 'step_modules': n}."""
  from jax._src.lib import _profile_data  # pylint: disable=import-outside-toplevel
  data = _profile_data.ProfileData.from_file(path)
  ops: collections.Counter = collections.Counter()
  modules, dispatches = [], []
  for plane in data.planes:
    device = plane.name.startswith("/device:")
    if not device and plane.name != "/host:CPU":
      continue
    for line in plane.lines:
      events = list(line.events)
      if device and line.name == "XLA Modules":
        modules += [(e.start_ns, e.end_ns) for e in events if STEP.search(e.name)]
      elif device and line.name == "XLA Ops":
        for e in events:
          ops[e.name] += e.duration_ns
      elif not device and line.name.startswith("tf_XLA"):  # a CPU's XLA threads: its "device"
        for e in events:
          if not NOT_OPS.match(e.name):
            ops[e.name] += e.duration_ns
      elif not device:  # a Python thread (named after it; the main one after the process)
        calls = outermost([(e.start_ns, e.end_ns) for e in events
                           if e.name.startswith("PjitFunction(") and STEP.search(e.name)])
        if len(calls) > len(dispatches):  # the thread that dispatches the steps
          dispatches = calls
  modules.sort()
  total = sum(ops.values()) or 1
  return {
      "trace": path,
      "device_ops": [(name, ns / 1e6, ns / total) for name, ns in ops.most_common(top)],
      "device_op_ms": total / 1e6,
      "step_modules": len(modules),
      "device_gaps": _spread([(b[0] - a[1]) / 1e6 for a, b in zip(modules, modules[1:])]),
      "host_step_interval": _spread([(b[0] - a[0]) / 1e6
                                     for a, b in zip(dispatches, dispatches[1:])]),
      "host_outside_dispatch": _spread([(b[0] - a[1]) / 1e6
                                        for a, b in zip(dispatches, dispatches[1:])]),
  }


def lines(summary: dict) -> list[str]:
  """The summary as text: one line a figure, then the top ops."""
  def spread(name, s):
    if not s.get("count"):
      return f"{name}: none found"
    return (f"{name}: median {s['median_ms']:.2f} ms, p90 {s['p90_ms']:.2f} ms, max "
            f"{s['max_ms']:.2f} ms over {s['count']}")
  out = [f"profile: {summary['trace']}",
         spread("device idle between train steps", summary["device_gaps"]),
         spread("host: dispatch to next dispatch", summary["host_step_interval"]),
         spread("host: outside the step's dispatch", summary["host_outside_dispatch"]),
         f"top device ops ({summary['device_op_ms']:.1f} ms of ops in the trace):"]
  out += [f"  {share:6.1%}  {ms:9.2f} ms  {name[:100]}" for name, ms, share in
          summary["device_ops"]]
  return out


if __name__ == "__main__":
  trace = newest_trace(sys.argv[1])
  if trace is None:
    sys.exit(f"no *.xplane.pb under {sys.argv[1]}")
  print("\n".join(lines(summarize(trace))))
