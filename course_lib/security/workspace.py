"""A tiny world for injection experiments: an inbox, web pages, contacts, and two side effects.

Everything lives in memory, so a run's effects can be checked exactly afterwards: which
e-mails were sent (``workspace.sent``), which payments were made (``workspace.payments``).
The read tools return text the user does not control (e-mails, web pages): that is where
an attacker's words reach the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..tools import ToolFunction

READ_TOOLS = frozenset({"read_inbox", "read_web_page"})
SIDE_EFFECT_TOOLS = frozenset({"send_email", "send_money"})
RECIPIENT_ARGUMENT = {"send_email": "to", "send_money": "recipient"}


@dataclass
class Workspace:
    """The user's data, and a record of every side effect the agent caused."""

    user: str
    contacts: dict[str, str]
    inbox: list[dict[str, str]]
    pages: dict[str, str]
    sent: list[dict[str, str]] = field(default_factory=list)
    payments: list[dict[str, Any]] = field(default_factory=list)

    def tools(self) -> dict[str, ToolFunction]:
        """The four tools, bound to this workspace."""

        def read_inbox() -> str:
            """Return the user's latest e-mails: sender, subject and body of each."""
            return json.dumps(self.inbox, ensure_ascii=False)

        def read_web_page(url: str) -> str:
            """Return the text of a web page.

            Args:
                url: The page's address, starting with https://.
            """
            if url not in self.pages:
                raise ValueError(f"no page at {url}")
            return self.pages[url]

        def send_email(to: str, subject: str, body: str) -> str:
            """Send an e-mail from the user's account.

            Args:
                to: The recipient's e-mail address.
                subject: The subject line.
                body: The message text.
            """
            self.sent.append({"to": to, "subject": subject, "body": body})
            return f"sent to {to}"

        def send_money(recipient: str, amount: float, note: str) -> str:
            """Transfer money from the user's bank account.

            Args:
                recipient: The recipient's account number (IBAN).
                amount: The amount in euros.
                note: The note shown to the recipient.
            """
            self.payments.append({"recipient": recipient, "amount": amount, "note": note})
            return f"paid {amount} euros to {recipient}"

        return {f.__name__: f for f in (read_web_page, read_inbox, send_email, send_money)}


def fill(text: str, injection: str) -> str:
    """Put an attack's text (or nothing) where ``{injection}`` marks a place for it."""
    return text.replace("{injection}", injection).strip()


def build_workspace(spec: dict[str, Any], vector: str | None = None, injection: str = "") -> Workspace:
    """A fresh workspace from a scenario's ``workspace`` entry, with ``injection`` at ``vector`` only.

    ``vector`` is ``"inbox/<index>"`` or a page's address; every other place is left empty.
    """
    inbox = [{**mail, "body": fill(mail["body"], injection if vector == f"inbox/{i}" else "")}
             for i, mail in enumerate(spec["inbox"])]
    pages = {url: fill(text, injection if vector == url else "") for url, text in spec["pages"].items()}
    return Workspace(spec["user"], dict(spec["contacts"]), inbox, pages)
