"""The provider-neutral loop and its three adapters, on scripted responses (no model).

The scripted responses are built by the same functions the course's server answers with
(``dialects.openai_response``, ``dialects.anthropic_response``), and every request an
adapter writes is read back through ``dialects``' strict translation, so an adapter that
puts a result in the wrong place fails here.
"""

import json

import pytest

from course_lib import dialects
from course_lib.providers import (
    ADAPTERS,
    LoopStopped,
    Provider,
    at,
    describe,
    differences_table,
    responses_calls,
    responses_input,
    run,
)

SYSTEM = "You are the kiosk's assistant."


def get_product_stock(sku: str) -> dict:
    """Units in stock per warehouse.

    Args:
        sku: the product code, like SKU-00042
    """
    if sku != "SKU-00042":
        raise ValueError(f"no product {sku}")
    return {"tokyo": 12}


TOOLS = {"get_product_stock": get_product_stock}


def response(kind: str, text: str, calls: list[dict]) -> dict:
    ollama_calls = [{"function": {"name": name, "arguments": arguments}} for name, arguments in calls]
    if kind == "openai":
        return dialects.openai_response("m", text, ollama_calls, "stop", 100, 10)
    if kind == "anthropic":
        return dialects.anthropic_response("m", text, ollama_calls, "stop", 100, 10)
    return {"model": "m", "message": {"role": "assistant", "content": text, "tool_calls": ollama_calls},
            "done": True, "done_reason": "stop", "prompt_eval_count": 100, "eval_count": 10}


class ScriptedProvider(Provider):
    """Answers with the scripted (text, calls) replies in order, and keeps what it was sent."""

    def __init__(self, kind: str, script: list[tuple[str, list]]) -> None:
        super().__init__(ADAPTERS[kind], "http://unused", "m")
        self.kind, self.script, self.sent = kind, list(script), []

    def send(self, body):
        self.adapter.as_ollama(body)  # raises DialectError if the dialect's API would refuse it
        self.sent.append(body)
        return response(self.kind, *self.script.pop(0))


CALL_THEN_ANSWER = [("", [("get_product_stock", {"sku": "SKU-00042"})]), ("12 in Tokyo.", [])]


@pytest.mark.parametrize("kind", ADAPTERS)
def test_the_same_loop_runs_in_every_dialect(kind):
    provider = ScriptedProvider(kind, CALL_THEN_ANSWER)
    result = run(provider, SYSTEM, "Stock of SKU-00042?", TOOLS)
    assert result.answer == "12 in Tokyo." and not result.answer_turn
    assert [(call.name, call.arguments) for call in result.calls] == [("get_product_stock", {"sku": "SKU-00042"})]
    assert result.replies[0].input_tokens == 100 and result.replies[0].output_tokens == 10
    assert '{\\"tokyo\\": 12}' in json.dumps(provider.sent[1]["messages"][-1])


def test_a_replys_prompt_tokens_count_what_the_cache_served_in_every_dialect():
    """Anthropic's ``input_tokens`` leaves out the cache's part of the prompt; the adapter adds it
    back, so a token budget counts the same prompt the same way in every dialect."""
    bodies = {"openai": dialects.openai_response("m", "Hi", [], "stop", 300, 5, cached_tokens=256),
              "anthropic": dialects.anthropic_response("m", "Hi", [], "stop", 300, 5, cache_read=192, cache_written=64)}
    for kind, body in bodies.items():
        assert ADAPTERS[kind].read(body).input_tokens == 300, kind


def test_the_fields_the_table_names_for_a_prompt_add_up_to_the_prompt():
    """The differences table's "tokens used" row names, per dialect, the fields whose sum is the
    prompt: on a reply whose prompt came partly from the cache, they add up to what ``read`` counts."""
    bodies = {"ollama": {**response("ollama", "Hi", []), "prompt_eval_count": 300, "prompt_eval_cached_count": 256},
              "openai": dialects.openai_response("m", "Hi", [], "stop", 300, 5, cached_tokens=256),
              "anthropic": dialects.anthropic_response("m", "Hi", [], "stop", 300, 5, cache_read=192, cache_written=64)}
    for kind, body in bodies.items():
        adapter = ADAPTERS[kind]
        named = sum(at(body, path) for path in (adapter.usage_paths[0], *adapter.cache_paths))
        assert named == adapter.read(body).input_tokens == 300, kind
    assert describe(run(ScriptedProvider("anthropic", CALL_THEN_ANSWER), SYSTEM, "Stock?", TOOLS), SYSTEM)[
        "tokens used"] == ("usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens"
                           " / usage.output_tokens")


def test_the_three_dialects_become_the_same_ollama_request():
    translated = []
    for kind in ADAPTERS:
        provider = ScriptedProvider(kind, CALL_THEN_ANSWER)
        run(provider, SYSTEM, "Stock of SKU-00042?", TOOLS)
        request = provider.adapter.as_ollama(provider.sent[1])
        translated.append((request["messages"], request["tools"]))
    assert translated[0] == translated[1] == translated[2]


def test_anthropic_flags_a_failed_call_instead_of_prefixing_it():
    provider = ScriptedProvider("anthropic", [("", [("get_product_stock", {"sku": "SKU-1"})]), ("Sorry.", [])])
    run(provider, SYSTEM, "Stock of SKU-1?", TOOLS)
    block = provider.sent[1]["messages"][-1]["content"][0]
    assert provider.sent[1]["messages"][-1]["role"] == "user"
    assert block["type"] == "tool_result" and block["is_error"] is True
    assert block["content"].startswith("get_product_stock failed")
    assert dialects.anthropic_request(provider.sent[1])["messages"][-1]["content"].startswith("error: ")


@pytest.mark.parametrize("kind", ADAPTERS)
def test_a_repeated_call_ends_with_a_marked_tool_free_answer_turn(kind):
    call = ("", [("get_product_stock", {"sku": "SKU-00042"})])
    provider = ScriptedProvider(kind, [call, call, ("There are 12.", [])])
    result = run(provider, SYSTEM, "Stock of SKU-00042?", TOOLS)
    assert result.answer == "There are 12." and result.answer_turn
    assert "tools" not in provider.sent[2] and "Tool results:" in json.dumps(provider.sent[2])


def test_a_repeated_call_raises_when_the_answer_turn_is_off():
    call = ("", [("get_product_stock", {"sku": "SKU-00042"})])
    with pytest.raises(LoopStopped, match="was requested 2 times") as stopped:
        run(ScriptedProvider("openai", [call, call]), SYSTEM, "?", TOOLS, answer_on_repeat=False)
    assert len(stopped.value.run.replies) == 2


def test_the_turn_cap_raises():
    script = [("", [("get_product_stock", {"sku": f"SKU-0000{i}"})]) for i in range(3)]
    with pytest.raises(LoopStopped, match="after 3 turns"):
        run(ScriptedProvider("ollama", script), SYSTEM, "?", TOOLS, max_turns=3)


def test_the_differences_table_is_read_off_the_runs():
    runs = [run(ScriptedProvider(kind, CALL_THEN_ANSWER), SYSTEM, "Stock?", TOOLS) for kind in ADAPTERS]
    table = differences_table(runs, SYSTEM)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in table.splitlines()[2:]}
    assert rows["system prompt"] == ["`messages[0].content`", "`messages[0].content`", "`system` |"]
    assert "(an object)" in rows["call arguments"][0] and "(a JSON string)" in rows["call arguments"][1]
    assert rows["stop signal"][1] == "`choices[0].finish_reason = 'tool_calls'`"
    assert "is_error=true" in rows["a failed call"][2] and "is_error" not in rows["a failed call"][1]
    assert "tool_call_id" in rows["a result goes back as"][1] and 'role="user"' in rows["a result goes back as"][2]


def test_a_chat_completions_run_becomes_responses_items_linked_by_call_id():
    provider = ScriptedProvider("openai", CALL_THEN_ANSWER)
    run(provider, SYSTEM, "Stock of SKU-00042?", TOOLS)
    messages = provider.sent[1]["messages"]
    call_id = messages[2]["tool_calls"][0]["id"]
    items = responses_input(messages)
    assert [item.get("type", item.get("role")) for item in items] == [
        "system", "user", "function_call", "function_call_output"]
    assert items[2] == {"type": "function_call", "call_id": call_id, "name": "get_product_stock",
                        "arguments": '{"sku": "SKU-00042"}'}
    assert items[3] == {"type": "function_call_output", "call_id": call_id, "output": '{"tokyo": 12}'}


def test_responses_calls_are_read_by_call_id_not_by_the_item_id():
    output = [{"type": "reasoning", "id": "rs_1", "summary": []},
              {"type": "function_call", "id": "fc_1", "call_id": "call_7", "name": "get_product_stock",
               "arguments": '{"sku": "SKU-00042"}', "status": "completed"}]
    calls = responses_calls(output)
    assert [(call.name, call.arguments, call.id) for call in calls] == [
        ("get_product_stock", {"sku": "SKU-00042"}, "call_7")]


@pytest.mark.parametrize("arguments", ["{oops", "[1, 2]", "[" * 5000 + "]" * 5000])
def test_a_hosted_providers_malformed_arguments_become_an_error_result_not_an_exception(arguments):
    """A hosted model can send arguments that are not a JSON object: the adapter keeps the text
    (``messages.arguments_from_json``), and validation answers the model with an error result."""
    from course_lib.providers import OpenAIChat
    from course_lib.tools import call_tool

    def now() -> str:
        """The time."""
        return "09:42"

    body = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": arguments}}]}}]}
    _, calls, _ = OpenAIChat().calls(body)
    (call,) = responses_calls([{"type": "function_call", "call_id": "c", "name": "now", "arguments": arguments}])
    for parsed in (calls[0], call):
        result = call_tool(parsed.name, parsed.arguments, {"now": now})
        assert result.error is not None and "invalid arguments" in result.text
