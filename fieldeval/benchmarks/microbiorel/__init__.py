"""MicrobioRel (El Khettari et al. 2025): classify the relation between two entities in a microbiome paragraph.

The face of the benchmark: its options, its context and :data:`BENCHMARK`.
Cases live in ``cases``, prompts in ``prompts``, aggregation, the
predictions table and ``fieldeval score re`` in ``tables``, the offline
``re-baseline`` in ``baseline``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fieldeval.benchmark import Benchmark, Chart, Dashboard, Metric, RunMeta, lazy, option
from fieldeval.benchmarks.microbiorel.items import ITEMS
from fieldeval.errors import UsageError

if TYPE_CHECKING:
    from fieldeval.benchmarks.microbiorel.cases import RelationCase
    from fieldeval.benchmarks.microbiorel.prompts import Candidates, Mode

__all__ = ["BENCHMARK", "MicrobioRelContext", "MicrobioRelOptions"]

BASELINE = "re-baseline"
DEFAULT_MAX_TOKENS = 64


@dataclass(frozen=True)
class MicrobioRelOptions:
    """MicrobioRel options, parsed once per session."""

    candidates: Candidates = field(default="all", metadata=option(
        "--re-candidates", choices=["all", "filtered"],
        help="MicrobioRel classes offered in the prompt: all 23, or the pair's filtered_labels (default: all)"))
    mode: Mode = field(default="direct", metadata=option(
        "--re-mode", choices=["direct", "summarize"],
        help="MicrobioRel prompting: classify directly, or summarise the pair first as the paper does "
             "(default: direct)"))
    max_tokens: int = field(default=DEFAULT_MAX_TOKENS, metadata=option(
        "--re-max-tokens", metavar="N",
        help=f"generation budget for each MicrobioRel call (the relation, and the summary with --re-mode summarize), "
             f"sent to every model that takes one (default: {DEFAULT_MAX_TOKENS})"))


@dataclass(frozen=True)
class MicrobioRelContext:
    """What a MicrobioRel eval item needs: the test cases and the run's options."""

    cases: tuple[RelationCase, ...]
    mode: Mode
    candidates: Candidates
    max_tokens: int = DEFAULT_MAX_TOKENS

    def classes_for(self, case: RelationCase) -> tuple[str, ...]:
        """The classes the prompt offers for this case."""
        from fieldeval.benchmarks.microbiorel.prompts import candidate_classes

        return candidate_classes(case, self.candidates)


def load(options: MicrobioRelOptions) -> MicrobioRelContext:
    """Load the test split."""
    from fieldeval.benchmarks.microbiorel.cases import load_split

    if options.max_tokens < 1:
        raise UsageError(f"--re-max-tokens {options.max_tokens}: must be at least 1, e.g. {DEFAULT_MAX_TOKENS}")
    return MicrobioRelContext(load_split("test"), mode=options.mode, candidates=options.candidates,
                              max_tokens=options.max_tokens)


def warm(options: MicrobioRelOptions, models: Sequence[str]) -> None:
    """Train or load the offline baseline once on the controller, not once per xdist worker."""
    if BASELINE in models:
        from fieldeval.benchmarks.microbiorel.baseline import load_model

        load_model()


def _cases(context: MicrobioRelContext) -> tuple[RelationCase, ...]:
    return context.cases


def _paragraph(case: RelationCase) -> str | None:
    """The case's cluster: the paragraph its pair comes from (``annotation_id``)."""
    return case.annotation_id or None


def _run_meta(context: MicrobioRelContext) -> RunMeta:
    """The test split's pinned version and content hash."""
    from fieldeval.benchmarks.microbiorel.cases import SPLIT_FILES
    from fieldeval.data import REGISTRY

    entry = REGISTRY[SPLIT_FILES["test"]]
    commit = entry.url.split("/MicrobioRel/")[1].split("/")[0][:7]
    return RunMeta(corpus_version=f"microbiorel-test@{commit}", content_hash=f"sha256:{entry.sha256}")


BENCHMARK = Benchmark(
    name="microbiorel",
    title="MicrobioRel: relation between two entities in a microbiome paragraph",
    metrics=(
        Metric("weighted_f1"),
        Metric("macro_f1"),
        Metric("accuracy"),
        Metric("parse_rate"),
        Metric("weighted_precision", headline=False),
        Metric("weighted_recall", headline=False),
    ),
    baseline=BASELINE,
    options=MicrobioRelOptions,
    load=load,
    cases=_cases,
    aggregate=lazy("fieldeval.benchmarks.microbiorel.tables:aggregate"),
    write_outputs=lazy("fieldeval.benchmarks.microbiorel.tables:write_outputs"),
    summary_notes=lazy("fieldeval.benchmarks.microbiorel.tables:summary_notes"),
    register_cli=lazy("fieldeval.benchmarks.microbiorel.tables:register_cli"),
    run_meta=_run_meta,
    warm=warm,
    cluster_key=_paragraph,
    clusters_called="paragraphs",
    estimators=lazy("fieldeval.benchmarks.microbiorel.tables:estimators"),
    audit=lazy("fieldeval.benchmarks.microbiorel.audit:audit"),
    items=ITEMS,
    dashboard=Dashboard(charts=(
        Chart("classes", "MicrobioRel F1 per relation class", key="per_class", metric="f1",
              x_title="relation class", y_title="F1"),
        Chart("matrix", "MicrobioRel confusion matrix", key="confusion_matrix", x_title="predicted",
              y_title="gold"),
    )),
)
