"""Helpers the tests share: constants, a scripted stand-in for the model, a server in a thread.

Fixtures live in ``conftest.py`` (pytest finds them there); plain code that tests import
lives here, because ``from conftest import ...`` imports a file pytest treats specially.

``FakeEngine`` is what makes the server testable in seconds. ``create_app`` serves anything
shaped like ``engine.ServedModel``; the fake renders prompts with the real Qwen2.5 chat
template and "generates" scripted replies token by token through the engine's own
``generated_text``, so stop strings, ``num_predict`` and UTF-8 decoding behave as they do
with the real model::

    engine = FakeEngine(tmp_path / "fake.gguf")
    engine.say("Hello!", ['<tool_call>{"name": "now", ', '"arguments": {}}</tool_call>'])
    client = TestClient(create_app(engine), base_url="http://localhost")
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import uvicorn

from course_lib.chat_template import Prompt, render_prompt
from course_server.generation import Ending, GenerationStats, PromptTooLong, generated_text
from course_server.wire import Format, Options

GREEDY = {"temperature": 0, "seed": 42, "num_predict": 48}
NOW_TOOL = {"type": "function", "function": {
    "name": "now", "description": "Return the current UTC time in ISO-8601 format.",
    "parameters": {"type": "object", "properties": {}, "required": []}}}


def now() -> str:
    """Return the current UTC time in ISO-8601 format."""
    return datetime.now(timezone.utc).isoformat()


QWEN_TEMPLATE = (Path(__file__).parent / "fixtures" / "qwen2.5-coder.jinja").read_text()
FAKE_MODEL = "fake-model"
DEFAULT_REPLY = "Hello from the fake model."
# Words with the space before them, single punctuation marks, and whitespace: roughly how
# a real tokenizer cuts English, so "<tool_call>" arrives as "<", "tool_call", ">".
TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")

Token = str | bytes | Exception  # an Exception is raised when generation reaches it
Reply = str | Sequence[Token]  # a text (cut with TOKEN), or the tokens themselves


def tokens_of(text: str) -> list[str]:
    """``text`` cut into word-sized tokens."""
    return TOKEN.findall(text)


@dataclass
class Run:
    """One call of ``FakeEngine.generate``: what it was asked, and how far it got."""

    prompt: str | Prompt
    options: Options | None
    format: Format
    tokens_sampled: int = 0  # tokens produced so far (the last may not have been used)
    ending: Ending | None = None  # set when the generation is over

    @property
    def prompt_text(self) -> str:
        return self.prompt.text if isinstance(self.prompt, Prompt) else self.prompt


class FakeEngine:
    """A stand-in for ``Engine``: scripted replies, no llama.cpp, no model file to load.

    ``say()`` queues replies, one per generation; when none is queued it says
    ``DEFAULT_REPLY``. ``delay`` seconds pass before each token, which makes generations
    slow enough to hang up on; ``unpaused.clear()`` makes them wait before their next token
    until ``unpaused.set()``, which holds the model busy for as long as a test needs.
    ``runs`` records every generation.
    """

    architecture = "qwen2"
    parallel = 1

    def __init__(self, path: Path, replies: Iterable[Reply] = (), delay: float = 0.0,
                 name: str = FAKE_MODEL, n_ctx: int = 4096) -> None:
        self.name, self.path, self.delay, self.n_ctx = name, path, delay, n_ctx
        if not path.exists():
            path.write_bytes(b"GGUF, but only pretending")
        self.template = QWEN_TEMPLATE
        self.metadata = {"general.architecture": "qwen2", "general.size_label": "tiny",
                         "general.file_type": "15", "qwen2.context_length": str(n_ctx),
                         "tokenizer.chat_template": QWEN_TEMPLATE}
        self.replies: deque[Reply] = deque(replies)
        self.runs: list[Run] = []
        self.unpaused = threading.Event()
        self.unpaused.set()
        self.forgotten = 0  # times forget_cache() was called

    def say(self, *replies: Reply) -> None:
        """Queue replies for the next generations, in order."""
        self.replies.extend(replies)

    def forget_cache(self) -> None:
        self.forgotten += 1

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Prompt:
        return render_prompt(self.template, messages, tools, add_generation_prompt=True,
                             bos_token="", eos_token="<|endoftext|>")

    def generate(self, prompt: str | Prompt, options: Options | None = None, format: Format = None,
                 cancel: threading.Event | None = None) -> Iterator[str | GenerationStats]:
        """As ``Engine.generate``: text pieces, then the stats (durations are made up)."""
        settings = options.model_dump(exclude_none=True) if options else {}
        n_ctx = settings.get("num_ctx", self.n_ctx)
        run = Run(prompt, options, format)
        prompt_tokens = len(tokens_of(run.prompt_text))
        if prompt_tokens >= n_ctx:
            raise PromptTooLong(f"the prompt is {prompt_tokens} tokens but num_ctx is {n_ctx}")
        self.runs.append(run)
        reply = self.replies.popleft() if self.replies else DEFAULT_REPLY
        num_predict = settings.get("num_predict", -1)
        budget = min(num_predict if num_predict >= 0 else n_ctx, n_ctx - prompt_tokens)
        run.ending = yield from generated_text(self._sampled_bytes(reply, run), settings.get("stop") or [],
                                               budget, cancel)
        yield GenerationStats(run.ending.done_reason, prompt_tokens, 1_000_000, run.ending.eval_count,
                              1_000_000 * run.ending.eval_count)

    def _sampled_bytes(self, reply: Reply, run: Run) -> Iterator[bytes]:
        for token in tokens_of(reply) if isinstance(reply, str) else reply:
            time.sleep(self.delay)
            if not self.unpaused.wait(timeout=30):
                raise TimeoutError("the test never called unpaused.set()")
            if isinstance(token, Exception):
                raise token
            run.tokens_sampled += 1
            yield token.encode() if isinstance(token, str) else token


def wait_until(condition: Callable[[], Any], timeout: float = 5.0) -> None:
    """Poll ``condition`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout} s")
        time.sleep(0.01)


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free port, in a thread; yield its URL.

    ``TestClient`` runs the app in-process and hands over a whole response at once, so it
    cannot hang up halfway. A real server on a socket can be hung up on, as a user would.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        listener.close()
