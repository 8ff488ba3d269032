"""A ``--where`` expression over a run's items: comparisons of an item column with a literal, as SQL."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from fieldeval.errors import UsageError


class _Part(Protocol):
    """A table items come from, as a ``--where`` reads it: each item column as text or as a number."""

    def text(self, name: str, dialect: str) -> sa.ColumnElement: ...

    def number(self, name: str, dialect: str) -> sa.ColumnElement: ...

_COMPARE = {ast.Eq: "__eq__", ast.NotEq: "__ne__", ast.Lt: "__lt__", ast.LtE: "__le__", ast.Gt: "__gt__",
            ast.GtE: "__ge__"}
WHERE_FIX = ("write comparisons of a column with a literal joined by and / or / not, "
             "e.g. \"ontology_score < 0.5 and model == 'gpt-4o-mini'\"")


class Where:
    """A ``--where`` expression, checked once, compiled for each part of the items."""

    def __init__(self, expression: str, columns: Sequence[str]) -> None:
        self.expression = expression
        self.columns = tuple(columns)
        try:
            self.tree = ast.parse(expression, mode="eval").body
        except SyntaxError:
            raise UsageError(f"--where {expression!r}: not an expression; {WHERE_FIX}") from None
        self._compile(self.tree, None, "sqlite")  # checks every name and literal

    def clause(self, part: _Part, dialect: str) -> sa.ColumnElement:
        """The expression as an SQL condition on ``part``."""
        return self._compile(self.tree, part, dialect)

    def _fail(self, what: str) -> UsageError:
        return UsageError(f"--where {self.expression!r}: {what}; {WHERE_FIX}")

    def _name(self, node: ast.expr) -> str:
        if not isinstance(node, ast.Name):
            raise self._fail(f"{ast.unparse(node)!r} is not a column")
        if node.id not in self.columns:
            raise UsageError(f"--where {self.expression!r}: unknown column {node.id!r}; "
                             f"choose from {', '.join(self.columns)}")
        return node.id

    def _literal(self, node: ast.expr) -> Any:
        try:
            value = ast.literal_eval(node)
        except (ValueError, SyntaxError):
            raise self._fail(f"{ast.unparse(node)!r} is not a literal") from None
        if isinstance(value, (tuple, list, set)):
            if not all(v is None or isinstance(v, (str, int, float)) for v in value):
                raise self._fail(f"{ast.unparse(node)!r} holds something other than text and numbers")
            return tuple(value)
        if value is not None and not isinstance(value, (str, int, float)):
            raise self._fail(f"{ast.unparse(node)!r} is not text, a number, True, False or None")
        return value

    @staticmethod
    def _side(name: str, value: Any, part: _Part | None, dialect: str) -> sa.ColumnElement:
        """The column as a number for a number or True / False, else as text."""
        if part is None:
            return sa.null()
        sample = next((v for v in value if v is not None), None) if isinstance(value, tuple) else value
        return part.number(name, dialect) if isinstance(sample, (int, float)) else part.text(name, dialect)

    @staticmethod
    def _value(value: Any) -> Any:
        return float(value) if isinstance(value, bool) else value

    def _compile(self, node: ast.expr, part: _Part | None, dialect: str) -> sa.ColumnElement:
        if isinstance(node, ast.BoolOp):
            joined = [self._compile(v, part, dialect) for v in node.values]
            return sa.and_(*joined) if isinstance(node.op, ast.And) else sa.or_(*joined)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self._compile(node.operand, part, dialect)
            return sa.or_(sa.not_(inner), inner.is_(None)) if part is not None else inner
        if not isinstance(node, ast.Compare):
            raise self._fail(f"{ast.unparse(node)!r} is not a comparison")
        clauses = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            clauses.append(self._compare(left, op, right, part, dialect))
            left = right
        return sa.and_(*clauses)

    def _compare(self, left: ast.expr, op: ast.cmpop, right: ast.expr, part: _Part | None,
                 dialect: str) -> sa.ColumnElement:
        if not isinstance(left, ast.Name) and isinstance(right, ast.Name):
            flipped = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}
            op, left, right = flipped.get(type(op), op), right, left
        name, value = self._name(left), self._literal(right)
        side = self._side(name, value, part, dialect)
        if isinstance(op, (ast.In, ast.NotIn)):
            if not isinstance(value, tuple):
                raise self._fail(f"{ast.unparse(right)!r} is not a list or tuple")
            found = side.in_([self._value(v) for v in value if v is not None])
            if None in value:
                found = sa.or_(found, side.is_(None))
            return sa.not_(found) if isinstance(op, ast.NotIn) else found
        if isinstance(value, tuple):
            raise self._fail(f"{ast.unparse(right)!r}: a list goes with in / not in")
        if isinstance(op, (ast.Is, ast.IsNot)) or value is None:
            if value is not None or not isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
                raise self._fail("is / is not go with None, None with == / != / is / is not")
            return side.is_(None) if isinstance(op, (ast.Is, ast.Eq)) else side.is_not(None)
        if type(op) not in _COMPARE:
            raise self._fail(f"{type(op).__name__} is not a comparison it knows")
        return getattr(side, _COMPARE[type(op)])(self._value(value))


__all__ = ["WHERE_FIX", "Where"]
