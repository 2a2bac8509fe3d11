"""The model's process is supervised: killing it fails only the requests it was serving, and the
server stays up, restarts it and serves the next request (``course_server/supervisor.py``).

The child runs the scripted ``FakeEngine``, so these tests need no model and take seconds;
``test_server_hostile.py`` kills the real model's process too.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from course_server.app import create_app
from course_server.supervisor import ModelRestarted, ModelStartFailed, SupervisedEngine, exit_reason

from helpers import FAKE_MODEL, FakeEngine, serving, wait_until

LONG_REPLY = " ".join(["word"] * 400)


class SickEngine(FakeEngine):
    """A fake whose engine says it is unhealthy (as a batched engine whose decoder thread died)."""

    def healthy(self) -> bool:
        return False


class StuckEngine(FakeEngine):
    """A fake whose generation never yields and ignores its cancel event, as a job stuck in C code."""

    def generate(self, prompt, options=None, format=None, cancel=None):
        time.sleep(3600)
        yield from ()


def broken_factory() -> FakeEngine:
    raise OSError("no such model file")


@pytest.fixture
def supervised(tmp_path: Path):
    engine = SupervisedEngine(functools.partial(FakeEngine, tmp_path / "fake.gguf", [LONG_REPLY] * 3, 0.01),
                              ping_every=0.5, ping_timeout=5)
    yield engine
    engine.close()


def test_the_supervised_engine_serves_what_the_engine_generates(supervised: SupervisedEngine):
    pieces = list(supervised.generate(supervised.render_prompt([{"role": "user", "content": "hi"}])))
    assert "".join(pieces[:-1]) == LONG_REPLY
    assert pieces[-1].eval_count == 400
    assert supervised.name == FAKE_MODEL and supervised.architecture == "qwen2"


def test_a_killed_child_fails_its_request_and_the_next_request_is_served(supervised: SupervisedEngine):
    first_pid = supervised.pid
    pieces = supervised.generate(supervised.render_prompt([{"role": "user", "content": "hi"}]))
    assert next(pieces)  # the request is running in the child
    os.kill(first_pid, signal.SIGKILL)
    with pytest.raises(ModelRestarted, match="SIGKILL"):
        list(pieces)
    second = list(supervised.generate("plain prompt"))
    assert "".join(second[:-1]) == LONG_REPLY
    assert supervised.restarts == 1 and supervised.pid != first_pid and supervised.healthy()


def test_an_unhealthy_child_is_killed_by_the_liveness_check_and_restarted(tmp_path: Path):
    engine = SupervisedEngine(functools.partial(SickEngine, tmp_path / "fake.gguf"), ping_every=0.2, ping_timeout=5)
    try:
        wait_until(lambda: engine.restarts >= 1, timeout=20)
    finally:
        engine.close()


def test_a_child_that_cannot_load_its_model_is_a_clear_error():
    with pytest.raises(ModelStartFailed, match="no such model file"):
        SupervisedEngine(broken_factory)


def test_a_cancelled_request_stops_its_generation_in_the_child(supervised: SupervisedEngine):
    cancel = threading.Event()
    pieces = supervised.generate("plain prompt", cancel=cancel)
    next(pieces)
    cancel.set()
    rest = list(pieces)
    assert rest[-1].eval_count < 400  # the child stopped early


def test_exit_reasons_name_the_signal():
    assert exit_reason(-11) == "killed by signal SIGSEGV"
    assert exit_reason(-6) == "killed by signal SIGABRT"
    assert exit_reason(1) == "exit code 1"


def test_the_server_answers_a_crash_in_each_api_format_and_stays_up(supervised: SupervisedEngine):
    app = create_app(supervised)
    chat = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": False}
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        for path, body, error_of in (
            ("/api/chat", chat, lambda data: data["error"]),
            ("/v1/chat/completions", chat, lambda data: data["error"]["message"]),
            ("/v1/messages", {**chat, "max_tokens": 500}, lambda data: data["error"]["message"]),
        ):
            killer = threading.Timer(0.3, os.kill, (supervised.pid, signal.SIGKILL))
            killer.start()
            reply = client.post(path, json=body)
            killer.join()
            assert reply.status_code == 503, reply.text
            assert "restarted" in error_of(reply.json())
            wait_until(supervised.healthy, timeout=30)
        streamed = threading.Timer(0.3, os.kill, (supervised.pid, signal.SIGKILL))
        streamed.start()
        lines = client.post("/api/chat", json={**chat, "stream": True}).text.splitlines()
        streamed.join()
        assert "restarted" in lines[-1] and '"error"' in lines[-1]  # the stream had begun: its last line
        wait_until(supervised.healthy, timeout=30)
        assert client.get("/").text == "Ollama is running"
        assert client.post("/api/chat", json=chat).json()["message"]["content"] == LONG_REPLY
    assert supervised.restarts == 4


def test_a_cancelled_request_that_does_not_stop_gets_its_model_process_restarted(tmp_path: Path):
    engine = SupervisedEngine(functools.partial(StuckEngine, tmp_path / "fake.gguf"), cancel_grace=1)
    try:
        cancel = threading.Event()
        cancel.set()  # the client has gone
        with pytest.raises(ModelRestarted, match="did not stop within 1 s"):
            list(engine.generate("plain prompt", cancel=cancel))
        wait_until(lambda: engine.restarts == 1, timeout=30)
    finally:
        engine.close()
