"""The persistent XLA compilation cache: a restart, an eval or a plan of an unchanged step loads
its compiled executable instead of compiling it again (minutes for big models on pods).

train.compilation_cache_dir: None = $JAX_COMPILATION_CACHE_DIR if set, else ~/.cache/tfm/xla (each
host's local disk); "" = off; any other path (gs:// too) is used as given. Entries are keyed by
the computation, the compiler options and the devices, so a stale entry is never loaded.
"""

from __future__ import annotations

import logging
import os

import jax

DEFAULT_DIR = "~/.cache/tfm/xla"
log = logging.getLogger(__name__)


def resolve(configured: str | None) -> str | None:
  """The cache directory for train.compilation_cache_dir, or None when the cache is off."""
  if configured is None:
    configured = jax.config.jax_compilation_cache_dir or DEFAULT_DIR
  if not configured:
    return None
  return configured if "://" in configured else os.path.abspath(os.path.expanduser(configured))


def enable(configured: str | None) -> str | None:
  """Points JAX's persistent compilation cache at resolve(configured); returns the directory, or
  None when the cache is off. A directory that cannot be created or written turns the cache off
  with one warning naming the key: the cache only saves time, and commands that read a trained
  workdir's config (eval, translate) could not change it."""
  directory = resolve(configured)
  if directory is not None and directory != jax.config.jax_compilation_cache_dir:
    if "://" not in directory:
      try:
        os.makedirs(directory, exist_ok=True)
        problem = None if os.access(directory, os.W_OK) else "not writable"
      except OSError as error:
        problem = error.strerror or str(error)
      if problem:
        given = (repr(configured) if configured is not None
                 else f"None ($JAX_COMPILATION_CACHE_DIR or {DEFAULT_DIR})")
        log.warning("config key train.compilation_cache_dir: expected a directory this process can "
                    "create and write, got %s (%s: %s); compiling without the cache (set another "
                    "directory, or \"\" to turn it off)", given, directory, problem)
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
  return directory
