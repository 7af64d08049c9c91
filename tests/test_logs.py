"""Where log records go (tfm/logs.py): the console handlers and the workdir's log file."""

import io
import logging
import sys
import threading

from tfm import logs, storage


def test_upload_does_not_hold_the_lock_records_from_other_threads_need(tmp_path, monkeypatch):
  """gcsfs logs from its event-loop thread while it uploads; the upload of the log file must not
  hold the handler's lock those records wait for (it did: a 2-host run on gs:// hung)."""
  handler = logs.WorkdirLog(process_index=0)
  logger = logging.getLogger("tests.logs.upload")
  logger.propagate = False
  logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  uploads = []

  def write(target, data):  # stands for a storage library that logs from another thread
    worker = threading.Thread(target=logger.warning, args=("from the upload thread",))
    worker.start()
    worker.join(timeout=10)
    uploads.append((worker.is_alive(), data))
    return target

  monkeypatch.setattr(storage, "write_atomically", write)
  try:
    handler.publish(tmp_path / "workdir")
    monkeypatch.setattr(logs.WorkdirLog, "SYNC_S", 0.0)
    logger.info("a step")  # due: uploads from inside handle()
  finally:
    logger.removeHandler(handler)
    handler.close()
  assert uploads and not any(alive for alive, _ in uploads), "the upload waited on its own lock"
  assert b"a step" in uploads[-1][1] and b"from the upload thread" in uploads[-1][1]


def test_console_replaces_basic_config_handlers(monkeypatch):
  """A library that logged through the root logger before tfm started leaves basicConfig's
  handler behind; the console then prints each warning once, in tfm's format."""
  err = io.StringIO()
  monkeypatch.setattr(sys, "stderr", err)
  root = logging.getLogger()
  saved = root.handlers[:], root.level
  root.handlers = []
  try:
    logging.basicConfig()  # what a stray logging.warning() call does
    logs.configure_console(info=False)
    logging.getLogger("somelib").warning("disk nearly full")
  finally:
    root.handlers, _ = saved
    root.setLevel(saved[1])
  assert err.getvalue() == "WARNING somelib: disk nearly full\n"
