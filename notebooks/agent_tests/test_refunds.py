"""Idempotency (lesson 6): a refund happens once per order, whatever fails and however often it is asked for."""

import pytest

from course_lib.kiosk import Kiosk
from course_lib.reliability import FakePaymentService, UnsafeRetry, idempotency_key, with_retries

from . import DATA


def shop_whose_service_fails(*faults) -> Kiosk:
    """The shop, with a payment service whose first requests meet ``faults`` (then all is well)."""
    return Kiosk.load(DATA / "products.json", payments=FakePaymentService(faults=list(faults)))


def test_asking_twice_pays_once(kiosk):
    first = kiosk.refund("ORD-1002", 6500)
    assert kiosk.refund("ORD-1002", 6500) == first
    assert len(kiosk.payments.refunds) == 1 and kiosk.refunded.skipped == 1


@pytest.mark.parametrize("fault", ["lost_answer", "done_then_server_error"])
def test_a_refund_whose_answer_was_lost_is_not_paid_again(fault):
    shop = shop_whose_service_fails(fault)  # the service refunds, then the caller sees a timeout or a 502
    shop.refund("ORD-1002", 6500)
    assert shop.payments.requests == 2, "the failure should have been retried"
    paid = [refund["refund_id"] for refund in shop.payments.refunds]
    assert paid == ["re_0001"], "the retry paid a second time: the service did not recognise it"


def test_another_amount_for_a_refunded_order_is_an_error_not_a_quiet_success(kiosk):
    kiosk.refund("ORD-1002", 6500)
    with pytest.raises(ValueError, match="already refunded 6500 JPY"):
        kiosk.refund("ORD-1002", 3000)


def test_a_rejected_request_is_not_retried():
    shop = shop_whose_service_fails("client_error")
    with pytest.raises(ValueError, match="400"):
        shop.refund("ORD-1002", 6500)
    assert shop.payments.requests == 1


def test_retrying_a_side_effect_without_a_key_is_refused_before_the_first_try():
    service = FakePaymentService()
    with pytest.raises(UnsafeRetry):
        with_retries(lambda: service.refund("ORD-1002", 6500))
    assert service.requests == 0


def test_the_key_names_the_intention_not_the_spelling():
    assert idempotency_key("refund_order", {"a": 1, "b": 2}) == idempotency_key("refund_order", {"b": 2, "a": 1})
    assert idempotency_key("refund_order", {}, business_key="ORD-1001") != \
        idempotency_key("refund_order", {}, business_key="ORD-1002")
