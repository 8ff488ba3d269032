"""The fieldeval pytest plugin: options, parametrisation, model calls, metric recording, report and store.

One :class:`~fieldeval.run.session.EvalSession` per pytest session lives on the
config; eval items reach it through the ``client``, ``context`` and
``record`` fixtures. Rows travel to the controller in each item's
``user_properties`` (so they cross pytest-xdist), are aggregated per
benchmark and model with seeded bootstrap intervals, and land in
pytest-json-report's file as ``report["evals"]`` and in the run store.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fieldeval.defaults import CASE_KEY, DEFAULT_REPORT, EPOCH_KEY, ERROR_KEY, ITEM_KEY, MARKER, ROW_KEY
from fieldeval.errors import UsageError, exit_on_usage_error
from fieldeval.run.options import add_options, parse_options

if TYPE_CHECKING:  # the stash keys' types (named as text: nothing of the engine is imported for them)
    from fieldeval.calls.failures import ModelCallError  # noqa: F401
    from fieldeval.run.runfiles import RunFiles
    from fieldeval.run.session import EvalSession
    from fieldeval.run.signals import Interrupts  # noqa: F401

# The plugin loads with every pytest session of the environment. Only this module, the option declarations and
# the benchmarks' faces load then; the engine (numpy, SQLAlchemy, the call engine) is imported once the command
# line names an eval module (pytest_configure), so a session without evals does not pay for it.
JSON_REPORT_DEFAULT_FILE = ".report.json"
SAVE_FAILED = 2  # the run could not be saved whole (store down, disk full): one line, and CI fails
FREEZE_ABOVE_ITEMS = 1_000  # sessions this large freeze the collected objects (gc.freeze) and what is left at exit
SESSION_DIR_KEY = "fieldeval_session_dir"

_SESSION = pytest.StashKey["EvalSession"]()
_FILES = pytest.StashKey["RunFiles"]()
_SIGNALS = pytest.StashKey["Interrupts"]()
_ANSWER_ERROR = pytest.StashKey["ModelCallError"]()
_MODULES = pytest.StashKey[dict[str, tuple[str, ...]]]()  # eval modules (node id paths) and their benchmarks


def is_xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (xdist's own predicate takes a session, not a config)."""
    return hasattr(config, "workerinput")


def eval_session(config: pytest.Config) -> EvalSession:
    """The session object the plugin keeps on ``config``; in a session whose command line names no eval module,
    built at the first need (a fixture of the plugin's used outside an eval module)."""
    state = config.stash.get(_SESSION, None)
    if state is None:
        state = _start_session(config, *exit_on_usage_error(lambda: parse_options(config)), selected=[])
    return state


def _active(config: pytest.Config) -> EvalSession | None:
    """The session object, or None while the plugin sleeps (no eval module on the command line)."""
    return config.stash.get(_SESSION, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the engine's options and each installed benchmark's, grouped by benchmark."""
    add_options(parser)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config):
    """``--splits``/``--group`` out of range (pytest-split's check) is one line and exit 2, like every bad option."""
    problem = _split_problem(config)
    if problem is None:
        return (yield)
    try:
        return (yield)  # pytest-split refuses the values before any session starts
    except pytest.UsageError:
        sys.stderr.write(f"ERROR: {problem}\n")
        return 2


def _split_problem(config: pytest.Config) -> str | None:
    """The one line for pytest-split options that do not name one group of N, else None."""
    splits, group = getattr(config.option, "splits", None), getattr(config.option, "group", None)
    if splits is None and group is None:
        return None
    if splits is None or group is None:
        return f"--splits {splits} --group {group}: pass both, e.g. --splits 4 --group 1"
    if splits < 1 or not 1 <= group <= splits:
        return (f"--splits {splits} --group {group}: pass N >= 1 shards and a group from 1 to N, "
                "e.g. --splits 4 --group 1")
    return None


def selected_benchmarks(config: pytest.Config) -> list[str]:
    """The benchmarks of the eval modules (those marked ``fieldeval(benchmark=...)``) the command line names or
    holds in a folder, whatever the modules are called; a marker whose benchmark the source does not fix is a
    usage error."""
    modules = eval_modules(config, _command_paths(config))
    for module, names in modules.items():
        if "" in names:
            raise UsageError(f"{os.path.relpath(module, config.invocation_params.dir)}: @pytest.mark.{MARKER}("
                             "benchmark=...) names its benchmark by an expression; write the name as a string, "
                             'e.g. benchmark="ibf", so the run can be planned before collection')
    config.stash[_MODULES] = {_nodeid_path(config, module): names for module, names in modules.items()}
    return sorted({name for names in modules.values() for name in names})


def eval_modules(config: pytest.Config, paths: list[Path]) -> dict[Path, tuple[str, ...]]:
    """The eval modules under ``paths`` and their benchmarks, found as pytest would collect them."""
    from fieldeval.run.discover import marked_modules

    return marked_modules(paths, python_files=config.getini("python_files"),
                          norecursedirs=config.getini("norecursedirs"))


def _command_paths(config: pytest.Config) -> list[Path]:
    args = [a.split("::")[0] for a in config.args if not a.startswith("-")] or config.getini("testpaths") or ["."]
    return [path for path in (_arg_path(config, arg) for arg in args) if path is not None]


def _nodeid_path(config: pytest.Config, module: Path) -> str:
    """A module's path as its items' node ids begin (relative to the rootdir, with ``/``)."""
    try:
        return module.resolve().relative_to(config.rootpath).as_posix()
    except ValueError:
        return module.resolve().as_posix()


def check_paths(config: pytest.Config) -> None:
    """A path on the command line that does not exist is a usage error naming the eval files (xdist's workers
    would otherwise collect nothing and the session end silently with exit 5)."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return
    for arg in config.args:
        path = _arg_path(config, arg.split("::")[0])
        if path is None or not path.exists():
            files = eval_files(config)
            hint = f"; the eval files are {', '.join(files)}" if files else ""
            what = "file, folder or module" if config.option.pyargs else "file or folder"
            raise UsageError(f"{arg.split('::')[0]}: no such {what}{hint}")


def eval_files(config: pytest.Config) -> list[str]:
    """The project's eval modules (under its testpaths, else its root), relative to where pytest runs."""
    folders = [config.rootpath / path for path in config.getini("testpaths")] or [config.rootpath]
    found = eval_modules(config, [folder for folder in folders if folder.exists()])
    return sorted(os.path.relpath(path, config.invocation_params.dir) for path in found)


def _arg_path(config: pytest.Config, arg: str) -> Path | None:
    path = (config.invocation_params.dir / arg).resolve()
    if path.exists() or not config.option.pyargs:
        return path
    import importlib.util

    try:
        spec = importlib.util.find_spec(arg)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Parse the options once, find the eval modules, and, when there are any, set up the session, check every
    input, and point pytest-json-report; without any the plugin sleeps."""
    config.addinivalue_line("markers", f"{MARKER}(benchmark): an eval item of a fieldeval benchmark")
    engine, bench_options = exit_on_usage_error(lambda: parse_options(config))
    worker = is_xdist_worker(config)
    if not worker and not _only_informs(config):
        exit_on_usage_error(lambda: check_paths(config))
    selected = exit_on_usage_error(lambda: selected_benchmarks(config))
    if not selected and not (worker and SESSION_DIR_KEY in config.workerinput):
        return  # no eval module: nothing of the engine is imported, no hook of the session's runs
    _start_session(config, engine, bench_options, selected=selected)


def _start_session(config: pytest.Config, engine, bench_options: dict, *, selected: list[str]) -> EvalSession:
    """Build and register the session (the engine is imported here), and on the controller prepare the run."""
    from fieldeval.run import resume
    from fieldeval.run.memory import ReportReleaser
    from fieldeval.run.runfiles import RunFiles
    from fieldeval.run.session import EvalSession
    from fieldeval.run.signals import Interrupts
    from fieldeval.store.registry import use_session_store

    if engine.store and engine.store.lower() != "none":  # --model names the models registered in --store
        use_session_store(engine.store)
    worker = is_xdist_worker(config)
    resumed = None
    if worker and resume.WORKER_KEY in config.workerinput:  # the controller's options, taken from the run
        engine, bench_options = resume.from_worker(config.workerinput[resume.WORKER_KEY], engine, bench_options)
    elif not worker and engine.resume and selected and not _only_informs(config):
        engine, bench_options, resumed = exit_on_usage_error(
            lambda: _resumed_options(config, engine, bench_options, selected))
    if worker:
        session_dir = Path(config.workerinput[SESSION_DIR_KEY]) if SESSION_DIR_KEY in config.workerinput else None
        index, count = int(config.workerinput["workerid"].removeprefix("gw")), int(config.workerinput["workercount"])
    else:
        session_dir = Path(tempfile.mkdtemp(prefix="fieldeval-session-")) if selected else None
        index, count = 0, 1
    state = exit_on_usage_error(lambda: EvalSession.build(
        config, engine, bench_options, selected=selected, session_dir=session_dir, worker=(index, count)))
    state.resumed_settings = resumed
    state.module_benchmarks = config.stash.get(_MODULES, {})
    config.stash[_SESSION] = state
    config.pluginmanager.register(state, "fieldeval-session")
    if not worker:
        config.pluginmanager.register(ReportReleaser(config, state), "fieldeval-memory")
    config.stash[_SIGNALS] = interrupts = Interrupts(on_signal=lambda name: state.stop_calls(name),
                                                     on_stop=state.keep_unsaved)
    if selected:
        interrupts.install()  # a cancelled job ends an eval session as Ctrl-C does
    if worker or _only_informs(config):
        return state  # --help and --version print without the data; --collect-only loads it while collecting
    if selected and not config.option.collectonly:
        exit_on_usage_error(lambda: state.check_outputs(_report_path(config, engine.report)))
    exit_on_usage_error(state.prepare)
    if selected and state.expected_items() > state.trim_limit:
        _lighten_json_report(config, "collectors")  # known before collection: no collector entries at all
    if selected and not config.option.collectonly:
        files = RunFiles(state.reports_dir(), state.run_id, _report_path(config, engine.report))
        config.stash[_FILES] = files
        files.mark("running", started_at=state.started_at)
        _configure_json_report(config)
    return state


def _resumed_options(config: pytest.Config, engine, bench_options: dict, selected: list[str]):
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


def _only_informs(config: pytest.Config) -> bool:
    """Whether pytest only prints help, its version, fixtures or markers: nothing is loaded or checked for these."""
    option = config.option
    return bool(getattr(option, "help", False) or getattr(option, "version", False)
                or getattr(option, "showfixtures", False) or getattr(option, "markers", False))


def _report_path(config: pytest.Config, explicit: str | None) -> Path:
    """Where the newest finished report is published: ``--eval-report``, ``--json-report-file``, or the default."""
    chosen = getattr(config.option, "json_report_file", JSON_REPORT_DEFAULT_FILE)
    if explicit:
        return Path(explicit)
    if chosen and chosen != JSON_REPORT_DEFAULT_FILE:
        return Path(chosen)
    return config.rootpath / DEFAULT_REPORT


def _configure_json_report(config: pytest.Config) -> None:
    """pytest-json-report builds the report; the plugin writes it (per run, atomically, then published)."""
    if hasattr(config.option, "json_report"):
        config.option.json_report = True
        config.option.json_report_file = ""


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Hand every xdist worker the session folder (shared call memo and rate-limit file)."""
    state = _active(node.config)
    if state is None:
        return
    if state.session_dir is not None:
        node.workerinput[SESSION_DIR_KEY] = str(state.session_dir)
    if state.options.resume:
        from fieldeval.run import resume

        node.workerinput[resume.WORKER_KEY] = resume.to_worker(state.options, state.bench_options)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the session; the controller removes the session folder."""
    state = config.stash.get(_SESSION, None)
    if state is None:
        return
    from fieldeval.store.registry import use_session_store

    use_session_store(None)
    config.stash[_SIGNALS].restore()
    state.close()
    if not is_xdist_worker(config) and state.session_dir is not None:
        shutil.rmtree(state.session_dir, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise eval items over the benchmark's cases and ``--model`` (or its offline baseline)."""
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    from fieldeval.benchmark import case_ids

    state = _active(metafunc.config)
    name = marker.kwargs.get("benchmark")
    if state is None or name not in state.selected:  # a marker the module's source does not show (added by a hook)
        exit_on_usage_error(lambda: _unplanned(metafunc, name))
    bench = state.benchmark(name)
    if "case" in metafunc.fixturenames:
        # the parameters are case positions, the ids the cases' own; the ``case`` fixture reads a case when its
        # item runs, so a process holds the cases of the items it runs, not the whole suite
        cases = bench.cases(state.context(bench.name))
        ids = case_ids(cases)
        if "model" in metafunc.fixturenames and _parametrize_jointly(metafunc, ids, state.models_for(bench.name),
                                                                      designed=state.options.designed):
            return
        metafunc.parametrize("case", range(len(ids)), ids=ids, indirect=True)
    if "model" in metafunc.fixturenames:
        models = state.models_for(bench.name)
        if state.options.designed:  # combinations: ids like gpt-4o-mini-t0.7 (and -e2 for the second epoch)
            metafunc.parametrize("model", models, ids=[m.test_id for m in models])
        else:
            metafunc.parametrize("model", models)


def _unplanned(metafunc: pytest.Metafunc, name: object) -> None:
    raise UsageError(f"{metafunc.definition.nodeid}: marked {MARKER}(benchmark={name!r}) at collection, but its "
                     f"module's source does not mark it; write @pytest.mark.{MARKER}(benchmark=\"...\") (or "
                     "pytestmark = ...) in the module, so the run is planned before collection")


def _parametrize_jointly(metafunc: pytest.Metafunc, ids: list[str], models: list, *, designed: bool) -> bool:
    """Parametrise ``case`` and ``model`` in one call, with the node ids and parameters two calls give.

    Two calls build a callspec for every case and then copy each one per model: at 100,000 cases the first
    100,000 callspecs are alive beside the second, and the process's memory after collection is about 20 MB
    more. Returns False, having done nothing, where one call could name an item otherwise than two: ids that
    repeat (pytest tells them apart per call), a model that is not a non-empty text (pytest names it by its
    position) or a plugin's ``pytest_make_parametrize_id``.
    """
    if designed:  # combinations: their ids as the second call gives them
        model_ids = [str(model.test_id) for model in models]
    elif all(isinstance(model, str) and model for model in models):
        model_ids = models
    else:
        return False
    if metafunc.config.hook.pytest_make_parametrize_id.get_hookimpls():
        return False
    joint = [f"{case}-{model}" for case in ids for model in model_ids]
    if len(set(joint)) != len(joint):
        return False
    # case-major, as the second call copies each case's callspec once per model
    metafunc.parametrize(["case", "model"], [(at, model) for at in range(len(ids)) for model in models], ids=joint,
                         indirect=["case"])
    return True


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--resume RUN_ID``: deselect the items that run scored (after pytest-split chose this shard's items)."""
    state = _active(config)
    if state is None:
        return
    if state.options.matrix_job is not None and state.selected:
        _keep_matrix_job(config, state, items)
    if not state.options.resume or not state.selected:
        return
    done = state.resumed_items()
    keep, drop = [], []
    for item in items:
        tag = _tag(item)
        case = state.case_of(item) if tag is not None else None
        epoch = getattr(item.callspec.params["model"], "epoch", None) if tag is not None else None
        key = (tag[0], tag[1], str(case.test_id)) if case is not None else None
        scored = key is not None and (key if epoch is None else (*key, epoch)) in done
        (drop if scored else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _keep_matrix_job(config: pytest.Config, state: EvalSession, items: list[pytest.Item]) -> None:
    """``--matrix-job K``: deselect the eval items of every model but the matrix's K-th."""
    model = exit_on_usage_error(state.matrix_job_model)
    keep, drop = [], []
    for item in items:
        tag = _tag(item)
        other = tag is not None and str(getattr(item.callspec.params["model"], "model", tag[1])) != model
        (drop if other else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """Plan the progress counts, start the solvers of the eval items (see :mod:`fieldeval.calls.pool`), and freeze
    the collected objects.

    Deselected items are counted, not kept (:func:`~fieldeval.run.memory.release_deselected`). With many
    items, syrupy lets go of them in a session of eval items only (:func:`~fieldeval.run.memory.release_syrupy_items`),
    ``gc.freeze()`` moves everything collection built into the permanent generation, so neither the
    collector during the run nor the collections at exit walk the items again, and each eval item is let go
    of once it has run (:func:`~fieldeval.run.memory.release_items`).
    """
    state = _active(session.config)
    if state is None:
        return
    from fieldeval.run.memory import release_deselected, release_items, release_syrupy_items, slim_items

    state.pytest_session = session
    eval_items = [item for item in session.items if _tag(item) is not None]
    state.eval_items = len(eval_items)
    if not is_xdist_worker(session.config):
        state.plan([_tag(item) for item in eval_items])
        state.announce()
    if len(eval_items) > state.trim_limit:
        _lighten_json_report(session.config)
    state.start_solvers(eval_items)
    release_deselected(session.config)
    if len(eval_items) >= FREEZE_ABOVE_ITEMS:
        slim_items(session.items)
        release_syrupy_items(session, len(eval_items))
        release_items(session, len(eval_items))
        gc.collect()  # no garbage of collection's is frozen for the whole run
        gc.freeze()


def _lighten_json_report(config: pytest.Config, *extra: str) -> None:
    """Above the trim limit, pytest-json-report keeps no keywords, logs or captured output per test."""
    omit = getattr(config.option, "json_report_omit", None)
    if isinstance(omit, list):
        omit.extend(key for key in ("keywords", "log", "streams", *extra) if key not in omit)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """With xdist, plan the progress counts from the first worker's collected ids."""
    state = _active(node.config)
    if state is not None and not state.progress.planned:
        state.plan_from_ids(ids)
        state.announce()
        if state.eval_items > state.trim_limit:
            _lighten_json_report(node.config)


def _tag(item: pytest.Item) -> tuple[str, str] | None:
    """(benchmark, model) of an eval item, or None for any other item."""
    marker = item.get_closest_marker(MARKER)
    callspec = getattr(item, "callspec", None)
    if marker is None or callspec is None or "model" not in callspec.params:
        return None
    return marker.kwargs["benchmark"], callspec.params["model"]


@pytest.fixture
def case(request: pytest.FixtureRequest):
    """The eval item's case, read from its benchmark's cases by the position it was parametrised with."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None or not hasattr(request, "param"):
        raise pytest.UsageError(f"{request.node.nodeid}: the case fixture needs @pytest.mark.{MARKER}(benchmark=...)")
    state = eval_session(request.config)
    return state.benchmark(marker.kwargs["benchmark"]).cases(state.context(marker.kwargs["benchmark"]))[request.param]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tag eval items with their benchmark and model so failures are counted per model."""
    tag = _tag(item)
    if tag is not None:
        item.user_properties.append(eval_session(item.config).item_property(tag))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed model call is one line (model, error class, message), not a traceback; a full disk stops the run.

    Above the report's trim limit, the item lets go of its row once the call's report carries it.
    """
    report = yield
    state = _active(item.config)
    if state is None:
        return report
    from fieldeval.calls.failures import ModelCallError

    if call.when == "call" and state.eval_items > state.trim_limit:
        item.user_properties[:] = [p for p in item.user_properties if p[0] != ROW_KEY]  # the report has the row
    elif call.when == "teardown" and state.eval_items > state.trim_limit:
        item.user_properties.clear()  # the item is over: its last report holds what it recorded
    if call.excinfo is not None and _tag(item) is not None:
        from fieldeval.run.writable import full_disk_line, out_of_space

        case_id = state.case_id_of(item)
        if case_id is not None:  # the store finds the errored item by it (runs item RUN CASE_ID)
            report.user_properties.append((CASE_KEY, case_id))
        repeated = state.repeated_case_key(item)
        if repeated is not None:  # an errored epoch: its item counts once among the errored items
            report.user_properties.append((EPOCH_KEY, repeated))

        if out_of_space(call.excinfo.value):
            state.stop_for_full_disk(item.session, full_disk_line("the run's files", call.excinfo.value))
            report.longrepr = "no space left on the device"
    if call.excinfo is not None and isinstance(call.excinfo.value, ModelCallError) and _tag(item) is not None:
        error = call.excinfo.value
        report.longrepr = f"{error.model}: {error.detail}"
        report.user_properties.append((ERROR_KEY, json.dumps({"kind": error.kind, "detail": error.detail})))
        if error.kind == "skipped":  # after the model's permanent failure: a skip, not one more FAILURES block
            _, lineno, _ = item.location
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (lineno or 0) + 1, f"Skipped: {error.model}: {error.detail}")
    return report


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    """Eval items print no dots when the live progress line stands in for them."""
    state = config.stash.get(_SESSION, None)
    if state is None or not state.live_progress or report.when != "call":
        return None
    if any(key == ITEM_KEY for key, _ in report.user_properties):
        return report.outcome, "", report.outcome.upper()
    return None


@pytest.fixture
def client(pytestconfig: pytest.Config):
    """The session's model client: ``client.complete(model, prompt, system=...)`` (for items without a solver)."""
    return eval_session(pytestconfig).client


@pytest.fixture
def answer(request: pytest.FixtureRequest):
    """The result of the solver the item's module declares (``solver=`` in its ``fieldeval`` marker).

    Solvers run ahead in the session's bounded pool; the item waits for its own
    result (or solves it now), then scores and records it.
    """
    from fieldeval.calls.failures import ModelCallError

    try:
        return eval_session(request.config).answer(request.node)
    except ModelCallError as error:  # the item fails in its call phase, as if its body had made the call
        request.node.stash[_ANSWER_ERROR] = error
        return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """An item whose solver's model call failed fails here, before its body scores anything."""
    error = item.stash.get(_ANSWER_ERROR, None)
    if error is not None:
        raise error


@pytest.fixture
def context(request: pytest.FixtureRequest):
    """The eval item's benchmark context (cases, indexes, options), loaded once per process."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the context fixture needs @pytest.mark.{MARKER}(benchmark=...)")
    return eval_session(request.config).context(marker.kwargs["benchmark"])


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record one row of metric values for this eval item: ``record(model=..., **values)``."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the record fixture needs @pytest.mark.{MARKER}(benchmark=...)")

    def _record(**values) -> None:
        row = {"benchmark": marker.kwargs["benchmark"], **values, **_design_keys(request)}
        combination = getattr(request.node, "callspec", None) and request.node.callspec.params.get("model")
        if hasattr(combination, "columns"):  # a matrix cell: llm-matrix's hyperparameter columns and the epoch
            row.update(combination.columns())
        # compact, as the rows file writes it: the spool's line is then the rows file's (run.spool)
        request.node.user_properties.append((ROW_KEY, json.dumps(row, default=str, separators=(",", ":"))))

    return _record


def _design_keys(request: pytest.FixtureRequest) -> dict[str, str]:
    """How the item's case was drawn: ``case_key`` (its pytest id), ``cluster`` and ``cluster_stratum``."""
    case = eval_session(request.config).case_of(request.node)
    if case is None:
        return {}
    bench = eval_session(request.config).benchmark(request.node.get_closest_marker(MARKER).kwargs["benchmark"])
    keys = {"case_key": str(case.test_id)}
    cluster = bench.cluster_key(case)
    if cluster not in (None, ""):
        keys["cluster"] = str(cluster)
        stratum = bench.stratum_key(case) if bench.stratum_key is not None else None
        if stratum not in (None, ""):
            keys["cluster_stratum"] = str(stratum)
    return keys


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session):
    """Fix the run status and gates before the report is built; then write, publish and store (controller only).

    From here to the end of the session, SIGINT and SIGTERM wait until the run is saved.
    """
    config = session.config
    files = config.stash.get(_FILES, None)
    state = config.stash.get(_SESSION, None)
    if is_xdist_worker(config) and state is not None:
        _drop_idle_hypothesis_plugin(session, state)  # a worker prints its own (empty) terminal summary too
    if is_xdist_worker(config) or files is None or state is None:
        return (yield)
    from fieldeval.run.memory import trim_heap

    interrupts = config.stash[_SIGNALS]
    interrupts.shield()
    if interrupts.received and session.exitstatus == pytest.ExitCode.OK:  # a repeated signal cut pytest's own handling
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    state.flush_stage()  # the last chunk of store rows, before the rows are parsed (and the memory is at its most)
    state.begin_store()  # the staged responses go into the store while the rows are parsed and aggregated
    try:
        if state.eval_items >= FREEZE_ABOVE_ITEMS:
            trim_heap()  # the finished items' free memory back to the system before the rows come in
            state.rows()  # parsed once, then frozen: no collection walks them while the run is saved
            gc.freeze()
        state.finish(session.exitstatus)
        _drop_idle_hypothesis_plugin(session, state)
        payload = state.payload()
    except BaseException:
        state.abandon_store()
        raise
    if any(not gate["passed"] for gate in payload["gates"]) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    # only errored eval items failed, and --max-errors allows them
    allowed = (session.exitstatus == pytest.ExitCode.TESTS_FAILED and state.errors_allowed()
               and all(gate["passed"] for gate in payload["gates"]) and session.testsfailed <= sum(state.errors.values()))
    if allowed:
        session.exitstatus = pytest.ExitCode.OK
    if state.disk_full is not None:
        session.exitstatus = SAVE_FAILED
        allowed = False
    try:
        return (yield)
    finally:
        if allowed:  # again after the other plugins' sessionfinish: some OR the original status back in
            session.exitstatus = pytest.ExitCode.OK
        try:
            problem = _save_session(config, state, files, int(session.exitstatus))
        finally:
            state.abandon_store()  # a run not handed over by now never will be: the store's thread ends
        lines = list(dict.fromkeys(p for p in (state.disk_full, problem) if p))
        if lines:  # one line, whatever went wrong
            sys.stderr.write("; ".join([lines[0], *(line.removeprefix("fieldeval: ") for line in lines[1:])]) + "\n")
            sys.stderr.flush()
            session.exitstatus = SAVE_FAILED


def _drop_idle_hypothesis_plugin(session: pytest.Session, state: EvalSession) -> None:
    """A session of eval items only, where nothing imported Hypothesis, does without Hypothesis's pytest plugin:
    its terminal summary imports the whole library (about 2 s of CPU after the last item) to report nothing."""
    evals = state.eval_items if is_xdist_worker(session.config) else sum(state.progress.planned.values())
    only_evals = session.testscollected and evals >= session.testscollected
    if only_evals and "hypothesis" not in sys.modules:
        plugin = session.config.pluginmanager.get_plugin("hypothesispytest")
        if plugin is not None:
            session.config.pluginmanager.unregister(plugin)


def _save_session(config: pytest.Config, state: EvalSession, files: RunFiles, exitstatus: int) -> str | None:
    """The run's tables and report under its folder, published to reports/, the Markdown summary, the store.

    Returns None when all went well, else the one line to end with: the disk filled up (every file is
    written whole or not at all, and the run is stored if the store still takes it) or the store could
    not take the run (it is then kept for ``fieldeval runs push``).
    """
    from fieldeval.run.runfiles import trim_report
    from fieldeval.run.writable import full_disk_line, out_of_space

    if state.disk_full is not None:
        exitstatus = SAVE_FAILED
    problem = None
    # the rows file first, then the run kept beside it (unstored.json, with both digests), then the store's commit
    # in a thread of its own while the other files are written: a kill at any moment leaves a run to push
    saving, unsaved, rows = None, None, None
    try:
        rows = files.write_rows(state.row_lines())
    except OSError as error:
        if not out_of_space(error):
            raise
        problem = full_disk_line("the rows file", error)
    if state.has_results():
        try:
            saving = state.start_save_run(exitstatus, files.folder, files.rows_sha256 if rows is not None else None)
        except Exception as error:  # noqa: BLE001  (raised again once the files are written: they come first)
            unsaved = error
    try:
        if state.store_url() is not None and state.has_results():
            files.mark("saving", run_status=state.status, started_at=state.started_at, exitcode=exitstatus)
        if rows is not None:
            tables = state.write_outputs(files.folder)
            json_plugin = getattr(config, "_json_report", None)
            report = getattr(json_plugin, "report", None)
            if report is not None:
                report["exitcode"] = exitstatus
                report["evals_rows"] = files.rows_pointer(rows, sum(len(r) for r in state.rows().values()))
                trim_report(report, state.eval_items, state.released_entries)
                files.write_report(report, indent=config.option.json_report_indent)
            files.publish(tables)
        summary_md = state.options.summary_md or os.environ.get("GITHUB_STEP_SUMMARY")
        if summary_md and state.has_results():
            from fieldeval.run.summary import render_markdown

            with open(summary_md, "a", encoding="utf-8") as handle:
                handle.write(render_markdown(state.payload()))
    except OSError as error:
        if not out_of_space(error):
            raise
        problem = problem or full_disk_line("the report and tables", error)
    finally:
        stored = saving.result() if saving is not None else None  # waited for, whatever the files did
    kept = state.kept_file()
    # the run's status once the store has committed it; "kept" while it waits in unstored.json for runs push
    try:
        fields = {"run_status": state.status, "kept": str(kept)} if kept is not None else {}
        files.mark("kept" if kept is not None else state.status, started_at=state.started_at, exitcode=exitstatus,
                   **fields)
    except OSError as error:
        if not out_of_space(error):
            raise
        problem = problem or full_disk_line("status.json", error)
    if unsaved is not None:
        raise unsaved
    problem = stored or problem
    if state.eval_items >= FREEZE_ABOVE_ITEMS:
        gc.freeze()  # what the run built stays for the exit: no collection need walk it again
    return problem


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """End the terminal output with the headline tables, failed gates and errors per model."""
    state = _active(config)
    if state is None:
        return
    state.end_progress(terminalreporter)
    if not state.has_results():
        return
    from fieldeval.run.summary import gate_line, render_summary

    payload = state.payload()
    for line in render_summary(payload).splitlines():
        terminalreporter.write_line(line)
    from fieldeval.stats.epochs import epoch_lines

    for line in epoch_lines(payload):
        terminalreporter.write_line(line)
    for gate in payload["gates"]:  # passed gates too, so a reader sees what was checked
        terminalreporter.write_line(gate_line(gate), red=not gate["passed"], green=gate["passed"])
    from fieldeval.run.audit import audit_lines

    for line in audit_lines(payload.get("audit", {})):
        terminalreporter.write_line(line, yellow=True)
    for line in state.error_lines():
        terminalreporter.write_line(line, red=True)
