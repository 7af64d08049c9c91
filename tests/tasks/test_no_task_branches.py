"""No code outside tfm/tasks branches on a task's name: what differs between tasks is asked of the
task object (tfm/tasks/task.py), so a new task is one module and one registry line. An AST scan of
tfm/ flags every comparison against a task name (task == 'lm', g.task != 'translate', ...) and
every other bare task-name string, but for the ones justified here:
  * the default of a field named `task` (tfm/config.py's Config.task = 'translate'), and the
    value under the key 'task' of a dict (ADDED_LATER: what a config.json without the key means);
  * in tfm/cli.py, the name of a command with a module in tfm/commands (`tfm translate` is a
    command, not the task).
Docstrings, and names inside longer strings (help text, messages), are not branches."""

import ast
import pathlib

from tfm import tasks

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _allowed(node: ast.Constant, parents: dict, path: pathlib.Path) -> bool:
  parent = parents.get(id(node))
  if (isinstance(parent, ast.AnnAssign) and parent.value is node
      and isinstance(parent.target, ast.Name) and parent.target.id == "task"):
    return True
  if isinstance(parent, ast.Dict) and node in parent.values:
    key = parent.keys[parent.values.index(node)]
    if isinstance(key, ast.Constant) and key.value == "task":
      return True
  return (path == ROOT / "tfm" / "cli.py"
          and (ROOT / "tfm" / "commands" / f"{node.value}.py").exists())


def task_name_branches(source: str, path: pathlib.Path) -> list[str]:
  """'line: code' for each comparison against a task name and each other bare task-name string
  of `source` (the file at `path`) that _allowed does not justify."""
  tree = ast.parse(source)
  parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
  docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)
                and isinstance(n.body[0].value, ast.Constant)}
  found, seen = [], set()
  names = lambda node: [c for c in ast.walk(node)
                        if isinstance(c, ast.Constant) and c.value in tasks.NAMES]
  for node in ast.walk(tree):  # outer comparisons first
    if isinstance(node, ast.Compare) and id(node) not in seen and names(node):
      found.append(f"{node.lineno}: {ast.unparse(node)}")
      seen |= {id(c) for c in ast.walk(node)}
  for node in ast.walk(tree):
    if (isinstance(node, ast.Constant) and node.value in tasks.NAMES and id(node) not in seen
        and id(node) not in docstrings and not _allowed(node, parents, path)):
      found.append(f"{node.lineno}: {node.value!r}")
  return found


def test_no_code_outside_tfm_tasks_branches_on_a_task_name():
  found = []
  for path in sorted((ROOT / "tfm").rglob("*.py")):
    if (ROOT / "tfm" / "tasks") in path.parents:
      continue
    found += [f"{path.relative_to(ROOT)}:{hit}"
              for hit in task_name_branches(path.read_text(), path)]
  assert not found, "task-name branches outside tfm/tasks (ask the task object):\n" + "\n".join(found)


def test_the_scan_finds_the_branches_it_is_for():
  """The scan is not blind: each kind of branch in a made-up module is flagged, the justified
  defaults and a docstring or message that names a task are not."""
  source = '''"""The lm task's module docstring."""
task: str = "translate"
ADDED = {"task": "translate"}
def f(config, g, task):
  """For 'mlm'."""
  if config.task == "lm" or g.task != "translate":
    return "lm"
  words = [x for x in g if x.task in ("mlm",)]
  return {"mlm": 1}, f"task {task!r} is not 'lm'", (task == "mlm") != words
'''
  found = task_name_branches(source, ROOT / "tfm" / "made_up.py")
  assert sorted(found) == ["6: config.task == 'lm'", "6: g.task != 'translate'", "7: 'lm'",
                           "8: x.task in ('mlm',)", "9: 'mlm'", "9: (task == 'mlm') != words"]
