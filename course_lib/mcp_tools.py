"""Tools from an MCP server, in the course's terms: the mapping, the results, and the trust.

An MCP server lists its tools (``tools/list``): a ``name``, a ``description``, an
``input_schema`` (a JSON Schema object), maybe an ``output_schema`` and ``annotations``
(hints such as ``read_only_hint``). A model that calls tools through Ollama, OpenAI or
Anthropic needs them as that API's ``tools``. The mapping is small, and the one thing to
get right is to keep the schema whole: ``required``, ``additionalProperties`` and nested
objects. A copy that drops ``required`` lets the model leave arguments out.

A call's result comes back as content blocks, maybe ``structured_content``, and an
``is_error`` flag; ``tool_result`` turns it into the course's ``ToolResult``, the text a
model reads.

Annotations are hints written by the server. A client that does not control the server
must not let a server's ``read_only_hint`` decide that a refund needs no approval:
``needs_approval`` applies the client's own list first. ``pin`` and ``changed_tools``
catch a server whose tool definitions change after they were reviewed, and
``with_reviewed_descriptions`` gives the model the client's reviewed copy of each definition
instead of what the server lists now: descriptions, titles, defaults and every other word of
the schema, at every depth.

A tool is known by its server *and* its name (``ToolId``). A client names each server it
talks to (``McpSession(..., name=...)``); a read-only exemption is given to one server's tool,
and ``all_tools`` refuses to offer two tools of one name, since the model calls them by name
only: a second server's ``get_product_stock`` must not take the place, or the exemption, of
the first's.

The SDK is asynchronous; the course's loop is not. ``McpSession`` keeps a client session in an
event loop on a background thread and answers each call when it is done, so an MCP server's
tools become ``DeclaredTool``s that the loop, the guards and the spans use like any other.
``recorded`` keeps every JSON-RPC message a transport carries, as it was serialised.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from functools import partial
from typing import Annotated, Any, TextIO, get_type_hints

import anyio
from anyio.from_thread import start_blocking_portal
from mcp import Client, StdioServerParameters, types
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.message import SessionMessage
from pydantic import Field

from course_lib.messages import ErrorKind, ToolResult
from course_lib.tools import DeclaredTool, ToolFunction, parse_docstring

ToolId = tuple[str, str]  # (server, tool name), the server as the client names it


class DuplicateTool(ValueError):
    """Two tools of one name: the model could not tell them apart, so neither is offered."""


def ollama_tool(tool: types.Tool) -> dict[str, Any]:
    """The tool in Ollama's (and OpenAI's) ``tools`` format, its input schema kept whole."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                             "parameters": copy.deepcopy(tool.input_schema)}}


def anthropic_tool(tool: types.Tool) -> dict[str, Any]:
    """The tool in Anthropic's ``tools`` format: no ``function`` wrapper, ``input_schema`` as is."""
    return {"name": tool.name, "description": tool.description or "", "input_schema": copy.deepcopy(tool.input_schema)}


def tool_result(result: types.CallToolResult) -> ToolResult:
    """An MCP call's result as a ``ToolResult``: the text blocks joined, which is what the server
    wrote for a reader of text (the specification asks a server that returns structured content to
    put its JSON in a text block too); the structured content as JSON only if there is no text.
    A text that is JSON is made compact, the same data in fewer tokens. ``is_error`` makes it a
    failure of the tool.

    Why not prefer ``structured_content``: for a function that returns a string, the SDK wraps it
    as ``{"result": "..."}``, and the model would read its own text escaped inside JSON."""
    text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    text = compact(text)
    return ToolResult.failure(ErrorKind.TOOL_FAILED, text) if result.is_error else ToolResult(text)


def compact(text: str) -> str:
    """``text`` as compact JSON if it is a JSON object or array, else as it is."""
    if not text.lstrip().startswith(("{", "[")):
        return text
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return text


def needs_approval(tool: types.Tool, read_only: Iterable[str | ToolId], trust_annotations: bool = False,
                   server: str | None = None) -> bool:
    """Whether a call of ``tool`` must wait for a person. The client's own ``read_only`` list
    decides first; a server's annotations count only when the client trusts that server, and
    then only a tool marked read-only and not destructive goes without approval.

    With ``server`` (the tool's server, as the client names it) only a ``(server, name)`` entry
    exempts the tool: another server's tool of the same name is not the one that was reviewed.
    A bare name stands for the tool of a client that talks to one server only."""
    if (tool.name if server is None else (server, tool.name)) in set(read_only):
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


def reviewed_definitions(tools: Iterable[types.Tool]) -> dict[str, types.Tool]:
    """A person's review of a listing, to keep: each tool's whole definition, by name (copies)."""
    return {tool.name: tool.model_copy(deep=True) for tool in tools}


def with_reviewed_descriptions(tools: Iterable[types.Tool],
                               reviewed: Mapping[str, str | types.Tool]) -> list[types.Tool]:
    """The tools whose names the client has reviewed, each as reviewed; a tool nobody reviewed is
    left out. What the server writes now never reaches the model:

    - a reviewed definition (a ``types.Tool``, as ``reviewed_definitions`` keeps it) replaces the
      server's whole definition: description, title, input and output schemas, annotations;
    - a reviewed description (a string) replaces the description, and the server's schemas are
      cut down to what checks values (``schema_structure``): no description, title, default,
      example or key of the server's own, at any depth. The names of properties, enum values and
      patterns are still the server's words: review the whole definition to cover them too.

    The tool keeps its listed name: that is what a call is sent to."""
    kept = []
    for tool in tools:
        copy_of = reviewed.get(tool.name)
        if isinstance(copy_of, types.Tool):
            kept.append(copy_of.model_copy(update={"name": tool.name}, deep=True))
        elif isinstance(copy_of, str):
            kept.append(types.Tool(name=tool.name, description=copy_of,
                                   input_schema=schema_structure(tool.input_schema),
                                   output_schema=schema_structure(tool.output_schema) if tool.output_schema else None,
                                   annotations=tool.annotations))
    return kept


# What checks a value in a JSON Schema. Everything else in it (description, title, default,
# examples, $comment, any key a server makes up) is text for a reader: the model reads it.
CHECKS = frozenset({"type", "enum", "const", "pattern", "required", "minimum", "maximum", "exclusiveMinimum",
                    "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems",
                    "minProperties", "maxProperties", "dependentRequired", "$ref"})
FORMATS = frozenset({"date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uuid"})
ONE_SCHEMA = frozenset({"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
                        "unevaluatedProperties", "unevaluatedItems"})
LIST_OF_SCHEMAS = frozenset({"prefixItems", "anyOf", "oneOf", "allOf"})
SCHEMA_BY_NAME = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def schema_structure(schema: Any) -> Any:
    """``schema`` with only the keywords that check values (``CHECKS``, and a standard ``format``),
    at every depth: nested objects, items, ``anyOf`` branches, ``$defs``."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        return {}
    kept: dict[str, Any] = {}
    for key, value in schema.items():
        if key in CHECKS or key == "format" and value in FORMATS:
            kept[key] = copy.deepcopy(value)
        elif key in ONE_SCHEMA:
            kept[key] = schema_structure(value)
        elif key in LIST_OF_SCHEMAS and isinstance(value, list):
            kept[key] = [schema_structure(item) for item in value]
        elif key in SCHEMA_BY_NAME and isinstance(value, dict):
            kept[key] = {name: schema_structure(item) for name, item in value.items()}
    return kept


def without_changed(pinned: dict[str, str], tools: Iterable[types.Tool]) -> list[types.Tool]:
    """The tools whose definition is still the pinned one; a changed or new tool is left out."""
    tools = list(tools)
    changed = set(changed_tools(pinned, tools))
    return [tool for tool in tools if tool.name not in changed]


class McpSession:
    """An MCP client session for ordinary (synchronous) code, such as the course's loop.

        with McpSession(server) as session:       # an MCPServer, StdioServerParameters, a URL...
            listed = session.list_tools()         # tools/list, every page
            tools = session.tools(listed)         # name -> DeclaredTool, for run_agent
            session.call("get_product_stock", {"sku": "SKU-00042"})   # tools/call -> ToolResult

    ``log``, if given, receives every JSON-RPC message that passes (``recorded``); it needs a
    transport with messages, so an in-process server is then connected through memory streams.
    ``mode="legacy"`` speaks the protocol as it was before its 2026-07-28 revision (an
    ``initialize`` handshake) instead of letting the SDK choose.

    ``name`` is the client's name for the server, half of each tool's identity (``ToolId``).
    Without one, the session is named after what the client gave it (an in-process server's
    name, a command line, an address), never after what the server says about itself."""

    def __init__(self, server: Any, log: list[dict[str, Any]] | None = None, mode: str = "auto",
                 name: str | None = None) -> None:
        self.server, self.log, self.mode = server, log, mode
        self.name = name or client_side_name(server)
        self._stack = ExitStack()

    def __enter__(self) -> McpSession:
        self.portal = self._stack.enter_context(start_blocking_portal())
        own_transport = self.log is not None or isinstance(self.server, StdioServerParameters)
        target = transport_for(self.server) if own_transport else self.server
        if self.log is not None:
            target = recorded(target, self.log)
        self.client = self._stack.enter_context(self.portal.wrap_async_context_manager(Client(target, mode=self.mode)))
        return self

    def __exit__(self, *problem: Any) -> None:
        self._stack.close()

    def list_tools(self) -> list[types.Tool]:
        """Every tool the server lists now (following ``next_cursor`` through the pages)."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = self.portal.call(partial(self.client.list_tools, cursor=cursor))
            tools += page.tools
            if not page.next_cursor:
                return tools
            cursor = page.next_cursor

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """``tools/call``: the result as a ``ToolResult``. An MCP error result is a failure, and so is
        an error on the way (a tool the server does not know, an output schema so broken that the
        SDK cannot check the result against it, a lost connection): an error result, not a crash."""
        try:
            result = self.portal.call(self.client.call_tool, name, arguments)
        except Exception as error:  # whatever the server did, the loop gets an answer to give the model
            return ToolResult.failure(ErrorKind.TOOL_FAILED, f"{name} failed: {error}")
        return tool_result(result)

    def tools(self, listed: Iterable[types.Tool]) -> dict[str, DeclaredTool]:
        """The listed tools as the loop's tools: declared as listed, run through this session,
        each knowing its server (``DeclaredTool.server``). A name listed twice is refused."""
        return all_tools(*({tool.name: DeclaredTool(ollama_tool(tool), partial(self.call, tool.name), self.name)}
                           for tool in listed))


def all_tools(*toolsets: dict[str, DeclaredTool]) -> dict[str, DeclaredTool]:
    """The tools of several servers (each one ``session.tools(...)``) as one set for the loop.

    The model calls a tool by its bare name, so two tools of one name cannot both be offered,
    and neither may silently take the other's place: ``DuplicateTool`` names both servers."""
    tools: dict[str, DeclaredTool] = {}
    for toolset in toolsets:
        for name, tool in toolset.items():
            if name in tools:
                raise DuplicateTool(f"two tools are named {name!r} (servers {tools[name].server!r} and "
                                    f"{tool.server!r}); offer one of them only")
            tools[name] = tool
    return tools


def client_side_name(server: Any) -> str:
    """A name for ``server`` from what the client holds: an in-process server's name, a stdio
    server's command line, an address."""
    if isinstance(server, StdioServerParameters):
        return " ".join([server.command, *server.args])
    return str(getattr(server, "name", None) or server)


def transport_for(server: Any) -> AbstractAsyncContextManager[Any]:
    """The transport ``mcp.Client`` would use for ``server``, as a context manager of its own."""
    from mcp.client._memory import InMemoryTransport
    from mcp.client.stdio import stdio_client
    from mcp.server.mcpserver import MCPServer

    if isinstance(server, StdioServerParameters):
        return stdio_client(server, errlog=error_output())
    if isinstance(server, MCPServer):
        return InMemoryTransport(server._lowlevel_server)  # the SDK's own in-memory transport
    raise TypeError(f"recording needs a stdio or in-process server, not {type(server).__name__}")


def error_output() -> TextIO:
    """Where a stdio server's own error output goes: this process's ``stderr`` if it is a real file,
    else the one the process started with (in Jupyter, ``sys.stderr`` writes to the notebook and
    has no file descriptor for a subprocess to inherit)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")  # noqa: SIM115 (kept open for the server's whole life)


@asynccontextmanager
async def recorded(transport: AbstractAsyncContextManager[Any], log: list[dict[str, Any]]) -> AsyncIterator[Any]:
    """``transport``, with every JSON-RPC message it carries appended to ``log`` as
    ``{"direction": "client -> server" or "server -> client", "message": ...}``, the message
    as the stdio transport writes it on its line."""
    async with transport as (read, write):
        yield _Tap(read, log, "server -> client"), _Tap(write, log, "client -> server")


class _Tap:
    """A read or write stream that notes each message before passing it on."""

    def __init__(self, stream: Any, log: list[dict[str, Any]], direction: str) -> None:
        self.stream, self.log, self.direction = stream, log, direction

    def _note(self, item: Any) -> None:
        if isinstance(item, SessionMessage):
            text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
            self.log.append({"direction": self.direction, "message": json.loads(text)})

    async def send(self, item: Any) -> None:
        self._note(item)
        await self.stream.send(item)

    async def receive(self) -> Any:
        item = await self.stream.receive()
        self._note(item)
        return item

    def __aiter__(self) -> _Tap:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> _Tap:
        return self

    async def __aexit__(self, *problem: Any) -> None:
        await self.aclose()


def serveable(tool: ToolFunction) -> ToolFunction:
    """``tool``, ready for ``MCPServer.add_tool``.

    - Each argument's description moves from the docstring's ``Args:`` into its type, where the
      SDK's schema generator looks (it reads types, not Google-style docstrings).
    - An error the tool raises on purpose (a ``ValueError``, ``LookupError`` or ``TypeError``:
      "there is no product SKU-1") becomes the SDK's ``ToolError``, whose message the client
      receives. Any other exception stays a crash, and the SDK sends only "Error executing tool".
    """
    _, descriptions = parse_docstring(tool.__doc__ or "")
    hints = get_type_hints(tool, include_extras=True)
    signature = inspect.signature(tool)
    parameters = [parameter.replace(annotation=Annotated[hints[parameter.name],
                                                         Field(description=descriptions.get(parameter.name))])
                  for parameter in signature.parameters.values()]

    @functools.wraps(tool)
    def call(**arguments: Any) -> Any:
        try:
            return tool(**arguments)
        except (ValueError, LookupError, TypeError) as error:
            raise ToolError(str(error)) from error
    call.__signature__ = signature.replace(parameters=parameters,  # type: ignore[attr-defined]
                                           return_annotation=hints.get("return", signature.return_annotation))
    return call
