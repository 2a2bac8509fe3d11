"""The one admission layer: as many generations at a time as the engine has slots, a bounded
line of waiting requests, quiet moments for forgetting the cache, and stop-on-disconnect.

The server hands each request's generation to a worker thread that first takes one of the
engine's ``parallel`` slots: 1 for the one-at-a-time decoder (a llama.cpp context may only be
used by one thread at a time), more for the batched decoder (``batching.py``), which decodes
them together. Requests that arrive while every slot is busy wait their turn here; when
``max_queue`` are already waiting, a new one is turned away at once (HTTP 503, as Ollama does)
rather than piling up. Nothing below this decides that: the decoders, and the model's own
process (``supervisor.py``), take what they are handed.

The line is fair between clients (``FairSlots``): when a slot frees up, it goes to the waiting
request whose client (its address) has the fewest generations running, the earliest first among
those; and a client that is not on this machine may hold at most ``per_client`` places, running
or waiting (a ``503`` beyond that). So one learner of a room who sends many requests, or slow
ones, delays the others by at most one generation's time budget per slot it holds
(``generation.TimeBudget``), not by their whole line.

And a slot is not held for ever while others wait: a generation that has sent ``fair_tokens``
pieces (about as many tokens; 512 by default) and sees a request waiting for a slot ends at its
next token, with ``done_reason`` ``"length"`` (OpenAI's ``finish_reason`` and Anthropic's
``stop_reason`` say the same), as if it had reached its ``num_predict``. Alone it runs on, up to
its time budget. So a request waits for a slot at most the time of that many tokens of each
generation ahead of it, however long those asked to be.

Forgetting the cache (``keep_alive: 0``) takes a place in line too, and then every slot, so it
runs when no generation does.

Each generation gets a ``cancel`` event. When the client goes away mid-stream, the
server sets it and the worker stops at the next token, freeing the model for the
next request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from course_lib.chat_template import Prompt
from course_server.generation import GenerationStats, ServedModel
from course_server.wire import Format, Options

_END = object()


class QueueFull(RuntimeError):
    """Too many requests are already waiting for the model."""


LOCAL = ""  # the client name of requests from this machine (and of forgetting the cache)
FAIR_TOKENS = 512  # pieces a generation may send before it gives its slot to a waiting request


class FairSlots:
    """``slots`` places to generate in, given out fairly between clients: to the waiting request
    whose client has the fewest places now, the earliest first among those."""

    def __init__(self, slots: int) -> None:
        self.free = slots
        self.running: Counter[str] = Counter()
        self._waiting: list[tuple[int, str]] = []  # (ticket, client), in order of arrival
        self._tickets = itertools.count()
        self._changed = threading.Condition()

    def acquire(self, client: str, cancel: threading.Event | None = None) -> bool:
        """Wait for a place; False if ``cancel`` was set first (the client left)."""
        with self._changed:
            ticket = (next(self._tickets), client)
            self._waiting.append(ticket)
            try:
                while True:
                    if cancel is not None and cancel.is_set():
                        return False
                    if self.free > 0 and self._next() == ticket:
                        break
                    self._changed.wait(timeout=0.25)
                self.free -= 1
                self.running[client] += 1
                return True
            finally:
                self._waiting.remove(ticket)
                self._changed.notify_all()

    def release(self, client: str) -> None:
        with self._changed:
            self.free += 1
            self.running[client] -= 1
            if self.running[client] <= 0:
                del self.running[client]
            self._changed.notify_all()

    @property
    def wanted(self) -> bool:
        """Whether a request is waiting for a place."""
        return bool(self._waiting)

    def _next(self) -> tuple[int, str]:
        return min(self._waiting, key=lambda ticket: (self.running[ticket[1]], ticket[0]))


class Scheduler:
    """The line in front of the engine's slots. ``per_client``: the places (running or waiting) one
    client that is not on this machine may hold (default: a quarter of all places, at least 4).
    ``fair_tokens``: the pieces a generation sends before it gives its slot up to a waiting request."""

    def __init__(self, engine: ServedModel, max_queue: int = 8, per_client: int | None = None,
                 fair_tokens: int = FAIR_TOKENS) -> None:
        self.engine = engine
        self.fair_tokens = fair_tokens  # 0: a generation keeps its slot while others wait
        self.max_queue = max_queue
        self.parallel = engine.parallel
        self.per_client = per_client or max(4, (self.parallel + max_queue) // 4)
        self._slots = FairSlots(self.parallel)
        self._all_slots = threading.Lock()  # held while taking every slot (forget_cache)
        self._count_lock = threading.Lock()
        self._admitted = 0  # running plus waiting
        self._by_client: Counter[str] = Counter()
        self._cancels: set[threading.Event] = set()
        self._forgetting = False  # a forget_cache is waiting or running: another one has nothing to add

    def admit(self, client: str = LOCAL) -> None:
        """Take a place in line for ``client`` (an address; ``LOCAL`` for this machine), or raise
        ``QueueFull``. Pair with ``generate()``, which gives the place back."""
        with self._count_lock:
            if self._admitted >= self.parallel + self.max_queue:  # every slot busy and max_queue waiting
                raise QueueFull("server busy, please try again. maximum pending requests exceeded")
            if client != LOCAL and self._by_client[client] >= self.per_client:
                raise QueueFull(f"server busy: this client already has {self.per_client} requests running or "
                                "waiting; wait for one of them to finish")
            self._admitted += 1
            self._by_client[client] += 1

    def _leave(self, client: str = LOCAL) -> None:
        with self._count_lock:
            self._admitted -= 1
            self._by_client[client] -= 1
            if self._by_client[client] <= 0:
                del self._by_client[client]

    async def generate(self, prompt: str | Prompt, options: Options | None,
                       format: Format, client: str = LOCAL) -> AsyncIterator[str | GenerationStats]:
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
                self._leave(client)

        def work() -> None:
            try:
                if self._slots.acquire(client, cancel):  # one of the engine's slots, fairly
                    try:
                        sent, gave_way = 0, False
                        for item in self.engine.generate(prompt, options, format, cancel):
                            if isinstance(item, GenerationStats):
                                leave_once()  # the reply is complete: its client may send the next one now
                                if gave_way:  # cut short for the others, as a token budget would
                                    item = dataclasses.replace(item, done_reason="length")
                            else:
                                sent += 1
                            deliver(item)
                            if (self.fair_tokens and sent >= self.fair_tokens and not gave_way
                                    and self._slots.wanted):
                                gave_way = True
                                cancel.set()  # the engine stops at its next token and sends its stats
                    finally:
                        self._slots.release(client)
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

    async def forget_cache(self, client: str = LOCAL) -> None:
        """Drop the engine's cached prompts once the model is free (after any running generation).

        It waits for every slot, so it takes a place in line as a generation does, in ``client``'s
        name (its share of the line, as a generation's): ``QueueFull`` when the line is full. One
        forget at a time: while one waits or runs, another returns at once (the cache will be
        empty all the same), so a flood of them holds neither the line nor threads.
        """
        with self._count_lock:
            if self._forgetting:
                return
            self._forgetting = True
        try:
            self.admit(client)
        except QueueFull:
            self._forgetting = False
            raise

        def work() -> None:
            with self._all_slots:
                for _ in range(self.parallel):
                    self._slots.acquire(LOCAL)
                try:
                    self.engine.forget_cache()
                finally:
                    for _ in range(self.parallel):
                        self._slots.release(LOCAL)
        try:
            await asyncio.to_thread(work)
        finally:
            self._forgetting = False
            self._leave(client)

    def cancel_all(self) -> None:
        """Stop every generation (used at shutdown)."""
        for cancel in list(self._cancels):
            cancel.set()

    @property
    def pending(self) -> int:
        """Generations whose requests still wait for them: the running ones and those in line."""
        return len(self._cancels)
