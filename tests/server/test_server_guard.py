"""What the server refuses before a route runs, without the model."""

import asyncio

import pytest

from course_server.guard import (
    ApiError,
    check_content_type,
    check_origin_and_host,
    origin_allowed,
    parse_json_object,
    read_limited,
)


@pytest.mark.parametrize("origin, allowed", [
    ("http://localhost:8888", True), ("https://127.0.0.1", True), ("http://[::1]:3000", True),
    ("http://127.5.0.1", True), ("vscode-webview://abc", True), ("app://desktop", True),
    ("https://attacker.example", False), ("null", False), ("http://localhost.attacker.example", False),
    ("http://127.0.0.1.attacker.example", False), ("ftp://localhost", False),
])
def test_origins_on_this_machine_are_allowed(origin, allowed):
    assert origin_allowed(origin, []) is allowed


def test_more_origins_can_be_allowed_by_pattern():
    assert origin_allowed("https://lab.example.org", ["https://*.example.org"])
    assert not origin_allowed("https://lab.example.com", ["https://*.example.org"])


@pytest.mark.parametrize("host, bound, refused", [
    ("127.0.0.1:11434", "127.0.0.1", False), ("localhost", "127.0.0.1", False), ("[::1]:80", "::1", False),
    ("attacker.example:11434", "127.0.0.1", True), ("10.0.0.5", "127.0.0.1", True),
    ("my-laptop.lan:11434", "0.0.0.0", False),  # listening on every interface: the learner chose that
])
def test_a_foreign_host_name_is_refused_on_loopback(host, bound, refused):
    if refused:
        with pytest.raises(ApiError) as caught:
            check_origin_and_host({"host": host}, bound, [])
        assert caught.value.status == 403
    else:
        check_origin_and_host({"host": host}, bound, [])


@pytest.mark.parametrize("content_type, ok", [
    ("application/json", True), ("application/json; charset=utf-8", True), ("application/vnd.api+json", True),
    ("text/plain", False), ("application/x-www-form-urlencoded", False), (None, False),
])
def test_a_body_must_be_declared_json(content_type, ok):
    if ok:
        check_content_type(content_type)
    else:
        with pytest.raises(ApiError, match="application/json"):
            check_content_type(content_type)


async def chunks(*parts):
    for part in parts:
        yield part


def test_a_body_is_cut_off_as_soon_as_it_is_too_large():
    assert asyncio.run(read_limited(chunks(b"ab", b"cd"), limit=4)) == b"abcd"
    with pytest.raises(ApiError) as caught:
        asyncio.run(read_limited(chunks(b"ab", b"cd", b"e"), limit=4))
    assert caught.value.status == 413


@pytest.mark.parametrize("body, words", [
    (b'{"a": NaN}', "NaN"), (b'{"a": -Infinity}', "Infinity"), (b'{"a": 1e999}', "too large"),
    (b'{"a": "\\udc00"}', "surrogate"), (b'{"a": ' + b"[" * 70 + b"]" * 70 + b"}", "nested"),
    ('{"a": 1}'.encode("utf-16"), "UTF-8"), (b'{"a": "\xe9"}', "UTF-8"), (b"[1]", "JSON object"),
])
def test_bodies_that_would_fail_later_are_refused_now(body, words):
    with pytest.raises(ApiError, match=words):
        parse_json_object(body)


def test_a_good_body_and_an_empty_one():
    assert parse_json_object('{"text": "héllo", "n": [1, 2.5]}'.encode()) == {"text": "héllo", "n": [1, 2.5]}
    assert parse_json_object(b"") == {}
