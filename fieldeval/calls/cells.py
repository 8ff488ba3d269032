"""A matrix cell: a model id with its hyperparameters and the epoch of a repeated item (:class:`Combination`).

The engine passes a cell wherever a model id goes: it *is* a string, the
combination's label (``gpt-4o-mini-t0.7``), so every aggregate, table, stored run
and comparison that keys on ``model`` keys on it, and the model client unwraps it
into the model, its options and the epoch (part of the cache key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, eq=False, repr=False)
class Combination(str):
    """One cell of the matrix, frozen: ``str(c)`` is its label (its equality, hash and repr are the label's);
    ``model``, ``params`` and ``epoch`` its parts.

    Example:
        >>> c = Combination("gpt-4o-mini", {"temperature": 0.7}, epoch=2)
        >>> str(c), c.model, c.params, c.epoch, c.test_id, c.hyperparameters
        ('gpt-4o-mini-t0.7', 'gpt-4o-mini', {'temperature': 0.7}, 2, 'gpt-4o-mini-t0.7-e2', 'model=gpt-4o-mini_temperature=0.7')
    """

    model: str
    params: dict[str, Any] = field(default_factory=dict)
    epoch: int | None = None

    def __new__(cls, model: str, params: Mapping[str, Any] | None = None, epoch: int | None = None) -> Combination:
        return super().__new__(cls, label(model, dict(params or {})))

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", str(self.model))
        object.__setattr__(self, "params", dict(self.params or {}))
        object.__setattr__(self, "epoch", None if self.epoch is None else int(self.epoch))

    def __reduce__(self):
        return Combination, (self.model, self.params, self.epoch)

    @property
    def temperature(self) -> float | None:
        """The combination's temperature, or None when the matrix does not set one."""
        value = self.params.get("temperature")
        return None if value is None else float(value)

    @property
    def hyperparameters(self) -> str:
        """llm-matrix's ``hyperparameters`` column: ``model=gpt-4o_temperature=0.0``."""
        return "_".join(f"{k}={v}" for k, v in {"model": self.model, **self.params}.items())

    @property
    def test_id(self) -> str:
        """The combination's part of an item id: the label, and ``-e2`` for the second epoch of repeated items."""
        return str(self) if self.epoch is None else f"{self}-e{self.epoch}"

    def columns(self) -> dict[str, Any]:
        """The row columns of the combination: llm-matrix's ``hyperparameters`` and each value, and the epoch."""
        extra = {} if self.epoch is None else {"epoch": self.epoch}
        return {"hyperparameters": self.hyperparameters, "model_name": self.model, **self.params, **extra}


def label(model: str, params: Mapping[str, Any]) -> str:
    """``gpt-4o-mini-t0.7``: the model, ``-t`` and the temperature, then ``-<name><value>`` per other option."""
    parts = [str(model)]
    for name, value in params.items():
        parts.append(f"t{float(value):g}" if name == "temperature" else f"{name}{value}")
    return "-".join(parts)


def model_of(model: str) -> str:
    """The model id of a model id or of a :class:`Combination` (its model)."""
    return model.model if isinstance(model, Combination) else str(model)


def test_id_of(model: str) -> str:
    """The part of an item id a model id or a :class:`Combination` (its label and epoch) makes."""
    return model.test_id if isinstance(model, Combination) else str(model)


__all__ = ["Combination", "label", "model_of", "test_id_of"]
