"""The server's routes, streams, queue and dialects in seconds: a scripted engine, no model.

``create_app`` serves any ``ServedModel``; here it serves ``helpers.FakeEngine``, which
replies with scripted tokens. So these tests can say exactly what the model "writes"
and check what reaches the client: NDJSON lines, server-sent events, tool calls sent
whole, stop strings cut out, 503s from a full queue, a hang-up that stops the work.
``test_server.py`` and its neighbours check the same contract with the real model.
"""

import dataclasses
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import httpx
import pytest
from fastapi.testclient import TestClient

from course_lib import __version__
from course_server.app import INTERNAL_ERROR, create_app
from course_server.generation import GenerationStats

from helpers import FAKE_MODEL, NOW_TOOL, QWEN_TEMPLATE, FakeEngine, serving, tokens_of, wait_until

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
HI = [{"role": "user", "content": "Hi"}]
CALL = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
ANTHROPIC_NOW = {"name": "now", "description": "Current UTC time.", "input_schema": {"type": "object"}}


@pytest.fixture
def engine(tmp_path):
    return FakeEngine(tmp_path / "fake-model.gguf")


@pytest.fixture
def client(engine):
    """The app in-process. Its Host must be a loopback name: the guard refuses others."""
    with TestClient(create_app(engine), base_url="http://localhost") as client:
        yield client


def chat(client, stream=False, **fields):
    return client.post("/api/chat", json={"model": FAKE_MODEL, "messages": HI, "stream": stream, **fields})


def ndjson(response):
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


def sse(response):
    """Server-sent events as (event name or None, data) pairs."""
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in response.text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        data = fields["data"]
        events.append((fields.get("event"), data if data == "[DONE]" else json.loads(data)))
    return events


# --- Ollama's API ----------------------------------------------------------------------

def test_root_version_and_tags(client, engine):
    assert client.get("/").text == "Ollama is running"
    assert client.head("/").status_code == 200
    assert client.get("/api/version").json() == {"version": __version__}
    [model] = client.get("/api/tags").json()["models"]
    assert model["name"] == FAKE_MODEL and model["size"] == engine.path.stat().st_size
    assert model["digest"].startswith("sha256:") and model["details"]["family"] == "qwen2"


def test_show_has_the_template_and_metadata_but_not_the_template_twice(client):
    shown = client.post("/api/show", json={"model": f"{FAKE_MODEL}:latest"}).json()
    assert shown["template"] == QWEN_TEMPLATE
    assert shown["model_info"]["general.architecture"] == "qwen2"
    assert shown["model_info"]["qwen2.context_length"] == 4096, "numbers become numbers"
    assert "tokenizer.chat_template" not in shown["model_info"]
    assert shown["capabilities"] == ["completion", "tools"]
    assert client.post("/api/show", json={"name": FAKE_MODEL}).status_code == 200, "older clients send name"


def test_a_chat_is_rendered_with_the_template_and_answered_whole(client, engine):
    engine.say("Hello there!")
    reply = chat(client, messages=[{"role": "user", "content": "Say hello."}]).json()
    assert reply["message"] == {"role": "assistant", "content": "Hello there!"}
    assert reply["model"] == FAKE_MODEL and RFC3339_UTC.match(reply["created_at"])
    assert reply["done"] is True and reply["done_reason"] == "stop"
    assert reply["eval_count"] == len(tokens_of("Hello there!"))
    assert reply["total_duration"] > 0 and reply["prompt_eval_count"] > 0
    assert engine.runs[0].prompt_text.endswith("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")


def test_a_stream_is_one_json_line_per_piece_then_the_stats(client, engine):
    engine.say(["One", ",", " two", "."])
    lines = ndjson(chat(client, stream=True))
    assert [line["message"]["content"] for line in lines] == ["One", ",", " two", ".", ""]
    assert all(line["done"] is False for line in lines[:-1])
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] == 4


def test_an_empty_chat_only_loads_the_model(client, engine):
    reply = chat(client, messages=[]).json()
    assert reply["done_reason"] == "load" and reply["message"]["content"] == ""
    assert engine.runs == []


@pytest.mark.parametrize("keep_alive", [0, "0", "0s", "0m"])
def test_keep_alive_zero_unloads_which_drops_the_cached_prompt(client, engine, keep_alive):
    reply = chat(client, messages=[], keep_alive=keep_alive).json()
    assert reply["done_reason"] == "unload" and engine.forgotten == 1 and engine.runs == []
    generated = client.post("/api/generate", json={"model": engine.name, "prompt": "", "keep_alive": keep_alive}).json()
    assert generated["done_reason"] == "unload" and engine.forgotten == 2


def test_a_burst_of_unloads_waits_as_one_and_takes_one_place_in_line(client, engine):
    """An unload waits for every slot; a dozen of them took a dozen places (the line is 3 + 8) and
    a dozen threads, so the next request got a 503. Now one waits; the others add nothing."""
    from concurrent.futures import ThreadPoolExecutor
    engine.say("One", ",", " two", ".")
    engine.unpaused.clear()  # a generation holds a slot until the end of the test
    with ThreadPoolExecutor(max_workers=14) as pool:
        running = pool.submit(chat, client)
        time.sleep(0.3)
        unloads = [pool.submit(chat, client, messages=[], keep_alive=0) for _ in range(12)]
        time.sleep(0.5)
        answered = [future for future in unloads if future.done()]
        assert len(answered) >= 11 and all(future.result().status_code == 200 for future in answered)
        engine.unpaused.set()
        assert running.result().status_code == 200 and all(future.result().status_code == 200 for future in unloads)
    assert engine.forgotten == 1


def test_a_nonzero_keep_alive_keeps_the_cache(client, engine):
    assert chat(client, messages=[], keep_alive="5m").json()["done_reason"] == "load" and engine.forgotten == 0


def test_a_tool_call_becomes_tool_calls_not_content(client, engine):
    engine.say(CALL)
    message = chat(client, tools=[NOW_TOOL]).json()["message"]
    [call] = message["tool_calls"]
    assert re.match(r"^call_[a-z0-9]{8}$", call["id"])
    assert call["function"] == {"index": 0, "name": "now", "arguments": {}}
    assert message["content"] == ""
    assert "now" in engine.runs[0].prompt_text and "<tools>" in engine.runs[0].prompt_text


def test_a_streamed_call_arrives_whole_in_one_line_after_the_text_before_it(client, engine):
    engine.say("Let me check. " + CALL)
    lines = ndjson(chat(client, stream=True, tools=[NOW_TOOL]))
    with_calls = [i for i, line in enumerate(lines) if line["message"].get("tool_calls")]
    assert len(with_calls) == 1 and with_calls[0] == len(lines) - 2, "the call, then the final line"
    contents = [line["message"]["content"] for line in lines]
    assert "".join(contents) == "Let me check. "
    assert all("<" not in text and "now" not in text for text in contents), "no piece of the call leaks"


def test_text_that_might_start_a_call_is_held_back_then_sent(client, engine):
    engine.say(["I", " like", " {", "braces", "}", " a", " lot"])
    lines = ndjson(chat(client, stream=True, tools=[NOW_TOOL]))
    contents = [line["message"]["content"] for line in lines]
    assert contents == ["I", " like", " ", "{braces} a lot", ""], "held from '{' to the end: no call after all"
    assert "tool_calls" not in lines[-2]["message"]


def test_without_tools_nothing_is_held_back(client, engine):
    engine.say(["I", " like", " {", "braces", "}"])
    contents = [line["message"]["content"] for line in ndjson(chat(client, stream=True))]
    assert contents == ["I", " like", " {", "braces", "}", ""]


def test_num_predict_caps_the_answer_with_done_reason_length(client, engine):
    engine.say("One two three four five six")
    reply = chat(client, options={"num_predict": 3}).json()
    assert reply["message"]["content"] == "One two three"
    assert reply["eval_count"] == 3 and reply["done_reason"] == "length"


def test_a_stop_string_split_over_two_tokens_is_cut_with_all_after_it(client, engine):
    engine.say(["The answer", " is 4", ".\n\nUs", "er: and now", " more"])
    lines = ndjson(chat(client, stream=True, options={"stop": ["\n\nUser:"]}))
    contents = [line["message"]["content"] for line in lines]
    assert "".join(contents) == "The answer is 4."
    assert not any("\n" in text for text in contents), "the start of the stop string was never sent"
    assert lines[-1]["done_reason"] == "stop" and lines[-1]["eval_count"] == 4


def test_a_stop_string_that_never_completes_is_sent_at_the_end(client, engine):
    engine.say(["Tea", " is", " E", "N"])
    reply = chat(client, options={"stop": ["END"]}).json()
    assert reply["message"]["content"] == "Tea is EN"


def test_characters_split_over_tokens_arrive_whole(client, engine):
    engine.say([b"caf", b"\xc3", b"\xa9 \xf0\x9f", b"\x8d", b"\xb5"])  # "café 🍵"
    contents = [line["message"]["content"] for line in ndjson(chat(client, stream=True))]
    assert "".join(contents) == "café 🍵" and not any("\ufffd" in text for text in contents)


def test_generate_renders_the_prompt_unless_it_is_raw(client, engine):
    engine.say("4", "5")
    reply = client.post("/api/generate", json={"model": FAKE_MODEL, "prompt": "2+2?", "system": "Be brief.",
                                               "stream": False}).json()
    assert reply["response"] == "4" and reply["done"] is True
    assert engine.runs[0].prompt_text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?")
    raw = "<|im_start|>user\n2+3?<|im_end|>\n"
    lines = ndjson(client.post("/api/generate", json={"model": FAKE_MODEL, "prompt": raw, "raw": True}))
    assert [line["response"] for line in lines] == ["5", ""]
    assert engine.runs[1].prompt == raw, "a raw prompt reaches the engine as it was sent"


def test_an_empty_prompt_only_loads_the_model(client, engine):
    reply = client.post("/api/generate", json={"model": FAKE_MODEL, "stream": False}).json()
    assert reply == {**reply, "response": "", "done": True, "done_reason": "load"}


# --- errors, in each API's format --------------------------------------------------------

@pytest.mark.parametrize("method, path, body, status, words", [
    ("POST", "/api/chat", b"{not json", 400, "invalid JSON"),
    ("POST", "/api/chat", {"messages": HI}, 400, "model is required"),
    ("POST", "/api/chat", {"model": "llama9:70b", "messages": HI}, 404, "model 'llama9:70b' not found"),
    ("POST", "/api/chat", {"model": FAKE_MODEL, "messages": HI, "options": {"temperature": "hot"}}, 400,
     "temperature"),
    ("POST", "/api/chat", {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "word " * 300}],
                           "options": {"num_ctx": 128}}, 400, "num_ctx"),
    ("POST", "/api/generate", {"model": FAKE_MODEL, "prompt": ["a"]}, 400, "prompt"),
    ("POST", "/api/show", {"model": "llama9:70b"}, 404, "not found"),
    ("GET", "/api/chat", None, 405, "method not allowed"),
    ("POST", "/api/nothing", {}, 404, "not found"),
])
def test_ollama_errors_are_an_error_string(client, method, path, body, status, words):
    content = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    response = client.request(method, path, content=content, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert list(response.json()) == ["error"] and words in response.json()["error"]


@pytest.mark.parametrize("method, path, body, status, kind", [
    ("POST", "/v1/chat/completions", {"model": FAKE_MODEL, "messages": "hi"}, 400, "invalid_request_error"),
    ("POST", "/v1/chat/completions", {"model": "gpt-9", "messages": HI}, 404, "not_found_error"),
    ("POST", "/v1/chat/completions", {"model": FAKE_MODEL, "messages": [{"role": "user", "content": 5}]}, 400,
     "invalid_request_error"),
    ("GET", "/v1/chat/completions", None, 405, "invalid_request_error"),
    ("GET", "/v1/nothing", None, 404, "not_found_error"),
])
def test_openai_errors_are_an_error_object(client, method, path, body, status, kind):
    response = client.request(method, path, json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == kind


@pytest.mark.parametrize("method, body, status, kind", [
    ("POST", {"model": FAKE_MODEL, "messages": HI}, 400, "invalid_request_error"),  # no max_tokens
    ("POST", {"model": "claude-9", "max_tokens": 8, "messages": HI}, 404, "not_found_error"),
    ("GET", None, 405, "invalid_request_error"),
])
def test_anthropic_errors_are_an_error_event_shape(client, method, body, status, kind):
    response = client.request(method, "/v1/messages", json=body)
    assert response.status_code == status
    reply = response.json()
    assert reply["type"] == "error" and reply["error"]["type"] == kind and reply["error"]["message"]


def test_an_engine_error_before_any_text_is_a_400(client, engine):
    engine.say([ValueError("the grammar would not compile")])
    response = chat(client)
    assert response.status_code == 400 and "the grammar would not compile" in response.json()["error"]


def test_a_model_failure_before_any_text_is_a_500_in_the_api_format(client, engine, caplog):
    """A 500 says that the server failed, never the exception's own text (the log has it)."""
    engine.say([RuntimeError("llama_decode returned -3")])
    response = chat(client)
    assert response.status_code == 500 and "first token" in response.json()["error"]
    engine.say([RuntimeError("llama_decode returned -3")])
    reply = client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI})
    assert reply.status_code == 500 and "first token" in reply.json()["error"]["message"]
    assert "llama_decode returned -3" not in response.text + reply.text and "llama_decode returned -3" in caplog.text


def test_an_engine_error_mid_stream_becomes_the_last_line_or_event(client, engine):
    engine.say(["Hel", RuntimeError("the model fell over")], ["Hel", RuntimeError("the model fell over")])
    lines = ndjson(chat(client, stream=True))
    assert lines[0]["message"]["content"] == "Hel" and lines[-1] == {"error": INTERNAL_ERROR}
    events = sse(client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI, "stream": True}))
    assert events[-1][0] == "error" and events[-1][1]["error"]["message"] == INTERNAL_ERROR


# --- OpenAI's dialect ----------------------------------------------------------------------

def test_openai_models_lists_the_model(client):
    [model] = client.get("/v1/models").json()["data"]
    assert model["id"] == FAKE_MODEL and model["object"] == "model"


def test_openai_chat_completion_with_usage(client, engine):
    engine.say("Hi there")
    reply = client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI}).json()
    assert reply["object"] == "chat.completion" and reply["id"].startswith("chatcmpl-")
    [choice] = reply["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Hi there"} and choice["finish_reason"] == "stop"
    usage = reply["usage"]
    assert usage["completion_tokens"] == 2
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_openai_options_are_translated_for_the_engine(client, engine):
    engine.say("One two three")
    reply = client.post("/v1/chat/completions", json={
        "model": FAKE_MODEL, "max_tokens": 2, "stop": "\n\n", "temperature": 0,
        "messages": [{"role": "developer", "content": "Be brief."}, *HI]}).json()
    assert reply["choices"][0]["finish_reason"] == "length" and reply["choices"][0]["message"]["content"] == "One two"
    run = engine.runs[0]
    assert (run.options.num_predict, run.options.stop, run.options.temperature) == (2, ["\n\n"], 0)
    assert run.prompt_text.startswith("<|im_start|>system\nBe brief.<|im_end|>"), "developer became system"


def test_openai_tool_calls_carry_their_arguments_as_a_json_string(client, engine):
    engine.say('<tool_call>\n{"name": "now", "arguments": {"zone": "UTC"}}\n</tool_call>')
    reply = client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI,
                                                      "tools": [NOW_TOOL]}).json()
    [choice] = reply["choices"]
    [call] = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert call["type"] == "function" and call["function"]["name"] == "now"
    assert json.loads(call["function"]["arguments"]) == {"zone": "UTC"}


def test_an_openai_tool_result_is_rendered_as_a_tool_response(client, engine):
    turns = [*HI, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "09:15"}]
    client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": turns, "tools": [NOW_TOOL]})
    assert "<tool_response>\n09:15\n</tool_response>" in engine.runs[0].prompt_text


def test_openai_stream_is_chunks_then_usage_then_done(client, engine):
    engine.say("Let me see. " + CALL)
    events = sse(client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI, "stream": True,
                                                           "tools": [NOW_TOOL]}))
    assert all(name is None for name, _ in events), "OpenAI's events have no names"
    chunks = [data for _, data in events[:-1]]
    assert events[-1][1] == "[DONE]"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks[1:-2]]
    assert "".join(delta.get("content", "") for delta in deltas) == "Let me see. "
    [with_call] = [delta for delta in deltas if "tool_calls" in delta]
    [call] = with_call["tool_calls"]
    assert call["index"] == 0 and call["function"] == {"name": "now", "arguments": "{}"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == engine.runs[0].ending.eval_count
    assert len({chunk["id"] for chunk in chunks}) == 1, "one id for the whole stream"


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"tools": [NOW_TOOL], "tool_choice": "none"}),
    ("/v1/messages", {"tools": [ANTHROPIC_NOW], "tool_choice": {"type": "none"}, "max_tokens": 64}),
])
def test_tool_choice_none_shows_the_tools_and_no_call_comes_back(client, engine, path, body):
    """OpenAI's "none": the model sees its tools (it may talk about them), and the reply is text.
    The engine is told to forbid the call token; whatever the model writes is content."""
    engine.say("Let me see. " + CALL)
    reply = client.post(path, json={"model": FAKE_MODEL, "messages": HI, **body}).json()
    run = engine.runs[0]
    assert '"name": "now"' in run.prompt_text and "<tools>" in run.prompt_text, "the tools stay in the prompt"
    assert run.prompt.calls_allowed is False
    if path == "/v1/messages":
        assert reply["content"] == [{"type": "text", "text": "Let me see. " + CALL}]
        assert reply["stop_reason"] == "end_turn"
    else:
        [choice] = reply["choices"]
        assert choice["message"]["content"] == "Let me see. " + CALL and "tool_calls" not in choice["message"]
        assert choice["finish_reason"] == "stop"
    engine.say(CALL)
    client.post(path, json={"model": FAKE_MODEL, "messages": HI, **body, "tool_choice": None})
    assert engine.runs[1].prompt.calls_allowed is True, "only 'none' forbids calls"


# --- Anthropic's dialect ---------------------------------------------------------------

def anthropic(client, **fields):
    return client.post("/v1/messages", json={"model": FAKE_MODEL, "max_tokens": 64, "messages": HI, **fields})


def test_anthropic_message_with_text_and_usage(client, engine):
    engine.say("Hi there")
    reply = anthropic(client, system="Be brief.").json()
    assert reply["type"] == "message" and reply["id"].startswith("msg_")
    assert reply["content"] == [{"type": "text", "text": "Hi there"}] and reply["stop_reason"] == "end_turn"
    assert reply["usage"]["output_tokens"] == 2 and reply["usage"]["input_tokens"] > 0
    assert engine.runs[0].prompt_text.startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_anthropic_max_tokens_is_the_token_cap(client, engine):
    engine.say("One two three")
    reply = anthropic(client, max_tokens=2).json()
    assert reply["stop_reason"] == "max_tokens" and reply["content"][0]["text"] == "One two"


def test_anthropic_tool_use_blocks_and_results(client, engine):
    engine.say("Checking. " + CALL)
    reply = anthropic(client, tools=[ANTHROPIC_NOW]).json()
    text, use = reply["content"]
    assert text == {"type": "text", "text": "Checking. "}
    assert use["type"] == "tool_use" and use["name"] == "now" and use["input"] == {}
    assert reply["stop_reason"] == "tool_use"
    anthropic(client, tools=[ANTHROPIC_NOW], messages=[
        *HI, {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "09:15"}]}])
    assert "<tool_response>\n09:15\n</tool_response>" in engine.runs[1].prompt_text


def test_anthropic_stream_is_the_documented_event_sequence(client, engine):
    engine.say("Checking. " + CALL)
    events = sse(anthropic(client, tools=[ANTHROPIC_NOW], stream=True))
    names = [name for name, _ in events]
    text_deltas = names.count("content_block_delta") - 1
    assert names == ["message_start", "content_block_start", *["content_block_delta"] * text_deltas,
                     "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events), "each event's type repeats its name"
    data = [data for _, data in events]
    assert "".join(d["delta"]["text"] for d in data if d["type"] == "content_block_delta"
                   and d["delta"]["type"] == "text_delta") == "Checking. "
    tool_start = data[-5]
    assert tool_start["index"] == 1 and tool_start["content_block"]["name"] == "now"
    assert json.loads(data[-4]["delta"]["partial_json"]) == {}
    assert data[-2]["delta"]["stop_reason"] == "tool_use" and data[-2]["usage"]["output_tokens"] > 0


# --- the prompt cache's share, in each API's own words -------------------------------------

class CachingEngine(FakeEngine):
    """A ``FakeEngine`` whose stats say half of each prompt came from the cache and a quarter of
    it went into it (what ``Engine.generate`` reports from its decoder's ``CacheUse``)."""

    def generate(self, *args, **kwargs):
        for item in super().generate(*args, **kwargs):
            if isinstance(item, GenerationStats):
                item = dataclasses.replace(item, cache_read_tokens=item.prompt_eval_count // 2,
                                           cache_write_tokens=item.prompt_eval_count // 4)
            yield item


@pytest.fixture
def caching(tmp_path):
    engine = CachingEngine(tmp_path / "fake-model.gguf")
    with TestClient(create_app(engine), base_url="http://localhost") as client:
        yield client


def test_openai_reports_the_cached_tokens_inside_prompt_tokens(caching):
    whole = caching.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI}).json()["usage"]
    prompt = whole["prompt_tokens"]
    assert whole["prompt_tokens_details"] == {"cached_tokens": prompt // 2, "cache_write_tokens": prompt // 4}
    events = sse(caching.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI, "stream": True}))
    streamed = events[-2][1]["usage"]
    assert streamed == whole, "the streamed usage chunk says the same"


def test_anthropic_splits_the_prompt_into_cache_read_cache_written_and_the_rest(caching):
    whole = anthropic(caching).json()["usage"]
    read, written = whole["cache_read_input_tokens"], whole["cache_creation_input_tokens"]
    prompt = read + written + whole["input_tokens"]
    assert read == prompt // 2 and written == prompt // 4 and whole["input_tokens"] > 0
    events = sse(anthropic(caching, stream=True))
    assert events[0][1]["message"]["usage"] == {"input_tokens": 0, "cache_creation_input_tokens": 0,
                                                "cache_read_input_tokens": 0, "output_tokens": 0}
    assert events[-2][0] == "message_delta" and events[-2][1]["usage"] == whole, "message_delta's totals"


def test_ollama_reports_the_cached_tokens_in_its_own_field_and_nothing_else(caching):
    """Ollama's ``prompt_eval_cached_count``: the part of ``prompt_eval_count`` read from the cache,
    on the final line of ``/api/chat`` and ``/api/generate``. Ollama has no field for what was
    written to the cache, and the server adds none."""
    final = chat(caching).json()
    assert set(final) == {"model", "created_at", "message", "done", "done_reason", "total_duration",
                          "load_duration", "prompt_eval_count", "prompt_eval_cached_count", "prompt_eval_duration",
                          "eval_count", "eval_duration"}
    assert final["prompt_eval_cached_count"] == final["prompt_eval_count"] // 2
    lines = ndjson(chat(caching, stream=True))
    assert lines[-1]["prompt_eval_cached_count"] == final["prompt_eval_cached_count"]
    assert not any("cache" in key for line in lines[:-1] for key in line), "only the final line has the counts"
    generated = caching.post("/api/generate", json={"model": FAKE_MODEL, "prompt": "Hi", "stream": False}).json()
    assert generated["prompt_eval_cached_count"] == generated["prompt_eval_count"] // 2


def test_the_official_clients_read_the_cache_fields(tmp_path):
    """The ``openai`` and ``anthropic`` packages parse the fields into their own types, whole and
    streamed; the ``ollama`` package accepts its final line with the field (imported here: the
    rest of this file does not need them)."""
    import anthropic as anthropic_sdk
    import ollama
    import openai

    with serving(create_app(CachingEngine(tmp_path / "fake-model.gguf"))) as url:
        reply = ollama.Client(host=url).chat(model=FAKE_MODEL, messages=HI)
        assert reply.done and reply.prompt_eval_count > 0 and reply.message.content
        oa = openai.OpenAI(base_url=f"{url}/v1", api_key="not-needed-locally")
        usage = oa.chat.completions.create(model=FAKE_MODEL, messages=HI).usage
        assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens // 2 > 0
        assert usage.prompt_tokens_details.cache_write_tokens == usage.prompt_tokens // 4
        chunks = list(oa.chat.completions.create(model=FAKE_MODEL, messages=HI, stream=True,
                                                 stream_options={"include_usage": True}))
        assert chunks[-1].usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens_details.cached_tokens
        an = anthropic_sdk.Anthropic(base_url=url, api_key="not-needed-locally")
        whole = an.messages.create(model=FAKE_MODEL, max_tokens=16, messages=HI).usage
        assert whole.cache_read_input_tokens > 0 and whole.cache_creation_input_tokens > 0
        with an.messages.stream(model=FAKE_MODEL, max_tokens=16, messages=HI) as stream:
            streamed = stream.get_final_message().usage
        assert (streamed.input_tokens, streamed.cache_read_input_tokens, streamed.cache_creation_input_tokens) == (
            whole.input_tokens, whole.cache_read_input_tokens, whole.cache_creation_input_tokens)


# --- the queue, and clients that leave ---------------------------------------------------

LONG = [f" w{i}" for i in range(1000)]  # at 0.01 s a token: ten seconds, unless it is stopped


def post_in_background(url, body):
    """Send a request from another thread (it blocks until answered); return the thread."""
    thread = threading.Thread(target=httpx.post, args=(url + "/api/chat",), kwargs={"json": body, "timeout": 30})
    thread.start()
    return thread


def test_a_full_queue_answers_503_and_the_others_are_served(tmp_path):
    """One generates, ``max_queue`` wait, and the request after them is turned away at once."""
    engine = FakeEngine(tmp_path / "fake.gguf")
    engine.unpaused.clear()  # the first generation holds the model until the 503 is in
    body = {"model": FAKE_MODEL, "messages": HI, "stream": False}
    with serving(create_app(engine, max_queue=2)) as url, ThreadPoolExecutor(4) as pool:
        replies = [pool.submit(httpx.post, url + "/api/chat", json=body, timeout=30) for _ in range(4)]
        first_answered = next(as_completed(replies, timeout=10)).result()
        engine.unpaused.set()
        statuses = sorted(reply.result().status_code for reply in replies)
    assert first_answered.status_code == 503 and statuses == [200, 200, 200, 503]
    assert first_answered.json() == {"error": "server busy, please try again. maximum pending requests exceeded"}
    assert len(engine.runs) == 3


def test_a_503_comes_in_the_format_of_each_api(tmp_path):
    engine = FakeEngine(tmp_path / "fake.gguf")
    engine.unpaused.clear()
    with serving(create_app(engine, max_queue=0)) as url:
        first = post_in_background(url, {"model": FAKE_MODEL, "messages": HI})
        wait_until(lambda: engine.runs)
        ollama = httpx.post(url + "/api/chat", json={"model": FAKE_MODEL, "messages": HI})
        openai = httpx.post(url + "/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI})
        claude = httpx.post(url + "/v1/messages", json={"model": FAKE_MODEL, "max_tokens": 8, "messages": HI})
        engine.unpaused.set()
        first.join()
    assert [r.status_code for r in (ollama, openai, claude)] == [503] * 3
    assert "server busy" in ollama.json()["error"]
    assert openai.json()["error"]["type"] == "server_overloaded"
    assert claude.json()["error"]["type"] == "overloaded_error"


def test_a_client_that_hangs_up_mid_stream_stops_the_generation(tmp_path):
    engine = FakeEngine(tmp_path / "fake.gguf", replies=[LONG], delay=0.01)
    with serving(create_app(engine)) as url:
        with httpx.stream("POST", url + "/api/chat", json={"model": FAKE_MODEL, "messages": HI}) as response:
            for _, _ in zip(range(3), response.iter_lines()):
                pass  # read three lines, then hang up
        wait_until(lambda: engine.runs[0].ending is not None)  # long before ten seconds
    assert engine.runs[0].ending.eval_count < len(LONG)


def test_a_client_that_leaves_stops_its_unstreamed_generation(tmp_path):
    engine = FakeEngine(tmp_path / "fake.gguf", replies=[LONG], delay=0.01)
    with serving(create_app(engine)) as url:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/api/chat", json={"model": FAKE_MODEL, "messages": HI, "stream": False},
                       timeout=httpx.Timeout(10, read=0.3))
        wait_until(lambda: engine.runs[0].ending is not None)
    assert engine.runs[0].ending.eval_count < len(LONG)


def test_a_client_that_leaves_while_queued_never_generates(tmp_path):
    engine = FakeEngine(tmp_path / "fake.gguf", replies=["first", "never", "next"])
    engine.unpaused.clear()
    app = create_app(engine)
    with serving(app) as url:
        first = post_in_background(url, {"model": FAKE_MODEL, "messages": HI})
        wait_until(lambda: engine.runs)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/api/chat", json={"model": FAKE_MODEL, "messages": HI},
                       timeout=httpx.Timeout(10, read=0.1))
        wait_until(lambda: app.state.scheduler.pending == 1)  # the server noticed: only the first is wanted
        engine.unpaused.set()
        first.join()
        reply = httpx.post(url + "/api/chat", json={"model": FAKE_MODEL, "messages": HI, "stream": False})
    assert len(engine.runs) == 2, "the request whose client left was never generated"
    assert reply.json()["message"]["content"] == "never", "so the script's next reply went to the next request"


def test_the_prompt_cache_is_on_by_default_and_reset_cache_turns_it_off(capsys):
    from course_server.app import parse_args
    from course_server.generation import DEFAULT_PROMPT_CACHE

    assert DEFAULT_PROMPT_CACHE > 0 and parse_args([]).prompt_cache == DEFAULT_PROMPT_CACHE
    assert parse_args(["--prompt-cache", "0"]).prompt_cache == 0
    assert parse_args(["--reset-cache"]).prompt_cache == 0
    with pytest.raises(SystemExit):
        parse_args(["--prompt-cache", "-1"])
    assert "--prompt-cache takes a number of slots" in capsys.readouterr().err


def test_an_engine_with_slots_runs_that_many_at_once_and_queues_the_rest(tmp_path):
    """``parallel`` generations run together; ``max_queue`` more wait; the next one gets a 503."""
    engine = FakeEngine(tmp_path / "fake.gguf")
    engine.parallel = 2
    engine.unpaused.clear()
    body = {"model": FAKE_MODEL, "messages": HI, "stream": False}
    with serving(create_app(engine, max_queue=1)) as url, ThreadPoolExecutor(4) as pool:
        replies = [pool.submit(httpx.post, url + "/api/chat", json=body, timeout=30) for _ in range(3)]
        wait_until(lambda: len(engine.runs) == 2)  # two generate at once, the third waits
        turned_away = httpx.post(url + "/api/chat", json=body, timeout=30)
        assert len(engine.runs) == 2
        engine.unpaused.set()
        statuses = [reply.result().status_code for reply in replies]
    assert turned_away.status_code == 503 and statuses == [200, 200, 200] and len(engine.runs) == 3


def test_parallel_slots_need_the_prompt_cache():
    from course_server.app import parse_args
    assert parse_args([]).parallel is None and parse_args(["--parallel", "2"]).parallel == 2
    assert parse_args(["--reset-cache", "--parallel", "4"]).parallel == 1
    assert parse_args(["--prompt-cache", "0"]).parallel == 1
    with pytest.raises(SystemExit):
        parse_args(["--parallel", "0"])


def test_weights_are_repacked_unless_asked_not_to():
    from course_server.app import parse_args
    assert parse_args([]).no_repack is False and parse_args(["--no-repack"]).no_repack is True


def test_a_finished_reply_frees_its_place_in_line_at_once(tmp_path):
    """A client that sends its next request as soon as a reply is complete is not turned away,
    even while the engine is still tidying up after that reply (max_queue 0: one place only)."""
    tidied = threading.Event()

    class TidiesUpSlowly(FakeEngine):
        def generate(self, *args, **kwargs):
            yield from super().generate(*args, **kwargs)
            tidied.wait(timeout=10)  # work after the stats, as an engine's generator may do

    engine = TidiesUpSlowly(tmp_path / "fake.gguf")
    body = {"model": FAKE_MODEL, "messages": HI, "stream": False}
    with serving(create_app(engine, max_queue=0)) as url, ThreadPoolExecutor(1) as pool:
        assert httpx.post(url + "/api/chat", json=body, timeout=30).status_code == 200
        second = pool.submit(httpx.post, url + "/api/chat", json=body, timeout=30)
        time.sleep(0.2)
        tidied.set()
        assert second.result().status_code == 200
