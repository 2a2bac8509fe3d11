"""A human approval panel for parked side effects (ipywidgets), used by lessons 9 and 11.

An :class:`~course_lib.security.defenses.ApprovalGate` whose reviewer answers ``None``
parks each side effect in ``gate.pending`` and tells the model it has not happened. This
panel shows each parked call beside the request it came from, with the arguments as they
will run (validated and normalised); **Approve** runs the call through its run's executor
(validation, every other guard, the span), **Deny** drops it. Nothing runs until a person
clicks, and what runs is what the row shows: the click approves the digest of the arguments
the row displays (``ApprovalGate.approve(call, seen)``), never a dict that changed since.

A person can only judge what they can see. Every text is HTML-escaped (the arguments may
hold an attacker's words, and a panel must not render them as HTML), and every character
that does not show on screen is written as an escape such as ``\\u202e``.

And everyone must be able to use it: the buttons are labelled in words (their colour only
repeats what the words say) and say in a tooltip what they do to which call; the keyboard
reaches them in reading order (each row: Approve, then Deny); the outcome is written out
("approved: ...", "denied: not done"), never shown by colour alone. A decision is taken
once: a second click, even one sent before the buttons were greyed out, changes nothing.
"""

from __future__ import annotations

import html
import json
import unicodedata

import ipywidgets as widgets

from course_lib.display.words import WORDS, say
from course_lib.security.defenses import ApprovalGate, ParkedCall, call_digest
from course_lib.security.executor import guarded_executor
from course_lib.tools import ToolFunction

HIDDEN = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}  # controls, format, private, unassigned, line breaks


def hidden(character: str) -> bool:
    """Whether a character takes no visible place on screen, or changes how others are shown:
    zero-width spaces and joiners, right-to-left marks and overrides, byte-order marks, tag
    characters (all category Cf), control characters, and variation selectors."""
    return (unicodedata.category(character) in HIDDEN
            or unicodedata.name(character, "").startswith("VARIATION SELECTOR"))


def visible(text: str) -> str:
    """``text`` with every hidden character written as its escape, so that ``pay\\u202e0001``
    cannot pass for ``pay 1000``. Letters of every script are left as they are."""
    return "".join(character.encode("unicode_escape").decode() if hidden(character) else character
                   for character in text)


def shown(text: str) -> str:
    """Text as the panel shows it: hidden characters made visible, then HTML-escaped."""
    return html.escape(visible(text))


WAITING = WORDS["en"]["waiting"]  # in English; a Japanese kernel's panel says say("waiting")
ROW = {"flex_flow": "row wrap", "align_items": "center", "grid_gap": "0 0.5em"}  # a narrow window wraps the row


def waiting_html(gate: ApprovalGate) -> str:
    return say("waiting header", count=len(gate.pending))


def decision_buttons(call: ParkedCall) -> tuple[widgets.Button, widgets.Button]:
    """Approve and Deny for one call: named in words, with a tooltip that says what each does to
    which call (screen readers read it too); the colours only repeat the words."""
    approve = widgets.Button(description=say("approve"), button_style="success",
                             tooltip=say("approve tip", name=visible(call.name)))
    deny = widgets.Button(description=say("deny"), button_style="danger",
                          tooltip=say("deny tip", name=visible(call.name)))
    return approve, deny


def approval_panel(gate: ApprovalGate, tools: dict[str, ToolFunction] | None = None,
                   request: str | None = None) -> widgets.VBox:
    """One row per parked call: the request it came from, the call as it will run, two buttons.

    ``request`` is the latest request: a call parked by an earlier one is marked as such.
    ``tools`` is used only for calls parked by hand (``gate.check_call`` outside an executor):
    they run through validation and this gate alone.
    """
    header = widgets.HTML(waiting_html(gate))
    rows: list[widgets.Widget] = [header]
    for call in list(gate.pending):
        status = widgets.HTML(say("waiting"), layout={"flex": "1 1 auto"})  # HTML, so that a long result wraps
        approve, deny = decision_buttons(call)
        arguments = call.arguments  # shown in this row, and the only arguments its Approve can run

        def decide(approved: bool, call: ParkedCall = call, status: widgets.HTML = status,
                   buttons: tuple = (approve, deny), seen: str = call_digest(call.name, arguments)) -> None:
            if not any(waiting is call for waiting in gate.pending):
                return  # decided already: a second click (a double click) changes nothing
            if approved:
                if call.run.execute is None:  # parked by hand, outside any executor: give its run one
                    guarded_executor([gate], call.run, tools or {})
                status.value = say("approved", result=shown(gate.approve(call, seen).text))
            else:
                gate.deny(call)
                status.value = say("denied")
            for button in buttons:
                button.disabled = True
            header.value = waiting_html(gate)

        approve.on_click(lambda _, decide=decide: decide(True))
        deny.on_click(lambda _, decide=decide: decide(False))
        shown_call = widgets.HTML(f'<div style="line-height: 1.4">{parked_call_html(call, request, arguments)}</div>',
                                  layout={"flex": "1 1 24em"})
        rows.append(widgets.HBox([shown_call, approve, deny, status], layout=ROW))
    return widgets.VBox(rows)


def parked_call_html(call: ParkedCall, latest_request: str | None = None,
                     arguments: dict | None = None) -> str:
    """The HTML of one parked call: the request it came from, then the call as it will run
    (``arguments``: the copy of its arguments to show, if the caller holds one)."""
    earlier = say("earlier") if latest_request is not None and call.request != latest_request else ""
    text = json.dumps(call.arguments if arguments is None else arguments, ensure_ascii=False)
    return (f"<b>{say('user asked', earlier=earlier)}</b> {shown(call.request)}<br>"
            f"<code>{shown(call.name)}({shown(text)})</code>")
