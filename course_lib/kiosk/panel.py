"""The capstone's chat panel: ask the agent, see its answer and what it did, approve refunds."""

from __future__ import annotations

import json
from typing import Any

from course_lib.kiosk.agent import KioskAgent

SEND, WORKING = "Send", "Answering..."


def chat_panel(agent: KioskAgent):
    """An ipywidgets chat with the agent. Refunds wait for a click: the panel's agent parks them
    (its reviewer says "later") and shows an approval row for each, beside the request it came
    from (``display.approval``). Everything shown is escaped, hidden characters included.

    For the keyboard: the question box has a visible label, Tab goes from it to Send and then
    to the approval rows, and focus comes back to the box after each answer. While the agent
    works, the Send button says so in words and is greyed out."""
    import ipywidgets as widgets

    from course_lib.display import approval_panel, shown

    agent.gate.reviewer = lambda run, name, arguments: None
    log, pending = widgets.HTML(), widgets.VBox()
    box = widgets.Text(description="Your question", placeholder="e.g. Is SKU-00042 in stock in Tokyo?",
                       style={"description_width": "initial"}, layout={"width": "70%"})
    send = widgets.Button(description=SEND, button_style="primary", tooltip="Send your question to the kiosk")

    def on_send(_: Any) -> None:
        request, box.value = box.value.strip(), ""
        if not request:
            return
        send.disabled, send.description = True, WORKING
        try:
            reply = agent.ask(request)
        finally:
            send.disabled, send.description = False, SEND
            box.focus()
        calls = ", ".join(f"{name}({json.dumps(arguments, ensure_ascii=False)})" for name, arguments in reply.calls)
        log.value += (f"<p style='line-height: 1.4'><b>customer:</b> {shown(request)}<br>"
                      f"<small>tools: {shown(calls or 'none')}; {reply.tokens} tokens, "
                      f"{reply.seconds:.1f} s</small><br>"
                      f"<b>kiosk:</b> {shown(reply.answer or f'(stopped: {reply.stopped_by})')}</p>")
        pending.children = [approval_panel(agent.gate, agent.kiosk.tools(), request)] if agent.gate.pending else []

    send.on_click(on_send)
    return widgets.VBox([log, widgets.HBox([box, send]), pending])
