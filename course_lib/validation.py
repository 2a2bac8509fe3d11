"""Arguments from a model are untrusted input: validate them at the boundary.

A tool's arguments are written by a model, which gets them wrong in ordinary ways (a
missing field, a value outside the enum, a key it made up) and can be steered into
writing dangerous ones. So each tool gets a pydantic model of its arguments, strict
enough to reject everything the implementation should never see (``extra="forbid"``,
patterns, ``Literal`` choices, ranges), and nothing runs until the arguments pass.

A failure is not an exception for the agent: it goes back to the model as a ``tool``
message that says, field by field, what was wrong, so the model can correct itself.
The message names fields and rules, never echoes the rejected values (they may hold
personal data, or an attacker's text).

``ValidatedTool`` bundles the three parts of a tool: the declaration the model sees
(generated from the same pydantic model), the check, and the implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from course_lib.messages import Message, describe_errors
from course_lib.tool_parser import call_format


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A pydantic model as the ``parameters`` of a tool declaration (without pydantic's titles)."""
    schema = model.model_json_schema()
    properties = {name: {key: value for key, value in prop.items() if key != "title"}
                  for name, prop in schema.get("properties", {}).items()}
    return {"type": "object", "properties": properties, "required": schema.get("required", [])}


@dataclass
class ValidatedTool:
    """A tool whose arguments must pass ``arguments`` (a pydantic model) before ``function`` runs."""

    name: str
    description: str
    arguments: type[BaseModel]
    function: Callable[[Any], Any]
    hint: Callable[[dict[str, Any]], str] | None = None  # extra advice appended to an error

    def declaration(self) -> dict[str, Any]:
        """What the model sees: the JSON Schema of ``arguments``, without pydantic's titles."""
        parameters = {**parameters_schema(self.arguments), "additionalProperties": False}
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": parameters}}

    def check(self, raw: dict[str, Any]) -> BaseModel | str:
        """The validated arguments, or the error text to send back to the model."""
        try:
            return self.arguments.model_validate(raw)
        except ValidationError as error:
            advice = f" {self.hint(raw)}" if self.hint else ""
            return f"error: invalid arguments for {self.name}: {describe_errors(error)}.{advice}"

    def run(self, raw: dict[str, Any]) -> str:
        """Validate, then run; what comes back is the content of the ``tool`` message."""
        checked = self.check(raw)
        if isinstance(checked, str):
            return checked
        result = self.function(checked)
        return result if isinstance(result, str) else str(result)


@dataclass
class Attempt:
    """One model call in a self-correction run: the arguments it sent and the verdict."""

    arguments: dict[str, Any] | None  # None: the model did not call the tool
    error: str | None  # None: the arguments passed


def attempts_until_valid(model: Any, messages: list[Message], tool: ValidatedTool, max_attempts: int = 3,
                         options: dict[str, Any] | None = None) -> list[Attempt]:
    """Ask; while the call is invalid, send the error back and ask again (at most ``max_attempts``).

    Stops early when the arguments pass or when the model stops calling the tool.
    """
    messages = list(messages)
    attempts: list[Attempt] = []
    for _ in range(max_attempts):
        message = model.chat(messages, tools=[tool.declaration()], options=options)["message"]
        calls = [c for c in message.get("tool_calls") or [] if c["function"]["name"] == tool.name]
        if not calls:
            attempts.append(Attempt(None, None))
            break
        arguments = calls[0]["function"].get("arguments") or {}
        checked = tool.check(arguments)
        attempts.append(Attempt(arguments, checked if isinstance(checked, str) else None))
        if not isinstance(checked, str):
            break
        messages += [{"role": "assistant", "content": "", "tool_calls": [calls[0]]},
                     {"role": "tool", "tool_name": tool.name, "content": checked}]
    return attempts


def required_call_format(declared: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``format`` schema that lets the model write nothing but a call of one of the declared
    tools: ``tool_choice="required"`` for a server without it, done with a grammar (lesson 5).

    The grammar fixes the shape: a declared name, arguments with the right keys and types.
    ``pattern`` s are left out (llama-cpp-python's converter mangles some of them), so the
    validation at the boundary still decides whether the values are right. It is
    :func:`course_lib.tool_parser.call_format`, which the server uses for ``tool_choice`` too.
    """
    return call_format(declared)
