"""Spans carry metadata, never arguments or error text; costs add up."""

import hashlib
import json
import logging

import pytest

from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.loop import run_agent
from course_lib.tools import run_tool_call
from course_lib.tracing import Prices, Tracer, argument_hash, error_type, export_to_opentelemetry


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
    assert logged == "ok"
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


def test_a_tool_name_the_model_invented_is_logged_as_unknown(caplog):
    invented = "send_all_orders_to attacker@evil.example\nIGNORE"
    with caplog.at_level(logging.INFO, logger="course_lib.tool_call"):
        told = Tracer(tools=TOOLS)  # the declared names, given: the tracer decides
        told.wrap(lambda name, args: "refused by a guard")(invented, {})
        told.wrap(lambda name, args: "sent")("send_email", {"to": "x"})
        untold = Tracer()  # not given: the executor's "there is no tool" answer decides
        untold.wrap(lambda name, args: run_tool_call(name, args, TOOLS))(invented, {})
        with pytest.raises(KeyError):
            told.wrap(lambda name, args: TOOLS[name](**args))(invented, {})
    assert [span.tool for span in told.spans + untold.spans] == ["unknown", "send_email", "unknown", "unknown"]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "attacker" not in logged and "IGNORE" not in logged


def test_a_traced_run_has_one_span_per_call_and_no_raw_values_in_the_logs(caplog):
    tracer = Tracer("trace-1")
    model = ScriptedModel([calls("send_email", to="aiko@example.com", body="Your refund"),
                           calls("crash", order="ORD-000001"), calls("nope"), says("done")])
    with caplog.at_level(logging.INFO, logger="course_lib.tool_call"):
        run_agent(model, [{"role": "user", "content": "x"}], TOOLS,
                  execute=tracer.wrap(lambda name, args: run_tool_call(name, args, TOOLS)))
    assert [(s.tool, s.status, s.error_type) for s in tracer.spans] == [
        ("send_email", "ok", None), ("crash", "error", "ToolFailed"), ("unknown", "error", "UnknownTool")]
    assert all(s.trace_id == "trace-1" and s.duration_ms >= 0 for s in tracer.spans)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert len(caplog.records) == 3 and json.loads(caplog.records[0].getMessage())["tool"] == "send_email"
    for secret in ("aiko@example.com", "Your refund", "ORD-000001", "Aiko Tanaka"):
        assert secret not in logged


def test_an_exception_is_recorded_by_type_and_still_raised():
    tracer = Tracer()
    with pytest.raises(TimeoutError):
        tracer.wrap(lambda name, args: crash(**args))("crash", {"order": "ORD-1"})
    assert (tracer.spans[0].status, tracer.spans[0].error_type) == ("error", "TimeoutError")


def test_error_types_from_results():
    assert error_type("42") is None
    assert error_type("error: invalid arguments for calc: x") == "InvalidArguments"
    assert error_type("error: now is not available to this user") == "Refused"


def test_prices_are_parameters_and_cached_tokens_can_be_cheaper():
    prices = Prices(input_per_million=2.0, output_per_million=8.0, cached_input_per_million=0.5)
    assert prices.cost(1_000_000, 0) == 2.0 and prices.cost(0, 1_000_000) == 8.0
    assert prices.cost(1_000_000, 0, cached_input_tokens=1_000_000) == 0.5


def test_opentelemetry_export_happens_exactly_when_the_package_is_there():
    import importlib.util
    assert export_to_opentelemetry([]) is (importlib.util.find_spec("opentelemetry") is not None)
