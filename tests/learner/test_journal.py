"""The defense table's journal (``security/journal.py``): what a stopped run leaves is read back whole."""

from __future__ import annotations

import json

import pytest

from course_lib.security.journal import JournalMismatch, RunJournal

SETTINGS = {"model": "m", "scenarios_sha256": "0" * 64, "rows": ["none"], "quick": True}


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\r"])
def test_a_run_whose_text_holds_a_line_separator_is_kept_on_resume(tmp_path, separator):
    path = tmp_path / "table.runs.jsonl"
    journal = RunJournal(path, SETTINGS, resume=False)
    journal.add({"defense": "none", "case": "c1", "reply": f"line one{separator}line two"})
    journal.add({"defense": "none", "case": "c2", "reply": "plain"})
    resumed = RunJournal(path, SETTINGS, resume=True)
    assert set(resumed.kept) == {("none", "c1"), ("none", "c2")}
    assert resumed.kept["none", "c1"]["reply"] == f"line one{separator}line two"


@pytest.mark.parametrize("content", ["", "\n", "  \n\n"])
def test_an_empty_journal_starts_anew(tmp_path, content):
    path = tmp_path / "table.runs.jsonl"
    path.write_text(content)
    journal = RunJournal(path, SETTINGS, resume=True)
    assert journal.kept == {}
    assert json.loads(path.read_text().split("\n")[0]) == SETTINGS
    assert RunJournal(tmp_path / "other.jsonl", SETTINGS, resume=False).kept == {}
    path.write_text(content)
    assert RunJournal(path, SETTINGS, resume=False).kept == {}  # nothing in it to lose


def test_a_journal_with_a_broken_header_is_refused_with_a_message(tmp_path):
    path = tmp_path / "table.runs.jsonl"
    path.write_text('{"model": "m", "scen')
    with pytest.raises(JournalMismatch, match="was written with"):
        RunJournal(path, SETTINGS, resume=True)
