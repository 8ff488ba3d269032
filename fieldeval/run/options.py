"""Options parsed once: the engine's and each benchmark's, as frozen dataclasses kept on the pytest config.

Every option is declared as a dataclass field carrying
:func:`fieldeval.benchmark.option` metadata; :func:`add_options` turns the
fields into pytest options (one ``pytest --help`` group for the engine, one
per benchmark) and :func:`parse_options` builds the frozen instance from the
parsed command line. Nothing else reads ``config.getoption``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from fieldeval.benchmark import benchmarks, option
from fieldeval.defaults import (CACHE_MODES, DEFAULT_CALL_TIMEOUT_S, DEFAULT_CONCURRENCY, DEFAULT_MAX_ANSWER_BYTES,
                                DEFAULT_BATCH_MAX_WAIT_S, DEFAULT_REPORT, DEFAULT_RESAMPLES, DEFAULT_RETRIES, DEFAULT_SEED,
                                ITEMS_PER_WORKER)
from fieldeval.errors import UsageError
RUN_ID = re.compile(r"run_[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class EngineOptions:
    """The engine's options (group *fieldeval* in ``pytest --help``)."""

    models: tuple[str, ...] = field(default=(), metadata=option(
        "--model", metavar="MODEL",
        help="llm model id or alias to evaluate; repeat for several (default: the benchmark's offline baseline)"))
    matrix: bool = field(default=False, metadata=option(
        "--matrix", help="run every combination of the suite's matrix: its models and hyperparameters (EBS suites; "
                         "other benchmarks: [tool.fieldeval.run.matrix]); --model and --temperature override its lists"))
    temperatures: tuple[str, ...] = field(default=(), metadata=option(
        "--temperature", metavar="T",
        help="sampling temperature to run every model at; repeat for several (overrides the matrix's list)"))
    epochs: int = field(default=1, metadata=option(
        "--epochs", metavar="K",
        help="ask each item K times (each answer cached apart) and score it by the mean (default: 1)"))
    matrix_job: int | None = field(default=None, metadata=option(
        "--matrix-job", metavar="K", type=int,
        help="run only the K-th model of the matrix (1-based), as shard K of as many shards as it has models: "
             "one CI job per model, merged with `fieldeval runs merge` (with --run-group)"))
    concurrency: int = field(default=DEFAULT_CONCURRENCY, metadata=option(
        "--concurrency", metavar="C",
        help=f"most model calls in flight for the whole session, shared by xdist workers; each HTTP endpoint gets as "
             f"many as its latency shows it can take, up to this (default: {DEFAULT_CONCURRENCY})"))
    fixed_concurrency: bool = field(default=False, metadata=option(
        "--fixed-concurrency",
        help="send every endpoint --concurrency calls at once from the start, not the number its latency allows"))
    workers_as_given: bool = field(default=False, metadata=option(
        "--workers-as-given",
        help="start pytest-xdist's -n workers as given (default: an eval session starts as many as its items can "
             f"use: one per CPU and per {ITEMS_PER_WORKER:,} items at most, none below two)"))
    batch: bool = field(default=False, metadata=option(
        "--batch",
        help="send each model's uncached calls as provider batches (OpenAI's Batch API, Anthropic's Message "
             "Batches) at about half the price; minutes to hours of waiting; other models run live"))
    batch_max_wait: float = field(default=DEFAULT_BATCH_MAX_WAIT_S, metadata=option(
        "--batch-max-wait", metavar="S", type=float,
        help=f"seconds to wait for the batches (default: {DEFAULT_BATCH_MAX_WAIT_S:g}); items still waiting then "
             "fail, and the same command collects their batches later without submitting them again"))
    batch_size: int | None = field(default=None, metadata=option(
        "--batch-size", metavar="N", type=int,
        help="at most N requests per batch (default: the provider's limit: 50,000 OpenAI, 100,000 Anthropic)"))
    call_timeout: float = field(default=DEFAULT_CALL_TIMEOUT_S, metadata=option(
        "--call-timeout", metavar="S",
        help=f"seconds before a model call counts as a transient failure (default: {DEFAULT_CALL_TIMEOUT_S:g})"))
    max_answer_bytes: int = field(default=DEFAULT_MAX_ANSWER_BYTES, metadata=option(
        "--max-answer-bytes", metavar="N",
        help=f"largest model answer read, in bytes; a larger one is an error, never scored or cached "
             f"(default: {DEFAULT_MAX_ANSWER_BYTES})"))
    retries: int = field(default=DEFAULT_RETRIES, metadata=option(
        "--retries", metavar="N",
        help=f"retries of a transiently failed call, with backoff and Retry-After (default: {DEFAULT_RETRIES})"))
    rpm: int | None = field(default=None, metadata=option(
        "--rpm", metavar="N", type=int,
        help="requests per minute per model, a whole number from 1, shared by xdist workers (default: unlimited)"))
    cache: str = field(default="use", metadata=option(
        "--cache", choices=CACHE_MODES,
        help="response cache: use (default), refresh, off, or replay (fail items with no cached response)"))
    cache_path: str | None = field(default=None, metadata=option(
        "--cache-path", metavar="PATH", help="response cache file (default: reports/responses.sqlite)"))
    prices: str | None = field(default=None, metadata=option(
        "--prices", metavar="YAML", help="extra model prices (USD per million tokens) beside [tool.fieldeval.prices]"))
    fail_under: tuple[str, ...] = field(default=(), metadata=option(
        "--fail-under", metavar="BENCH.METRIC=VALUE", help="fail the session when a metric is below VALUE (repeatable)"))
    gate_on: str = field(default="point", metadata=option(
        "--gate-on", choices=("point", "lower"), help="gate on the point value (default) or the ci95 lower bound"))
    seed: int = field(default=DEFAULT_SEED, metadata=option(
        "--seed", metavar="N",
        help=f"bootstrap seed, also sent as the sampling seed to every model that takes one "
             f"(default: {DEFAULT_SEED})"))
    resamples: int = field(default=DEFAULT_RESAMPLES, metadata=option(
        "--bootstrap-resamples", metavar="N", help=f"bootstrap resamples for ci95 (default: {DEFAULT_RESAMPLES})"))
    report: str | None = field(default=None, metadata=option(
        "--eval-report", metavar="PATH", help=f"where the JSON report goes (default: {DEFAULT_REPORT} when evals run)"))
    reports_dir: str | None = field(default=None, metadata=option(
        "--reports-dir", metavar="DIR", help="folder for scored tables (default: reports/ under the project root)"))
    store: str | None = field(default=None, metadata=option(
        "--store", metavar="URL", help="run store: a SQLite path or postgresql://... URL (default: $FIELDEVAL_STORE "
                                       "or reports/fieldeval.db); 'none' stores nothing"))
    run_label: str | None = field(default=None, metadata=option(
        "--run-label", metavar="LABEL", help="human-readable tag of this run in the store"))
    run_id: str | None = field(default=None, metadata=option(
        "--run-id", metavar="RUN_ID", help="id of the stored run (default: run_ and 8 random hex digits)"))
    run_group: str | None = field(default=None, metadata=option(
        "--run-group", metavar="NAME",
        help="tie this run to the other shards of one sharded run (pytest-split --splits N --group K); "
             "merge them with `fieldeval runs merge NAME` (default: $GITHUB_RUN_ID when set)"))
    progress_file: str | None = field(default=None, metadata=option(
        "--progress-file", metavar="PATH",
        help="keep a JSON file of items planned, done and errored up to date while the run goes"))
    summary_md: str | None = field(default=None, metadata=option(
        "--summary-md", metavar="PATH", help="write a Markdown summary here (default: $GITHUB_STEP_SUMMARY when set)"))
    cluster_by: str = field(default="benchmark", metadata=option(
        "--cluster-by", choices=("benchmark", "none"),
        help="ci95 resamples whole clusters as each benchmark declares them (default: benchmark), or items (none)"))
    baseline_run: str | None = field(default=None, metadata=option(
        "--baseline-run", metavar="RUN_ID",
        help="fail the session when a headline metric is worse than this stored run's: a drop beyond "
             "-tolerance whose one-sided p, Holm-adjusted over every metric the gate checks, is below 0.05"))
    gate_interval: str = field(default="clusters", metadata=option(
        "--gate-interval", choices=("clusters", "within"),
        help="the question the --baseline-run gate and --gate-on lower answer: on new clusters (studies, "
             "paragraphs, hazards; default) or within: on more items from these clusters (ci95_within)"))
    regression_tolerance: float = field(default=0.0, metadata=option(
        "--regression-tolerance", metavar="D", type=float,
        help="a drop the --baseline-run gate tolerates, in the metric's units (default: 0)"))
    max_errors: int | None = field(default=None, metadata=option(
        "--max-errors", metavar="N", type=int,
        help="let gates pass a partial run with at most N errored items (default: a partial run fails its gates)"))
    resume: str | None = field(default=None, metadata=option(
        "--resume", metavar="RUN_ID",
        help="run only this stored run's missing and errored items and complete the same run"))

    @property
    def temperature_values(self) -> tuple[float, ...]:
        """``--temperature`` values as numbers, in order, once each."""
        from fieldeval.run.matrix import parse_temperature

        return tuple(dict.fromkeys(parse_temperature(t) for t in self.temperatures))

    @property
    def designed(self) -> bool:
        """Whether items run on combinations (``--matrix``, ``--temperature`` or ``--epochs`` above 1)."""
        return self.matrix or bool(self.temperatures) or self.epochs > 1

    def __post_init__(self) -> None:
        for flag, value, least in [("--bootstrap-resamples", self.resamples, 1), ("--retries", self.retries, 0),
                                   ("--concurrency", self.concurrency, 1), ("--rpm", self.rpm, 1),
                                   ("--seed", self.seed, 0), ("--epochs", self.epochs, 1),
                                   ("--matrix-job", self.matrix_job, 1), ("--batch-size", self.batch_size, 1)]:
            if value is not None and value < least:
                raise UsageError(f"{flag} {value}: must be at least {least}")
        from fieldeval.run.matrix import parse_temperature

        for text in self.temperatures:
            parse_temperature(text)
        from fieldeval.run.gates import check_gate_options

        check_gate_options(self.max_errors, self.regression_tolerance)
        if self.resume and self.run_id and self.resume != self.run_id:
            raise UsageError(f"--resume {self.resume} with --run-id {self.run_id}: a resumed run keeps its id; "
                             "drop --run-id")
        if self.seed >= 2**63:
            raise UsageError(f"--seed {self.seed}: too large; pass a seed below 2**63")
        if not 0 < self.batch_max_wait < math.inf:
            raise UsageError(f"--batch-max-wait {self.batch_max_wait:g}: must be a number of seconds above 0")
        if self.batch and self.cache in ("off", "replay"):
            raise UsageError(f"--batch with --cache {self.cache}: a batch's answers and its id are kept in the "
                             "response cache; use --cache use (the default) or refresh")
        if not 0 < self.call_timeout < math.inf:
            raise UsageError(f"--call-timeout {self.call_timeout:g}: must be a number of seconds above 0")
        if self.run_id is not None and not RUN_ID.fullmatch(self.run_id):
            raise UsageError(f"--run-id {self.run_id!r}: not a run id; use run_ and 1-64 letters, digits, '_' or '-' "
                             "(e.g. run_nightly_2026_05_29); it names a folder under reports/runs/")
        if self.store is not None and not self.store.strip():
            raise UsageError("--store '': empty; pass a SQLite path, a postgresql:// URL, or 'none' to store nothing")
        for flag, value in (("--eval-report", self.report), ("--reports-dir", self.reports_dir),
                            ("--progress-file", self.progress_file), ("--summary-md", self.summary_md),
                            ("--cache-path", self.cache_path), ("--run-label", self.run_label),
                            ("--run-group", self.run_group)):
            if value is not None and (not value.strip() or any(ord(c) < 32 for c in value)):
                raise UsageError(f"{flag} {value!r}: empty or has control characters; pass a plain value")


def _dest(prefix: str, name: str) -> str:
    return f"fieldeval_{prefix}_{name}" if prefix else f"fieldeval_{name}"


def _add_fields(group, cls: type, prefix: str, seen: set[str]) -> None:
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if "flag" not in meta or meta["flag"] in seen:
            continue
        seen.add(meta["flag"])
        kwargs: dict[str, Any] = {"dest": _dest(prefix, f.name), "help": meta["help"]}
        # a metavar is always a word for the value, never pytest's default (the dest, an env-var-like name)
        kind = meta.get("type") or (type(f.default) if f.default is not None else str)
        # choices show as {a,b} in --help; parse_options checks them, so a bad one is one line and exit 2, not
        # argparse's usage block and 4
        choices = "{" + ",".join(meta["choices"]) + "}" if meta.get("choices") else None
        kwargs["metavar"] = meta.get("metavar") or choices or {int: "N", float: "X"}.get(kind, "VALUE")
        if isinstance(f.default, bool):
            kwargs.update(action="store_true", default=f.default)
            kwargs.pop("metavar", None)
        elif isinstance(f.default, tuple):
            kwargs.update(action="append", default=[])
        else:  # numbers are converted by parse_options, so a bad one is one line and exit 2, not argparse's 4
            kwargs["default"] = f.default
        group.addoption(meta["flag"], **kwargs)


def add_options(parser) -> None:
    """Add the engine's options and every installed benchmark's, one ``--help`` group each."""
    seen: set[str] = set()
    _add_fields(parser.getgroup("fieldeval", "fieldeval: evaluate language models"), EngineOptions, "", seen)
    for name, bench in benchmarks().items():
        _add_fields(parser.getgroup(f"fieldeval-{name}", f"fieldeval {name}: {bench.title}"), bench.options, name, seen)


def _values(config, cls: type, prefix: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if "flag" not in f.metadata:
            continue
        value = getattr(config.option, _dest(prefix, f.name), None)
        if value is None and f.metadata.get("shared"):
            value = next((v for v in _shared(config, f.metadata["flag"]) if v is not None), None)
        values[f.name] = tuple(value) if isinstance(f.default, tuple) else (
            f.default if value is None else _convert(f, value))
    return values


def _convert(f: dataclasses.Field, value: Any) -> Any:
    """An option's text as its field's type (int or float), or one of its choices; a usage error naming the flag
    otherwise."""
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise UsageError(f"{f.metadata['flag']} {value!r}: not a choice; choose from {', '.join(choices)}")
    kind = f.metadata.get("type") or (type(f.default) if f.default is not None else None)
    if kind not in (int, float) or not isinstance(value, str):
        return value
    flag = f.metadata["flag"]
    try:
        number = kind(value.strip())
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        example = f.default if f.default is not None else 60
        raise UsageError(f"{flag} {value!r}: not {what}; pass e.g. {example}") from None
    if kind is float and not math.isfinite(number):
        raise UsageError(f"{flag} {value!r}: not a finite number")
    return number


def _shared(config, flag: str):
    """Values of a flag another benchmark declared first (it holds the dest)."""
    for name, bench in benchmarks().items():
        for f in dataclasses.fields(bench.options):
            if f.metadata.get("flag") == flag:
                yield getattr(config.option, _dest(name, f.name), None)


def parse_options(config) -> tuple[EngineOptions, dict[str, Any]]:
    """The engine's options and each benchmark's, from a parsed pytest config; UsageError on a bad value."""
    engine = EngineOptions(**_values(config, EngineOptions, ""))
    per_bench = {name: bench.options(**_values(config, bench.options, name)) for name, bench in benchmarks().items()}
    return engine, per_bench
