"""One of several processes preparing one dataset at once (run as a script by test_bible.py).

argv: sword_dir data_dir ready_file go_file lock|nolock. Imports TFDS, writes ready_file, waits
for go_file (so that every worker starts building in the same few milliseconds), then prepares
bible_translate/web-sparv in data_dir; its log lines go to stderr. `nolock` builds without the
data directory's lock, as on object storage, where the workers race to rename their builds.
"""

import contextlib
import logging
import os
import pathlib
import sys
import time

os.environ["JAX_PLATFORMS"] = "cpu"


def main():
  sword_dir, data_dir, ready, go, mode = sys.argv[1:6]
  logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
  from tfm.data import sources  # pylint: disable=import-outside-toplevel
  from tfm.data.config import DataConfig  # pylint: disable=import-outside-toplevel
  sources.tfds_module()  # TensorFlow's import is the slow part: done before the start signal
  if mode == "nolock":
    sources._one_builder_at_a_time = lambda builder: contextlib.nullcontext()  # pylint: disable=protected-access
  cfg = DataConfig(dataset="bible_translate/web-sparv", source_lang="en", target_lang="es",
                   data_dir=data_dir, manual_dir=sword_dir)
  pathlib.Path(ready).touch()
  while not os.path.exists(go):
    time.sleep(0.005)
  sources.prepare(sources.DataSource.of(cfg))


if __name__ == "__main__":
  main()
