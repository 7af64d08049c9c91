"""Where log records go: tfm's own to the console, everyone's to a log file in the workdir.

  console                                tfm.* INFO records to stdout (beside the training
                                         lines; not for commands whose stdout is their result);
                                         any library's warnings and errors to stderr
                                         (absl, TFDS, Orbax, JAX INFO records: the file only)
  WORKDIR/logs/<start>-host<i>.log       every record at INFO and above, with time and logger: one
                                         file per run and host, on any storage (copied there every
                                         30 s and at the end, once the run owns the workdir)

`configure_console()` runs once when the `tfm` command starts; `workdir_log()` around training.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time

from etils import epath

from tfm import storage

FILE_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"


def _is_tfm(record: logging.LogRecord) -> bool:
  return record.name.split(".")[0] == "tfm"


class _Console(logging.StreamHandler):
  """A StreamHandler on whatever sys.stdout / sys.stderr is when a record is emitted, not when the
  handler was made (a caller that swaps the streams, as pytest's capture does, is followed)."""

  def __init__(self, name: str):
    self._sys_name = name
    super().__init__(getattr(sys, name))

  @property
  def stream(self):
    return getattr(sys, self._sys_name)

  @stream.setter
  def stream(self, value):  # StreamHandler.__init__ / setStream: the stream is always sys's
    del value


def configure_console(info: bool = True) -> None:
  """Everyone's warnings and errors to stderr ('WARNING absl: ...') and, with `info`, tfm's INFO
  records to stdout ('tfm: ...', beside the training lines). Commands whose stdout is their
  result (translate, eval, params) pass info=False; other libraries' INFO records go only to the
  workdir's log file."""
  info_handler = _Console("stdout")
  info_handler.addFilter(lambda r: info and _is_tfm(r) and logging.INFO <= r.levelno < logging.WARNING)
  info_handler.setFormatter(logging.Formatter("tfm: %(message)s"))
  problems = _Console("stderr")
  problems.setLevel(logging.WARNING)
  problems.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
  root = logging.getLogger()
  consoles = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
  root.handlers = [h for h in root.handlers  # ours from an earlier call, or logging.basicConfig's
                   if h.get_name() not in ("tfm-info", "tfm-problems")
                   and not (type(h) is logging.StreamHandler and h.stream in consoles)]
  for name, handler in (("tfm-info", info_handler), ("tfm-problems", problems)):
    handler.set_name(name)
    root.addHandler(handler)
  root.setLevel(logging.INFO)
  try:  # absl's own handler would print its records a second time
    from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
    absl_logging.get_absl_handler().setLevel(logging.CRITICAL + 1)
  except ImportError:
    pass


class WorkdirLog(logging.FileHandler):
  """Every record at INFO and above, to a local file that is copied to WORKDIR/logs/ once the run
  owns the workdir (publish), then at most every SYNC_S seconds and when the handler closes.

  Until publish() nothing is written into the workdir, so a run refused at start-up (a bad
  config, a locked workdir) leaves it as it was, while its records are still kept.
  """

  SYNC_S = 30.0

  def __init__(self, process_index: int):
    self.filename = f"{time.strftime('%Y%m%d-%H%M%S')}-host{process_index}.log"
    self._dir = tempfile.mkdtemp(prefix="tfm-log-")
    super().__init__(os.path.join(self._dir, self.filename), encoding="utf-8")
    self.setLevel(logging.INFO)
    self.setFormatter(logging.Formatter(FILE_FORMAT))
    self.targets: list[epath.Path] = []
    self._synced = 0.0
    self._copying = threading.Lock()

  def publish(self, *workdirs: str | epath.Path) -> None:
    """Copies the log into WORKDIR/logs/ of each workdir (a stack's members' too) from now on."""
    self.targets = [epath.Path(w) / "logs" / self.filename for w in workdirs]
    self._copy()

  def _copy(self) -> None:
    with self._copying:
      self._upload()

  def _upload(self) -> None:
    """Copies the file so far to the target. The upload runs outside the handler's lock: the
    storage library logs from its own threads while it uploads (gcsfs does), and those records
    must still reach this handler rather than wait for a lock the upload holds."""
    self._synced = time.monotonic()
    with self.lock:
      self.flush()
      with open(self.baseFilename, "rb") as f:  # our own local file
        data = f.read()
    for target in self.targets:
      storage.write_atomically(target, data)

  def handle(self, record: logging.LogRecord) -> bool:
    emitted = super().handle(record)  # to the local file, under the handler's lock
    due = bool(self.targets) and time.monotonic() - self._synced >= self.SYNC_S
    if due and self._copying.acquire(blocking=False):  # one upload at a time, never re-entered
      try:
        self._upload()
      finally:
        self._copying.release()
    return emitted

  def close(self) -> None:
    if self.targets and self.stream is not None:
      self._copy()
    super().close()
    shutil.rmtree(self._dir, ignore_errors=True)


@contextlib.contextmanager
def workdir_log(process_index: int):
  """Adds a WorkdirLog to the root logger (INFO and above) for the duration of a run."""
  root = logging.getLogger()
  level = root.level
  handler = WorkdirLog(process_index)
  root.addHandler(handler)
  root.setLevel(min(level, logging.INFO) if level else logging.INFO)
  try:
    yield handler
  finally:
    root.removeHandler(handler)
    root.setLevel(level)
    handler.close()
