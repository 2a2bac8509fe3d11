"""The course's ChatModel over an OpenAI-compatible server: the translation both ways, with no
model (a scripted server through httpx's MockTransport)."""

import json

import httpx
import pytest

from course_lib.client import OllamaError
from course_lib.dialects.openai_chat import ollama_reply, openai_messages, openai_options
from course_lib.loop import Limits, OllamaDialect, run_loop
from course_lib.openai_client import OpenAICompatible

WEATHER = {"type": "function", "function": {"name": "weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def completion(content=None, calls=(), finish="stop", prompt_tokens=12, completion_tokens=3):
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                  "function": {"name": name, "arguments": arguments}}
                                 for i, (name, arguments) in enumerate(calls)]
    return {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message,
                                                                   "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}


def scripted(replies):
    """An OpenAICompatible whose server answers ``replies`` in order and keeps every request body."""
    bodies = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        status, body = replies.pop(0)
        return httpx.Response(status, json=body)

    model = OpenAICompatible("http://gpu-box:8000/v1", model="big-model")
    model._http = httpx.Client(base_url=model.host, transport=httpx.MockTransport(answer))
    return model, bodies


def test_options_become_openai_fields_and_an_unknown_option_is_an_error():
    assert openai_options({"temperature": 0, "seed": 3, "num_predict": 80, "stop": ["\n"]}) == {
        "temperature": 0, "seed": 3, "max_tokens": 80, "stop": ["\n"]}
    with pytest.raises(ValueError, match=r"no field for the options \['num_ctx'\]"):
        openai_options({"temperature": 0, "num_ctx": 8192})


def test_calls_get_ids_and_string_arguments_and_each_result_answers_its_own_call():
    messages = [{"role": "user", "content": "Weather in Paris and Oslo?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "weather", "arguments": {"city": "Paris"}}},
                    {"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},
                {"role": "tool", "tool_name": "weather", "content": "sunny"},
                {"role": "tool", "tool_name": "weather", "content": "snow"}]
    converted = openai_messages(messages)
    first, second = converted[1]["tool_calls"]
    assert first["function"]["arguments"] == '{"city": "Paris"}' and first["type"] == "function"
    assert [m["tool_call_id"] for m in converted[2:]] == [first["id"], second["id"]] and first["id"] != second["id"]
    assert converted[1]["content"] is None  # OpenAI's "no text", not an empty string


def test_a_result_with_no_call_waiting_for_it_is_an_error_that_says_where():
    with pytest.raises(ValueError, match=r"messages\[1\]: a tool result for 'weather'"):
        openai_messages([{"role": "user", "content": "x"}, {"role": "tool", "tool_name": "weather", "content": "y"}])


def test_a_reply_comes_back_in_ollamas_shape():
    reply = ollama_reply(completion(calls=[("weather", '{"city": "Paris"}')], finish="tool_calls"), "m", 5)
    assert reply["message"]["tool_calls"] == [{"id": "call_0", "function": {"name": "weather",
                                                                              "arguments": {"city": "Paris"}}}]
    assert (reply["done_reason"], reply["prompt_eval_count"], reply["eval_count"]) == ("stop", 12, 3)
    assert reply["message"]["content"] == "" and reply["total_duration"] == 5
    cut = ollama_reply(completion("It is", finish="length"), "m", 1)
    assert cut["done_reason"] == "length" and cut["message"] == {"role": "assistant", "content": "It is"}
    broken = ollama_reply(completion(calls=[("weather", '{"city": ')]), "m", 1)
    assert broken["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": '  # left for validation


def test_lesson_4s_loop_runs_unchanged_over_an_openai_server():
    model, bodies = scripted([(200, completion(calls=[("weather", '{"city": "Paris"}')], finish="tool_calls")),
                              (200, completion("Sunny in Paris."))])

    def weather(city: str) -> str:
        """Weather in a city."""
        return f"sunny in {city}"

    transcript = run_loop(OllamaDialect(model, {"temperature": 0, "num_predict": 40}),
                          [{"role": "user", "content": "Weather in Paris?"}], {"weather": weather},
                          Limits(max_turns=3))
    assert transcript.answer == "Sunny in Paris."
    assert bodies[0]["model"] == "big-model" and bodies[0]["max_tokens"] == 40 and bodies[0]["tools"]
    sent_back = bodies[1]["messages"]
    assert sent_back[-1] == {"role": "tool", "tool_call_id": "call_0", "content": "sunny in Paris"}
    assert sent_back[-2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'


def test_a_format_becomes_a_response_format_and_other_fields_are_refused():
    model, bodies = scripted([(200, completion('{"city": "Paris"}'))])
    model.chat([{"role": "user", "content": "x"}], format={"type": "object"})
    assert bodies[0]["response_format"]["json_schema"]["schema"] == {"type": "object"}
    with pytest.raises(ValueError, match=r"no field for \['keep_alive'\]"):
        model.chat([], keep_alive=0)


def test_an_error_answer_raises_with_the_servers_message():
    model, _ = scripted([(404, {"error": {"message": "The model `big-model` does not exist.", "type": "x"}}),
                         (503, {"error": "busy"})])
    with pytest.raises(OllamaError, match="404: The model `big-model` does not exist."):
        model.chat([{"role": "user", "content": "x"}])
    with pytest.raises(OllamaError, match="503: busy"):
        model.chat([{"role": "user", "content": "x"}], tools=[WEATHER])


# With the real model: our own server's OpenAI endpoint, and llama-cpp-python's own server,
# an independent implementation, to show the runners do not depend on ours.

@pytest.fixture(scope="module")
def llama_cpp_server(tmp_path_factory):
    """``python -m llama_cpp.server`` (llama-cpp-python's OpenAI-compatible server) with the course's model."""
    import subprocess
    import sys
    import time

    from course_lib.runtime import free_port
    from course_server.models import resolve_model

    name, path = resolve_model()
    port = free_port()
    log = tmp_path_factory.mktemp("llama_cpp_server") / "log.txt"
    with log.open("w") as output:  # a file, not a pipe: llama.cpp logs a lot, and a full pipe would block it
        process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(path),
                                    "--model_alias", name, "--host", "127.0.0.1", "--port", str(port),
                                    "--n_ctx", "4096"], stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/models", timeout=1.0).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("llama_cpp.server did not start:\n" + log.read_text()[-2000:])
    yield url, name
    process.terminate()
    process.wait(timeout=30)


@pytest.mark.model
def test_a_real_call_comes_back_from_our_servers_openai_endpoint_in_ollamas_shape(url):
    from course_lib.runtime import chosen_model

    model = OpenAICompatible(f"{url}/v1", model=chosen_model())
    reply = model.chat([{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER],
                       options={"temperature": 0, "num_predict": 40})
    [call] = reply["message"]["tool_calls"]
    assert call["function"] == {"name": "weather", "arguments": {"city": "Paris"}} and call["id"]
    assert reply["prompt_eval_count"] > 0 and reply["eval_count"] > 0 and reply["done_reason"] == "stop"


@pytest.mark.model
def test_the_defense_table_runs_on_llama_cpp_pythons_own_server(llama_cpp_server, tmp_path):
    from course_lib.security import load_outcomes
    from course_tools.security_table import main

    base, name = llama_cpp_server
    main(["table", "--quick", "--defenses", "no defense", "--server", base, "--api", "openai", "--model", name,
          "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "defense_table.json").read_text())
    assert saved["server"] == f"{base} (openai)" and saved["remembered_replies"] == 0
    [outcome] = load_outcomes(tmp_path / "defense_table.json")
    assert outcome.attacked and outcome.delivered is not None and outcome.attack_succeeded is not None
    assert outcome.model_calls >= 1 and outcome.tokens > 0


@pytest.mark.model
def test_lesson_8s_raw_runner_runs_on_llama_cpp_pythons_own_server(llama_cpp_server):
    from course_lib.experiments import Experiment, raw_sender, raw_tool_request, right_call, run_condition

    base, name = llama_cpp_server
    model = OpenAICompatible(base, model=name)
    template = model_template()
    prompt = {"id": "weather", "text": "What is the weather in Paris?", "kind": "call", "tool": "weather",
              "arguments": {"city": "Paris"}}
    experiment = Experiment("openai-smoke", name)
    [record] = run_condition(experiment, "one tool", [prompt], raw_sender(model),
                             raw_tool_request(template, [WEATHER], temperature=0, num_predict=60), right_call, 1)
    assert record.response["prompt_eval_count"] > 0 and record.response["text"]
    assert record.success == right_call(prompt, record.response)  # scored the same way as on our server


def model_template() -> str:
    from llama_cpp import Llama

    from course_server.models import resolve_model

    _, path = resolve_model()
    return Llama(model_path=str(path), vocab_only=True, verbose=False).metadata["tokenizer.chat_template"]
