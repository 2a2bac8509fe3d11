"""The offline room install, end to end, as a learner's laptop meets it: a bundle, then a clean
install from it with the network blocked, then lessons 3 and 4 in full there, with no compiler.

1. ``python3 course.py bundle OUT --this-machine`` writes a bundle as the instructor would, but
   for this machine only: its llama-cpp-python is the wheel this machine's course was installed
   from (a room's portable build takes 10 to 20 minutes; see ``course_tools/bundle.py``), the
   other wheels come from the package index (the only network this test uses), the model from
   the course's cache, checked.
2. A copy of the repository's tracked files (a clean clone of the working tree: no ``.venv``,
   no build) runs ``python3 course.py setup --from OUT`` in a network namespace that has only
   its own loopback (``unshare -rn``, or ``unshare -n`` as root), with an empty home folder and
   an empty model cache.
3. Still offline, lessons 3 and 4 run in full under nbval in that fresh ``.venv``'s Jupyter
   kernel, as a learner runs them (not quick mode): ``connect()`` starts the embedded server,
   the model cache holds the default model alone, so the cells of the 1.5B show the run
   recorded with the course, and every cell must pass (those marked ``# NBVAL_CHECK_OUTPUT``
   with their committed output). Where this test can run, it is the suite's one run of them
   (tests/conftest.py's ``RunElsewhere``; where the network cannot be blocked, nbval runs them
   in quick mode with the other lessons). Their own second model was the room's failure before: offline, lesson 4
   raised ``NameError`` where the 1.5B was missing.

No compiler or build tool may start in any step: ``cc``, ``gcc``, ``c++``, ``cmake``, ``make``,
``ninja``, ``ld`` and the like are shadowed on ``PATH`` (and ``CC``/``CXX``) by stand-ins that
write down their call and fail, as on a laptop without a compiler, and a watcher samples the
steps' processes every 0.1 s for one run by its full path. pip may build one package only: the
course's own, editable, pure Python.

Where the network cannot be blocked (no ``unshare``, or user namespaces forbidden to a user who
is not root) the test is skipped and says why, unless ``CI=true`` or
``COURSE_BUNDLE_TEST=required`` (``.ci/run`` sets it): then that is a failure. It needs the
default model in the course's cache (``python3 course.py setup`` fetched it); it prints each
step's wall-clock and CPU time. The two lessons in full take about 5 minutes on one core.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.model  # it starts the real model, in a fresh install: not in the fast path

ROOT = Path(__file__).resolve().parent.parent
# The core lessons that compare with a second model (the 1.5B), run in full in the offline install
OFFLINE_LESSONS = ("03_tool_calls.ipynb", "04_agent_loop.ipynb")
MODEL_FILE = "qwen2.5-coder-0.5b.Q4_K_M.gguf"

# Run by this Python inside the new network namespace: a new namespace has its loopback down,
# and the embedded server and the Jupyter kernel talk over 127.0.0.1; so bring it up (the
# SIOCSIFFLAGS ioctl, as `ip link set lo up` does), check that loopback is the only interface,
# then become the command given.
OFFLINE = r"""
import fcntl, os, socket, struct, sys
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", 0x1 | 0x8 | 0x40))  # SIOCSIFFLAGS: UP, LOOPBACK, RUNNING
interfaces = [name for _, name in socket.if_nameindex()]
if interfaces != ["lo"]:
    sys.exit(f"the namespace has more than its loopback: {interfaces}")
os.execvp(sys.argv[1], sys.argv[1:])
"""

# What a C/C++ build runs; shadowed on PATH, and looked for among the running processes.
BUILD_TOOLS = ["cc", "gcc", "c++", "g++", "clang", "clang++", "cpp", "cc1", "cc1plus", "collect2", "ld", "as",
               "cmake", "make", "gmake", "ninja", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-g++",
               "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++"]
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc/PID/stat counts CPU time in these
VERSIONED = re.compile(r"(.+?)-\d+(\.\d+)*$")  # gcc-12, x86_64-linux-gnu-g++-12: the tool without its version


def required() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("COURSE_BUNDLE_TEST") == "required"


def cannot(reason: str) -> None:
    """Skip with ``reason``, or fail with it where this test must run (CI)."""
    if required():
        pytest.fail(f"the bundle round trip must run here (CI=true or COURSE_BUNDLE_TEST=required), but {reason}")
    pytest.skip(reason)


def base_python() -> Path:
    """The Python this test's environment was made from: the one a learner types ``python3`` for.
    (This test's own interpreter is a venv's, and course.py would install into it.)"""
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (Path(sys.base_prefix) / "bin" / name, shutil.which(name)):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    pytest.fail(f"no {name} found next to {sys.base_prefix} or on PATH")


def offline_command() -> list[str]:
    """The prefix that runs a command with no network: ``unshare -rn`` (any user, where user
    namespaces are allowed), else ``unshare -n`` (root); each is tried once first."""
    unshare = shutil.which("unshare")
    if unshare is None:
        cannot("there is no `unshare` (util-linux) to run the install with the network blocked")
    failures = []
    for flags in ("-rn", "-n"):
        prefix = [unshare, flags, str(base_python()), "-c", OFFLINE]
        probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return prefix
        failures.append(f"`unshare {flags}` failed: {probe.stderr.strip()[-300:] or probe.returncode}")
    cannot("the network cannot be blocked here: " + "; ".join(failures))
    raise AssertionError("unreachable")


def tracked_copy(into: Path) -> None:
    """The repository's tracked files as they are now into ``into``: what a clone would hold."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        cannot(f"this course is not a git clone, so there is no list of its files to copy: {listed.stderr!r}")
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and (source.is_file() or source.is_symlink()):  # a file deleted but not yet committed is left out
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name, follow_symlinks=False)


def stand_ins(folder: Path, log: Path) -> dict[str, str]:
    """Build tools that write down that they were called and fail; the environment that puts them first."""
    folder.mkdir()
    for tool in BUILD_TOOLS:
        script = folder / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\n'
                          f'echo "{tool}: a build tool started, and this install must compile nothing" >&2\nexit 1\n')
        script.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}", "CC": str(folder / "cc"),
            "CXX": str(folder / "c++")}


class BuildToolWatcher(threading.Thread):
    """Samples the processes under one process every 0.1 s: keeps those that are build tools (by
    their name, and by their program's name: ``/usr/lib/gcc/.../cc1`` bypasses ``PATH``), and the
    CPU time each has used so far (a process that lives less than 0.1 s can be missed)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.samples, self.done = root, 0, threading.Event()
        self.seen: set[str] = set()
        self.cpu: dict[tuple[int, str], float] = {}  # (pid, start time): user + system seconds at the last sample

    def run(self) -> None:
        while not self.done.wait(0.1):
            parents, names, ticks = {}, {}, {}
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    stat = Path(entry.path, "stat").read_text()
                    program = Path(entry.path, "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                except OSError:  # ended meanwhile
                    continue
                pid, fields = int(entry.name), stat[stat.rindex(")") + 2:].split()
                parents[pid] = int(fields[1])
                names[pid] = (stat[stat.index("(") + 1:stat.rindex(")")], Path(program).name, program)
                ticks[pid] = (fields[19], (int(fields[11]) + int(fields[12])) / TICKS)  # start time; utime + stime
            under = {self.root}  # and its descendants, found round by round (a parent may have a larger pid)
            grew = True
            while grew:
                grew = False
                for pid, parent in parents.items():
                    if parent in under and pid not in under:
                        under.add(pid)
                        grew = True
            for pid in under & names.keys():
                self.cpu[(pid, ticks[pid][0])] = ticks[pid][1]
                comm, program_name, program = names[pid]
                if any(self.build_tool(name) for name in (comm, program_name)):
                    self.seen.add(f"{program} (pid {pid})")
            self.samples += 1

    @staticmethod
    def build_tool(name: str) -> bool:
        bare = VERSIONED.fullmatch(name)
        return name in BUILD_TOOLS or (bare is not None and bare.group(1) in BUILD_TOOLS)


def step(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> tuple[str, float, float, set[str]]:
    """Run one step, watched: its output, wall-clock seconds, CPU seconds (user + system: the larger
    of what the OS counted for the processes it waited for and what the watcher's samples saw,
    which include a server that outlives its parent's wait) and the build tools seen under it."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watcher = BuildToolWatcher(process.pid)
    watcher.start()
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"{' '.join(command[-4:])} took over {timeout:.0f} s:\n{output[-4000:]}")
    finally:
        watcher.done.set()
        watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = max((after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime), sum(watcher.cpu.values()))
    assert process.returncode == 0, f"{' '.join(command[-4:])} failed ({process.returncode}):\n{output[-6000:]}"
    assert watcher.samples > 0, "the watcher never looked"
    return output, time.monotonic() - started, used, watcher.seen


def test_a_bundle_installs_a_clean_clone_offline_where_lessons_3_and_4_run_in_full(tmp_path):
    offline = offline_command()
    stick, clone, home, cache = (tmp_path / name for name in ("stick", "clone", "home", "cache"))
    for folder in (clone, home, cache):
        folder.mkdir()
    calls = tmp_path / "build-tools-called.log"
    tools = stand_ins(tmp_path / "no-compiler", calls)
    load = os.getloadavg()

    # 1. the bundle, written with this environment's course (the one the suite runs in), online
    here = {key: value for key, value in os.environ.items() if key not in ("COURSE_MODEL", "COURSE_MODEL_PATH")}
    out1, wall1, cpu1, seen1 = step([sys.executable, str(ROOT / "course.py"), "bundle", str(stick), "--this-machine"],
                                    cwd=ROOT, env={**here, **tools}, timeout=600)
    assert "built for this CPU only" in out1 and (stick / "THIS-MACHINE-ONLY.txt").is_file()
    assert (stick / "models" / MODEL_FILE).is_file() and list(stick.glob("wheels/llama_cpp_python-*.whl"))
    fingerprint = re.search(r"--fingerprint ([0-9a-f]{64})", out1)
    assert fingerprint, "bundle prints the fingerprint a room checks the stick against"

    # 2. a clean copy, set up from the bundle with no network, an empty home and an empty model cache
    tracked_copy(clone)
    assert not (clone / ".venv").exists()
    kept = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "CI")  # nothing of pip's, conda's, a venv's or the course's
    fresh = {key: value for key, value in os.environ.items() if key in kept}
    fresh |= {**tools, "HOME": str(home), "COURSE_CACHE_DIR": str(cache), "COURSE_EMBEDDED": "1"}
    out2, wall2, cpu2, seen2 = step([*offline, str(base_python()), "course.py", "setup", "--from", str(stick),
                                     "--fingerprint", fingerprint[1]],
                                    cwd=clone, env=fresh, timeout=600)
    assert "--no-index" in out2 and "--only-binary=:all:" in out2
    built = re.findall(r"Building (?:wheel|editable) for (\S+)", out2)
    assert set(built) <= {"course-lib", "course_lib"}, f"pip built {built}: only the course's own package may be"
    record = json.loads((cache / f"{MODEL_FILE}.source.json").read_text())
    assert record["source"] == "a course bundle", f"the model should come from the bundle, not {record}"

    # 3. lessons 3 and 4 in full in the fresh install, still offline, as a learner runs them: no
    # quick mode, and no 1.5B (the empty cache got the default model alone), so the 1.5B's cells
    # show the recorded runs
    assert [path.name for path in cache.glob("*.gguf")] == [MODEL_FILE]
    interpreter = clone / ".venv" / "bin" / "python"
    learner = {**fresh, "COURSE_QUICK": "0", "COURSE_LANG": "en"}
    if threads := os.environ.get("COURSE_THREADS"):  # the suite's share of the cores, as its other model processes
        learner["COURSE_THREADS"] = threads
    nbval = ["-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "-rA"]
    lessons = [f"notebooks/{name}" for name in OFFLINE_LESSONS]
    out3, wall3, cpu3, seen3 = step([*offline, str(interpreter), *nbval, *lessons], cwd=clone, env=learner,
                                    timeout=1800)
    code_cells = sum(cell["cell_type"] == "code" for name in OFFLINE_LESSONS
                     for cell in json.loads((ROOT / "notebooks" / name).read_text())["cells"])
    assert f"{code_cells} passed" in out3, out3[-3000:]

    # no compiler, in any step
    assert not calls.exists(), f"build tools were called:\n{calls.read_text()}"
    assert not (seen1 | seen2 | seen3), f"build tools ran: {sorted(seen1 | seen2 | seen3)}"

    wheels = len(list(stick.glob("wheels/*.whl")))
    print(f"\nbundle round trip (load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on "
          f"{os.cpu_count()} cores): bundle --this-machine {wall1:.0f} s (CPU {cpu1:.0f} s, {wheels} wheels); "
          f"setup --from offline {wall2:.0f} s (CPU {cpu2:.0f} s); lessons 3 and 4 in full offline "
          f"{wall3:.0f} s (CPU {cpu3:.0f} s)")
    # Once the test passed, the big files go (1.2 GB), and the fresh copy with its .venv (1 GB in
    # 46,000 files) goes in the background: deleting it took 90 s on this disk, which neither this
    # test nor a later pytest (which removes old temporary folders when it exits) should wait for.
    for big in [*stick.glob("models/*"), *stick.glob("wheels/*"), *cache.glob("*.gguf")]:
        big.unlink()
    subprocess.Popen(["rm", "-rf", str(clone)], start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
