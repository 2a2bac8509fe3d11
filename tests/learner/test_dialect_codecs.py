"""The dialects' codecs (``course_lib/dialects``): one reader of OpenAI's argument strings, and
what each side does when it fails. The server refuses a client's malformed arguments with a
400; a client keeps a model's, and the loop answers that call with an error result."""

import json

import httpx
import pytest

from course_lib.dialects import json_text
from course_lib.dialects.anthropic_messages import anthropic_tool, ollama_tool
from course_lib.dialects.ollama import DialectError
from course_lib.dialects.openai_chat import arguments_or_text, openai_request, parse_arguments
from course_lib.loop import Limits, run_agent
from course_lib.messages import ErrorKind
from course_lib.openai_client import OpenAICompatible
from course_lib.providers import ADAPTERS, Provider, run
from course_lib.tools import tool_schema

MALFORMED = {  # arguments a hosted model may send -> what the one reader says about them
    "{not json": "is not valid JSON: Expecting property name",
    "[1, 2]": r"\(decoded\): expected an object, got list",
    '"Tokyo"': r"\(decoded\): expected an object, got str",
    '{"city": NaN}': "is not valid JSON: NaN is not a JSON number",
    '{"n": 1e999}': "is not valid JSON: 1e999 is too large",
    "[" * 5000 + "]" * 5000: "is not valid JSON: nested more than 64 levels deep",
    '{"a": ' + "[" * 70 + "]" * 70 + "}": "nested more than 64 levels deep",  # within what Python reads
    '{"city": "\\ud800"}': "lone surrogate",
}


def weather(city: str) -> str:
    """Weather in a city."""
    return f"sunny in {city}"


def test_the_reader_gives_an_object_or_no_arguments():
    assert parse_arguments('{"city": "Paris"}') == {"city": "Paris"}
    assert parse_arguments(None) == parse_arguments("") == parse_arguments("  ") == parse_arguments("{}") == {}


@pytest.mark.parametrize("text", MALFORMED)
def test_the_reader_says_what_is_wrong_and_where(text):
    with pytest.raises(DialectError, match=MALFORMED[text]) as refused:
        parse_arguments(text, "tool_calls[0].function.arguments")
    assert str(refused.value).startswith("tool_calls[0].function.arguments")
    assert refused.value.status == 400


def test_an_object_where_openai_wants_a_string_is_refused():
    with pytest.raises(DialectError, match="expected a string"):
        parse_arguments({"city": "Paris"})


@pytest.mark.parametrize("text", MALFORMED)
def test_the_server_refuses_what_a_client_keeps(text):
    """One reader, two policies: a request's arguments are the client's mistake (a 400 naming
    the field), a reply's are the model's (kept, for validation to answer)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": text}}
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather?"},
                                       {"role": "assistant", "content": None, "tool_calls": [call]}]}
    with pytest.raises(DialectError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arguments"):
        openai_request(body)
    assert arguments_or_text(text) == text


def test_the_body_and_the_arguments_nest_equally_deep():
    from course_server.wire import MAX_JSON_DEPTH

    assert json_text.MAX_JSON_DEPTH == MAX_JSON_DEPTH


def test_anthropic_declarations_go_both_ways():
    declaration = tool_schema(weather)
    assert anthropic_tool(declaration)["input_schema"] == declaration["function"]["parameters"]
    assert ollama_tool(anthropic_tool(declaration), "tools.0.") == {"type": "function", "function": {
        "name": "weather", "description": declaration["function"]["description"],
        "parameters": declaration["function"]["parameters"]}}


# --- the clients: a model's malformed arguments become an error result in the loop ------------

def completion(arguments=None, text=None):
    """An OpenAI chat completion: one call of ``weather`` with ``arguments`` (as sent), or ``text``."""
    message = {"role": "assistant", "content": text}
    if arguments is not None:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "weather", "arguments": arguments}}]
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if arguments else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]"])
def test_run_agent_over_an_openai_server_answers_malformed_arguments_with_an_error(arguments):
    replies, sent = [completion(arguments), completion(text="Sunny.")], []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=replies.pop(0))

    model = OpenAICompatible("http://gpu-box:8000/v1", model="big-model")
    model._http = httpx.Client(base_url=model.host, transport=httpx.MockTransport(answer))
    transcript = run_agent(model, [{"role": "user", "content": "Weather in Paris?"}], {"weather": weather},
                           Limits(max_turns=3))
    first = transcript.turns[0]
    assert first.calls == [("weather", arguments)]  # what the model sent, shown as it was
    assert first.outcomes[0].error is ErrorKind.INVALID_ARGUMENTS
    assert first.results[0]["content"].startswith("error: invalid arguments for weather")
    assert transcript.answer == "Sunny."
    assert sent[1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == arguments  # sent back unchanged
    assert sent[1]["messages"][2]["content"].startswith("error: invalid arguments for weather")


class HostedProvider(Provider):
    """A hosted OpenAI-style provider answering with raw response bodies, in order."""

    def __init__(self, bodies):
        super().__init__(ADAPTERS["openai"], "http://unused", "m")
        self.bodies, self.sent = list(bodies), []

    def send(self, body):
        self.sent.append(body)
        return self.bodies.pop(0)


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]"])
def test_a_hosted_providers_malformed_arguments_are_an_error_result_in_the_loop(arguments):
    provider = HostedProvider([completion(arguments), completion(text="Sunny.")])
    result = run(provider, "Be brief.", "Weather in Paris?", {"weather": weather})
    outcome = result.transcript.turns[0].outcomes[0]
    assert result.calls[0].arguments == arguments and outcome.error is ErrorKind.INVALID_ARGUMENTS
    assert provider.sent[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": outcome.text}
    assert outcome.text.startswith("error: invalid arguments for weather") and result.answer == "Sunny."
