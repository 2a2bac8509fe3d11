"""Tool declarations from Python functions, the dispatcher, and the safe calculator."""

import json
import time
from typing import Literal

import pytest
from ollama._utils import convert_function_to_tool

from course_lib.arithmetic import calculate
from course_lib.tools import parse_docstring, run_tool_calls, tool_schema


def get_product_stock(sku: str, warehouse: Literal["tokyo", "osaka"] = "tokyo") -> dict:
    """Look up how many units of a product are in stock.

    Use this when the customer asks whether a product is available.

    Args:
        sku: Product code such as SKU-12345.
        warehouse: Which warehouse to look in.
    """
    return {"sku": sku, "warehouse": warehouse, "units": 3}


def now() -> str:
    """Return the current UTC time in ISO-8601 format."""
    return "2026-11-30T09:42:00+00:00"


def test_docstring_summary_and_arguments():
    summary, arguments = parse_docstring(get_product_stock.__doc__)
    assert summary.startswith("Look up how many units") and "Use this when" in summary
    assert arguments == {"sku": "Product code such as SKU-12345.", "warehouse": "Which warehouse to look in."}


def test_schema_from_a_typed_function():
    declared = tool_schema(get_product_stock)["function"]
    assert declared["name"] == "get_product_stock"
    assert declared["parameters"]["required"] == ["sku"]
    assert declared["parameters"]["properties"]["warehouse"]["enum"] == ["tokyo", "osaka"]
    assert declared["parameters"]["properties"]["sku"] == {"description": "Product code such as SKU-12345.",
                                                           "type": "string"}


def test_the_official_client_reads_the_same_function_alike():
    ours = tool_schema(now)["function"]
    theirs = convert_function_to_tool(now).model_dump(exclude_none=True)["function"]
    assert ours["name"] == theirs["name"] and ours["description"] == theirs["description"]


def test_every_call_gets_a_tool_message_even_when_it_cannot_run():
    message = {"role": "assistant", "tool_calls": [
        {"function": {"name": "get_product_stock", "arguments": {"sku": "SKU-00001"}}},
        {"function": {"name": "now", "arguments": {"type": "object"}}},  # the schema copied into the arguments
        {"function": {"name": "cat_joke", "arguments": {}}},
        {"function": {"name": "get_product_stock", "arguments": {"sku": "SKU-1", "warehouse": "paris"}}},
    ]}
    replies = run_tool_calls(message, {"get_product_stock": get_product_stock, "now": now})
    assert [r["tool_name"] for r in replies] == ["get_product_stock", "now", "cat_joke", "get_product_stock"]
    assert replies[0]["content"] == '{"sku": "SKU-00001", "warehouse": "tokyo", "units": 3}'
    assert replies[1]["content"].startswith("error: invalid arguments for now: type:")
    assert replies[2]["content"] == "error: there is no tool named 'cat_joke'; the tools are: get_product_stock, now"
    assert "warehouse" in replies[3]["content"] and "'tokyo' or 'osaka'" in replies[3]["content"]


def test_a_failing_tool_becomes_an_error_result():
    def broken() -> str:
        """Always fails."""
        raise TimeoutError("the stock service did not answer")
    [reply] = run_tool_calls({"tool_calls": [{"function": {"name": "broken", "arguments": {}}}]}, {"broken": broken})
    assert reply["content"] == "error: broken failed: the stock service did not answer"


@pytest.mark.parametrize("expression, value", [("(3 + 4) * 15", 105), ("-2 * 3", -6), ("7 / 2", 3.5), ("42", 42)])
def test_calculate(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize("expression", ["__import__('os')", "2 ** 99999", "x + 1", "1 / 0", "", "1" * 300,
                                        "[1, 2]", "'a' * 3"])
def test_calculate_refuses_everything_else(expression):
    with pytest.raises(ValueError):
        calculate(expression)


@pytest.mark.parametrize("expression, message", [
    ("1e308 * 10", "too large"), ("1e999", "too large"), ("-1e308 - 1e308", "too large"),
    ("1e999 - 1e999", "too large"), ("1e999 * 0", "too large"),
    ("1e200 * 1e200", "too large"), ("1e308 / 0.1", "too large"), ("1 / 5e-324", "too large")])
def test_overflow_is_a_clear_error_not_infinity_or_nan(expression, message):
    with pytest.raises(ValueError, match=message):
        calculate(expression)


def test_an_integer_too_large_for_a_float_is_a_clear_error_too(monkeypatch):
    monkeypatch.setattr("course_lib.arithmetic.MAX_LENGTH", 1000)  # 200 characters cannot get there
    for expression in ["9" * 400 + " / 3", "9" * 400 + " * 1.5"]:
        with pytest.raises(ValueError, match="too large"):
            calculate(expression)


@pytest.mark.parametrize("expression", ["1e308 + 1", "9" * 98 + " * " + "9" * 98, "1 / 1e300", "0.1 + 0.2", "-0.0"])
def test_every_result_is_valid_json(expression):
    result = calculate(expression)
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_no_expression_the_length_allows_takes_long():
    started = time.thread_time()  # the calculator's own work, whatever else runs on the machine
    for expression in ["9**9**9", "9 ** 9 ** 9", "(" * 90 + "9" + ")" * 90, "*".join(["9" * 9] * 20), "-" * 199 + "9"]:
        try:
            json.dumps(calculate(expression), allow_nan=False)
        except ValueError:
            pass
    assert time.thread_time() - started < 1.0


def test_tool_search_offers_the_tools_whose_words_a_request_shares_and_all_when_none():
    from course_lib.config import course_file
    from course_lib.kiosk.shop import Kiosk
    from course_lib.tools import search_tools

    tools = Kiosk.load(course_file("data/products.json")).tools()
    assert list(search_tools("Is SKU-12345 in stock?", tools)) == ["get_product_stock"]
    assert list(search_tools("Please send an e-mail to bo@example.com", tools, limit=1)) == ["send_email"]
    assert list(search_tools("How much is SKU-99999?", tools)) == list(tools)  # no word shared: every tool
    assert len(search_tools("stock reviews refund order e-mail info", tools, limit=3)) == 3
