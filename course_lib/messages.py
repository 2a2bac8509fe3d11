"""The course's small vocabulary: messages, tool calls, and tool results that are ok or an error.

Every module that handles a conversation uses these names, so a word means one thing:

- ``Message``: one chat message in Ollama's shape, ``{"role": ..., "content": ..., ...}``
  (the other dialects translate at their edge, with the codecs in ``course_lib/dialects/``).
- ``ToolCall``: the model asked for tool ``name`` with ``arguments`` (``id`` where the
  dialect has one).
- ``Reply``: one model reply, read out of any API's response.
- ``ToolResult``: what a call produced. Either ok (``content`` is what the tool returned,
  as text) or an error of a known ``ErrorKind`` (``content`` explains it). It becomes
  text for the model in one place, ``ToolResult.text``; code that needs to know whether
  a call failed asks ``result.ok`` or ``result.error``, never searches the text (a web
  page can write "error:" too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import ValidationError

Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""


@dataclass
class Reply:
    """One model reply, whatever the API: its text, the calls it asks for, why it stopped,
    what it cost, and the assistant message to append to the conversation (in the API's shape)."""

    text: str
    calls: list[ToolCall]
    stop: str  # the API's own stop value: "stop", "tool_calls", "tool_use", ...
    input_tokens: int
    output_tokens: int
    message: Message


class ErrorKind(str, Enum):
    """Why a call did not produce a result: each kind is a different fix."""

    UNKNOWN_TOOL = "UnknownTool"  # the model named a tool that was not declared
    INVALID_ARGUMENTS = "InvalidArguments"  # the arguments failed validation; nothing ran
    TOOL_FAILED = "ToolFailed"  # the tool ran and raised
    REFUSED = "Refused"  # a guard or a person said no; nothing ran


ERROR_PREFIX = "error: "


@dataclass(frozen=True)
class ToolResult:
    """A call's outcome: ``content`` and, if it failed, the ``error`` kind."""

    content: str
    error: ErrorKind | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        """What the model reads: the content, with an ``error:`` prefix when the call failed."""
        return self.content if self.ok else ERROR_PREFIX + self.content

    @classmethod
    def failure(cls, kind: ErrorKind, explanation: str) -> ToolResult:
        return cls(explanation, kind)


def as_result(outcome: ToolResult | str) -> ToolResult:
    """An executor's answer as a ``ToolResult``. A plain string is taken as an ok result:
    an executor that means a failure says so with ``ToolResult.failure``."""
    return outcome if isinstance(outcome, ToolResult) else ToolResult(outcome)


def describe_errors(error: ValidationError, whole: str = "arguments") -> str:
    """One short part per problem, ``field: rule``, joined by "; ", without the rejected values.
    ``whole`` names a problem with the object as a whole (no field)."""
    return "; ".join(f"{'.'.join(str(part) for part in problem['loc']) or whole}: {problem['msg']}"
                     for problem in error.errors())
