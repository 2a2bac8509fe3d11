"""Tools from an MCP server, in the course's terms: the mapping, the results, and the trust.

An MCP server lists its tools (``tools/list``): a ``name``, a ``description``, an
``input_schema`` (a JSON Schema object), maybe an ``output_schema`` and ``annotations``
(hints such as ``read_only_hint``). A model that calls tools through Ollama, OpenAI or
Anthropic needs them as that API's ``tools``. The mapping is small, and the one thing to
get right is to keep the schema whole: ``required``, ``additionalProperties`` and nested
objects. A copy that drops ``required`` lets the model leave arguments out.

A call's result comes back as content blocks, maybe ``structured_content``, and an
``is_error`` flag; ``tool_result`` turns it into the course's ``ToolResult``.

Annotations are hints written by the server. A client that does not control the server
must not let a server's ``read_only_hint`` decide that a refund needs no approval:
``needs_approval`` applies the client's own list first. ``pin`` and ``changed_tools``
catch a server whose tool definitions change after they were reviewed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from mcp import types

from .messages import ErrorKind, ToolResult


def ollama_tool(tool: types.Tool) -> dict[str, Any]:
    """The tool in Ollama's (and OpenAI's) ``tools`` format, its input schema kept whole."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                             "parameters": copy.deepcopy(tool.input_schema)}}


def anthropic_tool(tool: types.Tool) -> dict[str, Any]:
    """The tool in Anthropic's ``tools`` format: no ``function`` wrapper, ``input_schema`` as is."""
    return {"name": tool.name, "description": tool.description or "", "input_schema": copy.deepcopy(tool.input_schema)}


def tool_result(result: types.CallToolResult) -> ToolResult:
    """An MCP call's result as a ``ToolResult``: structured content as JSON when the server gave
    it, else the text blocks joined; ``is_error`` makes it a failure of the tool."""
    if result.structured_content is not None and not result.is_error:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    else:
        text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
    return ToolResult.failure(ErrorKind.TOOL_FAILED, text) if result.is_error else ToolResult(text)


def needs_approval(tool: types.Tool, read_only: Iterable[str], trust_annotations: bool = False) -> bool:
    """Whether a call of ``tool`` must wait for a person. The client's own ``read_only`` list
    decides first; a server's annotations count only when the client trusts that server, and
    then only a tool marked read-only and not destructive goes without approval."""
    if tool.name in set(read_only):
        return False
    hints = tool.annotations
    if trust_annotations and hints is not None and hints.read_only_hint and not hints.destructive_hint:
        return False
    return True


def definition_digest(tool: types.Tool) -> str:
    """A fingerprint of everything the model and the user rely on: name, description, schemas, hints."""
    reviewed = {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema,
                "output_schema": tool.output_schema,
                "annotations": tool.annotations.model_dump() if tool.annotations else None}
    return hashlib.sha256(json.dumps(reviewed, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def pin(tools: Iterable[types.Tool]) -> dict[str, str]:
    """The definitions as reviewed: name -> digest. Keep it; compare every later ``tools/list``."""
    return {tool.name: definition_digest(tool) for tool in tools}


def changed_tools(pinned: dict[str, str], tools: Iterable[types.Tool]) -> list[str]:
    """The names whose definition is not the pinned one: changed, added, or gone."""
    now = pin(tools)
    return sorted(name for name in pinned.keys() | now.keys() if pinned.get(name) != now.get(name))
