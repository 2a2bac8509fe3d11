"""Write ``exercises/`` from ``solutions/``: the solutions come out, everything else stays.

In a solution notebook, each exercise's answer sits between two marker lines::

    def tokens_per_second(response):
        ### BEGIN SOLUTION
        return response["eval_count"] / response["eval_duration"] * 1e9
        ### END SOLUTION

The exercise notebook gets the same cells with each marked region replaced by a stub
that raises ``NotImplementedError``, and with all outputs cleared (they would give the
answers away). ``exercises/`` is never edited by hand:

    python -m course_grading exercises build          # write exercises/
    python -m course_grading exercises build --check  # fail if exercises/ is out of date (CI)
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB_MESSAGES = {"en": "Exercise: replace this line with your solution.",
                 "ja": "演習: この行をあなたの解答に置き換えてください。"}
"""What an unsolved exercise says when its cell runs, in each edition (a translated edition's
exercise notebooks get their stub from ``course_tools.translation.build``)."""


def stub(language: str = "en") -> str:
    """The line that stands in for a solution in ``language``'s exercise notebooks."""
    return f'raise NotImplementedError("{STUB_MESSAGES[language]}")'


STUB = stub("en")


def strip_solutions(source: str) -> str:
    """``source`` with each solution region replaced by the stub, at the region's indentation."""
    kept, inside = [], False
    for number, line in enumerate(source.splitlines(), start=1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ValueError(f"line {number}: {BEGIN} inside another solution region")
            kept.append(line[: len(line) - len(line.lstrip())] + STUB)
            inside = True
        elif marker == END:
            if not inside:
                raise ValueError(f"line {number}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            kept.append(line)
    if inside:
        raise ValueError(f"a solution region is not closed with {END}")
    return "\n".join(kept)


def exercise_version(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The learner's notebook made from a solution notebook."""
    notebook = copy.deepcopy(solution)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source)
            cell.outputs = []
            cell.execution_count = None
    return notebook


def build(solutions: Path, exercises: Path, check: bool = False) -> list[Path]:
    """Write (or with ``check``, only compare) every exercise notebook; return the stale ones."""
    stale = []
    for solution_path in sorted(solutions.glob("*.ipynb")):
        notebook = exercise_version(nbformat.read(solution_path, as_version=4))
        text = nbformat.writes(notebook) + "\n"
        target = exercises / solution_path.name
        if not target.exists() or target.read_text() != text:
            stale.append(target)
            if not check:
                exercises.mkdir(exist_ok=True)
                target.write_text(text)
    orphans = set(exercises.glob("*.ipynb")) - {exercises / p.name for p in solutions.glob("*.ipynb")}
    return stale + sorted(orphans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_grading exercises", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--check", action="store_true", help="only report; exit 1 if exercises/ is out of date")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"))
    parser.add_argument("--exercises", type=Path, default=Path("exercises"))
    args = parser.parse_args(argv)
    stale = build(args.solutions, args.exercises, check=args.check)
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path}")
    if args.check and stale:
        print("Run `python -m course_grading exercises build` and commit exercises/.", file=sys.stderr)
        return 1
    return 0
