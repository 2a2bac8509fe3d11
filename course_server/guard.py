"""What the server refuses before it reads a request, and how it reads the body safely.

A model server on ``127.0.0.1`` is not private: every web page the learner opens runs
JavaScript that may send requests to it. Browsers send some requests (a POST with a
``text/plain`` body, say) without asking the server first, and a page can make its own
host name point at ``127.0.0.1`` (DNS rebinding) to read the answers. So, as Ollama does:

- a request that says it comes from a web page (``Origin``) is refused unless that page is
  on this machine (``localhost``, ``127.0.0.1``, ``[::1]``) or allowed in ``COURSE_ORIGINS``
  (comma-separated, ``*`` as a wildcard, like ``OLLAMA_ORIGINS``);
- a request whose ``Host`` is not a loopback name is refused while the server listens on
  loopback (a rebound name such as ``attacker.example`` gives itself away there);
- a body must be declared as JSON, arrive within ``BODY_SECONDS``, be UTF-8, fit in
  ``MAX_BODY_BYTES``, hold at most ``MAX_JSON_CONTAINERS`` lists and objects, nest at most
  ``MAX_JSON_DEPTH`` levels, and hold only finite numbers and well-formed text.

Each refusal is a 4xx with a message that says what to change, in the error format of the
API the path belongs to.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from course_lib import config
from course_lib.dialects.json_text import read_json
from course_server.wire import BODY_SECONDS, MAX_BODY_BYTES, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH

APP_SCHEMES = ("app", "file", "tauri", "vscode-webview", "vscode-file")  # Ollama allows these too


class ApiError(Exception):
    """An error the client caused or must wait out: ``status`` and a message that helps, sent in
    the error format of the API the request was made to (``app.error_body``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def is_loopback(host: str) -> bool:
    """``localhost``, ``*.localhost`` or a loopback address (``127.0.0.0/8``, ``::1``)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """``127.0.0.1:11434`` -> ``127.0.0.1``; ``[::1]:80`` -> ``::1``."""
    return urlsplit("//" + header).hostname or ""


def origin_allowed(origin: str, extra: list[str]) -> bool:
    """Whether a browser page at ``origin`` may use the server."""
    parts = urlsplit(origin)
    if parts.scheme in APP_SCHEMES:
        return True
    if parts.scheme in ("http", "https") and (parts.hostname == "0.0.0.0" or is_loopback(parts.hostname or "")):
        return True
    return any(fnmatch.fnmatchcase(origin, pattern) for pattern in extra)


def allowed_origins_from_env() -> list[str]:
    return config.extra_origins()


def check_origin_and_host(headers: dict[str, str], bound_host: str, extra_origins: list[str]) -> None:
    """Raise ``ApiError(403)`` for a foreign web page or a foreign ``Host`` name."""
    origin = headers.get("origin")
    if origin is not None and not origin_allowed(origin, extra_origins):
        raise ApiError(403, f"origin {origin!r} is not allowed: only pages on this machine may use this "
                              "server (set COURSE_ORIGINS to allow another)")
    host = headers.get("host")
    if host is not None and is_loopback(bound_host) and not is_loopback(host_name(host)):
        raise ApiError(403, f"host {host!r} is not allowed: this server answers only to loopback names "
                              "such as localhost and 127.0.0.1")


def check_content_type(content_type: str | None) -> None:
    """A body must say it is JSON (a browser can send ``text/plain`` to any site without asking)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind != "application/json" and not kind.endswith("+json"):
        raise ApiError(415, f"the body must be sent as Content-Type: application/json, not {kind or 'nothing'!r} "
                              "(curl: add -H 'Content-Type: application/json')")


async def read_limited(chunks: AsyncIterator[bytes], limit: int = MAX_BODY_BYTES,
                       seconds: float | None = None) -> bytes:
    """The whole body, or ``ApiError(413)`` as soon as it grows past ``limit`` bytes, or
    ``ApiError(408)`` if it has not all arrived within ``seconds`` (default ``BODY_SECONDS``: a
    client that trickles its body a byte at a time would otherwise hold its connection, and the
    memory, for ever)."""
    seconds = BODY_SECONDS if seconds is None else seconds
    body = bytearray()

    async def read() -> None:
        async for chunk in chunks:
            body.extend(chunk)
            if len(body) > limit:
                raise ApiError(413, f"the request body is larger than {limit // (1024 * 1024)} MiB")

    try:
        await asyncio.wait_for(read(), seconds)
    except asyncio.TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {seconds:g} s") from None
    return bytes(body)


def count_containers(body: bytes, limit: int = MAX_JSON_CONTAINERS) -> None:
    """Refuse a body that could hold more than ``limit`` lists and objects, before parsing it.

    Parsing is one call into C that holds Python's lock for as long as it runs, whatever thread
    it runs on: a 4 MiB body of empty lists took about a second, in which nothing else of the
    server ran. Counting brackets and braces takes a millisecond; those inside strings count
    too, so the count is an upper bound."""
    containers = body.count(b"[") + body.count(b"{")
    if containers > limit:
        raise ApiError(400, f"invalid JSON body: it may hold at most {limit:,} lists and objects "
                            f"(counting every [ and {{, {containers:,} here)")


def parse_json_object(body: bytes) -> dict[str, Any]:
    """Decode a UTF-8 JSON object, refusing what would hurt later: other encodings, too many
    lists and objects, ``NaN``/``Infinity`` and numbers that overflow, deep nesting, lone surrogates."""
    count_containers(body)
    data = parse_json(body)
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return data


def parse_json(body: bytes) -> Any:
    """Decode any UTF-8 JSON value with the checks of ``parse_json_object``."""
    if b"\x00" in body:  # JSON text never holds a NUL byte; UTF-16 text is full of them
        raise ApiError(400, "invalid JSON body: it must be UTF-8 (it holds NUL bytes: UTF-16?)")
    try:
        text = body.decode("utf-8") if body else "{}"
    except UnicodeDecodeError as error:
        raise ApiError(400, f"invalid JSON body: it must be UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        return read_json(text, MAX_JSON_DEPTH)  # the same strict rules as JSON inside JSON (dialects/json_text.py)
    except ValueError as error:  # not JSON, NaN, overflow, too deep, a lone surrogate
        raise ApiError(400, f"invalid JSON body: {error}") from None


ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def check_api_key(headers: dict[str, str], path: str, api_key: str | None) -> None:
    """Raise ``ApiError(401)`` unless the request carries the server's key (when it has one).

    A server that listens beyond this machine (``--host 0.0.0.0``, a room's server) requires a
    key, as llama-server's and vLLM's ``--api-key`` do: ``Authorization: Bearer KEY`` (Ollama's
    and OpenAI's clients) or ``x-api-key: KEY`` (Anthropic's). Only ``GET /``, the health check,
    is open. The comparison takes the same time whatever the guess.
    """
    if api_key is None or path == "/":
        return
    bearer = headers.get("authorization", "")
    given = bearer[7:].strip() if bearer[:7].lower() == "bearer " else headers.get("x-api-key", "")
    if not secrets.compare_digest(given.encode(), api_key.encode()):
        raise ApiError(401, "invalid or missing API key: this server requires 'Authorization: Bearer KEY' "
                            "(the key is in COURSE_API_KEY)" if not given else "invalid API key")


REQUESTS_PER_SECOND = 10.0  # what one client of a room may send, on average
REQUEST_BURST = 40  # and at once


class RequestRate:
    """A token bucket per client address: ``rate`` requests a second on average, ``burst`` at once.

    A request refused at once (a bad key, a schema too complex) costs the server little, but a
    client that sends thousands a second takes a core from the model's process, which runs at a
    lower priority (``supervisor.CHILD_NICENESS``), and so from every other learner's answer."""

    def __init__(self, rate: float = REQUESTS_PER_SECOND, burst: int = REQUEST_BURST) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}  # address: (tokens, when)

    def allow(self, address: str) -> bool:
        now = time.monotonic()
        tokens, when = self._buckets.get(address, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.rate)
        if len(self._buckets) > 10_000:  # forget the quiet ones (a bucket refills in seconds)
            self._buckets = {key: value for key, value in self._buckets.items() if now - value[1] < 60}
        self._buckets[address] = (tokens - 1 if tokens >= 1 else tokens, now)
        return tokens >= 1


class OriginAndHostGuard:
    """ASGI middleware: refuse foreign origins and hosts, a room's client that sends more than its
    ``RequestRate`` (429), and requests without the server's key (if it has one), before any route
    runs and before any body is read."""

    def __init__(self, app: ASGIApp, bound_host: str, error_body: Callable[[str, str, int], dict[str, Any]],
                 extra_origins: list[str] | None = None, api_key: str | None = None) -> None:
        self.app = app
        self.rate = RequestRate()
        self.bound_host = bound_host
        self.error_body = error_body
        self.extra_origins = allowed_origins_from_env() if extra_origins is None else extra_origins
        self.api_key = api_key

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] == "http":
            headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
            client = scope.get("client") or ("", 0)
            try:
                if (not is_loopback(self.bound_host) and not is_loopback(client[0] or "localhost")
                        and not self.rate.allow(client[0])):  # only a room's server tells clients apart
                    raise ApiError(429, f"too many requests from this address: at most {REQUESTS_PER_SECOND:g} a "
                                        "second on average; wait a moment")
                check_origin_and_host(headers, self.bound_host, self.extra_origins)
                check_api_key(headers, scope["path"], self.api_key)
            except ApiError as refused:
                body = json.dumps(self.error_body(scope["path"], refused.message, refused.status)).encode()
                await send({"type": "http.response.start", "status": refused.status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
