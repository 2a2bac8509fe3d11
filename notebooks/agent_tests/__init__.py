"""Lesson 13's tests: the agent's own code tested without the model (and one check with it).

They are real pytest files over ``course_lib``. The main suite collects them (``notebooks`` is
in pytest's ``testpaths``), and the lesson runs them from its folder::

    python -m pytest agent_tests                   # everything but the model check: seconds
    python -m pytest agent_tests -m model          # the one end-to-end check with the real model

This file makes the folder a package, so its modules are ``agent_tests.test_...`` and never
clash with a ``tests/test_...`` of the same name.
"""

from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data"  # the repository's data/ folder
