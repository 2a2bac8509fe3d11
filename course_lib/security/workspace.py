"""A tiny world for injection experiments: an inbox, web pages, contacts, and two side effects.

Everything lives in memory, so a run's effects can be checked exactly afterwards: which
e-mails were sent (``workspace.sent``), which payments were made (``workspace.payments``).
The read tools return text the user does not control (e-mails, web pages): that is where
an attacker's words reach the model.

The argument types say what a recipient and an amount are. Validation turns a recipient
into its one canonical form (``email_address``, ``iban``) before any guard sees it, and
the tool receives that same string: a guard that compares a cleaned-up copy while the
tool sends the original is a guard an attacker can walk around.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from course_lib.tools import ToolFunction

READ_TOOLS = frozenset({"read_inbox", "read_web_page"})
SIDE_EFFECT_TOOLS = frozenset({"send_email", "send_money"})
RECIPIENT_ARGUMENT = {"send_email": "to", "send_money": "recipient"}

EMAIL = re.compile(r"[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)+")
IBAN = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}")
# How long an IBAN is in each country (the SWIFT IBAN registry): "DE" is always 22 characters.
IBAN_LENGTHS = {entry[:2]: int(entry[2:]) for entry in (
    "AD24 AE23 AL28 AT20 AZ28 BA20 BE16 BG22 BH22 BR29 BY28 CH21 CR22 CY28 CZ24 DE22 DK18 DO28 EE20 EG29 "
    "ES24 FI18 FO18 FR27 GB22 GE22 GI23 GL18 GR27 GT28 HR21 HU28 IE22 IL23 IQ23 IS26 IT27 JO30 KW30 KZ20 "
    "LB28 LC32 LI21 LT20 LU20 LV21 LY25 MC27 MD24 ME22 MK19 MR27 MT31 MU30 NL18 NO15 PK24 PL28 PS29 PT25 "
    "QA29 RO24 RS22 SA24 SC31 SE24 SI19 SK24 SM27 ST25 SV28 TL23 TN24 TR26 UA29 VA22 VG24 XK20").split()}


def email_address(text: str) -> str:
    """An e-mail address in its canonical form: NFKC, no surrounding spaces, lower case.

    NFKC first, so that look-alikes with a plain ASCII meaning become that ASCII (a
    full-width ＠, the Kelvin sign K). Whatever is still not plain ASCII afterwards (a
    zero-width space, a right-to-left mark, a Cyrillic і) is refused, not cleaned: the
    address a person reads must be the address that is used. Lower case throughout: the
    course treats addresses as case-insensitive, as mail providers do in practice.
    """
    address = unicodedata.normalize("NFKC", text).strip()
    if not address.isascii() or not EMAIL.fullmatch(address.lower()):
        raise ValueError("must be one plain e-mail address, such as ken@example.com")
    return address.lower()


def iban(text: str) -> str:
    """An account number (IBAN) in its canonical form: NFKC, no spaces, upper case.

    Only the format is checked (country letters, two check digits, 11 to 30 letters or
    digits, and the country's own length where the registry knows the country), not the
    checksum: the lesson's attacker uses a made-up account.
    """
    number = unicodedata.normalize("NFKC", text).replace(" ", "")
    if not number.isascii() or not IBAN.fullmatch(number.upper()):  # ASCII first: "ı".upper() is a plain I
        raise ValueError("must be an IBAN: two letters, two digits, then 11 to 30 letters or digits")
    number = number.upper()
    if len(number) != IBAN_LENGTHS.get(number[:2], len(number)):
        raise ValueError(f"must be an IBAN: one from {number[:2]} has {IBAN_LENGTHS[number[:2]]} characters")
    return number


def canonical_recipient(text: Any) -> str | None:
    """An e-mail address or IBAN in the form validation gives it, or None if it is neither."""
    try:
        return email_address(str(text)) if "@" in str(text) else iban(str(text))
    except ValueError:
        return None


EmailAddress = Annotated[str, AfterValidator(email_address)]
Iban = Annotated[str, AfterValidator(iban)]
Euros = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]  # a number, never "100" or true


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

        def send_email(to: EmailAddress, subject: str, body: str) -> str:
            """Send an e-mail from the user's account.

            Args:
                to: The recipient's e-mail address.
                subject: The subject line.
                body: The message text.
            """
            self.sent.append({"to": to, "subject": subject, "body": body})
            return f"sent to {to}"

        def send_money(recipient: Iban, amount: Euros, note: str) -> str:
            """Transfer money from the user's bank account.

            Args:
                recipient: The recipient's account number (IBAN).
                amount: The amount in euros.
                note: The note shown to the recipient.
            """
            self.payments.append({"recipient": recipient, "amount": amount, "note": note})
            return f"paid {amount} euros to {recipient}"

        return {f.__name__: f for f in (read_web_page, read_inbox, send_email, send_money)}


POSITIONS = ("start", "middle", "end")


def place(text: str, injection: str, position: str = "end") -> str:
    """``text`` with ``injection`` placed at its start, between its middle sentences, or at its end.

    Where an attack sits matters to what survives: a defense that keeps only the beginning
    of a text drops an attack at the end, and looks safer than it is. So attacks are
    placed at all three positions in turn.
    """
    if not injection:
        return text
    if position == "start":
        return f"{injection} {text}"
    if position == "end":
        return f"{text} {injection}"
    if position != "middle":
        raise ValueError(f"position must be one of {POSITIONS}, not {position!r}")
    sentences = re.split(r"(?<=[.!?])\s+", text)
    half = max(1, len(sentences) // 2)
    return " ".join([*sentences[:half], injection, *sentences[half:]])


def build_workspace(spec: dict[str, Any], vector: str | None = None, injection: str = "",
                    position: str = "end") -> Workspace:
    """A fresh workspace from a scenario's ``workspace`` entry, with ``injection`` placed in the
    text at ``vector`` only (``"inbox/<index>"`` or a page's address); every other text is clean."""
    inbox = [{**mail, "body": place(mail["body"], injection, position) if vector == f"inbox/{i}" else mail["body"]}
             for i, mail in enumerate(spec["inbox"])]
    pages = {url: place(text, injection, position) if vector == url else text for url, text in spec["pages"].items()}
    return Workspace(spec["user"], dict(spec["contacts"]), inbox, pages)
