"""A calculator a model may call safely: arithmetic only, never ``eval``.

``eval("2*3")`` would work, and so would ``eval("__import__('os').remove(...)")``:
the text comes from a model, and a model can be talked into writing anything. So the
expression is parsed into a syntax tree and only numbers, ``+ - * /`` and parentheses
are allowed through.

>>> calculate("(3 + 4) * 15")
105
>>> calculate("__import__('os')")
Traceback (most recent call last):
...
ValueError: only numbers, + - * / and parentheses are allowed, not Call
"""

from __future__ import annotations

import ast
import operator

MAX_LENGTH = 200
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


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
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"only numbers, + - * / and parentheses are allowed, not {type(node).__name__}")
