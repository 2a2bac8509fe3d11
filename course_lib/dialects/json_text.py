"""JSON text read strictly: what the server asks of a request body, for JSON inside JSON.

OpenAI's Chat Completions sends a call's arguments as a JSON *string* inside the JSON body.
Reading that string with a bare ``json.loads`` accepts what a body may not hold (``NaN``,
numbers that overflow to infinity, nesting deep enough to exhaust Python's stack, a lone
surrogate that fails later, when the text is encoded), because the body's own checks cannot
see inside a string. :func:`read_json` applies the same rules as the server's body reader
(``server/guard.py``), and says in a ``ValueError`` which one the text broke.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_JSON_DEPTH = 64  # as deep as a request body may nest (server/wire.py; a test checks they agree)
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def read_json(text: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value in ``text``, or ``ValueError`` with the reason: not JSON, a non-finite
    number, nested more than ``limit`` levels, or a string holding a lone surrogate."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"nested more than {limit} levels deep") from None
    except ValueError as error:  # JSONDecodeError, NaN, overflow, an integer of thousands of digits
        raise ValueError(str(error)) from None
    check_depth_and_text(value, limit)
    return value


def check_depth_and_text(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Walk ``value`` without recursion: at most ``limit`` levels, and no lone surrogate
    (``"\\ud800"`` is valid JSON but no valid text)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise ValueError(f"nested more than {limit} levels deep")
        if isinstance(item, str):
            if LONE_SURROGATE.search(item):
                raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff)")
        elif isinstance(item, dict):
            stack += [(key, depth) for key in item] + [(child, depth + 1) for child in item.values()]
        elif isinstance(item, list):
            stack += [(child, depth + 1) for child in item]


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:20]} is too large for a number")
    return value
