"""Every exercise check must fail on plausible wrong answers, not only on the stub.

``tests/grading/wrong_answers.py`` holds, per notebook and exercise, code a learner might write
instead of the solution (a value hard-coded for the visible example, half a solution, the
wrong unit, the course's own reference imported, the parent class called), or the solution
with the lines that would make it wrong (``answer_of`` puts them in). Each runs here
in place of the solution, after the notebook's setup cell, followed by the exercise's own
cells; one of its check cells must then fail. A new exercise without a wrong answer fails
``test_the_corpus_covers_every_exercise``.

It runs in this process, not in a kernel (one exercise takes milliseconds), with
``connect()`` giving a client that has the model's chat template and nothing else: a wrong
answer must fail a check before the check asks the model anything. The few that only the
model can tell apart are marked ``model=True`` and run against the real server.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest
from wrong_answers import WRONG, Wrong

import course_lib
from course_grading.exercises import BEGIN, END
from course_grading.grading import is_check, sections
from course_lib import runtime

ROOT = Path(__file__).parents[2]
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = sorted(SOLUTIONS.glob("*.ipynb"))
TEMPLATE = (ROOT / "tests" / "fixtures" / "qwen2.5-coder.jinja").read_text()


class ModelNeeded(Exception):
    """The offline client was asked for something only the model can give."""


class OfflineClient:
    """What ``connect()`` returns offline: the model's chat template, and nothing that needs the model."""

    def show(self, model: str | None = None) -> dict[str, Any]:
        return {"template": TEMPLATE}

    def __getattr__(self, name: str) -> Any:
        raise ModelNeeded(f"client.{name}")


def exercises_of(path: Path) -> dict[int, list[Any]]:
    """Exercise number -> its code cells, from a solutions notebook (0 is the setup)."""
    notebook = nbformat.read(path, as_version=4)
    return {part.number: part.code for part in sections(notebook)}


def regions(source: str) -> list[tuple[int, int, str]]:
    """The solution regions of a cell: (first line, last line, indentation), markers included."""
    found, start = [], None
    lines = source.splitlines()
    for number, line in enumerate(lines):
        if line.strip() == BEGIN:
            start = number
        elif line.strip() == END and start is not None:
            found.append((start, number, line[: len(line) - len(line.lstrip())]))
            start = None
    return found


def with_answer(cells: list[Any], code: str | tuple[str | None, ...]) -> list[tuple[str, bool]]:
    """The exercise's cells as (source, is a check), each solution region replaced by the wrong code
    (a tuple gives one piece per region, in order; None keeps that region's solution)."""
    pieces = (code,) if isinstance(code, str) else code
    total = sum(len(regions(cell.source)) for cell in cells)
    assert len(pieces) == total, f"the exercise has {total} solution region(s); the wrong answer gives {len(pieces)}"
    remaining, result = iter(pieces), []
    for cell in cells:
        lines = cell.source.splitlines()
        replacements = [(start, end, indent, next(remaining)) for start, end, indent in regions(cell.source)]
        for start, end, indent, piece in reversed(replacements):
            if piece is not None:
                lines[start:end + 1] = textwrap.indent(textwrap.dedent(piece).strip("\n"), indent).splitlines()
        result.append(("\n".join(lines), is_check(cell)))
    return result


def answer_of(path: Path, number: int, wrong: Wrong) -> str | tuple[str | None, ...]:
    """The code ``wrong`` puts in place of exercise ``number``'s solution regions: its own, or the
    solution's regions with its changes (one piece per region, None where nothing changed). Each
    change's lines are looked for in the solution as published, and must be there exactly once."""
    if wrong.code is not None:
        return wrong.code
    solution = [textwrap.dedent("\n".join(cell.source.splitlines()[start + 1:end])).splitlines()
                for cell in exercises_of(path)[number] for start, end, _ in regions(cell.source)]
    places = []
    for old, new in wrong.changes:
        want = textwrap.dedent(old).strip("\n").splitlines()
        found = [(index, start) for index, lines in enumerate(solution) for start in range(len(lines))
                 if textwrap.dedent("\n".join(lines[start:start + len(want)])).splitlines() == want]
        assert len(found) == 1, (f"{wrong.reason}: the lines to change are in the solution {len(found)} times, "
                                 f"not once; fix the corpus:\n{old}")
        places.append((*found[0], len(want), new))
    pieces: list[str | None] = [None] * len(solution)
    for index, start, length, new in sorted(places, reverse=True):  # from the end: earlier places stay put
        lines = solution[index]
        margin = " " * (len(lines[start]) - len(lines[start].lstrip()))  # new starts where old started
        lines[start:start + length] = textwrap.indent(textwrap.dedent(new).strip("\n"), margin).splitlines()
        pieces[index] = "\n".join(lines)
    return tuple(pieces)


def run_exercise(path: Path, number: int, code: str | tuple[str | None, ...] | None) -> tuple[str, str]:
    """Run the setup, then exercise ``number`` with ``code`` in place of its solution (None: the solution).

    Returns ``(status, detail)``: ``passed``; ``failed`` (a check cell raised); ``model`` (a check
    asked the offline client for the model); ``broken`` (the setup or the answer's own cell raised).
    """
    cells = exercises_of(path)
    setup = [(cell.source, False) for cell in cells[0]]
    own = [(cell.source, is_check(cell)) for cell in cells[number]]
    if code is not None:
        own = with_answer(cells[number], code)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    printed = io.StringIO()
    for kind, (source, checking) in [("setup", cell) for cell in setup] + [("exercise", cell) for cell in own]:
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(source, f"<{path.name} exercise {number}>", "exec", dont_inherit=True), namespace)
        except ModelNeeded as needed:
            return "model", f"{needed} in:\n{source.splitlines()[0]}"
        except Exception as error:
            cause = error.__cause__ or error.__context__
            if isinstance(cause, ModelNeeded):
                return "model", f"{cause} in:\n{source.splitlines()[0]}"
            status = "failed" if kind == "exercise" and checking else "broken"
            return status, f"{type(error).__name__}: {error}\n--- printed:\n{printed.getvalue()[-2000:]}"
    return "passed", printed.getvalue()[-2000:]


@pytest.fixture
def offline(monkeypatch):
    """``connect()`` gives the offline client; notebooks run in solutions/ (they read ../data)."""
    monkeypatch.setattr(course_lib, "connect", lambda *args, **kwargs: OfflineClient(), raising=False)
    monkeypatch.setattr(runtime, "connect", lambda *args, **kwargs: OfflineClient())
    monkeypatch.chdir(SOLUTIONS)


def entries(model: bool) -> list[Any]:
    return [pytest.param(name, number, wrong, id=f"{name.split('_')[0]}-ex{number}-{index}")
            for name, by_exercise in WRONG.items() for number, wrongs in by_exercise.items()
            for index, wrong in enumerate(wrongs) if wrong.model == model]


def test_the_corpus_covers_every_exercise():
    for path in NOTEBOOKS:
        numbers = set(exercises_of(path)) - {0}
        assert path.name in WRONG, f"{path.name} has no wrong answers in tests/grading/wrong_answers.py"
        covered = {number for number, wrongs in WRONG[path.name].items() if wrongs}
        assert covered == numbers, f"{path.name}: exercises {sorted(numbers)}, wrong answers for {sorted(covered)}"
    assert set(WRONG) == {path.name for path in NOTEBOOKS}, "wrong answers for a notebook that is not in solutions/"
    assert all(wrong.reason for by_exercise in WRONG.values() for wrongs in by_exercise.values() for wrong in wrongs)
    for name, by_exercise in WRONG.items():  # a change's lines are in the solution, once (the model's ones too)
        for number, wrongs in by_exercise.items():
            assert all(wrong.code is not None or any(answer_of(SOLUTIONS / name, number, wrong)) for wrong in wrongs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name.split("_")[0] for path in NOTEBOOKS])
def test_the_solutions_pass_the_checks_that_need_no_model(offline, path):
    """The harness runs the solutions as nbval does: each exercise passes, or reaches the model."""
    for number in set(exercises_of(path)) - {0}:
        status, detail = run_exercise(path, number, None)
        assert status in ("passed", "model"), f"exercise {number}: {status}\n{detail}"


@pytest.mark.parametrize(("name", "number", "wrong"), entries(model=False))
def test_a_wrong_answer_fails_its_check(offline, name: str, number: int, wrong: Wrong):
    status, detail = run_exercise(SOLUTIONS / name, number, answer_of(SOLUTIONS / name, number, wrong))
    assert status != "passed", f"this wrong answer passes the checks ({wrong.reason})"
    assert status != "model", (f"no check failed before the model was needed ({wrong.reason}): make a check "
                               f"that needs no model catch it, or mark it model=True\n{detail}")
    assert status == "failed", f"the wrong answer itself, or the setup, raised; fix the corpus\n{detail}"


@pytest.mark.model
@pytest.mark.parametrize(("name", "number", "wrong"), entries(model=True))
def test_a_wrong_answer_fails_its_check_on_the_model(url, monkeypatch, name: str, number: int, wrong: Wrong):
    def connect(*args: Any, **kwargs: Any) -> course_lib.Client:
        return course_lib.Client(url, runtime.chosen_model())

    monkeypatch.setattr(course_lib, "connect", connect, raising=False)
    monkeypatch.setattr(runtime, "connect", connect)
    monkeypatch.chdir(SOLUTIONS)
    status, detail = run_exercise(SOLUTIONS / name, number, answer_of(SOLUTIONS / name, number, wrong))
    assert status != "passed", f"this wrong answer passes the checks ({wrong.reason})"
    assert status == "failed", f"the wrong answer itself, or the setup, raised; fix the corpus\n{detail}"


def test_uses_reference_finds_the_reference_however_it_is_reached_and_puts_everything_back():
    from course_lib import experiments, providers
    from course_lib.checks import uses_reference
    from course_lib.experiments import statistics, wilson_interval
    from course_lib.providers import AnthropicMessages

    original_calls = vars(AnthropicMessages)["calls"]
    namespace: dict[str, Any] = {"__name__": "__main__", "wilson_interval": wilson_interval}
    exec(textwrap.dedent("""
        import course_lib.experiments as experiments
        from course_lib.experiments.statistics import wilson_interval as renamed
        from course_lib.providers import AnthropicMessages

        def direct(): return wilson_interval(5, 10)
        def aliased(): return renamed(5, 10)
        def through_the_module(): return experiments.wilson_interval(5, 10)
        def imported_late():
            from course_lib.experiments import wilson_interval as late
            return late(5, 10)
        def own(): return (0.1, 0.9)

        class Mine(AnthropicMessages):
            def calls(self, body):
                return super().calls(body)
    """), namespace)
    body = {"content": [{"type": "text", "text": "hi"}]}
    for name in ("direct", "aliased", "through_the_module", "imported_late"):
        assert uses_reference(namespace[name], wilson_interval) == ["wilson_interval"], name
    assert uses_reference(namespace["own"], wilson_interval) == []
    adapter = namespace["Mine"]()
    assert uses_reference(lambda: adapter.calls(body), AnthropicMessages.calls) == ["AnthropicMessages.calls"]
    assert uses_reference(lambda: AnthropicMessages().calls(body), AnthropicMessages.results) == []
    assert experiments.wilson_interval is wilson_interval is statistics.wilson_interval
    assert namespace["renamed"] is wilson_interval and namespace["wilson_interval"] is wilson_interval
    assert vars(providers.AnthropicMessages)["calls"] is original_calls
    assert adapter.calls(body)[0] == "hi"
