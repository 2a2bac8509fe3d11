"""The agent loop: ask the model, run the tools it asks for, send the results, repeat.

    reply = chat(messages, tools)          # the model answers...
    while reply has tool_calls:            # ...or asks for tools
        messages += [reply] + results      # the agent runs them and reports back
        reply = chat(messages, tools)

Written like that, the loop trusts the model to stop. A small model often does not (it
calls the same tool again and again), so this loop has **limits**, and when one is hit
it raises an exception that says which limit and carries the transcript, never a quiet
return that looks like an answer:

- ``max_turns``: model calls per run;
- ``max_identical_calls``: the same tool with the same arguments, within one run;
- ``max_tokens``: prompt plus generated tokens, summed over the turns;
- ``max_seconds``: wall-clock time of the run.

Every call is answered with a ``tool`` message. ``execute`` decides what that message
says: by default the tool runs (``tools.call_tool``), but an agent may pass its own
function to refuse, rewrite or mock calls.

There is one loop, ``run_loop``, for every API: a ``Dialect`` asks the model and writes
the results back in its API's shape. ``run_agent`` is that loop over Ollama's ``/api/chat``;
``providers.run`` is the same loop over OpenAI's and Anthropic's APIs (lesson 10).

Small models often ask for a call they already have the result of. With
``answer_on_repeat=True`` the loop treats that as "the model has what it needs" and asks
for the answer in a separate, tool-free turn built from the question and the results
(``answer_from_results``). The transcript marks that turn, so it is never mistaken for
the model finishing on its own.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from course_lib.messages import Message, Reply, ToolCall, ToolResult, as_result
from course_lib.tools import ToolFunction, call_tool, canonical_arguments, tool_schema
from course_lib.validation import required_call_format

Executor = Callable[[str, dict[str, Any]], "ToolResult | str"]


class ChatModel(Protocol):
    """Anything with ``chat(messages, tools=..., options=...) -> Ollama reply``: a ``Client``, or a fake."""

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
             options: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]: ...


class Dialect(Protocol):
    """How the loop talks to one API: ask the model, and write results back in the API's shape.

    ``OllamaDialect`` below speaks to a ``ChatModel``; ``providers`` has one per API (lesson 10).
    The loop itself never looks inside a request or a response."""

    def ask(self, messages: list[Message], tools: dict[str, ToolFunction] | None) -> Reply: ...

    def tool_messages(self, answered: list[tuple[ToolCall, ToolResult]]) -> list[Message]: ...


@dataclass
class OllamaDialect:
    """Ollama's ``/api/chat`` shape, through any ``ChatModel``: tools declared with ``tool_schema``,
    one ``tool`` message per result."""

    model: ChatModel
    options: dict[str, Any] | None = None

    def ask(self, messages: list[Message], tools: dict[str, ToolFunction] | None) -> Reply:
        declared = [tool_schema(function) for function in tools.values()] if tools else None
        reply = self.model.chat(messages, tools=declared, options=self.options)
        message = reply["message"]
        calls = [ToolCall(call["function"]["name"], call["function"].get("arguments") or {}, call.get("id", ""))
                 for call in message.get("tool_calls") or []]
        return Reply(message.get("content") or "", calls, str(reply.get("done_reason", "")),
                     reply.get("prompt_eval_count", 0), reply.get("eval_count", 0), message)

    def tool_messages(self, answered: list[tuple[ToolCall, ToolResult]]) -> list[Message]:
        return [{"role": "tool", "tool_name": call.name, "content": result.text} for call, result in answered]


class FirstCallRequired:
    """A model whose first reply to a request must be a tool call (``tool_choice="required"``,
    emulated): while the conversation has no assistant turn yet, the request carries a ``format``
    that only allows a call of a declared tool. Later turns are free to answer."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
             options: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        if tools and not any(message["role"] == "assistant" for message in messages):
            fields.setdefault("format", required_call_format(tools))
        return self.model.chat(messages, tools=tools, options=options, **fields)


@dataclass
class Limits:
    max_turns: int = 6
    max_identical_calls: int = 2
    max_tokens: int | None = None
    max_seconds: float | None = None


@dataclass
class Turn:
    """One model call and what the agent did with it."""

    reply: Message  # the assistant message, in the dialect's shape
    prompt_tokens: int
    output_tokens: int
    seconds: float
    tool_calls: list[ToolCall] = field(default_factory=list)
    text: str = ""
    outcomes: list[ToolResult] = field(default_factory=list)  # one per call that was run, in order
    results: list[Message] = field(default_factory=list)  # the same results, as the messages the model got
    answer_turn: bool = False  # asked by answer_from_results, not chosen by the model

    @property
    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        """The calls as ``(name, arguments)`` pairs, for printing and unpacking."""
        return [(call.name, call.arguments) for call in self.tool_calls]


@dataclass
class Transcript:
    """Everything a run did: the messages, and a record per turn."""

    messages: list[Message]
    turns: list[Turn] = field(default_factory=list)

    @property
    def answer(self) -> str | None:
        """The final text, if the model finished with an answer rather than a call."""
        last = self.turns[-1] if self.turns else None
        return last.text if last and not last.tool_calls else None

    @property
    def tokens(self) -> int:
        return sum(turn.prompt_tokens + turn.output_tokens for turn in self.turns)

    @property
    def seconds(self) -> float:
        return sum(turn.seconds for turn in self.turns)


class LoopLimitReached(RuntimeError):
    """The loop was stopped by a limit; ``transcript`` holds everything up to that point."""

    def __init__(self, message: str, transcript: Transcript) -> None:
        super().__init__(message)
        self.transcript = transcript


class TurnLimitReached(LoopLimitReached):
    pass


class RepeatedCall(LoopLimitReached):
    pass


class TokenBudgetExceeded(LoopLimitReached):
    pass


class TimeBudgetExceeded(LoopLimitReached):
    pass


def call_key(name: str, arguments: dict[str, Any]) -> str:
    """The same call, whatever the order of its arguments, gives the same key."""
    return name + canonical_arguments(arguments)


def run_agent(model: ChatModel, messages: list[Message], tools: dict[str, ToolFunction],
              limits: Limits | None = None, execute: Executor | None = None,
              options: dict[str, Any] | None = None, answer_on_repeat: bool = False) -> Transcript:
    """Run the loop until the model answers without calling a tool, or a limit stops it."""
    return run_loop(OllamaDialect(model, options), messages, tools, limits, execute, answer_on_repeat)


def run_loop(dialect: Dialect, messages: list[Message], tools: dict[str, ToolFunction],
             limits: Limits | None = None, execute: Executor | None = None,
             answer_on_repeat: bool = False) -> Transcript:
    """The loop, for any dialect: ask, run every call in order, answer every call, repeat.

    ``execute(name, arguments)`` runs one call (by default ``tools.call_tool``: validate, then
    run) and returns a ``ToolResult`` (a plain string counts as an ok result)."""
    limits = limits or Limits()
    run_call = execute or (lambda name, arguments: call_tool(name, arguments, tools))
    transcript = Transcript(messages=list(messages))
    seen: Counter[str] = Counter()
    started = time.perf_counter()
    for _ in range(limits.max_turns):
        turn = _ask(dialect, transcript.messages, tools or None)
        transcript.turns.append(turn)
        transcript.messages.append(turn.reply)
        _check_budgets(transcript, limits, time.perf_counter() - started)
        if not turn.tool_calls:
            return transcript
        for call in turn.tool_calls:
            key = call_key(call.name, call.arguments)
            seen[key] += 1
            if seen[key] > limits.max_identical_calls:
                turn.results = dialect.tool_messages(list(zip(turn.tool_calls, turn.outcomes)))
                if answer_on_repeat:
                    return answer_from_results(dialect, transcript)
                raise RepeatedCall(f"{call.name}({json.dumps(call.arguments)}) was requested {seen[key]} times",
                                   transcript)
            turn.outcomes.append(as_result(run_call(call.name, call.arguments)))
        turn.results = dialect.tool_messages(list(zip(turn.tool_calls, turn.outcomes)))
        transcript.messages.extend(turn.results)
    raise TurnLimitReached(f"no answer after {limits.max_turns} turns", transcript)


def _ask(dialect: Dialect, messages: list[Message], tools: dict[str, ToolFunction] | None) -> Turn:
    started = time.perf_counter()
    reply = dialect.ask(messages, tools)
    return Turn(reply.message, reply.input_tokens, reply.output_tokens, time.perf_counter() - started,
                reply.calls, reply.text)


ANSWER_INSTRUCTION = "Answer the user's question in one plain sentence, using the tool results given."


def question_and_results(question: str, results: list[tuple[str, dict[str, Any], str]]) -> str:
    """The answer turn's user message: the question, then one ``name(arguments) = result`` line per call."""
    lines = [f"{name}({json.dumps(arguments, ensure_ascii=False)}) = {result}" for name, arguments, result in results]
    return f"Question: {question}\n\nTool results:\n" + "\n".join(lines)


def answer_prompt(transcript: Transcript) -> list[Message]:
    """A fresh, tool-free conversation: the user's question and every tool result so far."""
    question = next(m["content"] for m in transcript.messages if m["role"] == "user")
    results = [(call.name, call.arguments, result.text)
               for turn in transcript.turns for call, result in zip(turn.tool_calls, turn.outcomes)]
    return [{"role": "system", "content": ANSWER_INSTRUCTION},
            {"role": "user", "content": question_and_results(question, results)}]


def answer_from_results(dialect: Dialect, transcript: Transcript) -> Transcript:
    """End a run with an answer written from the results (no tools offered), marked as such."""
    turn = _ask(dialect, answer_prompt(transcript), None)
    turn.answer_turn = True
    transcript.turns.append(turn)
    transcript.messages.append(turn.reply)
    return transcript


def _check_budgets(transcript: Transcript, limits: Limits, elapsed: float) -> None:
    if limits.max_tokens is not None and transcript.tokens > limits.max_tokens:
        raise TokenBudgetExceeded(f"{transcript.tokens} tokens used, budget {limits.max_tokens}", transcript)
    if limits.max_seconds is not None and elapsed > limits.max_seconds:
        raise TimeBudgetExceeded(f"{elapsed:.1f} s elapsed, budget {limits.max_seconds} s", transcript)
