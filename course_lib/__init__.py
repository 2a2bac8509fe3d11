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

__version__ = "0.1.0"

from .client import Client, OllamaError  # noqa: E402
from .runtime import connect  # noqa: E402

__all__ = ["Client", "OllamaError", "connect", "__version__"]
