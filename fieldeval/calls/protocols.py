"""The typed seams of the call engine: what answers ``complete()``, the client a solver is given, and the solver."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fieldeval.calls.records import Completion


class Completer(Protocol):
    """Anything that asks a model as :meth:`fieldeval.ModelClient.complete` does (the session's client)."""

    def complete(self, model_id: str, prompt: str, *, system: str | None = None, temperature: float | None = 0.0,
                 max_tokens: int | None = None, schema: dict | None = None) -> Completion:
        """The model's response to ``prompt`` with timing, tokens and cost; a ModelCallError when none could be had."""
        ...


class Client(Completer, Protocol):
    """What a solver receives as ``client``: ``complete()`` and the benchmark's ``context``."""

    @property
    def context(self) -> Any:
        """The benchmark's context (its suite, options and indexes), as its ``context`` fixture gives it."""
        ...

    def complete_many(self, calls: Sequence[Mapping[str, Any]]) -> list[Completion]:
        """``complete(**call)`` for each call, in order: calls that do not depend on each other's answers (a
        judge's epochs), which ``--batch`` sends in one round instead of one round each."""
        ...


class Solver(Protocol):
    """An eval module's model work for one item, ``solve(case, model, client) -> result``, named in its marker."""

    def __call__(self, case: Any, model: str, client: Client, /) -> Any:
        """The item's result (say, one Completion or a tuple of them), made only through ``client``."""
        ...


__all__ = ["Client", "Completer", "Solver"]
