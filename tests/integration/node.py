"""The GPU node's Python imitated on the CPU (docs/gpu.md): .venv-node, a clean virtualenv with
only the node's preinstalled packages (experiments/gpu/node-image.txt), which .ci/run builds with
the carried wheels for its Python in .venv-node/wheels. tests/integration/conftest.py's
node_python and node_bundle fixtures use it."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / ".venv-node"
PYTHON = NODE / "bin" / "python"


def clean_env() -> dict[str, str]:
  """This environment less what would reach into tfm's own: the node has none of it."""
  return {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "PYTHONPATH")}
