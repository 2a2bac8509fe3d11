"""The capstone's chat panel: ask the agent, see its answer and what it did, approve refunds."""

from __future__ import annotations

import json
from typing import Any

from course_lib.display.words import say
from course_lib.kiosk.agent import KioskAgent


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
    box = widgets.Text(description=say("question"), placeholder=say("example"),
                       style={"description_width": "initial"}, layout={"width": "70%"})
    send = widgets.Button(description=say("send"), button_style="primary", tooltip=say("send tip"))

    def on_send(_: Any) -> None:
        request, box.value = box.value.strip(), ""
        if not request:
            return
        send.disabled, send.description = True, say("working")
        try:
            reply = agent.ask(request)
        finally:
            send.disabled, send.description = False, say("send")
            box.focus()
        calls = ", ".join(f"{name}({json.dumps(arguments, ensure_ascii=False)})" for name, arguments in reply.calls)
        tools = say("tools line", calls=shown(calls or say("none")), tokens=reply.tokens, seconds=reply.seconds)
        answer = reply.answer or say("stopped", reason=reply.stopped_by)
        log.value += (f"<p style='line-height: 1.4'><b>{say('customer')}</b> {shown(request)}<br>"
                      f"<small>{tools}</small><br><b>{say('kiosk')}</b> {shown(answer)}</p>")
        pending.children = [approval_panel(agent.gate, agent.kiosk.tools(), request)] if agent.gate.pending else []

    send.on_click(on_send)
    return widgets.VBox([log, widgets.HBox([box, send]), pending])
