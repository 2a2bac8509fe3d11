"""A thin client for Ollama's HTTP API that hides nothing.

Every method sends one HTTP request with httpx and returns the JSON that came back, as
a plain ``dict``: what you get is exactly what was on the wire. With ``echo=True`` the
client also prints each request and response, and ``client.last`` always holds the
last exchange for you to look at.

>>> client = Client("http://127.0.0.1:11434")           # doctest: +SKIP
>>> reply = client.chat([{"role": "user", "content": "Hi"}])  # doctest: +SKIP
>>> reply["message"]["content"]                          # doctest: +SKIP
'Hello! How can I help you today?'

An error answer (``{"error": "..."}`` with a 4xx/5xx status) raises ``OllamaError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from course_lib import config
from course_lib.config import DEFAULT_MODEL

DEFAULT_HOST = "http://127.0.0.1:11434"


class OllamaError(Exception):
    """The server answered with an error: ``status`` is the HTTP status, ``message`` its text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass
class Exchange:
    """One request and what came back (a dict, or the list of streamed lines)."""

    method: str
    path: str
    request: dict[str, Any] | None
    status: int = 0
    response: Any = None
    lines: list[dict[str, Any]] = field(default_factory=list)


def resolve_host(value: str | None = None) -> str:
    """Ollama's rules for ``OLLAMA_HOST``: scheme defaults to http, port to 11434."""
    value = (value or config.ollama_host() or DEFAULT_HOST).strip()
    if "://" not in value:
        value = "http://" + value
    parts = urlsplit(value)
    host = parts.hostname or "127.0.0.1"
    if host == "0.0.0.0":  # a server address to listen on, not one to call
        host = "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 11434)
    return f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')}"


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer KEY`` for a server that requires a key (Ollama's and OpenAI's way)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Client:
    """Talks to one Ollama-compatible server, with ``model`` as the default model."""

    def __init__(self, host: str | None = None, model: str = DEFAULT_MODEL,
                 timeout: float = 300.0, echo: bool = False, api_key: str | None = None) -> None:
        self.host = resolve_host(host)
        self.model = model
        self.echo = echo
        self.last: Exchange | None = None
        self.api_key = api_key or config.api_key()  # a room's server wants it (COURSE_API_KEY)
        self._http = httpx.Client(base_url=self.host, timeout=timeout, headers=auth_headers(self.api_key))

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
             options: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        """``POST /api/chat`` without streaming: one JSON object with ``message``."""
        return self.post("/api/chat", self._body(messages=messages, tools=tools, options=options,
                                                 stream=False, **fields))

    def unload(self) -> dict[str, Any]:
        """Ollama's way to unload the model: an empty chat with ``keep_alive: 0``. The course's
        server keeps the weights and forgets its cached prompt, so the next request starts cold."""
        return self.chat([], keep_alive=0)

    def chat_stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    options: dict[str, Any] | None = None, **fields: Any) -> Iterator[dict[str, Any]]:
        """``POST /api/chat`` streaming: yields each NDJSON line as it arrives."""
        return self.stream("/api/chat", self._body(messages=messages, tools=tools, options=options,
                                                   stream=True, **fields))

    def generate(self, prompt: str, raw: bool = False, options: dict[str, Any] | None = None,
                 **fields: Any) -> dict[str, Any]:
        """``POST /api/generate``; with ``raw=True`` the prompt goes to the model as is."""
        return self.post("/api/generate", self._body(prompt=prompt, raw=raw, options=options,
                                                     stream=False, **fields))

    def show(self, model: str | None = None) -> dict[str, Any]:
        """``POST /api/show``: the model's template, details, metadata and capabilities."""
        return self.post("/api/show", {"model": model or self.model})

    def tags(self) -> dict[str, Any]:
        """``GET /api/tags``: the models this server has."""
        return self._send("GET", "/api/tags", None)

    def version(self) -> str:
        return self._send("GET", "/api/version", None)["version"]

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send any JSON body to any path; return the JSON answer."""
        return self._send("POST", path, body)

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send a streaming request; yield each line of the NDJSON answer as a dict."""
        exchange = self._start("POST", path, body)
        with self._http.stream("POST", path, json=body) as response:
            exchange.status = response.status_code
            if response.is_error:
                response.read()
                self._raise(exchange, response)
            for text in response.iter_lines():
                if not text:
                    continue
                line = json.loads(text)
                exchange.lines.append(line)
                self._print("<-", line)
                if "error" in line:  # an error after streaming began arrives as the last line
                    raise OllamaError(response.status_code, line["error"])
                yield line

    def close(self) -> None:
        self._http.close()

    def _body(self, **fields: Any) -> dict[str, Any]:
        fields.setdefault("model", self.model)
        return {key: value for key, value in fields.items() if value is not None}

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        exchange = self._start(method, path, body)
        response = self._http.request(method, path, json=body)
        exchange.status = response.status_code
        if response.is_error:
            self._raise(exchange, response)
        exchange.response = response.json()
        self._print(f"<- {response.status_code}", exchange.response)
        return exchange.response

    def _start(self, method: str, path: str, body: dict[str, Any] | None) -> Exchange:
        self.last = Exchange(method, path, body)
        self._print(f"-> {method} {path}", body)
        return self.last

    def _raise(self, exchange: Exchange, response: httpx.Response) -> None:
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text
        exchange.response = {"error": message}
        self._print(f"<- {response.status_code}", exchange.response)
        raise OllamaError(response.status_code, message)

    def _print(self, label: str, data: Any) -> None:
        if self.echo:
            print(label, json.dumps(data, ensure_ascii=False) if data is not None else "")

    def __repr__(self) -> str:
        return f"Client(host={self.host!r}, model={self.model!r})"
