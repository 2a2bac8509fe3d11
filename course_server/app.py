"""An Ollama-compatible HTTP server over llama.cpp: what Ollama does, readable.

Run it with ``python -m course_server`` (127.0.0.1:11434 by default). It serves
``/api/chat``, ``/api/generate``, ``/api/show``, ``/api/tags``, ``/api/version`` and
``GET /`` with Ollama's field names, streaming format (NDJSON) and error contract, so
the official ``ollama`` Python client and any raw HTTP code work against it. Like Ollama,
it also speaks OpenAI's ``/v1/chat/completions`` and ``/v1/models`` and Anthropic's
``/v1/messages`` (translated in ``dialects.py``; the responses in ``streams.py``), so those official SDKs work too.

What happens to a chat request:

1. The body is validated (``wire.py``); a bad one gets ``{"error": ...}`` and 400.
2. The messages and tools are rendered into one prompt with the model's own chat
   template (``chat_template.py``).
3. The model generates (``engine.py``): up to ``--parallel`` requests at once, their tokens
   decoded together (``batching.py``), the others waiting in line (``scheduler.py``).
4. If tools were declared, the text is searched for tool calls (``tool_parser.py``).
   While streaming, text that might be the start of a call is held back until the
   end, so that each call arrives whole in one chunk.

Differences from Ollama worth knowing: ``/api/show`` returns the GGUF's Jinja template
(Ollama shows its own Go template); ``prompt_eval_count`` is always the whole prompt,
even when most of it came from the cache (as in current Ollama; older versions left it out
when the prompt was cached); text that is not a call of a declared tool
stays in ``content`` (Ollama drops an undeclared call).

How much of a prompt came from the cache, each route says in its API's own words: Ollama's
``prompt_eval_cached_count`` (a field Ollama added in 2026, ollama/ollama pull request 17943;
``prompt_eval_count`` stays the whole prompt), OpenAI's ``usage.prompt_tokens_details.
cached_tokens`` and Anthropic's ``usage.cache_read_input_tokens``. What a prompt added to the
cache is OpenAI's ``cache_write_tokens`` and Anthropic's ``cache_creation_input_tokens``
(``streams.py``); Ollama has no field for that, and the server adds none of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import hashlib
import json
import logging
import os
import secrets
import signal
import string
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from jinja2 import TemplateError as JinjaError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from course_lib import __version__, config, dialects
from course_lib.chat_template import Prompt, TemplateError
from course_lib.messages import describe_errors
from course_lib.tool_parser import parse_tool_calls, possible_call_start
from course_server import supervisor
from course_server.connections import MAX_CONNECTIONS, uvicorn_limits
from course_server.generation import (
    DEFAULT_PROMPT_CACHE,
    MAX_AUTO_PARALLEL,
    BadFormat,
    ContextTooLarge,
    GenerationStats,
    PromptTooLong,
    ServedModel,
    TimeBudget,
    TimeBudgetExceeded,
)
from course_server.guard import (
    ApiError,
    OriginAndHostGuard,
    check_content_type,
    is_loopback,
    parse_json_object,
    read_limited,
)
from course_server.models import REGISTRY, resolve_model
from course_server.scheduler import FAIR_TOKENS, LOCAL, QueueFull, Scheduler
from course_server.streams import anthropic_json, anthropic_sse, openai_json, openai_sse
from course_server.supervisor import ModelRestarted, SupervisedEngine
from course_server.wire import ChatRequest, GenerateRequest, ShowRequest

Body = TypeVar("Body", bound=BaseModel)
Result = TypeVar("Result")
log = logging.getLogger("course_server")
PARSE_THREADS = 2  # bodies parsed, validated and rendered at once, each on a thread of its own
# Errors a request's own content or size caused (a 400 that says what to change, in the API's format).
REQUEST_ERRORS = (PromptTooLong, BadFormat, ContextTooLarge, TimeBudgetExceeded)
INTERNAL_ERROR = "internal error: the server could not complete this request (its log says why)"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_call_id() -> str:
    return "call_" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


def public_error(error: BaseException) -> tuple[str, int]:
    """What a client may read of an error that ended its request, and the status it gets: the
    message of an error the request caused (``REQUEST_ERRORS``, ``ApiError``) or the server must
    retry (``ModelRestarted``); for anything else a generic message, the details in the log
    (an exception's text can hold paths, addresses or a prompt's pieces)."""
    if isinstance(error, ApiError):
        return error.message, error.status
    if isinstance(error, REQUEST_ERRORS):
        return str(error), 400
    if isinstance(error, ModelRestarted):
        return str(error), 503
    log.error("request failed", exc_info=error)
    return INTERNAL_ERROR, 500


async def off_loop(request: Request, work: Callable[..., Result], *arguments: Any) -> Result:
    """Run ``work`` on a thread, at most ``PARSE_THREADS`` at once (the others wait their turn
    without holding the loop): parsing, validating and rendering a body never run on the event
    loop, which must stay free to accept connections and pass on every stream's tokens."""
    async with request.app.state.parsing:
        return await asyncio.to_thread(work, *arguments)


def error_body(path: str, message: str, status: int) -> dict[str, Any]:
    """An error in the format of the API that ``path`` belongs to."""
    if path.startswith("/v1/messages"):
        return dialects.anthropic_error(message, status)
    if path.startswith("/v1/"):
        return dialects.openai_error(message, status)
    return {"error": message}


def create_app(engine: ServedModel, max_queue: int = 8, bound_host: str = "127.0.0.1",
               allowed_origins: list[str] | None = None, api_key: str | None = None,
               fair_tokens: int = FAIR_TOKENS) -> FastAPI:
    """The FastAPI application serving ``engine`` under the name ``engine.name``.

    ``bound_host`` is the address the server listens on: on loopback, requests must name a
    loopback host. ``allowed_origins`` adds web pages that may call it (default: the
    ``COURSE_ORIGINS`` environment variable); pages on this machine always may. With an
    ``api_key`` every request but ``GET /`` must carry it (``guard.check_api_key``).
    """
    scheduler = Scheduler(engine, max_queue, fair_tokens=fair_tokens)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        scheduler.cancel_all()

    app = FastAPI(title="course_lib embedded Ollama-compatible server", lifespan=lifespan)
    app.state.scheduler = scheduler
    app.state.parsing = asyncio.Semaphore(PARSE_THREADS)
    app.state.serves_a_room = not is_loopback(bound_host)  # only then are clients told apart (client_name)
    app.add_middleware(OriginAndHostGuard, bound_host=bound_host, error_body=error_body,
                       extra_origins=allowed_origins, api_key=api_key)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse(error_body(request.url.path, error.message, error.status), status_code=error.status)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, error: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        message = str(error.detail).lower()
        return JSONResponse(error_body(request.url.path, message, error.status_code), status_code=error.status_code)

    async def ended_by_error(request: Request, error: Exception) -> JSONResponse:
        message, status = public_error(error)  # never an exception's own text unless it is the client's
        return JSONResponse(error_body(request.url.path, message, status), status_code=status)

    for kind in (ModelRestarted, *REQUEST_ERRORS, Exception):  # a time budget spent mid-answer, say
        app.add_exception_handler(kind, ended_by_error)

    @app.get("/")
    @app.head("/")
    async def root() -> PlainTextResponse:
        return PlainTextResponse("Ollama is running")

    @app.get("/api/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/api/tags")
    async def tags() -> dict[str, Any]:
        return {"models": [await asyncio.to_thread(model_entry, engine)]}  # hashing a file must not stop the loop

    @app.post("/api/show")
    async def show(request: Request) -> dict[str, Any]:
        body = await read_body(request, ShowRequest)
        check_model(engine, body.model or body.name)
        return show_response(engine)

    @app.post("/api/chat")
    async def chat(request: Request):
        started = time.perf_counter_ns()
        body = await read_body(request, ChatRequest)
        check_model(engine, body.model)
        if not body.messages:  # Ollama: an empty chat loads the model, or with keep_alive 0 unloads it
            reason = await load_or_unload(scheduler, body.keep_alive, client_name(request))
            return JSONResponse(loaded_response(engine, {"message": {"role": "assistant", "content": ""}}, reason))
        events = await unless_client_leaves(request, start_chat(engine, scheduler, body, request))
        return await respond(request, engine, events, body.stream, started, "message")

    @app.post("/api/generate")
    async def generate(request: Request):
        started = time.perf_counter_ns()
        body = await read_body(request, GenerateRequest)
        check_model(engine, body.model)
        if not body.prompt:  # Ollama: an empty prompt loads the model, or with keep_alive 0 unloads it
            reason = await load_or_unload(scheduler, body.keep_alive, client_name(request))
            return JSONResponse(loaded_response(engine, {"response": ""}, reason))
        if body.raw:
            prompt: str | Prompt = body.prompt  # the caller's own template: its markers are markers
        else:
            system = [{"role": "system", "content": body.system}] if body.system else []
            prompt = await off_loop(request, render_or_400, engine,
                                    [*system, {"role": "user", "content": body.prompt}], None)
        pieces = await unless_client_leaves(request, start_generation(scheduler, prompt, body, request))
        events = chat_events(pieces, set())
        return await respond(request, engine, events, body.stream, started, "response")

    @app.get("/v1/models")
    async def openai_models() -> dict[str, Any]:
        created = int(engine.path.stat().st_mtime)
        return {"object": "list", "data": [{"id": engine.name, "object": "model", "created": created,
                                            "owned_by": "library"}]}

    @app.post("/v1/chat/completions")
    async def openai_chat(request: Request):
        return await dialect_chat(engine, scheduler, request, dialects.openai_request, dialects.openai_error,
                                  openai_json, openai_sse)

    @app.post("/v1/messages")
    async def anthropic_messages(request: Request):
        return await dialect_chat(engine, scheduler, request, dialects.anthropic_request,
                                  dialects.anthropic_error, anthropic_json, anthropic_sse)

    return app


async def dialect_chat(engine: ServedModel, scheduler: Scheduler, request: Request, translate, error,
                       whole, stream):
    """A chat in another API's dialect: translate the body to Ollama's, generate as ``/api/chat``
    does, and answer in the dialect (``whole`` for one JSON object, ``stream`` for server-sent
    events). Errors use the dialect's own error format."""
    def parse(raw: bytes) -> tuple[dict[str, Any], ChatRequest]:
        translated = translate(parse_json_object(raw))
        check_model(engine, translated["model"])
        return translated, ChatRequest.model_validate(translated)

    try:
        translated, body = await off_loop(request, parse, await read_bytes(request))
        events = await unless_client_leaves(request, start_chat(engine, scheduler, body, request,
                                                                translated.get("calls_allowed", True)))
    except dialects.DialectError as problem:
        return JSONResponse(error(str(problem), problem.status), status_code=problem.status)
    except ValidationError as problem:
        return JSONResponse(error(describe_errors(problem, whole="body"), 400), status_code=400)
    except ApiError as problem:
        return JSONResponse(error(problem.message, problem.status), status_code=problem.status)
    if not body.stream:
        try:
            return JSONResponse(whole(engine.name, *await unless_client_leaves(request, collect(events))))
        except (ApiError, ModelRestarted, *REQUEST_ERRORS) as problem:  # a time budget spent, say
            message, status = public_error(problem)
            return JSONResponse(error(message, status), status_code=status)

    async def sse() -> AsyncIterator[bytes]:
        try:
            async for name, data in stream(engine.name, events):
                head = f"event: {name}\n" if name else ""
                payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
                yield f"{head}data: {payload}\n\n".encode()
        except Exception as problem:  # headers are sent: the error becomes the last event
            message, status = public_error(problem)
            yield f"event: error\ndata: {json.dumps(error(message, status))}\n\n".encode()

    return StreamingResponse(sse(), media_type="text/event-stream")


async def read_bytes(request: Request) -> bytes:
    """The body's bytes, once it says it is JSON, within its size and time (``guard.read_limited``);
    reading only waits for the network, so it stays on the loop."""
    check_content_type(request.headers.get("content-type"))
    return await read_limited(request.stream())


async def unless_client_leaves(request: Request, work: Awaitable[Any]) -> Any:
    """Await ``work``, but give up (cancelling it, which stops its generation) as soon as
    the client has closed the connection: nobody would read the answer."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.25)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientGone()
    finally:
        task.cancel()


async def read_body(request: Request, model: type[Body]) -> Body:
    """Parse and validate a JSON body off the loop (``off_loop``), or raise a 4xx that says what is wrong."""
    return await off_loop(request, validated, await read_bytes(request), model)


def validated(raw: bytes, model: type[Body]) -> Body:
    """A body parsed (``guard.parse_json_object``) and validated against ``model``, or ``ApiError(400)``."""
    try:
        return model.model_validate(parse_json_object(raw))
    except ValidationError as error:
        raise ApiError(400, describe_errors(error, whole="body")) from None


def check_model(engine: ServedModel, name: str) -> None:
    if not name:
        raise ApiError(400, "model is required")
    if name not in (engine.name, f"{engine.name}:latest"):
        raise ApiError(404, f"model '{name}' not found")


def render_or_400(engine: ServedModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Prompt:
    try:
        return engine.render_prompt(messages, tools)
    except (TemplateError, JinjaError, TypeError) as error:
        raise ApiError(400, f"the chat template refused these messages: {error}") from None


def client_name(request: Request) -> str:
    """Whose request this is, for the scheduler's fairness: its address, or ``LOCAL`` (this machine;
    every request to a server that listens on loopback only)."""
    host = request.client.host if request.client else ""
    return host if request.app.state.serves_a_room and host and not is_loopback(host) else LOCAL


async def start_generation(scheduler: Scheduler, prompt: str | Prompt,
                           body: ChatRequest | GenerateRequest, request: Request
                           ) -> AsyncIterator[str | GenerationStats]:
    """Queue the generation and wait for its first piece, so that errors found before any
    text exists (queue full, prompt too long, a schema llama.cpp cannot compile) still get
    a proper status code instead of a half-sent stream."""
    client = client_name(request)
    try:
        scheduler.admit(client)
    except QueueFull as error:
        raise ApiError(503, str(error)) from None
    pieces = scheduler.generate(prompt, body.options, body.format, client)
    try:
        first = await anext(pieces)
    except REQUEST_ERRORS as error:
        raise ApiError(400, str(error)) from None
    except ValueError as error:  # llama-cpp-python's word for input it cannot take
        raise ApiError(400, f"could not start generation: {error}") from None
    except ModelRestarted as error:  # the model's process died (supervisor.py): try again in a moment
        raise ApiError(503, str(error)) from None
    except RuntimeError as error:  # llama.cpp itself failed (llama_decode, a saved state): ours, not the caller's
        log.error("the model failed before its first token", exc_info=error)
        raise ApiError(500, "internal error: the model failed before its first token (the server's log says why)") \
            from None

    async def replay() -> AsyncIterator[str | GenerationStats]:
        yield first
        async for piece in pieces:
            yield piece

    return replay()


def render_body(engine: ServedModel, body: ChatRequest) -> Prompt:
    """The prompt of a validated chat request (``render_or_400``), made on a thread (``off_loop``)."""
    return render_or_400(engine, *template_inputs(body))


def template_inputs(body: ChatRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools of a validated chat request, as the chat template receives them."""
    messages = [message.model_dump(exclude_none=True) for message in body.messages]
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools] if body.tools else None
    return messages, tools


async def start_chat(engine: ServedModel, scheduler: Scheduler, body: ChatRequest, request: Request,
                     calls_allowed: bool = True) -> AsyncIterator[dict[str, Any] | GenerationStats]:
    """Render a validated chat request, start generating, and return its message events.

    ``calls_allowed`` False (``tool_choice: "none"`` in the OpenAI and Anthropic dialects):
    the tools stay in the prompt, the engine forbids the token that opens a call, and no call
    is read out of the reply: it is all content."""
    prompt = await off_loop(request, render_body, engine, body)
    if not calls_allowed:
        prompt = dataclasses.replace(prompt, calls_allowed=False)
    pieces = await start_generation(scheduler, prompt, body, request)
    return chat_events(pieces, {tool.function.name for tool in body.tools or []} if calls_allowed else set())


async def collect(events: AsyncIterator[dict[str, Any] | GenerationStats]
                  ) -> tuple[str, list[dict[str, Any]], GenerationStats]:
    """A whole (non-streamed) reply: all content, all tool calls, and the final stats."""
    content: str = ""
    calls: list[dict[str, Any]] = []
    async for event in events:
        if isinstance(event, GenerationStats):
            return content, calls, event
        content += event.get("content", "")
        calls += event.get("tool_calls", [])
    raise RuntimeError("the generation ended without its statistics")


async def chat_events(pieces: AsyncIterator[str | GenerationStats],
                      tool_names: set[str]) -> AsyncIterator[dict[str, Any] | GenerationStats]:
    """Turn generated text into message parts: content pieces, then any tool calls, then stats."""
    held = ""
    async for piece in pieces:
        if isinstance(piece, GenerationStats):
            if held:
                parsed = await asyncio.to_thread(parse_tool_calls, held, tool_names)  # long text: not on the loop
                if parsed.content:
                    yield {"content": parsed.content}
                if parsed.tool_calls:
                    yield {"content": "", "tool_calls": [
                        {"id": new_call_id(), "function": {"index": i, "name": call.name, "arguments": call.arguments}}
                        for i, call in enumerate(parsed.tool_calls)]}
            yield piece
            return
        if not tool_names:
            yield {"content": piece}
            continue
        held += piece
        start = possible_call_start(held)
        ready, held = (held, "") if start is None else (held[:start], held[start:])
        if ready:
            yield {"content": ready}


async def respond(request: Request, engine: ServedModel, events: AsyncIterator[dict[str, Any] | GenerationStats],
                  stream: bool, started: int, field: str):
    """Send the events as NDJSON lines (``stream``) or as one JSON object."""

    def line(part: dict[str, Any]) -> dict[str, Any]:
        body = {"role": "assistant", **part} if field == "message" else part.get("content", "")
        return {"model": engine.name, "created_at": now_rfc3339(), field: body, "done": False}

    def final(stats: GenerationStats, part: dict[str, Any]) -> dict[str, Any]:
        return {**line(part), "done": True, "done_reason": stats.done_reason,
                "total_duration": time.perf_counter_ns() - started, "load_duration": stats.load_duration,
                "prompt_eval_count": stats.prompt_eval_count, "prompt_eval_cached_count": stats.cache_read_tokens,
                "prompt_eval_duration": stats.prompt_eval_duration,
                "eval_count": stats.eval_count, "eval_duration": stats.eval_duration}

    if not stream:  # an error while collecting (a time budget spent) reaches the app's handler: a 4xx
        content, calls, stats = await unless_client_leaves(request, collect(events))
        return JSONResponse(final(stats, {"content": content, **({"tool_calls": calls} if calls else {})}))

    async def ndjson() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                data = final(event, {"content": ""}) if isinstance(event, GenerationStats) else line(event)
                yield json.dumps(data, separators=(",", ":")).encode() + b"\n"
        except Exception as error:  # headers are sent: the error becomes the last line
            yield json.dumps({"error": public_error(error)[0]}).encode() + b"\n"

    return StreamingResponse(ndjson(), media_type="application/x-ndjson")


def loaded_response(engine: ServedModel, part: dict[str, Any], reason: str = "load") -> dict[str, Any]:
    return {"model": engine.name, "created_at": now_rfc3339(), **part, "done": True, "done_reason": reason}


async def load_or_unload(scheduler: Scheduler, keep_alive: str | int | float | None, client: str = LOCAL) -> str:
    """What an empty request does, as in Ollama: ``keep_alive`` 0 "unloads" the model, which here
    means its cached prompt is dropped (the weights stay loaded); anything else "loads" it."""
    if keep_alive is not None and str(keep_alive).strip().rstrip("smh") in ("0", "0.0"):
        try:
            await scheduler.forget_cache(client)
        except QueueFull as error:  # it waits for every slot: it takes a place in line like a generation
            raise ApiError(503, str(error)) from None
        return "unload"
    return "load"


def details(engine: ServedModel) -> dict[str, Any]:
    spec = REGISTRY.get(engine.name)
    return {"parent_model": "", "format": "gguf", "family": engine.architecture,
            "families": [engine.architecture],
            "parameter_size": spec.parameter_size if spec else engine.metadata.get("general.size_label", ""),
            "quantization_level": spec.quantization if spec else engine.metadata.get("general.file_type", "")}


def digest(engine: ServedModel) -> str:
    """The model file's SHA-256: the registry's for a known model, else hashed once (``file_digest``)."""
    spec = REGISTRY.get(engine.name)
    if spec is None:
        status = engine.path.stat()
        return "sha256:" + file_digest(engine.path, status.st_size, status.st_mtime_ns)
    return "sha256:" + spec.sha256


@functools.lru_cache(maxsize=8)
def file_digest(path: Path, size: int, mtime_ns: int) -> str:
    """The SHA-256 of a file (half a gigabyte: seconds), remembered while its size and date stay the same."""
    sha = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 22):
            sha.update(block)
    return sha.hexdigest()


def modified_at(engine: ServedModel) -> str:
    mtime = datetime.fromtimestamp(engine.path.stat().st_mtime, timezone.utc)
    return mtime.isoformat().replace("+00:00", "Z")


def model_entry(engine: ServedModel) -> dict[str, Any]:
    return {"name": engine.name, "model": engine.name, "modified_at": modified_at(engine),
            "size": engine.path.stat().st_size, "digest": digest(engine), "details": details(engine)}


def show_response(engine: ServedModel) -> dict[str, Any]:
    """``/api/show``: template, details, GGUF metadata as ``model_info``, capabilities."""
    info = {key: _number_or_text(value) for key, value in engine.metadata.items()
            if key != "tokenizer.chat_template"}
    spec = REGISTRY.get(engine.name)
    licence = spec.license if spec else engine.metadata.get("general.license", "")
    return {
        "license": licence,
        "modelfile": f"# served by course_server\nFROM {engine.path.name}\n",
        "parameters": 'stop "<|im_end|>"\nstop "<|endoftext|>"' if engine.architecture == "qwen2" else "",
        "template": engine.template,
        "details": details(engine),
        "model_info": info,
        "capabilities": ["completion", "tools"],
        "modified_at": modified_at(engine),
    }


def _number_or_text(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def exit_with_parent(parent_pid: int) -> None:
    """Stop this server (SIGTERM to itself) once the parent process has gone, e.g. a kernel
    that was killed without running its exit handlers."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The server's command line (``python -m course_server --help``)."""
    parser = argparse.ArgumentParser(prog="python -m course_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: this machine only); 0.0.0.0 serves a room and "
                             "needs --api-key")
    parser.add_argument("--api-key", default=config.api_key(), metavar="KEY",
                        help="require 'Authorization: Bearer KEY' on every request but GET / (default: "
                             "COURSE_API_KEY); required when --host is not a loopback address")
    parser.add_argument("--port", type=int, default=11434)
    parser.add_argument("--max-queue", type=int, default=8, help="requests that may wait for a slot")
    parser.add_argument("--parallel", type=int, default=None, metavar="N",
                        help="requests served at once, their tokens decoded together (as OLLAMA_NUM_PARALLEL; "
                             "default: as many as one batch holds without changing any row's arithmetic, "
                             f"measured at start, at most {MAX_AUTO_PARALLEL}; "
                             "1 with --prompt-cache 0 or --reset-cache)")
    parser.add_argument("--batch-rows", type=int, default=None, metavar="N",
                        help="decode up to N requests' tokens in one batch even where that changes the "
                             "arithmetic (faster; then an answer at temperature 0 depends on what ran beside it)")
    parser.add_argument("--no-repack", action="store_true",
                        help="load the weights without llama.cpp's repacking (as llama-server's --no-repack): "
                             "a few percent slower per token, but a batch of 4 or more rows is computed as one "
                             "row is, so more requests can be decoded together without changing their answers "
                             "(which differ slightly from the repacked weights' answers)")
    parser.add_argument("--num-ctx", type=int, default=4096, help="context window at start-up")
    parser.add_argument("--max-num-ctx", type=int, default=None,
                        help="largest options.num_ctx a request may ask for (default: --num-ctx, so a larger one "
                             "is refused: a context larger than the default holds fewer sequences, and every "
                             "other request waits while it is made; up to the model's own length)")
    parser.add_argument("--request-seconds", type=float, default=TimeBudget.request, metavar="S",
                        help="time budget of one request's generation, checked between tokens (default "
                             f"{TimeBudget.request:g}); one token's sampling may take {TimeBudget.token:g} s "
                             f"and all of a request's {TimeBudget.sampling:g} s")
    parser.add_argument("--fair-tokens", type=int, default=FAIR_TOKENS, metavar="N",
                        help="a generation that has sent N tokens while another request waits for a slot ends "
                             f"there, done_reason 'length' (default {FAIR_TOKENS}; 0: never)")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, metavar="N",
                        help=f"connections and requests at once, beyond which a request gets 503 (default "
                             f"{MAX_CONNECTIONS}; uvicorn's limit_concurrency)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument("--prompt-cache", type=int, default=DEFAULT_PROMPT_CACHE, metavar="N",
                        help="keep the states of the last N prompts and reuse the longest shared prefix, in "
                             "aligned chunks so that the output does not depend on what was cached (default "
                             f"{DEFAULT_PROMPT_CACHE}; 0: llama-cpp-python's one prefix)")
    parser.add_argument("--reset-cache", action="store_true",
                        help="evaluate every prompt from scratch, no prefix reuse (implies --prompt-cache 0)")
    parser.add_argument("--in-process", action="store_true",
                        help="load the model in the server's own process instead of a supervised child "
                             "(supervisor.py): a crash inside llama.cpp then ends the whole server")
    parser.add_argument("--parent-pid", type=int, default=None,
                        help="exit when this process is gone (connect() passes the notebook kernel's pid)")
    args = parser.parse_args(argv)
    if args.prompt_cache < 0:
        parser.error("--prompt-cache takes a number of slots (0 or more)")
    if any(value is not None and value < 1 for value in (args.parallel, args.batch_rows)):
        parser.error("--parallel and --batch-rows take a number (1 or more)")
    if not is_loopback(args.host) and not args.api_key:
        parser.error(f"--host {args.host} serves every machine that can reach this one: give --api-key KEY "
                     "(or set COURSE_API_KEY), and the same key to the learners")
    if args.reset_cache:
        args.prompt_cache = 0
    if args.prompt_cache == 0:
        args.parallel = 1  # llama-cpp-python's own cache serves one request at a time
    if args.max_num_ctx is None:
        args.max_num_ctx = args.num_ctx  # a larger num_ctx is refused unless the server is told otherwise
    if not args.request_seconds > 0 or args.max_connections < 1 or args.fair_tokens < 0:
        parser.error("--request-seconds and --max-connections take a positive number, --fair-tokens 0 or more")
    return args


def load_engine(name: str, path: Path, args: argparse.Namespace) -> ServedModel:
    """The real engine the command line asks for: the batched decoder with its prompt cache, or
    with ``--prompt-cache 0`` (``--reset-cache``) the one-at-a-time decoder. It runs in the model's
    own process (``supervisor.py``), so llama.cpp is imported there, not in the server's."""
    from course_server.engine import batched_engine, one_at_a_time_engine

    budget = TimeBudget(request=getattr(args, "request_seconds", TimeBudget.request))
    if args.prompt_cache:
        return batched_engine(name, path, n_ctx=args.num_ctx, n_threads=args.threads, max_n_ctx=args.max_num_ctx,
                              prompt_cache=args.prompt_cache, parallel=args.parallel, batch_rows=args.batch_rows,
                              repack=not args.no_repack, time_budget=budget)
    return one_at_a_time_engine(name, path, n_ctx=args.num_ctx, n_threads=args.threads,
                                reset_each_request=args.reset_cache, max_n_ctx=args.max_num_ctx,
                                repack=not args.no_repack, time_budget=budget)


def describe_engine(info: dict[str, Any]) -> str:
    """The start-up line's account of the engine (``supervisor.describe``'s fields)."""
    repacked = "" if info.get("repack", True) else ", weights not repacked"
    if "exact_rows" in info:
        return (f"{repacked}; {info['parallel']} slots, up to {info['rows']} decoded in one batch "
                f"({info['exact_rows']} without changing a row's arithmetic, "
                f"{'measured now' if info.get('rows_measured', True) else 'as measured at an earlier start here'})")
    return f"{repacked}; one request at a time"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.parent_pid:
        exit_with_parent(args.parent_pid)
    name, path = resolve_model()
    factory = functools.partial(load_engine, name, path, args)
    engine: ServedModel
    if args.in_process:
        engine = factory()
        info = supervisor.describe(engine)
        where = ", in the server's own process"
    else:
        engine = SupervisedEngine(factory)
        info, where = engine.info, f", in its own process (pid {engine.pid})"
    print(f"loaded {name} from {path} in {info.get('load_duration', 0) / 1e9:.2f} s{where}{describe_engine(info)}",
          file=sys.stderr, flush=True)
    print(f"listening on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    served = uvicorn.Config(create_app(engine, args.max_queue, bound_host=args.host, api_key=args.api_key,
                                       fair_tokens=args.fair_tokens),
                            host=args.host, port=args.port, **uvicorn_limits(args.max_connections),
                            log_level=config.server_log_level(), timeout_graceful_shutdown=2)
    # uvicorn catches SIGINT/SIGTERM, finishes shutting down, then raises the signal again
    # for the handler that was there before: ours, which makes that a normal exit.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: sys.exit(0))
    try:
        uvicorn.Server(served).run()
    finally:
        if isinstance(engine, SupervisedEngine):
            engine.close()
        print("server stopped", file=sys.stderr, flush=True)
    return 0

