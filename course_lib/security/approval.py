"""A human approval panel for parked side effects (ipywidgets).

An :class:`~course_lib.security.defenses.ApprovalGate` whose reviewer answers ``None``
parks each side effect in ``gate.pending`` and tells the model it has not happened. This
panel shows the parked calls with the user's request; **Approve** runs the call, **Deny**
drops it. Nothing runs until a person clicks. Every text is escaped: the arguments may
hold an attacker's words, and a panel must not render them as HTML.
"""

from __future__ import annotations

import html
import json

import ipywidgets as widgets

from ..tools import ToolFunction, run_tool_call
from .bench import known_arguments
from .defenses import ApprovalGate


def approval_panel(gate: ApprovalGate, tools: dict[str, ToolFunction], request: str) -> widgets.VBox:
    """One row per parked call: what the user asked, what the agent wants to do, two buttons."""
    rows: list[widgets.Widget] = [widgets.HTML(f"<b>The user asked:</b> {html.escape(request)}")]
    for name, arguments in list(gate.pending):
        status = widgets.Label("waiting")
        approve, deny = widgets.Button(description="Approve", button_style="success"), \
            widgets.Button(description="Deny", button_style="danger")

        def decide(approved: bool, name: str = name, arguments: dict = arguments, status: widgets.Label = status,
                   buttons: tuple = (approve, deny)) -> None:
            gate.pending.remove((name, arguments))
            if approved:  # arguments the tool does not take are dropped, as in the agent's executor
                status.value = f"approved: {run_tool_call(name, known_arguments(tools.get(name), arguments), tools)}"
            else:
                status.value = "denied: not done"
            for button in buttons:
                button.disabled = True

        approve.on_click(lambda _, decide=decide: decide(True))
        deny.on_click(lambda _, decide=decide: decide(False))
        call = widgets.HTML(f"<code>{html.escape(name)}({html.escape(json.dumps(arguments, ensure_ascii=False))})</code>")
        rows.append(widgets.HBox([call, approve, deny, status]))
    return widgets.VBox(rows)
