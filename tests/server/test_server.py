"""Contract tests: the real server and model, driven with raw HTTP (httpx).

These check the wire contract the lessons rely on (Ollama's field names, streaming
format, metrics and errors), not the words the model chooses.
"""

import json
import re
import threading
import time

import httpx
import pytest

from helpers import GREEDY, NOW_TOOL

pytestmark = pytest.mark.model

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
MODEL = "qwen2.5-coder:0.5b"
METRICS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
           "eval_count", "eval_duration")
TIME_QUESTION = [{"role": "user", "content": "What time is it?"}]


def post(url, path, body, **kwargs):
    return httpx.post(url + path, json=body, timeout=120, **kwargs)


def ndjson_lines(response):
    assert response.headers["content-type"].startswith("application/x-ndjson")
    raw = response.text.split("\n")
    assert raw[-1] == "" and all(raw[:-1]), "one JSON object per line, no blank lines"
    assert all(": " not in line.split('"content"')[0] for line in raw[:-1][:1]), "compact JSON"
    return [json.loads(line) for line in raw[:-1]]


def assert_final_line(line):
    assert line["done"] is True and line["done_reason"] in ("stop", "length")
    for key in METRICS:
        assert isinstance(line[key], int) and line[key] >= 0, key
    assert line["prompt_eval_count"] > 0 and line["eval_count"] > 0
    assert line["total_duration"] >= line["prompt_eval_duration"] + line["eval_duration"]


def test_root_version_and_tags(url):
    assert httpx.get(url).text == "Ollama is running"
    assert isinstance(httpx.get(url + "/api/version").json()["version"], str)
    models = httpx.get(url + "/api/tags").json()["models"]
    assert [m["name"] for m in models] == [MODEL]
    assert models[0]["details"]["format"] == "gguf" and models[0]["digest"].startswith("sha256:")


def test_show_has_template_model_info_and_tools_capability(url):
    shown = post(url, "/api/show", {"model": MODEL}).json()
    assert "<tool_call>" in shown["template"]
    assert shown["model_info"]["general.architecture"] == "qwen2"
    assert "tools" in shown["capabilities"] and "completion" in shown["capabilities"]
    assert shown["details"]["quantization_level"] == "Q4_K_M"


def test_chat_without_streaming(url):
    reply = post(url, "/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}],
                                    "stream": False, "options": GREEDY}).json()
    assert reply["model"] == MODEL and RFC3339_UTC.match(reply["created_at"])
    assert reply["message"]["role"] == "assistant" and reply["message"]["content"].strip()
    assert_final_line(reply)


def test_stream_is_the_default_and_is_ndjson(url):
    response = post(url, "/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "Count to five."}],
                                       "options": GREEDY})
    lines = ndjson_lines(response)
    assert len(lines) > 2
    assert all(line["done"] is False and RFC3339_UTC.match(line["created_at"]) for line in lines[:-1])
    assert "".join(line["message"]["content"] for line in lines).strip()
    assert_final_line(lines[-1])
    assert lines[-1]["message"] == {"role": "assistant", "content": ""}


def check_now_call(call):
    """The name is right; the arguments are an object (this small model often copies the
    schema into them, which the validation lesson deals with)."""
    assert re.match(r"^call_[a-z0-9]{8}$", call["id"])
    assert call["function"]["index"] == 0 and call["function"]["name"] == "now"
    assert isinstance(call["function"]["arguments"], dict)


def test_a_tool_call_without_streaming(url):
    reply = post(url, "/api/chat", {"model": MODEL, "messages": TIME_QUESTION, "tools": [NOW_TOOL],
                                    "stream": False, "options": GREEDY}).json()
    [call] = reply["message"]["tool_calls"]
    check_now_call(call)


def test_a_streamed_tool_call_arrives_whole_in_one_chunk(url):
    lines = ndjson_lines(post(url, "/api/chat", {"model": MODEL, "messages": TIME_QUESTION,
                                                 "tools": [NOW_TOOL], "options": GREEDY}))
    with_calls = [line for line in lines if line["message"].get("tool_calls")]
    assert len(with_calls) == 1 and not with_calls[0]["done"]
    [call] = with_calls[0]["message"]["tool_calls"]
    check_now_call(call)
    assert "now" not in "".join(line["message"]["content"] for line in lines), "the call is not also in content"
    assert_final_line(lines[-1])


def test_a_tool_result_leads_to_an_answer(url):
    messages = [*TIME_QUESTION,
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]},
                {"role": "tool", "content": "2026-11-30T09:15:00+00:00", "tool_name": "now"}]
    reply = post(url, "/api/chat", {"model": MODEL, "messages": messages, "tools": [NOW_TOOL],
                                    "stream": False, "options": GREEDY}).json()
    assert "9:15" in reply["message"]["content"] or "09:15" in reply["message"]["content"]


def test_num_predict_caps_the_answer(url):
    reply = post(url, "/api/chat", {"model": MODEL, "stream": False,
                                    "messages": [{"role": "user", "content": "Write a long story about a cat."}],
                                    "options": {"temperature": 0, "num_predict": 5}}).json()
    assert reply["eval_count"] == 5 and reply["done_reason"] == "length"


def test_stop_strings_end_the_answer_and_are_not_included(url):
    question = {"role": "user", "content": "Count from 1 to 10, separated by commas."}
    reply = post(url, "/api/chat", {"model": MODEL, "stream": False, "messages": [question],
                                    "options": {**GREEDY, "stop": ["5"]}}).json()
    assert reply["done_reason"] == "stop"
    assert "4" in reply["message"]["content"] and "5" not in reply["message"]["content"]


def test_format_json_and_a_json_schema_constrain_the_output(url):
    ask = [{"role": "user", "content": "Give the capital of France as JSON with a key city."}]
    reply = post(url, "/api/chat", {"model": MODEL, "messages": ask, "format": "json", "stream": False,
                                    "options": GREEDY}).json()
    assert isinstance(json.loads(reply["message"]["content"]), dict)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    reply = post(url, "/api/chat", {"model": MODEL, "messages": ask, "format": schema, "stream": False,
                                    "options": GREEDY}).json()
    assert isinstance(json.loads(reply["message"]["content"])["city"], str)


def test_generate_raw_sends_the_prompt_as_is(url):
    prompt = "<|im_start|>user\nWhat is 2+2? Answer with a number only.<|im_end|>\n<|im_start|>assistant\n"
    reply = post(url, "/api/generate", {"model": MODEL, "prompt": prompt, "raw": True, "stream": False,
                                        "options": GREEDY}).json()
    assert "4" in reply["response"]
    assert_final_line(reply)
    templated = post(url, "/api/generate", {"model": MODEL, "prompt": "What is 2+2? Answer with a number only.",
                                            "stream": False, "options": GREEDY}).json()
    assert templated["prompt_eval_count"] > reply["prompt_eval_count"], "the template adds a system turn"


@pytest.mark.parametrize("body, status, message", [
    (b"{not json", 400, "invalid JSON"),
    (b"[]", 400, "JSON object"),
    ({"messages": TIME_QUESTION}, 400, "model is required"),
    ({"model": "llama9:70b", "messages": TIME_QUESTION}, 404, "model 'llama9:70b' not found"),
    ({"model": MODEL, "messages": TIME_QUESTION, "options": {"temperature": "hot"}}, 400, "temperature"),
    ({"model": MODEL, "messages": TIME_QUESTION, "options": {"num_predict": 1.5}}, 400, "num_predict"),
    ({"model": MODEL, "messages": [{"role": "robot", "content": "beep"}]}, 400, "role"),
    ({"model": MODEL, "messages": [{"content": "who am I?"}]}, 400, "role"),
    ({"model": MODEL, "messages": TIME_QUESTION, "tools": [{"type": "function", "function": {}}]}, 400, "name"),
    ({"model": MODEL, "messages": TIME_QUESTION, "stream": "yes"}, 400, "stream"),
])
def test_bad_requests_get_an_ollama_error_and_the_server_stays_up(url, body, status, message):
    kwargs = ({"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes)
              else {"json": body})
    response = httpx.post(url + "/api/chat", timeout=60, **kwargs)
    assert response.status_code == status
    assert message in response.json()["error"]
    assert httpx.get(url).text == "Ollama is running"


def test_unknown_options_are_ignored(url):
    reply = post(url, "/api/chat", {"model": MODEL, "messages": TIME_QUESTION, "stream": False,
                                    "options": {**GREEDY, "num_predict": 3, "mirostat_tau": 5.0, "no_such": 1}})
    assert reply.status_code == 200


def test_empty_messages_load_the_model_as_in_ollama(url):
    reply = post(url, "/api/chat", {"model": MODEL, "messages": [], "stream": False}).json()
    assert reply["done"] is True and reply["done_reason"] == "load"


def test_the_final_line_says_how_much_of_the_prompt_the_cache_served(url):
    """Ollama's ``prompt_eval_cached_count``: 0 once the cache is emptied (``keep_alive: 0``); for
    the same chat again, the prompt's whole 64-token chunks before its last token."""
    body = {"model": MODEL, "messages": TIME_QUESTION, "tools": [NOW_TOOL], "stream": False,
            "options": {**GREEDY, "num_predict": 1}}
    post(url, "/api/chat", {"model": MODEL, "messages": [], "keep_alive": 0})
    cold, warm = post(url, "/api/chat", body).json(), post(url, "/api/chat", body).json()
    assert cold["prompt_eval_cached_count"] == 0
    assert warm["prompt_eval_cached_count"] == (warm["prompt_eval_count"] - 1) // 64 * 64 > 0


def test_a_prompt_longer_than_the_context_is_a_400(url):
    long = [{"role": "user", "content": "word " * 300}]
    response = post(url, "/api/chat", {"model": MODEL, "messages": long, "stream": False,
                                       "options": {"num_ctx": 128}})
    assert response.status_code == 400 and "num_ctx" in response.json()["error"]


def long_generation(url, results):
    body = {"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "Write a very long essay."}],
            "options": {"temperature": 0, "num_predict": 120}}
    results.append(post(url, "/api/chat", body).status_code)


def test_a_full_queue_answers_503(url):
    results = []
    workers = [threading.Thread(target=long_generation, args=(url, results)) for _ in range(4)]
    for worker in workers:  # two run (--parallel 2), two wait: the line (max-queue 2) is now full
        worker.start()
        time.sleep(0.3)
    response = post(url, "/api/chat", {"model": MODEL, "messages": TIME_QUESTION, "stream": False})
    assert response.status_code == 503 and "server busy" in response.json()["error"]
    for worker in workers:
        worker.join()
    assert results == [200, 200, 200, 200]


def test_a_client_that_disconnects_mid_stream_stops_the_generation(url):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a very long essay about the sea."}],
            "options": {"temperature": 0, "num_predict": 2000}}
    with httpx.stream("POST", url + "/api/chat", json=body, timeout=60) as response:
        for _, _ in zip(range(3), response.iter_lines()):
            pass  # read three lines, then hang up
    started = time.perf_counter()
    reply = post(url, "/api/chat", {"model": MODEL, "messages": TIME_QUESTION, "stream": False,
                                    "options": {"temperature": 0, "num_predict": 5}})
    waited = time.perf_counter() - started
    assert reply.status_code == 200
    assert waited < 10, f"the next request waited {waited:.1f} s: the abandoned generation kept running"


def test_a_schema_the_grammar_compiler_gets_wrong_is_a_400_not_a_crash(url):
    schema = {"type": "object", "properties": {"sku": {"type": "string", "pattern": r"^SKU-\d{5}$"}},
              "required": ["sku"]}
    response = post(url, "/api/chat", {"model": MODEL, "messages": TIME_QUESTION, "format": schema, "stream": False,
                                       "options": GREEDY})
    assert response.status_code == 400 and "grammar" in response.json()["error"]
    assert httpx.get(url).text == "Ollama is running"
