"""One span per tool call, and what each turn of the loop cost.

A span records that a tool ran: which one, in which run (``trace_id``), how long it
took, whether it worked and, if not, what *kind* of error it was. It deliberately does
not record the arguments or the error text: those can hold names, addresses, order
details or an attacker's payload, and logs are read by many people and kept for a long
time. A keyed hash of the canonical arguments is enough to see that two calls were the
same call. Nor does it record a tool name the model made up: that is model text too (an
injected page can make the model "call" a tool named like a sentence), so a name that was
not declared is logged as ``"unknown"``.

``Tracer.wrap(execute)`` turns any executor of the agent loop into a traced one; spans
go to the Python ``logging`` module as one JSON object per line and stay in
``tracer.spans`` for a notebook table. ``export_to_opentelemetry`` sends them on when
the ``opentelemetry`` package is installed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from .tools import canonical_arguments, is_error

log = logging.getLogger("course_lib.tool_call")
Executor = Callable[[str, dict[str, Any]], str]
UNKNOWN_TOOL = "unknown"
_PROCESS_SECRET = secrets.token_bytes(32)  # for argument_hash calls that bring no secret


def argument_hash(arguments: dict[str, Any], secret: bytes | None = None) -> str:
    """A short fingerprint of the canonical arguments: equal calls, equal hashes; no values.

    Keyed (HMAC-SHA256), because a plain hash of a value with few possibilities is no
    secret: there are 10,000 order ids ORD-0000 ... ORD-9999, and whoever reads the log can
    hash them all in a few milliseconds and look the logged hash up. The same goes for
    SKUs, amounts, dates, yes/no. Without ``secret`` that table cannot be built. The secret
    stays in memory and never goes into a log; without one, a secret made for this process
    is used, so hashes compare within the process and mean nothing outside it.
    """
    key = _PROCESS_SECRET if secret is None else secret
    return hmac.new(key, canonical_arguments(arguments).encode(), hashlib.sha256).hexdigest()[:16]


def error_type(result: str) -> str | None:
    """The kind of failure a tool result reports, from the course's error prefixes."""
    if not is_error(result):
        return None
    for marker, kind in (("invalid arguments", "InvalidArguments"), ("there is no tool", "UnknownTool"),
                         ("failed", "ToolFailed"), ("not available", "Refused"),
                         ("refused", "Refused")):
        if marker in result:
            return kind
    return "ToolError"


@dataclass
class Span:
    trace_id: str
    tool: str
    arg_hash: str
    duration_ms: float
    status: str  # "ok" or "error"
    error_type: str | None = None
    span_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    started_at: float = 0.0  # seconds since the epoch


class Tracer:
    """Collects one ``Span`` per tool call of a run and logs each as a JSON line.

    ``tools``: the declared tool names (a dict of tools will do); a call to any other name
    is logged as ``"unknown"``. Without them the tracer goes by the executor's answer: the
    course's executors answer an undeclared name with "there is no tool named ...", which
    also gives ``"unknown"``; an executor that answers in its own words would not.

    ``secret``: the key of the argument hashes; by default a new random one per tracer, so
    equal calls hash equal within the run and hashes of two runs cannot be matched. Give
    the same secret to several tracers to compare across runs; keep it out of the logs.
    """

    def __init__(self, trace_id: str | None = None, *, tools: Iterable[str] | None = None,
                 secret: bytes | None = None) -> None:
        self.trace_id = trace_id or uuid.uuid4().hex[:16]
        self.spans: list[Span] = []
        self.tools = frozenset(tools) if tools is not None else None
        self.secret = secret if secret is not None else secrets.token_bytes(32)

    def wrap(self, execute: Executor) -> Executor:
        """An executor that runs ``execute`` and records a span for every call."""

        def traced(name: str, arguments: dict[str, Any]) -> str:
            started, clock = time.time(), time.perf_counter()
            try:
                result = execute(name, arguments)
            except Exception as error:  # record the type only, then let it propagate
                self._record(name, arguments, clock, started, "error", type(error).__name__)
                raise
            kind = error_type(result)
            self._record(name, arguments, clock, started, "error" if kind else "ok", kind)
            return result

        return traced

    def logged_name(self, name: str, kind: str | None) -> str:
        """``name`` if it was declared, else ``"unknown"``: never raw text from the model."""
        declared = name in self.tools if self.tools is not None else kind != "UnknownTool"
        return name if declared else UNKNOWN_TOOL

    def _record(self, name: str, arguments: dict[str, Any], clock: float, started: float,
                status: str, kind: str | None) -> None:
        span = Span(self.trace_id, self.logged_name(name, kind), argument_hash(arguments, self.secret),
                    round((time.perf_counter() - clock) * 1000, 2), status, kind, started_at=started)
        self.spans.append(span)
        log.info(json.dumps(asdict(span)))


@dataclass(frozen=True)
class Prices:
    """Prices per million tokens, in whatever currency unit you choose. No real prices here:
    look them up for your provider and model, they change."""

    input_per_million: float
    output_per_million: float
    cached_input_per_million: float | None = None

    def cost(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> float:
        cached_rate = self.cached_input_per_million if self.cached_input_per_million is not None \
            else self.input_per_million
        fresh = input_tokens - cached_input_tokens
        return (fresh * self.input_per_million + cached_input_tokens * cached_rate
                + output_tokens * self.output_per_million) / 1_000_000


def export_to_opentelemetry(spans: list[Span], service_name: str = "tool-calling-course") -> bool:
    """Send spans through OpenTelemetry's API if it is installed; return whether it was."""
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    tracer = trace.get_tracer(service_name)
    for span in spans:
        start_ns = int(span.started_at * 1e9)
        otel_span = tracer.start_span(f"tool {span.tool}", start_time=start_ns)
        otel_span.set_attributes({"trace_id": span.trace_id, "tool.name": span.tool, "tool.arg_hash": span.arg_hash,
                                  "tool.status": span.status, "tool.error_type": span.error_type or ""})
        otel_span.end(end_time=start_ns + int(span.duration_ms * 1e6))
    return True
