"""Model routing: a small model answers each turn first; a larger one gets the turns it got wrong.

A larger model is slower (the 1.5B takes about 1.5 times the 0.5B's time per request on
the course's CPU) and, on a hosted API, dearer per token. Most turns do not need it. A
``Router`` is a ``ChatModel`` that sends every request to ``small`` first and checks the
reply; if a check fails, the *same* request goes to ``large`` and its reply is the one
the agent gets::

    turn ─> small model ─> checks pass? ──yes──> reply
                              │ no (the reason is recorded)
                              ▼
                         large model ─────────> reply (whatever it says: no second check)

The checks only use what an agent knows before a tool runs: the conversation, the tools
declared, the reply. They never look at what the right answer is, and they run before any
tool does, so an escalated turn has no side effects twice: the small model's rejected call
is never executed. The default checks catch what the capstone's evaluation saw the 0.5B
do (lesson 11):

- ``unknown_tool``: a call of a tool that was not declared;
- ``invalid_arguments``: a call whose arguments the agent's validation would refuse
  (checked against the declared JSON Schema, undeclared arguments dropped first, as the
  kiosk's executor does): a product name where a SKU belongs, bare digits;
- ``no_call_on_first_turn``: tools were offered and the model answered the request
  without calling any, on its first turn. The kiosk's system prompt says "never guess
  stock, prices or lead times"; a first answer from nothing is the failure to catch. A
  request that truly needs no tool is escalated too: that costs time, never a wrong
  answer, since the larger model's reply is used whatever it says.

What no check can see is a valid call with a wrong value (an e-mail with an invented
price): routing can only be as good as its checks.

Routing is per turn, not per request: the next turn goes to the small model again, with
the larger model's call and its result in the conversation. Every turn's decision is kept
in ``decisions``, so a run can say how many turns were escalated and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from course_lib.loop import ChatModel
from course_lib.messages import Message
from course_lib.tools import BrokenSchema, DeclaredTool
from course_lib.tracing import model_name

Check = Callable[[list[Message], list[dict[str, Any]], Message], str | None]
"""``check(messages sent, tools declared, reply message)``: why the reply needs the larger model, or None."""


def requested_calls(reply: Message) -> list[tuple[str, Any]]:
    """The ``(name, arguments)`` of each call in an assistant message (Ollama's shape)."""
    return [(call.get("function", {}).get("name", ""), call.get("function", {}).get("arguments"))
            for call in reply.get("tool_calls") or []]


def declared_names(tools: list[dict[str, Any]]) -> set[str]:
    return {tool["function"]["name"] for tool in tools}


def unknown_tool(messages: list[Message], tools: list[dict[str, Any]], reply: Message) -> str | None:
    """A call of a tool that was not declared (with no tools offered, any call)."""
    names = declared_names(tools)
    unknown = [name for name, _ in requested_calls(reply) if name not in names]
    return f"called {unknown[0]!r}, which is not a declared tool" if unknown else None


def invalid_arguments(messages: list[Message], tools: list[dict[str, Any]], reply: Message) -> str | None:
    """A call of a declared tool whose arguments do not satisfy its declared schema.

    Arguments the tool does not declare are dropped first, as the kiosk's executor drops
    them (``security.executor.known_arguments``): the check escalates exactly the calls the
    agent would answer with "invalid arguments". A declaration whose own schema is broken
    escalates nothing: that is the tool's fault, and a larger model cannot fix it."""
    declarations = {tool["function"]["name"]: tool for tool in tools}
    for name, arguments in requested_calls(reply):
        if name not in declarations:
            continue  # unknown_tool's business
        if not isinstance(arguments, dict):
            return f"{name}: its arguments are not a JSON object"
        tool = DeclaredTool(declarations[name], run=lambda arguments: None)
        known = {key: value for key, value in arguments.items() if key in (tool.parameters.get("properties") or {})}
        try:
            tool.check(known)
        except BrokenSchema:
            continue
        except ValueError as problem:
            return f"{name}: {problem}"
    return None


def no_call_on_first_turn(messages: list[Message], tools: list[dict[str, Any]], reply: Message) -> str | None:
    """Tools were offered, the model has not spoken yet in this conversation, and it answered without a call."""
    first_turn = not any(message["role"] == "assistant" for message in messages)
    if tools and first_turn and not reply.get("tool_calls"):
        return "answered without calling a tool on its first turn"
    return None


DEFAULT_CHECKS: tuple[Check, ...] = (unknown_tool, invalid_arguments, no_call_on_first_turn)


@dataclass(frozen=True)
class Decision:
    """One turn's routing: which model's reply was used and, if it was escalated, why."""

    answered_by: str  # the model whose reply the agent got
    reason: str | None  # the first check that failed on the small model's reply; None if it was kept
    seconds: float  # the whole turn, both models' time when it was escalated

    @property
    def escalated(self) -> bool:
        return self.reason is not None


@dataclass
class Router:
    """A ``ChatModel`` that answers each turn with ``small`` and escalates it to ``large``
    when one of ``checks`` fails on the small model's reply (the first failing check is the
    reason recorded). Use it wherever a model goes: ``KioskAgent(Router(small, large), kiosk)``.

    An escalated turn costs both models' time and tokens; the reply it returns counts the
    tokens of both (``prompt_eval_count``, ``eval_count``), so traces and costs include the
    rejected attempt."""

    small: ChatModel
    large: ChatModel
    checks: tuple[Check, ...] = DEFAULT_CHECKS
    decisions: list[Decision] = field(default_factory=list)

    @property
    def model(self) -> str:
        """The name traces and results give this model: both models, in the order they are asked."""
        return f"{model_name(self.small)}, escalating to {model_name(self.large)}"

    def fresh(self) -> Router:
        """The same router with no decisions yet: one per request, to count each request's escalations."""
        return Router(self.small, self.large, self.checks)

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
             options: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        started = time.perf_counter()
        reply = self.small.chat(messages, tools=tools, options=options, **fields)
        reason = self.failed_check(messages, tools or [], reply["message"])
        if reason is None:
            self.decisions.append(Decision(model_name(self.small), None, time.perf_counter() - started))
            return reply
        escalated = self.large.chat(messages, tools=tools, options=options, **fields)
        self.decisions.append(Decision(model_name(self.large), reason, time.perf_counter() - started))
        return {**escalated,
                "prompt_eval_count": reply.get("prompt_eval_count", 0) + escalated.get("prompt_eval_count", 0),
                "eval_count": reply.get("eval_count", 0) + escalated.get("eval_count", 0)}

    def failed_check(self, messages: list[Message], tools: list[dict[str, Any]], reply: Message) -> str | None:
        """The reason of the first check that fails on ``reply``, or None if all pass."""
        for check in self.checks:
            if reason := check(messages, tools, reply):
                return reason
        return None

    @property
    def escalated(self) -> list[Decision]:
        return [decision for decision in self.decisions if decision.escalated]
