"""``python -m course_lib.server``: start the embedded Ollama-compatible server."""

import sys

from .app import main

if __name__ == "__main__":  # the model's process (spawned by supervisor.py) imports this module too
    sys.exit(main())
