"""Friendly checks for the exercises, and the grading of a whole exercise notebook.

A check that fails raises ``CheckFailed`` (an ``AssertionError``, so nbval marks the
cell as failed) with a message meant for a learner, not a stack-trace reader::

    check_equal(tokens_per_second(sample), 25.0, "eval_duration is in nanoseconds")

``report("01_the_wire.ipynb")`` grades a saved notebook, one line per exercise, as
``python3 course.py grade`` does; ``grade`` returns the same as ``Result`` objects
(``course_lib.gradebook`` grades a whole class with it).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class CheckFailed(AssertionError):
    """An exercise check did not pass; the message says what was expected and gives a hint."""


def check(condition: bool, what: str, hint: str = "") -> None:
    """Pass when ``condition`` is true; ``what`` says what is being checked."""
    if not condition:
        raise CheckFailed(f"✘ {what}" + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")


def check_equal(actual: Any, expected: Any, what: str, hint: str = "") -> None:
    """Pass when ``actual == expected``; on failure show both."""
    if actual != expected:
        raise CheckFailed(f"✘ {what}\n  expected: {expected!r}\n  got:      {actual!r}"
                          + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")


def check_close(actual: float, expected: float, what: str, hint: str = "", rel: float = 1e-6) -> None:
    """Pass when ``actual`` is within ``rel`` (relative) of ``expected``."""
    close = isinstance(actual, (int, float)) and abs(actual - expected) <= rel * max(abs(expected), 1e-12)
    if not close:
        raise CheckFailed(f"✘ {what}\n  expected about: {expected!r}\n  got:          {actual!r}"
                          + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")


def uses_reference(call: Callable[[], Any], *references: Callable[..., Any]) -> list[str]:
    """Run ``call()`` and return the names of the course's ``references`` that it reached.

    An exercise that asks a learner to write what the course also ships (lesson 8's
    ``wilson_interval``, lesson 10's adapter methods) checks that the answer does not simply
    call the shipped one. While ``call()`` runs, every place that holds a reference (the
    ``course_lib`` modules, their classes, and the globals of ``call``: the notebook's) holds
    a recording stand-in that still does the real work, so nothing else changes::

        check(not uses_reference(lambda: wilson(5, 10), wilson_interval), "your own computation")
    """
    import functools
    import sys

    reached: list[str] = []

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def recording(*args: Any, **kwargs: Any) -> Any:
            reached.append(original.__qualname__)
            return original(*args, **kwargs)
        return recording

    owners: list[Any] = [getattr(call, "__globals__", {})]  # dicts, or classes (set with setattr)
    for name, module in list(sys.modules.items()):
        if name == "course_lib" or name.startswith("course_lib."):
            owners.append(vars(module))
            owners += [value for value in vars(module).values() if isinstance(value, type) and value.__module__ == name]
    owners += [value for value in owners[0].values() if isinstance(value, type)]  # the notebook's own classes
    swapped: list[tuple[Any, str, Any]] = []  # (owner, key, original), to put back
    stand_ins = [(reference, stand_in(reference)) for reference in references]
    try:
        for owner in owners:
            items = owner.items() if isinstance(owner, dict) else vars(owner).items()
            for key, value in list(items):
                replacement = next((new for reference, new in stand_ins if value is reference), None)
                if replacement is not None:
                    swapped.append((owner, key, value))
                    _assign(owner, key, replacement)
        call()
    finally:
        for owner, key, value in reversed(swapped):
            _assign(owner, key, value)
    return sorted(set(reached))


def _assign(owner: Any, key: str, value: Any) -> None:
    if isinstance(owner, dict):
        owner[key] = value
    else:
        setattr(owner, key, value)


# --------------------------------------------------------------------------------------
# Grading a whole notebook: which exercises pass, which fail, which were not attempted.
#
# A notebook is executed top to bottom in a fresh kernel (nbclient, errors allowed, a time
# limit per cell), then each exercise is judged from the error outputs of its own cells:
#
#   no error in the exercise's cells                       -> passed
#   the stub's NotImplementedError (the solution is absent) -> not attempted
#   CheckFailed from a check                                -> failed, with the check's message
#   any other error                                         -> failed, with its type and text
#   a cell stopped at the time limit, a dead kernel         -> error
#
# Which cells belong to which exercise comes from the published notebook (exercises/):
# the cells after a "## Exercise N · Title" heading, up to the next one, are exercise N;
# the cells before the first heading are the setup. Notebook 11 has "## Step N" headings
# instead: its steps build one thing, so together they are one exercise.
# --------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "exercises"  # the check cells that count are these, never a submission's copy
STUB_MESSAGE = "Exercise: replace this line with your solution."  # what course_lib.exercises.STUB raises
HEADING = re.compile(r"^##\s+(Exercise|Step)\s+(\d+)\s*·\s*(.+?)\s*$")
NOTEBOOK_TITLE = re.compile(r"^#\s+Exercises?\s*·\s*Lesson\s+\d+,\s*(.+?)\s*$")


def is_check(cell: Any) -> bool:
    """A check cell is a code cell whose first line starts with ``# CHECK``."""
    return cell.cell_type == "code" and cell.source.lstrip().startswith("# CHECK")


@dataclass
class Section:
    """The setup (``number`` 0) or one exercise: its title and its cells, in order."""

    number: int
    title: str
    cells: list[Any] = field(default_factory=list)

    @property
    def code(self) -> list[Any]:
        return [cell for cell in self.cells if cell.cell_type == "code"]

    @property
    def checks(self) -> list[Any]:
        return [cell for cell in self.cells if is_check(cell)]


def sections(notebook: Any) -> list[Section]:
    """Split a notebook into its setup and its exercises, by the ``##`` headings.

    A ``## Step N`` heading continues the current exercise; before any exercise it starts
    exercise 1, titled after the notebook's own ``# Exercise · Lesson NN, title`` line.
    """
    first_line = (notebook.cells[0].source.splitlines() or [""])[0] if notebook.cells else ""
    lesson_title = NOTEBOOK_TITLE.match(first_line)
    parts = [Section(0, "setup")]
    for cell in notebook.cells:
        heading = HEADING.match((cell.source.splitlines() or [""])[0]) if cell.cell_type == "markdown" else None
        if heading and heading.group(1) == "Exercise":
            parts.append(Section(int(heading.group(2)), heading.group(3)))
        elif heading and len(parts) == 1:  # a "Step" heading opens the notebook's one exercise
            title = lesson_title.group(1) if lesson_title else heading.group(3)
            parts.append(Section(1, title[:1].upper() + title[1:]))
        parts[-1].cells.append(cell)
    return parts


@dataclass
class Result:
    """One exercise of one notebook (``exercise`` is None when the whole notebook failed)."""

    notebook: str
    exercise: int | None
    title: str
    status: str
    message: str = ""

    @property
    def label(self) -> str:
        return f"Exercise {self.exercise} · {self.title}" if self.exercise is not None else self.notebook


def submission(learner: Any, published: Any) -> Any:
    """The notebook that is graded: the learner's code cells with the published check cells.

    Section by section (matched by exercise number), the learner's code cells are kept in
    their order, except their check cells: the published checks of that section take the
    place of the first one (or go last, if the learner deleted them). Every cell is tagged
    ``metadata.grading = {"section": n, "check": bool}`` so that results can be read back.
    """
    import nbformat

    mine = {part.number: part for part in sections(learner)}
    graded = nbformat.v4.new_notebook(metadata=published.metadata)
    for part in sections(published):
        cells, checks_placed = [], False
        published_checks = [nbformat.v4.new_code_cell(cell.source) for cell in part.checks]
        for cell in mine.get(part.number, Section(part.number, "")).code:
            if not is_check(cell):
                cells.append(nbformat.v4.new_code_cell(cell.source))
            elif not checks_placed:
                cells += published_checks
                checks_placed = True
        if not checks_placed:
            cells += published_checks
        for cell in cells:
            cell.metadata["grading"] = {"section": part.number, "check": is_check(cell)}
        graded.cells += cells
    return graded


def execute(notebook: Any, folder: Path, cell_timeout: float, env: dict[str, str] | None = None) -> None:
    """Run every code cell in a fresh kernel whose working folder is ``folder``.

    Errors do not stop the run (each exercise is judged on its own), but the checks of an
    exercise whose own code cell raised the stub's error are skipped. A cell that runs
    longer than ``cell_timeout`` seconds is interrupted and marked ``metadata.timed_out``;
    if the kernel dies, the cells after it stay unexecuted.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    quiet = logging.getLogger("course_lib.grading.nbclient")  # a timeout is reported per exercise, not logged
    quiet.setLevel(logging.CRITICAL)
    client = NotebookClient(notebook, timeout=int(cell_timeout), interrupt_on_timeout=True, allow_errors=True,
                            kernel_name="python3", resources={"metadata": {"path": str(folder)}}, log=quiet)
    not_attempted: set[int] = set()  # sections whose own code raised the stub's error
    with client.setup_kernel(env=env, stderr=subprocess.DEVNULL):  # not the kernel's own warnings
        for index, cell in enumerate(notebook.cells):
            tag = cell.metadata["grading"]
            if tag["check"] and tag["section"] in not_attempted:
                continue  # its checks could only fail, and some would spend minutes on the model first
            started = time.monotonic()
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                cell.metadata["kernel_died"] = True
                return
            if time.monotonic() - started >= cell_timeout:
                cell.metadata["timed_out"] = True
            if error_of(cell) == ("NotImplementedError", STUB_MESSAGE):
                not_attempted.add(tag["section"])


def error_of(cell: Any) -> tuple[str, str] | None:
    """``(ename, evalue)`` of the cell's error output, if it raised."""
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            return output.ename, output.evalue
    return None


def judge(graded: Any, published: Any, name: str, cell_timeout: float) -> list[Result]:
    """Read each exercise's status from an executed ``submission`` notebook."""
    parts = sections(published)[1:]
    by_section: dict[int, list[Any]] = {}
    for cell in graded.cells:
        by_section.setdefault(cell.metadata["grading"]["section"], []).append(cell)
    setup_failure = next((error_of(cell) for cell in by_section.get(0, []) if error_of(cell)), None)
    results = []
    for part in parts:
        cells = by_section.get(part.number, [])
        status, message = verdict(cells, cell_timeout)
        if setup_failure:
            status, message = "error", "the setup cell failed: {}: {}".format(*setup_failure)
        results.append(Result(name, part.number, part.title, status, message))
    return results


def verdict(cells: list[Any], cell_timeout: float) -> tuple[str, str]:
    """The status and message of one exercise, from the first of its cells that went wrong."""
    several_checks = sum(cell.metadata["grading"]["check"] for cell in cells) > 1
    for cell in cells:
        if cell.metadata.get("timed_out"):
            return "error", f"a cell ran longer than {cell_timeout:.0f} s and was stopped (an endless loop?)"
        if cell.metadata.get("kernel_died") or cell.get("execution_count") is None:
            return "error", "the kernel died (or stopped) before this exercise's cells ran"
        failure = error_of(cell)
        if failure is None:
            continue
        ename, evalue = failure
        if ename == "NotImplementedError" and evalue == STUB_MESSAGE:
            return "not attempted", ""
        label = cell.source.splitlines()[0].removeprefix("# CHECK").split(":")[0].strip()
        where = f"({label}) " if several_checks else ""
        if ename == "CheckFailed":
            return "failed", where + evalue
        in_your_code = "" if cell.metadata["grading"]["check"] else " (in your code)"
        return "failed", f"{where}{ename}: {evalue}{in_your_code}"
    if not any(cell.metadata["grading"]["check"] for cell in cells):
        return "error", "this exercise has no check cell"
    return "passed", ""


def grade(path: Path, folder: Path | None = None, model_url: str | None = None, cell_timeout: float = 300,
          published: Path = PUBLISHED) -> list[Result]:
    """Grade one notebook file: one ``Result`` per exercise, or one ``error`` Result.

    ``folder`` is the kernel's working folder (default: the notebook's own); notebooks
    read ``../data/...``, so it should sit next to a ``data`` folder. ``model_url`` is a
    running model server for the kernel's ``connect()``; without one, ``connect()``
    finds or starts its own.
    """
    import nbformat

    path = Path(path)
    reference = published / path.name
    if not reference.exists():
        return [Result(path.name, None, "", "error", f"not one of the course's notebooks (no exercises/{path.name})")]
    try:
        learner = nbformat.read(path, as_version=4)
    except Exception as problem:  # invalid JSON, not a notebook, unreadable: nbformat raises many kinds
        message = f"not a readable notebook: {type(problem).__name__}: {problem}"
        return [Result(path.name, None, "", "error", message[:300])]
    expected = sections(nbformat.read(reference, as_version=4))
    if not {part.number for part in sections(learner)[1:]} & {part.number for part in expected[1:]}:
        return [Result(path.name, None, "", "error",
                       f"not one of the course's notebooks (none of the exercise headings of {path.name})")]
    env = {key: value for key, value in os.environ.items() if key != "JPY_SESSION_NAME"}
    if model_url:
        env["OLLAMA_HOST"] = model_url
        env.pop("COURSE_EMBEDDED", None)
    published_notebook = nbformat.read(reference, as_version=4)
    graded = submission(learner, published_notebook)
    try:
        execute(graded, folder or path.parent, cell_timeout, env)
    except Exception as problem:  # the kernel could not start, for example
        return [Result(path.name, None, "", "error", f"could not run: {type(problem).__name__}: {problem}"[:300])]
    return judge(graded, published_notebook, path.name, cell_timeout)


COLOURS = {"passed": "\033[32m", "failed": "\033[31m", "not attempted": "\033[33m", "error": "\033[31m"}


def format_report(results: list[Result], colour: bool = False) -> str:
    """The learner's report: one line per exercise, the check's message under a failure,
    and a last line with the count, such as ``2 of 4 exercises passed``."""
    width = max((len(result.label) for result in results), default=0)
    lines = []
    for result in results:
        status = f"{COLOURS[result.status]}{result.status}\033[0m" if colour else result.status
        lines.append(f"{result.label:<{width}}  {status}")
        lines += ["    " + line for line in result.message.splitlines()]
    exercises = [result for result in results if result.exercise is not None]
    passed = sum(result.status == "passed" for result in exercises)
    lines.append(f"{passed} of {len(exercises)} exercises passed")
    return "\n".join(lines)


def report(path: str | Path | None = None, cell_timeout: float = 300) -> list[Result]:
    """Grade a notebook as ``python3 course.py grade`` does, and print the report.

    In JupyterLab, ``report()`` grades the notebook it runs in, as last saved (save
    first: Ctrl+S); it runs the saved file in a new kernel, with the published checks, so
    it takes as long as "Restart and run all". Elsewhere, pass the path.
    """
    if path is None:
        session = os.environ.get("JPY_SESSION_NAME")
        if not session:
            print("Pass the notebook's path, e.g. report('01_the_wire.ipynb'), "
                  "or run `python3 course.py grade exercises/01_the_wire.ipynb` in a terminal.")
            return []
        path = Path(session)  # JupyterLab's name for the notebook: absolute, or relative to its root
        if not path.is_file():
            path = Path.cwd() / path.name  # the kernel runs in the notebook's folder
    results = grade(Path(path), cell_timeout=cell_timeout)
    print(format_report(results))
    return results


def copy_of_folder(folder: Path, into: Path) -> Path:
    """A copy of ``folder`` at ``into/exercises``, with ``into/data`` pointing at the course's
    data, so that the notebook's ``../data/...`` paths work as they do in the course."""
    target = into / "exercises"
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    (into / "data").symlink_to(ROOT / "data", target_is_directory=True)
    return target


def grade_copy(path: Path, model_url: str | None = None, cell_timeout: float = 300) -> list[Result]:
    """``grade`` a submission in a throw-away copy of its folder (what a gradebook does)."""
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        folder = copy_of_folder(Path(path).parent, Path(scratch))
        return grade(folder / Path(path).name, folder, model_url, cell_timeout)
