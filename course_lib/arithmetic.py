"""A calculator a model may call safely: arithmetic only, never ``eval``.

``eval("2*3")`` would work, and so would ``eval("__import__('os').remove(...)")``:
the text comes from a model, and a model can be talked into writing anything. So the
expression is parsed into a syntax tree and only numbers, ``+ - * /`` and parentheses
are allowed through.

Two more things a model's expression must not do. Run forever: there is no ``**``,
because ``9**9**9`` is a number with 370 million digits, and without it 200 characters
can make at most a 200-digit integer. And return ``inf`` or ``nan``: JSON has no such
numbers (``json.dumps(float("inf"))`` writes ``Infinity``, which strict parsers reject),
and a model handed one can only guess what it means. Those are clear errors instead.

>>> calculate("(3 + 4) * 15")
105
>>> calculate("__import__('os')")
Traceback (most recent call last):
...
ValueError: only numbers, + - * / and parentheses are allowed, not Call
>>> calculate("1e308 * 10")
Traceback (most recent call last):
...
ValueError: the result is too large
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

MAX_LENGTH = 200
_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def calculate(expression: str) -> int | float:
    """Evaluate a pure arithmetic expression such as ``"(3 + 4) * 15"``."""
    if len(expression) > MAX_LENGTH:
        raise ValueError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    return _evaluate(tree.body)


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _finite(node.value)  # "1e999" is read as inf
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        try:
            return _finite(_BINARY[type(node.op)](left, right))
        except OverflowError:  # an integer too large to become a float
            raise ValueError("the result is too large") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"only numbers, + - * / and parentheses are allowed, not {type(node).__name__}")


def _finite(value: int | float) -> int | float:
    """``value``, unless it is infinite or undefined: every step is checked, so no later
    step can turn an inf into a harmless-looking number (``1 / 1e999`` is not 0). Integers
    are always finite (and may be too large for ``math.isinf``), so only floats are checked."""
    if isinstance(value, float) and math.isinf(value):
        raise ValueError("the result is too large")
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("the result is undefined")
    return value
