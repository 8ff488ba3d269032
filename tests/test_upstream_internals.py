"""What fieldeval.run.memory relies on in pytest, pytest-json-report, syrupy and Hypothesis, checked against the
installed releases: each test fails, naming the reach, when an upgrade changes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fieldeval.run import memory

CHECKS = '''
import pytest

seen = {}
CONFIG = []


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_logreport(report):
    result = yield  # every other plugin has seen the report, as fieldeval's release_report sees it
    config = CONFIG[0]
    stats = config.pluginmanager.get_plugin("terminalreporter").stats
    bucket = stats.get("passed" if report.when == "call" else "", [])
    seen.setdefault("last_is_report", []).append(bool(bucket) and bucket[-1] is report)
    tests = getattr(getattr(config, JSON_REPORT_ATTR, None), "_json_tests", None)
    seen.setdefault("json_entry", []).append(isinstance(tests, dict) and report.nodeid in tests
                                             and (report.when != "teardown" or tests[report.nodeid].get("outcome")))
    return result


def pytest_configure(config):
    CONFIG.append(config)


def pytest_collection_finish(session):
    item = session.items[0]
    seen["request"] = bool(getattr(item, "_request", None)) and getattr(item, "funcargs", None) == {}
    item._request, item.funcargs = False, None  # what slim_items does: pytest must build it again
    snapshots = getattr(session.config, SYRUPY_ATTR, None)
    seen["syrupy_start"] = callable(getattr(snapshots, "start", None))
    seen["hypothesis"] = session.config.pluginmanager.get_plugin(HYPOTHESIS_PLUGIN) is not None


def pytest_sessionfinish(session):
    seen["finished"] = True


def pytest_unconfigure(config):
    report = getattr(getattr(config, JSON_REPORT_ATTR, None), "report", None)
    seen["json_report"] = isinstance(report, dict) and "tests" in report
    import json, os
    with open(os.environ["SEEN_FILE"], "w") as handle:
        json.dump(seen, handle)
'''


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> dict:
    """Run a one-test session with fieldeval's plugin off and the checks above on; what they saw."""
    folder = tmp_path_factory.mktemp("upstream")
    (folder / "conftest.py").write_text(CHECKS.replace("JSON_REPORT_ATTR", repr(memory.JSON_REPORT_ATTR))
                                        .replace("SYRUPY_ATTR", repr(memory.SYRUPY_ATTR))
                                        .replace("HYPOTHESIS_PLUGIN", repr(memory.HYPOTHESIS_PLUGIN)))
    (folder / "test_one.py").write_text("import pytest\n\n\n@pytest.fixture\ndef value():\n    return 3\n\n\n"
                                        "def test_one(value):\n    assert value == 3\n")
    env = {**os.environ, "SEEN_FILE": str(folder / "seen.json")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:fieldeval.plugin", "-p", "no:cacheprovider",
                             "-p", "no:xdist", "--json-report", "--json-report-file", str(folder / "r.json"),
                             "--rootdir", str(folder), "-c", os.devnull, str(folder)],
                            cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr  # it ran although its fixture request was dropped
    return json.loads((folder / "seen.json").read_text())


def test_the_terminal_reporter_keeps_each_passed_report_last_in_its_stats_list(seen):
    assert seen["last_is_report"] == [True, True, True], "release_report: TerminalReporter.stats changed"


def test_pytest_json_report_keeps_one_entry_per_node_id_with_its_outcome(seen):
    assert all(seen["json_entry"]), "release_report: pytest-json-report's _json_tests changed"
    assert seen["json_report"], "json_report: pytest-json-report's report attribute changed"


def test_a_collected_item_holds_its_fixture_request_and_runs_without_it(seen):
    assert seen["request"], "slim_items: Item._request / funcargs changed"


def test_syrupy_keeps_its_snapshot_session_on_the_config_with_start(seen):
    assert seen["syrupy_start"], "release_syrupy_items: config._syrupy.start() changed"


def test_hypothesis_registers_its_pytest_plugin_under_the_name_fieldeval_drops(seen):
    assert seen["hypothesis"], f"drop_idle_hypothesis_plugin: no plugin named {memory.HYPOTHESIS_PLUGIN!r}"


SHARED_SOURCE = '''
import pytest


@pytest.mark.parametrize("case", ["a", "b/[c]", "d|e"])
@pytest.mark.parametrize("model", [1, 2])
def test_items(case, model):
    pass


def test_single():
    pass


class TestGroup:
    @pytest.mark.parametrize("n", range(3))
    def test_method(self, n):
        pass


@pytest.mark.parametrize("n", range(2))
def test_items_later(n):
    pass
'''


def _items(pytester) -> list:
    """The items of SHARED_SOURCE, freshly collected (fieldeval's and syrupy's plugins off)."""
    module = pytester.getmodulecol(SHARED_SOURCE, configargs=("-p", "no:fieldeval.plugin", "-p", "no:syrupy"))
    return pytester.genitems([module])


def test_shared_locations_are_those_pytest_finds_item_by_item(pytester):
    # the independent expectation: pytest's own Item.location, computed for each item of a second collection
    own = [item.location for item in _items(pytester)]
    items = _items(pytester)
    by_parent: dict = {}
    for item in items:
        by_parent.setdefault(item.parent, []).append(item)
    shared = sum(memory.share_locations(nodes) for nodes in by_parent.values())
    assert shared == len(items) - 4  # all but the first item of each of the four functions
    assert sum("location" in item.__dict__ for item in items) == len(items)
    assert [item.location for item in items] == own
    assert len({location[2] for location in own}) == len(own) == 12


def test_a_shared_location_is_what_pytest_then_reads(pytester):
    first, second = _items(pytester)[:2]
    memory.share_locations([first, second])
    second.__dict__["location"] = ("elsewhere.py", 7, "name")
    assert second.location == ("elsewhere.py", 7, "name"), "share_locations: Item.location is no longer cached"


FILLED_CONFTEST = '''
import pytest


@pytest.fixture
def value():
    raise AssertionError("pytest made a fixture value the item's setup hook had already filled")


def pytest_runtest_setup(item):
    item.funcargs["value"] = 3
    item.funcargs["request"] = item._request
'''


def test_pytest_s_fill_leaves_a_value_the_setup_hook_filled(pytester):
    # what the plugin's pytest_runtest_setup relies on for collect.direct_fixtures (a plain hook, run before
    # pytest's runner fills the rest): funcargs filled there are the item's arguments, and request is item._request
    pytester.makeconftest(FILLED_CONFTEST)
    pytester.makepyfile("def test_one(value, request):\n    assert value == 3 and request.node.name == 'test_one'\n")
    result = pytester.runpytest("-p", "no:fieldeval.plugin", "-p", "no:cacheprovider", "-p", "no:syrupy")
    result.assert_outcomes(passed=1)
