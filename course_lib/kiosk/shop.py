"""The shop: products, orders, reviews and customers, its tools, and a record of every side effect."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from course_lib.reliability import FakePaymentService, Idempotent, idempotency_key, with_retries
from course_lib.security.workspace import EmailAddress
from course_lib.tools import ToolFunction

# [0-9], not \d: \d also matches Arabic-Indic, Devanagari, full-width... digits. ``$`` is safe
# here: pydantic's regex engine (like JSON Schema's) matches it only at the very end.
Sku = Annotated[str, Field(pattern=r"^SKU-[0-9]{5}$")]
OrderId = Annotated[str, Field(pattern=r"^ORD-[0-9]{4}$")]
Yen = Annotated[int, Field(strict=True, gt=0)]  # a whole number of yen: never "6500", 6500.0 or true

SIDE_EFFECTS = frozenset({"refund_order", "send_email"})
UNTRUSTED = frozenset({"read_reviews"})



@dataclass
class Kiosk:
    """The shop's data, and a record of every side effect the agent caused."""

    products: dict[str, dict[str, Any]]
    orders: dict[str, dict[str, Any]]
    reviews: dict[str, list[str]]
    payments: FakePaymentService = field(default_factory=FakePaymentService)
    refunded: Idempotent = field(default_factory=Idempotent)
    sent: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path, **fields: Any) -> Kiosk:
        data = json.loads(path.read_text())
        return cls(data["products"], data["orders"], data["reviews"], **fields)

    @property
    def customers(self) -> set[str]:
        return {order["customer"] for order in self.orders.values()}

    def product(self, sku: str) -> dict[str, Any]:
        if sku not in self.products:
            raise LookupError(f"there is no product {sku}; use find_products to search by name")
        return self.products[sku]

    def tools(self) -> dict[str, ToolFunction]:
        """Four read-only tools, then two with side effects (declared last: lesson 8, experiment 2)."""

        def get_product_stock(sku: Sku) -> dict[str, int]:
            """Units in stock per warehouse (tokyo, osaka, fukuoka). Use this when a customer asks about stock.

            Args:
                sku: the product code, SKU- and five digits, e.g. SKU-00042 (not 00042)
            """
            return self.product(sku)["stock"]

        def get_product_info(sku: Sku) -> dict[str, Any]:
            """Name, price in yen and delivery lead time in days of a product. Use this when a customer asks
            what a product costs or how long delivery takes.

            Args:
                sku: the product code, SKU- and five digits, e.g. SKU-00042 (not 00042)
            """
            product = self.product(sku)
            return {"name": product["name"], "price_jpy": product["price_jpy"], "lead_days": product["lead_days"]}

        def find_products(query: str) -> list[dict[str, str]]:
            """Products whose name contains a word of the query, with their SKUs.

            Args:
                query: words from the product's name, e.g. "pressure gauge"
            """
            words = [word for word in query.lower().split() if len(word) > 2]
            return [{"sku": sku, "name": p["name"]} for sku, p in self.products.items()
                    if any(word in p["name"].lower() for word in words)]

        def read_reviews(sku: Sku) -> list[str]:
            """Reviews: what other customers wrote about a product. Use this when a customer asks what
            people say about a product or whether it is any good.

            Args:
                sku: the product code, SKU- and five digits, e.g. SKU-00042
            """
            self.product(sku)
            return self.reviews.get(sku, [])

        def refund_order(order_id: OrderId, amount_jpy: Yen) -> dict[str, Any]:
            """Refund (part of) an order to the customer. Needs a staff member's approval.

            Args:
                order_id: the order number, ORD- and four digits, e.g. ORD-1001
                amount_jpy: the amount to refund in yen, at most what was paid
            """
            return self.refund(order_id, amount_jpy)

        def send_email(to: EmailAddress, subject: str, body: str) -> str:
            """Send an e-mail to a customer of the shop.

            Args:
                to: the customer's e-mail address
                subject: the subject line
                body: the text of the e-mail
            """
            self.sent.append({"to": to, "subject": subject, "body": body})
            return f"sent to {to}"

        return {tool.__name__: tool for tool in (get_product_stock, get_product_info, find_products, read_reviews,
                                                 refund_order, send_email)}

    def refund(self, order_id: str, amount_jpy: int) -> dict[str, Any]:
        """One refund per order, whatever happens: the order number is the business key, the
        key goes to the payment service too, and only its timeouts and 5xx are retried.

        An exact repeat is answered from the store. A repeat with another amount is another
        request, and an error: answered from the store, it would look done when it is not."""
        if isinstance(amount_jpy, bool) or not isinstance(amount_jpy, int):
            raise TypeError("amount_jpy must be a whole number of yen")
        if order_id not in self.orders:
            raise LookupError(f"there is no order {order_id}")
        if not 0 < amount_jpy <= self.orders[order_id]["paid_jpy"]:
            raise ValueError(f"amount_jpy must be between 1 and {self.orders[order_id]['paid_jpy']} (what was paid)")
        key = idempotency_key("refund_order", {}, business_key=order_id)
        done = self.refunded.run(key, lambda: with_retries(lambda: self.payments.refund(order_id, amount_jpy, key),
                                                           sleep=lambda seconds: None, idempotency_key=key))
        if done["amount_jpy"] != amount_jpy:
            raise ValueError(f"order {order_id} was already refunded {done['amount_jpy']} JPY; "
                             f"a refund of {amount_jpy} JPY is a different request")
        return done


