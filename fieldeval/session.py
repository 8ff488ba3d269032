"""One pytest session's evaluation state: options, client, contexts, rows, progress, report and run.

Built once in ``pytest_configure`` and kept on the config (never in a module
global), so sessions in one process, as pytester runs them, never share it.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from fieldeval.benchmark import Benchmark, benchmarks, get_benchmark
from fieldeval.client import ModelClient, resolve_model
from fieldeval.entries import benchmark_entries, by_nodeid
from fieldeval.errors import UsageError, exit_on_usage_error
from fieldeval.failures import failure_class
from fieldeval.gates import check_gate, gate_results
from fieldeval.limits import CallLimits
from fieldeval.options import EngineOptions
from fieldeval.progress import Progress
from fieldeval.runfiles import trim_limit
from fieldeval.settings import Gate, load_model_limits, load_prices, load_thresholds, tool_settings

ROW_KEY = "fieldeval.row"
ITEM_KEY = "fieldeval.item"
ERROR_KEY = "fieldeval.error"
MARKER = "fieldeval"
TTY_REDRAW_S = 0.5
LOG_LINE_S = 10.0


class EvalSession:
    """What one pytest session knows and gathers; the controller aggregates, reports and stores."""

    def __init__(self, config: pytest.Config, options: EngineOptions, bench_options: dict[str, Any], *,
                 selected: list[str], client: ModelClient, gates: list[Gate], session_dir: Path | None,
                 worker: tuple[int, int]) -> None:
        self.config = config
        self.options = options
        self.bench_options = bench_options
        self.selected = selected
        self.client = client
        self.gates = gates
        self.session_dir = session_dir
        self.worker = worker
        self.run_id = options.run_id or "run_" + secrets.token_hex(4)
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.rows: dict[str, list[dict]] = defaultdict(list)
        self.eval_items = 0  # this process's collected eval items (the controller's planned ones under xdist)
        self.trim_limit = trim_limit()  # above this many items, rows are not kept twice (report.json is trimmed)
        self.errors: Counter[tuple[str, str]] = Counter()
        self.error_details: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.failed_items: list[dict] = []  # the store's errored items: benchmark, model, item, error_class, message
        self.status = "running"
        self.progress = Progress()
        self._contexts: dict[str, Any] = {}
        self._payload: dict | None = None
        self._prefetcher = None
        self._last_draw = 0.0
        self._announced: set[str] = set()
        self._strings: dict[str, str] = {}  # keys and short values of the rows, one copy each

    @classmethod
    def build(cls, config: pytest.Config, options: EngineOptions, bench_options: dict[str, Any], *,
              selected: list[str], session_dir: Path | None, worker: tuple[int, int]) -> EvalSession:
        """The session for parsed options: its client (cache for eval runs only), prices, limits and gates."""
        from fieldeval.cache import ResponseCache

        tool = tool_settings(config.rootpath)  # pyproject.toml is read once
        cache = None
        if options.cache != "off" and selected:
            cache = ResponseCache(Path(options.cache_path or config.rootpath / "reports" / "responses.sqlite"))
        limits = CallLimits(concurrency=options.concurrency, rpm=options.rpm, models=load_model_limits(tool),
                            worker=worker, rate_dir=session_dir)
        client = ModelClient(retries=options.retries, call_timeout=options.call_timeout, cache_mode=options.cache,
                             cache=cache, prices=load_prices(tool, options.prices), limits=limits)
        if session_dir is not None:
            from fieldeval.prefetch import Memo

            client = client.with_memo(Memo(session_dir / "memo.sqlite"))
        gates = load_thresholds(tool, options.fail_under)
        for gate in gates:
            check_gate(gate)
        return cls(config, options, bench_options, selected=selected, client=client, gates=gates,
                   session_dir=session_dir, worker=worker)

    # --- benchmarks and their contexts ---------------------------------------------------------

    def benchmark(self, name: str) -> Benchmark:
        """An installed benchmark; one line and exit 2 when it is not installed."""
        return exit_on_usage_error(lambda: get_benchmark(name))

    def context(self, name: str) -> Any:
        """The benchmark's context for this session's options, loaded once per process."""
        if name not in self._contexts:
            bench = self.benchmark(name)
            self._contexts[name] = exit_on_usage_error(lambda: bench.load(self.bench_options[name]))
        return self._contexts[name]

    def models_for(self, name: str) -> list[str]:
        """The models a benchmark's items run against: ``--model`` values, else its offline baseline."""
        return list(dict.fromkeys(self.options.models or [self.benchmark(name).baseline]))

    def prepare(self) -> None:
        """Check the models and the store, and load every selected benchmark's inputs before collection (controller)."""
        for model in self.options.models:
            resolve_model(model)
        url = self.store_url()
        if url is not None and self.selected and not self.config.option.collectonly:
            from fieldeval.store import check_store

            check_store(url, create=True)
        for name in self.selected:
            self.context(name)
            bench = self.benchmark(name)
            if bench.warm is not None:
                bench.warm(self.bench_options[name], self.models_for(name))

    def expected_items(self) -> int:
        """Eval items the selected benchmarks will collect at most: cases x models (after :meth:`prepare`)."""
        return sum(len(self.benchmark(name).cases(self.context(name))) * len(self.models_for(name))
                   for name in self.selected)

    # --- calls ahead of the items --------------------------------------------------------------

    def prefetch(self, items: Sequence[pytest.Item], job: Callable[[pytest.Item, dict], tuple | None]) -> None:
        """Start running this process's share of the eval items' calls ahead (needs the shared memo)."""
        if self.client.memo is None or not items:
            return
        from fieldeval.prefetch import Prefetcher

        index, count = self.worker
        fixtures = {"client": self.client, "record": lambda **_: None, "pytestconfig": self.config}
        jobs = []
        for number, item in enumerate(items):
            if number % count != index:
                continue
            name = item.get_closest_marker(MARKER).kwargs["benchmark"]
            spec = job(item, {**fixtures, "context": self.context(name)})
            if spec is not None:
                jobs.append(spec)
        self._prefetcher = Prefetcher(jobs, self.client.limits.local_concurrency())
        self._prefetcher.start()

    def stop_prefetch(self) -> None:
        """Start no further calls ahead (the session is ending)."""
        if self._prefetcher is not None:
            self._prefetcher.stop()

    def close(self) -> None:
        """Stop calling ahead."""
        self.stop_prefetch()

    # --- progress ------------------------------------------------------------------------------

    def plan(self, keys: list[tuple[str, str] | None]) -> None:
        """Planned items per (benchmark, model), from the collected items."""
        self.progress.plan([k for k in keys if k is not None])
        self.eval_items = max(self.eval_items, sum(self.progress.planned.values()))
        self.trim_limit = trim_limit()
        self._write_progress()

    def plan_from_ids(self, ids: list[str]) -> None:
        """Planned items from xdist's collected node ids: ``.../test_<bench>.py::...-<model>]``."""
        keys = []
        for nodeid in ids:
            module = nodeid.split("::")[0].rsplit("/", 1)[-1]
            bench = next((n for n in benchmarks() if module == f"test_{n}.py"), None)
            if bench is None:
                continue
            model = max((m for m in self.models_for(bench) if nodeid.endswith(f"-{m}]") or nodeid.endswith(f"[{m}]")),
                        key=len, default=None)
            if model is not None:
                keys.append((bench, model))
        self.plan(keys)

    @property
    def live_progress(self) -> bool:
        """Whether a redrawn progress line stands in for the dots (a terminal, default verbosity)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        return (reporter is not None and reporter.isatty and self.config.get_verbosity() == 0
                and bool(self.progress.planned) and not self.config.option.collectonly)

    def _write_progress(self) -> None:
        if self.options.progress_file:
            self.progress.write(self.options.progress_file)

    def _draw_progress(self, *, final: bool = False) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or self.config.get_verbosity() < 0 or not self.progress.planned:
            return
        now = time.monotonic()
        keys = sorted(self.progress.planned)
        if self.live_progress:
            if final or now - self._last_draw >= TTY_REDRAW_S:
                reporter.rewrite(" | ".join(self.progress.line(k) for k in keys), erase=True)
                self._last_draw = now
        elif final or now - self._last_draw >= LOG_LINE_S:
            reporter.ensure_newline()
            for key in keys:
                reporter.write_line(f"fieldeval progress: {self.progress.line(key)}")
            self._last_draw = now

    def end_progress(self, reporter) -> None:
        """Draw the progress once more, complete, and end its line."""
        if self.progress.planned and self.live_progress:
            self._draw_progress(final=True)
            reporter.ensure_newline()
            reporter.write_line("")

    # --- what the items report -----------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before pytest-json-report reads the teardown report's properties
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take the rows, errors and progress an item's report carries (controller only)."""
        if hasattr(self.config, "workerinput") or self.status != "running":  # workers send reports on; the
            return  # run is what finished before the session began to finish (late xdist reports are left out)
        props = dict(report.user_properties)
        if ITEM_KEY not in props:
            return
        item = json.loads(props[ITEM_KEY])
        key = (item["benchmark"], item["model"])
        if report.failed:
            self.errors[key] += 1
            error = json.loads(props[ERROR_KEY]) if ERROR_KEY in props else {"kind": "error", "detail": report.when}
            self.error_details[key][error["detail"]] += 1
            self._announce_permanent(item["model"], error)
            self.failed_items.append({"benchmark": key[0], "model": key[1], "item": report.nodeid,
                                      **failure_class(report, props.get(ERROR_KEY))})
        if report.when == "call" and report.passed:
            for name, value in report.user_properties:
                if name == ROW_KEY:
                    row = self._shared(json.loads(value))
                    row["nodeid"] = report.nodeid
                    self.rows[row["benchmark"]].append(row)
        if report.when in ("call", "teardown") and self.eval_items > self.trim_limit:
            # the row is taken: neither the reports pytest keeps nor pytest-json-report hold a second copy of it
            report.user_properties = [(k, v) for k, v in report.user_properties if k != ROW_KEY]
        if report.when == "call" or (report.when == "setup" and not report.passed):  # the item is over
            self.progress.finish(key, failed=report.failed)
            self._write_progress()
            self._draw_progress()

    def _shared(self, row: dict) -> dict:
        """The row with its keys and short text values shared with earlier rows' (one copy of each in memory)."""
        memo = self._strings
        return {memo.setdefault(k, k): memo.setdefault(v, v) if type(v) is str and len(v) < 200 else v
                for k, v in row.items()}

    def _announce_permanent(self, model: str, error: dict) -> None:
        if error.get("kind") != "permanent" or model in self._announced:
            return
        self._announced.add(model)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"fieldeval: {model} failed permanently, its remaining items are skipped: "
                                f"{error['detail']}", red=True)

    def has_results(self) -> bool:
        """Whether any eval item reported."""
        return bool(self.rows or self.errors)

    def ran_evals(self) -> bool:
        """Whether this session planned or ran eval items (and so writes a report and stores a run)."""
        return bool(self.selected) and not self.config.option.collectonly

    def sorted_rows(self, benchmark: str) -> list[dict]:
        """A benchmark's rows in a stable order, whatever order the workers finished in."""
        return by_nodeid(self.rows.get(benchmark, []))

    def error_lines(self) -> list[str]:
        """One line per model with errors: the count and the most common reasons."""
        lines = []
        for (bench, model), count in sorted(self.errors.items()):
            reasons = "; ".join(f"{detail} (x{n})" for detail, n in self.error_details[(bench, model)].most_common(2))
            lines.append(f"fieldeval errors: {bench} {model}: {count} item(s) failed: {reasons}")
        return lines

    # --- the report ----------------------------------------------------------------------------

    def payload(self) -> dict:
        """``report["evals"]``: run id, ontology version, and every benchmark's metrics per model."""
        if self._payload is not None:
            return self._payload
        versions = sorted({r["ontology_version"] for r in self.rows.get("ebs", []) if r.get("ontology_version")})
        out = benchmark_entries(self.rows, self.errors, seed=self.options.seed, resamples=self.options.resamples)
        all_rows = [row for rows in self.rows.values() for row in rows]
        self._payload = {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "ontology_version": versions[0] if len(versions) == 1 else (versions or None),
            "benchmarks": out,
            "cache": {"mode": self.options.cache,
                      "hits": sum(1 for r in all_rows if r.get("cached")),
                      "misses": sum(1 for r in all_rows if not r.get("cached"))},
            "gates": gate_results(self.gates, out, on=self.options.gate_on, ran=sorted({*self.selected, *out})),
            "status": self.status,
        }
        return self._payload

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict) -> None:
        """Put the aggregated metrics into pytest-json-report's report as ``evals``."""
        if self.ran_evals():
            json_report["evals"] = self.payload()

    def reports_dir(self) -> Path:
        """The folder for scored tables."""
        explicit = self.options.reports_dir
        return Path(explicit) if explicit else self.config.rootpath / "reports"

    def finish(self, exitstatus: int) -> None:
        """Fix the run status and aggregate (controller, as the session ends, before the report is built)."""
        self.stop_prefetch()
        self.status = self.progress.status = self.run_status(exitstatus)
        self._write_progress()
        self._payload = None
        self.payload()

    def write_outputs(self, folder: Path) -> list[Path]:
        """Each benchmark's scored tables under ``folder``; the paths written."""
        written: list[Path] = []
        for name in sorted(self.rows):
            written += self.benchmark(name).write_outputs(self.sorted_rows(name), folder)
        return written

    # --- the run store -------------------------------------------------------------------------

    def store_url(self) -> str | None:
        """``--store``, else ``$FIELDEVAL_STORE``, else ``reports/fieldeval.db`` under the project root; None: no store."""
        url = self.options.store or os.environ.get("FIELDEVAL_STORE") or str(self.config.rootpath / "reports" / "fieldeval.db")
        return None if url.lower() == "none" else url

    def run_status(self, exitstatus: int) -> str:
        """``completed`` only when every planned item ran and pytest ended normally; else ``interrupted``."""
        planned = sum(self.progress.planned.values())
        done = sum(self.progress.done.values())
        normal = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
        return "completed" if normal and done >= planned else "interrupted"

    def save_run(self, exitstatus: int) -> None:
        """Store the finished session as an immutable run (controller only)."""
        url = self.store_url()
        if url is None:
            return
        from fieldeval.shards import run_group_meta
        from fieldeval.store import declared_columns, open_store

        metas = {name: self.benchmark(name).run_meta(self.context(name)) for name in self.rows}
        meta = {
            "label": self.options.run_label,
            "corpus_version": {b: m.corpus_version for b, m in metas.items() if m.corpus_version},
            "content_hash": {b: m.content_hash for b, m in metas.items() if m.content_hash},
            "git_commit": _git_commit(self.config.rootpath),
            "status": self.status if self.status != "running" else self.run_status(exitstatus),
            "completed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **run_group_meta(self),
            "items_planned": sum(self.progress.planned.values()),
            "items_done": sum(self.progress.done.values()),
            "items_errored": sum(self.progress.errors.values()),
            "errors": self.failed_items,
        }
        try:
            with open_store(url, columns=declared_columns()) as store:
                store.save_run(self.payload(), {name: self.sorted_rows(name) for name in self.rows}, meta)
        except UsageError as error:
            self.config.get_terminal_writer().line(f"fieldeval: run not stored: {error}", red=True)


def _git_commit(root: Path) -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


__all__ = ["EvalSession"]
