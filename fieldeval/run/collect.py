"""Eval items at collection and as they report: their parameters, which of them run, and what each one records."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import pytest

from fieldeval.calls.cells import Combination, model_of
from fieldeval.defaults import CASE_KEY, EPOCH_KEY, ERROR_KEY, MARKER, ROW_KEY
from fieldeval.errors import UsageError, exit_on_usage_error
from fieldeval.run.markers import eval_marker
from fieldeval.run.resume import plan_tail, resumed_plan

if TYPE_CHECKING:
    from fieldeval.run.session import EvalSession


def tag(item: pytest.Item) -> tuple[str, Any] | None:
    """(benchmark, model) of an eval item, or None for any other item."""
    marker = eval_marker(item)
    callspec = getattr(item, "callspec", None)
    if marker is None or callspec is None or "model" not in callspec.params:
        return None
    return marker.kwargs["benchmark"], callspec.params["model"]


def parametrize(metafunc: pytest.Metafunc, state: EvalSession | None, name: Any) -> None:
    """Parametrise an eval function over its benchmark's cases (by position, with the cases' own ids) and models.

    Both through the plugin's ``case`` and ``model`` fixtures (indirect): a directly parametrised argument costs
    pytest a ``request`` fixture definition per item, built from the signature of its getter."""
    if state is None or name not in state.selected:  # a marker the module's source does not show (added by a hook)
        exit_on_usage_error(lambda: _unplanned(metafunc, name))
    selection = state.selection
    models = selection.models_for(name)
    if "case" in metafunc.fixturenames:
        # the parameters are case positions, the ids the cases' own; the ``case`` fixture reads a case when its
        # item runs, so a process holds the cases of the items it runs, not the whole suite
        ids = selection.benchmark(name).case_ids(selection.context(name))
        if "model" in metafunc.fixturenames and _parametrize_jointly(metafunc, ids, models,
                                                                      designed=state.options.designed):
            return
        metafunc.parametrize("case", range(len(ids)), ids=ids, indirect=True)
    if "model" in metafunc.fixturenames:
        if state.options.designed:  # combinations: ids like gpt-4o-mini-t0.7 (and -e2 for the second epoch)
            metafunc.parametrize("model", models, ids=[m.test_id for m in models], indirect=True)
        else:
            metafunc.parametrize("model", models, indirect=True)


def _unplanned(metafunc: pytest.Metafunc, name: object) -> None:
    raise UsageError(f"{metafunc.definition.nodeid}: marked {MARKER}(benchmark={name!r}) at collection, but its "
                     f"module's source does not mark it; write @pytest.mark.{MARKER}(benchmark=\"...\") (or "
                     "pytestmark = ...) in the module, so the run is planned before collection")


def _parametrize_jointly(metafunc: pytest.Metafunc, ids: list[str], models: list, *, designed: bool) -> bool:
    """Parametrise ``case`` and ``model`` in one call, with the node ids and parameters two calls give (one call
    builds each item's callspec once, two build every case's and then copy it per model). Returns False, having
    done nothing, where one call could name an item otherwise than two: ids that repeat (pytest tells them apart
    per call), a model that is not a non-empty text (pytest names it by its position) or a plugin's
    ``pytest_make_parametrize_id``."""
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
                         indirect=True)
    return True


def deselect(config: pytest.Config, state: EvalSession, items: list[pytest.Item]) -> None:
    """Leave out the eval items this session does not run: ``--matrix-job K``'s other models, and ``--resume``'s
    items the stored run scored (after pytest-split chose this shard's items)."""
    if state.options.matrix_job is not None and state.selected:
        model = exit_on_usage_error(state.selection.matrix_job_model)
        _drop(config, items, lambda item, found: model_of(item.callspec.params["model"]) != model)
    if state.resumed is None or not state.selected:
        return
    plan = resumed_plan(state.resumed_settings)
    if plan is not None:  # the run's own plan, whatever this command's -k: no item it did not plan
        wanted = {plan_tail(node_id) for node_id in plan}
        _drop(config, items, lambda item, found: plan_tail(item.nodeid) not in wanted)
    done = state.resumed.scored_items()

    def scored(item: pytest.Item, found: tuple[str, Any]) -> bool:
        case = state.selection.case_of(item)
        cell = item.callspec.params["model"]
        epoch = cell.epoch if isinstance(cell, Combination) else None
        key = (found[0], found[1], str(case.test_id)) if case is not None else None
        return key is not None and (key if epoch is None else (*key, epoch)) in done

    _drop(config, items, scored)


def _drop(config: pytest.Config, items: list[pytest.Item], left_out: Any) -> None:
    keep, drop = [], []
    for item in items:
        found = tag(item)
        (drop if found is not None and left_out(item, found) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def mark_item(item: pytest.Item, state: EvalSession, found: tuple[str, Any]) -> None:
    """Tag an eval item with its benchmark and model (its :func:`tag`), so its reports are counted per model."""
    item.user_properties.append(state.intake.item_property(found))


_DIRECT = pytest.StashKey[dict]()


def direct_fixtures(item: pytest.Item, own: Collection[str], module: str) -> tuple[str, ...]:
    """The fixtures of ``own`` (defined in ``module``) that pytest would fill for the item from that definition
    and that only the item's function asks for, and ``request`` where its closure holds it: what the plugin can
    put in ``item.funcargs`` itself in the item's setup, as pytest's fill would put them (pytest's fixture
    machinery costs some 25 us per fixture and item, more than these fixtures' own work). None under
    ``--setup-show`` or ``--setup-plan``, which report each fixture, or for an item that is not a plain function.

    A fixture another fixture of the closure asks for is left to pytest, so each value is made once. Which names
    these are is the same for every item of one function (they share pytest's fixture information), so they
    are worked out once and kept on the function's parent."""
    option = item.config.option
    info = getattr(item, "_fixtureinfo", None)
    if info is None or getattr(option, "setupshow", False) or getattr(option, "setupplan", False):
        return ()
    known = item.parent.stash.setdefault(_DIRECT, {})
    kept = known.get(id(info))
    if kept is not None and kept[0] is info:
        return kept[1]
    asked = {name for defs in info.name2fixturedefs.values() for fixture in defs for name in fixture.argnames}
    names = tuple(name for name in info.names_closure if name in own and name in info.argnames and name not in asked
                  and _defined_in(info.name2fixturedefs.get(name), name, module))
    if "request" in info.names_closure:
        names += ("request",)
    known[id(info)] = (info, names)  # the info itself is kept, so its id is never another's
    return names


def _defined_in(defs: Any, name: str, module: str) -> bool:
    """Whether the closest definition of the fixture ``name`` is the function of that name in ``module``."""
    if not defs:
        return False
    function = defs[-1].func
    return getattr(function, "__module__", None) == module and getattr(function, "__qualname__", None) == name


def amend_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport, state: EvalSession) -> None:
    """An eval item's report as the run reads it: a failed model call as one line (model, error class, message),
    not a traceback; an errored item with its case id and epoch; a full disk stopping the run. Above the report's
    trim limit the item lets go of its row once its call's report carries it."""
    from fieldeval.calls.failures import ModelCallError

    if call.when == "call" and state.eval_items > state.trim_limit:
        item.user_properties[:] = [p for p in item.user_properties if p[0] != ROW_KEY]  # the report has the row
    elif call.when == "teardown" and state.eval_items > state.trim_limit:
        item.user_properties.clear()  # the item is over: its last report holds what it recorded
    if call.excinfo is None or tag(item) is None:
        return
    from fieldeval.run.writable import full_disk_line, out_of_space

    case_id = state.selection.case_id_of(item)
    if case_id is not None:  # the store finds the errored item by it (runs item RUN CASE_ID)
        report.user_properties.append((CASE_KEY, case_id))
    repeated = state.selection.repeated_case_key(item)
    if repeated is not None:  # an errored epoch: its item counts once among the errored items
        report.user_properties.append((EPOCH_KEY, repeated))
    if out_of_space(call.excinfo.value):
        state.pytest_session = state.pytest_session or item.session
        state.stop_for_full_disk(full_disk_line("the run's files", call.excinfo.value))
        report.longrepr = "no space left on the device"
    if isinstance(call.excinfo.value, ModelCallError):
        error = call.excinfo.value
        report.longrepr = f"{error.model}: {error.detail}"
        report.user_properties.append((ERROR_KEY, json.dumps({"kind": error.kind, "detail": error.detail})))
        if error.kind == "skipped":  # after the model's permanent failure: a skip, not one more FAILURES block
            _, lineno, _ = item.location
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (lineno or 0) + 1, f"Skipped: {error.model}: {error.detail}")


def row_of(item: pytest.Item, state: EvalSession, values: dict[str, Any]) -> str:
    """The row an eval item records, as compact JSON (the rows file's own line): its values, how its case was drawn
    (``case_key``, ``cluster``, ``cluster_stratum``) and, for a matrix cell, its hyperparameter columns."""
    row = {"benchmark": eval_marker(item).kwargs["benchmark"], **values, **_design_keys(item, state)}
    combination = getattr(item, "callspec", None) and item.callspec.params.get("model")
    if isinstance(combination, Combination):  # a matrix cell: llm-matrix's hyperparameter columns and the epoch
        row.update(combination.columns())
    return json.dumps(row, default=str, separators=(",", ":"))


def _design_keys(item: pytest.Item, state: EvalSession) -> dict[str, str]:
    case = state.selection.case_of(item)
    if case is None:
        return {}
    bench = state.selection.benchmark(eval_marker(item).kwargs["benchmark"])
    keys = {"case_key": str(case.test_id)}
    cluster = bench.cluster_key(case)
    if cluster not in (None, ""):
        keys["cluster"] = str(cluster)
        stratum = bench.stratum_key(case) if bench.stratum_key is not None else None
        if stratum not in (None, ""):
            keys["cluster_stratum"] = str(stratum)
    return keys


__all__ = ["amend_report", "deselect", "direct_fixtures", "mark_item", "parametrize", "row_of", "tag"]
