"""The server's names for the dialects it serves: OpenAI's ``/v1/chat/completions`` and
Anthropic's ``/v1/messages``, translated to and from Ollama's ``/api/chat``.

The translation itself is ``course_lib/dialects/`` (one module per dialect, shared with the
clients): this module gathers what the routes (``app``) and the response streams
(``streams``) use, under the names lesson 10 and its exercises import from here.
"""

from __future__ import annotations

from ..dialects.anthropic_messages import (
    anthropic_blocks,
    anthropic_error,
    anthropic_request,
    anthropic_response,
    anthropic_stop_reason,
    anthropic_tool_choice,
    anthropic_usage,
)
from ..dialects.ollama import DialectError, random_id
from ..dialects.openai_chat import (
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
