"""A session's start, from parsed options to a prepared run: its session folder, options taken over from a resumed
run or from the controller, its checks, and its files (the engine is imported here, not by the plugin)."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fieldeval.defaults import DEFAULT_REPORT
from fieldeval.errors import UsageError, exit_on_usage_error

if TYPE_CHECKING:
    from fieldeval.run.options import EngineOptions
    from fieldeval.run.runfiles import RunFiles
    from fieldeval.run.session import EvalSession
    from fieldeval.run.signals import Interrupts

JSON_REPORT_DEFAULT_FILE = ".report.json"
SESSION_DIR_KEY = "fieldeval_session_dir"  # xdist workerinput: the session folder


@dataclass
class Started:
    """What a started session consists of: its state, its signal handling and (controller) its run files."""

    state: EvalSession
    interrupts: Interrupts
    files: RunFiles | None = None


def is_xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (xdist's own predicate takes a session, not a config)."""
    return hasattr(config, "workerinput")


def only_informs(config: pytest.Config) -> bool:
    """Whether pytest only prints help, its version, fixtures or markers: nothing is loaded or checked for these."""
    option = config.option
    return bool(getattr(option, "help", False) or getattr(option, "version", False)
                or getattr(option, "showfixtures", False) or getattr(option, "markers", False))


def build_session(config: pytest.Config, engine: EngineOptions, bench_options: dict, *, selected: list[str],
                  modules: dict[str, tuple[str, ...]]) -> Started:
    """Build the session and install its signal handling (the caller keeps it on the config, then prepares it)."""
    from fieldeval.run import resume
    from fieldeval.run.signals import Interrupts
    from fieldeval.store.registry import use_session_store

    if engine.store and engine.store.lower() != "none":  # --model names the models registered in --store
        use_session_store(engine.store)
    worker = is_xdist_worker(config)
    resumed = None
    if worker and resume.WORKER_KEY in config.workerinput:  # the controller's options, taken from the run
        engine, bench_options = resume.from_worker(config.workerinput[resume.WORKER_KEY], engine, bench_options)
    elif not worker and engine.resume and selected and not only_informs(config):
        engine, bench_options, resumed = exit_on_usage_error(
            lambda: _resumed_options(config, engine, bench_options, selected))
    if worker:
        session_dir = Path(config.workerinput[SESSION_DIR_KEY]) if SESSION_DIR_KEY in config.workerinput else None
        index, count = int(config.workerinput["workerid"].removeprefix("gw")), int(config.workerinput["workercount"])
    else:
        session_dir = Path(tempfile.mkdtemp(prefix="fieldeval-session-")) if selected else None
        index, count = 0, 1
    state = exit_on_usage_error(lambda: new_session(config, engine, bench_options, selected=selected,
                                                    session_dir=session_dir, worker=(index, count)))
    state.resumed_settings = resumed
    state.module_benchmarks = modules
    started = Started(state, Interrupts(on_signal=state.stop_calls, on_stop=state.saver.keep_unsaved))
    if selected:
        started.interrupts.install()  # a cancelled job ends an eval session as Ctrl-C does
    return started


def prepare_run(config: pytest.Config, started: Started) -> None:
    """On the controller: check the session's outputs, prepare the run and mark it running (not for ``--help``
    and the like; ``--collect-only`` loads the data while collecting)."""
    from fieldeval.run.runfiles import RunFiles

    state, selected, engine = started.state, started.state.selected, started.state.options
    if is_xdist_worker(config) or only_informs(config):
        return
    if selected and not config.option.collectonly:
        exit_on_usage_error(lambda: state.check_outputs(report_path(config, engine.report)))
    exit_on_usage_error(state.prepare)
    if selected and state.selection.expected_items() > state.trim_limit:
        lighten_json_report(config, "collectors")  # known before collection: no collector entries at all
    if selected and not config.option.collectonly:
        started.files = RunFiles(state.reports_dir(), state.run_id, report_path(config, engine.report))
        started.files.mark("running", started_at=state.started_at)
        if hasattr(config.option, "json_report"):  # pytest-json-report builds the report; the run's files write it
            config.option.json_report = True
            config.option.json_report_file = ""
        if not engine.workers_as_given:  # before xdist starts any worker (its configure comes last)
            from fieldeval.run.workers import size_workers

            line = size_workers(config, state.selection.expected_items())
            if line is not None:
                sys.stderr.write(line + "\n")
        if not getattr(config.option, "numprocesses", None):  # no xdist worker starts: this process makes every call
            state.client.limits.alone = True


def new_session(config: pytest.Config, options: EngineOptions, bench_options: dict[str, Any], *,
                selected: list[str], session_dir: Path | None, worker: tuple[int, int]) -> EvalSession:
    """The session for parsed options: its client (with a response cache for eval runs only), prices, limits
    and checked gates."""
    from fieldeval.calls.cache import ResponseCache
    from fieldeval.calls.client import ModelClient
    from fieldeval.calls.limits import CallLimits
    from fieldeval.run.gates import check_gate
    from fieldeval.run.session import EvalSession
    from fieldeval.settings import load_model_limits, load_prices, load_thresholds, tool_settings

    tool = tool_settings(config.rootpath)  # pyproject.toml is read once
    cache = None
    if options.cache != "off" and selected:
        cache = ResponseCache(Path(options.cache_path or config.rootpath / "reports" / "responses.sqlite"))
    limits = CallLimits(concurrency=options.concurrency, rpm=options.rpm, models=load_model_limits(tool),
                        worker=worker, rate_dir=session_dir, hold_s=options.call_timeout)
    client = ModelClient(retries=options.retries, call_timeout=options.call_timeout, cache_mode=options.cache,
                         cache=cache, prices=load_prices(tool, options.prices), limits=limits,
                         max_answer_bytes=options.max_answer_bytes, seed=options.seed,
                         adaptive=not options.fixed_concurrency)
    if session_dir is not None:
        from fieldeval.calls.pool import Board

        client = client.with_board(Board(session_dir / "board.sqlite"))
    gates = load_thresholds(tool, options.fail_under)
    for gate in gates:
        check_gate(gate)
    return EvalSession(config, options, bench_options, selected=selected, client=client, gates=gates,
                       session_dir=session_dir, tool=tool)


def _resumed_options(config: pytest.Config, engine: EngineOptions, bench_options: dict,
                     selected: list[str]) -> tuple[EngineOptions, dict, dict[str, Any]]:
    """``--resume RUN_ID``: the options the stored run ran with, and its settings; a complete run ends the session
    here, with its one line and exit 0."""
    from fieldeval.run import resume
    from fieldeval.store import declared_columns, open_store
    from fieldeval.store.location import default_store_url

    url = engine.store or default_store_url(config.rootpath)
    if url.lower() == "none":
        raise UsageError(f"--resume {engine.resume}: needs the run store that holds it; drop --store none")
    with open_store(url, columns=declared_columns()) as store:
        try:
            run = store.get_run(engine.resume)
        except UsageError as error:
            raise UsageError(f"--resume {engine.resume}: {error}") from None
    try:
        engine, bench_options = resume.resolve(engine, bench_options, selected, run)
    except resume.RunComplete as done:
        pytest.exit(str(done), returncode=0)
    return engine, bench_options, run.get("settings") or {}


def report_path(config: pytest.Config, explicit: str | None) -> Path:
    """Where the newest finished report is published: ``--eval-report``, ``--json-report-file``, or the default."""
    chosen = getattr(config.option, "json_report_file", JSON_REPORT_DEFAULT_FILE)
    if explicit:
        return Path(explicit)
    if chosen and chosen != JSON_REPORT_DEFAULT_FILE:
        return Path(chosen)
    return config.rootpath / DEFAULT_REPORT


def lighten_json_report(config: pytest.Config, *extra: str) -> None:
    """Above the trim limit, pytest-json-report keeps no keywords, logs or captured output per test."""
    omit = getattr(config.option, "json_report_omit", None)
    if isinstance(omit, list):
        omit.extend(key for key in ("keywords", "log", "streams", *extra) if key not in omit)


__all__ = ["SESSION_DIR_KEY", "Started", "build_session", "is_xdist_worker", "lighten_json_report", "new_session",
           "only_informs", "prepare_run", "report_path"]
