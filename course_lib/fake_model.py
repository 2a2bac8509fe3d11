"""A scripted stand-in for the model, for tests that must not depend on what a model says.

The loop's logic (when to stop, which limit fires, that every call gets an answer) is
deterministic and should be tested deterministically. ``ScriptedModel`` replies with the
messages you give it, in order, and remembers what it was sent::

    model = ScriptedModel([calls("now"), says("It is 02:28.")])
    transcript = run_agent(model, [{"role": "user", "content": "Time?"}], {"now": now})
    assert transcript.answer == "It is 02:28."
"""

from __future__ import annotations

import copy
from typing import Any

from course_lib.messages import Message


def calls(name: str, **arguments: Any) -> Message:
    """An assistant message asking for one tool call."""
    return {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}


def says(text: str) -> Message:
    """An assistant message with a final answer."""
    return {"role": "assistant", "content": text}


class ScriptedModel:
    """Answers ``chat`` with the scripted replies in order; each turn "costs" fixed token counts."""

    def __init__(self, replies: list[Message], prompt_tokens_per_message: int = 10, output_tokens: int = 5) -> None:
        self.replies = list(replies)
        self.requests: list[list[Message]] = []
        self.declared: list[list[str]] = []  # the tool names offered with each request
        self.tools: list[list[dict[str, Any]]] = []  # the declarations themselves
        self.fields: list[dict[str, Any]] = []  # other request fields, such as ``format``
        self.prompt_tokens_per_message = prompt_tokens_per_message
        self.output_tokens = output_tokens

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
             options: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        if not self.replies:
            raise AssertionError("the script has no more replies: the loop asked the model once too often")
        self.requests.append(copy.deepcopy(messages))
        self.declared.append([tool["function"]["name"] for tool in tools or []])
        self.tools.append(copy.deepcopy(tools or []))
        self.fields.append(fields)
        return {"message": self.replies.pop(0), "done": True, "done_reason": "stop",
                "prompt_eval_count": self.prompt_tokens_per_message * len(messages), "eval_count": self.output_tokens}
