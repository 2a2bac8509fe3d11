"""Style and types: ruff and mypy, configured in pyproject.toml, find nothing.

There is no `ruff format` check: the code is formatted by hand (see pyproject.toml).
`python3 course.py python -m ruff check --fix course_lib course_server course_grading course_tools tests
course.py` sorts the imports; the rest (a line too long, ...) is fixed by hand.
"""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.release  # the whole library checked: about 20 s on 2 cores, not in the fast tier

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("tool", [
    ["ruff", "check", "course_lib", "course_server", "course_grading", "course_tools", "tests", "course.py"],
    ["mypy"],  # the files to check are in pyproject.toml: the four rooms
], ids=["ruff", "mypy"])
def test_the_checker_finds_nothing(tool):
    done = subprocess.run([sys.executable, "-m", *tool], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"`{' '.join(tool)}` found problems:\n{done.stdout}{done.stderr}"
