"""The tasks a run can learn (config.task), each a module of its own with one Task object:

  translate  the paper's encoder-decoder on source/target pairs      tfm/tasks/translate.py
  lm         a decoder-only causal language model of monolingual text tfm/tasks/lm.py
  mlm        an encoder-only masked language model of it (BERT)      tfm/tasks/mlm.py
  span       T5's span corruption of it on the encoder-decoder       tfm/tasks/span.py

  task = tasks.get(config.task)   # -> the Task (tfm/tasks/task.py): what the rest of tfm asks

A new task is a module that subclasses Task plus its line in _TASKS below.
"""

from __future__ import annotations

from tfm import sections
from tfm.tasks import lm, mlm, span, translate
from tfm.tasks.task import Task

_TASKS = {task.name: task for task in (translate.TASK, lm.TASK, mlm.TASK, span.TASK)}
NAMES = tuple(_TASKS)
ALL = tuple(_TASKS.values())
# The task of a config that names none (tfm/config.py's default), and of results and evaluations
# written before config.task existed.
DEFAULT = translate.TASK


def get(name) -> Task:
  """The task called `name`; ValueError in one line, naming the key, for any other value."""
  if not isinstance(name, str) or name not in _TASKS:
    sections.fail("task", f"one of {NAMES}", name)
  return _TASKS[name]


__all__ = ["ALL", "DEFAULT", "NAMES", "Task", "get"]
