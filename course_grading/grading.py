"""The grading of an exercise notebook: which exercises pass, fail, or were not attempted.

``report("01_the_wire.ipynb")`` grades a saved notebook, one line per exercise, as
``python3 course.py grade`` does; ``grade`` returns the same as ``Result`` objects
(``course_grading.gradebook`` grades a whole class with it, each submission in a sandbox from
``course_grading.sandbox``). The checks that check cells call (``check``, ``check_equal``,
``check_close``, ``uses_reference``, ``submit``, ``quietly``) are in ``course_lib.checks`` and
imported from here. The verdict is decided here, in the grader's process, from the answers a
check cell sends (``check_outcome``), never by the learner's kernel.

A notebook of a translated edition (``exercises/ja/``, whose metadata says
``"course": {"language": "ja"}``) is graded against the published notebook of its edition, and
its report is in its language: the line per exercise, the checks' messages
(``translations/ja/checks.md``, with which the grader runs the judges) and the summary.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from course_grading.exercises import STUB_MESSAGES
from course_lib.check_messages import translations
from course_lib.checks import ANSWERS, ANSWERS_LIMIT, judging, unplain
from course_lib.checks import CheckFailed as CheckFailed
from course_lib.checks import check as check
from course_lib.checks import check_close as check_close
from course_lib.checks import check_equal as check_equal
from course_lib.checks import quietly as quietly
from course_lib.checks import submit as submit
from course_lib.checks import uses_reference as uses_reference

if TYPE_CHECKING:
    from course_grading.sandbox import Sandbox

# --------------------------------------------------------------------------------------
# Grading a whole notebook: which exercises pass, which fail, which were not attempted.
#
# A notebook is executed top to bottom in a fresh kernel (nbclient, errors allowed, a time
# limit per cell and per notebook), then each exercise is judged from its own cells:
#
#   no error in the exercise's cells, every check passed      -> passed
#   the stub's NotImplementedError (the solution is absent)   -> not attempted
#   CheckFailed from a check                                  -> failed, with the check's message
#   any other error                                           -> failed, with its type and text
#   a cell stopped at a time limit, a dead kernel, no result  -> error
#
# Which cells belong to which exercise comes from the published notebook (exercises/):
# the cells after a "## Exercise N · Title" heading, up to the next one, are exercise N;
# the cells before the first heading are the setup. Notebook 11 has "## Step N" headings
# instead: its steps build one thing, so together they are one exercise. A translated
# notebook's headings are found by their cell ids, which are the English headings' ids
# (exercises/ja/ is built from exercises/, cell by cell), and titled in its own words.
#
# Verdicts outside the learner's process. The learner's cells run in the kernel before the
# checks, so they can rebind anything there, patch any module (json, hmac), read any frame,
# rewrite the outputs. So the kernel decides nothing: a check cell computes *answers*, plain
# data (its learner functions' outputs on its inputs), and sends them as one display output
# (course_lib.checks.submit); the grader reads only that, bounded, and runs the published
# cell's `judge` on it in its own process (`check_outcome`), with its own copy of the checks.
# The judge's text is the published notebook's (exercises/), never the submission's. A
# forgery can only send answers, and a pass needs the right ones: as many as writing them.
# A check cell without a judge never passes: nothing the kernel says about it counts.
#
# Isolation is the sandbox's (course_grading.sandbox: bubblewrap), not this module's.
# --------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "exercises"  # the check cells that count are these, never a submission's copy
STUB_ERRORS = frozenset(("NotImplementedError", message) for message in STUB_MESSAGES.values())
"""What an exercise's stub raises, in any edition: its cell was not attempted."""
# Both read a learner's text in the grader: no lazy group before a trailing ``\s*$`` (it backtracks
# quadratically on a line of spaces), and only a line's first LINE_CHARS characters (``first_line``).
HEADING = re.compile(r"^##\s+(Exercise|Step)\s+(\d+)\s*·\s*(\S.*)$")
NOTEBOOK_TITLE = re.compile(r"^#\s+Exercises?\s*·\s*Lesson\s+\d+,\s*(\S.*)$")
LINE_CHARS = 300
EDITIONS = ("ja",)  # the translated editions a notebook may say it belongs to (exercises/<edition>/)


def language_of(notebook: dict) -> str:
    """The language a notebook (its JSON, or an ``nbformat`` node) says it is written in; ``en``
    for the English ones, which say nothing."""
    marks = notebook.get("metadata", {}).get("course", {})
    language = marks.get("language") if isinstance(marks, dict) else None
    return language if isinstance(language, str) and language else "en"



def first_line(source: str) -> str:
    """A cell's first line as the grader reads it: cut to ``LINE_CHARS`` characters, trailing
    blanks dropped."""
    return (source.splitlines() or [""])[0][:LINE_CHARS].rstrip()


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


def headings_of(english: Any) -> dict[str, tuple[str, int]]:
    """The heading cells of an English notebook by cell id: ``("Exercise", 2)``, ``("Step", 1)``."""
    found = {}
    for cell in english.cells:
        heading = HEADING.match(first_line(cell.source)) if cell.cell_type == "markdown" else None
        if heading and cell.get("id"):
            found[cell.id] = (heading.group(1), int(heading.group(2)))
    return found


def _after(line: str, separators: str) -> str:
    """The text of a heading ``line`` after the first of ``separators`` in it (else the whole
    line without its ``#``): a translated heading's title."""
    place = min((line.index(mark) for mark in separators if mark in line), default=None)
    return (line[place + 1:] if place is not None else line.lstrip("#")).strip()


def sections(notebook: Any, english: Any = None) -> list[Section]:
    """Split a notebook into its setup and its exercises, by the ``##`` headings.

    A ``## Step N`` heading continues the current exercise; before any exercise it starts
    exercise 1, titled after the notebook's own ``# Exercise · Lesson NN, title`` line.
    A translated notebook passes the ``english`` notebook it was built from: the cells that
    hold its headings (same ids) are the headings, each titled after its ``·``.
    """
    headings = headings_of(english) if english is not None else {}
    title_line = first_line(notebook.cells[0].source) if notebook.cells else ""
    lesson_title = NOTEBOOK_TITLE.match(title_line)
    title_of_lesson = _after(title_line, ",、") if english is not None else \
        lesson_title.group(1) if lesson_title else ""
    parts = [Section(0, "setup")]
    for cell in notebook.cells:
        line = first_line(cell.source)
        heading: tuple[str, int, str] | None = None
        if cell.cell_type == "markdown" and cell.get("id") in headings:
            kind, number = headings[cell.id]  # titled after its heading line (a notice may come first)
            heading = (kind, number, _after(next((text[:LINE_CHARS] for text in cell.source.splitlines()
                                                  if text.startswith("#")), line), "·"))
        elif cell.cell_type == "markdown" and (found := HEADING.match(line)):
            heading = (found.group(1), int(found.group(2)), found.group(3))
        if heading and heading[0] == "Exercise":
            parts.append(Section(heading[1], heading[2]))
        elif heading and len(parts) == 1:  # a "Step" heading opens the notebook's one exercise
            title = title_of_lesson or heading[2]
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
    note: str = ""  # for the instructor: code to read by hand, what happened around the run
    language: str = "en"  # the notebook's edition: the language its report is written in

    @property
    def label(self) -> str:
        words = REPORT_WORDS.get(self.language, REPORT_WORDS["en"])
        return words["exercise"].format(number=self.exercise, title=self.title) if self.exercise is not None \
            else self.notebook


REPORT_WORDS = {  # the report's own words, in each edition's language
    "en": {"exercise": "Exercise {number} · {title}", "passed": "passed", "failed": "failed",
           "not attempted": "not attempted", "error": "error", "summary": "{passed} of {total} exercises passed",
           "notebook": "notebook", "tally": "{passed:>3} of {total:<2}"},  # the last two: the gradebook's table
    "ja": {"exercise": "演習 {number} · {title}", "passed": "合格", "failed": "不合格", "not attempted": "未着手",
           "error": "エラー", "summary": "{total} 問中 {passed} 問が合格",
           "notebook": "ノートブック", "tally": "{total:>2} 問中 {passed:<2}"},
}
GRADER_SAYS: dict[str, list[tuple[re.Pattern[str], str]]] = {  # the grader's own words, in each edition's language
    "ja": [(re.compile(pattern), words) for pattern, words in [
        (r"the setup cell failed: ", "セットアップのセルが失敗しました: "),
        (r" \(in your code\)", " (あなたのコードで)"),
        (r"this exercise has no check cell", "この演習にはチェックのセルがありません"),
        (r"the kernel died in this cell \(it ran out of memory, crashed, or exited\)",
         "このセルでカーネルが止まりました (メモリ不足、クラッシュ、または終了)"),
        (r"the notebook ran longer than (\d+) s in all and was stopped in this cell",
         r"ノートブック全体の実行が \1 秒を超えたので、このセルで止めました"),
        (r"the notebook ran longer than (\d+) s in all and was stopped before this exercise",
         r"ノートブック全体の実行が \1 秒を超えたので、この演習の前で止めました"),
        (r"a cell ran longer than (\d+) s and was stopped \(an endless loop\?\)",
         r"セルの実行が \1 秒を超えたので止めました (無限ループかもしれません)"),
        (r"; it did not answer the interrupt, so its kernel was killed",
         "。割り込みに応答しなかったので、カーネルを強制終了しました"),
        (r"the kernel died \(or stopped\) before this exercise's cells ran",
         "この演習のセルが実行される前に、カーネルが止まりました"),
        (r"the check sent no answers the grader could read: something in the notebook suppressed, replaced "
         r"or repeated them", "チェックから、採点で読める答えが届きませんでした: ノートブックの中の何かが、"
                              "答えを抑えたか、置き換えたか、繰り返しました"),
        (r"the kernel was restarted and the setup failed there: ",
         "カーネルを再起動しましたが、そこでセットアップが失敗しました: "),
        (r"the kernel did not start: ", "カーネルが起動しませんでした: "),
        (r"^could not run: ", "実行できませんでした: "),
        (r"^not graded: ", "採点していません: "),
    ]],
}



def submission(learner: Any, published: Any, english: Any = None) -> Any:
    """The notebook that is graded: the learner's code cells with the published check cells.

    Section by section (matched by exercise number), the learner's code cells are kept in
    their order, except their check cells: the published checks of that section take the
    place of the first one (or go last, if the learner deleted them). Every cell is tagged
    ``metadata.grading = {"section": n, "check": bool}`` so that results can be read back.
    ``english``: for a translated notebook, the English one (see ``sections``).
    """
    import nbformat

    mine = {part.number: part for part in sections(learner, english)}
    graded = nbformat.v4.new_notebook(metadata=published.metadata)
    for part in sections(published, english):
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


# --------------------------------------------------------------------------------------
# Verdicts: the grader judges the answers a check cell sent, in its own process.
# --------------------------------------------------------------------------------------

CHECK_NAMES = ("CheckFailed", "check", "check_equal", "check_close", "uses_reference", "submit", "quietly")
TEXT_LIMIT = 2000  # characters of an error's or a check's text kept for a row
OUTPUT_LIMIT = 2_000_000  # characters of output kept per cell, of every kind (the rest is dropped, not held)
OUTPUTS_LIMIT = 500  # outputs kept per cell


def judge_of(source: str) -> Callable[[Any], None] | None:
    """The ``judge`` function a published check cell defines (``course_lib.checks.submit``),
    compiled here from the cell's text alone, with the checks in its globals; None if it has none."""
    import builtins

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "judge"]
    if not found:
        return None
    scope: dict[str, Any] = {"__builtins__": builtins, "CheckFailed": CheckFailed, "check": check,
                             "check_equal": check_equal, "check_close": check_close}
    body: list[ast.stmt] = [*found]
    exec(compile(ast.Module(body=body, type_ignores=[]), "<published judge>", "exec"), scope)
    judge: Callable[[Any], None] = scope["judge"]
    return judge


def _text(value: Any) -> str:
    return str(value)[:TEXT_LIMIT]


def check_outcome(cell: Any, language: str = "en",
                  messages: dict[str, str] | None = None) -> tuple[str, str, str] | None:
    """``(status, ename, evalue)`` of a check cell (``passed``, ``failed`` or ``raised``), judged here
    from the answers it sent; None when it sent none the grader can use.

    The kernel's one ``ANSWERS`` output is the only thing read, and the published cell's ``judge``
    runs on it here. A published cell without a judge never passes: the error it raised, if any,
    else None (the grader has nothing to judge)."""
    records = [output.data[ANSWERS] for output in cell.get("outputs", [])
               if output.output_type == "display_data" and ANSWERS in output.get("data", {})]
    failure = error_of(cell)
    judge = judge_of(cell.source)
    if judge is None or not records:
        return ("raised", *failure) if failure else None
    if len(records) > 1 or any(not isinstance(one, dict) or set(one) != {"answers"} for one in records):
        return None
    with judging(language, messages or {}):
        try:
            answers = unplain(records[0]["answers"])
        except (ValueError, TypeError, RecursionError) as problem:
            return "raised", "ValueError", f"the answers could not be read: {_text(problem)}"
        return _judged(judge, answers)


def _judged(judge: Callable[[Any], None], answers: Any) -> tuple[str, str, str]:
    try:
        judge(answers)
    except CheckFailed as problem:
        return "failed", "CheckFailed", _text(problem)
    except Exception as problem:  # the answers were not what the judge reads: a failure, with what it met
        return "raised", type(problem).__name__, _text(problem)
    return "passed", "", ""


# --------------------------------------------------------------------------------------
# Running a notebook: every cell has a deadline, and so has the notebook.
# --------------------------------------------------------------------------------------

def _client_class() -> Any:
    """nbclient's ``NotebookClient``, keeping at most ``OUTPUT_LIMIT`` characters and
    ``OUTPUTS_LIMIT`` outputs per cell, of every kind: an error's text is cut to ``TEXT_LIMIT``,
    answers longer than ``ANSWERS_LIMIT`` are dropped, and nothing past the limits is kept."""
    import nbformat
    from nbclient import NotebookClient

    class Client(NotebookClient):
        spent = 0
        count = 0

        def output(self, outs: list[Any], msg: dict[str, Any], display_id: str | None, cell_index: int) -> Any:
            content = msg.get("content", {})
            if msg["msg_type"] == "error":
                content = msg["content"] = {"ename": _text(content.get("ename", "")),
                                            "evalue": _text(content.get("evalue", "")), "traceback": []}
            size = len(json.dumps(content, default=str))
            if msg["msg_type"] == "display_data" and ANSWERS in content.get("data", {}) and size > ANSWERS_LIMIT:
                content["data"] = {"text/plain": f"[grading: answers longer than {ANSWERS_LIMIT:,} characters]"}
                size = 100
            before, self.spent, self.count = self.spent, self.spent + size, self.count + 1
            if self.spent > OUTPUT_LIMIT or self.count > OUTPUTS_LIMIT:
                if before <= OUTPUT_LIMIT and self.count <= OUTPUTS_LIMIT + 1:
                    outs.append(nbformat.v4.new_output("stream", name="stderr", text="[grading: output cut here]\n"))
                    self.spent, self.count = OUTPUT_LIMIT + 1, OUTPUTS_LIMIT + 2
                if msg["msg_type"] == "error":  # an error is kept, short, whatever came before it
                    return super().output(outs, msg, display_id, cell_index)
                return None
            return super().output(outs, msg, display_id, cell_index)

    return Client


async def _run_cell(client: Any, cell: Any, budget: float, grace: float, store_history: bool = True) -> str:
    """Run one cell: ``done``, ``interrupted`` (stopped at ``budget``, it answered the interrupt),
    ``killed`` (it did not, ``grace`` seconds later: the kernel and its processes were killed),
    or ``died`` (the kernel ended by itself)."""
    from nbclient.exceptions import DeadKernelError

    client.spent = client.count = 0
    task = asyncio.ensure_future(client.async_execute_cell(cell, 0, store_history=store_history))
    done, _ = await asyncio.wait({task}, timeout=max(budget, 0.1))
    stopped = not done
    if stopped:
        try:
            await client.km.interrupt_kernel()
        except Exception:  # a kernel that is gone cannot be interrupted; the wait below sees it
            pass
        done, _ = await asyncio.wait({task}, timeout=grace)
    if done:
        try:
            task.result()
        except DeadKernelError:
            return "died"
        return "interrupted" if stopped else "done"
    try:
        await asyncio.wait_for(client.km.shutdown_kernel(now=True), timeout=30)
    except Exception:  # the kernel may be gone already; whatever is left, its process group goes
        pgid = getattr(getattr(client.km, "provisioner", None), "pgid", None)
        if pgid:
            try:
                os.killpg(pgid, 9)
            except OSError:
                pass
    leftovers = [task] + [other for other in asyncio.all_tasks() if other is not asyncio.current_task()
                          and getattr(other.get_coro(), "__qualname__", "").startswith("NotebookClient._async_poll")]
    for other in leftovers:  # nbclient's pollers of the killed cell, which would outlive its client
        other.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)
    return "killed"


def _not_run(cells: list[Any], reason: str) -> None:
    for cell in cells:
        cell.metadata.setdefault("not_run", reason)


async def _execute(notebook: Any, folder: Path, cell_timeout: float, env: dict[str, str] | None,
                   notebook_timeout: float | None, grace: float, manager: Callable[[], Any] | None) -> list[str]:
    import nbformat

    client_class = _client_class()
    quiet = logging.getLogger("course_grading.grading.nbclient")  # a timeout is reported per exercise, not logged
    quiet.setLevel(logging.CRITICAL)
    deadline = time.monotonic() + (notebook_timeout if notebook_timeout is not None else float("inf"))
    cells, starts, index = notebook.cells, 0, 0
    notes: list[str] = []
    setup = [cell for cell in cells if cell.metadata["grading"]["section"] == 0]
    not_attempted: set[int] = set()  # sections whose own code raised the stub's error
    while index < len(cells):
        starts += 1
        holder = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])  # cells run as its cell 0
        km = manager() if manager else None  # a sandbox's: a new scratch folder and home for every start
        here = str(getattr(km, "folder", folder))
        client = client_class(holder, km=km, timeout=None, allow_errors=True, kernel_name="python3",
                              resources={"metadata": {"path": here}}, log=quiet, shutdown_kernel="immediate",
                              startup_timeout=120)
        try:
            started_env = {**getattr(km, "environment", {}), **(env or {})}  # a sandbox's own, then the grader's
            async with client.async_setup_kernel(env=started_env, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL, cwd=here,
                                                 cleanup_kc=True):  # the kernel ends with the block, ours or not
                if starts > 1:  # a new kernel after a killed one: the setup again, then the next exercise
                    for cell in setup:
                        again = nbformat.v4.new_code_cell(cell.source)
                        budget = min(cell_timeout, max(deadline - time.monotonic(), 0.1))
                        if await _run_cell(client, again, budget, grace) != "done" or error_of(again):
                            _not_run(cells[index:], "the kernel was restarted and the setup failed there: "
                                     + "{}: {}".format(*(error_of(again) or ("stopped", "it did not finish"))))
                            return notes
                while index < len(cells):
                    cell, tag = cells[index], cells[index].metadata["grading"]
                    left = deadline - time.monotonic()
                    if left <= 0:
                        _not_run(cells[index:], f"the notebook ran longer than {notebook_timeout:.0f} s in all "
                                 "and was stopped before this exercise")
                        return notes
                    if tag["check"] and tag["section"] in not_attempted:
                        index += 1
                        continue  # its checks could only fail, and some would spend minutes on the model first
                    runnable = nbformat.v4.new_code_cell(cell.source)  # a copy runs; the grader keeps its own text
                    by_notebook = left < cell_timeout
                    outcome = await _run_cell(client, runnable, min(cell_timeout, left), grace)
                    cell.outputs, cell.execution_count = runnable.outputs, runnable.execution_count
                    index += 1
                    if outcome != "done":
                        cell.metadata["stopped"] = {"how": outcome, "by": "notebook" if by_notebook else "cell"}
                    if not tag["check"] and error_of(cell) in STUB_ERRORS:
                        not_attempted.add(tag["section"])
                    if outcome != "done" and by_notebook:
                        _not_run(cells[index:], f"the notebook ran longer than {notebook_timeout:.0f} s in all "
                                 "and was stopped before this exercise")
                        return notes
                    if outcome in ("killed", "died"):
                        if tag["section"] == 0:
                            return notes  # no setup, nothing else can run
                        while index < len(cells) and cells[index].metadata["grading"]["section"] == tag["section"]:
                            index += 1
                        if index < len(cells):
                            notes.append(f"the kernel was {'killed' if outcome == 'killed' else 'lost'} in "
                                         f"exercise {tag['section']}; a new kernel ran the setup again for the rest")
                        break
        except Exception as problem:  # the kernel did not start (or its client could not connect)
            _not_run(cells[index:], f"the kernel did not start: {type(problem).__name__}: {problem}"[:500])
            return notes
    return notes


def execute(notebook: Any, folder: Path, cell_timeout: float, env: dict[str, str] | None = None, *,
            notebook_timeout: float | None = None, grace: float = 10.0,
            manager: Callable[[], Any] | None = None) -> list[str]:
    """Run every code cell of a ``submission`` notebook in a fresh kernel whose working folder
    is ``folder``; return notes on what happened besides the cells' own outputs.

    Errors do not stop the run (each exercise is judged on its own), but the checks of an
    exercise whose own code cell raised the stub's error are skipped. A cell that runs longer
    than ``cell_timeout`` seconds (or past the notebook's ``notebook_timeout``) is
    interrupted; if it is still running ``grace`` seconds later (it ignores SIGINT, or is
    stuck in C code such as a regular expression), its kernel and every process the kernel
    started are killed, and a new kernel runs the setup again and goes on with the next
    exercise. The cell is marked ``metadata.stopped``. ``manager`` makes the kernel manager of
    each kernel (``course_grading.sandbox``'s, for a class).
    """
    result: dict[str, Any] = {}

    def run() -> None:  # in a thread of its own, with an event loop of its own (JupyterLab has one running)
        try:
            result["notes"] = asyncio.run(_execute(notebook, folder, cell_timeout, env, notebook_timeout, grace,
                                                   manager))
        except BaseException as problem:  # handed to the caller below
            result["error"] = problem

    worker = threading.Thread(target=run, name="grading", daemon=True)
    worker.start()
    worker.join()
    if "error" in result:
        raise result["error"]
    return list(result["notes"])


def error_of(cell: Any) -> tuple[str, str] | None:
    """``(ename, evalue)`` of the cell's error output, if it raised."""
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            return str(output.ename)[:TEXT_LIMIT], str(output.evalue)[:TEXT_LIMIT]
    return None


# --------------------------------------------------------------------------------------
# Judging the executed notebook.
# --------------------------------------------------------------------------------------

def judge(graded: Any, published: Any, name: str, cell_timeout: float, notebook_timeout: float | None = None,
          english: Any = None, messages: dict[str, str] | None = None) -> list[Result]:
    """Read each exercise's status from an executed ``submission`` notebook (``english``: see
    ``sections``), its checks judged in the notebook's language with the catalogue ``messages``."""
    parts = sections(published, english)[1:]
    by_section: dict[int, list[Any]] = {}
    for cell in graded.cells:
        by_section.setdefault(cell.metadata["grading"]["section"], []).append(cell)
    setup_failure = None
    for cell in by_section.get(0, []):
        failure = error_of(cell)
        if failure or cell.metadata.get("stopped") or cell.metadata.get("not_run"):
            setup_failure = "{}: {}".format(*failure) if failure else verdict([cell], cell_timeout, notebook_timeout)[1]
            break
    results, language = [], language_of(published)
    for part in parts:
        status, message = verdict(by_section.get(part.number, []), cell_timeout, notebook_timeout, language, messages)
        if setup_failure:
            status, message = "error", f"the setup cell failed: {setup_failure}"
        results.append(Result(name, part.number, part.title, status, message, language=language_of(published)))
    return results


def stop_message(stopped: dict[str, str], cell_timeout: float, notebook_timeout: float | None) -> str:
    """Why a cell was stopped, for a row."""
    if stopped["how"] == "died":
        return "the kernel died in this cell (it ran out of memory, crashed, or exited)"
    if stopped["by"] == "notebook":
        message = f"the notebook ran longer than {notebook_timeout or 0:.0f} s in all and was stopped in this cell"
    else:
        message = f"a cell ran longer than {cell_timeout:.0f} s and was stopped (an endless loop?)"
    if stopped["how"] == "killed":
        message += "; it did not answer the interrupt, so its kernel was killed"
    return message


def verdict(cells: list[Any], cell_timeout: float, notebook_timeout: float | None = None, language: str = "en",
            messages: dict[str, str] | None = None) -> tuple[str, str]:
    """The status and message of one exercise, from the first of its cells that went wrong; its
    checks judged here (``check_outcome``) in ``language``, with the catalogue ``messages``."""
    several_checks = sum(cell.metadata["grading"]["check"] for cell in cells) > 1
    for cell in cells:
        label = cell.source.splitlines()[0].removeprefix("# CHECK").split(":")[0].strip() if cell.source else ""
        where = f"({label}) " if several_checks and cell.metadata["grading"]["check"] else ""
        if cell.metadata.get("stopped"):
            return "error", stop_message(cell.metadata["stopped"], cell_timeout, notebook_timeout)
        if cell.metadata.get("not_run"):
            return "error", cell.metadata["not_run"]
        if cell.get("execution_count") is None:
            return "error", "the kernel died (or stopped) before this exercise's cells ran"
        if cell.metadata["grading"]["check"]:
            outcome = check_outcome(cell, language, messages)
            if outcome is None:
                return "error", (f"{where}the check sent no answers the grader could read: something in the "
                                 "notebook suppressed, replaced or repeated them")
            status, ename, evalue = outcome
            if status == "passed":
                continue
            if (ename, evalue) in STUB_ERRORS:
                return "not attempted", ""
            return "failed", where + (evalue if status == "failed" else f"{ename}: {evalue}")
        failure = error_of(cell)
        if failure is None:
            continue
        ename, evalue = failure
        if (ename, evalue) in STUB_ERRORS:
            return "not attempted", ""
        return "failed", f"{ename}: {evalue} (in your code)"
    if not any(cell.metadata["grading"]["check"] for cell in cells):
        return "error", "this exercise has no check cell"
    return "passed", ""


# Code that reaches into the interpreter or the grading: flagged for the instructor, never graded.
SUSPICIOUS_NAMES = {
    "sys.modules": "replaces modules (sys.modules)", "builtins": "changes builtins", "__builtins__": "changes builtins",
    "get_ipython": "changes the kernel (get_ipython)", "ctypes": "uses ctypes", "gc": "walks the garbage collector",
    "settrace": "traces execution", "setprofile": "traces execution", "_getframe": "reads stack frames",
    "__closure__": "reads closures", "__code__": "rewrites code objects", "__globals__": "reads globals",
    "_course_grading": "touches the grader's harness", "course_lib.checks": "touches the checks module",
    "course_grading.grading": "touches the grading module", "inspect": "uses inspect", "importlib": "uses importlib",
    "signal": "handles signals", "fork": "forks processes", "kill": "kills processes",
    "globals": "changes globals()", "linecache": "reads the kernel's source cache",
}
TEXT_AS_CODE = {"exec": "runs text as code (exec)", "eval": "runs text as code (eval)",
                "compile": "compiles text as code", "__import__": "imports a name made as text"}  # bare names only


def review_notes(cells: list[Any]) -> list[str]:
    """What in a learner's code cells deserves a look by hand: rebinding the checks, reaching
    into the interpreter or the grader, signals and processes (sorted, without repeats)."""
    found: set[str] = set()
    for cell in cells:
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # the learner's mistake, shown by the run itself
            continue
        except (RecursionError, MemoryError, ValueError):  # too deep or too odd to read: worth a look
            found.add("code the grader could not read")
            continue
        for node in ast.walk(tree):
            bound = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bound = [target.id if isinstance(target, ast.Name) else
                         target.attr if isinstance(target, ast.Attribute) else "" for target in targets]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound = [node.name]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound = [alias.asname or "" for alias in node.names]
                modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                    [] if {alias.name for alias in node.names} <= {*CHECK_NAMES, "report"} else [node.module or ""]
                found |= {why for module in modules for name, why in SUSPICIOUS_NAMES.items()
                          if module == name or module.startswith(name + ".")}
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
                bound = [keyword.arg or "" for keyword in node.keywords]  # globals().update(check=...)
            if set(bound) & set(CHECK_NAMES):
                found.add("rebinds a check function")
            if isinstance(node, ast.Attribute):
                dotted = _dotted(node)
                found |= {why for name, why in SUSPICIOUS_NAMES.items() if dotted == name or dotted.endswith("." + name)
                          or name == node.attr}
            elif isinstance(node, ast.Name) and node.id in SUSPICIOUS_NAMES and node.id not in ("signal", "kill"):
                found.add(SUSPICIOUS_NAMES[node.id])
            elif isinstance(node, ast.Name) and node.id in TEXT_AS_CODE:  # not re.compile: a bare name
                found.add(TEXT_AS_CODE[node.id])
    return sorted(found)


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


# --------------------------------------------------------------------------------------
# Grading a file.
# --------------------------------------------------------------------------------------

NOTEBOOK_SIZE_LIMIT = 16 * 2**20  # bytes: a submission larger than this is not read


def copy_notebook(source: Path, target: Path) -> str | None:
    """Copy a submitted notebook if it is a regular file of at most ``NOTEBOOK_SIZE_LIMIT``
    bytes (never through a link); else return why not."""
    try:
        descriptor = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as problem:
        return "a link, not a notebook file" if os.path.islink(source) else f"not readable: {problem.strerror}"
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):
            return "not a regular file"
        if status.st_size > NOTEBOOK_SIZE_LIMIT:
            return f"larger than {NOTEBOOK_SIZE_LIMIT // 2**20} MiB"
        target.write_bytes(file.read(NOTEBOOK_SIZE_LIMIT + 1))
    return None


def grade(path: Path, folder: Path | None = None, model_url: str | None = None, cell_timeout: float = 300,
          published: Path = PUBLISHED, *, sandbox: Sandbox | None = None, notebook_timeout: float | None = None,
          grace: float = 10.0, model: str | None = None) -> list[Result]:
    """Grade one notebook file: one ``Result`` per exercise, or one ``error`` Result.

    Without ``sandbox`` (a learner grading their own work), the kernel runs in ``folder``
    (default: the notebook's own; notebooks read ``../data/...``, so it should sit next to a
    ``data`` folder) with this process's environment. With one (a class), the notebook is
    copied alone into a scratch folder and its kernel runs locked down there
    (``course_grading.sandbox``). ``model_url`` is a running model server for the kernel's
    ``connect()`` (serving ``model``); without one, ``connect()`` finds or starts its own.
    A notebook of a translated edition (its metadata says so) is graded against the published
    notebook of that edition (``exercises/ja/``), with ``COURSE_LANG`` set for its kernel.
    """
    path = Path(path)
    reference = published / path.name
    if not reference.exists():
        return [Result(path.name, None, "", "error", f"not one of the course's notebooks (no exercises/{path.name})")]
    if sandbox is None:
        env = {key: value for key, value in os.environ.items() if key != "JPY_SESSION_NAME"}
        if model_url:
            env["OLLAMA_HOST"] = model_url
            env.pop("COURSE_EMBEDDED", None)
        return _grade_file(path, path.name, reference, folder or path.parent, env, None, cell_timeout,
                           notebook_timeout, grace)
    from course_grading.sandbox import Started

    private = Path(tempfile.mkdtemp(prefix="submission-"))  # the grader's own copy, read by the grader alone
    started: list[Started] = []
    try:
        copy = private / path.name
        refused = copy_notebook(path, copy)
        if refused:
            return [Result(path.name, None, "", "error", f"not graded: {refused}")]
        return _grade_file(copy, path.name, reference, copy.parent, {},
                           lambda: sandbox.kernel_manager(copy, model_url, model, started), cell_timeout,
                           notebook_timeout, grace)
    finally:
        for one in started:
            one.close()
        shutil.rmtree(private, ignore_errors=True)


def _grade_file(path: Path, name: str, reference: Path, folder: Path, env: dict[str, str],
                manager: Callable[[], Any] | None, cell_timeout: float, notebook_timeout: float | None,
                grace: float) -> list[Result]:
    import nbformat

    try:
        learner = nbformat.read(path, as_version=4)
    except Exception as problem:  # invalid JSON, not a notebook, unreadable: nbformat raises many kinds
        message = f"not a readable notebook: {type(problem).__name__}: {problem}"
        return [Result(name, None, "", "error", message[:300])]
    language, english = language_of(learner), None
    if language not in ("en", *EDITIONS):  # the learner's metadata names it: never a path to follow
        return [Result(name, None, "", "error", f"the notebook says it is in the language {language[:40]!r}, which "
                       f"the course has no edition of ({', '.join(('en', *EDITIONS))})")]
    if language != "en":  # a translated edition's notebook: its published notebook is that edition's
        english, reference = nbformat.read(reference, as_version=4), reference.parent / language / reference.name
        if not reference.is_file():
            return [Result(name, None, "", "error", f"no exercises/{language}/{name}: build the edition first "
                           f"(python -m course_tools translation build {language})", language=language)]
    published_notebook = nbformat.read(reference, as_version=4)
    expected, mine = sections(published_notebook, english), sections(learner, english)
    if not {part.number for part in mine[1:]} & {part.number for part in expected[1:]}:
        return [Result(name, None, "", "error",
                       f"not one of the course's notebooks (none of the exercise headings of {name})",
                       language=language)]
    graded = submission(learner, published_notebook, english)
    env = {**env, "COURSE_LANG": language, "COURSE_GRADING": "1"}
    messages: dict[str, str] = {}
    notes_before = []
    if language != "en":
        try:
            messages = translations(language)
        except ValueError as problem:  # a catalogue that cannot be read: the checks speak English, and the row says so
            notes_before.append(f"the check messages are shown in English: {problem}")
    try:
        notes = execute(graded, folder, cell_timeout, env, notebook_timeout=notebook_timeout, grace=grace,
                        manager=manager)
    except Exception as problem:  # the kernel could not start, for example
        return [Result(name, None, "", "error", f"could not run: {type(problem).__name__}: {problem}"[:300],
                       language=language)]
    notes = notes_before + notes
    results = judge(graded, published_notebook, name, cell_timeout, notebook_timeout, english, messages)
    own, theirs = {part.number: part for part in mine}, {part.number: part for part in expected}
    setup_review = review_notes(own[0].code if 0 in own else [])
    for result in results:
        part = own.get(result.exercise or 0)
        review = set(setup_review) | set(review_notes([cell for cell in part.code if not is_check(cell)]
                                                      if part else []))
        published_checks = [cell.source.strip() for cell in theirs[result.exercise or 0].checks]
        if part and [cell.source.strip() for cell in part.checks] != published_checks:
            review.add("edited or removed a check cell (the published one ran)")
        result.note = "; ".join((["review: " + ", ".join(sorted(review))] if review else []) + notes)
    return results


COLOURS = {"passed": "\033[32m", "failed": "\033[31m", "not attempted": "\033[33m", "error": "\033[31m"}


def width(text: str) -> int:
    """How many columns ``text`` takes in a terminal: a wide character (Japanese) takes two."""
    return sum(2 if unicodedata.east_asian_width(character) in "WF" else 1 for character in text)


def grader_said(message: str, language: str) -> str:
    """The grader's own words in ``message``, in ``language`` where the table has them."""
    for english, translated in GRADER_SAYS.get(language, []):
        message = english.sub(translated, message)
    return message


def format_report(results: list[Result], colour: bool = False) -> str:
    """The learner's report: one line per exercise, the check's message under a failure,
    and a last line with the count, such as ``2 of 4 exercises passed``; in the notebook's
    language (``Result.language``: ``演習 1 · ...  合格``, ``4 問中 2 問が合格``)."""
    language = results[0].language if results else "en"
    words = REPORT_WORDS.get(language, REPORT_WORDS["en"])
    widest = max((width(result.label) for result in results), default=0)
    lines = []
    for result in results:
        said = words[result.status]
        status = f"{COLOURS[result.status]}{said}\033[0m" if colour else said
        lines.append(f"{result.label}{' ' * (widest - width(result.label))}  {status}")
        lines += ["    " + line for line in grader_said(result.message, language).splitlines()]
    exercises = [result for result in results if result.exercise is not None]
    passed = sum(result.status == "passed" for result in exercises)
    lines.append(words["summary"].format(passed=passed, total=len(exercises)))
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
