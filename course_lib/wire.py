"""The shapes of Ollama's API requests, as pydantic models.

The embedded server validates every request body against these models before it
touches the model, so a malformed request gets a clear ``{"error": ...}`` with status
400 instead of a crash. Unknown fields are ignored, as Ollama ignores them.

Field names, types and defaults follow Ollama's API (``docs/api.md`` in its repository
and the official Python client's ``_types.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool


class Options(BaseModel):
    """Sampling and runtime options (``options`` in a request).

    Strict types: ``"temperature": "0.5"`` is an error, not a silent conversion
    (an integer is still a fine float).
    Options that llama.cpp has no use for here are accepted and ignored.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    temperature: float | None = None
    seed: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    num_predict: int | None = None
    num_ctx: int | None = Field(default=None, ge=16)
    stop: list[str] | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
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
    images: list[str] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_name: str | None = None
    thinking: str | None = None


class FunctionDeclaration(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDeclaration(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionDeclaration


Format = Literal["json"] | dict[str, Any] | None


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = ""
    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolDeclaration] | None = None
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
