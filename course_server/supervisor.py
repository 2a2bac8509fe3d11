"""The model in a child process, restarted when it dies: what Ollama does with its runner.

llama.cpp is C++. When it fails hard (a grammar that makes its parser recurse until the
stack is gone, an exception thrown through the sampler, memory running out) it ends the
process it runs in: no Python ``except`` can catch a segmentation fault or ``std::terminate``.
Ollama never loads a model into its HTTP server for that reason: each model runs in a
"runner" process that the server starts, talks to and restarts.

``SupervisedEngine`` does the same. The HTTP server (``app.py``) serves it like any
``ServedModel``, but the real engine (``engine.py``: the model and its decoder) lives in a
child process started with ``multiprocessing``'s ``spawn``:

- requests and their tokens cross a pipe: ``("generate", job, prompt, options, format)``
  goes down, ``("item", job, text)`` ... ``("end", job)`` come back; a request whose client
  left sends ``("cancel", job)``;
- when the child dies, every request it was serving gets ``ModelRestarted`` (the server
  answers it with a 503 in the request's API format, or a last error line when the stream
  had begun), and a new child is started; requests that arrive meanwhile wait for it;
- a liveness check pings the child every few seconds: a child that does not answer, or
  whose engine reports itself unhealthy (its decoder's thread has died, or one step of llama.cpp
  has run for more than ``generation.STALL_SECONDS``), is killed and restarted the same way; so is
  one whose cancelled request does not stop within ``CANCEL_GRACE``.

The child keeps no line of its own: the server's scheduler (``scheduler.py``) decides how many
requests run and wait, and when the cache may be forgotten; the child serves what it is sent.

The prompt is rendered here, in the server's process (it is Python and needs no model);
tokenizing and generating happen in the child. The cost of the pipe is one small message a
token: ``course_tools/benchmarks/supervisor.py`` measures it against the engine in the same process.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from course_lib.chat_template import Prompt, render_prompt
from course_server.generation import GenerationStats, ServedModel
from course_server.wire import Format, Options

EngineFactory = Callable[[], ServedModel]  # a top-level function or a functools.partial: it is pickled
CHILD_NICENESS = 10  # the model's process runs at a lower priority than the server's (see run_child)
CANCEL_GRACE = 30.0  # s a cancelled request may take to stop before the child is killed
POLL = 0.05  # s between checks of a request's cancel event while it waits for its next token


class ModelRestarted(RuntimeError):
    """The model's process stopped while serving this request (or could not be had in time);
    a new one is being started. The request was not completed: send it again."""


class ModelStartFailed(RuntimeError):
    """The model's process could not load the model."""


class SupervisedEngine:
    """A ``ServedModel`` whose engine runs in a child process that is restarted when it dies.

    ``factory`` builds the real engine in the child. The constructor returns once the first
    child has loaded its model (``ModelStartFailed`` if it could not).
    """

    def __init__(self, factory: EngineFactory, start_timeout: float = 600.0, ping_every: float = 5.0,
                 ping_timeout: float = 30.0, restart_wait: float = 600.0, cancel_grace: float = CANCEL_GRACE) -> None:
        self.factory = factory
        self.cancel_grace = cancel_grace  # s a cancelled request may take to stop before the child is killed
        self.start_timeout, self.ping_every, self.ping_timeout = start_timeout, ping_every, ping_timeout
        self.restart_wait = restart_wait  # how long a request waits for a restarting child
        self.restarts = 0  # children started after the first
        self.last_failure = ""  # why the last child stopped
        self._spawn = multiprocessing.get_context("spawn")
        self._jobs: dict[int, queue.SimpleQueue[tuple[str, Any]]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()  # guards _jobs, _connection and sending on it
        self._ready = threading.Event()
        self._closed = False
        self._start_child()
        threading.Thread(target=self._watch, name="model-liveness", daemon=True).start()

    # --- what the server uses (ServedModel) ---------------------------------------------

    @property
    def architecture(self) -> str:
        return self.info["architecture"]

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Prompt:
        """The chat rendered here, as the child's engine would render it (same template, same tokens)."""
        return render_prompt(self.template, messages, tools, add_generation_prompt=True,
                             bos_token=self.info["bos_token"], eos_token=self.info["eos_token"])

    def generate(self, prompt: str | Prompt, options: Options | None = None, format: Format = None,
                 cancel: threading.Event | None = None) -> Iterator[str | GenerationStats]:
        """The child's pieces for this request, as ``Engine.generate`` yields them."""
        job, replies = self._send_job("generate", prompt, options, format)
        finished = False
        cancelled_at: float | None = None
        try:
            while True:
                if cancel is not None and cancel.is_set() and cancelled_at is None:
                    self._send("cancel", job)
                    cancelled_at = time.monotonic()
                try:
                    kind, payload = replies.get(timeout=POLL)
                except queue.Empty:
                    if cancelled_at is not None and time.monotonic() - cancelled_at > self.cancel_grace:
                        self._kill(f"a cancelled request did not stop within {self.cancel_grace:.0f} s")
                        cancelled_at = float("inf")  # killed once; its ModelRestarted comes through replies
                    continue
                if kind == "item":
                    yield payload
                elif kind == "error":
                    finished = True
                    raise payload
                else:
                    finished = True
                    return
        finally:
            if not finished:
                self._send("cancel", job)
            with self._lock:
                self._jobs.pop(job, None)

    def forget_cache(self) -> None:
        """The child's engine forgets its cached prompts (``keep_alive: 0``)."""
        job, replies = self._send_job("forget")
        try:
            kind, payload = replies.get(timeout=self.restart_wait)
            if kind == "error":
                raise payload
        finally:
            with self._lock:
                self._jobs.pop(job, None)

    # --- the child's life -------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The child's process id (the test kills it to see the server recover)."""
        return self._process.pid

    def healthy(self) -> bool:
        """Whether a child is up and has its model loaded."""
        return self._ready.is_set() and self._process.is_alive()

    def close(self) -> None:
        """Stop the child (the server is shutting down)."""
        self._closed = True
        self._send("stop", -1)
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def _start_child(self) -> None:
        """Start a child and wait until its model is loaded; take its description."""
        here, there = self._spawn.Pipe()
        process = self._spawn.Process(target=run_child, args=(self.factory, there), name="model", daemon=True)
        process.start()
        there.close()
        if not here.poll(self.start_timeout):
            process.kill()
            raise ModelStartFailed(f"the model's process did not load its model within {self.start_timeout:.0f} s")
        try:
            kind, info = here.recv()
        except (EOFError, OSError):
            process.join(timeout=5)
            reason = exit_reason(process.exitcode)
            raise ModelStartFailed(f"the model's process stopped while loading ({reason})") from None
        if kind != "ready":
            process.kill()
            raise ModelStartFailed(f"the model's process could not load the model: {info}")
        self.info: dict[str, Any] = info
        self.name, self.path, self.parallel = info["name"], Path(info["path"]), info["parallel"]
        self.metadata, self.template = info["metadata"], info["template"]
        with self._lock:
            self._process, self._connection = process, here
        threading.Thread(target=self._read, args=(process, here), name="model-reader", daemon=True).start()
        self._ready.set()

    def _read(self, process: Any, connection: Connection) -> None:
        """Hand each message of the child to its request; when the child is gone, restart it."""
        while True:
            try:
                kind, job, payload = connection.recv()
            except (EOFError, OSError):
                break
            except Exception as error:  # a message that could not be unpickled: the pipe can no longer be trusted
                self.last_failure = f"unreadable message from the model's process ({error})"
                process.kill()
                break
            with self._lock:
                replies = self._jobs.get(job)
            if replies is not None:
                replies.put((kind, payload))
        self._child_gone(process, connection)

    def _child_gone(self, process: Any, connection: Connection) -> None:
        self._ready.clear()
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()
        reason = self.last_failure or exit_reason(process.exitcode)
        self.last_failure = ""
        with self._lock:
            failed, self._jobs = self._jobs, {}
        connection.close()
        if self._closed:
            return
        print(f"the model's process stopped ({reason}); restarting it", file=sys.stderr, flush=True)
        error = ModelRestarted(f"the model's process stopped ({reason}) and is being restarted; "
                               "this request was not completed, send it again")
        for replies in failed.values():
            replies.put(("error", error))
        while not self._closed:
            try:
                self._start_child()
                self.restarts += 1
                print(f"the model's process is back (restart {self.restarts})", file=sys.stderr, flush=True)
                return
            except ModelStartFailed as problem:
                print(f"{problem}; trying again in 5 s", file=sys.stderr, flush=True)
                time.sleep(5)

    def _send_job(self, kind: str, *arguments: Any) -> tuple[int, queue.SimpleQueue[tuple[str, Any]]]:
        """Register a job and send it to the child, once one is up (``ModelRestarted`` if none comes)."""
        if not self._ready.wait(self.restart_wait):
            raise ModelRestarted(f"the model's process is restarting and was not back within {self.restart_wait:.0f} s")
        job, replies = next(self._ids), queue.SimpleQueue[tuple[str, Any]]()
        with self._lock:
            self._jobs[job] = replies
        if not self._send(kind, job, *arguments):
            replies.put(("error", ModelRestarted("the model's process stopped before it got this request; "
                                                 "send it again")))
        return job, replies

    def _send(self, kind: str, job: int, *arguments: Any) -> bool:
        """Send one message to the child; False if it is gone."""
        with self._lock:
            try:
                self._connection.send((kind, job, *arguments))
                return True
            except (OSError, ValueError):  # closed: the reader restarts the child
                return False

    def _watch(self) -> None:
        """The liveness check: a child that does not answer a ping in time, or says its engine is
        unhealthy, is killed (and so restarted by its reader)."""
        while not self._closed:
            time.sleep(self.ping_every)
            if not self._ready.is_set():
                continue
            process = self._process
            try:
                job, replies = self._send_job("ping")
            except ModelRestarted:
                continue
            try:
                kind, healthy = replies.get(timeout=self.ping_timeout)
                problem = "" if kind == "item" and healthy else "its engine reported itself unhealthy"
            except queue.Empty:
                problem = f"it did not answer a liveness check within {self.ping_timeout:.0f} s"
            finally:
                with self._lock:
                    self._jobs.pop(job, None)
            if problem and process is self._process:
                self._kill(problem)

    def _kill(self, problem: str) -> None:
        """Kill the child for ``problem``; its reader then fails its requests and starts a new one."""
        if self._closed:
            return
        self.last_failure = problem
        print(f"killing the model's process: {problem}", file=sys.stderr, flush=True)
        self._process.kill()


def exit_reason(code: int | None) -> str:
    """``-11`` -> ``"killed by signal SIGSEGV"``; ``1`` -> ``"exit code 1"``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# --- the child ---------------------------------------------------------------------------


def run_child(factory: EngineFactory, connection: Connection) -> None:
    """The model's process: build the engine, say ready, then serve jobs until told to stop or the
    server is gone (its end of the pipe closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the server stops us
    if hasattr(os, "nice"):
        # llama.cpp's threads spin on every core for a while after each step. At equal priority
        # the server's threads, which pass each token on, wait for a time slice behind them: a
        # tool loop's second turn reached its first token at 0.84 to 0.89 of the in-process speed
        # with niceness 0 or 5, 0.97 with 10 (course_tools/benchmarks/supervisor.py, 2 cores). The price: a
        # busy program of normal priority beside the course now slows the model down more.
        os.nice(CHILD_NICENESS)
    try:
        engine = factory()
    except BaseException as error:
        connection.send(("failed", f"{type(error).__name__}: {error}"))
        return
    sending = threading.Lock()
    cancels: dict[int, threading.Event] = {}

    def send(kind: str, job: int, payload: Any = None) -> None:
        with sending:
            connection.send((kind, job, payload))

    connection.send(("ready", describe(engine)))
    while True:
        try:
            kind, job, *arguments = connection.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        if kind == "generate":
            cancels[job] = threading.Event()
            threading.Thread(target=serve_generation, args=(engine, job, arguments, cancels, send),
                             name=f"job-{job}", daemon=True).start()
        elif kind == "cancel":
            if event := cancels.get(job):
                event.set()
        elif kind == "forget":
            threading.Thread(target=serve_call, args=(engine.forget_cache, job, send), daemon=True).start()
        elif kind == "ping":
            healthy = getattr(engine, "healthy", None)
            send("item", job, healthy() if healthy else True)
        elif kind == "stop":
            break
    os._exit(0)  # daemon threads may be inside llama.cpp: leave without waiting for them


def serve_generation(engine: ServedModel, job: int, arguments: list[Any], cancels: dict[int, threading.Event],
                     send: Callable[[str, int, Any], None]) -> None:
    prompt, options, format = arguments
    try:
        for item in engine.generate(prompt, options, format, cancels[job]):
            send("item", job, item)
        send("end", job, None)
    except BaseException as error:
        send("error", job, portable(error))
    finally:
        cancels.pop(job, None)


def serve_call(call: Callable[[], Any], job: int, send: Callable[[str, int, Any], None]) -> None:
    try:
        call()
        send("end", job, None)
    except BaseException as error:
        send("error", job, portable(error))


def portable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling (the course's own errors do), else a ``RuntimeError``
    that says what it was: the server maps the kind of error to a status code."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def describe(engine: ServedModel) -> dict[str, Any]:
    """What the server needs to know of the child's engine, sent once it is loaded."""
    return {"name": engine.name, "path": str(engine.path), "parallel": engine.parallel,
            "metadata": dict(engine.metadata), "template": engine.template, "architecture": engine.architecture,
            "bos_token": getattr(engine, "bos_token", ""), "eos_token": getattr(engine, "eos_token", ""),
            **(engine.facts() if hasattr(engine, "facts") else {})}
