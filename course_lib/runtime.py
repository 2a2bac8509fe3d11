"""``connect()``: find a model server to talk to, or start the course's own.

The lessons need an Ollama-compatible server with ``qwen2.5-coder:0.5b``:

1. If ``OLLAMA_HOST`` (default ``http://127.0.0.1:11434``) answers and has the model,
   that server is used: your own Ollama works as is.
2. Otherwise the embedded server (``python -m course_lib.server``) is started in the
   background on a free port, once per Python process; it is stopped when the process
   (your notebook's kernel) exits.

Set ``COURSE_EMBEDDED=1`` to skip step 1 (the test suite does, so its results do not
depend on what else runs on the machine).
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .client import Client, resolve_host
from .models import DEFAULT_MODEL, cache_dir


class ServerStartError(RuntimeError):
    """The embedded server did not come up; the message holds the end of its log."""


class EmbeddedServer:
    """A ``python -m course_lib.server`` child process on a free local port."""

    def __init__(self, *server_args: str, model: str | None = None, start_timeout: float = 300.0) -> None:
        """Start the server; ``model`` names a registry model (default: ``COURSE_MODEL`` or the 0.5B)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log_dir = cache_dir() / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"server-{self.port}.log"
        command = [sys.executable, "-m", "course_lib.server", "--port", str(self.port),
                   "--parent-pid", str(os.getpid()), *server_args]
        with open(self.log_path, "wb") as log:
            env = {**os.environ, "COURSE_MODEL": model} if model else None
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
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


_embedded: EmbeddedServer | None = None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).text.startswith("Ollama is running")
    except httpx.HTTPError:
        return False


def has_model(url: str, model: str) -> bool:
    try:
        names = {entry["name"] for entry in httpx.get(f"{url}/api/tags", timeout=5.0).json()["models"]}
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return model in names or f"{model}:latest" in names


def embedded_server() -> EmbeddedServer:
    """The embedded server of this process, started on first use."""
    global _embedded
    if _embedded is None or not _embedded.running:
        _embedded = EmbeddedServer()
    return _embedded


def connect(model: str = DEFAULT_MODEL, echo: bool = False, quiet: bool = False) -> Client:
    """A ``Client`` for a server that has ``model``: your Ollama if it has it, else the embedded one."""
    host = resolve_host()
    if os.environ.get("COURSE_EMBEDDED") != "1" and answers(host):
        if has_model(host, model):
            if not quiet:
                print(f"Using the Ollama server at {host} ({model}).")
            return Client(host, model, echo=echo)
        print(f"The Ollama server at {host} has no {model} (`ollama pull {model}` adds it); "
              "using the embedded server instead.")
    server = embedded_server()
    if not quiet:
        print(f"Using the embedded server at {server.url} ({model}).")
    return Client(server.url, model, echo=echo)
