"""course_lib: the small library behind the tool-calling course.

Start a lesson with::

    from course_lib import connect
    client = connect()

Modules, one idea each:

- ``client``: a thin httpx client for Ollama's API that shows the raw JSON
- ``runtime``: ``connect()``, which finds a server or starts the embedded one
- ``models``: where the weights come from (``python -m course_lib.models fetch``)
- ``chat_template``: messages and tools rendered into the prompt the model reads
- ``tool_parser``: tool calls read back out of the text the model wrote
- ``engine``, ``scheduler``, ``wire``, ``server``: the embedded Ollama-compatible server
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["Client", "OllamaError", "connect", "__version__"]
_LAZY = {"Client": "client", "OllamaError": "client", "connect": "runtime"}


def __getattr__(name: str) -> Any:
    """``from course_lib import connect`` imports ``runtime`` on first use, not with the package.

    Importing it eagerly would import ``models`` too, so ``python -m course_lib.models`` would
    find the module already loaded before running it as ``__main__`` (and warn about it).
    """
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
