"""The experiment as designed: a model x hyperparameter matrix, and repeated samples (epochs) per item.

A cell is a :class:`~fieldeval.calls.cells.Combination`: a model and its
hyperparameters (``temperature`` and any other llm model option), plus the epoch
of a repeated item, which *is* its label as a string. Without ``--matrix``,
``--temperature`` or ``--epochs`` items run on plain model ids.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from fieldeval.calls.cells import Combination, label
from fieldeval.errors import UsageError

#: hyperparameters llm-matrix varies that are not llm model options
NOT_OPTIONS = ("model",)


def combinations(models: Sequence[str], grid: Mapping[str, Sequence[Any]], *, epochs: int = 1,
                 default_temperature: float = 0.0,
                 sampled: Collection[str] = ()) -> tuple[list[Combination], list[str]]:
    """Every (model, hyperparameters) cell, each repeated ``epochs`` times, and the notices to print.

    A combination at temperature 0 runs once whatever ``epochs`` says: its answers would be identical; not so a
    ``sampled`` model (one that takes no temperature, whose plugin samples as it chooses).
    """
    names = [name for name in grid if name not in NOT_OPTIONS]
    cells: list[Combination] = []
    once: list[str] = []
    for model in dict.fromkeys(models):
        for values in itertools.product(*(list(dict.fromkeys(grid[n])) for n in names)):
            params = dict(zip(names, values))
            temperature = float(params.get("temperature", default_temperature))
            repeats = epochs if temperature > 0 or model in sampled else 1
            if epochs > 1 and repeats == 1:
                once.append(str(Combination(model, params)))
            if repeats == 1:
                cells.append(Combination(model, params))
            else:
                cells.extend(Combination(model, params, epoch) for epoch in range(1, repeats + 1))
    notices = []
    if once:
        notices.append(f"fieldeval: --epochs {epochs} at temperature 0: the answers would be identical, so "
                       f"{', '.join(once)} run{'s' if len(once) == 1 else ''} once")
    return cells, notices


def parse_temperature(text: str) -> float:
    """A ``--temperature`` value: a number from 0 to 2; one usage line otherwise."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise UsageError(f"--temperature {text!r}: not a number; pass e.g. --temperature 0.7") from None
    if not 0 <= value <= 2:
        raise UsageError(f"--temperature {text}: must be from 0 to 2")
    return value


def suite_grid(matrix: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """An llm-matrix ``matrix:`` block's hyperparameters as ``{name: [values]}`` (``exclude`` is not supported)."""
    if not matrix:
        return {}
    hyper = matrix.get("hyperparameters") if isinstance(matrix, Mapping) else None
    if not isinstance(hyper, Mapping):
        return {}
    return {str(k): list(v) if isinstance(v, list | tuple) else [v] for k, v in hyper.items()}


def tool_grid(tool: Mapping[str, Any], bench: str) -> dict[str, list[Any]]:
    """``[tool.fieldeval.run.matrix.<bench>]``, else the plain keys of ``[tool.fieldeval.run.matrix]``."""
    section = tool.get("matrix") or {}
    if not isinstance(section, Mapping):
        raise UsageError("[tool.fieldeval.run.matrix] in pyproject.toml: not a table; write e.g. "
                         "model = [\"gpt-4o-mini\"] and temperature = [0.0, 0.7]")
    own = section.get(bench)
    chosen = own if isinstance(own, Mapping) else {k: v for k, v in section.items() if not isinstance(v, Mapping)}
    return {str(k): list(v) if isinstance(v, list | tuple) else [v] for k, v in chosen.items()}


def untempered(models: Iterable[str]) -> frozenset[str]:
    """The models that take no temperature option (their plugins sample as they choose)."""
    from fieldeval.calls.models import option_names, resolve_model

    return frozenset(model for model in models if "temperature" not in option_names(resolve_model(model)))


def check_options(cells: Iterable[Combination]) -> None:
    """Each combination's hyperparameters must be options its llm model accepts: a run is never labelled with a
    setting its model ignored."""
    from fieldeval.calls.models import option_names, resolve_model

    seen: set[tuple[str, str]] = set()
    for cell in cells:
        for name in cell.params:
            if (cell.model, name) in seen:
                continue
            seen.add((cell.model, name))
            fields = option_names(resolve_model(cell.model))
            if name == "temperature" and name not in fields:
                raise UsageError(f"temperature {float(cell.params[name]):g} (--temperature or the matrix): "
                                 f"{cell.model} takes no temperature (its llm plugin samples as it chooses), so its "
                                 f"items would be labelled with a setting it ignored; run {cell.model} without a "
                                 "temperature and measure its sampling with --epochs K")
            if name not in fields:
                raise UsageError(f"matrix hyperparameter {name!r}: {cell.model} has no such option; "
                                 f"choose from {', '.join(sorted(fields)) or 'none'} or drop it from the matrix")


__all__ = ["Combination", "check_options", "combinations", "label", "parse_temperature", "suite_grid", "tool_grid",
           "untempered"]
