"""Nothing a request sends can hold the server's event loop or slip past the line (model-free).

The event loop serves every client; work on it stops every stream at once. So long work runs
in threads (hashing a model file for ``/api/tags``, reading tool calls out of a long reply),
parsing is bounded in time, and an "unload" (``keep_alive: 0``), which waits for every slot,
takes a place in line like a generation.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from course_lib.tool_parser import parse_tool_calls
from course_server.app import create_app, file_digest

from helpers import FAKE_MODEL, NOW_TOOL, FakeEngine, serving, wait_until

HI = [{"role": "user", "content": "Hi"}]
DEGENERATE = ["[1," * 130_000, "{" * 400_000, '{"a" ' * 80_000, "[" * 400_000, "[[" * 100_000 + "x" + "]]" * 100_000,
              '{{"a" ' * 60_000, "<tool_call>" * 30_000, "```" * 100_000, "<tool_call>" + "[]" * 199_993 + "x",
              "<tool_call>\U0001F600" + "[]" * 199_993 + "x", "```\n" + "[]" * 199_993 + "x"]


def test_degenerate_replies_are_parsed_in_bounded_time():
    """Before: ``"[1," * 30_000`` took 5.7 s (each "[" read to the end); these are 4 to 13 times longer.
    The time is this thread's CPU time: the work the parser does, whatever else runs on the machine."""
    for text in DEGENERATE:
        started = time.thread_time()
        reply = parse_tool_calls(text, {"now"})
        assert time.thread_time() - started < 1.0, text[:20]
        assert reply.content.strip() == text.strip() and not reply.tool_calls  # nothing dropped


def test_calls_are_still_found_among_many():
    text = '<tool_call>{"name": "now", "arguments": {}}</tool_call>\n' * 3000
    assert len(parse_tool_calls(text, {"now"}).tool_calls) == 3000


def answers_quickly(url: str) -> float:
    started = time.perf_counter()
    assert httpx.get(url, timeout=10).text == "Ollama is running"
    return time.perf_counter() - started


def test_hashing_an_unknown_model_file_does_not_hold_the_loop(tmp_path):
    """A model the registry does not know is hashed for /api/tags, off the event loop: the server
    answers while the hash is under way, and the hash is then remembered. The model file is a
    FIFO, so the hashing lasts until the test has seen the server answer and writes the file's
    bytes, on a fast machine as on a slow one (a 2 GiB file took 10 s here, and would take 1 s
    where SHA-256 runs at 2 GB/s)."""
    model = tmp_path / "unknown.gguf"
    os.mkfifo(model)
    born = model.stat()
    content = b"GGUF" + bytes(1 << 20)
    file_digest.cache_clear()
    engine = FakeEngine(model)
    with serving(create_app(engine)) as url, ThreadPoolExecutor(1) as pool:
        try:
            tags = pool.submit(httpx.get, url + "/api/tags", timeout=60)
            writer = wait_for_reader(model)  # the hashing has begun: the server opened the file
            assert answers_quickly(url) < 0.5 and not tags.done()
            with open(writer, "wb") as end:
                end.write(content)
            digest = tags.result().json()["models"][0]["digest"]
            os.utime(model, ns=(born.st_atime_ns, born.st_mtime_ns))  # the writing dated it; the hash is kept by date
            started = time.perf_counter()
            assert httpx.get(url + "/api/tags", timeout=10).json()["models"][0]["digest"] == digest
            assert time.perf_counter() - started < 0.5 and file_digest.cache_info().hits == 1  # remembered
        finally:
            os.close(os.open(model, os.O_RDWR | os.O_NONBLOCK))  # a reader still waiting reads an empty file
    assert digest == "sha256:" + hashlib.sha256(content).hexdigest()


def wait_for_reader(fifo: Path, timeout: float = 10) -> int:
    """A writing end of ``fifo`` (blocking), opened once something has opened it for reading."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while nobody reads
            os.set_blocking(writer, True)
            return writer
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing opened {fifo.name} for reading in {timeout} s") from None
            time.sleep(0.01)


def test_an_unload_takes_a_place_in_line_and_later_ones_add_nothing(tmp_path):
    """``keep_alive: 0`` waits for every slot in a place in line; while it waits, more unloads
    return at once (the cache will be empty all the same) instead of each taking a place, and a
    generation finds the line full: a 503, not one more waiter."""
    engine = FakeEngine(tmp_path / "fake.gguf")
    engine.unpaused.clear()
    unload = {"model": FAKE_MODEL, "messages": [], "keep_alive": 0}
    with serving(create_app(engine, max_queue=1)) as url:
        running = threading.Thread(target=httpx.post, args=(url + "/api/chat",),
                                   kwargs={"json": {"model": FAKE_MODEL, "messages": HI}, "timeout": 30})
        running.start()
        wait_until(lambda: engine.runs)
        waiting = threading.Thread(target=httpx.post, args=(url + "/api/chat",), kwargs={"json": unload, "timeout": 30})
        waiting.start()
        time.sleep(0.3)  # the first unload is in line
        merged = [httpx.post(url + "/api/chat", json=unload, timeout=10) for _ in range(3)]
        refused = httpx.post(url + "/api/chat", json={"model": FAKE_MODEL, "messages": HI}, timeout=10)
        assert answers_quickly(url) < 0.5
        engine.unpaused.set()
        running.join()
        waiting.join()
    assert [reply.status_code for reply in merged] == [200] * 3
    assert all(reply.json()["done_reason"] == "unload" for reply in merged)
    assert refused.status_code == 503 and "server busy" in refused.json()["error"]
    assert engine.forgotten == 1


def test_a_streamed_degenerate_reply_does_not_stop_other_clients(tmp_path):
    engine = FakeEngine(tmp_path / "fake.gguf", replies=[["[1," * 130_000]])
    body = {"model": FAKE_MODEL, "messages": HI, "tools": [NOW_TOOL], "stream": False}
    with serving(create_app(engine)) as url:
        reply = httpx.post(url + "/api/chat", json=body, timeout=30)
        assert answers_quickly(url) < 0.5
    assert reply.status_code == 200 and reply.json()["message"]["content"].startswith("[1,[1,")


def test_arguments_nested_deeper_than_python_reads_stay_text(tmp_path):
    """A model that writes its arguments as a JSON string nested 3,000 deep: content, not a 500."""
    deep = '{"name": "now", "arguments": "' + "[" * 3000 + "]" * 3000 + '"}'
    engine = FakeEngine(tmp_path / "fake.gguf", replies=[[deep], [deep]])
    body = {"model": FAKE_MODEL, "messages": HI, "tools": [NOW_TOOL], "stream": False}
    with serving(create_app(engine)) as url:
        ollama = httpx.post(url + "/api/chat", json=body, timeout=30)
        openai = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert (ollama.status_code, openai.status_code) == (200, 200)
    assert ollama.json()["message"]["content"] == deep and "tool_calls" not in ollama.json()["message"]
