"""The four rooms (docs/architecture.md) and the layers of the learner's library: every import
points down, never up, and no module needs itself to load (no import cycle).

The rooms are top-level packages: ``course_lib``, the learner's library (what lessons import);
``course_server``, the server; ``course_grading``, the grader; ``course_tools``, the maintainers'
tools. The learner's library imports no other room (so it installs without llama.cpp and works
against any Ollama); the server and the grader import the learner's library and not each other;
the tools may import every room. Inside ``course_lib``, the layers below.

An import inside a function counts as much as one at the top: it is a dependency all the same,
only a later one. So no module forwards a name that moved up a layer (a module ``__getattr__``
that imports it on first use): that was how ``loop``, ``experiments`` and ``security`` once
imported ``display``, the layer that draws their results, in a circle. Lessons import each name
from where it lives, and a test here reads every lesson's imports to prove they still resolve."""

import ast
import importlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "course_lib"
ROOMS = {  # each room, and the rooms it may import (itself included)
    "course_lib": {"course_lib"},
    "course_server": {"course_server", "course_lib"},
    "course_grading": {"course_grading", "course_lib"},
    "course_tools": {"course_tools", "course_server", "course_grading", "course_lib"},
}

# The learner's library's layers (docs/architecture.md), bottom to top. A module may import its own
# layer and the layers below.
LAYERS = [
    {"course_lib", "config", "messages"},
    {"chat_template", "tool_parser", "check_messages"},
    {"dialects"},
    {"client", "openai_client", "runtime"},
    {"tools", "validation", "loop", "providers", "reliability", "tracing", "arithmetic", "fake_model", "mcp_tools",
     "recorded", "sealed"},
    {"experiments"},
    {"security"},
    {"display"},
    {"kiosk"},
    {"checks", "self_check"},
]


def room_of(module: str) -> str:
    return module.split(".")[0]


def layer_of(module: str) -> int:
    """The layer of a dotted module name inside the learner's library (``course_lib.loop`` -> the
    agent's). A name that is no module of the package (``from course_lib import __version__``) is
    the package's own."""
    parts = module.removesuffix(".__init__").split(".")
    top = parts[1] if len(parts) > 1 else parts[0]
    if not ((LIBRARY / top).is_dir() or (LIBRARY / f"{top}.py").is_file()):
        top = "course_lib"
    return next(index for index, names in enumerate(LAYERS) if top in names)


def imports_of(path: Path, at_load: bool = False) -> list[str]:
    """The modules of the four rooms a file imports, as absolute dotted names: every import, those
    inside functions too.

    ``at_load``: only the imports that run when the module is loaded, not those inside a
    function (a function's import runs when it is called, once every module is loaded)."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.removesuffix(".__init__") if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    nodes = statements_at_load(tree) if at_load else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
                found += [target] if node.module else [f"{base}.{alias.name}" for alias in node.names]
            elif node.module and room_of(node.module) in ROOMS:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if room_of(alias.name) in ROOMS]
    return [name for name in found if room_of(name) in ROOMS]


def statements_at_load(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` outside function bodies: what runs when the module is loaded
    (``if TYPE_CHECKING:`` blocks included: mypy follows them, and a circle there is one too)."""
    found, waiting = [], [tree]
    while waiting:
        node = waiting.pop()
        found.append(node)
        waiting += [child for child in ast.iter_child_nodes(node)
                    if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    return found


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def module_file(name: str) -> str:
    """The module a dotted import name loads: ``course_lib.security.bench.judge`` is the module
    ``course_lib.security.bench``, ``course_lib.security`` its package's ``__init__``."""
    parts = name.split(".")
    while len(parts) > 1:
        path = ROOT.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            break
        parts.pop()
    return ".".join(parts)


FILES = sorted(path for room in ROOMS for path in (ROOT / room).rglob("*.py"))
LIBRARY_FILES = [path for path in FILES if room_of(module_name(path)) == "course_lib"]


def import_graph(at_load: bool = True) -> dict[str, set[str]]:
    """Each module of the package, and the modules of the package it imports when it loads
    (``at_load``), or anywhere, inside its functions too."""
    return {module_name(path): {module_file(name) for name in imports_of(path, at_load)} - {module_name(path)}
            for path in FILES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of imports in ``graph``, each as the path that closes it (``[a, b, a]``),
    found by a depth-first walk."""
    found, done = [], set()

    def walk(module: str, path: list[str]) -> None:
        for imported in sorted(graph.get(module, ())):
            if imported in path:
                found.append(path[path.index(imported):] + [imported])
            elif imported not in done:
                walk(imported, [*path, imported])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            walk(module, [module])
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_each_room_imports_only_the_rooms_below(path):
    module = module_name(path)
    outside = [name for name in imports_of(path) if room_of(name) not in ROOMS[room_of(module)]]
    assert not outside, f"{module} ({room_of(module)}) imports from a room it may not: {outside}"


@pytest.mark.parametrize("path", LIBRARY_FILES, ids=lambda path: str(path.relative_to(LIBRARY)))
def test_imports_point_down(path):
    module = module_name(path)
    upward = [name for name in imports_of(path) if layer_of(name) > layer_of(module)]
    assert not upward, f"{module} imports from a higher layer: {upward}"


def test_every_module_has_a_layer():
    placed = set().union(*LAYERS)
    for path in LIBRARY.iterdir():
        if path.suffix == ".py" and path.name != "__init__.py" or path.is_dir() and (path / "__init__.py").exists():
            assert path.stem in placed, (f"{path.name} is in no layer: add it to LAYERS and the table in "
                                         "docs/architecture.md")


def test_no_module_imports_itself_through_others():
    """A circle (``a`` imports ``b``, which imports ``a``) loads only in one order, and a
    reader cannot tell which module comes first: move what both need down, into a module
    of its own. (An import moved inside a function only hides a circle from this test: the
    next one counts it.)"""
    assert not cycles(import_graph()), f"import cycles: {cycles(import_graph())}"


def test_the_cycle_check_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_cycle_check_reads_what_runs_at_load():
    """An import inside a function is no edge; one under ``if TYPE_CHECKING:`` is."""
    tree = ast.parse("import os\nif TYPE_CHECKING:\n    import a\ndef f():\n    import b\n")
    names = [alias.name for node in statements_at_load(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert sorted(names) == ["a", "os"]
    assert module_file("course_lib.security.bench.judge") == "course_lib.security.bench"
    assert module_file("course_lib.__version__") == "course_lib"
    assert "course_lib.config" in imports_of(LIBRARY / "experiments" / "__init__.py")  # ``from ..config``, in a package


def test_no_circle_even_through_imports_inside_functions():
    """The circle test above reads what runs at load. Here every import counts, those inside
    functions too: ``display`` drew what ``loop``, ``experiments`` and ``security`` compute, and
    they once imported it back inside a function to forward a name; that was a circle all the same."""
    found = cycles(import_graph(at_load=False))
    assert not found, f"import cycles through functions: {found}"


def test_no_module_forwards_names_that_live_elsewhere():
    """A module-level ``__getattr__`` (PEP 562) that hands out another module's names is an old
    address kept alive: the lessons import from the name's home instead. The package's own front
    door (``from course_lib import connect``, loaded on first use) is the one module-level
    ``__getattr__``."""
    forwarding = [module_name(path) for path in FILES if any(
        isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in ast.parse(path.read_text()).body)]
    assert forwarding == ["course_lib"], forwarding


LESSON_CODE = sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("exercises/*.ipynb"),
                      *ROOT.glob("notebooks/agent_tests/*.py"), *ROOT.glob("tests/browser/*.ipynb")])


def course_imports(path: Path) -> list[tuple[str, str]]:
    """Each ``from ROOM... import name`` of a notebook's code cells (or a Python file), as
    (module, name). A line of IPython (``%time``, ``!pip``) is left out before parsing."""
    if path.suffix == ".ipynb":
        cells = [cell for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "code"]
        sources = ["".join(cell["source"]) for cell in cells]
    else:
        sources = [path.read_text(encoding="utf-8")]
    found = []
    for source in sources:
        python = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        for node in ast.walk(ast.parse(python)):
            if isinstance(node, ast.ImportFrom) and not node.level and room_of(node.module or "") in ROOMS:
                found += [(node.module, alias.name) for alias in node.names if node.module]
    return found


def is_submodule(package: str, name: str) -> bool:
    """Whether ``from package import name`` imports a module (``from course_lib import config``)."""
    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except ModuleNotFoundError:  # ``package`` is a module, not a package
        return False


@pytest.mark.parametrize("path", LESSON_CODE, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_lesson_imports_names_that_are_there(path):
    """The lessons' imports, read from the files (without running a cell, or the model): each name
    is in the module named, so a name that moves is caught here, before nbval runs the lesson. The
    Japanese notebooks have the same code (``tests/tools/test_translation.py``). A module that needs an
    extra that is not installed (AgentDojo) is skipped."""
    missing = []
    for module, name in course_imports(path):
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if room_of(error.name or "") in ROOMS:
                missing.append(f"from {module} import {name} (no module {error.name})")
            continue
        if not hasattr(loaded, name) and not is_submodule(module, name):
            missing.append(f"from {module} import {name}")
    assert not missing, f"{path.name}: {missing}"


@pytest.mark.parametrize("path", LESSON_CODE, ids=lambda path: str(path.relative_to(ROOT)))
def test_lessons_import_only_the_learners_library(path):
    """A lesson, an exercise and its check cells run on the learner's library alone (``pip install .``,
    no llama.cpp): the server is started as a process (``course_lib.runtime``), never imported."""
    elsewhere = sorted({module for module, _ in course_imports(path) if room_of(module) != "course_lib"})
    assert not elsewhere, f"{path.name} imports from other rooms: {elsewhere}"
