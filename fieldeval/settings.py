"""Project settings from ``[tool.fieldeval]`` in pyproject.toml: prices and thresholds."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

from fieldeval.errors import UsageError

# USD per million tokens; extend or override under [tool.fieldeval.prices] or with --prices FILE.
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
        if not isinstance(price, dict) or not set(price) <= {"input_per_mtok", "output_per_mtok"} or not all(
            isinstance(v, (int, float)) and v >= 0 for v in price.values()
        ):
            raise UsageError(f"{origin}: price of {model!r} is {price!r}; give "
                             "{input_per_mtok = USD, output_per_mtok = USD} with non-negative numbers")
        out[model] = {k: float(v) for k, v in price.items()}
    return out


def load_prices(tool: dict, extra_file: str | None = None) -> dict[str, dict[str, float]]:
    """Built-in prices, overridden by ``[tool.fieldeval.prices]`` (of ``tool``), then by a YAML file."""
    prices = dict(DEFAULT_PRICES)
    prices.update(_check_prices(tool.get("prices", {}), "[tool.fieldeval.prices]"))
    if extra_file:
        path = Path(extra_file)
        if not path.is_file():
            raise UsageError(f"--prices {extra_file}: no such file; pass a YAML mapping of model -> prices")
        try:
            table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as error:
            raise UsageError(f"--prices {extra_file}: not valid YAML ({error})") from None
        if not isinstance(table, dict):
            raise UsageError(f"--prices {extra_file}: expected a mapping of model -> prices")
        prices.update(_check_prices(table, f"--prices {extra_file}"))
    return prices


def parse_threshold(text: str, origin: str = "--fail-under") -> tuple[str, str, float]:
    """``BENCH.METRIC=VALUE`` -> (bench, metric, value)."""
    name, sep, value = text.partition("=")
    bench, dot, metric = name.strip().partition(".")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not sep or not dot or not bench or not metric or number is None:
        raise UsageError(f"{origin} {text!r}: expected BENCH.METRIC=VALUE, e.g. ebs.ontology_score=0.7")
    return bench, metric, number


def load_thresholds(tool: dict, cli: list[str]) -> list[tuple[str, str, float]]:
    """Thresholds from ``[tool.fieldeval.thresholds]`` (of ``tool``) then ``--fail-under`` (the latter win)."""
    gates: dict[tuple[str, str], float] = {}
    for name, value in tool.get("thresholds", {}).items():
        bench, metric, number = parse_threshold(f"{name}={value}", "[tool.fieldeval.thresholds]")
        gates[(bench, metric)] = number
    for text in cli:
        bench, metric, number = parse_threshold(text)
        gates[(bench, metric)] = number
    return [(bench, metric, value) for (bench, metric), value in gates.items()]
