"""``connect()``: find a model server to talk to, or start the course's own.

The lessons need an Ollama-compatible server with ``qwen2.5-coder:0.5b``:

1. If ``OLLAMA_HOST`` (default ``http://127.0.0.1:11434``) answers and has the model,
   that server is used: your own Ollama works as is. If it answers without the model,
   ``connect()`` says so and goes on to step 2.
2. Otherwise the embedded server (``python -m course_server``) is started in the
   background on a free port, serving the model you asked for, once per model and Python
   process; it is stopped when the process (your notebook's kernel) exits. The server is its
   own room of the course (``course_server/``, with llama.cpp): this module starts it as a
   process and never imports it, so a learner's library installed alone (``pip install .``,
   no llama.cpp) works against any Ollama, and says what to do when none answers.

Set ``COURSE_EMBEDDED=1`` to skip step 1 (the test suite does, so its results do not
depend on what else runs on the machine).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from course_lib import config
from course_lib.client import Client, auth_headers, resolve_host


class ServerStartError(RuntimeError):
    """The embedded server did not come up; the message holds the end of its log."""


NO_SERVER = ("No Ollama-compatible server with {model} answers at {host}, and the course's own server is not "
             "installed in this environment (it needs llama.cpp). Start Ollama (`ollama pull {model}`) or "
             "point OLLAMA_HOST at a server that has the model; or install the course's server: "
             "`python3 course.py setup` in the course's folder, or `pip install \"course-lib[server]\"`.")


def server_installed() -> bool:
    """Whether the course's own server can start here: its package and llama.cpp's bindings are importable."""
    return all(importlib.util.find_spec(name) is not None for name in ("course_server", "llama_cpp"))


class EmbeddedServer:
    """A ``python -m course_server`` child process on a free local port."""

    def __init__(self, *server_args: str, model: str | None = None, start_timeout: float = 300.0) -> None:
        """Start the server; ``model`` names the model it loads (default: ``chosen_model()``)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log_dir = config.cache_dir() / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"server-{self.port}.log"
        command = [sys.executable, "-m", "course_server", "--port", str(self.port),
                   "--parent-pid", str(os.getpid()), *server_args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=server_env(model))
        atexit.register(self.stop)
        self._wait_until_ready(start_timeout)

    def _wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(f"the embedded server exited (code {self.process.returncode}):\n{self.log()}")
            if answers(self.url):
                return
            time.sleep(0.2)
        self.stop()
        raise ServerStartError(f"the embedded server did not answer within {timeout:.0f} s:\n{self.log()}")

    def log(self, last_lines: int = 20) -> str:
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-last_lines:])

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Ask the server to shut down (SIGTERM), and kill it if it has not after 10 s."""
        if self.running:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


_embedded: dict[str, EmbeddedServer] = {}  # model name -> the server this process started for it


def chosen_model() -> str:
    """The model the embedded server loads when none is named, so ``connect()``'s default:
    ``COURSE_MODEL_PATH``'s file name without ``.gguf``, else ``COURSE_MODEL``, else the 0.5B."""
    path = config.model_path()
    return path.name.removesuffix(".gguf") if path is not None else config.model_name()


def server_env(model: str | None) -> dict[str, str] | None:
    """The environment for a server that must load ``model`` (``None``: inherit this one's).

    The server reads ``COURSE_MODEL``; ``COURSE_MODEL_PATH`` would win over it, so it is
    dropped unless it is the file of ``model`` itself.
    """
    if model is None or model == chosen_model():
        return None
    env = {**os.environ, "COURSE_MODEL": model}
    env.pop("COURSE_MODEL_PATH", None)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).text.startswith("Ollama is running")
    except httpx.HTTPError:
        return False


def served_models(url: str) -> set[str]:
    """The model names the server at ``url`` lists in ``/api/tags`` (none if it does not answer)."""
    try:
        tags = httpx.get(f"{url}/api/tags", timeout=5.0, headers=auth_headers(config.api_key()))
        return {entry["name"] for entry in tags.json()["models"]}
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return set()


def has_model(url: str, model: str) -> bool:
    """Whether the server at ``url`` has ``model`` (Ollama also accepts ``name:latest`` for ``name``)."""
    names = served_models(url)
    return model in names or f"{model}:latest" in names


def embedded_server(model: str | None = None) -> EmbeddedServer:
    """This process's embedded server for ``model`` (default: ``chosen_model()``), started on first use.

    A server loads one model, so asking for another model starts a second server.
    """
    model = model or chosen_model()
    server = _embedded.get(model)
    if server is None or not server.running:
        server = _embedded[model] = EmbeddedServer(model=model)
    return server


def connect(model: str | None = None, echo: bool = False, quiet: bool = False) -> Client:
    """A ``Client`` for a server that has ``model`` (default: ``chosen_model()``): your Ollama
    if it has it, else the embedded server, started with that model."""
    model = model or chosen_model()
    host = resolve_host()
    if not config.embedded_only() and answers(host):
        names = served_models(host)
        if model in names or f"{model}:latest" in names:
            if not quiet:
                print(f"Using the Ollama server at {host} ({model}).")
            return Client(host, model, echo=echo)
        print(f"The Ollama server at {host} answers but does not have {model} (it has: "
              f"{', '.join(sorted(names)) or 'no models'}); `ollama pull {model}` adds it. "
              f"Using the course's embedded server with {model} instead.")
    if not server_installed():
        raise ServerStartError(NO_SERVER.format(model=model, host=host))
    server = embedded_server(model)
    if not quiet:
        print(f"Using the embedded server at {server.url} ({model}).")
    return Client(server.url, model, echo=echo)


def available(model: str) -> bool:
    """Whether ``model`` can be served here without a download: the Ollama at ``OLLAMA_HOST`` has
    it, or the course's server is installed and its cache holds the verified file (``python -m
    course_server models check``, asked in a process of its own: the server is another room)."""
    if not config.embedded_only() and has_model(resolve_host(), model):
        return True
    if not server_installed():
        return False
    env = {**os.environ, "COURSE_MODEL": model}
    env.pop("COURSE_MODEL_PATH", None)
    check = subprocess.run([sys.executable, "-m", "course_server", "models", "check"], env=env,
                           capture_output=True, text=True, timeout=60)
    return check.returncode == 0


def optional_client(model: str, quick: bool = False) -> Client | None:
    """A ``Client`` for ``model`` when it is here (``available``), else None, saying why and how to
    get it: for a second model a lesson compares with, which is a download of its own. With
    ``quick`` (CI's quick mode) it is None too. See ``course_lib.recorded`` for the cells."""
    if quick:
        print(f"quick mode: {model} is not used; its cells show the run recorded with the course.")
        return None
    if not available(model):
        print(f"{model} is not on this machine, so its cells show the run recorded with the course. To run "
              f"them yourself, fetch it once (a download of about a gigabyte): `python3 course.py python -m "
              f"course_server models fetch {model}`, then run this cell again.")
        return None
    return connect(model)
