"""Run by a learner venv's own Python (tests/learner/test_learner_install.py): what is importable
there, where ``course_lib`` comes from, and what ``connect()`` does with no server answering.
Prints one line of JSON."""

import importlib.metadata
import importlib.util
import json
import sys

import course_lib
from course_lib import runtime

found = {name: importlib.util.find_spec(name) is not None
         for name in ("llama_cpp", "fastapi", "uvicorn", "nbclient", "ipykernel", "nbval")}
try:
    runtime.connect(quiet=True)
    refusal = None
except runtime.ServerStartError as error:
    refusal = str(error)
requirements = importlib.metadata.requires("mcp") or []
mcp_needs = [requirement.split(">")[0].split(";")[0].strip() for requirement in requirements]
print(json.dumps({"found": found, "server_installed": runtime.server_installed(), "refusal": refusal,
                  "mcp_needs": mcp_needs, "course_lib": course_lib.__file__, "prefix": sys.prefix}))
