"""course_lib: the small library behind the tool-calling course.

Start a lesson with::

    from course_lib import connect
    client = connect()

One module per idea, in layers where every import points down (docs/architecture.md;
``tests/test_architecture.py`` checks it), bottom to top:

- vocabulary and settings: ``messages`` (messages, tool calls, results ok or an error),
  ``config`` (every environment setting);
- text formats: ``chat_template`` (messages and tools into the prompt the model reads),
  ``tool_parser`` (tool calls read back out of the text it wrote);
- weights: ``models`` (where they come from: ``python -m course_server models fetch``);
- ``server/``: the embedded Ollama-compatible server over llama.cpp
  (``python -m course_server``);
- clients: ``client`` (Ollama's API, raw JSON shown), ``openai_client`` (any
  OpenAI-compatible server), ``runtime`` (``connect()``: finds a server or starts ours);
- the agent: ``tools``, ``validation``, ``loop``, ``providers``, ``reliability``, ``tracing``,
  ``mcp_tools``, ``arithmetic``, ``fake_model`` (a scripted model for tests);
- ``experiments/``: rates with intervals (lesson 8); ``security/``: guards and the defense
  table (lessons 9, 9b, 12, 13);
- ``display/``: what a lesson shows (the library's source, plots, the approval panel);
- ``kiosk/``: the capstone's shop and agent (lessons 11 and 12);
- course tooling: ``checks``, ``grading``, ``gradebook``, ``sandbox``, ``exercises``, ``refresh``.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["Client", "OllamaError", "connect", "__version__"]
_LAZY = {"Client": "client", "OllamaError": "client", "connect": "runtime"}


def __getattr__(name: str) -> Any:
    """``from course_lib import connect`` imports ``runtime`` on first use, not with the package.

    Importing it eagerly would import ``models`` too, so ``python -m course_server models`` would
    find the module already loaded before running it as ``__main__`` (and warn about it).
    """
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
