"""One pytest session's evaluation, wired from its parts; each part only calls down.

- :class:`~fieldeval.run.selection.Selection`: the benchmarks, contexts, cases, models and design;
- :class:`~fieldeval.run.solving.Solving`: the solvers in the bounded pool;
- :class:`~fieldeval.run.intake.Intake`: every item's report, its row parsed once;
- :class:`~fieldeval.run.progress.ProgressDisplay`: the counts drawn and written;
- :func:`~fieldeval.run.report.build_payload`: the report, gates and status;
- :class:`~fieldeval.run.saver.RunSaver`: the store's transaction and the kept run;
- :class:`~fieldeval.run.resumed.ResumedRun`: a ``--resume``'s lease and stored rows.

Built once in ``pytest_configure`` and kept on the config (never in a module
global), so sessions in one process, as pytester runs them, never share it.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections import Counter
from concurrent.futures import Future
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fieldeval.calls.cells import model_of
from fieldeval.calls.client import ModelClient, resolve_model
from fieldeval.errors import UsageError, exit_on_usage_error
from fieldeval.run.intake import Intake
from fieldeval.run.memory import keeps_passed_reports
from fieldeval.run.options import EngineOptions
from fieldeval.run.progress import Progress, ProgressDisplay, keys_from_ids
from fieldeval.run.report import build_payload, run_status
from fieldeval.run.resume import resumed_plan
from fieldeval.run.runfiles import trim_limit
from fieldeval.run.saver import RunSaver
from fieldeval.run.selection import Selection
from fieldeval.run.solving import Solving, batch_settings
from fieldeval.settings import Gate

if TYPE_CHECKING:
    from fieldeval.run.resumed import ResumedRun


class EvalSession:
    """What one pytest session knows and gathers; the controller aggregates, reports and stores."""

    def __init__(self, config: pytest.Config, options: EngineOptions, bench_options: dict[str, Any], *,
                 selected: list[str], client: ModelClient, gates: list[Gate], session_dir: Path | None,
                 tool: dict[str, Any]) -> None:
        self.config, self.options, self.client, self.gates = config, options, client, gates
        self.session_dir = session_dir
        self.selection = Selection(config, options, bench_options, selected, tool)
        self.run_id = options.run_id or options.resume or "run_" + secrets.token_hex(4)
        self.started_at = _now()
        self._began = time.monotonic()
        self.ended_at: str | None = None
        self.wall_s: float | None = None
        self.status = "running"
        self.eval_items = 0  # this process's collected eval items (the controller's planned ones under xdist)
        self.trim_limit = trim_limit()  # above this many items, rows are not kept twice (report.json is trimmed)
        self.released_entries = 0  # passed items whose pytest-json-report entries were let go of (run.memory)
        # above the trim limit the controller lets go of passed reports, unless something reads them at the end
        self.releases_reports = not self.is_worker and not keeps_passed_reports(config)
        self.disk_full: str | None = None  # the one line, once the disk filled up mid-run
        self.pytest_session: pytest.Session | None = None
        self.resumed_settings: dict[str, Any] | None = None  # --resume: the stored run's settings
        self.plan_ids: list[str] | None = None  # the node ids of the run's planned eval items (its first session's)
        self.module_benchmarks: dict[str, tuple[str, ...]] = {}  # eval modules (as node ids begin) -> benchmarks
        self.progress = Progress(epochs_of=self.selection.epochs_of, concurrency=client.concurrency)
        self.display = ProgressDisplay(config, self.progress, options.progress_file, self.stop_for_full_disk)
        self.solving = Solving(client, self.selection, batch=batch_settings(options))
        self.intake = Intake(session_dir, on_failed=self._count_failure, on_error=self._announce_permanent,
                             on_item=self._item_done, on_chunk=_trim_heap)
        from fieldeval.store.location import default_store_url

        store = options.store or default_store_url(config.rootpath)
        url = self._url = None if store.lower() == "none" else store  # where the run is stored (store_url)
        self.resumed: ResumedRun | None = None
        if options.resume and url is not None:
            from fieldeval.run.resumed import ResumedRun

            self.resumed = ResumedRun(url, options.resume, selected)
        self.saver = RunSaver(url, self.run_id, resumed=self.resumed, reports_dir=self.reports_dir(),
                              payload=self.payload, recompute=self._recompute, say=self.display.say)
        self._payload: dict | None = None
        self._failures = 0
        self._permanent: set[str] = set()

    @property
    def selected(self) -> list[str]:
        """The benchmarks of the eval modules the command line names."""
        return self.selection.selected

    @property
    def is_worker(self) -> bool:
        """Whether this process is a pytest-xdist worker."""
        return hasattr(self.config, "workerinput")

    def prepare(self) -> None:
        """Check the models and the store, and load every selected benchmark's inputs before collection (controller)."""
        # imported here, never first in the store's thread: a module that pytest rewrites, parsed in two threads at
        # once, trips CPython 3.11's parser (xdist workers, which never store, do without SQLAlchemy)
        import fieldeval.store.pending  # noqa: F401
        import fieldeval.store.url  # noqa: F401

        options, selection, collecting = self.options, self.selection, self.config.option.collectonly
        for model in options.models:
            resolve_model(model)
        if options.matrix_job is not None and getattr(self.config.option, "splits", None):
            raise UsageError(f"--matrix-job {options.matrix_job} with --splits: a job runs one model of the "
                             "matrix or one pytest-split group, not both; drop one")
        if options.matrix_job is not None and self.selected:
            selection.matrix_job_model()  # one line before collection when K is past the matrix's last model
        if options.designed and not collecting:
            for name in self.selected:
                for cell in selection.design(name):
                    resolve_model(cell.model)
        url = self.store_url()
        for flag, value in (("--resume", options.resume), ("--baseline-run", options.baseline_run)):
            if value and url is None:
                raise UsageError(f"{flag} {value}: needs the run store that holds it; drop --store none")
        if url is not None and self.selected and not collecting:
            from fieldeval.run.resumed import check_stored_runs
            from fieldeval.store import check_store

            check_store(url, create=True)
            self.intake.stage = self.saver.start_stage(self.session_dir)
            check_stored_runs(url, [("--baseline-run", options.baseline_run), ("--resume", options.resume)])
            if self.resumed is not None:
                self.resumed.take_lease()
                self.started_at = self.resumed.created_at() or self.started_at  # the run keeps its start
                for bench, rows in self.resumed.rows().items():  # the report covers every item of the run
                    self.intake.add_rows(bench, rows)
        if collecting:
            return  # collection loads what its items need; nothing is loaded (or downloaded) before
        for name in self.selected:
            selection.context(name)
        if options.resume and self.resumed_settings is not None:
            from fieldeval.run.resume import check_inputs

            metas = {name: selection.run_meta(name) for name in self.selected}
            check_inputs(options.resume, self.resumed_settings, metas)
        for name in self.selected:
            bench = selection.benchmark(name)
            if bench.warm is not None:
                models = selection.models_for(name)
                bench.warm(selection.bench_options[name], list(dict.fromkeys(map(model_of, models))))

    def announce(self) -> None:
        """Print the design's notices (``--epochs`` at temperature 0, models whose answers are sampled), one line
        each, once (controller)."""
        if self.is_worker:
            return
        if self.options.designed:
            for name in self.selected:
                self.selection.design(name)
        from fieldeval.calls.models import sampling_notices

        # the models a user named (the offline baselines take a temperature): no llm plugin is loaded for a default run
        chosen = self.options.models or self.options.designed
        models = [model_of(cell) for name in self.selected for cell in self.selection.models_for(name)] if chosen else []
        for line in [*self.selection.notices, *exit_on_usage_error(lambda: sampling_notices(models))]:
            self.display.say(line, yellow=True)

    def plan(self, keys: list[tuple[str, str] | None], node_ids: list[str] | None = None) -> None:
        """Planned items per (benchmark, model), from the collected items and the resumed run's scored ones;
        ``node_ids``: the collected eval items' node ids (the run's plan, kept for ``--resume``)."""
        stored = self.resumed.rows() if self.resumed is not None else {}
        resumed = [(bench, str(row["model"])) for bench, rows in stored.items() for row in rows]
        self.progress.plan([k for k in keys if k is not None] + resumed)
        for key in resumed:  # scored in the run being resumed
            self.progress.done[key] += 1
        stored_plan = resumed_plan(self.resumed_settings)
        if stored_plan is not None:  # the run's own plan: every item its first session planned, no more
            self.plan_ids = stored_plan
            wanted = Counter(keys_from_ids(stored_plan, self.module_benchmarks, self.selection.models_for))
            for key, count in wanted.items():
                if key[0] in self.selected and self.progress.planned[key] < count:
                    self.progress.planned[key] = count
        elif self.resumed_settings:  # a run stored before its plan was: complete once every case of its suite is
            from fieldeval.store.groups import planned_items

            for key, cases in planned_items(self.resumed_settings).items():
                if key[0] in self.selected and self.progress.planned[key] < len(cases):
                    self.progress.planned[key] = len(cases)
        else:
            self.plan_ids = node_ids
        self.eval_items = max(self.eval_items, sum(self.progress.planned.values()))
        self.trim_limit = trim_limit()
        self.display.write()

    def plan_from_ids(self, ids: list[str]) -> None:
        """Planned items from xdist's collected node ids."""
        matched: list[str] = []
        self.plan(keys_from_ids(ids, self.module_benchmarks, self.selection.models_for, matched), matched)

    def take_report(self, report: pytest.TestReport) -> None:
        """Take an item's report (controller, while the run's rows are open)."""
        if not self.is_worker:
            self.intake.take(report, slim=self.eval_items > self.trim_limit)

    def _item_done(self, key: tuple[str, str], errored: bool) -> None:
        self.progress.finish(key, failed=errored)
        self.display.write()
        self.display.draw()

    def _count_failure(self) -> None:
        """``-x`` and ``--maxfail N``: the failure that ends the session also stops spending at once."""
        self._failures += 1
        maxfail = self.config.option.maxfail
        if maxfail and self._failures >= maxfail:
            self.stop_calls("-x" if maxfail == 1 else f"--maxfail {maxfail}")

    def _announce_permanent(self, model: str, error: dict) -> None:
        if error.get("kind") == "permanent" and model not in self._permanent:
            self._permanent.add(model)
            self.display.say(f"fieldeval: {model} failed permanently, its remaining items are skipped: "
                             f"{error['detail']}", red=True)

    def stop_calls(self, reason: str) -> None:
        """No new model call starts, in any process of the session; calls in flight end on their own timeout."""
        self.solving.stop(reason)

    def stop_for_full_disk(self, line: str) -> None:
        """Stop starting items (the disk is full); the session ends with ``line`` and exit status 2."""
        if self.disk_full is None:
            self.disk_full = line
        self.stop_calls("no space left on the device")
        if self.pytest_session is not None:
            self.pytest_session.shouldstop = "no space left on the device"

    def payload(self) -> dict:
        """``report["evals"]`` (built once per status: :meth:`finish` builds it again)."""
        if self._payload is None:
            intake = self.intake
            self._payload = build_payload(
                run_id=self.run_id, started_at=self.started_at, status=self.status, rows=intake.rows(),
                intake=intake, planned=self.progress.planned, selection=self.selection, gates=self.gates,
                options=self.options, baseline_rows=self._baseline_rows, ended_at=self.ended_at, wall_s=self.wall_s)
        return self._payload

    def _baseline_rows(self) -> dict[str, list[dict]]:
        from fieldeval.store import declared_columns, open_store

        url = self.store_url()
        if url is None:
            raise UsageError(f"--baseline-run {self.options.baseline_run}: needs a run store; drop --store none")
        with open_store(url, columns=declared_columns()) as store:
            return store.run_rows(self.options.baseline_run)

    def errors_allowed(self) -> bool:
        """Whether ``--max-errors`` lets this run's errored items pass (so only the gates judge it)."""
        allowed = self.options.max_errors
        return allowed is not None and self.intake.errored_items() <= allowed

    def finish(self, exitstatus: int) -> None:
        """Fix the run status and aggregate (controller, as the session ends, before the report is built)."""
        from fieldeval.run.cachefile import damage_line

        self.intake.open = False
        self.stop_calls("the session is ending")
        self._commit_cache()
        if self.client.cache is not None and self.disk_full is None and (line := damage_line(self.client.cache)):
            sys.stderr.write(line + "\n")
        self.status = self.progress.status = run_status(exitstatus, self.progress, self.intake.errors)
        self.ended_at, self.wall_s = _now(), time.monotonic() - self._began
        self.display.write()
        self._payload = None
        self.payload()

    def begin_store(self) -> None:
        """Close the run's rows and start the store's thread on the staged responses (:meth:`RunSaver.begin`);
        not with ``--baseline-run``, whose comparison reads the store meanwhile."""
        if self.saver.stage is not None and self.intake.has_results() and not self.options.baseline_run:
            self.intake.open = False
            self.saver.begin(self.intake.counts())

    def save(self, exitstatus: int, folder: Path, rows_digest: str | None = None) -> Future:
        """Hand the finished run to the store (:meth:`RunSaver.save`); the future gives None once stored, else the
        one line saying where it is kept."""
        from fieldeval.run.report import stored_meta

        if self.saver.url is None:
            return self.saver.save(folder, {}, {}, None)
        try:
            status = self.status if self.status != "running" else run_status(exitstatus, self.progress,
                                                                              self.intake.errors)
            meta = stored_meta(self.payload(), selection=self.selection, options=self.options, status=status,
                               progress=self.progress, intake=self.intake,
                               completed_at=self.saver.completed_at or _now(),
                               git_commit=_git_commit(self.config.rootpath), plan_ids=self.plan_ids)
            rows = {name: self.intake.sorted_rows(name) for name in self.intake.rows()}
        except BaseException:
            self.saver.abandon()
            raise
        return self.saver.save(folder, rows, meta, rows_digest)

    def _recompute(self) -> dict[str, Any]:
        from fieldeval.run.report import recompute_inputs

        return recompute_inputs(self.options, self.intake, self.progress)

    def write_outputs(self, folder: Path) -> list[Path]:
        """Each benchmark's scored tables under ``folder``; the paths written."""
        written: list[Path] = []
        for name in sorted(self.intake.rows()):
            written += self.selection.benchmark(name).write_outputs(self.intake.sorted_rows(name), folder)
        return written

    def check_outputs(self, report_path: Path) -> None:
        """Check every path the session will write before any model call: one line and exit 2 if one is not
        writable (reports folder, JSON report, progress file, Markdown summary, cache, a SQLite store)."""
        from fieldeval.run.writable import check_session_outputs

        cache = self.client.cache.path if self.client.cache is not None else None
        check_session_outputs(report_path=report_path, progress_file=self.options.progress_file,
                              summary_md=self.summary_md(), cache=cache, store_url=self.store_url(),
                              reports_dir=self.reports_dir())

    def summary_md(self) -> str | None:
        """Where the Markdown summary is appended: ``--summary-md``, else GitHub's step summary, else nowhere."""
        return self.options.summary_md or os.environ.get("GITHUB_STEP_SUMMARY")

    def reports_dir(self) -> Path:
        """The folder for scored tables."""
        return Path(self.options.reports_dir) if self.options.reports_dir else self.config.rootpath / "reports"

    def store_url(self) -> str | None:
        """``--store``, else the one default every command uses (:func:`~fieldeval.store.location.default_store_url`
        from pytest's rootdir); None: no store."""
        return self._url

    def ran_evals(self) -> bool:
        """Whether this session planned or ran eval items (and so writes a report and stores a run)."""
        return bool(self.selected) and not self.config.option.collectonly

    def _commit_cache(self, *, close: bool = False) -> None:
        """Commit the cached responses; a full disk is the session's one line (at the very end, printed)."""
        from fieldeval.run.cachefile import commit

        line = commit(self.client.cache, close=close) if self.client.cache is not None else None
        if line is not None and self.disk_full is None:
            if close:  # the session's status is already written
                sys.stderr.write(line + "\n")
            else:
                self.disk_full = line

    def close(self) -> None:
        """Stop the solver threads, commit the cached responses, close the row spool and let go of the lease."""
        self.intake.close()
        self.saver.drop_stage()
        if self.resumed is not None:
            self.resumed.release()
        self.solving.stop()
        self._commit_cache(close=True)


def _trim_heap() -> None:
    from fieldeval.run.memory import trim_heap

    trim_heap()  # a stage chunk's passing memory back to the system, not left between the items'


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git_commit(root: Path) -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


__all__ = ["EvalSession"]
