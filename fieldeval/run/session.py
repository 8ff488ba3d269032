"""One pytest session's evaluation state: options, client, contexts, rows, progress, report and run.

Built once in ``pytest_configure`` and kept on the config (never in a module
global), so sessions in one process, as pytester runs them, never share it.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import secrets
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fieldeval.benchmark import Benchmark, get_benchmark
from fieldeval.calls.client import ModelClient, model_ids, resolve_model
from fieldeval.run.entries import benchmark_entries
from fieldeval.errors import UsageError, exit_on_usage_error
from fieldeval.calls.failures import failure_class
from fieldeval.run.gates import check_gate, error_gates, gate_results
from fieldeval.calls.limits import CallLimits
from fieldeval.defaults import CASE_KEY, EPOCH_KEY, ERROR_KEY, ITEM_KEY, MARKER, ROW_KEY
from fieldeval.run.options import EngineOptions
from fieldeval.stats.paired import regression_gates
from fieldeval.run.progress import Progress
from fieldeval.run.runfiles import trim_limit
from fieldeval.run.spool import RowSpool
from fieldeval.settings import Gate, load_model_limits, load_prices, load_thresholds, tool_settings

if TYPE_CHECKING:
    from fieldeval.store.payload import FlatRun

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
        self.run_id = options.run_id or options.resume or "run_" + secrets.token_hex(4)
        self._resumed: dict[str, list[dict]] | None = None  # --resume: the stored run's scored rows
        self.resumed_settings: dict[str, Any] | None = None  # --resume: the stored run's settings
        self._lease: tuple[str, str] | None = None  # --resume: (store URL, holder) of the run's lease, while held
        self._kept: Path | None = None  # the run's unstored.json, from before the store write until its commit
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._rows: dict[str, list[dict]] = defaultdict(list)
        self._spool = RowSpool(session_dir)  # only the controller takes rows
        self._stage: Any = None  # the store's rows built while the run goes (fieldeval.store.stage), SQLite only
        self._saving: Future | None = None  # the store's thread, once started (begin_store, start_save_run)
        self._handoff: Future | None = None  # what start_save_run hands a thread begin_store started
        self.completed_at: str | None = None  # when the session began to end (the store's completed_at)
        self.eval_items = 0  # this process's collected eval items (the controller's planned ones under xdist)
        self.trim_limit = trim_limit()  # above this many items, rows are not kept twice (report.json is trimmed)
        self.errors: Counter[tuple[str, str]] = Counter()
        self.errored_epochs: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)  # by the repeated item's case
        self.error_details: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.failed_items: list[dict] = []  # the store's errored items: benchmark, model, item, error_class, message
        self.status = "running"
        self.progress = Progress(epochs_of=self.epochs_of)
        self._contexts: dict[str, Any] = {}
        self._payload: dict | None = None
        self._pool = None
        self._failures = 0
        self._last_draw = 0.0
        self._announced: set[str] = set()
        self.disk_full: str | None = None  # the one line, once the disk filled up mid-run
        self.pytest_session: pytest.Session | None = None
        self.skipped_after_permanent: Counter[str] = Counter()
        self._strings: dict[str, dict[str, str]] = {}  # each row field's text values, one copy each (_shared)
        self.tool: dict[str, Any] = {}  # [tool.fieldeval] of pyproject.toml
        self._designs: dict[str, tuple[list, list[str]]] = {}
        self.notices: list[str] = []  # one line each, printed once before the items run
        self._item_properties: dict[tuple[str, str], tuple[str, str]] = {}
        self.released_entries = 0  # passed items whose pytest-json-report entries were let go of (run.memory)
        self.module_benchmarks: dict[str, tuple[str, ...]] = {}  # eval modules (as node ids begin) -> benchmarks

    @classmethod
    def build(cls, config: pytest.Config, options: EngineOptions, bench_options: dict[str, Any], *,
              selected: list[str], session_dir: Path | None, worker: tuple[int, int]) -> EvalSession:
        """The session for parsed options: its client (cache for eval runs only), prices, limits and gates."""
        from fieldeval.calls.cache import ResponseCache

        tool = tool_settings(config.rootpath)  # pyproject.toml is read once
        cache = None
        if options.cache != "off" and selected:
            cache = ResponseCache(Path(options.cache_path or config.rootpath / "reports" / "responses.sqlite"))
        limits = CallLimits(concurrency=options.concurrency, rpm=options.rpm, models=load_model_limits(tool),
                            worker=worker, rate_dir=session_dir, hold_s=options.call_timeout)
        client = ModelClient(retries=options.retries, call_timeout=options.call_timeout, cache_mode=options.cache,
                             cache=cache, prices=load_prices(tool, options.prices), limits=limits,
                             max_answer_bytes=options.max_answer_bytes)
        if session_dir is not None:
            from fieldeval.calls.pool import Board

            client = client.with_board(Board(session_dir / "board.sqlite"))
        gates = load_thresholds(tool, options.fail_under)
        for gate in gates:
            check_gate(gate)
        session = cls(config, options, bench_options, selected=selected, client=client, gates=gates,
                      session_dir=session_dir, worker=worker)
        session.tool = tool
        return session

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
        """The models a benchmark's items run against: ``--model`` values, else its offline baseline; with
        ``--matrix``, ``--temperature`` or ``--epochs``, the :class:`~fieldeval.run.matrix.Combination` s."""
        if self.options.designed:
            return list(self.design(name))
        return list(dict.fromkeys(self.options.models or [self.benchmark(name).baseline]))

    def design(self, name: str) -> list:
        """The benchmark's combinations: the matrix (``--matrix``: the suite's, else ``[tool.fieldeval.run.matrix]``)
        with ``--model`` and ``--temperature`` overriding its lists, each repeated ``--epochs`` times."""
        from fieldeval.run.matrix import check_options, combinations, suite_grid, tool_grid

        if name not in self._designs:
            grid: dict[str, list] = {}
            context = self.context(name)
            if self.options.matrix:
                suite = getattr(context, "suite", None)
                grid = suite_grid(getattr(suite, "matrix", None)) or tool_grid(self.tool, name)
            models = list(self.options.models) or [str(m) for m in grid.get("model", [])] or [
                self.benchmark(name).baseline]
            if self.options.temperatures:
                grid["temperature"] = list(self.options.temperature_values)
            cells, notices = combinations(models, grid, epochs=self.options.epochs,
                                          default_temperature=float(getattr(context, "temperature", 0.0) or 0.0))
            exit_on_usage_error(lambda: check_options(cells))
            self._designs[name] = (cells, notices)
            self.notices += [line for line in notices if line not in self.notices]
        return self._designs[name][0]

    def matrix_models(self) -> list[str]:
        """The distinct models of the selected benchmarks' combinations, in the matrix's order."""
        models: dict[str, None] = {}
        for name in self.selected:
            for cell in self.models_for(name):
                models.setdefault(str(getattr(cell, "model", cell)), None)
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

    def announce(self) -> None:
        """Print the design's notices (``--epochs`` at temperature 0), one line each, once (controller)."""
        if hasattr(self.config, "workerinput"):
            return
        if self.options.designed:
            for name in self.selected:
                self.design(name)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in self.notices:
            if reporter is not None and line not in self._announced:
                self._announced.add(line)
                reporter.ensure_newline()
                reporter.write_line(line, yellow=True)

    def prepare(self) -> None:
        """Check the models and the store, and load every selected benchmark's inputs before collection (controller)."""
        # imported here, never first in the store's thread: a module that pytest rewrites, parsed in two threads at
        # once, trips CPython 3.11's parser (xdist workers, which never store, do without SQLAlchemy)
        import fieldeval.store.pending  # noqa: F401
        import fieldeval.store.url  # noqa: F401

        for model in self.options.models:
            resolve_model(model)
        if self.options.matrix_job is not None and getattr(self.config.option, "splits", None):
            raise UsageError(f"--matrix-job {self.options.matrix_job} with --splits: a job runs one model of the "
                             "matrix or one pytest-split group, not both; drop one")
        if self.options.matrix_job is not None and self.selected:
            self.matrix_job_model()  # one line before collection when K is past the matrix's last model
        if self.options.designed and not self.config.option.collectonly:
            for name in self.selected:
                for cell in self.design(name):
                    resolve_model(cell.model)
        url = self.store_url()
        if url is not None and self.selected and not self.config.option.collectonly:
            from fieldeval.store import check_store

            check_store(url, create=True)
            self._start_stage(url)
        for flag, value in (("--resume", self.options.resume), ("--baseline-run", self.options.baseline_run)):
            if value and url is None:
                raise UsageError(f"{flag} {value}: needs the run store that holds it; drop --store none")
        if url is not None and self.selected and not self.config.option.collectonly:
            self.check_stored_runs(url)
            self._take_lease(url)
            self.take_resumed_rows()
        if self.config.option.collectonly:
            return  # collection loads what its items need; nothing is loaded (or downloaded) before
        for name in self.selected:
            self.context(name)
        if self.options.resume and self.resumed_settings is not None:
            from fieldeval.run.resume import check_inputs

            check_inputs(self.options.resume, self.resumed_settings,
                         {name: self.benchmark(name).run_meta(self.context(name)) for name in self.selected})
        for name in self.selected:
            bench = self.benchmark(name)
            if bench.warm is not None:
                models = self.models_for(name)
                bench.warm(self.bench_options[name], list(dict.fromkeys(getattr(m, "model", m) for m in models)))

    def _take_lease(self, url: str) -> None:
        """``--resume``: hold the run's lease in the store, so no second session resumes it meanwhile (controller)."""
        if not self.options.resume or hasattr(self.config, "workerinput"):
            return
        from fieldeval.run.resume import holder
        from fieldeval.store import declared_columns, open_store

        me = holder()
        with open_store(url, columns=declared_columns()) as store:
            store.take_lease(self.options.resume, me)
        self._lease = (url, me)

    def _release_lease(self) -> None:
        """Let go of the run's lease when the session ends without having replaced the run (which releases it)."""
        if self._lease is None:
            return
        from fieldeval.store import declared_columns, open_store

        url, me = self._lease
        self._lease = None
        try:
            with open_store(url, columns=declared_columns()) as store:
                store.release_lease(self.options.resume, me)
        except Exception:  # noqa: BLE001  (a lease left behind by a dead process is taken over by the next resume)
            pass

    def _start_stage(self, url: str) -> None:
        """Build the run's store rows while it runs when the store is a SQLite file (controller, with a session
        folder; not for ``--resume``, whose stored rows the stage would not hold)."""
        from fieldeval.store import declared_columns
        from fieldeval.store.stage import STAGE_FILE, ResponseStage
        from fieldeval.store.url import resolve_url

        if self.session_dir is not None and not self.options.resume and resolve_url(url).get_backend_name() == "sqlite":
            self._stage = ResponseStage(self.session_dir / STAGE_FILE, self.run_id, declared_columns())

    def expected_items(self) -> int:
        """Eval items the selected benchmarks will collect at most: cases x models (after :meth:`prepare`)."""
        return sum(len(self.benchmark(name).cases(self.context(name))) * len(self.models_for(name))
                   for name in self.selected)

    def check_stored_runs(self, url: str) -> None:
        """``--baseline-run`` and ``--resume`` name stored runs (a usage error naming the store when not)."""
        from fieldeval.store import declared_columns, open_store

        for flag, run_id in (("--baseline-run", self.options.baseline_run), ("--resume", self.options.resume)):
            if not run_id:
                continue
            with open_store(url, columns=declared_columns()) as store:
                try:
                    store.run_settings(run_id)
                except UsageError as error:
                    raise UsageError(f"{flag} {run_id}: {error}") from None

    def resumed_rows(self) -> dict[str, list[dict]]:
        """``--resume RUN_ID``: that stored run's scored rows by benchmark (empty without ``--resume``)."""
        if self._resumed is None:
            self._resumed = {}
            url = self.store_url()
            if self.options.resume and url is not None:
                from fieldeval.store import declared_columns, open_store

                with open_store(url, columns=declared_columns()) as store:
                    self._resumed = {bench: rows for bench, rows in store.run_rows(self.options.resume).items()
                                     if bench in self.selected}
        return self._resumed

    def resumed_items(self) -> set[tuple]:
        """(benchmark, model, case key) of every item the resumed run scored, and the epoch of a repeated one:
        these are not run again."""
        from fieldeval.rows import case_key

        return {(bench, str(row["model"]), case_key(row), *((row["epoch"],) if row.get("epoch") is not None else ()))
                for bench, rows in self.resumed_rows().items() for row in rows}

    def take_resumed_rows(self) -> None:
        """Start the rows from the resumed run's scored rows (controller), so its report covers every item."""
        for bench, rows in self.resumed_rows().items():
            self.rows()[bench].extend(rows)
            self._rows[bench].sort(key=itemgetter("nodeid"))  # the rows by benchmark are always in node id order

    # --- the call engine: solvers in one bounded pool ----------------------------------------

    def start_solvers(self, items: Sequence[pytest.Item]) -> None:
        """Plan every eval item whose module declares a solver on the session's board, and start this
        process's share of the solver threads (see :mod:`fieldeval.calls.pool`)."""
        from fieldeval.calls.pool import Board, SolverClient, SolverPool

        clients: dict[str, SolverClient] = {}
        planned: dict[str, pytest.Item] = {}
        for item, name, _solver, _callspec in _solver_items(items):
            if name not in clients:
                clients[name] = SolverClient(self.client, self.context(name))
            planned[item.nodeid] = item
        jobs = _SolverJobs(planned, self._cases_of, clients)
        if not jobs:
            return
        board = self.client.board
        if board is None:  # no session folder (an eval module outside the selected ones): this process alone
            board = Board(Path(tempfile.mkdtemp(prefix="fieldeval-board-")) / "board.sqlite")
        self._pool = SolverPool(board, jobs, self.client.limits.local_concurrency(),
                                maxfail=self.config.option.maxfail or 0)
        if self.config.option.collectonly:
            if self.options.designed and not hasattr(self.config, "workerinput"):  # the controller prints it
                self.print_plan(items)
            return
        self._pool.start()

    def print_plan(self, items: Sequence[pytest.Item]) -> None:
        """``--collect-only`` of a matrix or repeated run: calls, estimated tokens and cost per combination
        (see :mod:`fieldeval.run.plan`); nothing is sent."""
        from fieldeval.run.plan import plan_costs, plan_lines

        jobs = []
        for _item, name, solver, callspec in _solver_items(items):
            model = callspec.params["model"]
            solve = functools.partial(_solve_at, solver, self._cases_of(name), callspec.params["case"], model)
            jobs.append((name, str(model), solve, self.context(name)))
        lines = plan_lines(plan_costs(jobs, self.client.estimate_cost))
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if reporter is not None:
                reporter.write_line(line)

    def _cases_of(self, name: str) -> Any:
        """The benchmark's cases (a sequence read by position; the EBS suite's lazily, from its compact form)."""
        return self.benchmark(name).cases(self.context(name))

    def case_id_of(self, item: pytest.Item) -> str | None:
        """The case id of an eval item's case (its ``case_id``, else its ``id``), None when it has none."""
        case = self.case_of(item)
        found = getattr(case, "case_id", None) or getattr(case, "id", None)
        return None if found is None else str(found)

    def repeated_case_key(self, item: pytest.Item) -> str | None:
        """The case key of an epoch of a repeated item (``--epochs``), None for an item asked once."""
        combination = item.callspec.params.get("model") if hasattr(item, "callspec") else None
        case = self.case_of(item)
        if getattr(combination, "epoch", None) is None or case is None:
            return None
        return str(case.test_id)

    def case_of(self, item: pytest.Item) -> Any | None:
        """The case of an eval item (its parameter is the case's position in the benchmark's cases)."""
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("case") if callspec is not None else None
        if isinstance(param, int) and not isinstance(param, bool):
            return self._cases_of(item.get_closest_marker(MARKER).kwargs["benchmark"])[param]
        return param

    def answer(self, item: pytest.Item) -> Any:
        """The result of the item's solver (waited for, or solved now)."""
        model = item.callspec.params.get("model", "-") if hasattr(item, "callspec") else "-"
        if self._pool is None:
            raise pytest.UsageError(f"{item.nodeid}: the answer fixture needs a solver in "
                                    f"@pytest.mark.{MARKER}(benchmark=..., solver=...)")
        return self._pool.answer(item.nodeid, model)

    def stop_calls(self, reason: str) -> None:
        """No new model call starts, in any process of the session; calls in flight end on their own timeout."""
        self.client.stop(reason)
        if self._pool is not None:
            self._pool.stop(reason)
        elif self.client.board is not None:
            try:
                self.client.board.stop(reason)
            except Exception:  # noqa: BLE001 - the session folder is already gone
                pass

    def close(self) -> None:
        """Stop the solver threads, commit the cached responses and close the row spool."""
        self._spool.close()
        self._drop_stage()
        self._release_lease()
        if self._pool is not None:
            self._pool.stop()
        if self.client.cache is not None:
            self._flush_cache(close=True)

    def _check_cache(self) -> None:
        """Say in one line when the response cache was damaged while the session ran (its answers are in the run,
        not in the cache)."""
        cache = self.client.cache
        if cache is None or self.disk_full is not None:
            return
        problem = cache.damage()
        if problem is not None:
            sys.stderr.write(f"fieldeval: response cache {cache.path} is damaged ({problem}): this session's answers "
                             "are in its run but may not be cached; the next session moves a damaged cache aside\n")

    def _flush_cache(self, *, close: bool = False) -> None:
        """Commit the responses the cache holds in memory; a full disk is the session's one line, not a traceback."""
        import sqlite3

        from fieldeval.run.writable import full_disk_line, out_of_space

        cache = self.client.cache
        if cache is None:
            return
        try:
            cache.close() if close else cache.flush()
        except (sqlite3.Error, OSError) as error:
            if not out_of_space(error):
                raise
            line = full_disk_line(str(cache.path), error)
            if self.disk_full is None and not close:
                self.disk_full = line
            elif self.disk_full is None:  # at the very end: the session's status is already written
                sys.stderr.write(line + "\n")

    # --- progress ------------------------------------------------------------------------------

    def plan(self, keys: list[tuple[str, str] | None]) -> None:
        """Planned items per (benchmark, model), from the collected items."""
        resumed = [(bench, str(row["model"])) for bench, rows in self.resumed_rows().items() for row in rows]
        self.progress.plan([k for k in keys if k is not None] + resumed)
        for key in resumed:  # scored in the run being resumed
            self.progress.done[key] += 1
        if self.resumed_settings:  # a resumed run is complete only once every item its session planned is scored
            from fieldeval.store.groups import planned_items

            for key, cases in planned_items(self.resumed_settings).items():
                if key[0] in self.selected and self.progress.planned[key] < len(cases):
                    self.progress.planned[key] = len(cases)
        self.eval_items = max(self.eval_items, sum(self.progress.planned.values()))
        self.trim_limit = trim_limit()
        self._write_progress()

    def plan_from_ids(self, ids: list[str]) -> None:
        """Planned items from xdist's collected node ids: ``<eval module>::...-<model>]``."""
        keys = []
        modules: dict[str, tuple[str, ...]] = {}
        for nodeid in ids:
            tail = nodeid.removesuffix("]")
            module = nodeid.split("::")[0]
            if module not in modules:  # as the rootdir names it; else (--pyargs, outside the rootdir) by its path's end
                modules[module] = self.module_benchmarks.get(module) or next(
                    (names for path, names in self.module_benchmarks.items() if path.endswith(f"/{module}")), ())
            for bench in modules[module]:
                model = max((m for m in self.models_for(bench) if tail.endswith(f"-{getattr(m, 'test_id', m)}")
                             or tail.endswith(f"[{getattr(m, 'test_id', m)}")),
                            key=lambda m: len(getattr(m, "test_id", m)), default=None)
                if model is not None:
                    keys.append((bench, model))
                    break
        self.plan(keys)

    @property
    def live_progress(self) -> bool:
        """Whether a redrawn progress line stands in for the dots (a terminal, default verbosity)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        return (reporter is not None and reporter.isatty and self.config.get_verbosity() == 0
                and bool(self.progress.planned) and not self.config.option.collectonly)

    def _write_progress(self) -> None:
        if not self.options.progress_file:
            return
        try:
            self.progress.write(self.options.progress_file)
        except OSError as error:
            from fieldeval.run.writable import full_disk_line, out_of_space

            if not out_of_space(error):
                raise
            self.stop_for_full_disk(self.pytest_session, full_disk_line(self.options.progress_file, error))

    def stop_for_full_disk(self, session: pytest.Session | None, line: str) -> None:
        """Stop starting items (the disk is full); the session ends with ``line`` and exit status 2."""
        if self.disk_full is None:
            self.disk_full = line
        self.stop_calls("no space left on the device")
        if session is not None:
            session.shouldstop = "no space left on the device"

    def check_outputs(self, report_path: Path) -> None:
        """Check every path the session will write, before any model call: one line and exit 2 if one is not
        writable (the reports folder, the JSON report, the progress file, the Markdown summary, the cache
        and a SQLite store)."""
        from fieldeval.run.writable import check_outputs

        summary_md = self.options.summary_md or os.environ.get("GITHUB_STEP_SUMMARY")
        files: list[tuple[str, Any]] = [("--eval-report", report_path), ("--progress-file", self.options.progress_file),
                                        ("--summary-md", summary_md)]
        if self.client.cache is not None:
            files.append(("--cache-path", self.client.cache.path))
        url = self.store_url()
        if url is not None:
            from fieldeval.store import resolve_url

            parsed = resolve_url(url)
            if parsed.get_backend_name() == "sqlite":
                files.append(("--store", Path(parsed.database).expanduser()))
        check_outputs(files, [("--reports-dir", self.reports_dir())])

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
        """Draw the progress once more, complete, and end its line (a log gets its final line too)."""
        if self.progress.planned and self.live_progress:
            self._draw_progress(final=True)
            reporter.ensure_newline()
            reporter.write_line("")
        elif self.progress.planned:
            self._draw_progress(final=True)

    # --- what the items report -----------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before pytest-json-report reads the teardown report's properties
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take the rows, errors and progress an item's report carries (controller only)."""
        # workers send reports on; the run is what finished before the session began to finish (late xdist
        # reports are left out): once the store's thread copies the stage (begin_store), no row joins it
        if hasattr(self.config, "workerinput") or self.status != "running" or self._handoff is not None:
            return
        props = dict(report.user_properties)
        if ITEM_KEY not in props:
            return
        item = json.loads(props[ITEM_KEY])
        key = (item["benchmark"], item["model"])
        # an item skipped after its model failed permanently was not evaluated: it counts as errored
        errored = report.failed or (report.skipped and ERROR_KEY in props)
        if report.skipped and ERROR_KEY in props:
            self.skipped_after_permanent[item["model"]] += 1
        if report.failed:
            self._count_failure()
        if errored:
            self.errors[key] += 1
            if EPOCH_KEY in props:
                self.errored_epochs[key][props[EPOCH_KEY]] += 1
            error = json.loads(props[ERROR_KEY]) if ERROR_KEY in props else {"kind": "error", "detail": report.when}
            self.error_details[key][error["detail"]] += 1
            self._announce_permanent(item["model"], error)
            self.failed_items.append({"benchmark": key[0], "model": key[1], "item": report.nodeid,
                                      "case_id": props.get(CASE_KEY), **failure_class(report, props.get(ERROR_KEY))})
        if report.when == "call" and report.passed:
            for name, value in report.user_properties:
                if name == ROW_KEY:  # to the spool as its JSON text, parsed once at the end (run.spool)
                    self._spool.add(key[0], report.nodeid, value)
                    if self._stage is not None and self._stage.add(key[0], report.nodeid, value):
                        from fieldeval.run.memory import trim_heap

                        trim_heap()  # a chunk's passing memory back to the system, not left between the items'
        if report.when in ("call", "teardown") and self.eval_items > self.trim_limit:
            # the row is taken: neither the reports pytest keeps nor pytest-json-report hold a second copy of it
            report.user_properties = [(k, v) for k, v in report.user_properties if k != ROW_KEY]
        if report.when == "call" or (report.when == "setup" and not report.passed):  # the item is over
            self.progress.finish(key, failed=errored)
            self._write_progress()
            self._draw_progress()

    def _count_failure(self) -> None:
        """``-x`` and ``--maxfail N``: the failure that ends the session also stops spending at once."""
        self._failures += 1
        maxfail = self.config.option.maxfail
        if maxfail and self._failures >= maxfail:
            self.stop_calls("-x" if maxfail == 1 else f"--maxfail {maxfail}")

    def _shared(self, row: dict) -> dict:
        """The row, each text value now the one copy earlier rows hold of it, field by field (the spool parses
        rows in chunks whose keys are shared already). A field whose values mostly differ (a case id) stops
        being shared once it has :data:`SHARED_DISTINCT` distinct values."""
        memos = self._strings
        for key, value in row.items():
            if type(value) is str:
                memo = memos.get(key)
                if memo is None:
                    memo = memos[key] = {}
                elif memo is _DISTINCT:
                    continue
                row[key] = memo.setdefault(value, value)
                if len(memo) > SHARED_DISTINCT:
                    memos[key] = _DISTINCT
        return row

    def _announce_permanent(self, model: str, error: dict) -> None:
        if error.get("kind") != "permanent" or model in self._announced:
            return
        self._announced.add(model)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"fieldeval: {model} failed permanently, its remaining items are skipped: "
                                f"{error['detail']}", red=True)

    def rows(self) -> dict[str, list[dict]]:
        """Every recorded row by benchmark, in node id order: the items' rows wait in the session's spool
        (:mod:`fieldeval.run.spool`) while it runs and are parsed here, once, when first read after new ones came."""
        if self._spool:
            for name, rows in self._spool.drain(self._shared).items():  # each in node id order
                if self._rows[name]:  # after a --resume's stored rows, or rows parsed earlier
                    self._rows[name].extend(rows)
                    self._rows[name].sort(key=itemgetter("nodeid"))
                else:
                    self._rows[name] = rows
        return self._rows

    def row_lines(self) -> Iterator[dict | bytes]:
        """Every row for the rows file, by benchmark and then node id: as its spool line where that is the row's
        own JSON (:meth:`~fieldeval.run.spool.RowSpool.lines`), else as the row. The spool file goes once they
        have all been given."""
        for name in sorted(self.rows()):
            yield from self._spool.lines(name, self.sorted_rows(name))
        self._spool.discard()

    def item_property(self, tag: tuple[str, str]) -> tuple[str, str]:
        """The ``user_properties`` entry that marks an eval item of (benchmark, model): one shared tuple each."""
        found = self._item_properties.get(tag)
        if found is None:
            found = self._item_properties[tag] = (ITEM_KEY, json.dumps({"benchmark": tag[0], "model": str(tag[1])}))
        return found

    def has_results(self) -> bool:
        """Whether any eval item reported."""
        return bool(self._rows or self._spool or self.errors)

    def ran_evals(self) -> bool:
        """Whether this session planned or ran eval items (and so writes a report and stores a run)."""
        return bool(self.selected) and not self.config.option.collectonly

    def sorted_rows(self, benchmark: str) -> list[dict]:
        """A benchmark's rows in a stable order, whatever order the workers finished in: node id order, which
        :attr:`rows` keeps (a copy of its list)."""
        return list(self.rows().get(benchmark, []))

    def error_lines(self) -> list[str]:
        """One line per model with errors: the count and the most common reasons."""
        lines = []
        for (bench, model), count in sorted(self.errors.items()):
            reasons = "; ".join(f"{detail} (x{n})" for detail, n in self.error_details[(bench, model)].most_common(2))
            repeated = self.errored_epochs.get((bench, model))
            failed = f"{count} epoch(s) of {len(repeated)} item(s)" if repeated else f"{count} item(s)"
            lines.append(f"fieldeval errors: {bench} {model}: {failed} failed: {reasons}")
        for model, count in sorted(self.skipped_after_permanent.items()):
            lines.append(f"fieldeval: {model}: {count} item(s) skipped after its permanent failure, "
                         "no call made (counted as errors)")
        return lines

    # --- the report ----------------------------------------------------------------------------

    def payload(self) -> dict:
        """``report["evals"]``: run id, ontology version, and every benchmark's metrics per model."""
        if self._payload is not None:
            return self._payload
        versions = sorted({r["ontology_version"] for r in self.rows().get("ebs", []) if r.get("ontology_version")})
        out = benchmark_entries(self.rows(), self.errors, seed=self.options.seed, resamples=self.options.resamples,
                                cluster_by=self.options.cluster_by, planned=self.progress.planned,
                                errored_epochs=self.errored_epochs)
        # every row is one (benchmark, model)'s: the cache hits are the entries' cached items (no pass over the rows)
        hits = sum(entry["totals"]["cached_items"] for entries in out.values() for entry in entries.values())
        gates = gate_results(self.gates, out, on=self.options.gate_on, interval=self.options.gate_interval,
                             ran=sorted({*self.selected, *out}), model_ids=self.gated_models(out))
        self._payload = {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "ontology_version": versions[0] if len(versions) == 1 else (versions or None),
            "benchmarks": out,
            "cache": {"mode": self.options.cache, "hits": hits,
                      "misses": sum(map(len, self.rows().values())) - hits},
            "gates": gates,
            "status": self.status,
        }
        if self.options.cluster_by != "benchmark":
            self._payload["cluster_by"] = self.options.cluster_by
        ranking = self.rankings(out)
        if ranking:
            self._payload["tied_with_best"] = ranking
        scoring = self.scoring()
        if scoring:
            self._payload["scoring"] = scoring
        from fieldeval.run.audit import run_audit  # the gold data's findings, once per session (payload is kept)

        self._payload["audit"] = run_audit(sorted({*self.selected, *out}), self.benchmark, self.context)
        if self.status != "running":  # judged once the session ends: errored items, then the baseline run
            gates += error_gates(out, self.status, self.options.max_errors)
            if self.options.baseline_run and out:
                try:
                    self._payload["baseline"] = self.baseline_comparison()
                except UsageError as error:
                    self._payload["baseline"] = {"run": self.options.baseline_run, "differences": [],
                                                 "notes": [str(error)]}
                gates += regression_gates(self._payload["baseline"]["differences"],
                                          tolerance=self.options.regression_tolerance,
                                          interval=self.options.gate_interval)
        return self._payload

    def gated_models(self, out: dict) -> dict[str, str]:
        """The model id each reported name is gated as: an llm alias's model id, and a matrix combination's
        (``gpt-4o-mini-t0.7``) model's, so a model's thresholds reach every combination of it."""
        names = {model for models in out.values() for model in models}
        combos = {str(c): c.model for bench in out for c in self.models_for(bench) if hasattr(c, "model")}
        ids = model_ids(names | set(combos.values()))
        found = {name: ids[name] for name in names if name in ids}
        found.update({label: ids.get(model, model) for label, model in combos.items() if label in names})
        return found

    def scoring(self) -> dict:
        """``{bench: ...}``: what each selected benchmark measured about its scorer before the items ran (IBF: the
        judge's agreement with people, from ``--judge-graded``)."""
        found = {}
        for name in sorted(self.selected):
            meta = self.benchmark(name).run_meta(self.context(name))
            if meta.scoring:
                found[name] = dict(meta.scoring)
        return found

    def rankings(self, out: dict) -> dict:
        """``{bench: ranking}`` for each benchmark two or more models (or matrix combinations) scored: the best by
        its lead metric and those tied with it after Holm (:func:`fieldeval.stats.ranking.tied_with_best`)."""
        from fieldeval.stats.ranking import tied_with_best

        found = {}
        for bench, models in out.items():
            if len(models) > 1:
                ranking = tied_with_best(bench, self.sorted_rows(bench), models, seed=self.options.seed,
                                         resamples=self.options.resamples, cluster_by=self.options.cluster_by)
                if ranking:
                    found[bench] = ranking
        return found

    def baseline_comparison(self) -> dict:
        """``{"run", "differences", "notes"}``: this run against ``--baseline-run``, paired by case."""
        from fieldeval.stats.paired import differences
        from fieldeval.store import declared_columns, open_store

        url = self.store_url()
        if url is None:
            raise UsageError(f"--baseline-run {self.options.baseline_run}: needs a run store; drop --store none")
        with open_store(url, columns=declared_columns()) as store:
            base_rows = store.run_rows(self.options.baseline_run)
        rows = {name: self.sorted_rows(name) for name in self.rows()}
        diffs, notes = differences(self.options.baseline_run, base_rows, self.run_id, rows, seed=self.options.seed,
                                   resamples=self.options.resamples, cluster_by=self.options.cluster_by,
                                   tolerance=self.options.regression_tolerance)
        return {"run": self.options.baseline_run, "differences": diffs, "notes": notes}

    def errors_allowed(self) -> bool:
        """Whether ``--max-errors`` lets this run's errored items pass (so only the gates judge it)."""
        allowed = self.options.max_errors
        errored = sum(len(self.errored_epochs[key]) if self.errored_epochs.get(key) else count
                      for key, count in self.errors.items())  # a repeated item once, however many epochs errored
        return allowed is not None and errored <= allowed

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict) -> None:
        """Put the aggregated metrics into pytest-json-report's report as ``evals``."""
        if self.ran_evals():
            json_report["evals"] = self.payload()
            from fieldeval.run.memory import restore_summary

            restore_summary(json_report, self.released_entries)

    def reports_dir(self) -> Path:
        """The folder for scored tables."""
        explicit = self.options.reports_dir
        return Path(explicit) if explicit else self.config.rootpath / "reports"

    def finish(self, exitstatus: int) -> None:
        """Fix the run status and aggregate (controller, as the session ends, before the report is built)."""
        self.stop_calls("the session is ending")
        self._flush_cache()
        self._check_cache()
        self.status = self.progress.status = self.run_status(exitstatus)
        self._write_progress()
        self._payload = None
        self.payload()

    def write_outputs(self, folder: Path) -> list[Path]:
        """Each benchmark's scored tables under ``folder``; the paths written."""
        written: list[Path] = []
        for name in sorted(self.rows()):
            written += self.benchmark(name).write_outputs(self.sorted_rows(name), folder)
        return written

    # --- the run store -------------------------------------------------------------------------

    def store_url(self) -> str | None:
        """``--store``, else the one default every command uses (:func:`~fieldeval.store.location.default_store_url`
        from pytest's rootdir); None: no store."""
        from fieldeval.store.location import default_store_url

        url = self.options.store or default_store_url(self.config.rootpath)
        return None if url.lower() == "none" else url

    def epochs_of(self, key: tuple[str, str]) -> int:
        """How many times each item of (benchmark, combination) is asked: ``--epochs`` K, else 1."""
        bench, model = key
        if not self.options.designed or bench not in self.selected:
            return 1
        return max(1, sum(1 for cell in self.design(bench) if str(cell) == model))

    def item_counts(self) -> dict[str, int]:
        """The stored run's ``items_planned``, ``items_done`` and ``items_errored``: an item asked K times
        (``--epochs``) counts once, as its report entry counts it."""
        entries = {(bench, model): entry for bench, models in self.payload()["benchmarks"].items()
                   for model, entry in models.items()}
        counts = dict.fromkeys(("items_planned", "items_done", "items_errored"), 0)
        for key in {*self.progress.planned, *self.progress.done}:
            k, entry = self.epochs_of(key), entries.get(key)
            if k > 1 and entry is not None:
                found = (entry["planned"], entry["items"], entry["errors"])
            else:
                found = (round(self.progress.planned.get(key, 0) / k), self.progress.done.get(key, 0),
                         self.progress.errors.get(key, 0))
            for name, n in zip(counts, found):
                counts[name] += n
        return counts

    def run_status(self, exitstatus: int) -> str:
        """``completed`` only when every planned item was scored and pytest ended normally; ``partial`` when
        every planned item ran but some errored; else ``interrupted``."""
        planned = sum(self.progress.planned.values())
        done = sum(self.progress.done.values())
        normal = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
        if not normal or done < planned:
            return "interrupted"
        return "partial" if sum(self.progress.errors.values()) or sum(self.errors.values()) else "completed"

    def save_run(self, exitstatus: int, folder: Path) -> str | None:
        """Store the finished session as an immutable run (controller only); None when stored (or no store).

        When the store cannot take it, the run is kept in ``folder/unstored.json`` for ``fieldeval runs
        push`` and the one line saying so is returned. After a successful save, runs kept by earlier
        sessions for the same store are pushed too.
        """
        return self.start_save_run(exitstatus, folder).result()

    def begin_store(self) -> None:
        """Start storing the run as the session ends, once the stage's last chunk is flushed, when a stage holds its
        responses (a SQLite store): a thread of its own copies them into the store while the session parses and
        aggregates its rows (the copy runs outside the GIL), then waits for the run's other rows, which
        :meth:`start_save_run` hands it. Without a stage the store's thread starts there; so it does with
        ``--baseline-run``, whose comparison reads the store meanwhile (the copy holds the store's write lock,
        which opening a store takes too)."""
        url = self.store_url()
        if (self._stage is None or url is None or self._saving is not None or not self.has_results()
                or self.options.baseline_run):
            return
        self.completed_at = _now()
        counts = Counter({name: len(rows) for name, rows in self._rows.items()}) + self._spool.counts()
        self._handoff = Future()
        self._saving = _in_thread(self._store_run, url, dict(counts), self._handoff)

    def abandon_store(self) -> None:
        """Let the store's thread that :meth:`begin_store` started end without storing the run (the session ends
        before it could hand the run over): its transaction is rolled back."""
        if self._handoff is not None and not self._handoff.done():
            self._handoff.set_exception(_Abandoned())

    def start_save_run(self, exitstatus: int, folder: Path, rows_digest: str | None = None) -> Future:
        """:meth:`save_run`, begun now: the run's table rows are built here and handed to the store's thread (the
        one :meth:`begin_store` started, else one started now); the future gives what :meth:`save_run` returns.
        With ``rows_digest`` (the digest of ``folder``'s rows file, written already), the run is first kept in
        ``folder/unstored.json`` (:func:`~fieldeval.store.pending.keep_unstored`), which the store's thread removes
        once the store has committed: a session killed at any moment leaves a run ``runs push`` can store. The
        controller writes the run's other files meanwhile."""
        url = self.store_url()
        if url is None:
            return _done(None)
        from fieldeval.run.shards import run_group_meta
        from fieldeval.store import declared_columns
        from fieldeval.store.payload import flatten_run

        try:
            metas = {name: self.benchmark(name).run_meta(self.context(name)) for name in self.rows()}
            meta = {
                "label": self.options.run_label,
                "corpus_version": {b: m.corpus_version for b, m in metas.items() if m.corpus_version},
                "content_hash": {b: m.content_hash for b, m in metas.items() if m.content_hash},
                "git_commit": _git_commit(self.config.rootpath),
                "status": self.status if self.status != "running" else self.run_status(exitstatus),
                "completed_at": self.completed_at or _now(),
                **run_group_meta(self),
                **self.item_counts(),
                "errors": self.failed_items,
            }
            rows = {name: self.sorted_rows(name) for name in self.rows()}
        except BaseException:
            self.abandon_store()
            raise
        self.completed_at = meta["completed_at"]
        if rows_digest is not None:
            self._keep_first(folder, url, meta, rows_digest)
        try:
            flat: FlatRun | Exception = flatten_run(self.payload(), rows, meta, declared_columns())
        except Exception as error:  # noqa: BLE001  (reported as the store's refusal: the run is kept)
            flat = error
        handoff = self._handoff = self._handoff if self._handoff is not None else Future()
        handoff.set_result((folder, rows, meta, flat))
        if self._saving is None:
            self._saving = _in_thread(self._store_run, url, {name: len(r) for name, r in rows.items()}, handoff)
        return self._saving

    def _keep_first(self, folder: Path, url: str, meta: dict, rows_digest: str) -> None:
        """Keep the run beside its rows file before the store may commit it, with the digests of both (a full disk
        leaves it to be kept whole if the store refuses it)."""
        from fieldeval.run.runfiles import ROWS_FILE
        from fieldeval.store.pending import digest_of, keep_unstored

        payload = self.payload()
        payload["digest"] = {"rows": rows_digest, "metrics": digest_of(payload.get("benchmarks"))}
        try:
            self._kept = keep_unstored(folder, url, payload, None, meta, rows_file=Path(folder) / ROWS_FILE,
                                       recompute=self._recompute())
        except OSError:
            self._kept = None

    def _recompute(self) -> dict[str, Any]:
        """What a kept run's metrics are recomputed from besides its rows (``runs push`` checks them)."""
        return {"seed": self.options.seed, "resamples": self.options.resamples, "cluster_by": self.options.cluster_by,
                "errors": [[b, str(m), n] for (b, m), n in self.errors.items()],
                "planned": [[b, str(m), n] for (b, m), n in self.progress.planned.items()],
                "errored_epochs": [[b, str(m), case, n] for (b, m), cases in self.errored_epochs.items()
                                   for case, n in cases.items()]}

    def _kept_line(self, kept: Path, url: str, reason: str | None, error: Exception | None = None) -> str:
        """The one line saying the run was not stored and where it is kept, with the command that stores it."""
        from fieldeval.store.runs import RunExists
        from fieldeval.store.url import redact

        head = f"fieldeval: run {self.run_id} not stored" + (f" ({reason})" if reason else "")
        name = self.run_id if kept.parent.name == self.run_id else kept  # a later session's folder: its file
        if isinstance(error, RunExists):
            return (f"{head}; kept in {kept}: store it under a new id with "
                    f"`fieldeval runs push {kept} --as run_NEW --store {redact(url)}`")
        return (f"{head}; kept in {kept}: store it with `fieldeval runs push {name} --store {redact(url)}` once the "
                "store is back")

    def keep_unsaved(self) -> str | None:
        """Keep the run for ``runs push`` when its store write has begun and not returned (the process is about to
        stop at once); the words saying where, else None."""
        from fieldeval.store.pending import keep_unstored
        from fieldeval.store.url import redact

        handoff, url = self._handoff, self.store_url()
        if url is None or handoff is None or not handoff.done() or handoff.exception() is not None \
                or self._saving is None or self._saving.done():
            return None
        folder, rows, meta, _ = handoff.result()
        kept = self._kept if self._kept is not None and self._kept.exists() else keep_unstored(
            folder, url, self.payload(), rows, meta, recompute=self._recompute())
        name = self.run_id if kept.parent.name == self.run_id else kept
        return (f"run {self.run_id} may not be stored; kept in {kept}: store it with "
                f"`fieldeval runs push {name} --store {redact(url)}`")

    def _store_run(self, url: str, counts: dict[str, int], handoff: Future) -> str | None:
        """The store's thread: one transaction, or the run kept for ``runs push`` (also when building its rows
        failed: that error is the store's refusal). ``handoff`` gives the run's folder, rows, meta and table rows
        (:meth:`start_save_run`); with a stage, its responses are copied before they come (``counts`` of them)."""
        from fieldeval.store import declared_columns, open_store
        from fieldeval.store.pending import keep_unstored
        from fieldeval.store.url import database_errors

        def built() -> FlatRun:
            flat = handoff.result()[3]
            if isinstance(flat, Exception):
                raise flat
            return flat

        try:
            with open_store(url, columns=declared_columns()) as store, database_errors(store.url):
                if self._stage is not None:
                    store.save_staged(self._stage, self.run_id, self.completed_at, counts, built)
                else:
                    flat, (_, rows, meta, _) = built(), handoff.result()
                    # a resumed run is replaced by its completed self, under the same id, in the same transaction
                    store.save_flat(flat, rows, meta, replaces=self.options.resume,
                                    lease=self._lease[1] if self._lease else None)
                    self._lease = None if self.options.resume else self._lease
                if self._kept is not None:  # committed: the kept copy goes
                    self._kept.unlink(missing_ok=True)
                    self._kept = None
                self._push_kept(store, url)
        except _Abandoned:
            return None
        except Exception as error:  # noqa: BLE001  (whatever the store says, the run must not be lost)
            self._drop_stage()
            reason = " ".join(str(error).split()) or type(error).__name__
            try:
                folder, rows, meta, _ = handoff.result()
            except _Abandoned:
                return None
            if self._kept is not None and self._kept.exists():
                return self._kept_line(self._kept, url, reason, error)
            try:
                self._kept = keep_unstored(folder, url, self.payload(), rows, meta, recompute=self._recompute())
            except OSError as write_error:
                return (f"fieldeval: run {self.run_id} not stored ({reason}) and could not be kept either "
                        f"({write_error.strerror or write_error}); free the disk and run again")
            return self._kept_line(self._kept, url, reason, error)
        self._drop_stage()
        return None

    def kept_file(self) -> Path | None:
        """The run's kept file while the store has not committed the run (or refused it), else None."""
        return self._kept if self._kept is not None and self._kept.exists() else None

    def flush_stage(self) -> None:
        """Build and write the store rows of the items that reported since the stage's last chunk."""
        if self._stage is not None:
            self._stage.flush()

    def _drop_stage(self) -> None:
        """Remove the stage's file once the run is stored (or kept without it)."""
        if self._stage is not None:
            self._stage.discard()

    def _push_kept(self, store: Any, url: str) -> None:
        """Store the runs earlier sessions kept for this store (a failure leaves them for later)."""
        from fieldeval.store.pending import push, read_unstored, unstored_runs
        from fieldeval.store.url import redact

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for path in unstored_runs(self.reports_dir()):
            try:
                run = read_unstored(path)
                if run.store != redact(url) or run.run_id == self.run_id:
                    continue
                push(run, store)
            except Exception:  # noqa: BLE001  (a kept run that cannot go yet stays kept)
                continue
            if reporter is not None:
                reporter.write_line(f"fieldeval: stored {run.run_id}, kept by an earlier session")


class _Abandoned(Exception):
    """The session ended before it handed its run to the store's thread (see :meth:`EvalSession.abandon_store`)."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _in_thread(function: Callable[..., Any], *args: Any) -> Future:
    """``function(*args)`` in a thread of its own, which ends with it."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fieldeval-store")
    future = pool.submit(function, *args)
    pool.shutdown(wait=False)
    return future


def _done(value: Any) -> Future:
    """A future that holds ``value`` already."""
    future: Future = Future()
    future.set_result(value)
    return future


def _git_commit(root: Path) -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


SHARED_DISTINCT = 5_000  # a row field with more distinct texts than this is not shared any more (EvalSession._shared)
_DISTINCT: dict = {}  # the mark of such a field


__all__ = ["EvalSession"]


class _SolverJobs(MutableMapping):
    """Node id -> the solver call of that eval item (what :class:`~fieldeval.calls.pool.SolverPool` runs), made
    when the pool asks for it: the mapping holds the items, which the session holds anyway until they have run,
    not a call each (about 17 MB at 100,000 items, for the whole run)."""

    def __init__(self, items: dict[str, pytest.Item], cases_of: Callable[[str], Any], clients: dict[str, Any]) -> None:
        self._items = items
        self._cases_of = cases_of
        self._clients = clients

    def __getitem__(self, key: str) -> Callable[[], Any]:
        _, name, solver, callspec = next(_solver_items([self._items[key]]))
        return functools.partial(_solve_at, solver, self._cases_of(name), callspec.params["case"],
                                 callspec.params["model"], self._clients[name])

    def __setitem__(self, key: str, job: Callable[[], Any]) -> None:
        raise TypeError("an eval item's solver call is made from the item; none is set")

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def _solve_at(solver: Callable[..., Any], cases: Any, position: Any, model: str, client: Any) -> Any:
    """Run ``solver`` on the case at ``position`` (read when the solver runs, not when it is planned)."""
    case = cases[position] if isinstance(position, int) and not isinstance(position, bool) else position
    return solver(case, model, client)


def _solver_items(items: Sequence[pytest.Item]) -> Iterator[tuple[pytest.Item, str, Callable[..., Any], Any]]:
    """(item, benchmark, solver, callspec) of every eval item whose module declares a solver."""
    for item in items:
        marker = item.get_closest_marker(MARKER)
        solver = marker.kwargs.get("solver") if marker is not None else None
        callspec = getattr(item, "callspec", None)
        if solver is None or callspec is None or "case" not in callspec.params or "model" not in callspec.params:
            continue
        yield item, marker.kwargs["benchmark"], solver, callspec
