"""The one admission layer: as many generations at a time as the engine has slots, a bounded
line of waiting requests, quiet moments for forgetting the cache, and stop-on-disconnect.

The server hands each request's generation to a worker thread that first takes one of the
engine's ``parallel`` slots: 1 for the one-at-a-time decoder (a llama.cpp context may only be
used by one thread at a time), more for the batched decoder (``batching.py``), which decodes
them together. Requests that arrive while every slot is busy wait their turn here; when
``max_queue`` are already waiting, a new one is turned away at once (HTTP 503, as Ollama does)
rather than piling up. Nothing below this decides that: the decoders, and the model's own
process (``supervisor.py``), take what they are handed.

Forgetting the cache (``keep_alive: 0``) takes a place in line too, and then every slot, so it
runs when no generation does.

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
from .generation import GenerationStats, ServedModel
from .wire import Format, Options

_END = object()


class QueueFull(RuntimeError):
    """Too many requests are already waiting for the model."""


class Scheduler:
    def __init__(self, engine: ServedModel, max_queue: int = 8) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self.parallel = engine.parallel
        self._slots = threading.Semaphore(self.parallel)
        self._all_slots = threading.Lock()  # held while taking every slot (forget_cache)
        self._count_lock = threading.Lock()
        self._admitted = 0  # running plus waiting
        self._cancels: set[threading.Event] = set()

    def admit(self) -> None:
        """Take a place in line, or raise ``QueueFull``. Pair with ``generate()``."""
        with self._count_lock:
            if self._admitted >= self.parallel + self.max_queue:  # every slot busy and max_queue waiting
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

        left = False

        def leave_once() -> None:
            nonlocal left
            if not left:
                left = True
                self._leave()

        def work() -> None:
            try:
                with self._slots:  # one of the engine's slots
                    if not cancel.is_set():
                        for item in self.engine.generate(prompt, options, format, cancel):
                            if isinstance(item, GenerationStats):
                                leave_once()  # the reply is complete: its client may send the next one now
                            deliver(item)
            except Exception as error:  # handed to the request, which turns it into {"error": ...}
                deliver(error)
            finally:
                leave_once()
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
        """Drop the engine's cached prompts once the model is free (after any running generation).

        It waits for every slot, so it takes a place in line as a generation does: ``QueueFull``
        when the line is full (a flood of them must not pile up behind the model).
        """
        self.admit()

        def work() -> None:
            with self._all_slots:
                for _ in range(self.parallel):
                    self._slots.acquire()
                try:
                    self.engine.forget_cache()
                finally:
                    for _ in range(self.parallel):
                        self._slots.release()
        try:
            await asyncio.to_thread(work)
        finally:
            self._leave()

    def cancel_all(self) -> None:
        """Stop every generation (used at shutdown)."""
        for cancel in list(self._cancels):
            cancel.set()

    @property
    def pending(self) -> int:
        """Generations whose requests still wait for them: the running ones and those in line."""
        return len(self._cancels)
