"""Validation (lesson 5): good arguments pass, normalised; bad ones are rejected, naming the field.

The error goes back to the model and into logs, so it names the field and the rule, never the
rejected value (it may be personal data, or an attacker's text).
"""

import pytest

from course_lib.messages import ErrorKind
from course_lib.tools import tool_schema, validate_call

GOOD = {"order_id": "ORD-1002", "amount_jpy": 6500}


def test_good_arguments_pass_unchanged(kiosk):
    assert validate_call("refund_order", GOOD, kiosk.tools()) == GOOD


@pytest.mark.parametrize("arguments, field", [
    ({"order_id": "1002", "amount_jpy": 6500}, "order_id"),              # the prefix the model drops
    ({"order_id": "ORD-１００２", "amount_jpy": 6500}, "order_id"),       # full-width digits
    ({"order_id": "ORD-1002'; DROP TABLE orders; --", "amount_jpy": 1}, "order_id"),
    ({"order_id": "ORD-1002", "amount_jpy": "6500"}, "amount_jpy"),      # a string is not a number
    ({"order_id": "ORD-1002", "amount_jpy": 6500.0}, "amount_jpy"),      # nor is a float
    ({"order_id": "ORD-1002", "amount_jpy": True}, "amount_jpy"),        # nor is true
    ({"order_id": "ORD-1002", "amount_jpy": 0}, "amount_jpy"),
    ({"order_id": "ORD-1002"}, "amount_jpy"),                             # missing
    ({**GOOD, "reason": "broken"}, "reason"),                             # a key the contract lacks
], ids=["no prefix", "full-width digits", "SQL", "amount as text", "amount as float", "amount true", "zero yen",
        "no amount", "extra key"])
def test_bad_arguments_are_rejected_naming_the_field_not_the_value(kiosk, arguments, field):
    result = validate_call("refund_order", arguments, kiosk.tools())
    assert result.error is ErrorKind.INVALID_ARGUMENTS
    assert f"{field}: " in result.content
    rejected = arguments.get(field)
    assert not isinstance(rejected, str) or rejected not in result.content, "the error repeats the value"


def test_an_address_reaches_the_tool_in_its_one_canonical_form(kiosk):
    for written in ["Kim@Example.JP ", "kim＠example.jp"]:  # case, a space, a full-width at sign
        checked = validate_call("send_email", {"to": written, "subject": "s", "body": "b"}, kiosk.tools())
        assert checked["to"] == "kim@example.jp"
    hidden = validate_call("send_email", {"to": "kim\u200b@example.jp", "subject": "s", "body": "b"}, kiosk.tools())
    assert hidden.error is ErrorKind.INVALID_ARGUMENTS, "a zero-width space is refused, not cleaned up"


def test_the_declaration_states_the_rules_the_check_enforces(kiosk):
    parameters = tool_schema(kiosk.tools()["refund_order"])["function"]["parameters"]
    assert parameters["properties"]["order_id"]["pattern"] == "^ORD-[0-9]{4}$"
    amount = parameters["properties"]["amount_jpy"]
    assert (amount["type"], amount["exclusiveMinimum"]) == ("integer", 0)
    assert parameters["required"] == ["order_id", "amount_jpy"]


def test_an_invented_tool_is_answered_with_the_real_list(kiosk):
    result = validate_call("cat_joke", {}, kiosk.tools())
    assert result.error is ErrorKind.UNKNOWN_TOOL and "refund_order" in result.content
