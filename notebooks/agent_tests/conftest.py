"""Fixtures: a fresh shop for every test, and a client for the one test that needs the model."""

import pytest

from course_lib import Client, connect
from course_lib.kiosk import Kiosk

from . import DATA


@pytest.fixture
def kiosk() -> Kiosk:
    """The capstone's shop (lesson 11), loaded fresh: no refund paid and no e-mail sent yet."""
    return Kiosk.load(DATA / "products.json")


@pytest.fixture(scope="session")
def client() -> Client:
    """A client for a server with the course's model, as ``connect()`` finds one: the server that
    ``OLLAMA_HOST`` names (the lesson passes its own), else the embedded server, started once."""
    return connect(quiet=True)
