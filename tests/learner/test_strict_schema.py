"""``tools.strict_problems``: what keeps a tool's parameters out of OpenAI's strict mode."""

import json
from typing import Literal

import pytest

from course_lib.tools import STRICT_MAX_DEPTH, strict_problems, tool_schema


def get_product_stock(sku: str, warehouse: Literal["tokyo", "osaka"] = "tokyo") -> dict:
    """Look up how many units of a product are in stock.

    Args:
        sku: Product code such as SKU-12345.
        warehouse: Which warehouse to look in.
    """
    return {"sku": sku, "warehouse": warehouse, "units": 3}


STRICT_STOCK = {"type": "object", "additionalProperties": False, "required": ["sku", "warehouse"],
                "properties": {"sku": {"type": "string"},
                               "warehouse": {"type": ["string", "null"], "enum": ["tokyo", "osaka", None]}}}


def test_a_strict_schema_has_no_problems():
    assert strict_problems(STRICT_STOCK) == []
    assert strict_problems({"type": "object", "properties": {}, "required": [], "additionalProperties": False}) == []


def test_a_generated_declaration_with_a_default_breaks_two_rules():
    problems = strict_problems(tool_schema(get_product_stock)["function"]["parameters"])
    assert len(problems) == 2
    assert problems[0] == '(root): needs "additionalProperties": false'
    assert problems[1].startswith("(root): 'warehouse' is not in required")


def test_every_nested_object_needs_both_rules():
    schema = json.loads(json.dumps(STRICT_STOCK))
    address = {"type": "object", "properties": {"city": {"type": "string"}}}
    schema["properties"]["address"] = {"type": "array", "items": address}
    schema["required"].append("address")
    assert strict_problems(schema) == ['properties.address.items: needs "additionalProperties": false',
                                       "properties.address.items: 'city' is not in required (strict mode requires "
                                       "every property; an optional one is a union with null, still required)"]


def test_anyof_inside_and_defs_are_walked():
    schema = {"type": "object", "additionalProperties": False, "required": ["value"],
              "properties": {"value": {"anyOf": [{"type": "number"}, {"$ref": "#/$defs/money"}]}},
              "$defs": {"money": {"type": "object", "properties": {"amount": {"type": "integer"}}}}}
    assert strict_problems(schema) == ['$defs.money: needs "additionalProperties": false',
                                       "$defs.money: 'amount' is not in required (strict mode requires every "
                                       "property; an optional one is a union with null, still required)"]


@pytest.mark.parametrize("keyword", ["allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas"])
def test_refused_keywords(keyword):
    schema = json.loads(json.dumps(STRICT_STOCK))
    schema["properties"]["sku"][keyword] = [] if keyword == "allOf" else {}
    assert strict_problems(schema) == [f"properties.sku: {keyword} is not supported in strict mode"]


def test_the_root_must_be_an_object_not_anyof():
    assert strict_problems({"anyOf": [{"type": "string"}, {"type": "null"}]})[0].startswith("(root): must be")
    assert strict_problems({"type": "string"}) == [
        '(root): must be {"type": "object", ...}, not an anyOf or another type']


def test_unknown_types_and_formats():
    schema = json.loads(json.dumps(STRICT_STOCK))
    schema["properties"]["sku"] = {"type": "text", "format": "sku"}
    problems = strict_problems(schema)
    assert [p.split(":")[1].strip().split(" ")[0] for p in problems] == ["type", "format"]
    schema["properties"]["sku"] = {"type": "string", "format": "date-time"}
    assert strict_problems(schema) == []


def test_limits_on_depth_properties_and_enums():
    schema: dict = {"type": "object", "additionalProperties": False, "required": [], "properties": {}}
    inner = schema
    for _ in range(STRICT_MAX_DEPTH):
        child = {"type": "object", "additionalProperties": False, "required": [], "properties": {}}
        inner["properties"]["next"], inner["required"] = child, ["next"]
        inner = child
    deepest = ".".join(["properties.next"] * STRICT_MAX_DEPTH)
    assert strict_problems(schema) == [f"{deepest}: objects nested {STRICT_MAX_DEPTH + 1} deep, more than 10"]
    wide = {"type": "object", "additionalProperties": False, "required": [f"p{i}" for i in range(5001)],
            "properties": {f"p{i}": {"type": "integer"} for i in range(5001)}}
    assert strict_problems(wide) == ["(whole schema): 5001 properties, more than 5000"]
    many = {"type": "object", "additionalProperties": False, "required": ["e"],
            "properties": {"e": {"type": "integer", "enum": list(range(1001))}}}
    assert strict_problems(many) == ["(whole schema): 1001 enum values, more than 1000"]


def test_bad_input_is_a_clear_error_or_a_problem():
    with pytest.raises(TypeError, match="a JSON schema is an object"):
        strict_problems(["not", "a", "schema"])  # type: ignore[arg-type]
    broken = {"type": "object", "additionalProperties": False, "required": ["a"], "properties": {"a": 5}}
    assert strict_problems(broken) == ["properties.a: a schema must be an object, not int"]
    assert strict_problems({"type": "object", "additionalProperties": False, "properties": ["a"]}) == [
        "(root): properties must map names to schemas"]


def test_a_very_deep_schema_gets_an_answer_not_a_recursion_error():
    schema: dict = {"type": "object", "additionalProperties": False, "required": ["x"], "properties": {}}
    inner = schema
    for _ in range(5_000):
        child: dict = {"anyOf": []}
        inner.setdefault("properties", {})["x"] = child
        inner = {"type": "object", "additionalProperties": False, "required": ["x"], "properties": {}}
        child["anyOf"].append(inner)
    problems = strict_problems(schema)
    assert problems and all("more than 10" in p for p in problems)
