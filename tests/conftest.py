"""Test-session settings: CPU only, and a persistent XLA compilation cache shared by the session.

Many tests compile the same step functions (the training loop tests run several short trainings of
one config); the cache turns the repeats into lookups. It lives in a fresh directory per session, so
no test depends on what an earlier session compiled.
"""

import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="tfm-xla-cache-"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
