"""A second model a lesson compares with: run and recorded when it is here, the record shown when not."""

import pytest

from course_lib import recorded, runtime
from course_lib.recorded import record_path, recorded_run


@pytest.fixture
def records(tmp_path, monkeypatch):
    """A course folder of its own: ``course_file`` finds the records under the current folder."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "data" / "results" / "recorded"
    folder.mkdir(parents=True)
    return folder


def test_with_the_model_the_block_runs_and_what_it_printed_is_kept(records, capsys):
    (records / "lesson-cell.txt").write_text("")  # where the record goes (found from the current folder)
    with recorded_run("lesson-cell", client=object()) as running:
        assert running
        print("answered 3/4")
    assert capsys.readouterr().out == "answered 3/4\n"
    assert (records / "lesson-cell.txt").read_text() == "answered 3/4\n"


def test_without_it_the_block_is_skipped_and_the_record_is_shown_as_a_record(records, capsys):
    (records / "lesson-cell.txt").write_text("answered 3/4\n")
    ran = []
    with recorded_run("lesson-cell", client=None) as running:
        if running:
            ran.append(True)
    out = capsys.readouterr().out
    assert not ran and out.endswith("answered 3/4\n")
    assert out.startswith("[recorded: what this cell printed when the course ran it with the model")
    with recorded_run("never-made", client=None) as running:
        assert not running
    assert "no record" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden"])
def test_a_records_name_is_a_plain_file_name(name):
    with pytest.raises(ValueError, match="plain file name"):
        record_path(name)


def test_optional_client_says_why_there_is_none_and_how_to_get_the_model(monkeypatch, capsys):
    monkeypatch.setattr(runtime, "connect", lambda model: f"client of {model}")
    assert runtime.optional_client("qwen2.5-coder:1.5b", quick=True) is None
    assert "quick mode" in capsys.readouterr().out
    monkeypatch.setattr(runtime, "available", lambda model: False)
    assert runtime.optional_client("qwen2.5-coder:1.5b") is None
    said = capsys.readouterr().out
    assert "not on this machine" in said and "models fetch qwen2.5-coder:1.5b" in said
    monkeypatch.setattr(runtime, "available", lambda model: True)
    assert runtime.optional_client("qwen2.5-coder:1.5b") == "client of qwen2.5-coder:1.5b"


def test_a_model_is_available_without_a_download_only_from_a_server_or_the_cache(monkeypatch):
    monkeypatch.setenv("COURSE_EMBEDDED", "1")  # no Ollama is asked
    monkeypatch.setattr(runtime, "server_installed", lambda: False)
    assert runtime.available("qwen2.5-coder:1.5b") is False
    assert recorded.RECORDS == "data/results/recorded"
