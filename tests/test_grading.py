"""Grading: exercises mapped from headings, a small class graded row by row, and proof
that every exercise can be passed on its own and every check can fail."""

from __future__ import annotations

import copy
import csv
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from course_lib.exercises import STUB
from course_lib.gradebook import FIELDS, grade_class
from course_lib.grading import Result, format_report, is_check, sections

ROOT = Path(__file__).parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grading"
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
CHECK_LABEL = re.compile(r"^# CHECK (exercise|step) (\d+)")


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def solved(exercise: nbformat.NotebookNode, solution: nbformat.NotebookNode,
           numbers: set[int]) -> nbformat.NotebookNode:
    """The exercise notebook with the cells of exercises ``numbers`` taken from the solution."""
    notebook = copy.deepcopy(exercise)
    theirs = {part.number: part for part in sections(solution)}
    notebook.cells = []
    for part in sections(exercise):
        for cell in (theirs[part.number] if part.number in numbers else part).cells:
            cell = copy.deepcopy(cell)
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
            notebook.cells.append(cell)
    return notebook


def with_code(notebook: nbformat.NotebookNode, number: int, code: str) -> nbformat.NotebookNode:
    """``notebook`` with the stub of exercise ``number`` replaced by ``code`` (a learner's attempt)."""
    notebook = copy.deepcopy(notebook)
    part = next(part for part in sections(notebook) if part.number == number)
    cell = next(cell for cell in part.code if STUB in cell.source)
    cell.source = cell.source.replace(STUB, code)
    return notebook


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_every_exercise_is_found_with_its_checks(path):
    """Headings give the exercises; each has check cells, and each check names its exercise."""
    parts = sections(read(path))
    assert parts[0].number == 0 and not parts[0].checks, "the setup comes first and checks nothing"
    assert [part.number for part in parts[1:]] == list(range(1, len(parts))), "exercises are numbered 1, 2, ..."
    for part in parts[1:]:
        assert part.checks, f"exercise {part.number} has no check cell"
        assert part.title and "·" not in part.title
        for cell in part.checks:
            kind, number = CHECK_LABEL.match(cell.source).groups()
            assert kind == "step" or int(number) == part.number, \
                f"{cell.source.splitlines()[0]!r} is in exercise {part.number}"


def test_the_report_is_plain_text_with_a_count():
    results = [Result("01_the_wire.ipynb", 1, "Build a chat request", "passed"),
               Result("01_the_wire.ipynb", 2, "Tokens per second", "failed", "✘ 50 tokens in 2 s\n  hint: nanoseconds"),
               Result("01_the_wire.ipynb", 3, "Read a stream", "not attempted")]
    assert format_report(results) == (
        "Exercise 1 · Build a chat request  passed\n"
        "Exercise 2 · Tokens per second     failed\n"
        "    ✘ 50 tokens in 2 s\n"
        "      hint: nanoseconds\n"
        "Exercise 3 · Read a stream         not attempted\n"
        "1 of 3 exercises passed")
    assert "\033[" in format_report(results, colour=True) and "\033[" not in format_report(results)


def small_class(into: Path) -> Path:
    """Eight learners' notebook 06 (no model): solved, unsolved, partly solved, an endless
    loop, an edited check cell, a broken file, a notebook that fails at import."""
    exercise = read(ROOT / "exercises" / "06_side_effects.ipynb")
    solution = read(ROOT / "solutions" / "06_side_effects.ipynb")
    constant_waits = ("for n in range(attempts):\n        try:\n            return operation()\n"
                      "        except (ServiceTimeout, ServerError):\n            sleep(0.5)")
    cheat = with_code(exercise, 1, 'return "x"')
    check_cell = next(cell for cell in cheat.cells if cell.source.startswith("# CHECK exercise 1"))
    check_cell.source = "# CHECK exercise 1\nprint('all good')"
    broken_import = copy.deepcopy(exercise)
    broken_import.cells[1].source = "import no_such_module\n" + broken_import.cells[1].source
    learners = {
        "ada": solved(exercise, solution, {1, 2, 3}),
        "ben": exercise,
        "cleo": with_code(solved(exercise, solution, {1}), 2, constant_waits),
        "dan": with_code(solved(exercise, solution, {1, 3}), 2, "while True:\n        pass"),
        "eve": cheat,
        "gus": broken_import,
    }
    for name, notebook in learners.items():
        (into / name).mkdir(parents=True)
        nbformat.write(notebook, into / name / "06_side_effects.ipynb")
    notes = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('my notes')")])
    nbformat.write(notes, into / "ben" / "notes.ipynb")
    (into / "fay").mkdir()
    shutil.copy(FIXTURES / "broken.ipynb", into / "fay" / "06_side_effects.ipynb")
    return into


def test_a_small_class_is_graded_row_by_row(tmp_path):
    started = time.monotonic()
    rows = grade_class(small_class(tmp_path / "class"), tmp_path / "out", cell_timeout=6, progress=False)
    print(f"graded {len(rows)} rows in {time.monotonic() - started:.0f} s")
    with open(tmp_path / "out" / "grades.csv", newline="") as file:
        written = list(csv.DictReader(file))
    assert written == rows and list(written[0]) == FIELDS
    with open(FIXTURES / "expected_grades.csv", newline="") as file:
        expected = list(csv.DictReader(file))
    assert [(r["learner"], r["notebook"], r["exercise"], r["status"]) for r in written] == \
           [(r["learner"], r["notebook"], r["exercise"], r["status"]) for r in expected]
    for got, want in zip(written, expected):
        assert got["message"].startswith(want["message"]), (got, want)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| ada | 3/3 |" in summary and "| fay | error |" in summary and "| gus | error |" in summary
    assert "- ben/notes.ipynb: not one of the course" in summary
    assert "| 06 | 1 · A canonical key | 3 of 7 (43%) | 1 | 1 | 2 |" in summary


# A notebook with one exercise is left out: solved, it is the solution notebook, which nbval
# runs (solutions/), and unsolved it is run by tests/test_exercises.py.
SEVERAL_EXERCISES = [path for path in SOLUTIONS if len(sections(read(path))) > 2]


def last_to_first(exercise: nbformat.NotebookNode, solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The setup, then for each exercise from the last to the first: its unsolved cells (from
    ``exercise``), then its solved ones (from ``solution``). Every code cell is tagged
    ``metadata.expect``: "fail" for a check of an unsolved exercise, "pass" for the setup and
    the solution's cells and checks, None for the unsolved exercise's own cells."""
    notebook = copy.deepcopy(solution)
    unsolved = {part.number: part for part in sections(exercise)}
    parts = sections(solution)
    notebook.cells = []
    for part in [parts[0], *reversed(parts[1:])]:
        versions = [(part, "pass")] if part.number == 0 else [(unsolved[part.number], "fail"), (part, "pass")]
        for version, expect in versions:
            for cell in map(copy.deepcopy, version.code):
                cell.outputs, cell.execution_count = [], None
                cell.metadata["expect"] = expect if is_check(cell) or expect == "pass" else None
                notebook.cells.append(cell)
    return notebook


@pytest.mark.model
@pytest.mark.parametrize("path", SEVERAL_EXERCISES, ids=[p.name for p in SEVERAL_EXERCISES])
def test_each_exercise_fails_unsolved_and_passes_on_its_own(path, url, tmp_path):
    """In one kernel, the exercises from the last to the first: each check raises on the stub,
    then passes on the solution. An exercise that used what an earlier exercise made would fail
    here (the earlier one has not run yet); one that used a later exercise fails in the solution
    notebook's own order, which nbval runs (solutions/). So each exercise passes without the
    others' solutions, and each check can fail, without a kernel per exercise. Not covered: an
    earlier exercise's stub that breaks a later one by rebinding a name the setup defines (no
    exercise rebinds one that a later exercise reads before binding it itself)."""
    from nbclient import NotebookClient

    (tmp_path / "data").symlink_to(ROOT / "data", target_is_directory=True)
    (tmp_path / "exercises").mkdir()
    notebook = last_to_first(read(ROOT / "exercises" / path.name), read(path))
    env = {key: value for key, value in os.environ.items() if key != "COURSE_EMBEDDED"} | {"OLLAMA_HOST": url}
    NotebookClient(notebook, timeout=600, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path / "exercises")}}).execute(env=env)

    def error(cell) -> str | None:
        return next((f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"), None)

    expected = [(cell.source.splitlines()[0], cell.metadata["expect"], error(cell)) for cell in notebook.cells]
    passing_unsolved = [first for first, expect, failure in expected if expect == "fail" and not failure]
    failing_solved = [(first, failure) for first, expect, failure in expected if expect == "pass" and failure]
    assert not passing_unsolved, f"these checks pass without a solution, so they cannot fail: {passing_unsolved}"
    assert not failing_solved, f"these cells fail, with the exercises before them not yet run: {failing_solved}"


def names(cells: list) -> tuple[set[str], set[str]]:
    """The names ``cells`` define (anywhere, at any depth) and the names they read."""
    import ast

    defined, used = set(), set()
    for cell in cells:
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Name):
                (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, ast.alias):
                defined.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                defined.add(node.name)
    return defined, used


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.name for p in SOLUTIONS])
def test_no_exercise_reads_another_exercises_names(path):
    """The fast half of independence, without running anything: an exercise's cells (its
    solution and its checks) read no name that only another exercise defines."""
    parts = sections(read(path))
    setup, _ = names(parts[0].code)
    for part in parts[1:]:
        own, used = names(part.code)
        others = set().union(*(names(other.code)[0] for other in parts[1:] if other is not part))
        borrowed = (used - own - setup) & others
        assert not borrowed, f"exercise {part.number} reads {sorted(borrowed)} from another exercise"
