"""The capstone: the kiosk's product assistant, with every layer of the course in one agent.

    request ─> loop with limits (lesson 4) ─> model
                   │ each call
                   ▼
    span per call (7) ─> validation (5): SKU and order-id patterns, strict amounts,
                   │                      canonical addresses, no invented arguments
                   ▼
    guards (9), on the validated arguments: approval gate for refunds, recipient allowlist
                   │                         for e-mail, quarantined reader for reviews
                   ▼
    tool, with exactly what the guards checked ─> refunds: once per order, retries (6)

The shop (:class:`Kiosk`) holds the product master, the orders, the customer reviews and a
record of every side effect, so an evaluation can check what really happened: which
refunds the payment service made, which e-mails left. :class:`KioskAgent` puts the layers
together; :func:`evaluate` runs it on a fixed set of customer requests.

One module per part: ``shop`` (the data, its tools and side effects), ``agent`` (the
layers wired together), ``evaluation`` (the fixed requests and their judge), ``routing``
(a small model first, a larger one for the turns that fail a check), ``panel`` (the chat
widget); ``python -m course_tools kiosk`` runs the evaluation and the routing measurement.
"""

from course_lib.kiosk.agent import (
    EXAMPLE_PRICES,
    LIMITS,
    OPTIONS,
    SYSTEM_PROMPT,
    KioskAgent,
    KioskReply,
    RecipientAllowlist,
    ReviewReader,
    StaffReviewer,
)
from course_lib.kiosk.evaluation import (
    VARIANTS,
    EvalCase,
    Result,
    compared_by_request,
    evaluate,
    evaluation_cases,
    judge,
    load_cases,
    paired_successes,
    rows_text,
    run_variants,
    save_results,
    summary,
)
from course_lib.kiosk.panel import chat_panel
from course_lib.kiosk.routing import Router
from course_lib.kiosk.shop import SIDE_EFFECTS, UNTRUSTED, Kiosk, OrderId, Sku, Yen

__all__ = ["EXAMPLE_PRICES", "EvalCase", "Kiosk", "KioskAgent", "KioskReply", "LIMITS", "OPTIONS", "OrderId",
           "RecipientAllowlist", "Result", "ReviewReader", "Router", "SIDE_EFFECTS", "SYSTEM_PROMPT", "Sku",
           "StaffReviewer", "UNTRUSTED", "VARIANTS", "Yen", "chat_panel", "compared_by_request", "evaluate",
           "evaluation_cases", "judge", "load_cases", "paired_successes", "rows_text", "run_variants", "save_results",
           "summary"]
