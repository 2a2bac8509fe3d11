"""Tools on the agent's side: a declaration for the model, an implementation for us.

A tool has two halves. The *declaration* (name, description, JSON Schema of the
arguments) is the only part the model ever sees: it is text in the prompt. The
*implementation* is a Python function the model never sees; the agent runs it when the
model asks, if the agent agrees to.

``tool_schema(function)`` writes the declaration from the function's type hints and
Google-style docstring (as the official ``ollama`` client does), through pydantic, so
the schema and the argument check come from the same source. ``call_tool`` validates and
runs one call and returns a typed ``ToolResult`` (ok, or an error of a kind);
``run_tool_calls`` answers every call in an assistant message with a ``tool`` message: the
result, or an error the model can read. A call is never left without an answer.
``search_tools`` offers a request only the tools whose words it shares (tool search, a cost
lever: every declaration offered is read again on every turn, lesson 7).

A tool can also come with its declaration already written, by someone else: an MCP server
lists its tools as name, description and JSON Schema (lesson 12). ``DeclaredTool`` keeps that
declaration as given and checks arguments against its schema (``jsonschema``) instead of a
Python signature; everything else (the loop, the guards, the spans) treats it like any tool.
A schema written by someone else can be broken; then its calls fail with an error result
the model can read, and the loop goes on.

OpenAI's ``"strict": true`` takes only a subset of JSON Schema, with every property required
and no others allowed; ``strict_problems`` says what keeps a declaration out of it (lesson 3).
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections import deque
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import Field, ValidationError, create_model
from referencing import Registry

from course_lib.messages import ErrorKind, ToolResult, describe_errors
from course_lib.validation import parameters_schema

ToolFunction = Callable[..., Any]


class BrokenSchema(ValueError):
    """A declared schema that cannot check anything: not valid JSON Schema, a ``$ref`` to nowhere,
    a pattern Python cannot compile, nested too deep. The tool's fault, not the arguments'."""


class DeclaredTool:
    """A tool whose declaration was written elsewhere (an MCP server's ``tools/list``), and whose
    implementation is ``run(arguments)``: a call to that server, say. ``server`` names where it
    came from (as the client names that server): two servers can each have a ``refund_order``.

    It is called like a function (``tool(sku="SKU-00042")``), and ``inspect.signature`` shows the
    schema's properties as keyword arguments, so code written for Python tools works unchanged."""

    def __init__(self, declaration: dict[str, Any], run: Callable[[dict[str, Any]], Any],
                 server: str | None = None) -> None:
        self.declaration = copy.deepcopy(declaration)
        self.run = run
        self.server = server
        self.__name__ = declaration["function"]["name"]
        self.__doc__ = declaration["function"].get("description", "")
        properties = self.parameters.get("properties") if isinstance(self.parameters, dict) else None
        names = properties if isinstance(properties, dict) else {}
        self.__signature__ = inspect.Signature([inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY)
                                                for name in names if isinstance(name, str) and name.isidentifier()])

    @property
    def parameters(self) -> dict[str, Any]:
        return self.declaration["function"].get("parameters") or {"type": "object", "properties": {}}

    def check(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments, if they satisfy the declared schema; else ``ValueError`` naming every problem,
        or ``BrokenSchema`` if the schema itself cannot check anything. A ``$ref`` is looked up
        inside the schema only: a declaration cannot make the client fetch an address."""
        import jsonschema  # here, not at the top: importing it takes most of a second (its format checkers)

        try:
            jsonschema.Draft202012Validator.check_schema(self.parameters)
            validator = jsonschema.Draft202012Validator(self.parameters, registry=Registry())
            problems = sorted(validator.iter_errors(arguments),  # paths mix names and indexes
                              key=lambda error: [(isinstance(part, str), part) for part in error.path])
        except Exception as error:  # a broken schema raises anything from SchemaError to RecursionError
            raise BrokenSchema(f"its declared schema is broken ({type(error).__name__})") from error
        if problems:
            raise ValueError("; ".join(f"{'.'.join(map(str, e.path)) or 'arguments'}: {e.message}" for e in problems))
        return dict(arguments)

    def __call__(self, **arguments: Any) -> Any:
        return self.run(arguments)

    def __repr__(self) -> str:
        return f"DeclaredTool({self.__name__!r})"


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary and the per-argument descriptions of a Google-style docstring."""
    summary_part, _, args_part = (doc or "").partition("Args:")
    args_part = re.split(r"\n\s*(Returns|Raises|Yields|Examples?):", args_part)[0]
    descriptions, current = {}, None
    for line in args_part.splitlines():
        match = re.match(r"\s*(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)", line)
        if match:
            current = match.group(1)
            descriptions[current] = match.group(2).strip()
        elif current and line.strip():
            descriptions[current] += " " + line.strip()
    return " ".join(summary_part.split()), descriptions


def arguments_model(function: ToolFunction):
    """A pydantic model of the function's parameters; unknown arguments are rejected."""
    _, descriptions = parse_docstring(inspect.getdoc(function) or "")
    hints = get_type_hints(function, include_extras=True)  # resolves string annotations too
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        annotation = hints.get(name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (annotation, Field(default, description=descriptions.get(name)))
    return create_model(f"{function.__name__}_arguments", __config__={"extra": "forbid"}, **fields)


def tool_schema(function: ToolFunction) -> dict[str, Any]:
    """The declaration the model sees, in Ollama's (and OpenAI's) ``tools`` format."""
    if isinstance(function, DeclaredTool):
        return copy.deepcopy(function.declaration)
    summary, _ = parse_docstring(inspect.getdoc(function) or "")
    return {"type": "function", "function": {"name": function.__name__, "description": summary,
                                             "parameters": parameters_schema(arguments_model(function))}}


# English words too common to say which tool a request needs
FUNCTION_WORDS = frozenset("a an and are as at be by can do does for from has have how i in is it me my of on or "
                           "the this to was what when which who with you your".split())


def words_in(text: str) -> set[str]:
    """The lower-case words of ``text`` (letters and digits; ``send_email`` is two words, ``e-mail``
    two), without function words."""
    return set(re.findall(r"[a-z0-9]+", text.lower())) - FUNCTION_WORDS


def search_tools(request: str, tools: dict[str, ToolFunction], limit: int = 2) -> dict[str, ToolFunction]:
    """Tool search: offer a request only the tools it seems to need. Each tool scores the words
    its name and description share with the request; the ``limit`` best with a score of at least
    one are offered, in their order in ``tools``. When no tool shares a word, every tool is
    offered: a search that finds nothing costs tokens, not the answer."""
    asked = words_in(request)
    scores = {}
    for name, tool in tools.items():
        declared = tool_schema(tool)["function"]
        scores[name] = len(asked & words_in(f"{declared['name']} {declared.get('description', '')}"))
    best = sorted((name for name in tools if scores[name]), key=lambda name: -scores[name])[:limit]
    return {name: tool for name, tool in tools.items() if name in best} if best else dict(tools)


def canonical_arguments(arguments: dict[str, Any]) -> str:
    """The arguments as JSON with sorted keys: the same call gives the same text, whatever
    the key order. Repeat detection, idempotency keys and trace hashes are all built on it."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def call_tool(name: str, arguments: dict[str, Any], tools: dict[str, ToolFunction]) -> ToolResult:
    """Validate one call, then run it: the tool's result, or an error of the kind that happened."""
    checked = validate_call(name, arguments, tools)
    if isinstance(checked, ToolResult):
        return checked
    try:
        return result_of(tools[name](**checked))
    except Exception as error:  # the model reads this and can try something else
        return ToolResult.failure(ErrorKind.TOOL_FAILED, f"{name} failed: {error}")


def result_of(value: Any) -> ToolResult:
    """A tool's return value as a ``ToolResult``: as it is if it is one already (an MCP call's
    result says itself whether it failed), else ok, as text."""
    return value if isinstance(value, ToolResult) else ToolResult(as_text(value))


def run_tool_call(name: str, arguments: dict[str, Any], tools: dict[str, ToolFunction]) -> str:
    """Run one call and return what goes back to the model: the result or a readable error."""
    return call_tool(name, arguments, tools).text


def validate_call(name: str, arguments: dict[str, Any], tools: dict[str, ToolFunction]) -> dict[str, Any] | ToolResult:
    """The arguments as the tool will receive them (checked and normalised by its types),
    or the error for the model when the tool or the arguments are wrong."""
    if name not in tools:
        return ToolResult.failure(ErrorKind.UNKNOWN_TOOL,
                                  f"there is no tool named {name!r}; the tools are: {', '.join(sorted(tools))}")
    tool = tools[name]
    if isinstance(tool, DeclaredTool):
        try:
            return tool.check(arguments)
        except BrokenSchema as error:
            return ToolResult.failure(ErrorKind.TOOL_FAILED, f"{name} cannot be called: {error}")
        except ValueError as error:
            return ToolResult.failure(ErrorKind.INVALID_ARGUMENTS, f"invalid arguments for {name}: {error}")
    try:
        return dict(arguments_model(tool).model_validate(arguments))
    except ValidationError as error:
        return ToolResult.failure(ErrorKind.INVALID_ARGUMENTS,
                                  f"invalid arguments for {name}: {describe_errors(error)}")


def as_text(result: Any) -> str:
    """A tool's return value as the text the model reads (JSON unless it is text already)."""
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def run_tool_calls(message: dict[str, Any], tools: dict[str, ToolFunction]) -> list[dict[str, Any]]:
    """One ``tool`` message per call in an assistant ``message``, in order."""
    return [{"role": "tool", "tool_name": call["function"]["name"],
             "content": run_tool_call(call["function"]["name"], call["function"].get("arguments") or {}, tools)}
            for call in message.get("tool_calls") or []]


# --- OpenAI's strict mode: what a declaration must look like --------------------------------

STRICT_TYPES = {"string", "number", "boolean", "integer", "object", "array", "null"}
STRICT_REFUSED = ("allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas")
STRICT_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
STRICT_MAX_DEPTH = 10  # objects nested in objects
STRICT_MAX_PROPERTIES = 5_000  # in the whole schema
STRICT_MAX_ENUM_VALUES = 1_000  # in the whole schema
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")  # keywords that hold a name -> schema map
SUBSCHEMA_LISTS = ("anyOf",)  # keywords that hold a list of schemas


def strict_problems(schema: dict[str, Any]) -> list[str]:
    """What keeps ``schema`` (a tool's ``parameters``) from being sent with ``"strict": true``
    to OpenAI, one sentence per problem with where it is; an empty list if nothing does.

    Strict mode makes the provider constrain decoding to the schema, so the arguments always
    parse and fit. It takes a subset of JSON Schema (OpenAI's "Structured Outputs, supported
    schemas"), checked here:

    - the root is an object (not an ``anyOf``);
    - every object lists **all** its properties in ``required`` and says
      ``"additionalProperties": false``; an optional field is a union with null,
      ``"type": ["string", "null"]``, still required;
    - types are string, number, boolean, integer, object, array, null; ``anyOf`` is allowed
      inside, ``allOf``, ``not``, ``if``/``then``/``else``, ``dependentRequired`` and
      ``dependentSchemas`` are not; a string ``format`` is one of ``STRICT_FORMATS``;
    - at most 10 levels of nested objects, 5,000 properties and 1,000 enum values in all.

    The walk keeps a queue, not recursion, so a schema of any depth gets an answer; problems
    come in the order the schema's parts are reached, outermost first.
    """
    if not isinstance(schema, dict):
        raise TypeError(f"a JSON schema is an object (a dict), not {type(schema).__name__}")
    problems: list[str] = []
    if schema.get("type") != "object" or "anyOf" in schema:
        problems.append("(root): must be {\"type\": \"object\", ...}, not an anyOf or another type")
    properties_seen = enum_values = 0
    queue: deque[tuple[str, Any, int]] = deque([("", schema, 0)])  # (where, schema, objects above it)
    while queue:
        where, node, depth = queue.popleft()
        place = where or "(root)"
        if not isinstance(node, dict):
            problems.append(f"{place}: a schema must be an object, not {type(node).__name__}")
            continue
        problems += [f"{place}: {keyword} is not supported in strict mode" for keyword in STRICT_REFUSED
                     if keyword in node]
        types = node.get("type", [])
        for kind in types if isinstance(types, list) else [types]:
            if kind not in STRICT_TYPES:
                problems.append(f"{place}: type {kind!r} is not one of {', '.join(sorted(STRICT_TYPES))}")
        if "format" in node and node["format"] not in STRICT_FORMATS:
            problems.append(f"{place}: format {node['format']!r} is not one of {', '.join(sorted(STRICT_FORMATS))}")
        if isinstance(node.get("enum"), list):
            enum_values += len(node["enum"])
        is_object = "object" in (types if isinstance(types, list) else [types]) or "properties" in node
        if is_object:
            depth += 1
            problems += _strict_object_problems(place, node, depth)
            properties_seen += len(node["properties"]) if isinstance(node.get("properties"), dict) else 0
        for keyword in SUBSCHEMA_MAPS:
            children = node.get(keyword)
            if isinstance(children, dict):
                queue += [(f"{where}.{keyword}.{name}".lstrip("."), child, depth) for name, child in children.items()]
            elif children is not None:
                problems.append(f"{place}: {keyword} must map names to schemas")
        for keyword in SUBSCHEMA_LISTS:
            children = node.get(keyword)
            if isinstance(children, list):
                queue += [(f"{where}.{keyword}[{i}]".lstrip("."), child, depth) for i, child in enumerate(children)]
            elif children is not None:
                problems.append(f"{place}: {keyword} must be a list of schemas")
        if "items" in node:
            queue.append((f"{where}.items".lstrip("."), node["items"], depth))
    if properties_seen > STRICT_MAX_PROPERTIES:
        problems.append(f"(whole schema): {properties_seen} properties, more than {STRICT_MAX_PROPERTIES}")
    if enum_values > STRICT_MAX_ENUM_VALUES:
        problems.append(f"(whole schema): {enum_values} enum values, more than {STRICT_MAX_ENUM_VALUES}")
    return problems


def _strict_object_problems(place: str, node: dict[str, Any], depth: int) -> list[str]:
    """The strict rules for one object schema: all properties required, no others allowed, not too deep."""
    problems = []
    if depth > STRICT_MAX_DEPTH:
        problems.append(f"{place}: objects nested {depth} deep, more than {STRICT_MAX_DEPTH}")
    if node.get("additionalProperties") is not False:
        problems.append(f"{place}: needs \"additionalProperties\": false")
    properties = node.get("properties") or {}
    required = node.get("required") or []
    if isinstance(properties, dict) and isinstance(required, list):
        problems += [f"{place}: {name!r} is not in required (strict mode requires every property; "
                     f"an optional one is a union with null, still required)"
                     for name in properties if name not in required]
    return problems
