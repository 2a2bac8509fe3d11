"""Idempotency, retries and the faulty service: deterministic, no model needed."""

import random

import pytest

from course_lib.reliability import (
    PROTECTIONS,
    ClientError,
    FakePaymentService,
    Idempotent,
    ServerError,
    ServiceTimeout,
    UnsafeRetry,
    backoff_delays,
    idempotency_key,
    simulate_refunds,
    with_retries,
)


def test_keys_are_canonical_and_a_business_key_wins():
    assert idempotency_key("refund", {"a": 1, "b": 2}) == idempotency_key("refund", {"b": 2, "a": 1})
    assert idempotency_key("refund", {"a": 1}) != idempotency_key("charge", {"a": 1})
    assert idempotency_key("refund", {"amount": 500}, business_key="ORD-1") != \
        idempotency_key("refund", {"amount": 500}, business_key="ORD-2")


def test_the_store_skips_a_second_call_and_records_only_success():
    store, calls = Idempotent(), []

    def refund():
        calls.append(1)
        if len(calls) == 1:
            raise ServiceTimeout("lost")
        return {"refund_id": "re_1"}

    with pytest.raises(ServiceTimeout):
        store.run("k", refund)
    assert store.run("k", refund) == {"refund_id": "re_1"}
    assert store.run("k", refund) == {"refund_id": "re_1"}
    assert len(calls) == 2 and store.skipped == 1


def test_backoff_grows_exponentially_with_bounded_jitter():
    delays = backoff_delays(5, base=0.5, cap=4.0, jitter=0.3, rng=random.Random(1))
    for delay, floor in zip(delays, [0.5, 1.0, 2.0, 4.0]):
        assert floor <= delay <= floor + 0.3


def test_retries_on_timeouts_and_5xx_but_never_on_4xx():
    waits = []
    service = FakePaymentService(faults=["timeout", "server_error", "ok"])
    assert with_retries(lambda: service.refund("ORD-1", 100, idempotency_key="k"), sleep=waits.append,
                        idempotency_key="k")["order_id"] == "ORD-1"
    assert service.requests == 3 and len(waits) == 2
    rejecting = FakePaymentService(faults=["client_error", "ok"])
    with pytest.raises(ClientError):
        with_retries(lambda: rejecting.refund("ORD-1", 100, idempotency_key="k"), sleep=waits.append,
                     idempotency_key="k")
    assert rejecting.requests == 1
    failing = FakePaymentService(faults=["server_error"] * 5)
    with pytest.raises(ServerError):
        with_retries(lambda: failing.refund("ORD-1", 100, idempotency_key="k"), attempts=3, sleep=waits.append,
                     idempotency_key="k")
    assert failing.requests == 3


def test_a_side_effect_without_a_key_is_not_retried_it_is_refused_before_it_runs():
    careless = FakePaymentService(faults=["lost_answer", "ok"])
    with pytest.raises(UnsafeRetry, match="idempotency_key"):
        with_retries(lambda: careless.refund("ORD-1", 100), sleep=lambda s: None)
    assert careless.requests == 0 and careless.refunds == []
    with pytest.raises(UnsafeRetry):
        with_retries(lambda: careless.refund("ORD-1", 100), sleep=lambda s: None, idempotency_key="")
    careful = FakePaymentService(faults=["lost_answer", "ok"])
    with_retries(lambda: careful.refund("ORD-1", 100, idempotency_key="k"), sleep=lambda s: None, idempotency_key="k")
    assert careful.duplicates() == 0 and len(careful.refunds) == 1


def test_a_read_only_operation_is_retried_without_a_key():
    answers = iter([ServiceTimeout("slow"), ServerError("503"), {"sku": "SKU-1", "units": 3}])

    def lookup() -> dict:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert with_retries(lookup, sleep=lambda s: None, read_only=True) == {"sku": "SKU-1", "units": 3}


def test_a_5xx_does_not_mean_nothing_happened_either():
    service = FakePaymentService(faults=["done_then_server_error", "ok"])
    with pytest.raises(ServerError):
        service.refund("ORD-1", 100)
    assert [refund["order_id"] for refund in service.refunds] == ["ORD-1"]  # ...it was paid
    keyed = FakePaymentService(faults=["done_then_server_error", "ok"])
    answer = with_retries(lambda: keyed.refund("ORD-1", 100, idempotency_key="k"), sleep=lambda s: None,
                          idempotency_key="k")
    assert answer["refund_id"] == "re_0001" and len(keyed.refunds) == 1 and keyed.requests == 2


def test_the_same_seed_gives_the_same_faults():
    rates = {"timeout": 0.2, "lost_answer": 0.1}
    assert simulate_refunds([("ORD-1", 100)] * 1, [1], "none", rates, seed=3) == \
        simulate_refunds([("ORD-1", 100)] * 1, [1], "none", rates, seed=3)


def test_full_protection_never_pays_twice():
    orders = [(f"ORD-{i:06d}", 1000) for i in range(200)]
    asks = [2 if i % 5 == 0 else 1 for i in range(200)]
    rates = {"timeout": 0.1, "server_error": 0.1, "lost_answer": 0.1, "client_error": 0.02}
    results = {p: simulate_refunds(orders, asks, p, rates, seed=7) for p in PROTECTIONS}
    assert results["none"]["duplicate refunds"] > 0  # the model's repeated asks
    assert results["retries"]["duplicate refunds"] >= results["none"]["duplicate refunds"]
    assert results["retries + store + key"]["duplicate refunds"] == 0
    assert results["retries"]["calls that failed"] < results["none"]["calls that failed"]


def test_full_protection_never_pays_twice_when_the_service_fails_after_acting():
    orders = [(f"ORD-{i:06d}", 1000) for i in range(200)]
    rates = {"timeout": 0.1, "done_then_server_error": 0.1}
    results = {p: simulate_refunds(orders, [1] * 200, p, rates, seed=7) for p in PROTECTIONS}
    assert results["none"]["duplicate refunds"] == 0  # one ask each: nothing repeats
    assert results["retries"]["duplicate refunds"] > 0  # every retried 5xx-after-acting pays again
    assert results["retries + store + key"]["duplicate refunds"] == 0


def test_lesson_6_table_is_the_committed_one():
    """The seeded schedule of lesson 6, section 5: these are the numbers the notebook prints."""
    orders = [(f"ORD-{n:06d}", 3000) for n in range(200)]
    chooser = random.Random(1)
    asks = [2 if chooser.random() < 0.2 else 1 for _ in orders]
    rates = {"timeout": 0.10, "server_error": 0.10, "client_error": 0.02, "lost_answer": 0.10}
    table = {p: list(simulate_refunds(orders, asks, p, rates, seed=7).values()) for p in PROTECTIONS}
    assert table == {"none": [240, 180, 20, 40, 86], "retries": [351, 266, 68, 2, 9],
                     "retries + store": [290, 224, 27, 3, 8], "retries + store + key": [285, 196, 0, 4, 5]}
