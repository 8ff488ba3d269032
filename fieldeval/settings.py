"""Project settings from ``[tool.fieldeval]`` in pyproject.toml: prices, thresholds and per-model limits."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from fieldeval.errors import UsageError
from fieldeval.inputs import read_yaml
from fieldeval.calls.limits import ModelLimits

# USD per million tokens; extend or override under [tool.fieldeval.prices] or with --prices FILE. A batch call
# (--batch) costs batch_input_per_mtok / batch_output_per_mtok where given, else half the live price.
PRICE_KEYS = frozenset({"input_per_mtok", "output_per_mtok", "batch_input_per_mtok", "batch_output_per_mtok"})
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.60},
    "gpt-4o": {"input_per_mtok": 2.50, "output_per_mtok": 10.00},
    "gpt-4.1-mini": {"input_per_mtok": 0.40, "output_per_mtok": 1.60},
    "anthropic/claude-sonnet-4-5": {"input_per_mtok": 3.00, "output_per_mtok": 15.00},
    "anthropic/claude-haiku-4-5-20251001": {"input_per_mtok": 1.00, "output_per_mtok": 5.00},
    "gemini/gemini-2.5-flash": {"input_per_mtok": 0.30, "output_per_mtok": 2.50},
}


def tool_settings(rootpath: Path) -> dict:
    """The ``[tool.fieldeval]`` table of the project's pyproject.toml (empty when absent)."""
    path = rootpath / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("fieldeval", {})
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{path}: not valid TOML ({error}); fix the file") from None


def _check_prices(table: dict, origin: str) -> dict[str, dict[str, float]]:
    out = {}
    for model, price in table.items():
        if not isinstance(price, dict) or not set(price) <= PRICE_KEYS or not all(
            isinstance(v, (int, float)) and v >= 0 for v in price.values()
        ):
            raise UsageError(f"{origin}: price of {model!r} is {price!r}; give "
                             "{input_per_mtok = USD, output_per_mtok = USD} with non-negative numbers (and "
                             "batch_input_per_mtok, batch_output_per_mtok for --batch, if not half)")
        out[model] = {k: float(v) for k, v in price.items()}
    return out


def load_prices(tool: dict, extra_file: str | None = None) -> dict[str, dict[str, float]]:
    """Built-in prices, overridden by ``[tool.fieldeval.prices]`` (of ``tool``), then by a YAML file."""
    prices = dict(DEFAULT_PRICES)
    prices.update(_check_prices(tool.get("prices", {}), "[tool.fieldeval.prices]"))
    if extra_file:
        table = read_yaml(extra_file, what="--prices", hint="pass a YAML mapping of model -> prices",
                          empty_ok=True) or {}
        if not isinstance(table, dict):
            raise UsageError(f"--prices {extra_file}: expected a mapping of model -> prices")
        prices.update(_check_prices(table, f"--prices {extra_file}"))
    return prices


@dataclass(frozen=True)
class Gate:
    """A threshold: the session fails when ``bench.metric`` of a model is below ``threshold``.

    Attributes:
        bench: benchmark name.
        metric: metric name.
        threshold: the floor.
        model: the one model it applies to (None: every model).
        overridden: models with a gate of their own on this metric, which this default leaves alone.
    """

    bench: str
    metric: str
    threshold: float
    model: str | None = None
    overridden: frozenset[str] = frozenset()

    def applies_to(self, model: str) -> bool:
        """Whether this gate judges ``model``."""
        return model == self.model if self.model is not None else model not in self.overridden


def parse_threshold(text: str, origin: str = "--fail-under", *, model: str | None = None) -> Gate:
    """``BENCH.METRIC=VALUE`` -> a :class:`Gate`; the value must be a finite number."""
    name, sep, value = text.partition("=")
    bench, dot, metric = name.strip().partition(".")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not sep or not dot or not bench or not metric or number is None:
        raise UsageError(f"{origin} {text!r}: expected BENCH.METRIC=VALUE, e.g. ebs.ontology_score=0.7")
    if not math.isfinite(number):
        raise UsageError(f"{origin} {text!r}: the threshold must be a finite number, e.g. ebs.ontology_score=0.7")
    return Gate(bench, metric.strip(), number, model)


ANY_MODEL = "*"


def load_thresholds(tool: dict, cli: list[str] | tuple[str, ...]) -> list[Gate]:
    """Gates from ``[tool.fieldeval.thresholds]`` (of ``tool``), its per-model tables, then ``--fail-under``.

    ``[tool.fieldeval.thresholds."*"]`` (or a top-level key ``"BENCH.METRIC" = VALUE``)
    is the default for every model; a table ``[tool.fieldeval.thresholds."MODEL"]``
    overrides it for that model, metric by metric. ``--fail-under`` gates every
    model and wins over the file for the same metric.

    Example:
        >>> [g.model for g in load_thresholds({"thresholds": {"*": {"ebs.ontology_score": 0.8},
        ...     "ebs-baseline": {"ebs.ontology_score": 0.85}}}, [])]
        [None, 'ebs-baseline']
    """
    gates: dict[tuple[str, str, str | None], Gate] = {}
    table = tool.get("thresholds", {})
    if not isinstance(table, dict):
        raise UsageError("[tool.fieldeval.thresholds]: expected a table of \"BENCH.METRIC\" = VALUE")
    for name, value in table.items():
        if isinstance(value, dict):
            model = None if name == ANY_MODEL else name
            for metric, number in value.items():
                gate = parse_threshold(f"{metric}={number}", f'[tool.fieldeval.thresholds."{name}"]', model=model)
                gates[(gate.bench, gate.metric, model)] = gate
        else:
            gate = parse_threshold(f"{name}={value}", "[tool.fieldeval.thresholds]")
            gates[(gate.bench, gate.metric, None)] = gate
    for text in cli:
        gate = parse_threshold(text)
        gates = {k: g for k, g in gates.items() if (k[0], k[1]) != (gate.bench, gate.metric)}
        gates[(gate.bench, gate.metric, None)] = gate
    own: dict[tuple[str, str], set[str]] = {}
    for bench, metric, model in gates:
        if model is not None:
            own.setdefault((bench, metric), set()).add(model)
    return [dataclasses.replace(g, overridden=frozenset(own.get((g.bench, g.metric), ()))) if g.model is None else g
            for g in gates.values()]


def load_model_limits(tool: dict) -> dict[str, ModelLimits]:
    """Per-model ``concurrency`` and ``rpm`` from ``[tool.fieldeval.models."MODEL"]``."""
    out: dict[str, ModelLimits] = {}
    for model, table in (tool.get("models") or {}).items():
        if not isinstance(table, dict) or not set(table) <= {"concurrency", "rpm"} or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in table.values()
        ):
            raise UsageError(f'[tool.fieldeval.models."{model}"]: got {table!r}; give concurrency = N '
                             "and/or rpm = N with whole numbers of at least 1")
        out[model] = ModelLimits(**table)
    return out
