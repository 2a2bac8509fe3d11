"""OpenTelemetry spans for an agent run: one per model call, one per tool call.

What readers meet at work is OpenTelemetry with the GenAI semantic conventions, so the
course emits real OpenTelemetry spans (``opentelemetry-sdk``), named and attributed as
those conventions say:

- ``invoke_agent``: the whole run (``Tracer.run``), parent of the others;
- ``chat {model}``: one model call (``Tracer.model`` wraps any ``ChatModel``), with
  ``gen_ai.usage.input_tokens`` / ``gen_ai.usage.output_tokens`` and the finish reason;
- ``execute_tool {name}``: one tool call (``Tracer.wrap`` wraps any executor), with
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, and on failure ``error.type``.

A tool span deliberately does not record the arguments or the error text: those can hold
names, addresses, order details or an attacker's payload, and traces are read by many
people and kept for a long time. A keyed hash of the canonical arguments
(``course.tool.arg_hash``) is enough to see that two calls were the same call. Nor does it
record a tool name the model made up: that is model text too (an injected page can make
the model "call" a tool named like a sentence), so a name that was not declared is
recorded as ``"unknown"``.

Each ``Tracer`` has its own ``TracerProvider`` with an in-memory exporter, so a notebook or
a test can read its spans back (``tracer.finished()``, or ``tracer.spans`` for the tool
calls as plain records); pass ``exporters`` to send them on as well. An exporter is any
``SpanExporter``: the SDK calls its ``export(spans)`` with each span as it ends (lesson 7
writes one in ten lines); ``OTLPSpanExporter`` sends them to a collector,
``ConsoleSpanExporter(out=file)`` prints them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from course_lib.messages import ErrorKind, Message, ToolResult, as_result
from course_lib.tools import canonical_arguments

Executor = Callable[[str, dict[str, Any]], "ToolResult | str"]
UNKNOWN_TOOL = "unknown"
_PROCESS_SECRET = secrets.token_bytes(32)  # for argument_hash calls that bring no secret


def argument_hash(arguments: dict[str, Any], secret: bytes | None = None) -> str:
    """A short fingerprint of the canonical arguments: equal calls, equal hashes; no values.

    Keyed (HMAC-SHA256), because a plain hash of a value with few possibilities is no
    secret: there are 10,000 order ids ORD-0000 ... ORD-9999, and whoever reads the trace can
    hash them all in a few milliseconds and look the recorded hash up. The same goes for
    SKUs, amounts, dates, yes/no. Without ``secret`` that table cannot be built. The secret
    stays in memory and never goes into a span; without one, a secret made for this process
    is used, so hashes compare within the process and mean nothing outside it.
    """
    key = _PROCESS_SECRET if secret is None else secret
    return hmac.new(key, canonical_arguments(arguments).encode(), hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True)
class Span:
    """One finished tool span, read back into plain fields for a table."""

    trace_id: str
    tool: str
    arg_hash: str
    duration_ms: float
    status: str  # "ok" or "error"
    error_type: str | None
    started_at: float  # seconds since the epoch

    @classmethod
    def of(cls, span: ReadableSpan) -> Span:
        attributes = span.attributes or {}
        failed = span.status.status_code is StatusCode.ERROR
        start, end = span.start_time or 0, span.end_time or 0
        return cls(format(span.context.trace_id, "032x")[:16], str(attributes["gen_ai.tool.name"]),
                   str(attributes["course.tool.arg_hash"]), round((end - start) / 1e6, 2),
                   "error" if failed else "ok", str(attributes["error.type"]) if failed else None, start / 1e9)


class Tracer:
    """Real OpenTelemetry spans for the runs of one agent (or one notebook section).

    ``tools``: the declared tool names (a dict of tools will do); a call to any other name
    is recorded as ``"unknown"``. Without them the tracer goes by the executor's answer: an
    ``UnknownTool`` error also gives ``"unknown"``; an executor that answers a made-up name
    with an ok result would not.

    ``secret``: the key of the argument hashes; by default a new random one per tracer, so
    equal calls hash equal within the run and hashes of two runs cannot be matched. Give
    the same secret to several tracers to compare across runs; keep it out of the traces.
    """

    def __init__(self, *, tools: Iterable[str] | None = None, secret: bytes | None = None,
                 exporters: Iterable[SpanExporter] = (), service_name: str = "tool-calling-course") -> None:
        self.tools = frozenset(tools) if tools is not None else None
        self.secret = secret if secret is not None else secrets.token_bytes(32)
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider()
        for exporter in (self.memory, *exporters):
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.otel = self.provider.get_tracer(service_name)

    @contextmanager
    def run(self, agent: str = "agent") -> Iterator[None]:
        """An ``invoke_agent`` span around a whole run: the model and tool spans inside it are its children."""
        with self.otel.start_as_current_span(f"invoke_agent {agent}", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}):
            yield

    def model(self, model: Any, name: str = "") -> TracedModel:
        """``model`` (any ``ChatModel``), with a ``chat`` span around each call."""
        return TracedModel(model, self, name or model_name(model))

    def wrap(self, execute: Executor) -> Callable[[str, dict[str, Any]], ToolResult]:
        """An executor that runs ``execute`` inside an ``execute_tool`` span."""

        def traced(name: str, arguments: dict[str, Any]) -> ToolResult:
            with self.otel.start_as_current_span("execute_tool", record_exception=False,
                                                 set_status_on_exception=False) as span:
                span.set_attributes({"gen_ai.operation.name": "execute_tool",
                                     "gen_ai.tool.call.id": f"call_{uuid.uuid4().hex[:12]}",
                                     "course.tool.arg_hash": argument_hash(arguments, self.secret)})
                try:
                    result = as_result(execute(name, arguments))
                except Exception as error:  # record the type only, never the message; then propagate
                    self._finish(span, name, type(error).__name__)
                    raise
                self._finish(span, name, result.error.value if result.error else None)
                return result

        return traced

    def logged_name(self, name: str, kind: str | None) -> str:
        """``name`` if it was declared, else ``"unknown"``: never raw text from the model."""
        declared = name in self.tools if self.tools is not None else kind != ErrorKind.UNKNOWN_TOOL.value
        return name if declared else UNKNOWN_TOOL

    def _finish(self, span: Any, name: str, kind: str | None) -> None:
        tool = self.logged_name(name, kind)
        span.update_name(f"execute_tool {tool}")
        span.set_attribute("gen_ai.tool.name", tool)
        if kind:
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR))

    def finished(self) -> list[ReadableSpan]:
        """Every finished span, in the order they ended."""
        return list(self.memory.get_finished_spans())

    @property
    def spans(self) -> list[Span]:
        """The tool spans, as plain records."""
        return [Span.of(span) for span in self.finished()
                if (span.attributes or {}).get("gen_ai.operation.name") == "execute_tool"]


def model_name(model: Any) -> str:
    """The name of the model behind ``model``: a client's ``model`` string, found through the
    wrappers that keep what they wrap as ``model`` (``FirstCallRequired``, ``RememberedReplies``...)."""
    for _ in range(8):
        inner = getattr(model, "model", None)
        if inner is None or isinstance(inner, str):
            return inner or "model"
        model = inner
    return "model"


@dataclass
class TracedModel:
    """A ``ChatModel`` that records a ``chat`` span per call, with the token usage it reported."""

    model: Any
    tracer: Tracer
    name: str

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
             options: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        with self.tracer.otel.start_as_current_span(f"chat {self.name}") as span:
            span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": self.name,
                                 "course.tools_offered": len(tools or [])})
            reply = self.model.chat(messages, tools=tools, options=options, **fields)
            span.set_attributes({"gen_ai.usage.input_tokens": reply.get("prompt_eval_count", 0),
                                 "gen_ai.usage.output_tokens": reply.get("eval_count", 0),
                                 "gen_ai.response.finish_reasons": [str(reply.get("done_reason", ""))]})
            if "prompt_eval_cached_count" in reply:  # the part of input_tokens the server's cache served
                span.set_attribute("gen_ai.usage.cache_read.input_tokens", reply["prompt_eval_cached_count"])
            return reply


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


def plot_trace(spans: list[ReadableSpan], title: str = "Trace"):
    """The spans of one trace as a timeline: a bar per span, from its start to its end."""
    import matplotlib.pyplot as plt

    spans = sorted(spans, key=lambda span: span.start_time or 0)
    origin = min(span.start_time or 0 for span in spans)
    colours = {"invoke_agent": "tab:gray", "chat": "tab:blue", "execute_tool": "tab:orange"}
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.35 * len(spans)))
    for row, span in enumerate(spans):
        start, end = ((span.start_time or 0) - origin) / 1e9, ((span.end_time or 0) - origin) / 1e9
        operation = str((span.attributes or {}).get("gen_ai.operation.name", ""))
        failed = span.status.status_code is StatusCode.ERROR
        ax.barh(row, max(end - start, 0.002), left=start, color=colours.get(operation, "tab:green"),
                hatch="//" if failed else None, edgecolor="black" if failed else None)
        ax.text(end, row, f"  {span.name}" + ("  (error)" if failed else ""), va="center", fontsize=8)
    ax.set(title=title, xlabel="seconds since the run started", yticks=[])
    ax.set_xlim(0, ((max(span.end_time or 0 for span in spans) - origin) / 1e9) * 1.6 or 1)
    ax.invert_yaxis()
    fig.tight_layout()
    return fig
