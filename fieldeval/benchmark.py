"""The one face every benchmark shows the engine: :class:`Benchmark`.

A benchmark is a package that builds a :class:`Benchmark` and registers it
under the ``fieldeval.benchmarks`` entry-point group; the three built-in ones
(``ebs``, ``microbiorel``, ``ibf``) register there too. The engine never
probes a module for optional names: every member is declared here, with its
default.

The data flow through a benchmark::

    options (parsed once) -> load() -> context -> cases(context) -> pytest items
    item: client.complete() -> scorer -> record(row)
    rows -> aggregate() -> report, store (run_meta, store_columns) -> write_outputs(), summary_notes()
    case -> cluster_key(), stratum_key(): how the cases were drawn (each row carries them; every ci95
    resamples whole clusters); rows -> estimators(): the metrics paired comparisons and power use
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from fieldeval.errors import UsageError

ENTRY_POINT_GROUP = "fieldeval.benchmarks"

Context = TypeVar("Context")


class Case(Protocol):
    """What a case must offer the engine: a readable pytest id."""

    @property
    def test_id(self) -> str:
        """The id pytest shows for the case, e.g. ``forest_biome-case017``."""


@dataclass(frozen=True)
class CliGroups:
    """Where a benchmark adds its commands: ``fieldeval score <name>``, ``fieldeval generate <name>``, or top level."""

    score: argparse._SubParsersAction
    generate: argparse._SubParsersAction
    top: argparse._SubParsersAction


@dataclass(frozen=True)
class Metric:
    """A metric a benchmark reports and a threshold may gate on.

    Attributes:
        name: the report key, e.g. ``ontology_score``.
        low: the smallest value the metric takes (a threshold below it is a usage error).
        high: the largest value it takes.
        headline: shown in the terminal and Markdown tables.
    """

    name: str
    low: float = 0.0
    high: float = 1.0
    headline: bool = True


@dataclass(frozen=True)
class RunMeta:
    """What the store keeps about the data a run used.

    Attributes:
        corpus_version: the suite, corpus or split tag, e.g. ``ibf-v1.0``.
        content_hash: ``sha256:<hex>`` of the data the cases came from.
        scoring: what the benchmark measured about its own scorer before the items ran (IBF: the judge's
            agreement with people), kept in the report's ``scoring`` and the stored run's settings.
    """

    corpus_version: str | None = None
    content_hash: str | None = None
    scoring: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Finding:
    """One defect of a benchmark's gold data, found by its ``audit``.

    Attributes:
        kind: what kind of defect, e.g. ``truth_label_mismatch``.
        message: one line: what, how many, and why it matters.
        count: how many cases it affects (``len(cases)``).
        cases: the affected case ids, in the suite's order.
    """

    kind: str
    message: str
    count: int
    cases: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The finding as JSON: ``{kind, message, count, cases}``."""
        return {"kind": self.kind, "message": self.message, "count": self.count, "cases": list(self.cases)}


@dataclass(frozen=True)
class StoreColumns:
    """Benchmark-specific columns the run store fills beside its generic ones.

    Attributes:
        run: aggregate metrics copied into columns of ``evaluations`` (point values), e.g. the
            IBF seed's ``mean_dimension_score``; only for a run that holds this benchmark alone.
        response: row keys copied into integer columns of ``evaluation_responses``.
        item_id: the row key that names the corpus item (``case_id`` when absent).
    """

    run: tuple[str, ...] = ()
    response: tuple[str, ...] = ()
    item_id: str = "case_id"


@dataclass(frozen=True)
class Chart:
    """One chart the dashboard draws from each run's report entry of the benchmark.

    Every value is drawn with its ci95. Kinds:

    - ``groups``: ``entry[key]`` is ``{group: {metric: {value, ci95}}}``; bars of ``metric`` per group,
      one bar per run (e.g. EBS ``per_stratum``).
    - ``shares``: ``entry[key]`` is ``{name: count}``; each name's share of the items, with a Wilson
      ci95 (e.g. EBS ``relationship_counts``).
    - ``classes``: ``entry[key]`` is ``{class: {metric: value, metric + "_ci95": [lo, hi], "support": n}}``
      (e.g. MicrobioRel per-class F1).
    - ``radar``: ``metrics`` of the entry on one polar chart, beside a table of their intervals.
    - ``matrix``: ``entry[key]`` is ``{labels, columns, matrix}``; one heat map per run.

    Attributes:
        kind: one of the kinds above.
        title: the chart's title.
        key: the report key the chart reads (not for ``radar``).
        metric: the metric drawn per group or class.
        metrics: the metrics of a ``radar``.
        x_title: the x axis title.
        y_title: the y axis title.
        low: the value axis' lower end.
        high: the value axis' upper end.
    """

    kind: str
    title: str
    key: str = ""
    metric: str = ""
    metrics: tuple[str, ...] = ()
    x_title: str = ""
    y_title: str = ""
    low: float = 0.0
    high: float = 1.0


@dataclass(frozen=True)
class Dashboard:
    """How the service's dashboard shows the benchmark, besides the headline chart every benchmark gets.

    Attributes:
        charts: the benchmark's own charts, in page order.
    """

    charts: tuple[Chart, ...] = ()


class lazy:  # noqa: N801  (used as a function: ``load=lazy("pkg.module:load")``)
    """A callable standing for ``module:attr``, imported at its first call.

    A benchmark's face names its functions this way so that reading the face (as the pytest plugin does to
    register options, in every pytest session of the environment) imports none of them.
    """

    __slots__ = ("ref", "_target")

    def __init__(self, ref: str) -> None:
        module, sep, attr = ref.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"lazy({ref!r}): name a module and an attribute, e.g. 'pkg.tables:aggregate'")
        self.ref = ref
        self._target: Callable[..., Any] | None = None

    @property
    def target(self) -> Callable[..., Any]:
        """The function itself (imported now, if it was not yet)."""
        if self._target is None:
            import importlib

            module, _, attr = self.ref.partition(":")
            self._target = getattr(importlib.import_module(module), attr)
        return self._target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy({self.ref!r})"


def _no_explanation(row: Mapping[str, Any]) -> str:
    return ""


Pairs = Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]  # (base row, run row) of each paired item


@dataclass(frozen=True)
class ItemDiff:
    """How the benchmark's items compare between two runs (``fieldeval runs diff``, the API, the dashboard).

    Attributes:
        score: a stored row -> its headline score (items are listed by its change), None when unscored.
        binary_metric: the metric ``binary`` reads, whose flips get an exact McNemar test.
        binary: a stored row -> right (True) or wrong (False) on ``binary_metric``, None when unscored.
        transitions: the paired rows -> ``[{"from", "to", "count"}]`` of the item outcomes; entries may add
            ``class`` (grouped by it) or ``dimension`` (grouped, with the moves up and down counted).
    """

    score: Callable[[Mapping[str, Any]], float | None]
    binary_metric: str
    binary: Callable[[Mapping[str, Any]], bool | None]
    transitions: Callable[[Pairs], list[dict[str, Any]]]


@dataclass(frozen=True)
class ItemView:
    """How one stored item of the benchmark reads in ``runs items``, ``runs item`` and the service.

    Attributes:
        scores: the row keys shown as the item's score columns (and filtered on by ``--where``), in order;
            empty: the benchmark's metrics.
        explain: a stored row (the keys its item recorded) -> one or two plain sentences saying why it scored
            what it did.
        diff: how two runs' items compare (``fieldeval runs diff``); None: the benchmark's items are not diffed.
    """

    scores: tuple[str, ...] = ()
    explain: Callable[[Mapping[str, Any]], str] = _no_explanation
    diff: ItemDiff | None = None


def option(flag: str, *, help: str, metavar: str | None = None, choices: Sequence[str] | None = None,
           type: type | None = None, shared: bool = False, scoring_rule: bool = False) -> Any:
    """Field metadata for a benchmark option: ``ontology: str | None = option("--ontology", help=...)``.

    The default becomes the option's, and its type (int, float, str) too unless
    ``type`` is given (for a None default); a tuple default makes the option
    repeatable. ``shared`` marks a flag more than one benchmark declares
    (e.g. ``--corpus-version``): the first declaration holds the value for all.
    ``scoring_rule`` marks an option that changes what a score means (e.g. ``--ebs-truth``):
    ``fieldeval runs compare`` refuses runs scored under different values unless told.
    """
    return {"flag": flag, "help": help, "metavar": metavar, "choices": tuple(choices) if choices else None,
            "type": type, "shared": shared, "scoring_rule": scoring_rule}


def _no_notes(models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return []


def _no_meta(context: Any) -> RunMeta:
    return RunMeta()


def _no_cluster(case: Any) -> str | None:
    return None


def _no_findings(context: Any) -> Sequence[Finding]:
    return ()


def _no_grid(context: Any) -> Mapping[str, Any] | None:
    return None


def _zero_temperature(context: Any) -> float:
    return 0.0


@dataclass(frozen=True)
class Benchmark(Generic[Context]):
    """A benchmark as the engine sees it.

    Attributes:
        name: short name used in reports, thresholds and the eval module's marker, e.g. ``ebs``.
        title: one line for ``pytest --help`` and listings.
        metrics: the metrics ``aggregate`` reports; thresholds may gate on these.
        baseline: the offline llm model id items run against when no ``--model`` is given.
        options: a frozen dataclass whose fields carry :func:`option` metadata; the plugin
            adds each as a pytest option and builds one instance per session.
        load: options -> context: read and check the cases and data once per process;
            raises :class:`UsageError` for a user mistake.
        cases: context -> the cases, in a stable order; each becomes one item per model.
        aggregate: ``(rows, seed=, resamples=)`` -> the model's report entry.
        write_outputs: ``(rows, folder)`` -> the scored tables written under ``folder``.
        summary_notes: models' report entries -> lines printed under the terminal table.
        register_cli: :class:`CliGroups` -> adds the benchmark's commands, e.g. ``fieldeval score <name>``.
        run_meta: context -> the corpus version and content hash the store keeps.
        store_columns: columns of the store's tables this benchmark fills.
        warm: ``(options, models)`` -> one-off work before collection on the controller
            (e.g. training an offline baseline once rather than once per xdist worker).
        cluster_key: case -> the cluster it was drawn with (a study, a paragraph, a hazard), or None for
            an independent case. The engine records it on each row as ``cluster``; every ci95 then
            resamples whole clusters (``--cluster-by none``: items).
        stratum_key: case -> its stratum when the suite was drawn per stratum (clusters are resampled
            within each), or None: no strata.
        estimators: rows -> ``{metric: fieldeval.stats.Estimator}``, each metric as a statistic of per-row
            data under item weights; paired differences, the regression gate and ``fieldeval power`` use it.
            None: the headline metrics that are row keys, as means.
        audit: context -> the findings (:class:`Finding`) in the gold data the context holds, printed by
            ``fieldeval audit <name>`` and kept in every run's report under ``evals.audit.<name>``; none by default.
        dashboard: the charts the service's dashboard draws for this benchmark.
        corpus_versions: () -> the corpus versions the service offers; when given, an evaluation
            started through the service names one (passed as the option field ``corpus_version``).
        items: how the run's items read one by one: their score columns and the explanation of each.
        lead: the one metric a single figure of the benchmark stands for (``fieldeval power``'s default);
            empty: the first headline metric.
        clusters_called: what its clusters are, in the plural (``studies``): the words that name an interval's
            question (:func:`fieldeval.stats.wording.interval_names`).
        matrix: context -> the llm-matrix ``matrix:`` block its cases came with (``--matrix`` runs it), or None.
        temperature: context -> the temperature its items are asked at when no design sets one.
        ids: context -> every case's pytest id in order, where the context can say without reading each case;
            None: each case's ``test_id``.
        run_facts: the row keys whose one value across a run is a fact of the run (EBS: ``ontology_version``),
            reported at the top of ``report["evals"]``.
    """

    name: str
    title: str
    metrics: tuple[Metric, ...]
    baseline: str
    options: type
    load: Callable[[Any], Context]
    cases: Callable[[Context], Sequence[Case]]
    aggregate: Callable[..., dict]
    write_outputs: Callable[[list[dict], Path], list[Path]]
    summary_notes: Callable[[Mapping[str, Mapping[str, Any]]], list[str]] = _no_notes
    register_cli: Callable[[CliGroups], None] | None = None
    run_meta: Callable[[Context], RunMeta] = _no_meta
    store_columns: StoreColumns = field(default_factory=StoreColumns)
    warm: Callable[[Any, Sequence[str]], None] | None = None
    cluster_key: Callable[[Any], str | None] = _no_cluster
    stratum_key: Callable[[Any], str | None] | None = None
    estimators: Callable[[Sequence[dict]], Mapping[str, Any]] | None = None
    audit: Callable[[Context], Sequence[Finding]] = _no_findings

    def metric_estimators(self, rows: Sequence[dict]) -> Mapping[str, Any]:
        """``{metric: Estimator}`` for ``rows``: the declared ``estimators``, else headline row keys as means."""
        if self.estimators is not None:
            return self.estimators(rows)
        from fieldeval.stats import Estimator

        return {m.name: Estimator.mean([r.get(m.name) for r in rows], (m.low, m.high)) for m in self.metrics
                if m.headline
                and rows and all(isinstance(r.get(m.name), int | float | None) for r in rows)
                and any(r.get(m.name) is not None for r in rows)}
    dashboard: Dashboard = field(default_factory=Dashboard)
    corpus_versions: Callable[[], Sequence[str]] | None = None
    items: ItemView = field(default_factory=ItemView)
    lead: str = ""
    clusters_called: str = "clusters"
    matrix: Callable[[Context], Mapping[str, Any] | None] = _no_grid
    temperature: Callable[[Context], float] = _zero_temperature
    ids: Callable[[Context], Sequence[str]] | None = None
    run_facts: tuple[str, ...] = ()

    def case_ids(self, context: Context) -> list[str]:
        """Every case's pytest id, in the cases' order."""
        if self.ids is not None:
            return [str(i) for i in self.ids(context)]
        return [str(c.test_id) for c in self.cases(context)]

    @property
    def headline(self) -> list[str]:
        """The metrics shown in the summary tables."""
        return [m.name for m in self.metrics if m.headline]

    @property
    def lead_metric(self) -> str:
        """The metric a single figure of the benchmark stands for: ``lead``, else the first headline metric."""
        return self.lead or self.headline[0]

    def metric(self, name: str) -> Metric:
        """The declared metric ``name``; a usage error naming the choices when there is none."""
        for candidate in self.metrics:
            if candidate.name == name:
                return candidate
        raise UsageError(f"threshold {self.name}.{name}: unknown metric {name!r}; "
                         f"choose from {', '.join(m.name for m in self.metrics)}")

    def option_fields(self) -> list[dataclasses.Field]:
        """The fields of the options dataclass, each with its :func:`option` metadata."""
        return [f for f in dataclasses.fields(self.options) if "flag" in f.metadata]


@lru_cache(maxsize=1)
def benchmarks() -> dict[str, Benchmark]:
    """Every installed benchmark by name, from the ``fieldeval.benchmarks`` entry points."""
    from importlib.metadata import entry_points

    found: dict[str, Benchmark] = {}
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        bench = point.load()
        if not isinstance(bench, Benchmark):
            raise TypeError(f"entry point {point.name} = {point.value} is not a fieldeval Benchmark")
        found.setdefault(bench.name, bench)
    return found


def get_benchmark(name: str) -> Benchmark:
    """The installed benchmark ``name``; a usage error naming the installed ones when absent."""
    known = benchmarks()
    if name not in known:
        raise UsageError(f"benchmark {name!r} is not installed; choose from {', '.join(sorted(known))}")
    return known[name]
