"""The layers of ``course_lib`` (README, "Architecture"): every import points down, never up."""

import ast
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parent.parent / "course_lib"

# The README's table, bottom to top. A module may import its own layer and the layers below.
LAYERS = [
    {"course_lib", "config", "messages", "display"},
    {"chat_template", "tool_parser"},
    {"models"},
    {"server"},
    {"client", "openai_client", "runtime"},
    {"tools", "validation", "loop", "providers", "reliability", "tracing", "arithmetic", "fake_model", "mcp_tools"},
    {"experiments"},
    {"security"},
    {"kiosk"},
    {"checks", "grading", "gradebook", "sandbox", "exercises", "refresh"},
]


def layer_of(module: str) -> int:
    """The layer of a dotted module name inside the package (``course_lib.server.app`` -> server's).
    A name that is no module of the package (``from .. import __version__``) is the package's own."""
    parts = module.removesuffix(".__init__").split(".")
    top = parts[1] if len(parts) > 1 else parts[0]
    if not ((LIBRARY / top).is_dir() or (LIBRARY / f"{top}.py").is_file()):
        top = "course_lib"
    return next(index for index, names in enumerate(LAYERS) if top in names)


def imports_of(path: Path) -> list[str]:
    """The ``course_lib`` modules a file imports, as absolute dotted names."""
    module = ".".join(path.relative_to(LIBRARY.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
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


FILES = sorted(LIBRARY.rglob("*.py"))


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
