"""The shapes of Ollama's API requests, as pydantic models.

The embedded server validates every request body against these models before it
touches the model, so a malformed request gets a clear ``{"error": ...}`` with status
400 instead of a crash. Unknown fields are ignored, as Ollama ignores them.

Field names, types and defaults follow Ollama's API (``docs/api.md`` in its repository
and the official Python client's ``_types.py``).

Every input is bounded, because a server is only as safe as its largest accepted input
(a thousand stop strings or a ``repeat_last_n`` of two billion would otherwise cost every
later request its share of the model). The limits, each answered with a 400 that names it:

=====================  ===========================  =============================================
what                   limit                        why this number
=====================  ===========================  =============================================
connections            128 at once (503 beyond),    uvicorn's ``limit_concurrency``; one address
                       32 per address but loopback  cannot hold them all (``connections.py``)
request headers        complete within 10 s,        slowloris: a trickle held a connection for
                       16 KiB                       ever, before the key was checked
idle keep-alive        5 s                          uvicorn's ``timeout_keep_alive``
request rate           10 a second per address      a room's server only (429 beyond; burst 40):
                       (burst 40), loopback free    refused requests still cost the model a core
API key                checked with the headers     before the body is read (``guard.py``)
request body           4 MiB, UTF-8 JSON,           32k tokens of text is ~130 KB; room for tools;
                       within 30 s (408)            4 MiB at 140 KB/s
lists and objects      100,000 (every ``[`` and     counted before parsing, which holds Python's
                       ``{``, strings included)     lock: 4 MiB of ``[]`` took a second of the loop
JSON nesting           64 levels                    tool schemas nest a few levels, not hundreds
parsing, rendering     2 at once, off the loop      the event loop passes every stream's tokens
``messages``           1,024                        a long agent run is tens of turns
``tools``              128                          each costs ~80 prompt tokens (lesson 8)
``tool_calls``         64 in one message            each is written by the template, then tokenized
``images``             16 in one message            the model reads none; Ollama's field, bounded
tool names             1-64 of ``A-Za-z0-9_.:-``    OpenAI's rule, plus the dots and colons of MCP
``stop``               16 strings of 1-128 chars    each is checked after every generated token
``temperature``        0 to 5                       finite; above 2 the text is noise anyway
``top_k``              0 to 10,000                  0 switches it off
``top_p``, ``min_p``   0 to 1                       probabilities
``repeat_penalty``     0 to 10                      1 is off
presence, frequency    -2 to 2                      OpenAI's range
``repeat_last_n``      -1 to 4,096                  -1 means the whole context
``seed``               -1 to 4,294,967,295          llama.cpp seeds are 32-bit; -1 is random
``num_predict``        -2 to 32,768                 -1 and -2: until the context is full
``num_ctx``            16 to ``--num-ctx`` (4,096)  a larger context holds fewer sequences and
                       unless ``--max-num-ctx``     every request waits while it is made: refused
                       allows more                  (400) unless the server allows it
one request's time     120 s from getting a slot    checked between tokens (``--request-seconds``);
                       to its last token            then a 400 or the stream's last error line
one token's sampling   2 s; 20 s for all of a       a grammar makes sampling slow; without one a
                       request's tokens             token takes milliseconds (``TimeBudget``)
a token step           30 s; a prompt step 300 s    then the model's process is restarted
line per client        a quarter of the places (4+) a room's server only; free slots go to the
                                                    client with the fewest running (``scheduler``)
a slot while others    512 tokens (``--fair-tokens``) then the generation ends, ``done_reason``
wait                                                ``length``: a waiting request is not held
                                                    behind a long one for its whole budget
``format`` schema      1,000 objects and arrays     each becomes grammar rules (``grammar_limits``)
schema counts          0 to 1,000                   ``minLength``, ``maxItems``...: one grammar step each
schema lists           64 entries                   ``enum``, ``anyOf``, ``properties``...: paths per token
``pattern``            256 chars, a safe subset     atoms, classes, strict counts up to 1,000, groups
                                                    followed by ``?`` only; others are refused
pattern ambiguity      400                          parse positions after the first variable part
                                                    (``pattern_ambiguity``): live grammar states
all patterns' ambiguity 800, added up in one schema  an ``anyOf``'s branches are live at once
grammar text           256 KiB, nested <= 1,500     checked after conversion, before llama.cpp compiles it
=====================  ===========================  =============================================
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from course_server.grammar_limits import check_format

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_JSON_DEPTH = 64
MAX_JSON_CONTAINERS = 100_000  # lists and objects in a body (every [ and { counted, strings included)
BODY_SECONDS = 30.0  # a body must arrive within this (4 MiB at 140 KB/s)
MAX_MESSAGES = 1024
MAX_TOOLS = 128
MAX_TOOL_CALLS = 64  # calls in one assistant message (the template writes and the tokenizer reads each)
MAX_IMAGES = 16  # images in one message (this server's model reads none; the field is Ollama's)
MAX_STOPS = 16
MAX_STOP_LENGTH = 128

# pydantic checks patterns with a Rust regex, in which $ is the very end (no newline before it).
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
StopString = Annotated[str, StringConstraints(min_length=1, max_length=MAX_STOP_LENGTH)]


class Options(BaseModel):
    """Sampling and runtime options (``options`` in a request).

    Strict types: ``"temperature": "0.5"`` is an error, not a silent conversion
    (an integer is still a fine float).
    Options that llama.cpp has no use for here are accepted and ignored.
    """

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    temperature: float | None = Field(default=None, ge=0, le=5)
    seed: int | None = Field(default=None, ge=-1, le=2**32 - 1)
    top_k: int | None = Field(default=None, ge=0, le=10_000)
    top_p: float | None = Field(default=None, ge=0, le=1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    num_predict: int | None = Field(default=None, ge=-2, le=32_768)
    num_ctx: int | None = Field(default=None, ge=16)  # the upper bound is the server's (--max-num-ctx)
    stop: list[StopString] | None = Field(default=None, max_length=MAX_STOPS)
    repeat_penalty: float | None = Field(default=None, ge=0, le=10)
    repeat_last_n: int | None = Field(default=None, ge=-1, le=4096)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: ToolName
    arguments: dict[str, Any] = Field(default_factory=dict)
    index: int | None = None


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    function: FunctionCall
    id: str | None = None


class Message(BaseModel):
    """One chat message. ``tool_calls`` on assistant turns, ``tool_name`` on tool results."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[str] | None = Field(default=None, max_length=MAX_IMAGES)
    tool_calls: list[ToolCallIn] | None = Field(default=None, max_length=MAX_TOOL_CALLS)
    tool_name: ToolName | None = None
    thinking: str | None = None


class FunctionDeclaration(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: ToolName
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDeclaration(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionDeclaration


def _bounded(format: Any) -> Any:
    """A ``format`` schema within ``grammar_limits`` (a ``SchemaTooComplex`` is a ``ValueError``: a 400)."""
    if isinstance(format, dict):
        check_format(format)
    return format


Format = Annotated[Literal["json"] | dict[str, Any] | None, AfterValidator(_bounded)]


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = ""
    messages: list[Message] = Field(default_factory=list, max_length=MAX_MESSAGES)
    tools: list[ToolDeclaration] | None = Field(default=None, max_length=MAX_TOOLS)
    format: Format = None
    options: Options | None = None
    stream: StrictBool = True  # Ollama streams unless told otherwise
    keep_alive: str | int | float | None = None
    think: bool | str | None = None


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = ""
    prompt: str = ""
    system: str | None = None
    raw: StrictBool = False
    format: Format = None
    options: Options | None = None
    stream: StrictBool = True
    keep_alive: str | int | float | None = None
    images: list[str] | None = None
    think: bool | str | None = None


class ShowRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = ""
    name: str = ""  # older clients send "name"
    verbose: bool | None = None
