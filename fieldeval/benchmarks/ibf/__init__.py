"""Impact-based forecasting (IBF): reason from a forecast alert to impacts, uncertainty, actions and places.

The face of the benchmark: its options, its context and :data:`BENCHMARK`.
The corpus lives in ``corpus``, prompts in ``prompts``, MDS/TPR aggregation
in ``aggregate``, the scores table and ``fieldeval score ibf`` in ``tables``,
the offline ``ibf-floor`` in ``baseline``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fieldeval.benchmark import Benchmark, Chart, Dashboard, Metric, RunMeta, StoreColumns, lazy, option
from fieldeval.benchmarks.ibf.items import ITEMS
from fieldeval.benchmarks.ibf.versions import DEFAULT_VERSION
from fieldeval.errors import UsageError
from scorers.ibf import DIMENSIONS, JUDGE_SCHEMA

if TYPE_CHECKING:
    from fieldeval.benchmarks.ibf.corpus import IbfCorpus, IbfItem

__all__ = ["BENCHMARK", "IbfContext", "IbfOptions"]

DEFAULT_TEMPERATURE = 0.0
DEFAULT_MAX_TOKENS = 512
HEADLINE = (*DIMENSIONS, "mean_dimension_score", "threshold_pass_rate")


@dataclass(frozen=True)
class IbfOptions:
    """IBF options, parsed once per session."""

    corpus: str | None = field(default=None, metadata=option(
        "--ibf-corpus", metavar="PATH",
        help="JSON-lines IBF corpus to run (default: fixtures/ibf/<corpus version>.jsonl)"))
    corpus_version: str | None = field(default=None, metadata=option(
        "--corpus-version", metavar="TAG", help=f"IBF corpus version tag (default: {DEFAULT_VERSION})"))
    judge_model: str | None = field(default=None, metadata=option(
        "--judge-model", metavar="MODEL",
        help="llm model that grades IBF responses (default: the offline reference scorer)"))
    judge_graded: str | None = field(default=None, metadata=option(
        "--judge-graded", metavar="FILE",
        help="people's rubric grades (JSON lines, as `fieldeval agreement` reads them): measure --judge-model "
             "against them before any item runs, and keep the agreement with the run"))
    judge_min_agreement: float | None = field(default=None, metadata=option(
        "--judge-min-agreement", metavar="A", type=float,
        help="refuse to score when any dimension's Krippendorff alpha on --judge-graded is below A "
             "(default: [tool.fieldeval.judge] min_agreement, else no floor)"))
    judge_epochs: int = field(default=1, metadata=option(
        "--judge-epochs", metavar="K",
        help="ask the judge K times per response (each its own cache key) and score by the median (default: 1)"))
    temperature: float = field(default=DEFAULT_TEMPERATURE, metadata=option(
        "--ibf-temperature", metavar="T", help=f"temperature for IBF answers (default: {DEFAULT_TEMPERATURE})"))
    max_tokens: int = field(default=DEFAULT_MAX_TOKENS, metadata=option(
        "--ibf-max-tokens", metavar="N", help=f"generation budget for IBF answers (default: {DEFAULT_MAX_TOKENS})"))


@dataclass(frozen=True)
class IbfContext:
    """What an IBF eval item needs: the corpus, the judge (None: reference scorer) and generation options."""

    corpus: IbfCorpus
    judge_model: str | None
    temperature: float
    max_tokens: int
    judge_schema: dict
    judge_epochs: int = 1
    judge_agreement: dict | None = None  # the judge measured against people (--judge-graded)


def load(options: IbfOptions) -> IbfContext:
    """Check the options and the judge, and load the corpus."""
    from fieldeval.calls.client import resolve_model

    if options.max_tokens < 1:
        raise UsageError(f"--ibf-max-tokens {options.max_tokens}: must be at least 1")
    from fieldeval.benchmarks.ibf.corpus import load_corpus
    from fieldeval.benchmarks.ibf.judge import check_options, measure, min_agreement_setting

    judge = options.judge_model or None
    floor = min_agreement_setting(options.judge_min_agreement) if options.judge_graded or \
        options.judge_min_agreement is not None else None
    check_options(judge, options.judge_graded, floor, options.judge_epochs)
    if judge:
        resolve_model(judge, flag="--judge-model")
    corpus = load_corpus(options.corpus, options.corpus_version)
    measured = measure(judge, options.judge_graded, corpus, min_agreement=floor) if options.judge_graded else None
    return IbfContext(corpus, judge, options.temperature, options.max_tokens, JUDGE_SCHEMA,
                      judge_epochs=options.judge_epochs, judge_agreement=measured)


def _cases(context: IbfContext) -> tuple[IbfItem, ...]:
    return context.corpus.items


def _temperature(context: IbfContext) -> float:
    return context.temperature


def _hazard(item: IbfItem) -> str | None:
    """The item's cluster: the corpus's ``cluster`` when it declares one, else its hazard."""
    return item.cluster or item.hazard


def _run_meta(context: IbfContext) -> RunMeta:
    scoring = {"judge_agreement": context.judge_agreement} if context.judge_agreement else None
    return RunMeta(corpus_version=context.corpus.version, content_hash=f"sha256:{context.corpus.sha256}",
                   scoring=scoring)


BENCHMARK = Benchmark(
    name="ibf",
    title="impact-based forecasting: five rubric dimensions 0-4, MDS and TPR",
    metrics=(*(Metric(d, high=4.0) for d in DIMENSIONS), Metric("mean_dimension_score", high=4.0),
             Metric("threshold_pass_rate")),
    baseline="ibf-floor",
    options=IbfOptions,
    load=load,
    cases=_cases,
    aggregate=lazy("fieldeval.benchmarks.ibf.aggregate:aggregate"),
    write_outputs=lazy("fieldeval.benchmarks.ibf.tables:write_outputs"),
    summary_notes=lazy("fieldeval.benchmarks.ibf.aggregate:summary_notes"),
    register_cli=lazy("fieldeval.benchmarks.ibf.tables:register_cli"),
    run_meta=_run_meta,
    store_columns=StoreColumns(run=HEADLINE, response=tuple(DIMENSIONS), item_id="item_id"),
    cluster_key=_hazard,
    clusters_called="hazards",
    temperature=_temperature,
    estimators=lazy("fieldeval.benchmarks.ibf.aggregate:estimators"),
    audit=lazy("fieldeval.benchmarks.ibf.audit:audit"),
    items=ITEMS,
    lead="mean_dimension_score",  # the seed's headline figure (MDS), not its first dimension
    dashboard=Dashboard(charts=(
        Chart("radar", "IBF dimensions (0-4), one polygon per run", metrics=tuple(DIMENSIONS), high=4.0),
    )),
    corpus_versions=lazy("fieldeval.benchmarks.ibf.corpus:available_versions"),
)
