"""The tree's walls, read from its import statements (every one: at module level, in functions, under
TYPE_CHECKING): the engine imports no Qt and nothing of the app, the widgets no torch, the controller nothing of the
widgets, and no module reaches itself through others."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "ui", "app")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The modules a file imports, absolute ("from . import x" resolved against its package)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # "from engine import remote" is a module
    return names


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    return {name: {other for other in imported(path) if other in files and other != name}
            for name, path in files.items()}


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as the modules along it, or None."""
    state: dict[str, str] = {}  # "open" while on the walk's path, "done" after

    def walk(node: str, path: list[str]) -> list[str] | None:  # `path`: the walk from its start to `node`
        state[node] = "open"
        for other in sorted(graph.get(node, ())):
            if state.get(other) == "open":
                return path[path.index(other):] + [other]
            if other not in state and (found := walk(other, path + [other])):
                return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node, [node])):
            return found
    return None


def test_the_circle_finder_finds_a_circle_and_passes_a_tree():
    """Control: the finder itself, on a graph with a circle of three and on the same graph with one edge gone."""
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}) is None


def test_no_module_imports_itself_through_others():
    assert circle(import_graph()) is None


@pytest.mark.parametrize("package, forbidden", [("engine", ("PySide6", "pyqtgraph", "ui", "app")),
                                                ("ui", ("torch",))])
def test_walls_between_the_engine_the_widgets_and_torch(package, forbidden):
    crossing = {module_name(path): sorted(name for name in imported(path) if name.split(".")[0] in forbidden)
                for path in (ROOT / package).rglob("*.py")}
    assert {name: names for name, names in crossing.items() if names} == {}


def test_the_controller_imports_nothing_of_the_widgets():
    assert sorted(name for name in imported(ROOT / "app" / "chat.py") if name.split(".")[0] == "ui") == []
