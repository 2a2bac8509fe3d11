"""Grade from the command line: a learner's report, a table over all notebooks, a class.

    python -m course_lib.gradebook exercises/01_the_wire.ipynb   # one line per exercise
    python -m course_lib.gradebook                               # a table over exercises/*.ipynb
    python -m course_lib.gradebook --class submissions --out grades
    python -m course_lib.gradebook -v exercises/01_the_wire.ipynb  # nbval's raw per-cell output

(``python3 course.py grade ...`` runs this.) For one notebook or the table, the exit
status is 0 only when every exercise passed. For a class, ``submissions/`` holds one folder per learner with any of
the exercise notebooks in it; the command writes ``grades.csv`` (one row per learner,
notebook and exercise) and ``summary.md`` (pass counts per learner and notebook, and
each exercise's pass rate across the class). Every submission runs in its own kernel, in
a copy of its folder, with the published check cells and a time limit per cell; one
model server serves the whole batch.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from . import config
from .grading import PUBLISHED, Result, format_report, grade, grade_copy

if TYPE_CHECKING:  # imported when needed: the server is heavy
    from .runtime import EmbeddedServer

FIELDS = ["learner", "notebook", "exercise", "status", "message"]
COUNTED = ("passed", "failed", "not attempted")  # the statuses tallied per exercise; the rest are errors


class ModelServer:
    """One model server for many kernels, started only when a notebook needs the model.

    Your own Ollama is used when it answers and has the model (as ``connect()`` does),
    unless ``COURSE_EMBEDDED=1``; otherwise one embedded server is started and stopped
    with this object. Kernels reach it through ``OLLAMA_HOST``.
    """

    def __init__(self, url: str | None = None) -> None:
        self._url = url
        self._server: EmbeddedServer | None = None  # started on the first notebook that needs it

    def url_for(self, notebook: Path) -> str | None:
        """The server's URL if ``notebook`` (its published version) calls ``connect()``."""
        reference = PUBLISHED / notebook.name
        if not reference.exists() or "connect(" not in reference.read_text():
            return None
        if self._url is None:
            from .client import resolve_host
            from .runtime import EmbeddedServer, answers, chosen_model, has_model

            host = resolve_host()
            if not config.embedded_only() and answers(host) and has_model(host, chosen_model()):
                self._url = host
            else:
                self._server = EmbeddedServer()
                self._url = self._server.url
        return self._url

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()


def grade_class(class_dir: Path, out: Path, cell_timeout: float = 300, model_url: str | None = None,
                progress: bool = True) -> list[dict[str, str]]:
    """Grade every ``*.ipynb`` in every learner folder of ``class_dir``; write ``out/grades.csv``
    (row by row, as each submission finishes) and ``out/summary.md``; return the rows."""
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, str]] = []
    server = ModelServer(model_url)
    try:
        with open(out / "grades.csv", "w", newline="") as file:
            writer = csv.DictWriter(file, FIELDS)
            writer.writeheader()
            for learner in sorted(path for path in class_dir.iterdir() if path.is_dir()):
                for notebook in sorted(learner.glob("*.ipynb")):
                    started = time.monotonic()
                    try:
                        results = grade_copy(notebook, server.url_for(notebook), cell_timeout)
                    except Exception as problem:  # whatever it is, it is this submission's row, not the batch's end
                        results = [Result(notebook.name, None, "", "error", f"{type(problem).__name__}: {problem}")]
                    for result in results:
                        row = {"learner": learner.name, "notebook": notebook.name,
                               "exercise": "" if result.exercise is None else str(result.exercise),
                               "status": result.status, "message": result.message}
                        writer.writerow(row)
                        rows.append(row)
                    file.flush()
                    if progress:
                        passed = sum(result.status == "passed" for result in results)
                        print(f"{learner.name}/{notebook.name}: {passed} of {len(results)} passed "
                              f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    finally:
        server.close()
    (out / "summary.md").write_text(summary(rows))
    return rows


def summary(rows: list[dict[str, str]]) -> str:
    """Markdown: learners × notebooks with exercises passed, then each exercise's pass rate."""
    learners = sorted({row["learner"] for row in rows})
    notebooks = sorted({row["notebook"] for row in rows if (PUBLISHED / row["notebook"]).exists()})
    cell: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        cell[row["learner"], row["notebook"]].append(row)

    def count(found: list[dict[str, str]]) -> str:
        if not found:
            return "–"
        if all(row["status"] == "error" for row in found):
            return "error"
        return f"{sum(row['status'] == 'passed' for row in found)}/{len(found)}"

    short = [name.split("_")[0] for name in notebooks]
    lines = ["# Grades", "", "Exercises passed per learner and notebook (– no submission; error: not gradable).", "",
             "| learner | " + " | ".join(short) + " |", "| --- |" + " --- |" * len(notebooks)]
    lines += [f"| {learner} | " + " | ".join(count(cell[learner, nb]) for nb in notebooks) + " |"
              for learner in learners]
    broken = {(row["learner"], row["notebook"]): row["message"].splitlines()[0] for row in rows
              if row["status"] == "error" and (row["exercise"] == "" or row["message"].startswith("the setup"))}
    if broken:
        lines += ["", "Not graded:", ""]
        lines += [f"- {learner}/{name}: {why}" for (learner, name), why in sorted(broken.items())]
    lines += ["", "Pass rate per exercise, among the learners who submitted the notebook.", "",
              "| notebook | exercise | passed | failed | not attempted | error |",
              "| --- | --- | --- | --- | --- | --- |"]
    titles = titles_of(notebooks)
    for notebook in notebooks:
        numbers = sorted({int(row["exercise"]) for row in rows if row["notebook"] == notebook and row["exercise"]})
        for number in numbers:
            of_it = [row for row in rows if row["notebook"] == notebook and row["exercise"] == str(number)]
            submitted = len({row["learner"] for row in rows if row["notebook"] == notebook})
            tally = {status: sum(row["status"] == status for row in of_it) for status in COUNTED}
            errors = submitted - sum(tally.values())
            rate = tally["passed"] / submitted if submitted else 0
            lines.append(f"| {notebook.split('_')[0]} | {number} · {titles.get((notebook, number), '')} | "
                         f"{tally['passed']} of {submitted} ({rate:.0%}) | {tally['failed']} | "
                         f"{tally['not attempted']} | {errors} |")
    return "\n".join(lines) + "\n"


def titles_of(notebooks: list[str]) -> dict[tuple[str, int], str]:
    """Exercise titles from the published notebooks."""
    from .grading import sections

    titles = {}
    for name in notebooks:
        if (PUBLISHED / name).exists():
            for part in sections(nbformat.read(PUBLISHED / name, as_version=4))[1:]:
                titles[name, part.number] = part.title
    return titles


def table(paths: list[Path], cell_timeout: float) -> int:
    """Grade each notebook in place and print one row each as it finishes; 0 if all passed."""
    server, everything = ModelServer(), []
    print(f"{'notebook':34} {'passed':>8} {'failed':>7} {'not attempted':>14}", flush=True)
    try:
        for path in paths:
            results = grade(path, model_url=server.url_for(path), cell_timeout=cell_timeout)
            everything += results
            if results and results[0].exercise is None:
                print(f"{path.name:34} error: {results[0].message}", flush=True)
                continue
            tally = {status: sum(result.status == status for result in results) for status in COUNTED}
            print(f"{path.name:34} {tally['passed']:>3} of {len(results):<2} {tally['failed']:>7} "
                  f"{tally['not attempted']:>14}", flush=True)
    finally:
        server.close()
    exercises = [result for result in everything if result.exercise is not None]
    passed = sum(result.status == "passed" for result in exercises)
    print(f"{passed} of {len(exercises)} exercises passed")
    return 0 if everything and all(result.status == "passed" for result in everything) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 course.py grade", description=__doc__.split("\n")[0])
    parser.add_argument("notebook", nargs="?", type=Path,
                        help="an exercise notebook; none: every notebook in exercises/")
    parser.add_argument("-v", "--verbose", action="store_true", help="show nbval's full per-cell output instead")
    parser.add_argument("--class", dest="class_dir", type=Path, help="a folder with one subfolder per learner")
    parser.add_argument("--out", type=Path, default=Path("grades"), help="where grades.csv and summary.md go")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a cell may run (default 300)")
    args = parser.parse_args(argv)
    if args.class_dir:
        rows = grade_class(args.class_dir, args.out, args.timeout)
        print(f"wrote {args.out / 'grades.csv'} ({len(rows)} rows) and {args.out / 'summary.md'}")
        return 0  # the batch ran; how each learner did is in the files
    if args.verbose:
        target = [str(args.notebook)] if args.notebook else [str(PUBLISHED)]
        return subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *target]).returncode
    if args.notebook is None:
        return table(sorted(PUBLISHED.glob("*.ipynb")), args.timeout)
    server = ModelServer()
    try:
        results = grade(args.notebook, model_url=server.url_for(args.notebook), cell_timeout=args.timeout)
    finally:
        server.close()
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    print(format_report(results, colour))
    return 0 if results and all(result.status == "passed" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
