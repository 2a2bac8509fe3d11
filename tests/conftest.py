"""Shared fixtures: one real embedded server for the whole test session."""

import os

import pytest

from course_lib.runtime import EmbeddedServer

os.environ.setdefault("COURSE_EMBEDDED", "1")  # never depend on another server on this machine
os.environ.setdefault("COURSE_QUICK", "1")  # experiments run small; COURSE_QUICK=0 runs them in full


@pytest.fixture(scope="session")
def server():
    """The real server with the real model; ``--max-queue 1`` so that a full queue is easy to reach."""
    embedded = EmbeddedServer("--max-queue", "1")
    yield embedded
    embedded.stop()
    assert embedded.process.returncode == 0, "the server should exit cleanly on SIGTERM:\n" + embedded.log()


@pytest.fixture(scope="session")
def url(server):
    return server.url


def now() -> str:
    """Return the current UTC time in ISO-8601 format."""
    from datetime import datetime, timezone
    return datetime.now(timezone.utc).isoformat()


NOW_TOOL = {"type": "function", "function": {
    "name": "now", "description": "Return the current UTC time in ISO-8601 format.",
    "parameters": {"type": "object", "properties": {}, "required": []}}}
GREEDY = {"temperature": 0, "seed": 42, "num_predict": 48}
