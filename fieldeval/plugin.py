"""The fieldeval pytest plugin: model parametrisation, metric recording, aggregation, report.

Each eval item records one row of metric values with the ``record`` fixture.
Rows travel to the controller in the item's ``user_properties`` (so they
cross pytest-xdist), are aggregated per benchmark and model with seeded
bootstrap intervals, and land in pytest-json-report's file as
``report["evals"]``.
"""

from __future__ import annotations

import json
import os
import secrets
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fieldeval.benchmarks import BENCHMARKS
from fieldeval.cache import CACHE_MODES
from fieldeval.errors import UsageError
from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

ROW_KEY = "fieldeval.row"
ITEM_KEY = "fieldeval.item"
MARKER = "fieldeval"
DEFAULT_REPORT = "reports/report.json"
JSON_REPORT_DEFAULT_FILE = ".report.json"


class EvalSession:
    """What one pytest session gathers: metric rows and errors per benchmark and model."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.run_id = config.getoption("fieldeval_run_id") or "run_" + secrets.token_hex(4)
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.rows: dict[str, list[dict]] = defaultdict(list)
        self.errors: Counter[tuple[str, str]] = Counter()
        self.gates: list[tuple[str, str, float]] = []
        self._payload: dict | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take the rows and error counts an item's report carries (controller only)."""
        if hasattr(self.config, "workerinput"):
            return
        props = dict(report.user_properties)
        if ITEM_KEY not in props:
            return
        item = json.loads(props[ITEM_KEY])
        if report.failed:
            self.errors[(item["benchmark"], item["model"])] += 1
        if report.when == "call" and report.passed:
            for key, value in report.user_properties:
                if key == ROW_KEY:
                    row = json.loads(value)
                    row["nodeid"] = report.nodeid
                    self.rows[row["benchmark"]].append(row)

    def payload(self) -> dict:
        """``report["evals"]``: run id, ontology version, and every benchmark's metrics per model."""
        if self._payload is not None:
            return self._payload
        seed = self.config.getoption("fieldeval_seed")
        resamples = self.config.getoption("fieldeval_resamples")
        benchmarks: dict[str, dict] = {}
        versions = sorted({r["ontology_version"] for r in self.rows.get("ebs", []) if r.get("ontology_version")})
        keys = {*self.rows, *(bench for bench, _ in self.errors)}
        for name in sorted(keys):
            rows = self.sorted_rows(name)
            by_model: dict[str, list[dict]] = defaultdict(list)
            for row in rows:
                by_model[row["model"]].append(row)
            models = sorted({*by_model, *(m for b, m in self.errors if b == name)})
            benchmarks[name] = {}
            for model in models:
                entry = BENCHMARKS[name].aggregate(by_model.get(model, []), seed=seed, resamples=resamples)
                entry["items"] = len(by_model.get(model, [])) + self.errors[(name, model)]
                entry["errors"] = self.errors[(name, model)]
                entry["totals"] = _totals(by_model.get(model, []))
                benchmarks[name][model] = entry
        all_rows = [row for rows in self.rows.values() for row in rows]
        self._payload = {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "ontology_version": versions[0] if len(versions) == 1 else (versions or None),
            "benchmarks": benchmarks,
            "cache": {"mode": self.config.getoption("fieldeval_cache"),
                      "hits": sum(1 for r in all_rows if r.get("cached")),
                      "misses": sum(1 for r in all_rows if not r.get("cached"))},
            "gates": self._gate_results(benchmarks),
        }
        return self._payload

    def _gate_results(self, benchmarks: dict) -> list[dict]:
        on = self.config.getoption("fieldeval_gate_on")
        results = []
        for bench, metric, threshold in self.gates:
            for model, entry in benchmarks.get(bench, {}).items():
                value = (entry.get(metric) or {}).get("value")
                if on == "lower" and value is not None:
                    value = entry[metric]["ci95"][0]
                results.append({"metric": f"{bench}.{metric}", "model": model, "gate_on": on, "value": value,
                                "threshold": threshold, "passed": value is not None and value >= threshold})
        return results

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict) -> None:
        """Put the aggregated metrics into pytest-json-report's report as ``evals``."""
        json_report["evals"] = self.payload()

    def sorted_rows(self, benchmark: str) -> list[dict]:
        """A benchmark's rows in a stable order, whatever order the workers finished in."""
        return sorted(self.rows.get(benchmark, []), key=lambda r: r["nodeid"])


_SESSION = pytest.StashKey[EvalSession]()


def eval_session(config: pytest.Config) -> EvalSession:
    """The session object the plugin keeps on ``config``."""
    return config.stash[_SESSION]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the fieldeval options."""
    group = parser.getgroup("fieldeval", "fieldeval: evaluate language models")
    group.addoption("--model", dest="fieldeval_models", action="append", default=[], metavar="MODEL",
                    help="llm model id or alias to evaluate; repeat for several (default: the benchmark's offline baseline)")
    group.addoption("--eval-report", dest="fieldeval_report", default=None, metavar="PATH",
                    help=f"where the JSON report goes (default: {DEFAULT_REPORT} when evals run)")
    group.addoption("--reports-dir", dest="fieldeval_reports_dir", default=None, metavar="DIR",
                    help="folder for scored tables (default: reports/ under the project root)")
    group.addoption("--seed", dest="fieldeval_seed", type=int, default=DEFAULT_SEED,
                    help=f"bootstrap seed (default: {DEFAULT_SEED})")
    group.addoption("--bootstrap-resamples", dest="fieldeval_resamples", type=int, default=DEFAULT_RESAMPLES,
                    help=f"bootstrap resamples for ci95 (default: {DEFAULT_RESAMPLES})")
    group.addoption("--retries", dest="fieldeval_retries", type=int, default=2,
                    help="retries of a failed model call, with backoff (default: 2)")
    group.addoption("--cache", dest="fieldeval_cache", default="use", choices=CACHE_MODES,
                    help="response cache: use (default), refresh, off, or replay (fail items with no cached response)")
    group.addoption("--cache-path", dest="fieldeval_cache_path", default=None, metavar="PATH",
                    help="response cache file (default: reports/responses.sqlite)")
    group.addoption("--prices", dest="fieldeval_prices", default=None, metavar="YAML",
                    help="extra model prices (USD per million tokens) beside [tool.fieldeval.prices]")
    group.addoption("--fail-under", dest="fieldeval_fail_under", action="append", default=[],
                    metavar="BENCH.METRIC=VALUE", help="fail the session when a metric is below VALUE (repeatable)")
    group.addoption("--gate-on", dest="fieldeval_gate_on", default="point", choices=("point", "lower"),
                    help="gate on the point value (default) or the ci95 lower bound")
    group.addoption("--store", dest="fieldeval_store", default=None, metavar="URL",
                    help="run store: a SQLite path or postgresql://... URL (default: $FIELDEVAL_STORE or "
                         "reports/fieldeval.db); 'none' stores nothing")
    group.addoption("--run-label", dest="fieldeval_run_label", default=None, metavar="LABEL",
                    help="human-readable tag of this run in the store")
    group.addoption("--run-id", dest="fieldeval_run_id", default=None, metavar="RUN_ID",
                    help="id of the stored run (default: run_ and 8 random hex digits)")
    group.addoption("--progress-file", dest="fieldeval_progress_file", default=None, metavar="PATH",
                    help="keep a JSON file of items done, errored and planned up to date while the run goes")
    group.addoption("--summary-md", dest="fieldeval_summary_md", default=None, metavar="PATH",
                    help="write a Markdown summary here (default: $GITHUB_STEP_SUMMARY when set)")
    for module in BENCHMARKS.values():
        module.add_options(group)


def selected_benchmarks(config: pytest.Config) -> list[str]:
    """The benchmarks whose eval modules the command line selects (every one present for ``evals/``)."""
    evals_dir = (config.rootpath / "evals").resolve()
    args = [a.split("::")[0] for a in config.args if not a.startswith("-")] or config.getini("testpaths") or ["."]
    selected: set[str] = set()
    for arg in args:
        path = (config.invocation_params.dir / arg).resolve()
        if path == evals_dir or path in evals_dir.parents:
            selected.update(name for name in BENCHMARKS if (evals_dir / f"test_{name}.py").is_file())
        elif evals_dir in path.parents:
            selected.update(name for name in BENCHMARKS if path.name == f"test_{name}.py")
    return sorted(selected)


def _exit_on_usage_error(step: Callable[[], object]) -> None:
    """Run a set-up step; a user mistake ends the session with its one line and exit status 2."""
    try:
        step()
    except (UsageError, pytest.UsageError) as error:
        pytest.exit(str(error), returncode=2)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Set up the session object and, for eval runs, pytest-json-report's output file."""
    config.addinivalue_line("markers", f"{MARKER}(benchmark, baseline): an eval item of a fieldeval benchmark")
    state = EvalSession(config)
    config.stash[_SESSION] = state
    config.pluginmanager.register(state, "fieldeval-session")
    for flag, dest, least in [("--bootstrap-resamples", "fieldeval_resamples", 1), ("--retries", "fieldeval_retries", 0)]:
        if config.getoption(dest) < least:
            pytest.exit(f"{flag} {config.getoption(dest)}: must be at least {least}", returncode=2)
    selected = selected_benchmarks(config)
    _exit_on_usage_error(lambda: _configure_calls(config, use_cache=bool(selected)))
    if not hasattr(config, "workerinput"):
        _exit_on_usage_error(lambda: _prepare(config, selected))
    if not hasattr(config.option, "json_report"):
        return
    explicit = config.getoption("fieldeval_report")
    if explicit or selected:
        config.option.json_report = True
        if explicit:
            config.option.json_report_file = explicit
        elif config.option.json_report_file == JSON_REPORT_DEFAULT_FILE:
            config.option.json_report_file = str(config.rootpath / DEFAULT_REPORT)
        if config.option.json_report_file:
            Path(config.option.json_report_file).parent.mkdir(parents=True, exist_ok=True)


def _configure_calls(config: pytest.Config, *, use_cache: bool) -> None:
    """Set the model-call settings of this process: retries, response cache (eval runs only), prices, gates."""
    from fieldeval.cache import ResponseCache
    from fieldeval.models import SETTINGS
    from fieldeval.settings import load_prices, load_thresholds, tool_settings

    SETTINGS.retries = config.getoption("fieldeval_retries")
    SETTINGS.cache_mode = config.getoption("fieldeval_cache")
    if SETTINGS.cache_mode != "off" and use_cache:
        path = config.getoption("fieldeval_cache_path") or config.rootpath / "reports" / "responses.sqlite"
        SETTINGS.cache = ResponseCache(Path(path))
    tool = tool_settings(config.rootpath)  # pyproject.toml is read once
    SETTINGS.prices = load_prices(tool, config.getoption("fieldeval_prices"))
    gates = load_thresholds(tool, config.getoption("fieldeval_fail_under"))
    for bench, metric, _ in gates:
        if bench not in BENCHMARKS:
            raise UsageError(f"threshold {bench}.{metric}: unknown benchmark {bench!r}; "
                             f"choose from {', '.join(sorted(BENCHMARKS))}")
        known = getattr(BENCHMARKS[bench], "METRICS", BENCHMARKS[bench].HEADLINE)
        if metric not in known:
            raise UsageError(f"threshold {bench}.{metric}: unknown metric {metric!r}; "
                             f"choose from {', '.join(known)}")
    eval_session(config).gates = gates


def _prepare(config: pytest.Config, selected: list[str]) -> None:
    """Check the models and each selected benchmark's inputs before any item is collected."""
    from fieldeval.models import resolve_model

    for model in config.getoption("fieldeval_models"):
        resolve_model(model)
    for name in selected:
        prepare = getattr(BENCHMARKS[name], "prepare", None)
        if prepare is not None:
            prepare(config)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise eval items over ``--model`` (or the benchmark's offline baseline)."""
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or "model" not in metafunc.fixturenames:
        return
    models = metafunc.config.getoption("fieldeval_models") or [marker.kwargs["baseline"]]
    metafunc.parametrize("model", list(dict.fromkeys(models)))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tag eval items with their benchmark and model so failures are counted per model."""
    marker = item.get_closest_marker(MARKER)
    callspec = getattr(item, "callspec", None)
    if marker is None or callspec is None or "model" not in callspec.params:
        return
    tag = {"benchmark": marker.kwargs["benchmark"], "model": callspec.params["model"]}
    item.user_properties.append((ITEM_KEY, json.dumps(tag)))


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record one row of metric values for this eval item: ``record(model=..., **values)``."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the record fixture needs @pytest.mark.{MARKER}(benchmark=...)")

    def _record(**values) -> None:
        row = {"benchmark": marker.kwargs["benchmark"], **values}
        request.node.user_properties.append((ROW_KEY, json.dumps(row, default=str)))

    return _record


def reports_dir(config: pytest.Config) -> Path:
    """The folder for scored tables."""
    explicit = config.getoption("fieldeval_reports_dir")
    return Path(explicit) if explicit else config.rootpath / "reports"


def _totals(rows: list[dict]) -> dict:
    """Time, tokens and cost summed over a model's items; cached items keep their original figures."""
    def total(key: str):
        values = [r.get(key) for r in rows if r.get(key) is not None]
        return round(sum(values), 6) if values else None

    return {"response_time_s": total("response_time_s"), "prompt_tokens": total("prompt_tokens"),
            "completion_tokens": total("completion_tokens"), "est_cost_usd": total("est_cost_usd"),
            "cached_items": sum(1 for r in rows if r.get("cached"))}


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write scored tables and the Markdown summary; a failed gate fails the session."""
    config = session.config
    if hasattr(config, "workerinput"):
        return
    state = eval_session(config)
    if not state.rows and not state.errors:
        return
    for name in sorted(state.rows):
        BENCHMARKS[name].write_outputs(state.sorted_rows(name), reports_dir(config))
    payload = state.payload()
    summary_md = config.getoption("fieldeval_summary_md") or os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_md:
        from fieldeval.summary import render_markdown

        with open(summary_md, "a", encoding="utf-8") as handle:
            handle.write(render_markdown(payload))
    if any(not gate["passed"] for gate in payload["gates"]) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _save_run(config, state, payload, session.exitstatus)


def _git_commit(root: Path) -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _save_run(config: pytest.Config, state: EvalSession, payload: dict, exitstatus: int) -> None:
    """Store the finished session as an immutable run (controller only)."""
    url = config.getoption("fieldeval_store") or os.environ.get("FIELDEVAL_STORE")
    if url is not None and url.lower() == "none":
        return
    from fieldeval.store import declared_columns, open_store

    meta_by_bench = {name: getattr(BENCHMARKS[name], "run_meta", lambda _: {})(config) for name in state.rows}
    meta = {
        "label": config.getoption("fieldeval_run_label"),
        "corpus_version": {b: m["corpus_version"] for b, m in meta_by_bench.items() if "corpus_version" in m},
        "content_hash": {b: m["content_hash"] for b, m in meta_by_bench.items() if "content_hash" in m},
        "git_commit": _git_commit(config.rootpath),
        "status": "completed" if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) else "interrupted",
        "completed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    default = config.rootpath / "reports" / "fieldeval.db"
    try:
        with open_store(url or str(default), columns=declared_columns()) as store:
            store.save_run(payload, {name: state.sorted_rows(name) for name in state.rows}, meta)
    except UsageError as error:
        config.get_terminal_writer().line(f"fieldeval: run not stored: {error}", red=True)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """End the terminal output with one table of headline metrics per benchmark."""
    state = eval_session(config)
    if not state.rows and not state.errors:
        return
    from fieldeval.summary import render_summary

    payload = state.payload()
    for line in render_summary(payload).splitlines():
        terminalreporter.write_line(line)
    for gate in payload["gates"]:
        if not gate["passed"]:
            terminalreporter.write_line(
                f"FAILED gate {gate['metric']} for {gate['model']}: {gate['gate_on']} value "
                f"{gate['value']} is below the threshold {gate['threshold']}", red=True)
