"""What `tfm eval` does with a result beside computing it: the keys that say which parameters it
scored, its printing, and the files written kept with the run's MLflow / W&B run."""

from __future__ import annotations

import sys


def checkpoint_keys(t) -> dict:
  """A result's record of which parameters it scored beside `checkpoints`: the run's best
  checkpoint, or the EMA with its decay and warmup; {} for the checkpoints (averaged)."""
  keys = {"checkpoint": "best", "best": t.best} if t.best else {}
  if t.checkpoint == "ema":
    keys.update(checkpoint="ema", ema_decay=t.config.train.ema_decay,
                ema_warmup=t.config.train.ema_warmup)
  return keys


def record_written(workdir: str, written: list) -> None:
  """The result files kept with the run's MLflow / W&B run, under eval/ (a tracker that fails
  is said on stderr: the results are written already)."""
  if not written:
    return
  from tfm.train import trackers  # pylint: disable=import-outside-toplevel
  try:
    trackers.record_later(workdir, files=tuple(written), folder="eval")
  except Exception as e:  # pylint: disable=broad-except
    reason = " ".join(str(e).split())[:300]
    print(f"[eval] the results did not reach the run's trackers ({reason})", file=sys.stderr)


def print_result(result: dict) -> None:
  for key, value in result.items():
    if key == "context_lengths":
      for entry in value:
        print(f"{'context ' + str(entry['context_length']):>22}: " + ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in entry.items()
            if k != "context_length"))
      continue
    if key == "by_length":
      for entry in value:
        print(f"{'length ' + entry['bucket']:>22}: " + ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in entry.items()
            if k not in ("bucket", "min_length", "max_length")))
      continue
    print(f"{key:>22}: {value}")
