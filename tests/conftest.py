"""Shared fixtures: one real embedded server for the whole test session.

Shared constants and helpers that tests import are in ``helpers.py``."""

import os
from pathlib import Path

import pytest

from course_lib.runtime import EmbeddedServer

os.environ.setdefault("COURSE_EMBEDDED", "1")  # never depend on another server on this machine
os.environ.setdefault("COURSE_QUICK", "1")  # experiments run small; COURSE_QUICK=0 runs them in full
os.environ["COURSE_LANG"] = "en"  # checks speak English here, whatever the shell says; tests of ja ask for it

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_FOLDERS = (ROOT / "notebooks", ROOT / "solutions")

try:
    import llama_cpp  # noqa: F401
except Exception:  # not installed, or its compiled library does not load
    # The fast path (``-m "not model"``) needs no compiled llama.cpp: these modules test the
    # engine itself (every test in them is ``model``) and import it at the top, so without the
    # library they are not collected. test_prompt_cache.py's bookkeeping tests run without it.
    collect_ignore = ["test_batching.py", "test_engine.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Lessons and solutions, run by nbval, start the model: mark their cells ``model``, so that
    ``-m "not model"`` is the fast path. (Lesson 13's own tests in ``notebooks/agent_tests`` mark
    their one model test themselves; the lesson runs the others with ``-m "not model"``.)

    Tests marked ``long`` run first: with pytest-xdist (``-n 3``), one worker starts on the
    longest while the others take the rest, instead of the longest starting last."""
    for item in items:
        path = Path(str(item.path))
        if path.suffix == ".ipynb" and any(folder in path.parents for folder in NOTEBOOK_FOLDERS):
            item.add_marker(pytest.mark.model)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: otherwise in order


@pytest.fixture(scope="session")
def server():
    """The real server with the real model; two slots and ``--max-queue 2``: a full queue is easy
    to reach, and 4 workers (``COURSE_WORKERS``' default) still fit."""
    embedded = EmbeddedServer("--parallel", "2", "--max-queue", "2")
    yield embedded
    embedded.stop()
    assert embedded.process.returncode == 0, "the server should exit cleanly on SIGTERM:\n" + embedded.log()


@pytest.fixture(scope="session")
def url(server):
    return server.url

