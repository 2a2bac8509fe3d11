"""Side effects that happen once: idempotency keys, retries with backoff, timeouts.

A read-only tool (a stock lookup) can be called again whenever something goes wrong.
A tool with a side effect (a refund, a payment, an e-mail) cannot: a retry after a
timeout may repeat something that already happened, because the request succeeded and
only its answer was lost. And models repeat calls on their own (lesson 4).

The defenses, in the order they wrap a call, outermost first:

1. ``with_retries``: retry only what is safe to retry (timeouts, 5xx), never a 4xx (the
   request itself is wrong), with exponential backoff and jitter, a bounded number of times;
   and only an operation that is read-only or carries an idempotency key.
2. ``Idempotent``: a key per intended operation (a business key such as the order number
   first, else the tool name plus its canonical arguments); a result is stored only after
   success, and a second call with the same key returns it without acting again. The same
   key with *other* arguments is not a repeat but a different request, and an error
   (``IdempotencyConflict``), as in the IETF's Idempotency-Key draft and at Stripe:
   answered from the store, a refund of 900 would look done when 1,200 was.
3. The key is also sent to the service, which deduplicates on its side (like Stripe's
   ``Idempotency-Key``): the only defense against a success whose answer was lost.

``FakePaymentService`` is a local refund API that fails on request, reproducibly (seeded):
it can time out, answer 5xx, reject with 4xx, apply the refund and lose the answer, or
apply the refund and then answer 5xx. Neither a timeout nor a 5xx means "nothing happened".
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, TypeVar

from pydantic_core import to_jsonable_python

T = TypeVar("T")
Fault = Literal["ok", "timeout", "server_error", "client_error", "lost_answer", "done_then_server_error"]


class ServiceTimeout(TimeoutError):
    """No answer in time. The operation may or may not have happened."""


class ServerError(RuntimeError):
    """A 5xx answer: the service failed; trying again later may work."""


class ClientError(ValueError):
    """A 4xx answer: the request is wrong; trying again cannot help."""


class UnsafeRetry(ValueError):
    """Retries were asked for an operation that may change the world and has no idempotency key."""


class IdempotencyConflict(ClientError):
    """An idempotency key came back with a different request: a mistake, never a repeat (a 4xx:
    the IETF draft answers 422, Stripe 400). Trying again cannot help."""


@dataclass(frozen=True)
class ToolKind:
    """What kind of tool this is decides which defenses it needs (the seed article's table)."""

    name: str
    side_effect: bool

    @property
    def safe_to_retry(self) -> str:
        return "only with an idempotency key" if self.side_effect else "yes, any number of times"

    @property
    def needs_idempotency_key(self) -> bool:
        return self.side_effect

    @property
    def parallel_calls(self) -> str:
        return "serialise them" if self.side_effect else "safe"


def canonical_request(arguments: dict[str, Any]) -> str:
    """The arguments as one text per meaning: keys sorted, text in Unicode NFC (an "é" typed as one
    character or as e plus an accent is one text), numbers by value (100 and 100.0 are one number;
    true is not 1). Give it the validated arguments, the ones the tool receives."""
    return json.dumps(_canonical(arguments), sort_keys=True, ensure_ascii=False)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, (int, float, Decimal)):
        number = Decimal(str(value))
        if not number.is_finite():
            raise ValueError(f"{value} is not a finite number")
        return int(number) if number == number.to_integral_value() else float(number)
    if isinstance(value, dict):
        canonical = {_canonical(str(key)): _canonical(item) for key, item in value.items()}
        if len(canonical) != len(value):
            raise ValueError("two arguments have the same name once normalised")
        return canonical
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    return _canonical(to_jsonable_python(value))  # a date, a pydantic model...: its JSON form


class IdempotencyKey(str):
    """An idempotency key: the string that goes to the service, which also remembers the
    ``fingerprint`` of the request it was made for (the tool and its canonical arguments).
    Two requests share a key when they are meant as one operation; the fingerprint says
    whether they really ask the same thing."""

    fingerprint: str

    def __new__(cls, key: str, fingerprint: str = "") -> IdempotencyKey:
        made = super().__new__(cls, key)
        made.fingerprint = fingerprint
        return made


def idempotency_key(tool: str, arguments: dict[str, Any], business_key: str | None = None) -> IdempotencyKey:
    """A business key wins (it tells two intended operations apart); else the tool name
    plus the validated arguments in canonical form (``canonical_request``), so the same call
    gives the same key: sorted keys, ``100`` and ``100.0`` alike, text NFC-normalised.

    Either way the key carries the request's fingerprint: ``Idempotent.run`` refuses the same
    key with other arguments instead of answering with the stored result."""
    request = canonical_request(arguments)
    material = unicodedata.normalize("NFC", business_key) if business_key is not None else request
    fingerprint = hashlib.sha256(f"{tool}:{request}".encode()).hexdigest()[:32]
    return IdempotencyKey(hashlib.sha256(f"{tool}:{material}".encode()).hexdigest()[:32], fingerprint)


@dataclass
class Idempotent:
    """Run an operation at most once per key; remember its result only after it succeeded."""

    results: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)  # key -> the request it was first used for
    skipped: int = 0  # calls answered from the store instead of acting again

    def run(self, key: str, operation: Callable[[], T], fingerprint: str | None = None) -> T:
        """``operation()``, once per key. ``fingerprint`` says what was asked (an ``IdempotencyKey``
        brings its own): the same key with another fingerprint raises ``IdempotencyConflict``."""
        fingerprint = fingerprint or getattr(key, "fingerprint", "") or None
        if key in self.results:
            first = self.fingerprints.get(key)
            if fingerprint and first and fingerprint != first:
                raise IdempotencyConflict("this idempotency key was already used for a different request; "
                                          "a repeat must ask the same thing, a new operation needs a new key")
            self.skipped += 1
            return self.results[key]
        result = operation()  # an exception leaves no record: the next try really tries
        self.results[key] = result
        if fingerprint:
            self.fingerprints[key] = fingerprint
        return result


def backoff_delays(attempts: int, base: float = 0.5, cap: float = 8.0, jitter: float = 0.3,
                   rng: random.Random | None = None) -> list[float]:
    """Waits before retries 2..attempts: base, 2·base, 4·base, ... (capped) plus random jitter,
    so that many clients that failed together do not all retry at the same instant."""
    rng = rng or random.Random()
    return [min(cap, base * 2 ** n) + rng.uniform(0, jitter) for n in range(attempts - 1)]


def with_retries(operation: Callable[[], T], attempts: int = 4, base: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None, *,
                 read_only: bool = False, idempotency_key: str | None = None) -> T:
    """Call ``operation``; on a timeout or 5xx wait and try again, up to ``attempts`` in all.
    A 4xx (``ClientError``) is raised at once: the same wrong request will fail again.

    Say why a repeat is harmless, or nothing runs. A timeout or a 5xx can come *after* the
    service acted (a lost answer; a refund made, then a 502), so repeating a side effect acts
    twice unless the service recognises the repeat. Pass ``read_only=True`` for a lookup, or
    the ``idempotency_key`` that ``operation`` sends to the service with every try (this
    function cannot check that it does: the key is your promise). Without either it raises
    ``UnsafeRetry`` before the first try, rather than retrying anyway (the double refund) or
    quietly not retrying (a failure nobody notices): the first run of the code, or its first
    test, shows the mistake, not the first timeout in production.
    """
    if not read_only and not idempotency_key:
        raise UnsafeRetry("with_retries will not repeat an operation that may have a side effect without an "
                          "idempotency key: a timeout or a 5xx can come after the service acted. Pass "
                          "read_only=True for a lookup, or idempotency_key=... and send that key to the service.")
    return _retry_transient(operation, attempts, base, sleep, rng)


def _retry_transient(operation: Callable[[], T], attempts: int, base: float,
                     sleep: Callable[[float], None], rng: random.Random | None) -> T:
    """The retry loop itself, with no question asked: ``simulate_refunds`` measures what it
    does to an unkeyed side effect."""
    delays = backoff_delays(attempts, base, rng=rng)
    for attempt in range(attempts):
        try:
            return operation()
        except (ServiceTimeout, ServerError):
            if attempt == attempts - 1:
                raise
            sleep(delays[attempt])
    raise AssertionError("unreachable")


@dataclass
class FakePaymentService:
    """A refund API on this machine that fails on purpose, reproducibly.

    ``faults`` is the schedule: the n-th request gets the n-th fault (then "ok" forever).
    Or give ``fault_rates`` and a ``seed`` to draw faults at random, the same way every run.
    Two faults refund *and* fail: ``lost_answer`` (a timeout) and ``done_then_server_error``
    (a 502, as from a gateway whose backend finished the work); the caller cannot tell
    them from the faults that did nothing.
    With ``honour_keys=True`` a request that repeats an applied ``idempotency_key`` returns
    the stored answer instead of refunding again, and one that brings the same key with another
    order or amount is refused (``IdempotencyConflict``, a 422), as Stripe refuses a key reused
    with other parameters.
    """

    faults: list[Fault] = field(default_factory=list)
    fault_rates: dict[Fault, float] = field(default_factory=dict)
    seed: int = 0
    honour_keys: bool = True
    refunds: list[dict[str, Any]] = field(default_factory=list)  # what really happened
    requests: int = 0
    _answers_by_key: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def _next_fault(self) -> Fault:
        if self.requests <= len(self.faults):
            return self.faults[self.requests - 1]
        roll, total = self._rng.random(), 0.0
        for fault, rate in self.fault_rates.items():
            total += rate
            if roll < total:
                return fault
        return "ok"

    def refund(self, order_id: str, amount_jpy: int, idempotency_key: str | None = None) -> dict[str, Any]:
        self.requests += 1
        fault = self._next_fault()
        if fault == "client_error" or amount_jpy <= 0:
            raise ClientError("400: invalid refund request")
        if fault == "timeout":
            raise ServiceTimeout("no answer within the timeout")
        if fault == "server_error":
            raise ServerError("503: service unavailable")
        if self.honour_keys and idempotency_key in self._answers_by_key:
            answer = self._answers_by_key[idempotency_key]
            if (answer["order_id"], answer["amount_jpy"]) != (order_id, amount_jpy):
                raise IdempotencyConflict("422: this idempotency key was used for another refund")
            return answer
        answer = {"refund_id": f"re_{len(self.refunds) + 1:04d}", "order_id": order_id, "amount_jpy": amount_jpy}
        self.refunds.append(answer)
        if idempotency_key is not None:
            self._answers_by_key[idempotency_key] = answer
        if fault == "lost_answer":
            raise ServiceTimeout("no answer within the timeout")  # ...but the refund happened
        if fault == "done_then_server_error":
            raise ServerError("502: bad gateway")  # ...but the refund happened
        return answer

    def duplicates(self) -> int:
        """Refunds beyond the first for the same order: money paid out twice."""
        orders = [refund["order_id"] for refund in self.refunds]
        return len(orders) - len(set(orders))


Protection = Literal["none", "retries", "retries + store", "retries + store + key"]
PROTECTIONS: tuple[Protection, ...] = ("none", "retries", "retries + store", "retries + store + key")


def simulate_refunds(orders: list[tuple[str, int]], asks_per_order: list[int], protection: Protection,
                     fault_rates: dict[Fault, float], seed: int = 0) -> dict[str, int]:
    """Run a refund workload through a faulty service with one level of protection.

    Each order is asked for ``asks_per_order[i]`` times (a model that repeats a call asks
    twice). The service draws its faults from ``seed``, so every protection level meets the
    same fault at the same request number. Returns what happened, counted.
    """
    service = FakePaymentService(fault_rates=fault_rates, seed=seed)
    store = Idempotent()
    retry_rng = random.Random(seed)
    failed_calls = 0
    for (order_id, amount), asks in zip(orders, asks_per_order):
        key = idempotency_key("issue_refund", {"order_id": order_id, "amount_jpy": amount}, business_key=order_id)
        sent_key = key if protection == "retries + store + key" else None

        def once(order_id: str = order_id, amount: int = amount, sent_key: str | None = sent_key) -> dict[str, Any]:
            return service.refund(order_id, amount, idempotency_key=sent_key)

        for _ in range(asks):
            operation: Callable[[], dict[str, Any]] = once
            if "store" in protection:
                operation = functools.partial(store.run, key, once)  # store.run(key, once), when called
            try:
                if protection == "none":
                    operation()
                elif sent_key is None:  # retries without a key the service sees: the bug, measured
                    _retry_transient(operation, 4, 0.5, lambda seconds: None, retry_rng)
                else:
                    with_retries(operation, sleep=lambda seconds: None, rng=retry_rng, idempotency_key=sent_key)
            except (ServiceTimeout, ServerError, ClientError):
                failed_calls += 1
    refunded = {refund["order_id"] for refund in service.refunds}
    return {"service requests": service.requests, "refunds paid": len(service.refunds),
            "duplicate refunds": service.duplicates(), "orders not refunded": len(orders) - len(refunded),
            "calls that failed": failed_calls}
