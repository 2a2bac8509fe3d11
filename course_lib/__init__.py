"""course_lib: the learner's library, what the lessons, exercises and check cells import.

Start a lesson with::

    from course_lib import connect
    client = connect()

It is one of the course's four rooms (docs/architecture.md; course_lib/README.md). It imports
none of the others, so ``pip install .`` installs it without llama.cpp and it works against any
Ollama: the course's server (``course_server``, which also keeps the model weights' registry) is
started as a process by ``runtime.connect()``, never imported; the grader is ``course_grading``;
the maintainers' tools (translation, slides, refresh, the tables) are ``course_tools``.

One module per idea, in layers where every import points down (``tests/test_architecture.py``
checks it), bottom to top:

- vocabulary and settings: ``messages`` (messages, tool calls, results ok or an error),
  ``config`` (every environment setting);
- text formats: ``chat_template`` (messages and tools into the prompt the model reads),
  ``tool_parser`` (tool calls read back out of the text it wrote), ``check_messages`` (the
  check messages' translations);
- ``dialects/``: one codec per wire dialect (Ollama, OpenAI, Anthropic), used by the clients
  here and by the server;
- clients: ``client`` (Ollama's API, raw JSON shown), ``openai_client`` (any
  OpenAI-compatible server), ``runtime`` (``connect()``: finds a server or starts ours);
- the agent: ``tools``, ``validation``, ``loop``, ``providers``, ``reliability``, ``tracing``,
  ``mcp_tools``, ``arithmetic``, ``fake_model`` (a scripted model for tests);
- ``experiments/``: rates with intervals (lesson 8); ``security/``: guards and the defense
  table (lessons 9, 9b, 12, 13);
- ``display/``: what a lesson shows (the library's source, plots, the approval panel);
- ``kiosk/``: the capstone's shop and agent (lessons 11 and 12);
- ``checks``: what a check cell calls, and the answers it sends to the grader.
"""

import sys
from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["Client", "OllamaError", "connect", "__version__"]
_LAZY = {"Client": "client", "OllamaError": "client", "connect": "runtime"}


def __getattr__(name: str) -> Any:
    """``from course_lib import connect`` imports ``runtime`` on first use, not with the package.

    The other rooms import ``course_lib`` for its modules (the server its wire modules, the grader
    its checks) and need neither the client nor the runtime loaded with it.
    """
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


def _figure_bundle(figure: Any, include: Any = None, exclude: Any = None) -> Any:
    """How IPython shows a matplotlib figure: ``display.figures.bundle``, imported when one is shown."""
    return import_module(".display.figures", __name__).bundle(figure, include, exclude)


def _draw_figures_in_each_edition() -> None:
    """Inside IPython, a figure is drawn in the edition's language (``display.figures``)."""
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    if shell is not None and hasattr(shell, "display_formatter"):
        shell.display_formatter.mimebundle_formatter.for_type_by_name("matplotlib.figure", "Figure", _figure_bundle)


_draw_figures_in_each_edition()
