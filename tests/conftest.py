"""Shared fixtures: one real embedded server for the whole test session.

Shared constants and helpers that tests import are in ``helpers.py``."""

import os

import pytest

from course_lib.runtime import EmbeddedServer

os.environ.setdefault("COURSE_EMBEDDED", "1")  # never depend on another server on this machine
os.environ.setdefault("COURSE_QUICK", "1")  # experiments run small; COURSE_QUICK=0 runs them in full


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

