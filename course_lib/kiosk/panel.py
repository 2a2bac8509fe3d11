"""The capstone's chat panel: ask the agent, see its answer and what it did, approve refunds."""

from __future__ import annotations

import json
from typing import Any

from .agent import KioskAgent


def chat_panel(agent: KioskAgent):
    """An ipywidgets chat with the agent. Refunds wait for a click: the panel's agent parks them
    (its reviewer says "later") and shows an approval row for each, beside the request it came
    from (``security.approval``). Everything shown is escaped, hidden characters included."""
    import ipywidgets as widgets

    from ..security.approval import approval_panel, shown

    agent.gate.reviewer = lambda run, name, arguments: None
    log, pending = widgets.HTML(), widgets.VBox()
    box = widgets.Text(placeholder="Ask the kiosk, e.g. Is SKU-00042 in stock in Tokyo?", layout={"width": "70%"})
    send = widgets.Button(description="Send", button_style="primary")

    def on_send(_: Any) -> None:
        request, box.value = box.value.strip(), ""
        if not request:
            return
        reply = agent.ask(request)
        calls = ", ".join(f"{name}({json.dumps(arguments, ensure_ascii=False)})" for name, arguments in reply.calls)
        log.value += (f"<p><b>customer:</b> {shown(request)}<br><small>tools: {shown(calls or 'none')}; "
                      f"{reply.tokens} tokens, {reply.seconds:.1f} s</small><br>"
                      f"<b>kiosk:</b> {shown(reply.answer or f'(stopped: {reply.stopped_by})')}</p>")
        pending.children = [approval_panel(agent.gate, agent.kiosk.tools(), request)] if agent.gate.pending else []

    send.on_click(on_send)
    return widgets.VBox([log, widgets.HBox([box, send]), pending])
