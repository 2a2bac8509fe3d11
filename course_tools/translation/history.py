"""The English text a stale translation was made from, found in the repository's history.

A block records only the hash of the English it was translated from. To update it, a
translator wants to see what changed: ``english_then`` looks through the last commits that
touched the English file for the version of the unit with that hash, so that ``status
--show`` can print the change as a diff instead of the whole new text.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from course_tools.translation.units import Unit, markdown_sections, notebook_units

COMMITS_SEARCHED = 100  # the newest commits of the file that are read; older translations show the whole text


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, encoding="utf-8")
    except OSError:  # no git on this machine
        return None
    return done.stdout if done.returncode == 0 else None


def units_in(english: Path, text: str) -> list[Unit]:
    """The units of ``text``, a version of the English file ``english``."""
    import json

    return notebook_units(json.loads(text)) if english.suffix == ".ipynb" else markdown_sections(text)


def english_then(root: Path, english: Path, unit_id: str, english_hash: str) -> str | None:
    """The text of unit ``unit_id`` of ``english`` when its hash was ``english_hash``, from the
    newest ``COMMITS_SEARCHED`` commits that changed the file; None if it is not there."""
    for units in _versions(root, english):
        for unit in units:
            if unit.hash == english_hash and unit.id == unit_id:
                return unit.text
    return None


@functools.lru_cache(maxsize=8)
def _versions(root: Path, english: Path) -> list[list[Unit]]:
    """The units of each of the newest versions of ``english`` in git, newest first (read once
    per file, however many of its units are stale)."""
    versions = []
    for commit in (_git(root, "log", f"-n{COMMITS_SEARCHED}", "--format=%H", "--", english.as_posix()) or "").split():
        text = _git(root, "show", f"{commit}:{english.as_posix()}")
        if text is None:
            continue
        try:
            versions.append(units_in(english, text))
        except ValueError:  # a version that cannot be read as units (an old notebook without ids)
            continue
    return versions
