"""The fieldeval pytest plugin: every hook and fixture of fieldeval, each delegating to the engine in a few lines.

One :class:`~fieldeval.run.session.EvalSession` per pytest session lives on the
config; eval items reach it through the ``client``, ``context``, ``case``,
``answer`` and ``record`` fixtures. Rows travel to the controller in each item's
``user_properties`` (so they cross pytest-xdist), are taken in by its intake,
aggregated per benchmark and model with seeded bootstrap intervals, and land in
pytest-json-report's file as ``report["evals"]`` and in the run store.

The plugin loads with every pytest session of the environment. Only this module, the option declarations and
the benchmarks' faces load then; the engine is imported once the command line names an eval module
(``pytest_configure``), so a session without evals does not pay for it.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from fieldeval.defaults import ITEM_KEY, MARKER, ROW_KEY
from fieldeval.errors import exit_on_usage_error
from fieldeval.run import collect, command
from fieldeval.run.markers import eval_marker, settle_markers
from fieldeval.run.options import add_options, parse_options
from fieldeval.run.startup import SESSION_DIR_KEY, Started, build_session, is_xdist_worker, lighten_json_report, \
    only_informs, prepare_run

if TYPE_CHECKING:  # the stash keys' types (named as text: nothing of the engine is imported for them)
    from fieldeval.calls.failures import ModelCallError  # noqa: F401
    from fieldeval.run.finish import Ending  # noqa: F401
    from fieldeval.run.memory import ItemReleaser  # noqa: F401
    from fieldeval.run.session import EvalSession

_STARTED = pytest.StashKey["Started"]()
_ENDING = pytest.StashKey["Ending"]()
_RELEASER = pytest.StashKey["ItemReleaser"]()
_ANSWER_ERROR = pytest.StashKey["ModelCallError"]()
# The configs of the eval sessions running in this process, innermost last: the hooks whose arguments carry no
# config (pytest_runtest_logreport, pytest_json_modifyreport) serve the innermost. Sessions in one process nest
# (pytester's in-process runs) and never interleave, so it is the one whose hook is running.
_RUNNING: list[pytest.Config] = []
# The items running in this process, innermost last (pytest_runtest_protocol). The fixtures of eval items read
# their item here rather than through ``request``: pytest builds a new definition of the ``request`` fixture each
# time a fixture asks for it, which costs more than the rest of such a fixture's work.
_ITEMS: list[pytest.Item] = []


def eval_session(config: pytest.Config) -> EvalSession:
    """The session object kept on ``config``; in a session whose command line names no eval module, built at the
    first need (a fixture of the plugin's used outside an eval module)."""
    started = config.stash.get(_STARTED, None)
    if started is None:
        engine, bench_options = exit_on_usage_error(lambda: parse_options(config))
        started = _keep(config, build_session(config, engine, bench_options, selected=[], modules={}))
        prepare_run(config, started)  # the --model values checked, as in an eval session
    return started.state


def _active(config: pytest.Config | None) -> EvalSession | None:
    """The session object, or None while the plugin sleeps (no eval module on the command line)."""
    started = config.stash.get(_STARTED, None) if config is not None else None
    return started.state if started is not None else None


def _innermost() -> EvalSession | None:
    return _active(_RUNNING[-1]) if _RUNNING else None


def _keep(config: pytest.Config, started: Started) -> Started:
    config.stash[_STARTED] = started
    _RUNNING.append(config)
    return started


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the engine's options and each installed benchmark's, grouped by benchmark."""
    add_options(parser)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config):
    """``--splits``/``--group`` out of range (pytest-split's check) is one line and exit 2, like every bad option."""
    problem = command.split_problem(config)
    if problem is None:
        return (yield)
    try:
        return (yield)  # pytest-split refuses the values before any session starts
    except pytest.UsageError:
        sys.stderr.write(f"ERROR: {problem}\n")
        return 2


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Parse the options once and find the eval modules; when there are any, start the session, check every input
    and point pytest-json-report; without any the plugin sleeps."""
    config.addinivalue_line("markers", f"{MARKER}(benchmark): an eval item of a fieldeval benchmark")
    engine, bench_options = exit_on_usage_error(lambda: parse_options(config))
    worker = is_xdist_worker(config)
    if not worker and not only_informs(config):
        exit_on_usage_error(lambda: command.check_paths(config))
    modules = exit_on_usage_error(lambda: command.selected_benchmarks(config))
    selected = sorted({name for names in modules.values() for name in names})
    if not selected and not (worker and SESSION_DIR_KEY in config.workerinput):
        return  # no eval module: nothing of the engine is imported, no hook of the session's runs
    started = _keep(config, build_session(config, engine, bench_options, selected=selected, modules=modules))
    prepare_run(config, started)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Hand every xdist worker the session folder (shared call memo and rate-limit file) and resumed options."""
    state = _active(node.config)
    if state is None:
        return
    if state.session_dir is not None:
        node.workerinput[SESSION_DIR_KEY] = str(state.session_dir)
    if state.options.resume:
        from fieldeval.run import resume

        node.workerinput[resume.WORKER_KEY] = resume.to_worker(state.options, state.selection.bench_options)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the session; the controller removes the session folder."""
    started = config.stash.get(_STARTED, None)
    if started is None:
        return
    from fieldeval.store.registry import use_session_store

    if config in _RUNNING:
        _RUNNING.remove(config)
    use_session_store(None)
    started.interrupts.restore()
    started.state.close()
    if not is_xdist_worker(config) and started.state.session_dir is not None:
        shutil.rmtree(started.state.session_dir, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise eval items over the benchmark's cases and ``--model`` (or its offline baseline)."""
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is not None:
        collect.parametrize(metafunc, _active(metafunc.config), marker.kwargs.get("benchmark"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ``--matrix-job``'s other models and ``--resume``'s scored items (after pytest-split's choice)."""
    state = _active(config)
    if state is not None:
        collect.deselect(config, state, items)


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report: pytest.CollectReport) -> None:
    """In an eval session, a module's parametrised items find their function's file and line once, before
    pytest-json-report and the terminal read each item's location."""
    if _innermost() is not None and len(report.result) > 1:
        from fieldeval.run import memory

        memory.share_locations(report.result)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Plan the progress counts, start the solvers, and, in a large session, let go of what collection built."""
    state = _active(session.config)
    if state is None:
        return
    from fieldeval.run import memory
    from fieldeval.run.finish import FREEZE_ABOVE_ITEMS

    state.pytest_session = session
    settle_markers(session.items)
    eval_items = [item for item in session.items if collect.tag(item) is not None]
    state.eval_items = len(eval_items)
    if not is_xdist_worker(session.config):
        state.plan([collect.tag(item) for item in eval_items], [item.nodeid for item in eval_items])
        state.announce()
    if len(eval_items) > state.trim_limit:
        lighten_json_report(session.config)
    collecting = session.config.option.collectonly
    state.solving.start(eval_items, maxfail=session.config.option.maxfail or 0, start=not collecting)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if collecting and state.options.designed and state.solving.pool is not None and reporter is not None \
            and not is_xdist_worker(session.config):
        for line in state.solving.plan_lines(eval_items):  # calls, tokens and cost per combination; nothing sent
            reporter.write_line(line)
    memory.release_deselected(session.config)
    if len(eval_items) >= FREEZE_ABOVE_ITEMS:
        memory.slim_items(session.items)
        memory.release_syrupy_items(session, len(eval_items))
        releaser = memory.release_items(session, len(eval_items))
        if releaser is not None:
            session.stash[_RELEASER] = releaser
        memory.collect_and_freeze()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """With xdist, plan the progress counts from the first worker's collected ids."""
    state = _active(node.config)
    if state is not None and not state.progress.planned:
        state.plan_from_ids(ids)
        state.announce()
        if state.eval_items > state.trim_limit:
            lighten_json_report(node.config)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """The item is the running one for the plugin's fixtures while it runs; in a large session of eval items
    only, each item is let go of once it has run (:mod:`fieldeval.run.memory`)."""
    _ITEMS.append(item)
    try:
        result = yield
    finally:
        _ITEMS.pop()
    releaser = item.session.stash.get(_RELEASER, None)
    if releaser is not None:
        releaser.ran(item)
    return result


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tag eval items with their benchmark and model so failures are counted per model; fill the plugin's
    fixtures that only the item's function asks for (before pytest's own fill, which then skips them)."""
    found = collect.tag(item)
    if found is not None:
        collect.mark_item(item, eval_session(item.config), found)
        for name in collect.direct_fixtures(item, _VALUES, __name__):
            item.funcargs[name] = item._request if name == "request" else _VALUES[name](item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """An item whose solver's model call failed fails here, before its body scores anything."""
    error = item.stash.get(_ANSWER_ERROR, None)
    if error is not None:
        raise error


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed model call is one line (model, error class, message), not a traceback; a full disk stops the run."""
    report = yield
    state = _active(item.config)
    if state is not None:
        collect.amend_report(item, call, report, state)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport):
    """The controller takes each eval item's report in before any other plugin reads it (pytest-json-report reads
    the teardown's properties); above the trim limit, a passed item's reports are let go of after every plugin
    has seen them."""
    state = _innermost()
    if state is not None:
        state.take_report(report)
    result = yield
    if state is not None and state.releases_reports and state.eval_items > state.trim_limit \
            and any(key == ITEM_KEY for key, _ in report.user_properties):
        from fieldeval.run.memory import release_report

        state.released_entries += release_report(state.config, report)
    return result


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    """Eval items print no dots when the live progress line stands in for them."""
    state = _active(config)
    if state is None or report.when != "call" or not state.display.live():
        return None
    if any(key == ITEM_KEY for key, _ in report.user_properties):
        return report.outcome, "", report.outcome.upper()
    return None


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_json_runtest_stage(report: pytest.TestReport) -> dict | None:
    """pytest-json-report's entry for a stage with nothing to render, made without rendering it (a third of
    pytest-json-report's cost a stage); any other stage is left to pytest-json-report."""
    from fieldeval.run.memory import json_stage

    return json_stage(report)


@pytest.hookimpl(optionalhook=True)
def pytest_json_modifyreport(json_report: dict) -> None:
    """Put the aggregated metrics into pytest-json-report's report as ``evals``."""
    state = _innermost()
    if state is not None and state.ran_evals():
        from fieldeval.run.memory import restore_summary

        json_report["evals"] = state.payload()
        restore_summary(json_report, state.released_entries)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session):
    """Build the report and decide the exit status before the other plugins finish; then save the run (controller;
    :mod:`fieldeval.run.finish` holds the sequence)."""
    started = session.config.stash.get(_STARTED, None)
    if started is None:
        return (yield)
    from fieldeval.run import finish

    if is_xdist_worker(session.config):
        finish.end_worker(session, started.state)
        return (yield)
    if started.files is None:
        return (yield)
    ending = finish.begin(session, started.state, started.files, started.interrupts)
    try:
        return (yield)
    finally:
        ending.end()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """End the terminal output with the headline tables, failed gates, the gold data's findings and errors."""
    state = _active(config)
    if state is None:
        return
    state.display.end(terminalreporter)
    if state.intake.has_results():
        from fieldeval.run.summary import terminal_lines

        for line, markup in terminal_lines(state.payload(), state.intake.error_lines()):
            terminalreporter.write_line(line, **markup)


@pytest.fixture
def client(pytestconfig: pytest.Config):
    """The session's model client: ``client.complete(model, prompt, system=...)`` (for items without a solver)."""
    return eval_session(pytestconfig).client


@pytest.fixture
def answer():
    """The result of the solver the item's module declares (``solver=`` in its ``fieldeval`` marker): solvers run
    ahead in the session's bounded pool; the item waits for its own result (or solves it now)."""
    return _answer_of(_ITEMS[-1])


@pytest.fixture
def case():
    """The eval item's case, read from its benchmark's cases by the position it was parametrised with."""
    return _case_of(_ITEMS[-1])


@pytest.fixture
def model():
    """The eval item's model (a ``--matrix`` combination where the run has one), as it was parametrised."""
    return _model_of(_ITEMS[-1])


@pytest.fixture
def context():
    """The eval item's benchmark context (cases, indexes, options), loaded once per process."""
    return _context_of(_ITEMS[-1])


@pytest.fixture
def record() -> Callable[..., None]:
    """Record one row of metric values for this eval item: ``record(model=..., **values)``."""
    return _record_of(_ITEMS[-1])


def _answer_of(item: pytest.Item):
    from fieldeval.calls.failures import ModelCallError

    try:
        return eval_session(item.config).solving.answer(item)
    except ModelCallError as error:  # the item fails in its call phase, as if its body had made the call
        item.stash[_ANSWER_ERROR] = error
        return None


def _benchmark_of(item: pytest.Item, fixture: str) -> str:
    marker = eval_marker(item)
    callspec = getattr(item, "callspec", None)
    if marker is None or (fixture in ("case", "model") and (callspec is None or fixture not in callspec.params)):
        raise pytest.UsageError(f"{item.nodeid}: the {fixture} fixture needs @pytest.mark.{MARKER}(benchmark=...)")
    return marker.kwargs["benchmark"]


def _case_of(item: pytest.Item):
    name = _benchmark_of(item, "case")
    return eval_session(item.config).selection.cases(name)[item.callspec.params["case"]]


def _model_of(item: pytest.Item):
    _benchmark_of(item, "model")
    return item.callspec.params["model"]


def _context_of(item: pytest.Item):
    return eval_session(item.config).selection.context(_benchmark_of(item, "context"))


def _record_of(item: pytest.Item) -> Callable[..., None]:
    _benchmark_of(item, "record")

    def _record(**values) -> None:
        row = collect.row_of(item, eval_session(item.config), values)
        item.user_properties.append((ROW_KEY, row))

    return _record


# The eval fixtures' values for an item; its setup puts those only its function asks for in its funcargs.
_VALUES: dict[str, Callable[[pytest.Item], object]] = {
    "case": _case_of, "model": _model_of, "context": _context_of, "answer": _answer_of, "record": _record_of}
