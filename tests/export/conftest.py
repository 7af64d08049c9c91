"""What the export parity tests (long tier) share: the export-check extra's libraries."""

import os

import pytest


@pytest.fixture(scope="module")
def libraries():
  try:
    import ctranslate2  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    if os.environ.get("TFM_CI"):
      pytest.fail(f"the export-check extra is missing in CI ({e}): .ci/run installs it")
    pytest.skip(f"the export-check extra is not installed ({e}): pip install -e '.[export-check]'")
  return torch, transformers, ctranslate2
