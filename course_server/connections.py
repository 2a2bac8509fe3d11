"""How many connections the server holds, and how long one may take to say what it wants.

Before a request reaches the application (``app.py``), and so before its API key is checked
(``guard.py``), it is only a connection sending bytes. A client that opens hundreds of them and
sends a header line every few seconds ("slowloris") would hold them all for ever: uvicorn waits
for the headers with no deadline, and each connection takes a file descriptor and some memory.
So, with uvicorn's own settings where they serve (``uvicorn_limits``):

- at most ``MAX_CONNECTIONS`` connections and requests at once (uvicorn's ``limit_concurrency``:
  beyond it a request is answered ``503`` at once), and at most ``MAX_CONNECTIONS_PER_CLIENT``
  from one address other than this machine's (``BoundedH11Protocol``: the next one is closed when
  it opens; on this machine every program is one address, and it is the learner's own);
- a request's headers must be complete within ``HEADER_SECONDS`` of the connection opening, or of
  the previous response on a kept-alive connection (``BoundedH11Protocol``: uvicorn has no such
  deadline), and may be at most ``MAX_HEADER_BYTES`` (h11's ``max_incomplete_event_size``);
- an idle kept-alive connection is closed after ``KEEP_ALIVE_SECONDS`` (``timeout_keep_alive``);
- the body must then arrive within ``wire.BODY_SECONDS`` (``guard.read_limited``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from course_server.guard import is_loopback

MAX_CONNECTIONS = 128  # connections and requests at once (uvicorn's limit_concurrency)
MAX_CONNECTIONS_PER_CLIENT = 32  # connections at once from one address
HEADER_SECONDS = 10.0  # a request's headers must be complete within this
KEEP_ALIVE_SECONDS = 5.0  # an idle connection between two requests is closed after this
MAX_HEADER_BYTES = 16 * 1024  # a request line and headers at most (h11's limit on an incomplete event)


def uvicorn_limits(max_connections: int = MAX_CONNECTIONS) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.Config`` that bound connections."""
    return {"http": BoundedH11Protocol, "limit_concurrency": max_connections,
            "timeout_keep_alive": KEEP_ALIVE_SECONDS, "h11_max_incomplete_event_size": MAX_HEADER_BYTES}


class BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers and a cap on the
    connections of one client address."""

    open_by_client: Counter[str] = Counter()  # the server's connections by client address (one event loop)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self.open_by_client[self._address] += 1
        self._header_timer: asyncio.TimerHandle | None = None
        if self.open_by_client[self._address] > MAX_CONNECTIONS_PER_CLIENT and not is_loopback(self._address):
            transport.close()  # too many from this address: uvicorn's connection_lost tidies up
            return
        self._await_headers()

    def _await_headers(self) -> None:
        """Start the clock for the next request's headers."""
        self._cancel_header_timer()
        self._waiting_cycle = self.cycle
        self._header_timer = self.loop.call_later(HEADER_SECONDS, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.cycle is self._waiting_cycle and not self.transport.is_closing():
            self.transport.close()  # no request line and headers in time: nothing to answer

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._header_timer is not None and self.cycle is not self._waiting_cycle:
            self._cancel_header_timer()  # the headers are in: a request runs

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self.open_by_client[self._address] -= 1
        if self.open_by_client[self._address] <= 0:
            del self.open_by_client[self._address]
        super().connection_lost(exc)
