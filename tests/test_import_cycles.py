"""No import cycle in tfm/: every module's imports, read from its source, form a graph without a
circle. A cycle makes a module's names depend on which side was imported first (one side sees the
other half-built), so it is refused here, before it becomes an ImportError in some entry point."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _modules(package: pathlib.Path) -> dict[str, pathlib.Path]:
  """{'tfm.data.config': path, 'tfm.train.checkpoint': .../__init__.py, ...}"""
  out = {}
  for path in package.rglob("*.py"):
    parts = path.relative_to(package.parent).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


def _imports(name: str, path: pathlib.Path, modules) -> set[str]:
  """The tfm modules `name` imports: `import a.b`, `from a import b` (b a module, else a), relative
  forms resolved. Every import statement counts, at any depth, but those under `if TYPE_CHECKING:`
  (never run)."""
  tree = ast.parse(path.read_text(), str(path))
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  skipped = {id(node) for guard in ast.walk(tree) if isinstance(guard, ast.If)
             and "TYPE_CHECKING" in ast.unparse(guard.test) for stmt in guard.body
             for node in ast.walk(stmt)}
  found = set()
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.Import):
      found |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      for alias in node.names:
        found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
  # A package's own submodules are not a cycle with it (Python imports the package first anyway).
  return {m for m in found if m in modules and m != name and not m.startswith(name + ".")}


def find_cycles(package: pathlib.Path) -> list[list[str]]:
  """Each strongly connected group of more than one module (Tarjan), as a sorted list."""
  modules = _modules(package)
  graph = {name: _imports(name, path, modules) for name, path in modules.items()}
  index, low, stack, on_stack, groups = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph[v]:
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      group = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        group.append(w)
        if w == v:
          break
      if len(group) > 1:
        groups.append(sorted(group))

  for v in graph:
    if v not in index:
      visit(v)
  return groups


def test_tfm_has_no_import_cycle():
  assert find_cycles(ROOT / "tfm") == []


def test_a_cycle_is_found(tmp_path):
  """The check itself: two modules importing each other (one relatively, one inside a function)
  are a cycle; an import under TYPE_CHECKING and a package importing its submodule are not."""
  pkg = tmp_path / "pkg"
  (pkg / "sub").mkdir(parents=True)
  (pkg / "__init__.py").write_text("from pkg import sub\n")
  (pkg / "sub" / "__init__.py").write_text("from pkg.sub import leaf\n")
  (pkg / "sub" / "leaf.py").write_text(
      "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n  from pkg import a\n")
  (pkg / "a.py").write_text("from . import b\n")
  (pkg / "b.py").write_text("def f():\n  from pkg.a import x\n")
  assert find_cycles(pkg) == [["pkg.a", "pkg.b"]]
  (pkg / "b.py").write_text("import pkg.sub.leaf\n")
  assert find_cycles(pkg) == []
