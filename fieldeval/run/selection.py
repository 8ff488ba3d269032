"""What a session runs: its benchmarks, their contexts, cases and models, and the design (matrix and epochs).

Read from declared :class:`~fieldeval.benchmark.Benchmark` members only; built
once per process and shared by every other part of the session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fieldeval.benchmark import Benchmark, RunMeta, get_benchmark
from fieldeval.calls.cells import Combination, model_of
from fieldeval.errors import UsageError, exit_on_usage_error
from fieldeval.run.markers import eval_marker

if TYPE_CHECKING:
    import pytest

    from fieldeval.run.options import EngineOptions


class Selection:
    """The selected benchmarks of one session, with their contexts (loaded once) and their models or combinations."""

    def __init__(self, config: pytest.Config, options: EngineOptions, bench_options: Mapping[str, Any],
                 selected: list[str], tool: Mapping[str, Any]) -> None:
        self.config = config
        self.options = options
        self.bench_options = bench_options
        self.selected = selected
        self.tool = tool  # [tool.fieldeval] of pyproject.toml
        self.notices: list[str] = []  # the design's one-line notices, each once
        self._contexts: dict[str, Any] = {}
        self._designs: dict[str, list[Combination]] = {}

    def benchmark(self, name: str) -> Benchmark:
        """An installed benchmark; one line and exit 2 when it is not installed."""
        return exit_on_usage_error(lambda: get_benchmark(name))

    def context(self, name: str) -> Any:
        """The benchmark's context for this session's options, loaded once per process."""
        if name not in self._contexts:
            bench = self.benchmark(name)
            self._contexts[name] = exit_on_usage_error(lambda: bench.load(self.bench_options[name]))
        return self._contexts[name]

    def cases(self, name: str) -> Any:
        """The benchmark's cases (a sequence read by position)."""
        return self.benchmark(name).cases(self.context(name))

    def run_meta(self, name: str) -> RunMeta:
        """What the benchmark says of the data its context holds (corpus version, content hash, scoring)."""
        return self.benchmark(name).run_meta(self.context(name))

    def models_for(self, name: str) -> list:
        """The models a benchmark's items run against: ``--model`` values, else its offline baseline; with
        ``--matrix``, ``--temperature`` or ``--epochs``, the :class:`~fieldeval.run.matrix.Combination` s."""
        if self.options.designed:
            return list(self.design(name))
        return list(dict.fromkeys(self.options.models or [self.benchmark(name).baseline]))

    def design(self, name: str) -> list[Combination]:
        """The benchmark's combinations: the matrix (``--matrix``: the benchmark's declared grid, else
        ``[tool.fieldeval.run.matrix]``) with ``--model`` and ``--temperature`` overriding its lists, each
        repeated ``--epochs`` times."""
        from fieldeval.run.matrix import check_options, combinations, suite_grid, tool_grid, untempered

        if name not in self._designs:
            bench, context = self.benchmark(name), self.context(name)
            grid: dict[str, list] = {}
            if self.options.matrix:
                grid = suite_grid(bench.matrix(context)) or tool_grid(self.tool, name)
            models = list(self.options.models) or [str(m) for m in grid.get("model", [])] or [bench.baseline]
            if self.options.temperatures:
                grid["temperature"] = list(self.options.temperature_values)
            sampled = exit_on_usage_error(lambda: untempered(models)) if self.options.epochs > 1 else ()
            cells, notices = combinations(models, grid, epochs=self.options.epochs,
                                          default_temperature=float(bench.temperature(context)), sampled=sampled)
            exit_on_usage_error(lambda: check_options(cells))
            self._designs[name] = cells
            self.notices += [line for line in notices if line not in self.notices]
        return self._designs[name]

    def matrix_models(self) -> list[str]:
        """The distinct models of the selected benchmarks' combinations, in the matrix's order."""
        models: dict[str, None] = {}
        for name in self.selected:
            for cell in self.models_for(name):
                models.setdefault(model_of(cell), None)
        return list(models)

    def matrix_job_model(self) -> str | None:
        """``--matrix-job K``: the K-th model of the matrix (a usage error past the last), else None."""
        k = self.options.matrix_job
        if k is None:
            return None
        models = self.matrix_models()
        if k > len(models):
            raise UsageError(f"--matrix-job {k}: the matrix has {len(models)} model(s) ({', '.join(models)}); "
                             f"pass 1 to {len(models)}")
        return models[k - 1]

    def epochs_of(self, key: tuple[str, str]) -> int:
        """How many times each item of (benchmark, combination) is asked: ``--epochs`` K, else 1."""
        bench, model = key
        if not self.options.designed or bench not in self.selected:
            return 1
        return max(1, sum(1 for cell in self.design(bench) if str(cell) == model))

    def expected_items(self) -> int:
        """Eval items the selected benchmarks will collect at most: cases x models."""
        return sum(len(self.cases(name)) * len(self.models_for(name)) for name in self.selected)

    def case_of(self, item: pytest.Item) -> Any | None:
        """The case of an eval item (its parameter is the case's position in the benchmark's cases)."""
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("case") if callspec is not None else None
        if isinstance(param, int) and not isinstance(param, bool):
            return self.cases(eval_marker(item).kwargs["benchmark"])[param]
        return param

    def case_id_of(self, item: pytest.Item) -> str | None:
        """The case id of an eval item's case (its ``case_id``, else its ``id``), None when it has none."""
        case = self.case_of(item)
        found = getattr(case, "case_id", None) or getattr(case, "id", None)
        return None if found is None else str(found)

    def repeated_case_key(self, item: pytest.Item) -> str | None:
        """The case key of an epoch of a repeated item (``--epochs``), None for an item asked once."""
        combination = item.callspec.params.get("model") if hasattr(item, "callspec") else None
        case = self.case_of(item)
        if not isinstance(combination, Combination) or combination.epoch is None or case is None:
            return None
        return str(case.test_id)

    def scoring(self) -> dict[str, dict]:
        """``{bench: ...}``: what each selected benchmark measured about its scorer before the items ran."""
        return {name: dict(meta.scoring) for name in sorted(self.selected) if (meta := self.run_meta(name)).scoring}


__all__ = ["Selection"]
