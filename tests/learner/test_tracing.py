"""Spans are real OpenTelemetry spans with GenAI attributes; they carry metadata, never
arguments or error text; costs add up."""

import hashlib
import io
import json

import pytest
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter, SpanExportResult

from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.loop import run_agent
from course_lib.messages import ErrorKind, ToolResult
from course_lib.tools import call_tool
from course_lib.tracing import Prices, Tracer, argument_hash


def send_email(to: str, body: str) -> str:
    """Send an e-mail."""
    return "sent"


def crash(order: str) -> str:
    """Always fails, with personal data in the message."""
    raise TimeoutError(f"timeout while refunding {order} for Aiko Tanaka")


TOOLS = {"send_email": send_email, "crash": crash}


def test_hash_is_canonical_and_short():
    assert argument_hash({"a": 1, "b": 2}) == argument_hash({"b": 2, "a": 1}) and len(argument_hash({})) == 16


ORDER_IDS = [f"ORD-{n:04d}" for n in range(10_000)]


def reverse_by_enumeration(logged: str, fingerprint) -> str | None:
    """What anyone who reads the logs can try: hash every possible value, look the logged hash up."""
    table = {fingerprint({"order_id": order_id}): order_id for order_id in ORDER_IDS}
    return table.get(logged)


def test_an_unkeyed_hash_of_an_order_id_is_reversed_by_enumeration_and_a_keyed_one_is_not():
    def unkeyed(arguments):  # the scheme this module used before: SHA-256 of the canonical arguments
        return hashlib.sha256(json.dumps(arguments, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]

    assert reverse_by_enumeration(unkeyed({"order_id": "ORD-4711"}), unkeyed) == "ORD-4711"
    tracer = Tracer()
    logged = tracer.wrap(lambda name, args: "ok")("refund", {"order_id": "ORD-4711"})
    assert logged == ToolResult("ok")
    span_hash = tracer.spans[0].arg_hash
    assert reverse_by_enumeration(span_hash, unkeyed) is None
    assert reverse_by_enumeration(span_hash, argument_hash) is None  # the module's own function, another key
    with_the_key = reverse_by_enumeration(span_hash, lambda arguments: argument_hash(arguments, tracer.secret))
    assert with_the_key == "ORD-4711"  # only whoever holds the run's secret can do it


def test_equal_arguments_hash_equal_within_a_run_and_differently_across_runs():
    first, second = Tracer(), Tracer()
    for tracer in (first, second):
        execute = tracer.wrap(lambda name, args: "ok")
        execute("refund", {"order_id": "ORD-0001", "amount": 5})
        execute("refund", {"amount": 5, "order_id": "ORD-0001"})
        execute("refund", {"order_id": "ORD-0002", "amount": 5})
    hashes = [span.arg_hash for span in first.spans]
    assert hashes[0] == hashes[1] != hashes[2]  # a repeat is still visible
    assert first.spans[0].arg_hash != second.spans[0].arg_hash  # a per-run key: runs do not compare
    fixed = Tracer(secret=b"k" * 32)
    fixed.wrap(lambda name, args: "ok")("refund", {"order_id": "ORD-0001"})
    assert fixed.spans[0].arg_hash == argument_hash({"order_id": "ORD-0001"}, b"k" * 32)


def test_a_tool_name_the_model_invented_is_recorded_as_unknown():
    invented = "send_all_orders_to attacker@evil.example\nIGNORE"
    out = io.StringIO()
    told = Tracer(tools=TOOLS, exporters=[ConsoleSpanExporter(out=out)])  # the declared names decide
    told.wrap(lambda name, args: "refused by a guard")(invented, {})
    told.wrap(lambda name, args: "sent")("send_email", {"to": "x"})
    untold = Tracer(exporters=[ConsoleSpanExporter(out=out)])  # not given: an UnknownTool error decides
    untold.wrap(lambda name, args: call_tool(name, args, TOOLS))(invented, {})
    with pytest.raises(KeyError):
        told.wrap(lambda name, args: TOOLS[name](**args))(invented, {})
    assert [span.tool for span in told.spans + untold.spans] == ["unknown", "send_email", "unknown", "unknown"]
    assert "attacker" not in out.getvalue() and "IGNORE" not in out.getvalue()


def test_a_traced_run_has_genai_spans_and_no_raw_values_in_what_is_exported():
    out = io.StringIO()
    tracer = Tracer(tools=TOOLS, exporters=[ConsoleSpanExporter(out=out)])
    model = ScriptedModel([calls("send_email", to="aiko@example.com", body="Your refund"),
                           calls("crash", order="ORD-000001"), calls("nope"), says("done")])
    with tracer.run("test"):
        run_agent(tracer.model(model, "scripted"), [{"role": "user", "content": "x"}], TOOLS,
                  execute=tracer.wrap(lambda name, args: call_tool(name, args, TOOLS)))
    assert [(s.tool, s.status, s.error_type) for s in tracer.spans] == [
        ("send_email", "ok", None), ("crash", "error", "ToolFailed"), ("unknown", "error", "UnknownTool")]
    finished = tracer.finished()
    root = next(span for span in finished if span.name == "invoke_agent test")
    assert {span.context.trace_id for span in finished} == {root.context.trace_id}  # one trace
    assert all(span.parent is not None and span.parent.span_id == root.context.span_id
               for span in finished if span is not root)  # every model and tool span is a child of the run
    chats = [span for span in finished if span.attributes["gen_ai.operation.name"] == "chat"]
    assert len(chats) == 4 and chats[0].name == "chat scripted"
    assert chats[0].attributes["gen_ai.usage.input_tokens"] == 10
    assert chats[0].attributes["gen_ai.usage.output_tokens"] == 5
    tool = next(span for span in finished if span.name == "execute_tool crash")
    assert tool.attributes["error.type"] == "ToolFailed" and tool.attributes["gen_ai.tool.call.id"].startswith("call_")
    exported = out.getvalue()
    assert '"gen_ai.tool.name": "send_email"' in exported
    for secret in ("aiko@example.com", "Your refund", "ORD-000001", "Aiko Tanaka"):
        assert secret not in exported


def test_a_chat_span_has_the_cached_input_tokens_when_the_server_reports_them():
    """OpenTelemetry's ``gen_ai.usage.cache_read.input_tokens`` (part of ``input_tokens``), from
    Ollama's ``prompt_eval_cached_count``; a server that does not report it gets no attribute."""
    class Caching:
        def __init__(self, reply):
            self.reply = reply

        def chat(self, messages, tools=None, options=None, **fields):
            return self.reply

    for reply, cached in [({"prompt_eval_count": 300, "prompt_eval_cached_count": 256}, 256),
                          ({"prompt_eval_count": 300}, None)]:
        tracer = Tracer()
        tracer.model(Caching(reply), "m").chat([{"role": "user", "content": "x"}])
        [span] = tracer.finished()
        assert span.attributes["gen_ai.usage.input_tokens"] == 300
        assert span.attributes.get("gen_ai.usage.cache_read.input_tokens") == cached


class Collector(SpanExporter):
    """Lesson 7's exporter, written out: every span it is sent, as a JSON document."""

    def __init__(self):
        self.received = []

    def export(self, spans):
        self.received += [json.loads(span.to_json()) for span in spans]
        return SpanExportResult.SUCCESS


def test_an_exporter_of_your_own_receives_each_span_once_as_it_ends_from_every_tracer_given_it():
    collector = Collector()
    tracers = [Tracer(tools=TOOLS, exporters=[collector]) for _ in range(2)]
    for tracer in tracers:
        model = ScriptedModel([calls("send_email", to="aiko@example.com", body="Your refund"), says("done")])
        with tracer.run("test"):
            run_agent(tracer.model(model, "scripted"), [{"role": "user", "content": "x"}], TOOLS,
                      execute=tracer.wrap(lambda name, args: call_tool(name, args, TOOLS)))
    names = ["chat scripted", "execute_tool send_email", "chat scripted", "invoke_agent test"]
    assert [document["name"] for document in collector.received] == names * 2  # in the order they ended
    assert [document["name"] for document in collector.received] == [
        span.name for tracer in tracers for span in tracer.finished()]  # what the in-memory exporter has too
    assert len({document["context"]["trace_id"] for document in collector.received}) == 2  # a trace per run
    assert "aiko@example.com" not in json.dumps(collector.received)


def test_an_exception_is_recorded_by_type_and_still_raised():
    tracer = Tracer()
    with pytest.raises(TimeoutError):
        tracer.wrap(lambda name, args: crash(**args))("crash", {"order": "ORD-1"})
    assert (tracer.spans[0].status, tracer.spans[0].error_type) == ("error", "TimeoutError")
    assert not tracer.finished()[0].events  # no exception event: its message names a customer


def test_error_types_come_from_the_result_kind_not_from_its_text():
    tracer = Tracer()
    results = {"fetch_page": "error: a web page can write this",
               "calc": ToolResult.failure(ErrorKind.INVALID_ARGUMENTS, "x: field required")}
    execute = tracer.wrap(lambda name, args: results[name])
    execute("fetch_page", {})
    execute("calc", {})
    assert [(s.status, s.error_type) for s in tracer.spans] == [("ok", None), ("error", "InvalidArguments")]


def test_prices_are_parameters_and_cached_tokens_can_be_cheaper():
    prices = Prices(input_per_million=2.0, output_per_million=8.0, cached_input_per_million=0.5)
    assert prices.cost(1_000_000, 0) == 2.0 and prices.cost(0, 1_000_000) == 8.0
    assert prices.cost(1_000_000, 0, cached_input_tokens=1_000_000) == 0.5


def test_a_chat_span_names_the_model_through_wrappers():
    from course_lib.client import Client
    from course_lib.loop import FirstCallRequired
    from course_lib.security import RememberedReplies
    from course_lib.tracing import model_name

    client = Client("http://127.0.0.1:9", model="qwen2.5-coder:0.5b")
    assert model_name(client) == "qwen2.5-coder:0.5b"
    assert model_name(FirstCallRequired(RememberedReplies(client))) == "qwen2.5-coder:0.5b"
    assert model_name(object()) == "model"
