"""The layers of ``course_lib`` (README, "Architecture"): every import points down, never up,
and no module needs itself to load (no import cycle)."""

import ast
import importlib
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parent.parent / "course_lib"

# The README's table, bottom to top. A module may import its own layer and the layers below.
LAYERS = [
    {"course_lib", "config", "messages"},
    {"chat_template", "tool_parser"},
    {"models"},
    {"dialects"},
    {"server"},
    {"client", "openai_client", "runtime"},
    {"tools", "validation", "loop", "providers", "reliability", "tracing", "arithmetic", "fake_model", "mcp_tools"},
    {"experiments"},
    {"security"},
    {"display"},
    {"kiosk"},
    {"checks", "grading", "gradebook", "sandbox", "exercises", "refresh", "slides", "lesson_plan", "translation"},
]


def layer_of(module: str) -> int:
    """The layer of a dotted module name inside the package (``course_lib.server.app`` -> server's).
    A name that is no module of the package (``from .. import __version__``) is the package's own."""
    parts = module.removesuffix(".__init__").split(".")
    top = parts[1] if len(parts) > 1 else parts[0]
    if not ((LIBRARY / top).is_dir() or (LIBRARY / f"{top}.py").is_file()):
        top = "course_lib"
    return next(index for index, names in enumerate(LAYERS) if top in names)


def imports_of(path: Path, at_load: bool = False, forwarded: bool = False) -> list[str]:
    """The ``course_lib`` modules a file imports, as absolute dotted names.

    ``at_load``: only the imports that run when the module is loaded, not those inside a
    function (a function's import runs when it is called, once every module is loaded).
    ``forwarded``: only the imports of its forwarding address (below), instead of all the others."""
    module = ".".join(path.relative_to(LIBRARY.parent).with_suffix("").parts)
    package = module.removesuffix(".__init__") if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    forwarding = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
    if forwarded:
        nodes = [node for function in forwarding for node in ast.walk(function)]
    else:
        skipped = {id(node) for function in forwarding for node in ast.walk(function)}
        nodes = [node for node in (statements_at_load(tree) if at_load else ast.walk(tree)) if id(node) not in skipped]
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
                found += [target] if node.module else [f"{base}.{alias.name}" for alias in node.names]
            elif node.module and node.module.startswith("course_lib"):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("course_lib")]
    return [name for name in found if name.split(".")[0] == "course_lib"]


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


def module_file(name: str) -> str:
    """The module a dotted import name loads: ``course_lib.security.bench.judge`` is the module
    ``course_lib.security.bench``, ``course_lib.security`` its package's ``__init__``."""
    parts = name.split(".")
    while len(parts) > 1:
        path = LIBRARY.parent.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            break
        parts.pop()
    return ".".join(parts)


FILES = sorted(LIBRARY.rglob("*.py"))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(LIBRARY.parent).with_suffix("").parts).removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """Each module of the package, and the modules of the package it imports when it loads."""
    return {module_name(path): {module_file(name) for name in imports_of(path, at_load=True)} - {module_name(path)}
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


# A name that moved up a layer keeps its old address for the lessons that import it from there:
# the old module's ``__getattr__`` imports it on first use (PEP 562). That import is a
# forwarding address, not a dependency: nothing in the old module uses the name.
OLD_ADDRESSES = {  # old module: where its names went, and the names lessons and tests import
    "course_lib.loop": ("course_lib.display", ["plot_timeline"]),  # lessons 4 and 11
    "course_lib.experiments": ("course_lib.display", ["plot_rates"]),  # lesson 8
    "course_lib.security": ("course_lib.display", ["plot_table"]),  # lessons 9 and 12
    "course_lib.security.approval": ("course_lib.display.approval", ["approval_panel", "WAITING", "visible"]),  # 9
}


@pytest.mark.parametrize("path", FILES, ids=lambda path: str(path.relative_to(LIBRARY)))
def test_imports_point_down(path):
    module = ".".join(path.relative_to(LIBRARY.parent).with_suffix("").parts).removesuffix(".__init__")
    upward = [name for name in imports_of(path) if layer_of(name) > layer_of(module)]
    assert not upward, f"{module} imports from a higher layer: {upward}"


def test_every_module_has_a_layer():
    placed = set().union(*LAYERS)
    for path in LIBRARY.iterdir():
        if path.suffix == ".py" and path.name != "__init__.py" or path.is_dir() and (path / "__init__.py").exists():
            assert path.stem in placed, f"{path.name} is in no layer: add it to LAYERS and the README's table"


def test_no_module_imports_itself_through_others():
    """A circle (``a`` imports ``b``, which imports ``a``) loads only in one order, and a
    reader cannot tell which module comes first: move what both need down, into a module
    of its own, or import inside the function that needs it."""
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


@pytest.mark.parametrize("module", OLD_ADDRESSES)
def test_an_old_address_gives_the_object_that_moved(module):
    new, names = OLD_ADDRESSES[module]
    for name in names:
        assert getattr(importlib.import_module(module), name) is getattr(importlib.import_module(new), name), name
    with pytest.raises(AttributeError):
        importlib.import_module(module).no_such_name  # noqa: B018


def test_only_the_old_addresses_forward():
    """A module-level ``__getattr__`` that imports may only forward to the display layer, and
    only in the modules listed (a new one is a new upward arrow: list it, with the lesson that needs it)."""
    forwarding = {module_name(path): imports_of(path, forwarded=True) for path in FILES}
    forwarding = {module: targets for module, targets in forwarding.items() if targets}
    assert set(forwarding) == set(OLD_ADDRESSES), forwarding
    targets = {target for found in forwarding.values() for target in found}
    assert {layer_of(target) for target in targets} == {layer_of("course_lib.display")}, targets
