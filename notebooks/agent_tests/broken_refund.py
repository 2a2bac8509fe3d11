"""A deliberately broken refund, loaded as a pytest plugin, to see the tests catch it::

    python -m pytest -p agent_tests.broken_refund agent_tests/test_refunds.py

Loaded as a pytest plugin (``-p``), this module swaps the shop's ``refund`` for a copy of it
with the bug lesson 6 measured: the idempotency key is made, used for the agent's own store
and promised to ``with_retries``, but never sent to the payment service. Every ordinary run
looks right; only a lost answer shows it, when the retry pays a second time. The test files
do not change: only the code under test does.
"""

import pytest

from course_lib.kiosk import Kiosk
from course_lib.reliability import idempotency_key, with_retries


def refund_without_the_key(self: Kiosk, order_id: str, amount_jpy: int) -> dict:
    """``Kiosk.refund``, the same but for one argument."""
    if isinstance(amount_jpy, bool) or not isinstance(amount_jpy, int):
        raise TypeError("amount_jpy must be a whole number of yen")
    if order_id not in self.orders:
        raise LookupError(f"there is no order {order_id}")
    if not 0 < amount_jpy <= self.orders[order_id]["paid_jpy"]:
        raise ValueError(f"amount_jpy must be between 1 and {self.orders[order_id]['paid_jpy']} (what was paid)")
    key = idempotency_key("refund_order", {}, business_key=order_id)
    done = self.refunded.run(key, lambda: with_retries(lambda: self.payments.refund(order_id, amount_jpy),  # no key
                                                       sleep=lambda seconds: None, idempotency_key=key))
    if done["amount_jpy"] != amount_jpy:
        raise ValueError(f"order {order_id} was already refunded {done['amount_jpy']} JPY; "
                         f"a refund of {amount_jpy} JPY is a different request")
    return done


@pytest.fixture(autouse=True)
def broken_refund(monkeypatch):
    """Every test runs against the broken refund."""
    monkeypatch.setattr(Kiosk, "refund", refund_without_the_key)
