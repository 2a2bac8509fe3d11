"""Translating OpenAI and Anthropic requests to Ollama's and back, without a model."""

import json

import pytest

from course_lib import dialects
from course_lib.dialects import DialectError, anthropic_messages
from course_lib.validation import required_call_format

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def openai_turns(arguments='{"city": "Tokyo"}'):
    return [{"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Tokyo?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]


def test_an_openai_round_trip_becomes_ollama_messages():
    request = dialects.openai_request({"model": "m", "messages": openai_turns(), "tools": [WEATHER],
                                       "max_tokens": 40, "temperature": 0, "stop": "\n\n",
                                       "response_format": {"type": "json_object"}})
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                          "arguments": {"city": "Tokyo"}}}]},
        {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"}]
    assert request["tools"] == [WEATHER] and request["format"] == "json" and request["stream"] is False
    assert request["options"] == {"temperature": 0, "num_predict": 40, "stop": ["\n\n"]}


@pytest.mark.parametrize("change, message", [
    (lambda m: m[2]["tool_calls"][0]["function"].update(arguments={"city": "Tokyo"}), "expected a string"),
    (lambda m: m[2]["tool_calls"][0]["function"].update(arguments="{city: Tokyo}"), "not valid JSON"),
    (lambda m: m[3].pop("tool_call_id"), "tool_call_id: field required"),
    (lambda m: m[3].update(tool_call_id="call_9"), "answers none of the tool_calls"),
    (lambda m: m[2]["tool_calls"][0].pop("id"), r"tool_calls\[0\]\.id: field required"),
    (lambda m: m[0].update(role="function"), "role"),
])
def test_openai_porting_mistakes_are_refused_with_the_reason(change, message):
    messages = openai_turns()
    change(messages)
    with pytest.raises(DialectError, match=message):
        dialects.openai_request({"model": "m", "messages": messages})


def two_calls_openai():
    calls = [{"id": f"call_{n}", "type": "function", "function": {"name": "get_weather", "arguments": city}}
             for n, city in ((1, '{"city": "Tokyo"}'), (2, '{"city": "Osaka"}'))]
    return [{"role": "user", "content": "Weather in Tokyo and Osaka?"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "rain"}]


@pytest.mark.parametrize("change, message", [
    (lambda m: m.pop(3), r"messages\[1\]: an assistant message with 'tool_calls' must be followed by tool "
                         r"messages .* did not have response messages: call_2"),
    (lambda m: m.insert(3, {"role": "user", "content": "and?"}), "did not have response messages: call_2"),
    (lambda m: m.__delitem__(slice(2, 4)), "did not have response messages: call_1, call_2"),  # at the end too
    (lambda m: m.pop(1), r"messages\[1\]: messages with role 'tool' must be a response"),
    (lambda m: m.insert(2, {"role": "assistant", "content": "Checking."}), "did not have response messages"),
])
def test_every_openai_call_is_answered_right_after_its_assistant_message(change, message):
    """OpenAI's rule: an assistant message's calls are answered by the tool messages right after
    it, each of them, before any other message; a tool message answers only those calls."""
    messages = two_calls_openai()
    dialects.openai_request({"model": "m", "messages": messages})  # as it should be
    change(messages)
    with pytest.raises(DialectError, match=message):
        dialects.openai_request({"model": "m", "messages": messages})


def test_an_openai_response_carries_arguments_as_a_json_string():
    calls = [{"id": "call_x", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Tokyo"}}}]
    response = dialects.openai_response("m", "", calls, "stop", 120, 20)
    choice = response["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [{"id": "call_x", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Tokyo"}'}}]
    assert response["usage"] == {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140,
                                 "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}}
    assert dialects.openai_response("m", "Hi", [], "length", 1, 1)["choices"][0]["finish_reason"] == "length"


def test_openai_usage_counts_cached_tokens_inside_the_prompt():
    """OpenAI's ``prompt_tokens`` is the whole prompt; ``cached_tokens`` is the part of it served
    from the cache and ``cache_write_tokens`` the part written to it, so neither can be negative
    and together they are at most the prompt."""
    usage = dialects.openai_response("m", "Hi", [], "stop", 300, 5, cached_tokens=192, cache_write_tokens=64)["usage"]
    assert usage["prompt_tokens"] == 300 and usage["total_tokens"] == 305
    assert usage["prompt_tokens_details"] == {"cached_tokens": 192, "cache_write_tokens": 64}
    for cached, written in ((-1, 0), (0, -1), (301, 0), (200, 101)):
        with pytest.raises(ValueError, match="together at most prompt_tokens"):
            dialects.openai_usage(300, 5, cached, written)


def test_a_client_reads_openais_cached_tokens_into_ollamas_field_only_when_given():
    from course_lib.dialects.openai_chat import ollama_stats

    reply = dialects.openai_response("m", "Hi", [], "stop", 300, 5, cached_tokens=256)
    assert ollama_stats(reply, 1)["prompt_eval_cached_count"] == 256
    del reply["usage"]["prompt_tokens_details"]  # a server that does not say: no number made up
    assert "prompt_eval_cached_count" not in ollama_stats(reply, 1)


def anthropic_turns(result_block=None):
    result = result_block or {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 C"}
    return [{"role": "user", "content": "Weather in Tokyo?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                              {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Tokyo"}}]},
            {"role": "user", "content": [result, {"type": "text", "text": "And tomorrow?"}]}]


def test_an_anthropic_round_trip_becomes_ollama_messages():
    tool = {"name": "get_weather", "description": "Weather for a city.",
            "input_schema": WEATHER["function"]["parameters"]}
    request = dialects.anthropic_request({"model": "m", "max_tokens": 64, "system": "Be brief.",
                                          "messages": anthropic_turns(), "tools": [tool], "stop_sequences": ["END"]})
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Tokyo?"},
        {"role": "assistant", "content": "Let me check.",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny, 21 C"},
        {"role": "user", "content": "And tomorrow?"}]
    assert request["tools"] == [WEATHER] and request["options"] == {"num_predict": 64, "stop": ["END"]}


def test_an_anthropic_error_result_is_marked_for_the_model():
    block = {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": [{"type": "text", "text": "no such city"}]}
    request = dialects.anthropic_request({"model": "m", "max_tokens": 8, "messages": anthropic_turns(block)})
    messages = request["messages"]
    assert messages[2] == {"role": "tool", "tool_name": "get_weather", "content": "error: no such city"}


@pytest.mark.parametrize("change, message", [
    (lambda m: m.append({"role": "tool", "content": "sunny"}), "must be 'user' or 'assistant'"),
    (lambda m: m[1]["content"].append({"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}),
     "belong in a user turn"),
    (lambda m: m[2]["content"].reverse(), "must come before any text"),
    (lambda m: m[2]["content"][0].update(tool_use_id="toolu_9"), "unexpected `tool_use_id` found in .*: toolu_9"),
    (lambda m: m[1]["content"][1].update(input='{"city": "Tokyo"}'), "input: expected an object"),
])
def test_anthropic_porting_mistakes_are_refused_with_the_reason(change, message):
    messages = anthropic_turns()
    change(messages)
    with pytest.raises(DialectError, match=message):
        dialects.anthropic_request({"model": "m", "max_tokens": 8, "messages": messages})


def two_calls_anthropic():
    uses = [{"type": "tool_use", "id": f"toolu_{n}", "name": "get_weather", "input": {"city": city}}
            for n, city in ((1, "Tokyo"), (2, "Osaka"))]
    return [{"role": "user", "content": "Weather in Tokyo and Osaka?"}, {"role": "assistant", "content": uses},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": weather}
                                         for n, weather in ((1, "sunny"), (2, "rain"))]}]


def split_results(messages):
    """The two results in two user messages: Anthropic's first porting mistake with parallel calls."""
    first, second = messages[2]["content"]
    messages[2:] = [{"role": "user", "content": [first]}, {"role": "user", "content": [second]}]


@pytest.mark.parametrize("change, message", [
    (split_results, "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_2"),
    (lambda m: m[2]["content"].pop(), "immediately after: toolu_2"),
    (lambda m: m.pop(), "immediately after: toolu_1, toolu_2"),  # at the end too
    (lambda m: m.insert(2, {"role": "assistant", "content": "Checking."}), "immediately after: toolu_1"),
    # a tool_use block dropped from the history; then only the assistant's text kept
    (lambda m: m[1]["content"].pop(), "messages.2.content.1: unexpected `tool_use_id` found in .*: toolu_2"),
    (lambda m: m[1].update(content="I will check."), "unexpected `tool_use_id` found in .*: toolu_1"),
])
def test_every_anthropic_tool_use_is_answered_in_the_next_user_turn(change, message):
    """Anthropic's rule: every ``tool_use`` of an assistant turn is answered in the very next
    message, all results in that one user turn; a ``tool_result`` answers only the turn before."""
    messages = two_calls_anthropic()
    dialects.anthropic_request({"model": "m", "max_tokens": 8, "messages": messages})  # as it should be
    change(messages)
    with pytest.raises(DialectError, match=message):
        dialects.anthropic_request({"model": "m", "max_tokens": 8, "messages": messages})


def test_an_anthropic_result_answers_only_the_turn_right_before_it():
    messages = two_calls_anthropic()
    messages += [{"role": "assistant", "content": "Sunny and rain."},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}]
    with pytest.raises(DialectError, match="messages.4.content.0: unexpected `tool_use_id` found in .*: toolu_1"):
        dialects.anthropic_request({"model": "m", "max_tokens": 8, "messages": messages})


def test_anthropic_requires_max_tokens():
    with pytest.raises(DialectError, match="max_tokens: field required"):
        dialects.anthropic_request({"model": "m", "messages": []})


def test_an_anthropic_response_puts_calls_in_tool_use_blocks():
    calls = [{"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}]
    response = dialects.anthropic_response("m", "Checking.", calls, "stop", 100, 12)
    assert [block["type"] for block in response["content"]] == ["text", "tool_use"]
    assert response["content"][1]["input"] == {"city": "Tokyo"} and response["content"][1]["id"].startswith("toolu_")
    assert response["stop_reason"] == "tool_use" and response["usage"] == {
        "input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 12}
    assert dialects.anthropic_response("m", "Hi", [], "length", 1, 1)["stop_reason"] == "max_tokens"


def test_anthropic_usage_splits_the_prompt_into_read_written_and_the_rest():
    """Anthropic's three input counts add up to the prompt: ``input_tokens`` is what was neither
    read from the cache nor written to it."""
    usage = dialects.anthropic_response("m", "Hi", [], "stop", 300, 5, cache_read=192, cache_written=64)["usage"]
    assert usage == {"input_tokens": 44, "cache_creation_input_tokens": 64, "cache_read_input_tokens": 192,
                     "output_tokens": 5}
    for read, written in ((-1, 0), (0, -1), (200, 101)):
        with pytest.raises(ValueError, match="at most the prompt's 300"):
            dialects.anthropic_usage(300, 5, read, written)
    assert anthropic_messages.prompt_tokens(usage) == 300, "a client adds the three back up"
    assert anthropic_messages.prompt_tokens({"input_tokens": 12, "cache_read_input_tokens": None}) == 12


def test_errors_use_each_dialects_format():
    assert dialects.openai_error("bad", 400) == {"error": {"message": "bad", "type": "invalid_request_error",
                                                           "param": None, "code": None}}
    assert dialects.anthropic_error("gone", 404) == {"type": "error", "error": {"type": "not_found_error",
                                                                                "message": "gone"}}
    assert json.dumps(dialects.anthropic_error("busy", 503)).count("overloaded_error") == 1


# --- tool_choice and parallel calls: every value honoured or refused, none dropped ---------

STOCK = {"type": "function", "function": {"name": "get_stock", "description": "Units in stock.",
                                          "parameters": {"type": "object", "properties": {"sku": {"type": "string"}},
                                                         "required": ["sku"]}}}


def forced_names(format_):
    """The tool names a forced-call grammar allows (``None``: no grammar, the model decides)."""
    return None if format_ is None else [option["properties"]["name"]["const"] for option in format_["anyOf"]]


def openai_with(**fields):
    return dialects.openai_request({"model": "m", "messages": [{"role": "user", "content": "Weather?"}],
                                    "tools": [WEATHER, STOCK], **fields})


@pytest.mark.parametrize("fields, tools, names, calls", [
    ({}, 2, None, True),
    ({"tool_choice": "auto"}, 2, None, True),
    ({"tool_choice": None}, 2, None, True),
    ({"tool_choice": "none"}, 2, None, False),
    ({"tool_choice": "none", "parallel_tool_calls": False}, 2, None, False),
    ({"tool_choice": "required"}, 2, ["get_weather", "get_stock"], True),
    ({"tool_choice": {"type": "function", "function": {"name": "get_stock"}}}, 2, ["get_stock"], True),
    ({"tool_choice": "required", "parallel_tool_calls": False}, 2, ["get_weather", "get_stock"], True),
    ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": False},
     2, ["get_weather"], True),
    ({"parallel_tool_calls": True}, 2, None, True),
])
def test_openai_tool_choice_is_honoured(fields, tools, names, calls):
    """"none" keeps the tools in the prompt, as OpenAI defines it, and lets no call come back."""
    request = openai_with(**fields)
    assert len(request["tools"] or []) == tools and forced_names(request["format"]) == names
    assert request["calls_allowed"] is calls


def test_a_forced_call_is_a_grammar_for_one_call_with_the_declared_arguments():
    option = openai_with(tool_choice={"type": "function", "function": {"name": "get_weather"}})["format"]["anyOf"][0]
    assert option["required"] == ["name", "arguments"]
    assert option["properties"]["arguments"] == {"type": "object", "properties": {"city": {"type": "string"}},
                                                 "required": ["city"]}


@pytest.mark.parametrize("fields, message", [
    ({"parallel_tool_calls": False}, "parallel_tool_calls: false with tool_choice 'auto' is not supported"),
    ({"tool_choice": "auto", "parallel_tool_calls": False}, "send tool_choice 'required' or a named function"),
    ({"parallel_tool_calls": "no"}, "parallel_tool_calls: expected a boolean"),
    ({"tool_choice": "any"}, "tool_choice: expected 'auto', 'none', 'required'"),
    ({"tool_choice": {"type": "allowed_tools", "tools": []}}, "tool_choice: expected"),
    ({"tool_choice": {"type": "function", "function": {"name": "send_email"}}},
     "'send_email' is not a declared tool \\(declared: get_weather, get_stock\\)"),
    ({"tool_choice": {"type": "function", "name": "get_weather"}}, "tool_choice.function: field required"),
    ({"tool_choice": "required", "tools": []}, "tool_choice 'required' needs tools"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "leave response_format out"),
])
def test_openai_tool_choice_it_cannot_honour_is_refused(fields, message):
    with pytest.raises(DialectError, match=message):
        openai_with(**fields)


def test_parallel_calls_off_without_tools_asks_nothing_and_is_accepted():
    request = dialects.openai_request({"model": "m", "messages": [], "parallel_tool_calls": False})
    assert request["tools"] is None and request["format"] is None


def anthropic_with(tool_choice):
    tools = [{"name": tool["function"]["name"], "description": tool["function"]["description"],
              "input_schema": tool["function"]["parameters"]} for tool in (WEATHER, STOCK)]
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Weather?"}], "tools": tools}
    return dialects.anthropic_request({**body, **({} if tool_choice is None else {"tool_choice": tool_choice})})


@pytest.mark.parametrize("choice, tools, names, calls", [
    (None, 2, None, True),
    ({"type": "auto"}, 2, None, True),
    ({"type": "auto", "disable_parallel_tool_use": False}, 2, None, True),
    ({"type": "none"}, 2, None, False),
    ({"type": "any"}, 2, ["get_weather", "get_stock"], True),
    ({"type": "any", "disable_parallel_tool_use": True}, 2, ["get_weather", "get_stock"], True),
    ({"type": "tool", "name": "get_stock"}, 2, ["get_stock"], True),
    ({"type": "tool", "name": "get_stock", "disable_parallel_tool_use": True}, 2, ["get_stock"], True),
])
def test_anthropic_tool_choice_is_honoured(choice, tools, names, calls):
    request = anthropic_with(choice)
    assert len(request["tools"] or []) == tools and forced_names(request["format"]) == names
    assert request["calls_allowed"] is calls


@pytest.mark.parametrize("choice, message", [
    ({"type": "auto", "disable_parallel_tool_use": True}, "with type 'auto' is not supported here"),
    ({"type": "auto", "disable_parallel_tool_use": "yes"}, "disable_parallel_tool_use: expected a boolean"),
    ({"type": "required"}, "tool_choice.type: expected 'auto', 'any', 'tool' or 'none'"),
    ({"type": "tool"}, "tool_choice.name: field required"),
    ({"type": "tool", "name": "send_email"}, "'send_email' is not a declared tool"),
    ("any", "tool_choice: expected an object"),
])
def test_anthropic_tool_choice_it_cannot_honour_is_refused(choice, message):
    with pytest.raises(DialectError, match=message):
        anthropic_with(choice)


def test_anthropic_any_needs_tools():
    with pytest.raises(DialectError, match="'any' needs tools"):
        dialects.anthropic_request({"model": "m", "max_tokens": 8, "messages": [], "tool_choice": {"type": "any"}})


def test_a_malformed_tool_under_a_forced_choice_is_a_400_not_a_crash():
    with pytest.raises(DialectError, match="tools\\[0\\].function: field required"):
        dialects.openai_request({"model": "m", "messages": [], "tools": [{"name": "x"}], "tool_choice": "required"})


def test_a_forced_call_uses_lesson_5s_grammar():
    assert openai_with(tool_choice="required")["format"] == required_call_format([WEATHER, STOCK])


def test_the_grammar_drops_patterns_but_keeps_a_property_called_description():
    ticket = {"type": "function", "function": {"name": "open_ticket", "parameters": {
        "type": "object", "properties": {"description": {"type": "string", "description": "what broke"},
                                         "id": {"type": "string", "pattern": "^T-[0-9]+$"}}}}}
    request = dialects.openai_request({"model": "m", "messages": [], "tools": [ticket], "tool_choice": "required"})
    arguments = request["format"]["anyOf"][0]["properties"]["arguments"]
    assert arguments["properties"] == {"description": {"type": "string"}, "id": {"type": "string"}}
    assert request["format"] == required_call_format([ticket]), "the loop's grammar and the server's are one"
