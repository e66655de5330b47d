"""The tree's walls, read from its import statements (every one: at module level, in functions, under
TYPE_CHECKING). The packages are floors, each importing only its own and those below: the engine (torch, no Qt), the
words (a chat's records and the sentences that tell them: no Qt, no torch), the app (controllers, workers, the store,
the CLI), the widgets (no torch), and the composition root that builds the window. No module reaches itself through
others, and the rooms stay small: a folder holds at most 15 Python files, a file at most 700 lines."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ("engine", "words", "app", "ui", "studio")  # lowest first
MOST_FILES_IN_A_FOLDER = 15
MOST_LINES_IN_A_FILE = 700


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
    files = {module_name(p): p for package in FLOORS for p in (ROOT / package).rglob("*.py")}
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


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for other in graph.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def floors_broken(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each module that reaches (through any chain of imports) a module of a floor above its own, with those modules."""
    floor = {name: FLOORS.index(name.split(".")[0]) for name in graph}
    above = {name: sorted(other for other in reached(graph, name) if floor[other] > floor[name]) for name in graph}
    return {name: others for name, others in above.items() if others}


def test_the_floor_check_finds_an_import_two_steps_up():
    """Control: app.a imports nothing of ui itself, but through words.b, which imports ui.c."""
    graph = {"app.a": {"words.b"}, "words.b": {"ui.c"}, "ui.c": set(), "engine.d": set()}
    assert floors_broken(graph) == {"app.a": ["ui.c"], "words.b": ["ui.c"]}
    assert floors_broken({**graph, "words.b": {"engine.d"}}) == {}


def test_each_floor_reaches_only_its_own_and_those_below():
    assert floors_broken(import_graph()) == {}


@pytest.mark.parametrize("package, forbidden", [("engine", ("PySide6", "pyqtgraph")),
                                                ("words", ("PySide6", "pyqtgraph", "torch", "transformers")),
                                                ("ui", ("torch", "transformers"))])
def test_walls_between_the_engine_the_words_the_widgets_and_torch(package, forbidden):
    """What a floor's modules and every project module they reach import from outside the project."""
    graph = import_graph()
    files = {module_name(p): p for floor in FLOORS for p in (ROOT / floor).rglob("*.py")}
    crossing = {}
    for name in (name for name in graph if name.split(".")[0] == package):
        outside = {other for module in {name} | reached(graph, name) for other in imported(files[module])}
        crossing[name] = sorted(other for other in outside if other.split(".")[0] in forbidden)
    assert {name: names for name, names in crossing.items() if names} == {}


def test_rooms_stay_small():
    folders = [ROOT / floor for floor in (*FLOORS, "tests")]
    crowded = {str(folder.relative_to(ROOT)): n for top in folders for folder in [top, *top.rglob("*")]
               if folder.is_dir() and (n := len(list(folder.glob("*.py")))) > MOST_FILES_IN_A_FOLDER}
    long = {str(path.relative_to(ROOT)): n for top in folders for path in top.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MOST_LINES_IN_A_FILE}
    assert (crowded, long) == ({}, {})
