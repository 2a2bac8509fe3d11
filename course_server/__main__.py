"""``python -m course_server``: the server's room, one entry.

    python -m course_server [--port 11434] [--parallel 2] ...   # serve (see --help)
    python -m course_server models fetch|list|check|bundle      # the weights it serves

The first runs the embedded Ollama-compatible server (``app.main``); the second fetches,
lists, checks or bundles the model files (``models.main``), as ``ollama serve`` and
``ollama pull`` are one program.
"""

import sys

from course_server.app import main as serve
from course_server.models import main as models


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["models"]:
        return models(argv[1:])
    return serve(argv)


if __name__ == "__main__":  # the model's process (spawned by supervisor.py) imports this module too
    sys.exit(main())
