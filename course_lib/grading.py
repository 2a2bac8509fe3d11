"""The grading of an exercise notebook: which exercises pass, fail, or were not attempted.

``report("01_the_wire.ipynb")`` grades a saved notebook, one line per exercise, as
``python3 course.py grade`` does; ``grade`` returns the same as ``Result`` objects
(``course_lib.gradebook`` grades a whole class with it, each submission in a sandbox from
``course_lib.sandbox``). The checks that check cells call (``check``, ``check_equal``,
``check_close``, ``uses_reference``) are in ``course_lib.checks`` and imported from here.

A notebook of a translated edition (``exercises/ja/``, whose metadata says
``"course": {"language": "ja"}``) is graded against the published notebook of its edition, and
its report is in its language: the line per exercise, the checks' messages
(``translations/ja/checks.md``, given to the kernel's copy of the checks) and the summary.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import subprocess
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checks import CheckFailed as CheckFailed
from .checks import check as check
from .checks import check_close as check_close
from .checks import check_equal as check_equal
from .checks import uses_reference as uses_reference
from .translation.build import language_of
from .translation.messages import translations

if TYPE_CHECKING:
    from .sandbox import Sandbox

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
# Checks a learner cannot reach. The learner's cells run in the kernel before the checks,
# so they could rebind `check`, patch `course_lib.grading` or `sys.modules`, swallow
# errors, rewrite later cells, or print a fake "passed". So the grade reads neither the
# kernel's `check` nor what a cell printed:
#
# - before any learner cell, a hidden first cell (PREAMBLE) compiles a fresh copy of
#   course_lib/checks.py from the grader's own text and every published check of the
#   notebook, keeps the builtins as they are then, and makes a random key, which it sends
#   back as its output (so the key is in no cell's text, nor in IPython's history);
# - each check cell runs as `run(nonce, number)`: published check `number` runs in a copy of
#   the notebook's namespace with the fresh checks and builtins in it (a thread that keeps
#   rebinding `check` in the notebook changes nothing), the names it defines go back to the
#   notebook, and its outcome (passed, CheckFailed, another exception) is published as a
#   display output signed with the key (HMAC), bound to the nonce and the number;
# - the grader reads only that signed outcome; a check cell without exactly one is an error.
#
# What this does not stop: code written against this harness in particular, which digs the
# key out of the preamble's closure (gc, frames, ctypes). `review_notes` flags code that
# reaches into the interpreter like that, for the instructor to read.
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


def headings_of(english: Any) -> dict[str, tuple[str, int]]:
    """The heading cells of an English notebook by cell id: ``("Exercise", 2)``, ``("Step", 1)``."""
    found = {}
    for cell in english.cells:
        heading = HEADING.match((cell.source.splitlines() or [""])[0]) if cell.cell_type == "markdown" else None
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
    first_line = (notebook.cells[0].source.splitlines() or [""])[0] if notebook.cells else ""
    lesson_title = NOTEBOOK_TITLE.match(first_line)
    title_of_lesson = _after(first_line, ",、") if english is not None else \
        lesson_title.group(1) if lesson_title else ""
    parts = [Section(0, "setup")]
    for cell in notebook.cells:
        line = (cell.source.splitlines() or [""])[0]
        heading: tuple[str, int, str] | None = None
        if cell.cell_type == "markdown" and cell.get("id") in headings:
            kind, number = headings[cell.id]  # titled after its heading line (a notice may come first)
            heading = (kind, number, _after(next((text for text in cell.source.splitlines() if text.startswith("#")),
                                                 line), "·"))
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
           "not attempted": "not attempted", "error": "error", "summary": "{passed} of {total} exercises passed"},
    "ja": {"exercise": "演習 {number} · {title}", "passed": "合格", "failed": "不合格", "not attempted": "未着手",
           "error": "エラー", "summary": "{total} 問中 {passed} 問が合格"},
}
GRADER_SAYS = {  # the grader's most frequent messages, translated where they are shown (the rarer ones stay English)
    "ja": {"the setup cell failed: ": "セットアップのセルが失敗しました: ",
           " (in your code)": " (あなたのコードで)",
           "this exercise has no check cell": "この演習にはチェックのセルがありません"},
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
# The harness: a fresh copy of the checks in the kernel, and signed outcomes.
# --------------------------------------------------------------------------------------

VERDICT = "application/vnd.course-grading.verdict+json"  # the display output that carries a check's outcome
CHECK_NAMES = ("CheckFailed", "check", "check_equal", "check_close", "uses_reference")
TEXT_LIMIT = 2000  # characters of an error's text kept for a row
OUTPUT_LIMIT = 2_000_000  # characters of output kept per cell (the rest is dropped, not held in memory)

PREAMBLE = """\
def _course_grading_install(checks_source, sources, name, limit):
    import builtins, hashlib, hmac, json, secrets, sys, types
    from IPython import get_ipython
    from IPython.display import publish_display_data

    kept = dict(vars(builtins))
    checks = {"__name__": "course_lib.checks", "__builtins__": kept}
    exec(compile(checks_source, "course_lib/checks.py", "exec"), checks)
    checks["LANGUAGE"], checks["MESSAGES"] = %(language)r, %(messages)r
    user_ns, reference = get_ipython().user_ns, checks["uses_reference"]
    fresh = {name_: checks[name_] for name_ in %(names)r}
    fresh["uses_reference"] = lambda call, *references: reference(call, *references, namespaces=(user_ns,))
    codes = {number: compile(source, f"<published check {number}>", "exec") for number, source in sources.items()}
    failed, key = checks["CheckFailed"], secrets.token_bytes(32)
    run_code, kind_of, text_type, copy_of, listed = exec, type, str, dict, list
    dumps, sign, sha256, publish = json.dumps, hmac.new, hashlib.sha256, publish_display_data

    def text(value):
        try:
            shown = text_type(value)
            shown = text_type.__str__(shown) if isinstance(shown, text_type) else None
        except BaseException:
            shown = None
        return "(its text could not be read)" if shown is None else shown[:limit]

    def run(nonce, number):
        before = copy_of(user_ns)
        scope = copy_of(before)
        scope.update(fresh)
        scope["__builtins__"] = kept
        try:
            run_code(codes[number], scope)
            outcome = ["passed", "", ""]
        except failed as problem:
            outcome = ["failed", "CheckFailed", text(problem)]
        except BaseException as problem:
            outcome = ["raised", text(kind_of(problem).__name__), text(problem)]
        for name_, value in listed(scope.items()):  # what the check defined, the notebook keeps
            if name_ not in fresh and name_ != "__builtins__" and (name_ not in before or before[name_] is not value):
                user_ns[name_] = value
        body = dumps([nonce, number, *outcome])
        publish({%(mime)r: {"outcome": body, "mac": sign(key, body.encode(), sha256).hexdigest()}})

    sys.modules[name] = types.SimpleNamespace(run=run)
    publish({%(mime)r: {"key": key.hex()}})


_course_grading_install(%(source)r, %(sources)r, %(module)r, %(limit)d)
del _course_grading_install
"""


def preamble(module: str, sources: dict[int, str], language: str = "en",
             messages: dict[str, str] | None = None) -> str:
    """The hidden first cell of a graded kernel (see the comment above): the published checks'
    ``sources`` by number, compiled before any learner cell runs; the key is made in the kernel
    and comes back as the cell's output, so it is in no cell's text (nor IPython's history).
    The checks speak ``language``, with the message catalogue ``messages`` (``course_lib.checks``)."""
    checks = (Path(__file__).parent / "checks.py").read_text()
    return PREAMBLE % {"names": CHECK_NAMES, "mime": VERDICT, "source": checks, "sources": sources,
                       "module": module, "limit": TEXT_LIMIT, "language": language, "messages": messages or {}}


def harness(number: int, nonce: str, module: str) -> str:
    """What the kernel runs for published check ``number``: the preamble's copy of it."""
    return f"# the published check, run by the grader\n__import__('sys').modules[{module!r}].run({nonce!r}, {number})\n"


def key_of(cell: Any) -> str | None:
    """The key the preamble made, from its output (hex)."""
    for output in cell.get("outputs", []):
        record = output.get("data", {}).get(VERDICT) if output.output_type == "display_data" else None
        if isinstance(record, dict) and isinstance(record.get("key"), str):
            return str(record["key"])
    return None


def outcome_of(cell: Any) -> tuple[str, str, str] | None:
    """``(status, ename, evalue)`` of a check cell, from its one signed outcome (None: none, or several)."""
    tag = cell.metadata.get("grading", {})
    if not tag.get("key"):
        return None
    key, found = bytes.fromhex(tag["key"]), []
    for output in cell.get("outputs", []):
        record = output.get("data", {}).get(VERDICT) if output.output_type == "display_data" else None
        if not isinstance(record, dict) or not isinstance(record.get("outcome"), str) \
                or not isinstance(record.get("mac"), str):
            continue
        expected = hmac.new(key, record["outcome"].encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, record["mac"]):
            fields = json.loads(record["outcome"])
            if fields[:2] == [tag["nonce"], tag["number"]]:
                found.append((str(fields[2]), str(fields[3]), str(fields[4])))
    return found[0] if len(found) == 1 else None


# --------------------------------------------------------------------------------------
# Running a notebook: every cell has a deadline, and so has the notebook.
# --------------------------------------------------------------------------------------

def _client_class() -> Any:
    """nbclient's ``NotebookClient``, keeping at most ``OUTPUT_LIMIT`` characters per cell."""
    import nbformat
    from nbclient import NotebookClient

    class Client(NotebookClient):
        spent = 0

        def output(self, outs: list[Any], msg: dict[str, Any], display_id: str | None, cell_index: int) -> Any:
            content = msg.get("content", {})
            if msg["msg_type"] == "display_data" and VERDICT in content.get("data", {}):
                return super().output(outs, msg, display_id, cell_index)
            before, self.spent = self.spent, self.spent + len(json.dumps(content, default=str))
            if self.spent > OUTPUT_LIMIT and msg["msg_type"] != "error":
                if before <= OUTPUT_LIMIT:
                    outs.append(nbformat.v4.new_output("stream", name="stderr", text="[grading: output cut here]\n"))
                return None
            return super().output(outs, msg, display_id, cell_index)

    return Client


async def _run_cell(client: Any, cell: Any, budget: float, grace: float, store_history: bool = True) -> str:
    """Run one cell: ``done``, ``interrupted`` (stopped at ``budget``, it answered the interrupt),
    ``killed`` (it did not, ``grace`` seconds later: the kernel and its processes were killed),
    or ``died`` (the kernel ended by itself)."""
    from nbclient.exceptions import DeadKernelError

    client.spent = 0
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
    quiet = logging.getLogger("course_lib.grading.nbclient")  # a timeout is reported per exercise, not logged
    quiet.setLevel(logging.CRITICAL)
    deadline = time.monotonic() + (notebook_timeout if notebook_timeout is not None else float("inf"))
    cells, notes, starts, index = notebook.cells, [], 0, 0
    language, messages = language_of(notebook), {}
    if language != "en":
        try:
            messages = translations(language)
        except ValueError as problem:  # a catalogue that cannot be read: the checks speak English, and the row says so
            notes.append(f"the check messages are shown in English: {problem}")
    sources = {}
    for number, cell in enumerate(cells):
        if cell.metadata["grading"]["check"]:
            cell.metadata["grading"]["number"] = number
            sources[number] = cell.source
    setup = [cell for cell in cells if cell.metadata["grading"]["section"] == 0]
    not_attempted: set[int] = set()  # sections whose own code raised the stub's error
    while index < len(cells):
        starts += 1
        holder = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])  # cells run as its cell 0
        client = client_class(holder, km=manager() if manager else None, timeout=None, allow_errors=True,
                              kernel_name="python3", resources={"metadata": {"path": str(folder)}}, log=quiet,
                              shutdown_kernel="immediate", startup_timeout=120)
        module = f"_course_grading_{secrets.token_hex(6)}"
        try:
            async with client.async_setup_kernel(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                 cleanup_kc=True):  # the kernel ends with the block, ours or not
                first = nbformat.v4.new_code_cell(preamble(module, sources, language, messages))
                if await _run_cell(client, first, 60, grace, store_history=False) != "done" or not key_of(first):
                    notes.append(f"the grader's first cell failed in this kernel: {error_of(first)}")
                key = key_of(first) or ""
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
                    runnable = cell
                    if tag["check"]:
                        tag.update(nonce=secrets.token_hex(8), key=key)
                        runnable = nbformat.v4.new_code_cell(harness(tag["number"], tag["nonce"], module))
                    by_notebook = left < cell_timeout
                    outcome = await _run_cell(client, runnable, min(cell_timeout, left), grace)
                    if runnable is not cell:
                        cell.outputs, cell.execution_count = runnable.outputs, runnable.execution_count
                    index += 1
                    if outcome != "done":
                        cell.metadata["stopped"] = {"how": outcome, "by": "notebook" if by_notebook else "cell"}
                    if not tag["check"] and error_of(cell) == ("NotImplementedError", STUB_MESSAGE):
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
    each kernel (``course_lib.sandbox``'s, for a class).
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

def judge(graded: Any, published: Any, name: str, cell_timeout: float,
          notebook_timeout: float | None = None, english: Any = None) -> list[Result]:
    """Read each exercise's status from an executed ``submission`` notebook (``english``: see ``sections``)."""
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
    results = []
    for part in parts:
        status, message = verdict(by_section.get(part.number, []), cell_timeout, notebook_timeout)
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


def verdict(cells: list[Any], cell_timeout: float, notebook_timeout: float | None = None) -> tuple[str, str]:
    """The status and message of one exercise, from the first of its cells that went wrong."""
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
            outcome = outcome_of(cell)
            if outcome is None:
                return "error", (f"{where}the check gave no result the grader could verify: something in the "
                                 "notebook suppressed or replaced it")
            status, ename, evalue = outcome
            if status == "passed":
                continue
            if ename == "NotImplementedError" and evalue == STUB_MESSAGE:
                return "not attempted", ""
            return "failed", where + (evalue if status == "failed" else f"{ename}: {evalue}")
        failure = error_of(cell)
        if failure is None:
            continue
        ename, evalue = failure
        if ename == "NotImplementedError" and evalue == STUB_MESSAGE:
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
    "course_lib.grading": "touches the grading module", "inspect": "uses inspect", "importlib": "uses importlib",
    "signal": "handles signals", "fork": "forks processes", "kill": "kills processes",
    "globals": "changes globals()", "linecache": "reads the kernel's source cache",
}


def review_notes(cells: list[Any]) -> list[str]:
    """What in a learner's code cells deserves a look by hand: rebinding the checks, reaching
    into the interpreter or the grader, signals and processes (sorted, without repeats)."""
    found: set[str] = set()
    for cell in cells:
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
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
    (``course_lib.sandbox``). ``model_url`` is a running model server for the kernel's
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
    from .sandbox import port_of, remove

    scratch = sandbox.scratch()
    try:
        copy = scratch.folder / path.name
        refused = copy_notebook(path, copy)
        if refused:
            return [Result(path.name, None, "", "error", f"not graded: {refused}")]
        sandbox.give(copy)
        env = sandbox.environment(scratch, model_url, model)
        return _grade_file(copy, path.name, reference, scratch.folder, env,
                           lambda: sandbox.kernel_manager(scratch, port_of(model_url)), cell_timeout,
                           notebook_timeout, grace)
    finally:
        sandbox.sweep()
        remove(scratch.root)


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
    if language != "en":  # a translated edition's notebook: its published notebook is that edition's
        english, reference = nbformat.read(reference, as_version=4), reference.parent / language / reference.name
        if not reference.is_file():
            return [Result(name, None, "", "error", f"no exercises/{language}/{name}: build the edition first "
                           f"(python -m course_lib.translation build {language})", language=language)]
    published_notebook = nbformat.read(reference, as_version=4)
    expected, mine = sections(published_notebook, english), sections(learner, english)
    if not {part.number for part in mine[1:]} & {part.number for part in expected[1:]}:
        return [Result(name, None, "", "error",
                       f"not one of the course's notebooks (none of the exercise headings of {name})",
                       language=language)]
    graded = submission(learner, published_notebook, english)
    env = {**env, "COURSE_LANG": language}
    try:
        notes = execute(graded, folder, cell_timeout, env, notebook_timeout=notebook_timeout, grace=grace,
                        manager=manager)
    except Exception as problem:  # the kernel could not start, for example
        return [Result(name, None, "", "error", f"could not run: {type(problem).__name__}: {problem}"[:300],
                       language=language)]
    results = judge(graded, published_notebook, name, cell_timeout, notebook_timeout, english)
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


def _grader_said(message: str, language: str) -> str:
    """The grader's own words in ``message``, in ``language`` where the table has them."""
    for english, translated in GRADER_SAYS.get(language, {}).items():
        message = message.replace(english, translated)
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
        lines += ["    " + line for line in _grader_said(result.message, language).splitlines()]
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
