"""course_lib's own client and connect()."""

import pytest

from course_lib import runtime
from course_lib.client import Client, OllamaError, resolve_host

from helpers import GREEDY

MODEL = "qwen2.5-coder:0.5b"


@pytest.mark.parametrize("value, expected", [
    (None, "http://127.0.0.1:11434"),
    ("localhost", "http://localhost:11434"),
    ("0.0.0.0", "http://127.0.0.1:11434"),
    ("example.com:8080", "http://example.com:8080"),
    ("https://example.com", "https://example.com:443"),
    ("http://10.0.0.5:11434/", "http://10.0.0.5:11434"),
])
def test_resolve_host_follows_ollamas_rules(monkeypatch, value, expected):
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert resolve_host(value) == expected


def test_resolve_host_reads_the_environment(monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9999")
    assert resolve_host() == "http://127.0.0.1:9999"


@pytest.mark.model
def test_chat_returns_the_raw_json_and_echo_prints_both_directions(url, capsys):
    client = Client(url, echo=True)
    reply = client.chat([{"role": "user", "content": "Say hi."}], options={**GREEDY, "num_predict": 8})
    printed = capsys.readouterr().out
    assert printed.startswith("-> POST /api/chat {") and "\n<- 200 {" in printed
    assert client.last.request["stream"] is False and client.last.response == reply
    assert set(reply) >= {"model", "created_at", "message", "done", "eval_count"}


@pytest.mark.model
def test_chat_stream_yields_each_line(url):
    client = Client(url)
    lines = list(client.chat_stream([{"role": "user", "content": "Say hi."}], options={**GREEDY, "num_predict": 8}))
    assert lines[-1]["done"] is True and all(not line["done"] for line in lines[:-1])
    assert client.last.lines == lines


@pytest.mark.model
@pytest.mark.parametrize("streaming", [False, True])
def test_errors_raise_ollama_error_with_status_and_message(url, streaming):
    client = Client(url, model="llama9:70b")
    messages = [{"role": "user", "content": "Hi"}]
    with pytest.raises(OllamaError) as error:
        if streaming:
            list(client.chat_stream(messages))
        else:
            client.chat(messages)
    assert error.value.status == 404 and error.value.message == "model 'llama9:70b' not found"


@pytest.mark.model
def test_connect_uses_a_server_that_has_the_model(monkeypatch, url):
    monkeypatch.delenv("COURSE_EMBEDDED", raising=False)
    monkeypatch.setenv("OLLAMA_HOST", url)
    assert runtime.connect(quiet=True).host == url


@pytest.mark.model
def test_connect_starts_the_embedded_server_once_when_nothing_answers(monkeypatch):
    monkeypatch.delenv("COURSE_EMBEDDED", raising=False)
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{runtime.free_port()}")  # nobody listens there
    first = runtime.connect(quiet=True)
    try:
        assert first.show()["details"]["family"] == "qwen2"
        assert runtime.connect(quiet=True).host == first.host, "the running server is reused"
    finally:
        runtime.embedded_server().stop()


@pytest.mark.model
def test_the_embedded_server_exits_when_its_parent_is_killed():
    import os
    import subprocess
    import sys
    import time

    code = ("from course_lib.runtime import EmbeddedServer; s = EmbeddedServer(); "
            "print(s.process.pid, flush=True); import time; time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    parent.kill()  # no exit handlers run: only the server's own watch can stop it
    parent.wait()
    for _ in range(20):
        time.sleep(0.5)
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            return
    os.kill(server_pid, 9)
    pytest.fail("the server outlived its parent by 10 s")
