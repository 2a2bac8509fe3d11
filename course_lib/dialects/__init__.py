"""The wire dialects of a chat request, one codec each, below both the server and the clients.

Ollama serves ``/v1/chat/completions`` (OpenAI Chat Completions) and ``/v1/messages``
(Anthropic Messages) next to its own ``/api/chat``; so does the course's server, and the
course's clients speak them to other servers and to hosted providers. All three say the same
things in different places:

================  =======================  =================================  ========================================
                  Ollama ``/api/chat``     OpenAI ``/v1/chat/completions``    Anthropic ``/v1/messages``
================  =======================  =================================  ========================================
tool declaration  ``function.parameters``  ``function.parameters``            ``input_schema`` (no ``function``)
call arguments    a JSON object            a JSON **string**                  ``input``, a JSON object
result of a call  ``role: tool`` message   ``role: tool`` + ``tool_call_id``  ``tool_result`` block in a **user** turn
error result      text in the result       text in the result                 ``is_error: true``
stop signal       ``done_reason``          ``finish_reason: "tool_calls"``    ``stop_reason: "tool_use"``
================  =======================  =================================  ========================================

One module per dialect, each pure functions (no HTTP, no model), used by the server
(``server/app.py``, ``server/streams.py``) and by the clients (``openai_client``, ``providers``):

- ``ollama``: what every dialect becomes (Ollama's request fields), ``DialectError``, the
  field checks, and ``tool_choice`` in Ollama's terms (``ToolChoice``: the tools to render,
  a grammar, and whether a call may come back);
- ``openai_chat``: OpenAI's Chat Completions both ways, and ``parse_arguments``, the one
  function that reads OpenAI's argument strings;
- ``anthropic_messages``: Anthropic's Messages both ways;
- ``json_text``: JSON text read with the server's body rules (the arguments string's checks).

A request the dialect's own API would reject (say, call arguments given as an object where
OpenAI wants a string) raises ``DialectError`` with the message the server returns, in the
dialect's error format.

``tool_choice`` and the parallel-call settings follow the course's rule "honoured or
refused, never silently dropped" (``openai_tool_choice``, ``anthropic_tool_choice``):

====================================  ======================================  ==================================
OpenAI                                Anthropic                               here
====================================  ======================================  ==================================
``"auto"`` (the default)              ``{"type": "auto"}``                    the model decides
``"none"``                            ``{"type": "none"}``                    tools shown; no call comes back
``"required"``                        ``{"type": "any"}``                     a grammar: exactly one call
``{"type": "function", "function":    ``{"type": "tool", "name": ...}``       a grammar: exactly one call of it
{"name": ...}}``
``parallel_tool_calls: false``        ``disable_parallel_tool_use: true``     kept with a forced call (one call);
                                                                              with ``auto``, a 400
====================================  ======================================  ==================================

``"none"`` is honoured as OpenAI defines it ("the model will not call any tool and instead
generates a message"): the tools stay in the prompt, so a client can ask the model about
them (AgentDojo's tool filter, lesson 9b, asks which tools a task needs), while the server
forbids the token that opens a call (``<tool_call>``) when sampling and reads no call out
of the reply (``ollama.no_call``, which both dialects call; ``server/app.py``).

A forced call is lesson 5's grammar (``tool_parser.call_format``, which
``validation.required_call_format`` is too): the model can write nothing but one JSON call of
a declared tool, which the server reads as a call.
Limiting an ``auto`` turn to one call would mean dropping the calls after the first from
the reply, and translating a request cannot do that, so that combination is refused with
the alternative named, rather than accepted and ignored.

The package's own names (below) are what the server's routes and response streams use, and what
lesson 10 imports: ``from course_lib import dialects``, then ``dialects.openai_request(...)``.
"""

from course_lib.dialects.anthropic_messages import (
    anthropic_blocks,
    anthropic_error,
    anthropic_request,
    anthropic_response,
    anthropic_stop_reason,
    anthropic_tool_choice,
    anthropic_usage,
)
from course_lib.dialects.ollama import DialectError, random_id
from course_lib.dialects.openai_chat import (
    openai_error,
    openai_finish_reason,
    openai_request,
    openai_response,
    openai_tool_calls,
    openai_tool_choice,
    openai_usage,
)

__all__ = ["DialectError", "anthropic_blocks", "anthropic_error", "anthropic_request",
           "anthropic_response", "anthropic_stop_reason", "anthropic_tool_choice", "anthropic_usage",
           "openai_error", "openai_finish_reason", "openai_request", "openai_response", "openai_tool_calls",
           "openai_tool_choice", "openai_usage", "random_id"]
