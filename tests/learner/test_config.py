"""Settings as arguments: a command's ``--quick`` holds for that command only.

``COURSE_QUICK`` is read in ``config.py`` and nowhere written by the library. A command that
wrote its ``--quick`` into ``os.environ`` would leave every later experiment of the same
process in quick mode: a test that calls the command's ``main`` in-process would change the
tests after it on the same worker. So the commands pass ``quick`` down as an argument."""

import json
import os
from importlib.util import find_spec
from pathlib import Path

import nbformat
import pytest

from course_lib import config
from course_tools import refresh

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "data" / "security_scenarios.json"


def test_quick_mode_is_the_callers_choice_else_the_environment(monkeypatch):
    monkeypatch.setenv("COURSE_QUICK", "0")
    assert config.quick_mode() is False and config.quick_mode(True) is True
    monkeypatch.setenv("COURSE_QUICK", "1")
    assert config.quick_mode() is True and config.quick_mode(False) is False and config.quick_mode(None) is True


def security_main(argv: list[str]) -> None:
    from course_tools.security_table import main
    main(argv)


def kiosk_main(argv: list[str]) -> None:
    from course_tools.kiosk_table import main
    main(argv)


def agentdojo_main(argv: list[str]) -> None:
    from course_lib.security.agentdojo_table import main
    main(argv)


# Each command with --quick and an argument it refuses after reading --quick (an unknown row, a
# missing file, an unknown mode): it stops before any model is started.
REFUSED = [
    pytest.param(security_main, ["table", "--quick", "--scenarios", str(SCENARIOS), "--defenses", "no such row"],
                 id="security"),
    pytest.param(kiosk_main, ["evaluate", "--quick", "--cases", "no-such-file.json"], id="kiosk"),
    pytest.param(agentdojo_main, ["--quick", "--modes", "no-such-mode"], id="agentdojo_table",
                 marks=pytest.mark.skipif(find_spec("agentdojo") is None, reason="AgentDojo is an extra")),
]


@pytest.mark.parametrize("main,argv", REFUSED)
def test_a_commands_quick_does_not_outlive_it(main, argv, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_QUICK", "0")
    with pytest.raises(SystemExit):
        main(argv)
    assert capsys.readouterr().err  # refused, saying why
    assert os.environ["COURSE_QUICK"] == "0" and not config.quick_mode(), "--quick leaked into the process"


def test_the_defense_tables_quick_reaches_the_cases_it_runs(monkeypatch, tmp_path):
    """``--quick`` is passed down to the cases and the journal's settings; without it,
    ``COURSE_QUICK`` decides."""
    import course_tools.security_table as command

    ran: list[tuple[int, int, bool]] = []  # benign cases, attacked cases, the journal's "quick"

    class Stop(Exception):
        pass

    def run_table(model, scenarios, defenses, benign, attacked, workers, journal):
        settings = json.loads(journal.path.read_text(encoding="utf-8").splitlines()[0])
        ran.append((len(benign), len(attacked), settings["quick"]))
        raise Stop

    monkeypatch.setattr(command, "run_table", run_table)
    monkeypatch.setenv("COURSE_QUICK", "0")
    argv = ["table", "--scenarios", str(SCENARIOS), "--defenses", "no defense", "--server", "http://127.0.0.1:9"]
    with pytest.raises(Stop):
        command.main([*argv, "--quick", "--out", str(tmp_path / "quick")])
    with pytest.raises(Stop):
        command.main([*argv, "--out", str(tmp_path / "full")])
    (quick_benign, quick_attacked, quick_journal), (benign, attacked, full_journal) = ran
    assert (quick_benign, quick_attacked, quick_journal) == (0, 1, True)
    assert benign > 0 and attacked > 1 and not full_journal
    assert os.environ["COURSE_QUICK"] == "0"


def test_refresh_runs_the_kernel_in_full_without_changing_this_process(monkeypatch, tmp_path):
    seen: dict[str, str] = {}

    class Client:
        def __init__(self, notebook, **options):
            pass

        def execute(self, env):
            seen.update(env)

    notebook = tmp_path / "lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), notebook)
    monkeypatch.setattr(refresh, "NotebookClient", Client)
    monkeypatch.setenv("COURSE_QUICK", "1")
    refresh.refresh(notebook)
    assert seen["COURSE_QUICK"] == "0" and seen["PATH"] == os.environ["PATH"]
    assert os.environ["COURSE_QUICK"] == "1"


def test_the_figure_editions_are_none_unless_set_and_refresh_sets_the_translated_ones(monkeypatch):
    monkeypatch.delenv("COURSE_FIGURE_EDITIONS", raising=False)
    assert config.figure_editions() == []
    monkeypatch.setenv("COURSE_FIGURE_EDITIONS", " ja, ")
    assert config.figure_editions() == ["ja"]
    monkeypatch.setenv("COURSE_FIGURE_EDITIONS", "ja,japanese")
    with pytest.raises(ValueError, match="'japanese'"):
        config.figure_editions()
    assert refresh.kernel_environment()["COURSE_FIGURE_EDITIONS"] == "ja"
