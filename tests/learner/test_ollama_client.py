"""The official ``ollama`` Python client against the embedded server."""

import ollama
import pytest

from helpers import GREEDY, now

pytestmark = pytest.mark.model
MODEL = "qwen2.5-coder:0.5b"
QUESTION = [{"role": "user", "content": "What time is it?"}]


@pytest.fixture(scope="module")
def client(url):
    return ollama.Client(host=url)


def test_chat_with_a_python_function_as_the_tool(client):
    response = client.chat(model=MODEL, messages=QUESTION, tools=[now], options=GREEDY)
    [call] = response.message.tool_calls
    assert call.function.name == "now" and isinstance(call.function.arguments, dict)


def test_streamed_chat_with_a_python_function_as_the_tool(client):
    calls = [call for part in client.chat(model=MODEL, messages=QUESTION, tools=[now], options=GREEDY, stream=True)
             for call in part.message.tool_calls or []]
    assert [call.function.name for call in calls] == ["now"]


def test_the_answer_after_a_tool_result(client):
    first = client.chat(model=MODEL, messages=QUESTION, tools=[now], options=GREEDY)
    messages = [*QUESTION, first.message,
                {"role": "tool", "content": "2026-11-30T09:15:00+00:00", "tool_name": "now"}]
    final = client.chat(model=MODEL, messages=messages, tools=[now], options=GREEDY)
    # The client's own Message object went back as history and was accepted; what the
    # small model writes next varies (it sometimes calls `now` again), so only the shape is checked.
    assert final.done and final.message.role == "assistant"
    assert final.message.content or final.message.tool_calls


def test_show_and_list(client):
    shown = client.show(MODEL)
    assert "tools" in shown.capabilities and shown.modelinfo["general.architecture"] == "qwen2"
    assert [m.model for m in client.list().models] == [MODEL]


def test_errors_arrive_as_response_errors(client):
    with pytest.raises(ollama.ResponseError) as error:
        client.chat(model="llama9:70b", messages=QUESTION)
    assert error.value.status_code == 404
