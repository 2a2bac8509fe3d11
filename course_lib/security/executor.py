"""The guards wired around the tools: the executor every guarded run uses.

The defenses (``defenses.py``) say yes or no; this module decides *when* each one is asked,
in the order that keeps them honest:

1. validate: invented arguments dropped, the rest checked and normalised (lesson 5);
2. the tool-call guards, on those validated arguments (the first refusal wins), each on its
   own copy: a guard that changes what it was shown changes nothing that runs;
3. the tool, with exactly the arguments the guards checked;
4. the result guards in order, on what the tool returned.

The defense table (``bench``), the approval panel and the capstone's agent all run their
calls through :func:`guarded_executor`.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from course_lib.loop import Executor
from course_lib.messages import ErrorKind, ToolResult
from course_lib.security.defenses import Defense, RunContext
from course_lib.tools import ToolFunction, result_of, validate_call


def guarded_executor(defenses: list[Defense], run: RunContext, tools: dict[str, ToolFunction]) -> Executor:
    """The loop's ``execute``, with ``defenses`` at the tool-call and tool-result positions.

    Any failure goes back to the model as an error result of its kind. Errors this executor
    writes (invalid arguments, a refusal, the tool raised) skip the result guards: they are
    ours, not text from outside. A tool's *return value* always meets them, even if it reads
    "error: ...", because a web page can say that too. The executor is kept on ``run.execute``,
    so that an approved call (``ApprovalGate.approve``) comes back through it.
    """
    def execute(name: str, arguments: dict[str, Any]) -> ToolResult:
        checked = validated(name, arguments, tools)
        if isinstance(checked, ToolResult):
            return checked
        for defense in defenses:
            if reason := defense.check_call(run, name, copy.deepcopy(checked)):
                run.refusals.append((name, checked, reason))
                return ToolResult.failure(ErrorKind.REFUSED, f"refused: {reason}")
        try:
            result = result_of(tools[name](**checked))
        except Exception as error:  # the model reads this and can try something else
            return ToolResult.failure(ErrorKind.TOOL_FAILED, f"{name} failed: {error}")
        for defense in defenses:
            result = defense.filter_result(run, name, result)
            if not result.ok:  # a result guard withheld it: the later ones have nothing to read
                break
        return result
    run.execute = execute
    return execute


def validated(name: str, arguments: Any, tools: dict[str, ToolFunction]) -> dict[str, Any] | ToolResult:
    """The arguments as the tool will receive them (unknown ones dropped, the rest checked and
    normalised by the tool's types), or the error for the model."""
    if name in tools and not isinstance(arguments, dict):
        return ToolResult.failure(ErrorKind.INVALID_ARGUMENTS,
                                  f"invalid arguments for {name}: arguments: must be a JSON object")
    return validate_call(name, known_arguments(tools.get(name), arguments), tools)


def known_arguments(tool: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``tool`` takes, without any others.

    The small model invents arguments for tools that take none (``read_inbox(sender=...)``);
    strict validation (lesson 5) would turn every such call into an error and the lesson
    would measure that instead of injection. Unknown tools are left for the loop to report.
    """
    if tool is None:
        return arguments
    accepted = inspect.signature(tool).parameters
    return {name: value for name, value in arguments.items() if name in accepted}
