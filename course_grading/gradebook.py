"""Grade from the command line: a learner's report, a table over all notebooks, a class.

    python -m course_grading gradebook exercises/01_the_wire.ipynb   # one line per exercise
    python -m course_grading gradebook                               # a table over exercises/*.ipynb
    python -m course_grading gradebook --class submissions --out grades
    python -m course_grading gradebook -v exercises/01_the_wire.ipynb  # nbval's raw per-cell output

(``python3 course.py grade ...`` runs this.) For one notebook or the table, the exit
status is 0 only when every exercise passed. For a class, ``submissions/`` holds one folder per learner with any of
the exercise notebooks in it; the command writes ``grades.csv`` (one row per learner,
notebook and exercise) and ``summary.md`` (pass counts per learner and notebook, each
exercise's pass rate across the class, and which sandbox ran). A class is other people's
code: every submission runs in a sandbox (``course_grading.sandbox``: a scratch copy, an
allowlisted environment, limits, its processes killed at the end), with the published
checks run where its code cannot replace them (``course_grading.grading``), a time limit per
cell and per notebook, and the model server checked before and after each submission and
restarted when it died. Both reports are escaped: a learner's text is never a spreadsheet
formula or Markdown. ``--workers 4`` grades four submissions at once (as root: the kernels
of each worker run as a user of their own). Where the sandbox cannot run, the class is not
graded, unless ``--unsafe-trust-the-class``: then every report's first line says so.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat

from course_grading.grading import EDITIONS, PUBLISHED, Result, format_report, grade
from course_lib.config import course_language

if TYPE_CHECKING:  # imported when needed: the server is heavy
    from course_grading.sandbox import Sandbox

FIELDS = ["learner", "notebook", "exercise", "status", "message", "note"]
COUNTED = ("passed", "failed", "not attempted")  # the statuses tallied per exercise; the rest are errors
UNSAFE = ("UNSAFE: graded with --unsafe-trust-the-class, without a sandbox: every learner's code ran as you, with "
          "your files, your network and your environment, and could have changed these grades.")


class ModelServer:
    """One model server for many kernels, started only when a notebook needs the model.

    The course's own embedded server, started and stopped with this object (``start`` makes
    another kind: any object with ``url``, ``running`` and ``stop()``), never your own Ollama,
    even when one answers: the kernels reach the server through a relay that passes bytes, and
    Ollama also serves ``/api/delete``, ``/api/create`` and ``/api/pull``, which a submission
    must not reach (the embedded server has no such routes). Kernels reach it through
    ``OLLAMA_HOST``. ``check()`` is called before and after each submission that uses it: a
    server that stopped answering is started again, and the submission's rows
    say so. ``turn`` is held around such a submission, so that with several graded at once
    the submission a stop is put on is the one that was using the server.
    """

    def __init__(self, url: str | None = None, start: Callable[[], Any] | None = None) -> None:
        self._url = url
        self._start = start
        self._server: Any = None  # started on the first notebook that needs it
        self.turn = threading.Lock()  # held while a submission that uses the server is graded

    @property
    def url(self) -> str | None:
        return self._url

    @property
    def model(self) -> str:
        from course_lib.runtime import chosen_model

        return chosen_model()

    def url_for(self, notebook: Path) -> str | None:
        """The server's URL if ``notebook`` (its published version) calls ``connect()``."""
        if not uses_model(notebook):
            return None
        if self._url is None:
            self._launch()
        return self._url

    def _launch(self) -> None:
        from course_lib.runtime import EmbeddedServer

        self._server = self._start() if self._start is not None else EmbeddedServer()
        self._url = self._server.url

    def healthy(self) -> bool:
        """Whether the server answers (a server not started yet counts as healthy)."""
        from course_lib.runtime import answers

        if self._url is None:
            return True
        for _ in range(3):  # a busy server can miss one short request
            if answers(self._url):
                return True
            time.sleep(1)
        return False

    def check(self, when: str) -> str:
        """Start the server again if it stopped answering; say so (empty: it answers)."""
        if self.healthy():
            return ""
        dead = self._url
        if self._server is not None:
            self._server.stop()
        self._launch()
        if when == "before":
            return f"the model server ({dead}) was not answering before this submission: a new one ran it"
        return (f"the model server ({dead}) stopped answering during this submission (its model answers may be "
                "missing here); a new one was started for the next submission")

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()


def uses_model(notebook: Path) -> bool:
    """Whether ``notebook`` (its published version in exercises/) calls ``connect()``."""
    reference = PUBLISHED / notebook.name
    return reference.is_file() and "connect(" in reference.read_text()


def grade_class(class_dir: Path, out: Path, cell_timeout: float = 300, model_url: str | None = None,
                progress: bool = True, *, sandbox: Sandbox | bool = True, notebook_timeout: float = 1800,
                grace: float = 10.0, server: ModelServer | None = None, workers: int = 1) -> list[dict[str, str]]:
    """Grade every ``*.ipynb`` in every learner folder of ``class_dir``; write ``out/grades.csv``
    (row by row, in the order of the learners and their notebooks, as each submission finishes)
    and ``out/summary.md``; return the rows.

    ``sandbox``: True finds the sandbox here (``Sandbox.detect()``, which raises
    ``SandboxUnavailable`` if it cannot run), False runs learners' code as you, unsandboxed
    (``--unsafe-trust-the-class``: both reports then start with ``UNSAFE``).
    ``server`` (default: one for ``model_url``, else started when needed) is stopped at the
    end only if this function made it.

    ``workers`` submissions are graded at once, each in a kernel of its own. In a sandbox, the
    kernels of each worker run as a user of their own (``Sandbox.sibling``), so more than one
    worker needs root: kernels that ran as you would share your limit on processes, and one
    learner's fork bomb would stop the others. Submissions whose notebook uses the model take
    turns with the server (``ModelServer.turn``); the others run beside them, since their
    kernels cannot reach it (a sandboxed kernel reaches only the server it was given a relay to).
    The rows are the same whatever the number of workers.
    """
    from course_grading.sandbox import Sandbox

    if workers < 1:
        raise ValueError(f"workers must be 1 or more, not {workers}")
    box = Sandbox.detect() if sandbox is True else sandbox or None
    if box is not None and workers > 1 and box.uid is None:
        raise ValueError(f"{workers} workers need a user of their own for each worker's kernels (grading as root): "
                         f"kernels that run as {box.who()} share one limit on processes, so one learner's fork "
                         "bomb would stop the others. Grade with one worker here.")
    boxes: list[Sandbox | None] = [None] * workers if box is None else [*_sibling_boxes(box, workers)]
    mode = box.describe() if box else UNSAFE
    if box is not None and workers > 1:
        mode += (f" {workers} submissions were graded at once, the kernels of each worker as a user of their own "
                 f"(uids {', '.join(str(one.uid) for one in boxes if one is not None)}).")
    if progress:
        print(f"Sandbox: {mode}", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, str]] = []
    own_server, server = server is None, server or ModelServer(model_url)
    try:
        with open(out / "grades.csv", "w", newline="") as file:
            if box is None:
                file.write(f'"{UNSAFE}"\n')
            writer = csv.DictWriter(file, FIELDS, quoting=csv.QUOTE_ALL)
            writer.writeheader()
            for learner, notebook, results in _graded(class_dir, server, boxes, cell_timeout, notebook_timeout,
                                                      grace, progress):
                for result in results:
                    row = {"learner": learner, "notebook": notebook,
                           "exercise": "" if result.exercise is None else str(result.exercise),
                           "status": result.status, "message": result.message, "note": result.note}
                    writer.writerow({key: cell_text(value) for key, value in row.items()})
                    rows.append(row)
                file.flush()
    finally:
        if own_server:
            server.close()
    (out / "summary.md").write_text((UNSAFE + "\n\n" if box is None else "") + summary(rows, mode))
    return rows


def _sibling_boxes(box: Sandbox, workers: int) -> list[Sandbox]:
    """``box`` and ``workers - 1`` siblings, each with a user of its own."""
    boxes = [box]
    while len(boxes) < workers:
        boxes.append(box.sibling(taken={one.uid for one in boxes if one.uid is not None}))
    return boxes


def _submissions(class_dir: Path) -> list[tuple[str, Path | None]]:
    """``(learner, notebook)`` for every notebook of every learner folder, in order; a learner
    folder that is a link is one ``(learner, None)``: it is not graded."""
    found: list[tuple[str, Path | None]] = []
    for learner in sorted(class_dir.iterdir()):
        if learner.is_symlink():
            found.append((learner.name, None))
        elif learner.is_dir():
            found += [(learner.name, notebook) for notebook in sorted(learner.glob("*.ipynb"))]
    return found


def _graded(class_dir: Path, server: ModelServer, boxes: list[Sandbox | None], cell_timeout: float,
            notebook_timeout: float, grace: float, progress: bool) -> Iterator[tuple[str, str, list[Result]]]:
    """``(learner, notebook, results)`` for every submission, in order, each as soon as it and the
    ones before it are graded: one thread per sandbox in ``boxes`` takes the next submission.
    The threads are daemons, as ``grading.execute``'s are: Ctrl-C stops the batch at once."""
    submissions = _submissions(class_dir)
    waiting = iter(enumerate(submissions))
    done: dict[int, tuple[str, str, list[Result]] | BaseException] = {}
    changed, stop = threading.Condition(), threading.Event()

    def work(box: Sandbox | None) -> None:
        while not stop.is_set():
            with changed:
                index, (learner, notebook) = next(waiting, (-1, ("", None)))
            if index < 0:
                return
            try:
                graded: tuple[str, str, list[Result]] | BaseException = \
                    _graded_one(learner, notebook, server, box, cell_timeout, notebook_timeout, grace, progress)
            except BaseException as problem:  # raised in the caller's thread, below
                graded = problem
            with changed:
                done[index] = graded
                changed.notify_all()

    for box in boxes:
        threading.Thread(target=work, args=(box,), name="grade", daemon=True).start()
    try:
        for index in range(len(submissions)):
            with changed:
                while index not in done:
                    changed.wait()
                graded = done.pop(index)
            if isinstance(graded, BaseException):
                raise graded
            yield graded
    finally:
        stop.set()  # the threads take no new submission


def _graded_one(learner: str, notebook: Path | None, server: ModelServer, box: Sandbox | None, cell_timeout: float,
                notebook_timeout: float, grace: float, progress: bool) -> tuple[str, str, list[Result]]:
    """One submission's ``(learner, notebook, results)``. One that uses the model has the server
    to itself (``server.turn``), checked before and after."""
    if notebook is None:
        return learner, "", [Result("", None, "", "error", "the learner's folder is a link: not graded")]
    started, model = time.monotonic(), uses_model(notebook)
    with server.turn if model else nullcontext():
        before = server.check("before") if model else ""
        try:
            results = grade(notebook, model_url=server.url_for(notebook), cell_timeout=cell_timeout, sandbox=box,
                            notebook_timeout=notebook_timeout, grace=grace, model=server.model)
        except Exception as problem:  # whatever it is, it is this submission's row, not the batch's end
            results = [Result(notebook.name, None, "", "error", f"{type(problem).__name__}: {problem}"[:500])]
        after = server.check("after") if model else ""
    for result in results:
        result.note = "; ".join(note for note in (result.note, before, after) if note)
    if progress:
        passed = sum(result.status == "passed" for result in results)
        print(printable(f"{learner}/{notebook.name}: {passed} of {len(results)} passed "
                        f"({time.monotonic() - started:.0f} s)"), file=sys.stderr, flush=True)
    return learner, notebook.name, results


# --------------------------------------------------------------------------------------
# A learner's text in the reports: never a formula, never Markdown.
# --------------------------------------------------------------------------------------

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` without control characters (a terminal escape in a folder name stays text)."""
    return CONTROL.sub("?", text)


def cell_text(text: str) -> str:
    """A CSV field a spreadsheet shows as text (OWASP's CSV injection advice): a field that
    starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'``
    (the csv writer quotes every field and doubles quotes)."""
    text = CONTROL.sub("?", text.replace("\r\n", "\n"))  # a carriage return becomes ?; tabs and newlines stay
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~&$])")  # Markdown's and HTML's; a bare address stays as written


def md(text: str, limit: int = 200) -> str:
    """``text`` as literal text in a Markdown table or list: one line, every character that
    Markdown or HTML could read escaped, at most ``limit`` characters."""
    line = " ".join(printable(text).split())
    line = line if len(line) <= limit else line[: limit - 1] + "…"
    return MARKDOWN.sub(r"\\\1", line)


def summary(rows: list[dict[str, str]], mode: str = "") -> str:
    """Markdown: which sandbox ran, learners × notebooks with exercises passed, each exercise's
    pass rate, then the notes (code to read, restarts). Every learner's text is escaped."""
    learners = sorted({row["learner"] for row in rows})
    notebooks = sorted({row["notebook"] for row in rows if row["notebook"] and (PUBLISHED / row["notebook"]).is_file()})
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
    lines = ["# Grades", ""] + ([f"Sandbox: {md(mode, 3000)}", ""] if mode else []) + \
        ["Exercises passed per learner and notebook (– no submission; error: not gradable).", "",
         "| learner | " + " | ".join(short) + " |", "| --- |" + " --- |" * len(notebooks)]
    lines += [f"| {md(learner)} | " + " | ".join(count(cell[learner, nb]) for nb in notebooks) + " |"
              for learner in learners]
    broken = {(row["learner"], row["notebook"]): (row["message"].splitlines() or [""])[0] for row in rows
              if row["status"] == "error" and (row["exercise"] == "" or row["message"].startswith("the setup"))}
    if broken:
        lines += ["", "Not graded:", ""]
        lines += [f"- {md(learner)}/{md(name)}: {md(why)}" for (learner, name), why in sorted(broken.items())]
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
    notes = {(row["learner"], row["notebook"], row["exercise"]): row["note"] for row in rows if row.get("note")}
    if notes:
        lines += ["", "Notes: code to read by hand, kernels and model servers restarted.", ""]
        lines += [f"- {md(learner)}/{md(name)}" + (f" exercise {exercise}" if exercise else "") + f": {md(note, 400)}"
                  for (learner, name, exercise), note in sorted(notes.items())]
    return "\n".join(lines) + "\n"


def titles_of(notebooks: list[str]) -> dict[tuple[str, int], str]:
    """Exercise titles from the published notebooks."""
    from course_grading.grading import sections

    titles = {}
    for name in notebooks:
        if (PUBLISHED / name).is_file():
            for part in sections(nbformat.read(PUBLISHED / name, as_version=4))[1:]:
                titles[name, part.number] = part.title
    return titles


def table(paths: list[Path], cell_timeout: float, language: str = "en") -> int:
    """Grade each notebook in place and print one row each as it finishes, in ``language`` (the
    report's words, ``REPORT_WORDS``); 0 if all passed."""
    from course_grading.grading import REPORT_WORDS, grader_said, width

    server, everything = ModelServer(), []
    words = REPORT_WORDS.get(language, REPORT_WORDS["en"])

    def right(text: str, columns: int) -> str:  # a wide character takes two columns
        return " " * max(columns - width(text), 0) + text

    print(f"{words['notebook']}{' ' * max(34 - width(words['notebook']), 0)} {right(words['passed'], 8)} "
          f"{right(words['failed'], 7)} {right(words['not attempted'], 14)}", flush=True)
    try:
        for path in paths:
            results = grade(path, model_url=server.url_for(path), cell_timeout=cell_timeout)
            everything += results
            if results and results[0].exercise is None:
                print(f"{path.name:34} {words['error']}: {grader_said(results[0].message, language)}", flush=True)
                continue
            tally = {status: sum(result.status == status for result in results) for status in COUNTED}
            count = words["tally"].format(passed=tally["passed"], total=len(results))
            print(f"{path.name:34} {count} {tally['failed']:>7} {tally['not attempted']:>14}", flush=True)
    finally:
        server.close()
    exercises = [result for result in everything if result.exercise is not None]
    passed = sum(result.status == "passed" for result in exercises)
    print(words["summary"].format(passed=passed, total=len(exercises)))
    return 0 if everything and all(result.status == "passed" for result in everything) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 course.py grade", description=__doc__.split("\n")[0])
    parser.add_argument("notebook", nargs="?", type=Path,
                        help="an exercise notebook; none: every notebook in exercises/ (exercises/ja/ with --lang ja)")
    parser.add_argument("--lang", choices=("en", *EDITIONS), default=None,
                        help="the edition graded when no notebook is named, and the table's language "
                             "(default: COURSE_LANG, which `course.py lab --lang ja` sets, else en)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show nbval's full per-cell output instead")
    parser.add_argument("--class", dest="class_dir", type=Path, help="a folder with one subfolder per learner")
    parser.add_argument("--out", type=Path, default=Path("grades"), help="where grades.csv and summary.md go")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a cell may run (default 300)")
    parser.add_argument("--notebook-timeout", type=float, default=1800,
                        help="with --class: seconds a whole notebook may run (default 1800)")
    parser.add_argument("--grace", type=float, default=10,
                        help="with --class: seconds a stopped cell has to answer the interrupt before its kernel "
                             "is killed (default 10)")
    parser.add_argument("--sandbox-uid", type=int, help="with --class, as root: the user the kernels run as "
                        "(default: one from 60000 to 64999 with no account and no process)")
    parser.add_argument("--workers", type=int, default=1,
                        help="with --class: submissions graded at once (default 1; more than 1 in a sandbox needs "
                             "root, for a user of their own per worker)")
    parser.add_argument("--unsafe-trust-the-class", action="store_true",
                        help="with --class: where the sandbox cannot run, run the learners' code as you, unsandboxed "
                             "(only for code you trust; every report's first line says UNSAFE)")
    args = parser.parse_args(argv)
    if args.class_dir:
        from course_grading.sandbox import Sandbox, SandboxUnavailable

        try:
            box: Sandbox | bool = Sandbox.detect(uid=args.sandbox_uid)
        except SandboxUnavailable as problem:
            if not args.unsafe_trust_the_class:
                print(f"Not graded: {problem}\nNo submission was run.", file=sys.stderr)
                return 2
            print(f"{UNSAFE}\n({problem})", file=sys.stderr)
            box = False
        try:
            rows = grade_class(args.class_dir, args.out, args.timeout, sandbox=box,
                               notebook_timeout=args.notebook_timeout, grace=args.grace, workers=args.workers)
        except ValueError as problem:
            print(f"{problem}\nNo submission was run.", file=sys.stderr)
            return 2
        print(f"wrote {args.out / 'grades.csv'} ({len(rows)} rows) and {args.out / 'summary.md'}")
        return 0  # the batch ran; how each learner did is in the files
    if args.verbose:
        target = [str(args.notebook)] if args.notebook else [str(PUBLISHED)]
        return subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *target]).returncode
    if args.notebook is None:
        language = args.lang or course_language()
        folder = PUBLISHED if language == "en" else PUBLISHED / language
        return table(sorted(folder.glob("*.ipynb")), args.timeout, language)
    server = ModelServer()
    try:
        results = grade(args.notebook, model_url=server.url_for(args.notebook), cell_timeout=args.timeout)
    finally:
        server.close()
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    print(format_report(results, colour))
    return 0 if results and all(result.status == "passed" for result in results) else 1
