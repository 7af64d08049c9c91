"""Test-session settings: CPU only, a persistent XLA compilation cache shared by the session, the
cycle collector's thresholds, and the fast tier's time budget (tests/time_budget.py).

Many tests compile the same step functions (the training loop tests run several short trainings of
one config); the cache turns the repeats into lookups. It lives in a fresh directory per session, so
no test depends on what an earlier session compiled.
"""

import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests import time_budget

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# TensorFlow (2.21) and Triton (3.7) each bundle LLVM: a process that has imported tensorflow dies
# (SIGSEGV) when it then imports triton. torch imports triton only to look for GPU kernels
# (torch._dynamo's has_triton_package, reached from transformers' generation code, which the
# long tier's GPT-2 / BERT / Marian checks load in a worker that may have run TFDS tests); the CPU
# tests need none, so their processes see triton as absent, as under a CPU build of torch.
sys.modules.setdefault("triton", None)
# Made by the process that starts the session (pytest-xdist's workers inherit the variable) and
# removed by it when the session ends: each session's cache holds ~40 MB of compiled programs.
_OWN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _OWN_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfm-xla-cache-")
# 0.1 s: tests recompile the same small programs (a tiny model's init, ~0.3 s) many times over;
# caching them took test_scan_layers + test_transformer_decoding from 105-108 s to 101 s.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Tests run tiny models whose cost is compilation, not execution: ask XLA's CPU backend to compile
# fast. Without its fusion emitters, in one codegen split, a tiny Transformer's value_and_grad
# compiled in 0.95-1.4 s instead of 2.9-3.1 s on a 2-core machine (jax 0.10.2).
_FAST_COMPILE = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
                 "--xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1")
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FAST_COMPILE).strip()

# Python's cycle collector: a test process holds millions of objects (jax's and flax's caches and
# traced programs, tensorflow's and orbax's modules), and a full collection walks them all, ~1 s
# each on a 2-core machine; with the default thresholds (700, 10, 10) a process running tests/model,
# decode and train made 39 of them. Young collections every 50,000 allocations instead of 700, and
# a full one only after 100 of the middle ones: 1 full collection there, 8% less CPU time, the same
# peak memory (4.2 GB; the garbage of a test dies young, in the young collections).
gc.set_threshold(50_000, 20, 100)


def pytest_collection_finish(session):  # pylint: disable=unused-argument
  """What the imports and the collection built goes to the collector's permanent generation (never
  walked again): a full collection walks only what the tests add."""
  gc.collect()
  gc.freeze()


def pytest_unconfigure(config):  # pylint: disable=unused-argument
  if _OWN_CACHE is not None:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
  """The longest files first, each file's tests in their usual order: a worker that takes the next
  file when it is free (below) ends on short ones, so neither waits long for the other at the end.
  Longest by their seconds in the record of the last quiet run (time_budget.RECORD); a file it
  does not hold goes first if it holds a `slow` test, last otherwise."""
  seconds = time_budget.file_seconds(time_budget.RECORD)
  slow = {item.path for item in items if item.get_closest_marker("slow")}

  def order(item):
    name = item.path.relative_to(config.rootpath).as_posix()
    if name in seconds:
      return (1, -seconds[name])
    return (0, 0.0) if item.path in slow else (2, 0.0)

  items.sort(key=order)  # stable: collection order within a file, and among unknown files


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """With -n and no --dist of one's own, whole files go to the workers, in collection order.

  A file stays on one worker (its module fixtures and cached models are built once) and a worker
  takes the next file when it is free. The long end-to-end files come first (above): started last,
  one of them would leave a worker idle while the other finishes it.
  """
  if config.getoption("dist") != "load":
    return None
  from xdist.scheduler import LoadFileScheduling  # pylint: disable=import-outside-toplevel
  config.option.loadscopereorder = False  # keep the order above, not files sorted by test count
  return LoadFileScheduling(config, log)


# (test id, seconds) of every phase of every test this process saw reported: under pytest-xdist the
# controller sees its workers' reports here too.
_DURATIONS: list[tuple[str, float]] = []
_OVER_BUDGET = pytest.StashKey[str]()


def pytest_runtest_logreport(report):
  _DURATIONS.append((report.nodeid, report.duration))


def pytest_sessionfinish(session, exitstatus):
  """The whole fast tier past its budget (tests/time_budget.py) fails the session."""
  config = session.config
  if hasattr(config, "workerinput") or exitstatus not in (pytest.ExitCode.OK,
                                                           pytest.ExitCode.TESTS_FAILED):
    return
  budget = time_budget.budget_s(os.environ)
  narrowed = any(config.getoption(name, default=None) for name in (
      "deselect", "ignore", "ignore_glob", "lf", "collectonly"))
  if budget is None or not time_budget.whole_fast_tier(
      config.option.markexpr, config.option.keyword, config.args, config.invocation_params.dir,
      Path(__file__).parent, narrowed):
    return
  line = time_budget.verdict(_DURATIONS, budget)
  if line is not None:
    config.stash[_OVER_BUDGET] = line
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
  if _OVER_BUDGET in config.stash:
    terminalreporter.write_line(config.stash[_OVER_BUDGET], red=True, bold=True)
