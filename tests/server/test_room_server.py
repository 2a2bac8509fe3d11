"""One server for a room: listening beyond this machine needs an API key, and every request but
the health check must carry it (``guard.check_api_key``), as llama-server's and vLLM's ``--api-key``."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from course_lib.client import Client, OllamaError
from course_lib.runtime import served_models
from course_server.app import create_app, parse_args

from helpers import FAKE_MODEL, FakeEngine, serving

KEY = "room-key-1234"
HI = [{"role": "user", "content": "Hi"}]
REQUESTS = [("/api/chat", {"model": FAKE_MODEL, "messages": HI, "stream": False}),
            ("/v1/chat/completions", {"model": FAKE_MODEL, "messages": HI}),
            ("/v1/messages", {"model": FAKE_MODEL, "max_tokens": 8, "messages": HI})]


@pytest.fixture
def room(tmp_path):
    app = create_app(FakeEngine(tmp_path / "fake.gguf"), bound_host="0.0.0.0", api_key=KEY)
    return TestClient(app, base_url="http://192.168.1.20:11434")


def error_text(path: str, body: dict) -> str:
    if path == "/api/chat":
        return body["error"]
    assert body["error"]["type"] == "authentication_error"
    return body["error"]["message"]


@pytest.mark.parametrize("path, body", REQUESTS)
def test_no_key_or_a_wrong_key_is_a_401_in_the_apis_format(room, path, body):
    missing = room.post(path, json=body)
    wrong = room.post(path, json=body, headers={"Authorization": "Bearer guess"})
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert "COURSE_API_KEY" in error_text(path, missing.json())
    assert error_text(path, wrong.json()) == "invalid API key"


@pytest.mark.parametrize("path, body", REQUESTS)
def test_the_right_key_gets_a_reply(room, path, body):
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):
        assert room.post(path, json=body, headers=headers).status_code == 200


def test_the_health_check_stays_open_and_other_routes_are_closed(room):
    assert room.get("/").text == "Ollama is running"
    assert room.get("/api/tags").status_code == 401
    assert room.get("/api/tags", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_a_server_for_the_room_will_not_start_without_a_key(monkeypatch, capsys):
    monkeypatch.delenv("COURSE_API_KEY", raising=False)
    with pytest.raises(SystemExit):
        parse_args(["--host", "0.0.0.0"])
    assert "--api-key" in capsys.readouterr().err
    assert parse_args(["--host", "0.0.0.0", "--api-key", KEY]).api_key == KEY
    monkeypatch.setenv("COURSE_API_KEY", KEY)
    assert parse_args(["--host", "0.0.0.0"]).api_key == KEY


def test_the_courses_client_sends_the_key_from_the_environment(tmp_path, monkeypatch):
    app = create_app(FakeEngine(tmp_path / "fake.gguf"), bound_host="0.0.0.0", api_key=KEY)
    with serving(app) as url:
        monkeypatch.delenv("COURSE_API_KEY", raising=False)
        with pytest.raises(OllamaError, match="API key"):
            Client(url, FAKE_MODEL).chat(HI)
        monkeypatch.setenv("COURSE_API_KEY", KEY)
        assert Client(url, FAKE_MODEL).chat(HI)["message"]["content"]
        assert served_models(url) == {FAKE_MODEL}
