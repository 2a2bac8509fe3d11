"""Shared fixtures (one real embedded server for the whole test session) and the test tiers.

Every test is in one tier, named by a marker (``pyproject.toml`` lists them):

- ``model``: starts the real model (the ``server`` fixture, nbval's cells of every lesson and
  solution, the clients' contract tests). Minutes.
- ``slow``: no model, but a notebook kernel, a grader's sandbox, a child process per test, or
  an assertion on the wall clock (which a busy machine can break). Tens of seconds.
- ``release``: what keeps the course's words true, not its code: the lessons' time lines, the
  Japanese edition up to date, README sentences, the instructors' agendas, the committed tables,
  style and types. A typo fix in the English can fail these until the edition is rebuilt.
- ``fast``: everything else, given here to every test with none of the three above. No model,
  no kernel, no prose: ``pytest --fast`` (the same as ``-m fast``, without collecting the
  notebooks) is the loop a maintainer runs after each change, in under a minute on 2 cores.

A test file marks its own ``slow`` and ``release`` tests, except a few files whose slow tests are
named in ``SLOW`` below. ``python3 course.py test`` runs every tier.

Shared constants and helpers that tests import are in ``helpers.py``."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from course_lib.runtime import EmbeddedServer

os.environ.setdefault("COURSE_EMBEDDED", "1")  # never depend on another server on this machine
os.environ.setdefault("COURSE_QUICK", "1")  # experiments run small; COURSE_QUICK=0 runs them in full
# With pytest-xdist each worker has a server of its own, and so has each notebook's kernel: the
# model processes share the cores instead of each spinning threads on all of them (docs/maintainers.md).
if (workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))) > 1:
    os.environ.setdefault("COURSE_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
os.environ["COURSE_LANG"] = "en"  # checks speak English here, whatever the shell says; tests of ja ask for it

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_FOLDERS = (ROOT / "notebooks", ROOT / "solutions")
TIERS = ("model", "slow", "release")

# Slow tests named by file and by a part of their name (None: the whole file), for the files that
# do not mark them themselves.
SLOW: dict[str, tuple[str, ...] | None] = {
    # a kernel, a sandboxed grader, or several of them at once
    "test_grading.py": ("sandbox", "kernel", "runs_too_long"),
    # each test starts the model's supervised child process (a scripted model, but a Python each)
    "test_supervisor.py": None,
    # the event loop must answer within 0.5 s of the wall clock while it works
    "test_server_loop.py": ("does_not_hold_the_loop", "takes_a_place_in_line", "does_not_stop_other_clients"),
    # an answer, a refusal or a generation's end within a second or two of the wall clock
    "test_server_budget.py": ("past_its_deadline_between_tokens", "refused_before_it_is_parsed",
                              "answers_while_large_bodies_arrive"),
    # a real browser (Chromium) opens a deck; the other browser tests start JupyterLab and the model
    "test_browser.py": ("deck",),
}
MODEL_FIXTURES = {"server", "url"}  # the session's real server
# The files that take longest in the whole suite (about a minute or more on 2 cores), longest
# first, as measured in a run of the README's test command: the bundle's round trip (lessons 3
# and 4 in full among its steps) 353 s, then lessons 7, 8 and 9, the browser, the grader, ...
FIRST = ("test_bundle_round_trip.py", "07_observability_and_cost.ipynb", "08_experiments.ipynb",
         "09_guards_and_injection.ipynb", "test_browser.py", "test_grading.py", "10_providers.ipynb",
         "02_chat_templates.ipynb", "12_mcp.ipynb", "test_batching.py", "13_testing_agents.ipynb",
         "test_learner_install.py")

try:
    import llama_cpp  # noqa: F401
except Exception:  # not installed, or its compiled library does not load
    # The fast path (``-m "not model"``) needs no compiled llama.cpp: these modules test the
    # engine itself (every test in them is ``model``) and import it at the top, so without the
    # library they are not collected. test_prompt_cache.py's bookkeeping tests run without it.
    collect_ignore = ["server/test_batching.py", "server/test_engine.py"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help="the fast tier only (-m fast): no model, no kernel, no prose checks; notebooks not collected")


def pytest_configure(config: pytest.Config) -> None:
    """``--fast`` is ``-m fast`` (and any ``-m`` given too), with nbval's notebooks not even read:
    every cell of them is ``model``."""
    config.pluginmanager.register(RunElsewhere(), "run-elsewhere")
    config.pluginmanager.register(NotebookServer(), "notebook-server")
    if config.getoption("fast"):
        config.option.markexpr = f"fast and ({config.option.markexpr})" if config.option.markexpr else "fast"
        config.option.ignore_glob = [*(config.option.ignore_glob or []), "*.ipynb"]


def named_in(table: dict[str, tuple[str, ...] | None], item: pytest.Item) -> bool:
    name = Path(str(item.path)).name
    return name in table and (table[name] is None or any(part in item.name for part in table[name] or ()))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test its tier (above). Lessons and solutions, run by nbval, start the model:
    their cells are ``model``. (Lesson 13's own tests in ``notebooks/agent_tests`` mark their
    one model test themselves; the lesson runs the others with ``-m "not model"``.)

    The longest files run first (``FIRST``, longest first, then the tests marked ``long``): the
    suite's workers (pytest-xdist, a file to each) take them at the start and share out the
    short ones at the end, instead of one worker still running a long file when the other has
    finished. (A suite on two workers whose two longest tests came last took 899 s, against
    about 834 s of work a worker.)"""
    for item in items:
        path = Path(str(item.path))
        if path.suffix == ".ipynb" and any(folder in path.parents for folder in NOTEBOOK_FOLDERS):
            item.add_marker(pytest.mark.model)
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)
        if named_in(SLOW, item):
            item.add_marker(pytest.mark.slow)
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker(pytest.mark.fast)
    def order(item: pytest.Item) -> int:
        name = Path(str(item.path)).name
        return FIRST.index(name) if name in FIRST else len(FIRST) + (item.get_closest_marker("long") is None)

    items.sort(key=order)  # stable: otherwise in the order collected


# Lessons that a test runs as a learner would, outside this process: the learner's-install test
# runs lesson 1 in a venv of the learner's library alone, the bundle's round trip lessons 3 and
# 4 in full in an offline install. When that test is collected and can run here, nbval's run of
# them here is left out.
RUN_ELSEWHERE = {"test_learner_install.py": ("01_the_wire.ipynb",),
                 "test_bundle_round_trip.py": ("03_tool_calls.ipynb", "04_agent_loop.ipynb")}


def network_can_be_blocked() -> bool:
    """Whether ``unshare`` can give a process a network namespace of its own here, as the bundle's
    round trip needs (where it cannot, that test is skipped, or fails in CI)."""
    unshare = shutil.which("unshare")
    return unshare is not None and any(
        subprocess.run([unshare, flags, "true"], capture_output=True, timeout=30).returncode == 0
        for flags in ("-rn", "-n"))


CAN_RUN = {"test_bundle_round_trip.py": network_can_be_blocked}  # the tests of RUN_ELSEWHERE that may not


class RunElsewhere:
    """A lesson runs once: when a test of ``RUN_ELSEWHERE`` is selected (and ``CAN_RUN`` here),
    nbval's cells of its lessons are deselected; where it cannot run, they stay, so that every
    lesson runs somewhere. Last of the collection hooks, after ``-m`` and ``-k`` chose, and
    before pytest-xdist sends a worker's list of tests to the controller."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        selected = {Path(str(item.path)).name for item in items}
        lessons = {lesson for test, names in RUN_ELSEWHERE.items()
                   if test in selected and CAN_RUN.get(test, lambda: True)() for lesson in names}
        twice = [item for item in items if Path(str(item.path)).name in lessons
                 and Path(str(item.path)).parent == ROOT / "notebooks"]
        if twice:
            config.hook.pytest_deselected(items=twice)
            items[:] = [item for item in items if item not in twice]


class NotebookServer:
    """One server for the kernels of every lesson and solution a worker runs, instead of one
    started by each notebook's ``connect()`` (about 3 s of the model's process and its load
    each, for some 35 notebooks). A kernel is started in its notebook's first setup, with the
    environment of that moment: here ``OLLAMA_HOST`` names this server and ``COURSE_EMBEDDED``
    is 0, so ``connect()`` in the kernel uses it as a learner's own Ollama; other tests keep
    ``COURSE_EMBEDDED=1``. It is the server a notebook would start (the default settings), run by
    the suite, so no notebook depends on a server outside it. A notebook that starts servers of
    its own (the appendix, lesson 8's 1.5B) still does."""

    def __init__(self) -> None:
        self.server: EmbeddedServer | None = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        path = Path(str(item.path))
        if path.suffix != ".ipynb" or not any(folder in path.parents for folder in NOTEBOOK_FOLDERS):
            yield
            return
        if self.server is None or not self.server.running:
            self.server = EmbeddedServer()
        saved = {name: os.environ.get(name) for name in ("OLLAMA_HOST", "COURSE_EMBEDDED")}
        os.environ.update(OLLAMA_HOST=self.server.url, COURSE_EMBEDDED="0")
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def pytest_sessionfinish(self) -> None:
        if self.server is not None:
            self.server.stop()


@pytest.fixture(scope="session")
def server():
    """The real server with the real model; two slots and ``--max-queue 2``: a full queue is easy
    to reach, and 4 workers (``COURSE_WORKERS``' default) still fit."""
    embedded = EmbeddedServer("--parallel", "2", "--max-queue", "2")
    yield embedded
    embedded.stop()
    assert embedded.process.returncode == 0, "the server should exit cleanly on SIGTERM:\n" + embedded.log()


@pytest.fixture(scope="session")
def url(server):
    return server.url
