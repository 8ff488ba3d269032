"""env_broad_scale (NMDC): predict a biosample's ENVO biome; scored ontology-aware with oaklib.

The face of the benchmark: its options, its context and :data:`BENCHMARK`.
Cases and suites live in ``suite``, value sets in ``enums``, scored tables
and aggregation in ``tables``, commands in ``cli``, the offline
``ebs-baseline`` in ``baseline``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from fieldeval.benchmark import Benchmark, Chart, Dashboard, Metric, RunMeta, lazy, option
from fieldeval.benchmarks.ebs.items import ITEMS
from fieldeval.benchmarks.ebs.truth import TRUTH_RULES, TruthRule
from fieldeval.errors import UsageError

if TYPE_CHECKING:
    from fieldeval.benchmarks.ebs.suite import EbsCase, EbsSuite
    from scorers.ebs import EbsScore, OntologyIndex

__all__ = ["BENCHMARK", "EbsContext", "EbsOptions"]

DEFAULT_MAX_TOKENS = 128


@dataclass(frozen=True)
class EbsOptions:
    """env_broad_scale options, parsed once per session."""

    ontology: str | None = field(default=None, metadata=option(
        "--ontology", metavar="SELECTOR",
        help="oaklib selector of the ontology to score against (default: the pinned ENVO OBO)"))
    enum_dir: str | None = field(default=None, metadata=option(
        "--enum-dir", metavar="DIR", help="folder of <template>_env_broad_scale.tsv value sets (default: enum_data/)"))
    suite: str | None = field(default=None, metadata=option(
        "--ebs-suite", metavar="PATH", help="llm-matrix suite YAML to run (default: the pinned upstream suite)"))
    truth: TruthRule = field(default="curie", metadata=option(
        "--ebs-truth", choices=TRUTH_RULES, scoring_rule=True,
        help="score a case whose truth label is not its CURIE's label against the CURIE, as upstream does, or "
             "against the term the label names; closest: against whichever of the case's references (its truth, "
             "a conflict's two terms, --ebs-references) the answer is nearest (default: curie)"))
    references: str | None = field(default=None, metadata=option(
        "--ebs-references", metavar="FILE", scoring_rule=True,
        help="TSV of case_id and reference (label [CURIE]): more acceptable references of a case, for "
             "--ebs-truth closest"))
    max_tokens: int = field(default=DEFAULT_MAX_TOKENS, metadata=option(
        "--ebs-max-tokens", metavar="N",
        help=f"generation budget for EBS answers, sent to every model that takes one (default: {DEFAULT_MAX_TOKENS}; "
             "an answer is one 'label [CURIE]')"))


@dataclass(frozen=True)
class EbsContext:
    """What an EBS eval item needs: the suite, the ontology index and the value sets (and the ontology's selector,
    None for the pinned ENVO, and the truth rule)."""

    suite: EbsSuite
    index: OntologyIndex
    enums: dict[str, frozenset[str]]
    ontology: str | None = None
    truth_rule: TruthRule = "curie"
    max_tokens: int = DEFAULT_MAX_TOKENS
    extra_references: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @cached_property
    def _names(self) -> dict[str, str]:
        from fieldeval.benchmarks.ebs.truth import label_names

        return label_names(self.index)

    def truth(self, case: EbsCase) -> tuple[str, bool]:
        """``(the truth the case is scored against under the run's rule, truth_conflict)``."""
        from fieldeval.benchmarks.ebs.truth import scored_truth

        return scored_truth(case.ideal, index=self.index, names=self._names,
                            rule="curie" if self.truth_rule == "closest" else self.truth_rule)

    def validated(self, template: str, response: str) -> dict[str, object]:
        """``linkml_valid`` and ``linkml_message`` of an answer for its template's slot
        (:mod:`fieldeval.benchmarks.ebs.schema`)."""
        from fieldeval.benchmarks.ebs.schema import slot_validator

        valid, message = slot_validator().validate(response, template)
        return {"linkml_valid": valid, "linkml_message": message}

    def score(self, case: EbsCase, response: str) -> tuple[EbsScore, str, bool]:
        """``(the answer's score, the reference it was scored against, truth_conflict)`` under the run's rule."""
        from fieldeval.benchmarks.ebs.truth import closest, references
        from scorers.ebs import score_ebs

        truth, conflict = self.truth(case)
        allowed = self.enums.get(case.template)
        if self.truth_rule != "closest":
            return score_ebs(response, truth, index=self.index, allowed=allowed), truth, conflict
        candidates = references(case.ideal, self.extra_references.get(case.case_id, ()), index=self.index,
                                names=self._names)
        score, matched = closest(response, candidates, index=self.index, allowed=allowed)
        return score, matched, conflict


def load(options: EbsOptions) -> EbsContext:
    """Load the suite, the ontology index (cached on disk) and the value sets."""
    from fieldeval.benchmarks.ebs.enums import load_enums
    from fieldeval.benchmarks.ebs.suite import load_suite
    from fieldeval.ontology import OntologyUnreadable, load_index, unreadable_index

    if options.max_tokens < 1:
        raise UsageError(f"--ebs-max-tokens {options.max_tokens}: must be at least 1, e.g. {DEFAULT_MAX_TOKENS}")
    extra = {}
    if options.references is not None:
        from fieldeval.benchmarks.ebs.truth import read_references

        if options.truth != "closest":
            raise UsageError(f"--ebs-references {options.references}: scores only with --ebs-truth closest; "
                             "add it, or drop --ebs-references")
        extra = read_references(options.references)
    try:
        index = load_index(options.ontology)
    except OntologyUnreadable as error:  # unknown is not wrong: the run goes on, its ontology checks unknown
        index = unreadable_index(options.ontology or "the pinned ENVO", error)
    return EbsContext(load_suite(options.suite), index, load_enums(options.enum_dir),
                      options.ontology, options.truth, options.max_tokens, extra)


def _cases(context: EbsContext) -> tuple[EbsCase, ...]:
    return context.suite.cases


def _case_ids(context: EbsContext) -> list[str]:
    """The suite's pytest ids; read from its compact form without the prompts when it has one."""
    from fieldeval.benchmarks.ebs.suite import SuiteCases

    cases = context.suite.cases
    return cases.test_ids() if isinstance(cases, SuiteCases) else [case.test_id for case in cases]


def _matrix(context: EbsContext) -> dict | None:
    return context.suite.matrix


def _study(case: EbsCase) -> str | None:
    """The case's cluster: its study."""
    return case.study or None


def _run_meta(context: EbsContext) -> RunMeta:
    return RunMeta(corpus_version=context.suite.name, content_hash=f"sha256:{context.suite.sha256}")


BENCHMARK = Benchmark(
    name="ebs",
    title="env_broad_scale (NMDC): predict a biosample's ENVO biome",
    metrics=(
        Metric("ontology_score"),
        Metric("exact_match"),
        Metric("hierarchy_score"),
        Metric("in_template_enum"),
        Metric("parse_success"),
        Metric("curie_label_valid", headline=False),
        # beside upstream's score: what an answer failed to say and said falsely (information content, lower is
        # better; a threshold on them is a floor, so gate on ontology_score instead)
        Metric("missed_information", high=math.inf, headline=False),
        Metric("false_information", high=math.inf, headline=False),
        Metric("linkml_valid", headline=False),  # valid for its template's nmdc-submission-schema slot
    ),
    baseline="ebs-baseline",
    options=EbsOptions,
    load=load,
    cases=_cases,
    aggregate=lazy("fieldeval.benchmarks.ebs.tables:aggregate"),
    write_outputs=lazy("fieldeval.benchmarks.ebs.tables:write_outputs"),
    register_cli=lazy("fieldeval.benchmarks.ebs.cli:register_cli"),
    run_meta=_run_meta,
    cluster_key=_study,
    clusters_called="studies",
    matrix=_matrix,
    ids=_case_ids,
    run_facts=("ontology_version",),
    estimators=lazy("fieldeval.benchmarks.ebs.tables:estimators"),
    audit=lazy("fieldeval.benchmarks.ebs.audit:audit"),
    summary_notes=lazy("fieldeval.benchmarks.ebs.tables:summary_notes"),
    items=ITEMS,
    dashboard=Dashboard(charts=(
        Chart("groups", "EBS ontology score per stratum", key="per_stratum", metric="ontology_score",
              x_title="stratum", y_title="ontology score"),
        Chart("shares", "EBS relationship of the answer to the expected term", key="relationship_counts",
              x_title="relationship", y_title="share of items"),
        Chart("shares", "EBS relationship, siblings apart",
              key="relationship_detail_counts", x_title="relationship", y_title="share of items"),
        Chart("shares", "EBS label against its CURIE's term", key="label_mismatch_counts",
              x_title="label", y_title="share of parsed answers"),
    )),
)
