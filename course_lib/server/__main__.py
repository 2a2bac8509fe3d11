"""``python -m course_lib.server``: start the embedded Ollama-compatible server."""

import sys

from .app import main

sys.exit(main())
