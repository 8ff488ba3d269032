"""Cost before running: calls, estimated tokens and cost per (benchmark, combination), from the collected items.

``pytest evals --collect-only`` with ``--matrix``, ``--temperature`` or
``--epochs`` runs every collected item's solver against a recording client:
nothing is sent, each ``complete()`` is counted with its prompt's size, and
answers are empty text (so a second call built from the first, such as a judge's
prompt, is counted with the prompt it would have without the answer). Tokens are
estimated at about four characters a token; output tokens at the call's
``max_tokens``, else :data:`OUTPUT_TOKENS_GUESS`. Prices come from
``[tool.fieldeval.prices]`` (and ``--prices``); an unpriced model's cost is ``-``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fieldeval.calls.cells import model_of

CHARS_PER_TOKEN = 4
OUTPUT_TOKENS_GUESS = 100


@dataclass
class PlannedCost:
    """One (benchmark, combination): its items and the calls its solvers would make."""

    items: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0
    models: set[str] = field(default_factory=set)
    unpriced: set[str] = field(default_factory=set)


@dataclass
class _Empty:
    text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    est_cost_usd: float | None = None
    response_time_s: float = 0.0


class RecordingClient:
    """A solver's ``client`` that counts calls instead of making them."""

    def __init__(self, context: Any, price: Callable[[str, int, int], float | None], entry: PlannedCost) -> None:
        self.context = context
        self._price = price
        self.entry = entry

    def complete(self, model_id: Any, prompt: str, *, system: str | None = None, max_tokens: int | None = None,
                 **_: Any) -> _Empty:
        model = model_of(model_id)
        tokens_in = math.ceil((len(prompt) + len(system or "")) / CHARS_PER_TOKEN)
        tokens_out = max_tokens or OUTPUT_TOKENS_GUESS
        entry = self.entry
        entry.calls += 1
        entry.input_tokens += tokens_in
        entry.output_tokens += tokens_out
        entry.models.add(model)
        cost = self._price(model, tokens_in, tokens_out)
        if cost is None:
            entry.unpriced.add(model)
        entry.cost = None if cost is None or entry.cost is None else entry.cost + cost
        return _Empty()

    def complete_many(self, calls: Sequence[Mapping[str, Any]]) -> list[_Empty]:
        """Each call counted."""
        return [self.complete(**call) for call in calls]


def plan_costs(jobs: Iterable[tuple[str, str, Callable[[Any], Any], Any]],
               price: Callable[[str, int, int], float | None]) -> dict[tuple[str, str], PlannedCost]:
    """``{(benchmark, combination): PlannedCost}`` for ``(benchmark, combination, solve(client), context)`` jobs."""
    out: dict[tuple[str, str], PlannedCost] = defaultdict(PlannedCost)
    for bench, combination, solve, context in jobs:
        entry = out[(bench, combination)]
        entry.items += 1
        solve(RecordingClient(context, price, entry))
    return dict(out)


def plan_lines(costs: dict[tuple[str, str], PlannedCost]) -> list[str]:
    """The plan as a few aligned lines, and the total."""
    if not costs:
        return []
    lines = [f"fieldeval plan: calls, estimated tokens (about {CHARS_PER_TOKEN} characters a token; output at each "
             f"call's max_tokens, else {OUTPUT_TOKENS_GUESS}) and cost from [tool.fieldeval.prices]; nothing was sent",
             f"  {'benchmark':<12} {'combination':<40} {'items':>6} {'calls':>7} {'input tok':>10} "
             f"{'output tok':>10} {'cost USD':>10}"]
    total: float | None = 0.0
    for (bench, combination), e in sorted(costs.items()):
        cost = "-" if e.cost is None else f"{e.cost:.4f}"
        total = None if e.cost is None or total is None else total + e.cost
        lines.append(f"  {bench:<12} {combination:<40} {e.items:>6} {e.calls:>7} {e.input_tokens:>10} "
                     f"{e.output_tokens:>10} {cost:>10}")
    calls = sum(e.calls for e in costs.values())
    unpriced = sorted({m for e in costs.values() for m in e.unpriced})
    tail = f"{total:.4f} USD" if total is not None else "unknown (no price for " + ", ".join(unpriced) + ")"
    lines.append(f"  total: {calls} calls, {tail}")
    return lines


__all__ = ["PlannedCost", "RecordingClient", "plan_costs", "plan_lines"]
