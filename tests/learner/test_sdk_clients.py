"""The official ``openai`` and ``anthropic`` SDKs against the embedded server, no key needed.

Each completes a tool-calling round trip (a call, then the result sent back in the
dialect's own place for it), streaming and not. What the small model writes after the
result varies, so the second turn checks the protocol, not the words.

Every test here needs the model, so the SDKs are imported where they are used: importing both
takes about two seconds, which each worker of the fast path (``-m "not model"``) would spend
collecting this file for nothing.
"""

import json

import pytest

from helpers import NOW_TOOL

pytestmark = pytest.mark.model
MODEL = "qwen2.5-coder:0.5b"
QUESTION = [{"role": "user", "content": "What time is it?"}]
# Recent anthropic SDKs have no ``temperature`` argument; the server still reads it from the body.
GREEDY = {"extra_body": {"temperature": 0}}
ANTHROPIC_NOW = {"name": "now", "description": NOW_TOOL["function"]["description"],
                 "input_schema": NOW_TOOL["function"]["parameters"]}


@pytest.fixture(scope="module")
def openai_client(url):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="not-needed-locally")


@pytest.fixture(scope="module")
def anthropic_client(url):
    import anthropic

    return anthropic.Anthropic(base_url=url, api_key="not-needed-locally")


def test_openai_sdk_round_trip(openai_client):
    first = openai_client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[NOW_TOOL],
                                                  temperature=0, seed=42, max_tokens=48)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and first.usage.prompt_tokens > 0
    [call] = choice.message.tool_calls
    assert call.function.name == "now" and isinstance(json.loads(call.function.arguments), dict)
    messages = [*QUESTION, choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "2026-11-30T09:15:00+00:00"}]
    final = openai_client.chat.completions.create(model=MODEL, messages=messages, tools=[NOW_TOOL],
                                                  temperature=0, seed=42, max_tokens=48)
    assert final.choices[0].finish_reason in ("stop", "tool_calls", "length")
    assert final.usage.prompt_tokens > first.usage.prompt_tokens


def test_openai_sdk_streaming_with_usage(openai_client):
    chunks = list(openai_client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[NOW_TOOL], temperature=0, seed=42, max_tokens=48, stream=True,
        stream_options={"include_usage": True}))
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert [call.function.name for call in calls] == ["now"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].usage.completion_tokens > 0


def test_openai_sdk_sees_openai_errors(openai_client):
    import openai

    with pytest.raises(openai.NotFoundError, match="not found"):
        openai_client.chat.completions.create(model="no-such-model", messages=QUESTION)
    wrong = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": {}}}]}]
    with pytest.raises(openai.BadRequestError, match="expected a string"):
        openai_client.chat.completions.create(model=MODEL, messages=wrong)
    assert [model.id for model in openai_client.models.list()] == [MODEL]


def test_anthropic_sdk_round_trip(anthropic_client):
    first = anthropic_client.messages.create(model=MODEL, max_tokens=48, messages=QUESTION, tools=[ANTHROPIC_NOW],
                                             **GREEDY)
    assert first.stop_reason == "tool_use" and first.usage.input_tokens > 0
    [use] = [block for block in first.content if block.type == "tool_use"]
    assert use.name == "now" and isinstance(use.input, dict)
    messages = [*QUESTION, {"role": "assistant", "content": [block.model_dump() for block in first.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                              "content": "2026-11-30T09:15:00+00:00"}]}]
    final = anthropic_client.messages.create(model=MODEL, max_tokens=48, messages=messages, tools=[ANTHROPIC_NOW],
                                             **GREEDY)
    assert final.stop_reason in ("end_turn", "tool_use", "max_tokens") and final.content


def test_anthropic_sdk_streaming(anthropic_client):
    with anthropic_client.messages.stream(model=MODEL, max_tokens=48, messages=QUESTION, tools=[ANTHROPIC_NOW],
                                          **GREEDY) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use" and message.usage.output_tokens > 0
    assert [(b.type, b.name, b.input) for b in message.content if b.type == "tool_use"][0][:2] == ("tool_use", "now")


def test_anthropic_sdk_sees_anthropic_errors(anthropic_client):
    import anthropic

    misplaced = [*QUESTION, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}},
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "09:15"}]}]
    with pytest.raises(anthropic.BadRequestError, match="belong in a user turn"):
        anthropic_client.messages.create(model=MODEL, max_tokens=8, messages=misplaced)
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client.messages.create(model="no-such-model", max_tokens=8, messages=QUESTION)


def test_both_sdks_read_how_much_of_the_prompt_the_cache_served(url, openai_client, anthropic_client):
    """After ``keep_alive: 0`` nothing is cached: 0 tokens. The same prompt again: its whole
    64-token chunks come from the cache, which OpenAI counts inside ``prompt_tokens`` and
    Anthropic beside ``input_tokens``."""
    import httpx

    def forget():
        httpx.post(f"{url}/api/chat", json={"model": MODEL, "messages": [], "keep_alive": 0}, timeout=120)

    def ask():
        return openai_client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[NOW_TOOL],
                                                     temperature=0, max_tokens=1).usage

    forget()
    cold, warm = ask(), ask()
    assert cold.prompt_tokens_details.cached_tokens == 0 and cold.prompt_tokens_details.cache_write_tokens > 0
    assert warm.prompt_tokens_details.cached_tokens == (warm.prompt_tokens - 1) // 64 * 64 > 0
    assert warm.prompt_tokens_details.cached_tokens == cold.prompt_tokens_details.cache_write_tokens
    forget()
    cold, warm = [anthropic_client.messages.create(model=MODEL, max_tokens=1, messages=QUESTION, tools=[ANTHROPIC_NOW],
                                                   **GREEDY).usage for _ in range(2)]
    assert cold.cache_read_input_tokens == 0 and cold.cache_creation_input_tokens > 0
    assert warm.cache_read_input_tokens == cold.cache_creation_input_tokens and warm.cache_creation_input_tokens == 0
    assert warm.input_tokens == cold.input_tokens > 0, "the tail after the last whole chunk"
