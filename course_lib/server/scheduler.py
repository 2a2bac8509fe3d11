"""One generation at a time, a bounded line of waiting requests, and stop-on-disconnect.

llama.cpp may only be used by one thread at a time, so the server hands each request's
generation to a worker thread that first takes the model lock. Requests that arrive
while the model is busy wait their turn; when ``max_queue`` are already waiting, a new
one is turned away at once (HTTP 503, as Ollama does) rather than piling up.

Each generation gets a ``cancel`` event. When the client goes away mid-stream, the
server sets it and the worker stops at the next token, freeing the model for the
next request.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from ..chat_template import Prompt
from .engine import GenerationStats, ServedModel
from .wire import Format, Options

_END = object()


class QueueFull(RuntimeError):
    """Too many requests are already waiting for the model."""


class Scheduler:
    def __init__(self, engine: ServedModel, max_queue: int = 8) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self._model_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._admitted = 0  # running plus waiting
        self._cancels: set[threading.Event] = set()

    def admit(self) -> None:
        """Take a place in line, or raise ``QueueFull``. Pair with ``generate()``."""
        with self._count_lock:
            if self._admitted > self.max_queue:  # one running plus max_queue waiting
                raise QueueFull("server busy, please try again. maximum pending requests exceeded")
            self._admitted += 1

    def _leave(self) -> None:
        with self._count_lock:
            self._admitted -= 1

    async def generate(self, prompt: str | Prompt, options: Options | None,
                       format: Format) -> AsyncIterator[str | GenerationStats]:
        """The engine's pieces, produced on a worker thread once the model is free.

        The caller must have called ``admit()``. Closing this iterator early (the
        client disconnected) cancels the generation.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancel = threading.Event()
        self._cancels.add(cancel)

        def deliver(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is gone (server shutting down)
                cancel.set()

        def work() -> None:
            try:
                with self._model_lock:
                    if not cancel.is_set():
                        for item in self.engine.generate(prompt, options, format, cancel):
                            deliver(item)
            except Exception as error:  # handed to the request, which turns it into {"error": ...}
                deliver(error)
            finally:
                self._leave()
                deliver(_END)

        threading.Thread(target=work, name="generation", daemon=True).start()
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            cancel.set()
            self._cancels.discard(cancel)

    async def forget_cache(self) -> None:
        """Drop the engine's cached prompt once the model is free (after any running generation)."""
        def work() -> None:
            with self._model_lock:
                self.engine.forget_cache()
        await asyncio.to_thread(work)

    def cancel_all(self) -> None:
        """Stop every generation (used at shutdown)."""
        for cancel in list(self._cancels):
            cancel.set()

    @property
    def busy(self) -> bool:
        return self._model_lock.locked()

    @property
    def pending(self) -> int:
        """Generations whose requests still wait for them: the running one and those in line."""
        return len(self._cancels)
