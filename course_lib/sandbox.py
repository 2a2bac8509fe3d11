"""Run a learner's kernel locked down: what ``course.py grade --class`` does with each submission.

A class's notebooks are code from thirty people, run on the instructor's machine. Each
submission's kernel is started through this file, run as a small launcher between
jupyter_client and the kernel (``python -I -S sandbox.py PLAN -- python -m ipykernel_launcher
...``), which puts every layer this machine offers between the kernel and everything else:

- **environment**: the kernel gets an allowlisted environment (``PATH``, the locale, the
  model server's address, the course's own settings), never the instructor's keys;
- **files**: its folder is a scratch copy holding the submission's regular ``.ipynb`` files
  and a copy of ``data/``; with Landlock (Linux 5.13 and later, no root needed) it can write
  nowhere else, and with root it runs as a user of its own, who owns nothing else;
- **network** (Landlock 4, Linux 6.7): TCP only to the model server's port, and bound only
  to the kernel's own ports;
- **signals** (Landlock 6, Linux 6.12): none to processes outside its own sandbox, so it
  cannot stop the model server or the grader;
- **processes**: its own PID namespace (root, or a user namespace without it), so that when
  the kernel ends every process it started ends with it, however it detached; limits on
  memory, processes (with a user of its own), CPU time and file size; no capabilities;
  file descriptors other than 0, 1 and 2 closed.

``Sandbox.detect()`` finds what is available and runs a probe through the launcher to
report what really held (``describe()``). Nothing here replaces a container: the kernel
still reads what its user may read, and UDP is not filtered. The grader's side (the kernel
manager, the scratch folder, the probe) is below the launcher; only the launcher runs in
the sandboxed process, and it imports nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------------------------------
# The launcher: runs as a script in the process that becomes the kernel.
# ------------------------------------------------------------------------------------------

_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every architecture
_FS_WRITE = (1 << 1)  # LANDLOCK_ACCESS_FS_WRITE_FILE
_FS_CHANGE = sum(1 << bit for bit in (4, 5, 6, 7, 8, 9, 10, 11, 12))  # remove, make dir/file/fifo/sock/link...
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_NET_BIND, _NET_CONNECT = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 1, 24, 38
_CLONE_NEWUSER, _CLONE_NEWPID = 0x10000000, 0x20000000


def _libc() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none)."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    try:
        version = _libc().syscall(ctypes.c_long(_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _landlock(plan: dict) -> int:
    """Restrict this process and its children to the plan's writes, ports and signals."""
    import ctypes

    abi = landlock_abi()
    if abi < 1:
        return 0
    libc = _libc()
    fs = _FS_WRITE | _FS_CHANGE | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    net = _NET_BIND | _NET_CONNECT if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("=QQQ", fs, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(ctypes.c_long(_LANDLOCK_CREATE_RULESET), buffer, ctypes.c_size_t(len(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")

    def add(kind: int, rule: bytes) -> None:
        data = ctypes.create_string_buffer(rule, len(rule))
        if libc.syscall(ctypes.c_long(_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(kind), data,
                        ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_add_rule")

    for path, rights in [*((folder, fs) for folder in plan["write"]),
                         *((file, fs & (_FS_WRITE | _FS_TRUNCATE)) for file in plan["write_files"])]:
        descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            add(1, struct.pack("=Qi", rights, descriptor))  # LANDLOCK_RULE_PATH_BENEATH, a packed struct
        finally:
            os.close(descriptor)
    if net:
        for port in plan["bind_ports"]:
            add(2, struct.pack("=QQ", _NET_BIND, port))  # LANDLOCK_RULE_NET_PORT
        for port in plan["connect_ports"]:
            add(2, struct.pack("=QQ", _NET_CONNECT, port))
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if libc.syscall(ctypes.c_long(_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(ruleset)
    return abi


def _prctl(option: int, value: int) -> None:
    import ctypes

    if _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                     ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def _unshare(flags: int) -> bool:
    import ctypes

    return bool(_libc().unshare(ctypes.c_int(flags)) == 0)


def _own_pid_namespace() -> bool:
    """Make this process's next child the first process of a new PID namespace."""
    if os.geteuid() == 0:
        return _unshare(_CLONE_NEWPID)
    uid, gid = os.getuid(), os.getgid()
    if not _unshare(_CLONE_NEWUSER | _CLONE_NEWPID):
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)
    return True


def _close_inherited_descriptors() -> None:
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        descriptors = list(range(3, 4096))
    for descriptor in descriptors:
        if descriptor > 2:
            try:
                os.close(descriptor)
            except OSError:
                pass


def _lock_down_and_run(plan: dict, command: list[str], in_namespace: bool) -> None:
    """Apply the limits, Landlock, the user and the parent-death signal; then become the kernel."""
    import resource

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)  # ignored signals would stay ignored in the kernel
    for name, value in plan["limits"].items():
        limit = getattr(resource, f"RLIMIT_{name}")
        hard = resource.getrlimit(limit)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)  # never above what we were given
        resource.setrlimit(limit, (value, value))
    if plan["landlock"]:
        _landlock(plan)
    else:
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if os.geteuid() == 0:
        for capability in range(64):  # a kernel that stays root keeps no capability
            try:
                _prctl(_PR_CAPBSET_DROP, capability)
            except OSError:
                break
    if plan["uid"] is not None:
        os.setgroups([])
        os.setresgid(plan["gid"], plan["gid"], plan["gid"])
        os.setresuid(plan["uid"], plan["uid"], plan["uid"])
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # after the change of user, which clears it
    env = dict(os.environ)
    if in_namespace:  # its parent is the namespace's first process; 1 tells ipykernel not to watch for another
        env["JPY_PARENT_PID"] = "1"
    os.execvpe(command[0], command, env)


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def launch(argv: list[str]) -> int:
    """``PLAN -- COMMAND...``: run COMMAND (the kernel) under the JSON PLAN."""
    plan, command = json.loads(argv[0]), argv[argv.index("--") + 1:]
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the grader gone (Ctrl-C), this goes, and the kernel with it
    _close_inherited_descriptors()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt sent to the group is for the kernel
    if not (plan["pid_namespace"] and _own_pid_namespace()):
        _lock_down_and_run(plan, command, in_namespace=False)
    first = os.fork()
    if first == 0:  # process 1 of the namespace: when it ends, the kernel ends every process in it
        try:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            kernel = os.fork()
            if kernel == 0:
                try:
                    _lock_down_and_run(plan, command, in_namespace=True)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    os._exit(126)
            while True:  # reap every orphan; leave with the kernel
                pid, status = os.wait()
                if pid == kernel:
                    os._exit(_exit_code(status))
        finally:
            os._exit(127)
    while True:
        pid, status = os.waitpid(first, 0)
        if pid == first:
            return _exit_code(status)



# ------------------------------------------------------------------------------------------
# The grader's side: what is available, the scratch folder, the kernel manager.
# ------------------------------------------------------------------------------------------

LAUNCHER = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(LAUNCHER))
PASSED_ON = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "COURSE_QUICK", "COURSE_WORKERS")


class SandboxUnavailable(RuntimeError):
    """No sandbox could run a kernel here; the message says what the probe saw."""


@dataclass(frozen=True)
class Limits:
    """What one kernel may use. ``processes`` counts threads too. A limit on processes is a limit
    on all of a user's processes: a kernel with a user of its own gets ``processes``, a kernel
    that runs as you gets ``processes`` more than you have when it starts, and root has none."""

    memory: int = 2 * 2**30  # bytes of address space per process (RLIMIT_AS)
    processes: int = 256  # RLIMIT_NPROC
    cpu: int = 3600  # seconds of CPU time per process (RLIMIT_CPU)
    file_size: int = 256 * 2**20  # bytes per file written (RLIMIT_FSIZE)
    open_files: int = 1024  # RLIMIT_NOFILE

    def rlimits(self, uid: int | None) -> dict[str, int]:
        """The launcher's resource limits for a kernel that runs as ``uid`` (None: as this process)."""
        limits = {"AS": self.memory, "CPU": self.cpu, "FSIZE": self.file_size, "NOFILE": self.open_files, "CORE": 0}
        if uid is not None:
            limits["NPROC"] = self.processes
        elif os.geteuid() != 0:
            limits["NPROC"] = tasks_of(os.getuid()) + self.processes
        return limits

    def describe(self, uid: int | None) -> str:
        processes = [f"{self.processes} processes and threads"] if uid is not None else \
            [f"{self.processes} processes and threads more than yours"] if os.geteuid() != 0 else \
            ["no limit on processes (root has none)"]
        parts = [f"{self.memory / 2**30:g} GiB of address space", *processes, f"{self.cpu} s of CPU",
                 f"{self.file_size / 2**20:g} MiB per file"]
        return ", ".join(parts)


@dataclass(frozen=True)
class Scratch:
    """A submission's throw-away folder: ``work`` is all the kernel may write (its notebooks in
    ``work/exercises``, a copy of ``data/``, its home); ``run`` holds its connection file."""

    root: Path
    work: Path
    run: Path

    @property
    def folder(self) -> Path:
        return self.work / "exercises"

    @property
    def home(self) -> Path:
        return self.work / "home"


@dataclass
class Sandbox:
    """The layers a class's kernels run under, as found by ``detect()`` (see the module's docstring)."""

    uid: int | None = None  # a user of the kernel's own (only when grading as root)
    gid: int | None = None
    landlock: int = 0  # the Landlock ABI in use (0: none)
    pid_namespace: bool = False
    limits: Limits = field(default_factory=Limits)
    probe: dict[str, Any] = field(default_factory=dict)  # what the probe kernel saw
    containers: str = ""  # what was found of docker and podman

    @classmethod
    def detect(cls, uid: int | None = None, limits: Limits | None = None) -> Sandbox:
        """The strongest sandbox this machine offers, checked by running a probe through it.

        As root, the kernel gets ``uid`` (default: ``free_uid()``, one from 60000 to 64999),
        unless that user cannot run this Python (then it stays root, without capabilities).
        Raises ``SandboxUnavailable`` if no combination runs the probe.
        """
        limits = limits or Limits()
        abi = landlock_abi()
        candidates = []
        if os.geteuid() == 0:
            own = uid if uid is not None else free_uid()
            candidates.append(cls(own, own, abi, True, limits))
        candidates += [cls(None, None, abi, True, limits), cls(None, None, abi, False, limits)]
        candidates += [cls(None, None, 0, False, limits)] if abi else []  # Landlock there, but refused
        failures = []
        for sandbox in candidates:
            facts = sandbox.run_probe()
            if facts.get("imports") is True:
                sandbox.probe, sandbox.containers = facts, container_engines()
                sandbox.pid_namespace = facts.get("pid") == 2  # the namespace's first process is the launcher's
                return sandbox
            failures.append(f"{sandbox.who()}: {facts.get('imports') or facts.get('error')}")
        raise SandboxUnavailable("no sandbox could start a kernel here:\n" + "\n".join(failures))

    def sibling(self, taken: set[int]) -> Sandbox:
        """The same layers for kernels that run beside this one's, as a user of their own: a free uid
        not in ``taken`` (``sweep`` kills every process of a user, and a user's processes share one
        limit, so kernels graded at once need a user each). Only for a sandbox with a user of its own."""
        if self.uid is None:
            raise SandboxUnavailable(f"the kernels run as {self.who()}: there is no user of their own to vary")
        uid = free_uid(taken=taken | {self.uid})
        return replace(self, uid=uid, gid=uid)

    def who(self) -> str:
        if self.uid is not None:
            return f"uid {self.uid}"
        return "root without capabilities" if os.geteuid() == 0 else f"uid {os.getuid()} (yours)"

    def plan(self, work: Path, bind_ports: list[int], connect_ports: list[int]) -> dict[str, Any]:
        """What the launcher applies to one kernel."""
        return {"write": [str(work)], "write_files": [os.devnull], "bind_ports": bind_ports,
                "connect_ports": connect_ports, "uid": self.uid, "gid": self.gid,
                "limits": self.limits.rlimits(self.uid), "landlock": self.landlock > 0,
                "pid_namespace": self.pid_namespace}

    def scratch(self, parent: str | None = None) -> Scratch:
        """A fresh scratch folder (``data/`` copied in) that the kernel's user owns."""
        root = Path(tempfile.mkdtemp(prefix="grade-", dir=parent))
        os.chmod(root, 0o711)
        scratch = Scratch(root, root / "work", root / "run")
        scratch.run.mkdir(mode=0o711)
        for folder in (scratch.folder, scratch.home / "tmp"):
            folder.mkdir(parents=True)
        shutil.copytree(Path(ROOT) / "data", scratch.work / "data", symlinks=True)
        if self.uid is not None:
            for folder in (scratch.work, scratch.folder, scratch.home, scratch.home / "tmp"):
                os.chown(folder, self.uid, self.gid if self.gid is not None else self.uid)
        return scratch

    def give(self, path: Path) -> None:
        """Hand a file in the scratch folder to the kernel's user."""
        if self.uid is not None:
            os.chown(path, self.uid, self.gid if self.gid is not None else self.uid)

    def environment(self, scratch: Scratch, model_url: str | None = None,
                    model: str | None = None) -> dict[str, str]:
        """The kernel's whole environment: a few settings passed on, the rest pointing into ``scratch``."""
        env = {key: os.environ[key] for key in PASSED_ON if key in os.environ}
        home = str(scratch.home)
        env |= {"HOME": home, "TMPDIR": f"{home}/tmp", "USER": "learner", "LOGNAME": "learner",
                "IPYTHONDIR": f"{home}/.ipython", "MPLCONFIGDIR": f"{home}/.matplotlib",
                "XDG_CACHE_HOME": f"{home}/.cache", "XDG_CONFIG_HOME": f"{home}/.config",
                "JUPYTER_CONFIG_DIR": f"{home}/.jupyter", "JUPYTER_DATA_DIR": f"{home}/.local/share/jupyter",
                "JUPYTER_RUNTIME_DIR": f"{home}/.local/share/jupyter/runtime", "PYTHONDONTWRITEBYTECODE": "1",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        env.setdefault("PATH", os.defpath)
        if model_url:
            env["OLLAMA_HOST"] = model_url
        if model:
            env["COURSE_MODEL"] = model
        return env

    def kernel_manager(self, scratch: Scratch, model_port: int | None) -> Any:
        """A jupyter_client kernel manager whose kernel starts through the launcher."""
        import secrets

        from jupyter_client.manager import AsyncKernelManager

        sandbox = self

        class SandboxedKernelManager(AsyncKernelManager):
            def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
                command = super().format_kernel_cmd(extra_arguments)
                sandbox.give(Path(self.connection_file))
                ports = [self.shell_port, self.iopub_port, self.stdin_port, self.hb_port, self.control_port]
                plan = sandbox.plan(scratch.work, ports, [model_port] if model_port else [])
                return [sys.executable, "-I", "-S", LAUNCHER, json.dumps(plan), "--", *command]

        return SandboxedKernelManager(kernel_name="python3",
                                      connection_file=str(scratch.run / f"kernel-{secrets.token_hex(4)}.json"))

    def sweep(self, wait: float = 20.0) -> None:
        """Kill every process of the kernel's own user, and wait until they are gone (they
        count against its process limit until then). The PID namespace has killed them
        already; this is for a machine without one, and for the ones still exiting."""
        if self.uid is None:
            return
        deadline = time.monotonic() + wait
        while self.processes() and time.monotonic() < deadline:
            subprocess.run([sys.executable, "-I", "-S", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                           user=self.uid, group=self.gid, extra_groups=[], env={}, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
            time.sleep(0.1)

    def processes(self) -> list[int]:
        """The processes (zombies included) whose real user is the kernel's own."""
        return [pid for pid, _ in _processes_of(self.uid)] if self.uid is not None else []

    def run_probe(self) -> dict[str, Any]:
        """Start a Python through the launcher, as a kernel would be, and ask it what it can do."""
        scratch = self.scratch()
        try:
            code = PROBE.format(repository=json.dumps(os.path.join(ROOT, "course_lib")),
                                outside=json.dumps(str(scratch.root)))
            command = [sys.executable, "-I", "-S", LAUNCHER, json.dumps(self.plan(scratch.work, [], [])), "--",
                       sys.executable, "-c", code]
            try:
                done = subprocess.run(command, env=self.environment(scratch), cwd=scratch.folder,
                                      capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as problem:
                return {"error": f"{type(problem).__name__}: {problem}"}
            try:
                return dict(json.loads(done.stdout.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                return {"error": f"exit {done.returncode}: {done.stderr.strip()[-500:]}"}
        finally:
            remove(scratch.root)

    def describe(self) -> str:
        """One paragraph: which layers ran, as the probe saw them."""
        probe = self.probe
        who = self.who()
        if self.uid is not None and probe.get("python") and probe["python"] != platform.python_version():
            who += (f" (its Python is {probe['python']}: the grader's {platform.python_version()} is "
                    "where that user cannot read, so the system's ran with the course's packages)")
        layers = [f"the kernel ran as {who}, without capabilities" if os.geteuid() == 0 else
                  f"the kernel ran as {who}"]
        layers.append("in its own PID namespace (every process it started ended with it)" if self.pid_namespace
                      else "in its own session, killed as a process group (no PID namespace here)")
        if self.landlock:
            what = ["writes only in its scratch folder"]
            if self.landlock >= 4:
                what.append("TCP only to the model server")
            if self.landlock >= 6:
                what.append("no signals to processes outside")
            layers.append(f"Landlock ABI {self.landlock}: " + ", ".join(what))
        else:
            layers.append("no Landlock (Linux 5.13 or later has it)")
        layers.append("limits: " + self.limits.describe(self.uid))
        layers.append("an allowlisted environment and a scratch copy of the submission's notebooks")
        checked = "the probe could not write to the repository" if probe.get("repository") is False else \
            "THE PROBE COULD WRITE TO THE REPOSITORY"
        return (f"process sandbox: {'; '.join(layers)}; {checked}. Containers: {self.containers or 'not checked'}.")


PROBE = """
import json, os, platform, secrets, sys
facts = {{"uid": os.getuid(), "pid": os.getpid(), "python": platform.python_version()}}
try:
    import ipykernel, course_lib.grading
    facts["imports"] = True
except Exception as problem:
    facts["imports"] = f"{{type(problem).__name__}}: {{problem}}"
for name, folder in (("repository", {repository}), ("outside", {outside})):
    target = os.path.join(folder, ".probe-" + secrets.token_hex(4))
    try:
        open(target, "x").close()
        os.remove(target)
        facts[name] = True
    except OSError:
        facts[name] = False
print(json.dumps(facts))
"""


def _processes_of(uid: int) -> list[tuple[int, int]]:
    """``(pid, threads)`` of every process whose real user is ``uid``, from ``/proc``."""
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as status:
                    fields = dict(line.split(":", 1) for line in status if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    found.append((int(name), int(fields.get("Threads", "1").strip() or 1)))
            except (OSError, KeyError, ValueError):
                continue
    return found


def tasks_of(uid: int) -> int:
    """How many processes and threads ``uid`` has: what a limit on processes counts."""
    return sum(threads for _, threads in _processes_of(uid))


def free_uid(start: int = 64999, span: int = 5000, taken: set[int] | frozenset[int] = frozenset()) -> int:
    """A uid from ``start`` down (``span`` of them) with no account and no process, and not in
    ``taken``: it owns nothing and runs nothing, so killing all of its processes kills only a
    kernel's. Two batches at once get different ones (the search starts at a random place in
    the range); ``taken`` holds the ones a batch already chose, whose kernels have not started."""
    import pwd
    import random

    running = {int(line.split()[1]) for line in _status_lines("Uid:")}
    offset = random.randrange(span)
    for step in range(span):
        uid = start - (offset + step) % span
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in running and uid not in taken:
                return uid
    raise SandboxUnavailable(f"no free uid between {start - span + 1} and {start}")


def _status_lines(prefix: str) -> list[str]:
    """That line of every process's ``/proc/PID/status``."""
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as status:
                    found += [line for line in status if line.startswith(prefix)]
            except OSError:
                continue
    return found


def container_engines() -> str:
    """What is here of docker and podman: the grader has no container mode (see the README)."""
    found = [name for name in ("docker", "podman") if shutil.which(name)]
    if not found:
        return "neither docker nor podman is installed"
    for name in found:
        try:
            done = subprocess.run([name, "info"], capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return f"{name} answers, but the grader has no container mode (the README says how to run it in one)"
    return f"{' and '.join(found)} installed, but no engine answers"


def remove(folder: Path) -> None:
    """Delete a scratch folder, whatever its kernel did to the permissions inside."""
    def unlock(function: Any, path: str, _: Any) -> None:
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)
        except OSError:
            pass

    shutil.rmtree(folder, onerror=unlock)


def port_of(url: str | None) -> int | None:
    """The TCP port of an ``http://host:port`` URL."""
    if not url:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1:]))
