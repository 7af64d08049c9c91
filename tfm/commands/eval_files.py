"""The names of the files `tfm eval` writes in a workdir, and what a name records (the checkpoints,
the --limit, the length buckets and context lengths), which `tfm sweep` reads back to find the
result that scored a run as its config asks (tfm/commands/sweep_results.py)."""

import re

RESULT = re.compile(r"eval_(?P<split>[A-Za-z0-9][A-Za-z0-9_.-]*?)_(?P<step>\d+)_avg(?P<averaged>\d+)"
                    r"(?:_first(?P<limit>\d+))?(?:_len(?P<buckets>\d+(?:-\d+)*))?"
                    r"(?:_ctx(?P<contexts>\d+(?:-\d+)*))?\.json")
# The EMA's result (--checkpoint ema, train.ema_decay), which a sweep reads beside RESULT's.
EMA_RESULT = re.compile(r"eval_(?P<split>[A-Za-z0-9][A-Za-z0-9_.-]*?)_ema(?P<step>\d+)"
                        r"(?:_first(?P<limit>\d+))?(?:_len(?P<buckets>\d+(?:-\d+)*))?"
                        r"(?:_ctx(?P<contexts>\d+(?:-\d+)*))?\.json")


def result_name(split: str, steps: list[int], limit: int, suffix: str = "",
                best: bool = False, buckets: tuple[int, ...] = (), ema: bool = False,
                contexts: tuple[int, ...] = (), truncate: bool = False) -> str:
  """The file `tfm eval` writes for checkpoints `steps` averaged and BLEU over `limit` pairs.
  suffix: the decoding settings where they are not the run's own (Decoding.suffix); best: the
  run's best checkpoint (train.best_metric), eval_<split>_best<step>..., and ema: the EMA of the
  parameters at the last checkpoint (train.ema_decay), eval_<split>_ema<step>..., apart from the
  series' (RESULT, which the sweep reads, matches only the latter); buckets: the length buckets'
  edges; contexts: an lm's context lengths (--context_lengths or eval.context_lengths:
  _ctx<L1-L2..>); truncate: --truncate's sources cut to a learned position table, _truncate
  (neither RESULT nor EMA_RESULT matches it: a sweep reads the sources as the model takes them)."""
  checkpoints = (f"best{steps[-1]}" if best else f"ema{steps[-1]}" if ema
                 else f"{steps[-1]}_avg{len(steps)}")
  return (f"eval_{split}_{checkpoints}" + (f"_first{limit}" if limit else "") + suffix
          + (f"_len{'-'.join(map(str, buckets))}" if buckets else "")
          + (f"_ctx{'-'.join(map(str, contexts))}" if contexts else "")
          + ("_truncate" if truncate else "") + ".json")


def buckets_named(name: str) -> tuple[int, ...]:
  """The length buckets' edges a result file's name records (() for none): a series' (RESULT) or
  an EMA's (EMA_RESULT)."""
  return _numbers_named(name, "buckets")


def contexts_named(name: str) -> tuple[int, ...]:
  """The context lengths a result file's name records (() for none): a series' or an EMA's."""
  return _numbers_named(name, "contexts")


def scored_as(name: str, buckets: tuple[int, ...], contexts: tuple[int, ...]) -> bool:
  """Whether result file `name` holds the length buckets and context lengths a run's eval section
  asks for (a sweep reads only such results: another bucketing is another computation)."""
  return buckets_named(name) == buckets and contexts_named(name) == contexts


def _numbers_named(name: str, group: str) -> tuple[int, ...]:
  m = RESULT.fullmatch(name) or EMA_RESULT.fullmatch(name)
  return tuple(int(n) for n in m[group].split("-")) if m and m[group] else ()
