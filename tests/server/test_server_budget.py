"""One client cannot take the server from the others (issue 47), without the model.

Each symptom that was found has its test here: a pattern whose grammar explodes is refused
before any token; a generation past its time budget ends with a 400 in its API's format; a
body is parsed off the event loop, and one that is all lists is refused before parsing; a
client that trickles its headers or body is cut off; one address cannot hold every
connection; the key is checked before the body is read; a slot goes to the client with the
fewest running; a 500 never repeats an exception's text. The same with the real model, and
the fairness test with the hostile requests beside a normal one, are in
``test_server_hostile.py``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from course_server import connections, guard
from course_server.app import INTERNAL_ERROR, create_app, parse_args
from course_server.engine import Engine
from course_server.generation import TimeBudget, TimeBudgetExceeded, check_sampling_time, past_deadline
from course_server.grammar_limits import MAX_PATTERN_AMBIGUITY, SchemaTooComplex, check_format
from course_server.scheduler import FairSlots
from course_server.wire import MAX_JSON_CONTAINERS, Options

from helpers import FAKE_MODEL, FakeEngine, wait_until

HI = [{"role": "user", "content": "Hi"}]
# The reproduced pattern: 248 characters in the allowed subset, hours of grammar work per request.
EXPLODING = "^" + ".{0,999}" * 30 + ".{999}$"


@pytest.fixture
def engine(tmp_path: Path) -> FakeEngine:
    return FakeEngine(tmp_path / "fake.gguf")


@pytest.fixture
def client(engine: FakeEngine) -> TestClient:
    return TestClient(create_app(engine), base_url="http://localhost")


@contextmanager
def served(app, **limits) -> Iterator[tuple[str, int]]:
    """The app on a real socket with the server's connection limits (``connections.uvicorn_limits``)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1,
                            **{**connections.uvicorn_limits(), **limits})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started)
        yield "127.0.0.1", listener.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        listener.close()


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` (reads end) within ``within`` seconds."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


# --- grammars whose ambiguity explodes: refused before any token ------------------------------

@pytest.mark.parametrize("pattern", [
    EXPLODING,
    "^.{0,999}.{999}$",  # a variable part, then a fixed one: the split can fall anywhere
    "^.{0,200}.{0,200}$",
    "^[a-z]*.{500}$",
    "^.{0,40}.{0,40}.{0,40}$",  # measured: 0.3 to 4.9 s a token
    "^(ab|a)?.{0,300}$",
    "^" + ".{1,}" * 2 + ".{500}$",
])
def test_a_pattern_whose_parse_states_explode_is_refused_before_any_token(client, pattern):
    with pytest.raises(SchemaTooComplex, match="ambiguity"):
        check_format({"type": "string", "pattern": pattern})
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
    ollama = client.post("/api/chat", json={"model": FAKE_MODEL, "messages": HI, "stream": False, "format": schema})
    openai = client.post("/v1/chat/completions", json={
        "model": FAKE_MODEL, "messages": HI,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}})
    assert ollama.status_code == openai.status_code == 400
    assert "ambiguity" in ollama.json()["error"] and "ambiguity" in openai.json()["error"]["message"]


def test_patterns_live_side_by_side_are_bounded_together(client):
    """Each branch of an ``anyOf`` is live at once: 320 branches of an allowed pattern (392 each)
    would be 125,000 states at every token, so the schema's patterns are bounded as a sum."""
    branches = {"anyOf": [{"anyOf": [{"type": "string", "pattern": "^.{0,1}.{0,28}$"}] * 64}] * 5}
    with pytest.raises(SchemaTooComplex, match="add up to an ambiguity of at most"):
        check_format(branches)
    answer = client.post("/api/chat", json={"model": FAKE_MODEL, "messages": HI, "stream": False, "format": branches})
    assert answer.status_code == 400 and "add up to" in answer.json()["error"]
    check_format({"anyOf": [{"type": "string", "pattern": "^.{0,28}.{0,28}$"}, {"type": "string", "pattern": "^x$"}]})


def test_an_assistant_turn_holds_a_bounded_number_of_calls(client):
    """Every call the template writes is read again by the tokenizer: 10,000 of them in one turn
    (4 MB, few lists) were minutes of work before any budget started. At most 64, else a 400."""
    call = {"function": {"name": "a", "arguments": {}}}
    for count, status in ((64, 200), (65, 400)):
        messages = [*HI, {"role": "assistant", "content": "", "tool_calls": [call] * count},
                    {"role": "user", "content": "and?"}]
        answer = client.post("/api/chat", json={"model": FAKE_MODEL, "messages": messages, "stream": False,
                                                "options": {"num_predict": 1}})
        assert answer.status_code == status, answer.text
    assert "64" in answer.json()["error"]


def test_finding_a_client_copy_of_a_call_tag_is_linear_in_the_prompt():
    import re

    from course_lib.chat_template import Prompt, client_copies
    text = "<t>" + "x<t>" * 100_000
    prompt = Prompt(text, tuple((4 * i + 3, 4 * i + 4) for i in range(100_000)))  # every x a client's text
    started = time.process_time()
    assert client_copies(prompt, re.compile("<t>"), 0, len(text)) == []
    assert time.process_time() - started < 1.0
    assert client_copies(Prompt("ab<t>cd", ((0, 3),)), re.compile("<t>"), 0, 7) == [(2, 5)], "a copy that straddles"


@pytest.mark.parametrize("pattern", [r"^\d{4}-\d{2}-\d{2}$", "^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$", "^(tokyo|osaka)$",
                                     "^[^@ ]+@[^@ ]+$", "^.{999}$", "^[a-z]{1,200}$", r"^\+?[0-9 ]{7,15}$",
                                     r"^[a-z0-9._-]{1,64}@[a-z0-9.-]{1,190}\.[a-z]{2,24}$", "^.{0,28}.{0,28}$"])
def test_patterns_with_few_parse_states_stay_allowed(pattern):
    check_format({"type": "string", "pattern": pattern})


def test_the_bound_is_on_ambiguity_not_on_the_patterns_length():
    check_format({"type": "string", "pattern": "^.{1,999}$"})  # one variable part: one way to be anywhere in it
    check_format({"type": "string", "pattern": f"^a?.{{{MAX_PATTERN_AMBIGUITY}}}$"})
    with pytest.raises(SchemaTooComplex):
        check_format({"type": "string", "pattern": f"^a?.{{{MAX_PATTERN_AMBIGUITY + 1}}}$"})


# --- a time budget per request --------------------------------------------------------------

class SlowDecoder:
    """A ``Decoder`` whose tokens come every ``delay`` seconds, for ever."""

    parallel, busy_since, n_ctx = 1, None, 4096

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def fit_context(self, n_ctx):
        return 0

    def sampled_bytes(self, tokens, settings, grammar, n_ctx, budget, cancel, cache_use):
        while True:
            time.sleep(self.delay)
            yield b"x"


class WordModel:
    name, template, bos_token, eos_token, markers, repack = "words", "", "", "", {}, True
    path = Path("words.gguf")
    metadata: dict[str, str] = {}
    context_length = 4096
    load_duration = 0
    architecture = "words"

    def tokenize(self, prompt):
        return [1, 2, 3]

    def grammar_for(self, format):
        return None

    def call_opening_tokens(self):
        return []


def test_the_engine_ends_a_generation_past_its_deadline_between_tokens():
    engine = Engine(WordModel(), SlowDecoder(0.05), time_budget=TimeBudget(request=0.3))
    started = time.monotonic()
    with pytest.raises(TimeBudgetExceeded, match="0.3 s per request"):
        for _ in engine.generate("a", Options(num_predict=-1)):
            pass
    assert time.monotonic() - started < 2.0


def test_the_decoder_is_told_the_deadline_and_the_budget():
    decoder = SlowDecoder(0.0)
    seen = {}

    def sampled_bytes(tokens, settings, *rest):
        seen.update(settings)
        yield b"x"

    decoder.sampled_bytes = sampled_bytes  # type: ignore[method-assign]
    list(Engine(WordModel(), decoder, time_budget=TimeBudget(request=5)).generate("a", Options(num_predict=1)))
    assert seen["time_budget"].request == 5 and 0 < seen["deadline"] - time.monotonic() <= 5


def test_a_slow_token_or_a_slow_request_is_over_budget():
    budget = TimeBudget(request=10, token=2, sampling=20)
    check_sampling_time(1.9, 19.0, budget)
    with pytest.raises(TimeBudgetExceeded, match="one token"):
        check_sampling_time(2.1, 2.1, budget)
    with pytest.raises(TimeBudgetExceeded, match="per request"):
        check_sampling_time(0.5, 20.5, budget)
    assert past_deadline(time.monotonic() + 1, budget) is None
    assert isinstance(past_deadline(time.monotonic() - 1, budget), TimeBudgetExceeded)


BUDGET_SPENT = TimeBudgetExceeded("this request ran for more than this server's 120 s per request")


def test_a_spent_budget_is_a_400_in_each_apis_format(client, engine):
    engine.say(["Hello", " there", BUDGET_SPENT], ["Hello", BUDGET_SPENT], ["Hello", BUDGET_SPENT])
    ollama = client.post("/api/chat", json={"model": FAKE_MODEL, "messages": HI, "stream": False})
    openai = client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI})
    anthropic = client.post("/v1/messages", json={"model": FAKE_MODEL, "max_tokens": 50, "messages": HI})
    assert (ollama.status_code, openai.status_code, anthropic.status_code) == (400, 400, 400)
    assert "120 s per request" in ollama.json()["error"]
    assert "120 s per request" in openai.json()["error"]["message"]
    assert anthropic.json()["type"] == "error" and "120 s per request" in anthropic.json()["error"]["message"]


def test_a_budget_spent_mid_stream_is_the_streams_last_line_or_event(client, engine):
    engine.say(["Hello", BUDGET_SPENT], ["Hello", BUDGET_SPENT])
    lines = client.post("/api/chat", json={"model": FAKE_MODEL, "messages": HI}).text.strip().split("\n")
    assert json.loads(lines[0])["message"]["content"] == "Hello"
    assert "120 s per request" in json.loads(lines[-1])["error"]
    events = client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI, "stream": True}).text
    assert "120 s per request" in events.strip().split("\n\n")[-1]


def test_a_500_says_nothing_of_the_exceptions_text(engine, caplog):
    client = TestClient(create_app(engine), base_url="http://localhost", raise_server_exceptions=False)
    secret = RuntimeError("llama_decode failed at /home/someone/model.gguf with prompt 'my password'")
    engine.say(["Hello", secret], ["Hello", secret], ["Hello", secret])
    whole = client.post("/api/chat", json={"model": FAKE_MODEL, "messages": HI, "stream": False})
    streamed = client.post("/api/chat", json={"model": FAKE_MODEL, "messages": HI}).text
    openai = client.post("/v1/chat/completions", json={"model": FAKE_MODEL, "messages": HI, "stream": True}).text
    assert whole.status_code == 500 and whole.json()["error"] == INTERNAL_ERROR
    for text in (whole.text, streamed, openai):
        assert "password" not in text and "/home" not in text and "RuntimeError" not in text
    assert "password" in caplog.text  # the details are in the server's log


# --- the event loop never parses a body -------------------------------------------------------

def test_a_body_is_parsed_and_validated_off_the_event_loop(client, monkeypatch):
    threads = []
    parse = guard.parse_json_object

    def recording(body):
        threads.append(threading.current_thread().name)
        return parse(body)

    monkeypatch.setattr("course_server.app.parse_json_object", recording)
    for path, body in [("/api/chat", {"model": FAKE_MODEL, "messages": HI, "stream": False}),
                       ("/api/show", {"model": FAKE_MODEL}),
                       ("/v1/chat/completions", {"model": FAKE_MODEL, "messages": HI}),
                       ("/v1/messages", {"model": FAKE_MODEL, "max_tokens": 5, "messages": HI})]:
        assert client.post(path, json=body).status_code == 200
    assert len(threads) == 4 and threading.main_thread().name not in threads
    assert all(name.startswith("asyncio") for name in threads), threads  # asyncio.to_thread's workers


def test_a_body_of_nested_lists_is_refused_before_it_is_parsed(client):
    body = b'{"model": "x", "junk": [' + b"[]," * (MAX_JSON_CONTAINERS + 10) + b"[]]}"
    assert len(body) < 4 * 1024 * 1024
    started = time.perf_counter()
    response = client.post("/api/chat", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and "lists and objects" in response.json()["error"]
    assert time.perf_counter() - started < 2.0


def test_the_loop_answers_while_large_bodies_arrive(engine):
    """/api/version beside four clients each sending 4 MiB bodies of nested empty lists: the
    bodies were parsed and walked on the loop, about a second each (3.3 s seen for /api/version)."""
    body = b'{"model": "x", "junk": [' + b"[]," * 1_300_000 + b"[]]}"
    with served(create_app(engine)) as (host, port):
        url = f"http://{host}:{port}"
        stop = threading.Event()

        def send() -> None:
            with httpx.Client(timeout=30) as http:
                while not stop.is_set():
                    http.post(f"{url}/api/chat", content=body, headers={"content-type": "application/json"})

        senders = [threading.Thread(target=send, daemon=True) for _ in range(4)]
        for sender in senders:
            sender.start()
        try:
            time.sleep(0.5)
            waits = []
            with httpx.Client(timeout=30) as http:
                for _ in range(10):
                    started = time.perf_counter()
                    assert http.get(f"{url}/api/version").status_code == 200
                    waits.append(time.perf_counter() - started)
        finally:
            stop.set()
            for sender in senders:
                sender.join(timeout=30)
    assert max(waits) < 1.0, waits


# --- connections: deadlines, a cap, the key first ------------------------------------------------

def test_a_client_that_trickles_its_headers_is_cut_off(engine, monkeypatch):
    monkeypatch.setattr(connections, "HEADER_SECONDS", 0.5)
    with served(create_app(engine)) as address:
        slow = socket.create_connection(address)
        slow.sendall(b"GET /api/version HTTP/1.1\r\nHost: localhost\r\n")  # and never the blank line
        assert closed_by_server(slow, within=5)
        kept = socket.create_connection(address)  # a kept-alive connection gets the same deadline again
        kept.sendall(b"GET /api/version HTTP/1.1\r\nHost: localhost\r\n\r\n")
        kept.settimeout(5)
        assert b"200 OK" in kept.recv(4096)
        assert closed_by_server(kept, within=5)


def test_a_client_that_trickles_its_body_gets_a_408(engine, monkeypatch):
    monkeypatch.setattr(guard, "BODY_SECONDS", 0.5)
    with served(create_app(engine)) as address:
        slow = socket.create_connection(address)
        slow.sendall(b"POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{")
        slow.settimeout(5)
        answer = b""
        while b"did not arrive" not in answer and (piece := slow.recv(4096)):  # headers and body may come apart
            answer += piece
    assert b" 408 " in answer and b"did not arrive" in answer


def test_one_address_cannot_hold_every_connection(engine, monkeypatch):
    monkeypatch.setattr(connections, "MAX_CONNECTIONS_PER_CLIENT", 5)
    monkeypatch.setattr(connections, "is_loopback", lambda address: False)  # as if from another machine
    with served(create_app(engine)) as address:
        held = [socket.create_connection(address) for _ in range(5)]
        extra = socket.create_connection(address)
        assert closed_by_server(extra, within=5)
        for sock in held:
            sock.close()
        time.sleep(0.2)
        assert httpx.get(f"http://{address[0]}:{address[1]}/api/version").status_code == 200


def test_beyond_the_connection_cap_a_request_gets_a_503(engine):
    engine.delay = 0.2
    with served(create_app(engine), limit_concurrency=3) as (host, port):
        held = [socket.create_connection((host, port)) for _ in range(3)]
        response = httpx.get(f"http://{host}:{port}/api/version")
        for sock in held:
            sock.close()
    assert response.status_code == 503


def test_the_key_is_checked_before_the_body_is_read(engine):
    app = create_app(engine, bound_host="0.0.0.0", api_key="room-key-1234")
    with served(app) as address:
        sock = socket.create_connection(address)
        sock.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 4000000\r\n\r\n")  # the body never comes
        sock.settimeout(5)
        answer = sock.recv(4096)
    assert b" 401 " in answer


def test_the_servers_defaults_bound_connections_and_refuse_a_larger_context():
    args = parse_args([])
    assert args.max_num_ctx == args.num_ctx == 4096  # a larger num_ctx is refused unless allowed
    assert parse_args(["--max-num-ctx", "8192"]).max_num_ctx == 8192
    limits = connections.uvicorn_limits(args.max_connections)
    assert limits["limit_concurrency"] == args.max_connections and limits["timeout_keep_alive"] > 0
    assert limits["http"] is connections.BoundedH11Protocol and limits["h11_max_incomplete_event_size"] > 0
    assert args.request_seconds == TimeBudget().request


# --- fair slots ------------------------------------------------------------------------------

def test_a_free_slot_goes_to_the_client_with_the_fewest_running():
    slots = FairSlots(2)
    assert slots.acquire("greedy") and slots.acquire("neighbour")
    order: list[str] = []

    def wait_for_slot(client: str) -> None:
        assert slots.acquire(client)
        order.append(client)

    waiting = []
    for client in ("greedy", "greedy", "greedy", "other"):  # the greedy one queued first
        thread = threading.Thread(target=wait_for_slot, args=(client,))
        thread.start()
        waiting.append(thread)
        wait_until(lambda: len(slots._waiting) == len(waiting))
    slots.release("neighbour")
    wait_until(lambda: len(order) == 1)
    assert order == ["other"]  # greedy has one running: the other client goes first, though it came last
    for count in (2, 3, 4):
        slots.release(order[-1])
        wait_until(lambda count=count: len(order) == count)
    assert order == ["other", "greedy", "greedy", "greedy"]


def test_a_room_client_may_hold_only_its_share_of_the_line(tmp_path):
    engine = FakeEngine(tmp_path / "fake.gguf")
    engine.unpaused.clear()
    app = create_app(engine, max_queue=16, bound_host="0.0.0.0", api_key="room-key-1234")
    share = app.state.scheduler.per_client
    statuses: list[int] = []
    with TestClient(app, base_url="http://192.168.1.20:11434") as room:
        def ask() -> None:
            statuses.append(room.post("/api/chat", json={"model": FAKE_MODEL, "messages": HI, "stream": False},
                                      headers={"Authorization": "Bearer room-key-1234"}).status_code)

        threads = [threading.Thread(target=ask) for _ in range(share + 2)]
        for thread in threads:
            thread.start()
        wait_until(lambda: len(statuses) >= 2, timeout=10)
        engine.unpaused.set()
        for thread in threads:
            thread.join(timeout=30)
    assert statuses.count(503) == 2 and statuses.count(200) == share


def test_a_room_client_that_floods_the_server_gets_a_429(engine):
    app = create_app(engine, bound_host="0.0.0.0", api_key="room-key-1234")
    room = TestClient(app, base_url="http://192.168.1.20:11434")
    statuses = [room.get("/api/version").status_code for _ in range(guard.REQUEST_BURST + 20)]
    assert statuses[:guard.REQUEST_BURST] == [401] * guard.REQUEST_BURST  # no key: refused, but counted
    assert 429 in statuses[guard.REQUEST_BURST:]
    assert "too many requests" in room.get("/api/version").json()["error"]
    local = TestClient(create_app(engine), base_url="http://localhost")
    assert {local.get("/api/version").status_code for _ in range(guard.REQUEST_BURST + 20)} == {200}


def test_a_long_generation_gives_its_slot_to_a_waiting_request(tmp_path):
    """One slot, a generation that would run for 40 tokens, and a request that arrives while it
    runs: after ``fair_tokens`` the first ends with done_reason "length" and the second is served.
    Alone, the same generation runs to its end."""
    engine = FakeEngine(tmp_path / "fake.gguf", delay=0.02)
    long_reply = " word" * 40
    engine.say(long_reply, "short", long_reply)
    app = create_app(engine, fair_tokens=5)
    with served(app) as (host, port):
        url = f"http://{host}:{port}/api/chat"
        results: dict[str, dict] = {}

        def ask(name: str) -> None:
            results[name] = httpx.post(url, json={"model": FAKE_MODEL, "messages": HI, "stream": False},
                                       timeout=30).json()

        first = threading.Thread(target=ask, args=("long",))
        first.start()
        wait_until(lambda: engine.runs and engine.runs[0].tokens_sampled >= 2)
        ask("waiting")
        first.join()
        ask("alone")
    assert results["long"]["done_reason"] == "length" and results["long"]["eval_count"] < 40
    assert results["waiting"]["message"]["content"] == "short"
    assert results["alone"]["done_reason"] == "stop" and results["alone"]["eval_count"] == 40
