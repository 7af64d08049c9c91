"""`tfm export --workdir DIR --out NEW [--average N | --checkpoint best] [--ct2 CT2
[--ct2_quantization int8]]`: the trained model as a Hugging Face transformers directory, and with
--ct2 as a CTranslate2 model too.

The class follows from the config (tfm/export/targets.py): a translation model (encoder-decoder)
is a MarianMTModel, a language model (task lm) a GPT2LMHeadModel (absolute positions) or a
LlamaForCausalLM (rope), a masked language model (task mlm) a BertForMaskedLM (post-LN) or a
RobertaPreLayerNormForMaskedLM (pre-LN). NEW then loads with the class's `from_pretrained(NEW)`
and `AutoTokenizer.from_pretrained(NEW)` (no network). The parameters are those `tfm eval` would
use with the same flags (the workdir's train.average_checkpoints last checkpoints averaged, or its
best checkpoint). A config the class cannot hold is refused in one line naming its key before
anything is loaded or written. Writing needs numpy and safetensors only.
--ct2 converts the export with CTranslate2's converter (Marian's keeping the start token's
embedding that its Marian loader replaces by zeros; GPT-2's and Llama's as they are;
tfm/export/ct2.py): it needs the export-check extra. Both
directories are made under scratch names beside them and renamed into place once the conversion
has succeeded: a failed or killed export leaves neither (a rerun would refuse an existing --out),
and the next export removes what a killed one left (`_scratch`).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile

from absl import flags
from etils import epath

from tfm import tasks
from tfm.commands import (UsageError, announce_backend, define_trained_flags, refuse_config,
                          require_workdir)

NOTES = ("Which class a model becomes, the mapping (for Marian the d_model permutation that "
         "turns tfm's interleaved sinusoids into sines-then-cosines and pad moved to the last id; "
         "for every class the sqrt(d_model) embedding scale folded into the tables, zero biases "
         "where tfm has none), what is refused and the measured parity: docs/export.md.")


def define_flags(fv: flags.FlagValues):
  define_trained_flags(fv)
  flags.DEFINE_string("out", None, "the directory to write (must not exist, or be empty)",
                      flag_values=fv)
  flags.DEFINE_string("ct2", None, "also convert the export into a CTranslate2 model in this new "
                      "directory, decoding from the start token's embedding as tfm does "
                      "(tfm/export/ct2.py; needs the export-check extra)", flag_values=fv)
  flags.DEFINE_string("ct2_quantization", None, "with --ct2: CTranslate2's weight type (int8, "
                      "int8_float32, float16, ...; default float32)", flag_values=fv)


def _check_out(out: str) -> epath.Path:
  path = epath.Path(out)
  if path.exists() and (not path.is_dir() or any(path.iterdir())):
    raise UsageError(f"--out {out}: expected a new or empty directory, got an existing "
                     f"{'directory with files' if path.is_dir() else 'file'}")
  return path


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process
    return True
  return True


def _scratch(target: str) -> str:
  """A new directory beside `target` (the same filesystem: a rename places it), named
  `.NAME.tfm-export.HOST.PID.XXXX` for this host and process, mode as mkdir would make it. Those
  an export killed on this host left beside `target` (their process gone) are removed first, so a
  rerun leaves nothing of a killed one."""
  parent, name = os.path.split(target)
  os.makedirs(parent, exist_ok=True)
  stem = f".{name}.tfm-export.{socket.gethostname()}."
  for entry in os.listdir(parent):
    pid = entry[len(stem):].split(".", 1)[0] if entry.startswith(stem) else ""
    if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
      shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
  scratch = tempfile.mkdtemp(prefix=f"{stem}{os.getpid()}.", dir=parent)
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(scratch, 0o777 & ~umask)  # mkdtemp's is 0700: the directory as mkdir would make it
  return scratch


def _place(scratch: str, target: str) -> None:
  if os.path.isdir(target):
    os.rmdir(target)  # empty: _check_out
  os.rename(scratch, target)


def write_directory(out: epath.Path, files: dict[str, bytes], ct2: str | None = None,
                    quantization: str | None = None) -> None:
  """Writes `files` (name -> bytes) as the directory `out` and, with `ct2`, CTranslate2's
  conversion of it (tfm/export/ct2.py) as the directory `ct2`. Both are made whole under scratch
  names beside their targets, and renamed into place only once the conversion has succeeded: each
  appears whole or not at all, and a failed or killed conversion leaves no `out` that a rerun
  would refuse (an empty target is replaced). A remote `out` (gs://...) is staged in a local
  temporary directory and uploaded file by file."""
  from tfm import storage  # pylint: disable=import-outside-toplevel
  remote = storage.is_remote(out)
  target = None if remote else os.path.abspath(os.fspath(out))
  made = []
  try:
    staged = tempfile.mkdtemp(prefix="tfm-export.") if remote else _scratch(target)
    made.append(staged)
    for name, data in files.items():
      with open(os.path.join(staged, name), "wb") as f:
        f.write(data)
    if ct2 is not None:
      from tfm.export import ct2 as ct2_lib  # pylint: disable=import-outside-toplevel
      ct2_target = os.path.abspath(os.fspath(ct2))
      made.append(_scratch(ct2_target))
      ct2_lib.convert(staged, os.path.join(made[-1], "model"), quantization)
    if remote:
      for name, data in files.items():
        storage.write_atomically(out / name, data)
    else:
      _place(staged, target)
    if ct2 is not None:
      try:
        _place(os.path.join(made[-1], "model"), ct2_target)
      except BaseException:
        if not remote:
          shutil.rmtree(target, ignore_errors=True)  # the export just placed: neither appears
        raise
  finally:
    for directory in made:
      shutil.rmtree(directory, ignore_errors=True)


def run(fv: flags.FlagValues, config):
  refuse_config(config)
  require_workdir(fv)
  if not fv.out:
    raise UsageError("--out is required")
  out = _check_out(fv.out)
  if fv.ct2_quantization and not fv.ct2:
    raise UsageError("--ct2_quantization applies with --ct2")
  if fv.ct2:
    _check_ct2_target(fv.out, fv.ct2)
    _check_out(fv.ct2)
    _check_ct2(fv.ct2_quantization)
  # pylint: disable=import-outside-toplevel
  from tfm.eval.restore import read_workdir_config
  from tfm.export import ct2, marian, refusals, targets

  # The class and its refusals, from the config alone: before anything is loaded or written.
  saved = read_workdir_config(fv.workdir)
  refusals.check_task(tasks.get(saved.task), saved.data)  # a task that does not translate (span)
  model_cfg = saved.model
  target = targets.check(model_cfg)
  if fv.ct2:
    why = ct2.refusal(target.name, model_cfg.d_k, model_cfg.d_model, model_cfg.num_heads)
    if why:
      raise UsageError(why)
  import flax.linen as nn
  import jax
  from tfm.eval.restore import load_trained

  t = load_trained(fv.workdir, fv.average, checkpoint=fv.checkpoint)
  announce_backend(t.note)
  cfg = t.config.model
  pieces = t.tokenizer.pieces(range(t.tokenizer.vocab_size))
  marian.vocabulary(pieces, cfg.vocab_size)  # refuses a model smaller than its vocabulary
  params = jax.device_get(nn.meta.unbox(t.params))
  provenance = {"workdir": os.fspath(fv.workdir), "checkpoints": t.steps,
                "checkpoint": fv.checkpoint, **({"best": t.best} if t.best else {})}
  files = target.export_files(t.config, params, t.tokenizer.__getstate__()["proto"], pieces,
                              provenance)
  if jax.process_index() == 0:
    write_directory(out, files, fv.ct2, fv.ct2_quantization)
  if target.name == "MarianMTModel" and cfg.norm_epsilon != marian.EPSILON:
    print(f"tfm export: model.norm_epsilon={cfg.norm_epsilon:g}; MarianMTModel's LayerNorms use "
          f"{marian.EPSILON:g} (fixed in transformers): the exported function differs by that "
          "(docs/export.md measures it)", file=sys.stderr)
  print(f"tfm export: checkpoint(s) {t.steps} of {fv.workdir} written to {fv.out} as a "
        f"{target.name} ({len(files)} files)")
  if fv.ct2:
    print(f"tfm export: {fv.out} converted to CTranslate2 in {fv.ct2} "
          f"({fv.ct2_quantization or 'float32'})")


def _check_ct2_target(out: str, ct2: str) -> None:
  """--ct2 is a local directory apart from --out (neither inside the other)."""
  from tfm import storage  # pylint: disable=import-outside-toplevel
  if storage.is_remote(ct2):
    raise UsageError(f"--ct2 {ct2}: expected a local directory (CTranslate2's converter writes "
                     "local files)")
  a, b = os.path.abspath(out), os.path.abspath(ct2)
  if a == b or b.startswith(a + os.sep) or a.startswith(b + os.sep):
    raise UsageError(f"--ct2 {ct2}: expected a directory apart from --out {out} (neither "
                     "inside the other)")


def _check_ct2(quantization: str | None) -> None:
  """--ct2's libraries and --ct2_quantization (one of CTranslate2's weight types), before anything
  is loaded or written."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  missing = [m for m in ("ctranslate2", "torch", "transformers") if importlib.util.find_spec(m) is None]
  if missing:
    raise UsageError(f"--ct2: needs {', '.join(missing)} (pip install -e '.[export-check]')")
  if quantization is None:
    return
  # pylint: disable-next=import-outside-toplevel
  from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES  # (its import loads torch)
  if quantization not in ACCEPTED_MODEL_TYPES:
    raise UsageError(f"--ct2_quantization {quantization}: expected one of CTranslate2's "
                     f"{', '.join(ACCEPTED_MODEL_TYPES)}")
