"""Scale: suites parsed once per machine and read by case position, the rows file, trimmed reports."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ebs_project import FAKE_CONFTEST, SUITE, make_project, run


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester)


def _suite_file(tmp_path, cases: int):
    suite = dict(SUITE, cases=[SUITE["cases"][i % 3] for i in range(cases)])
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def test_a_suite_is_parsed_once_and_read_by_position(tmp_path, monkeypatch):
    from fieldeval.benchmarks.ebs import suite as suite_module

    path = _suite_file(tmp_path, 7)
    first = suite_module.load_suite(path)
    parsed = suite_module._parse_suite(path)[2]  # the YAML's cases, parsed directly
    assert list(first.cases) == parsed and first.cases.test_ids() == [c.test_id for c in parsed]
    assert [first.cases[i] for i in (0, 6, -1)] == [parsed[0], parsed[6], parsed[-1]]

    def no_yaml(*args, **kwargs):
        raise AssertionError("the YAML was parsed again")

    monkeypatch.setattr(suite_module, "read_yaml", no_yaml)
    again = suite_module.load_suite(path)  # a second process: reads the compact form, never the YAML
    assert list(again.cases) == parsed and (again.name, again.system, again.sha256) == (
        first.name, first.system, first.sha256)
    monkeypatch.undo()
    path.write_text(yaml.safe_dump(dict(SUITE, cases=SUITE["cases"][:2])))  # a changed suite is parsed anew
    assert [c.case_id for c in suite_module.load_suite(path).cases] == ["case000", "case001"]


def test_items_keep_their_ids_and_hold_case_positions(project):
    from fieldeval.benchmarks.ebs.suite import _parse_suite

    result = project.runpytest_subprocess("evals", "--model", "fake-ebs", "--ebs-suite", "suite.yaml",
                                          "--collect-only", "-q", "-p", "no:cacheprovider")
    ids = [line for line in result.outlines if "::" in line]
    cases = _parse_suite(project.path / "suite.yaml")[2]
    assert ids == [f"evals/test_ebs.py::test_ebs[{case.test_id}-fake-ebs]" for case in cases]


SECOND_MODEL = """

class Umlaut(Fake):
    model_id = "f\u00e4ke-2"


class SecondPlugin:
    @llm.hookimpl
    def register_models(self, register):
        register(Umlaut())


llm.plugins.pm.register(SecondPlugin(), name="fake-umlaut-plugin")
"""

PARAMS_PROBE = """
def pytest_collection_finish(session):
    with open("params.txt", "w", encoding="utf-8") as out:
        for item in session.items:
            out.write(f"{item.nodeid} {item.callspec.params['case']} {item.callspec.params['model']}\\n")
"""


def _collected(project, *args) -> list[tuple[str, str, str]]:
    (project.path / "params.txt").unlink(missing_ok=True)  # no earlier run's items
    project.runpytest_subprocess("evals", "--ebs-suite", "suite.yaml", "--collect-only", "-q", "-p", "no:cacheprovider",
                                 "-p", "params_probe", *args)
    return [tuple(line.rsplit(" ", 2)) for line in (project.path / "params.txt").read_text("utf-8").splitlines()]


def test_items_of_several_models_are_named_and_ordered_as_pytest_names_them(project):
    """Each case with each model in turn, the ids as pytest writes them (its ASCII escapes for other letters), and
    each item's parameters its case's position and its model; a plugin's ``pytest_make_parametrize_id`` names the
    models as it does for any parameter."""
    from fieldeval.benchmarks.ebs.suite import _parse_suite

    project.path.joinpath("conftest.py").write_text(FAKE_CONFTEST + SECOND_MODEL, encoding="utf-8")
    project.makepyfile(params_probe=PARAMS_PROBE)
    cases = _parse_suite(project.path / "suite.yaml")[2]
    models = [("fake-ebs", "fake-ebs"), ("f\u00e4ke-2", "f\\xe4ke-2")]  # (model, its id: pytest's escape)
    expected = [(f"evals/test_ebs.py::test_ebs[{case.test_id}-{model_id}]", str(at), model)
                for at, case in enumerate(cases) for model, model_id in models]
    assert _collected(project, "--model", "fake-ebs", "--model", "f\u00e4ke-2") == expected
    # a plugin's ids for the models' values: pytest asks it for every parameter without an id of its own
    project.path.joinpath("conftest.py").write_text(
        FAKE_CONFTEST + SECOND_MODEL + "\n\ndef pytest_make_parametrize_id(config, val, argname):\n"
        "    return f'm_{len(val)}' if argname == 'model' else None\n", encoding="utf-8")
    assert _collected(project, "--model", "fake-ebs", "--model", "f\u00e4ke-2") == [
        (f"evals/test_ebs.py::test_ebs[{case.test_id}-m_{len(model)}]", str(at), model)
        for at, case in enumerate(cases) for model, _ in models]


def test_the_rows_file_holds_every_recorded_row(project):
    _, report = run(project, "--cache", "off")
    pointer = report["evals_rows"]
    rows = [json.loads(line) for line in (project.path / "reports" / pointer["path"]).read_text().splitlines()]
    inline = {test["nodeid"]: json.loads(prop["fieldeval.row"]) for test in report["tests"]
              for prop in test.get("user_properties", []) if "fieldeval.row" in prop}
    assert pointer["rows"] == len(rows) == len(inline) == 3  # the fourth item's model call failed
    assert [r["nodeid"] for r in rows] == sorted(inline)
    # each line is the recorded row with its node id, in json.dumps's compact form
    assert (project.path / "reports" / pointer["path"]).read_text().splitlines() == [
        json.dumps({**inline[nodeid], "nodeid": nodeid}, separators=(",", ":")) for nodeid in sorted(inline)]
    assert "trimmed" not in report and len(report["tests"]) == 4


STAGE_SPY = """
import fieldeval.store.stage
from fieldeval.store.stage import ResponseStage

fieldeval.store.stage.STAGE_CHUNK = 2  # the first two rows are built and written while the items run

copy_into = ResponseStage.copy_into


def spy(self, *args):
    with open("stage-used.txt", "a") as out:
        out.write(str(self.path) + "\\n")
    return copy_into(self, *args)


ResponseStage.copy_into = spy
"""


def test_a_session_builds_its_store_rows_while_it_runs_and_stores_them_in_node_id_order(project):
    """With a SQLite store the session's store rows are built a chunk at a time while its items run, and copied
    into the store once (fieldeval.store.stage): the run's stored responses are its rows file's rows, in node id
    order, and the stage's scratch file is gone afterwards."""
    import sqlite3
    from pathlib import Path

    project.makepyfile(stage_spy=STAGE_SPY)
    _, report = run(project, "--cache", "off", "-p", "stage_spy")
    used = (project.path / "stage-used.txt").read_text().split()
    assert len(used) == 1 and not Path(used[0]).exists()
    lines = (project.path / "reports" / report["evals_rows"]["path"]).read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    with sqlite3.connect(project.path / "reports" / "fieldeval.db") as conn:
        stored = conn.execute("SELECT corpus_item_id, raw_response, json_extract(metrics, '$.ontology_score') "
                              "FROM evaluation_responses WHERE run_id = ? ORDER BY response_id",
                              (report["evals"]["run_id"],)).fetchall()
    assert len(rows) == 3
    assert [row["nodeid"] for row in rows] == sorted(row["nodeid"] for row in rows)
    assert stored == [(row["case_id"], row["response_text"], row["ontology_score"]) for row in rows]


def test_above_the_limit_the_report_keeps_only_items_that_did_not_pass(project, monkeypatch):
    _, full = run(project, "--cache", "off", "--run-id", "run_0000000f")
    monkeypatch.setenv("FIELDEVAL_REPORT_TESTS_LIMIT", "2")
    _, trimmed = run(project, "--cache", "off", "--run-id", "run_0000000e")
    assert [t["outcome"] for t in trimmed["tests"]] == ["failed"]
    assert trimmed["trimmed"]["tests"] == 3 and trimmed["collectors"] == []
    assert not any("user_properties" in t and any("fieldeval.row" in p for p in t["user_properties"])
                   for t in trimmed["tests"])
    for report in (full, trimmed):
        report["evals"]["benchmarks"]["ebs"]["fake-ebs"]["totals"].pop("response_time_s")
    assert trimmed["evals"]["benchmarks"] == full["evals"]["benchmarks"]
    assert trimmed["summary"] == full["summary"]
    rows = (project.path / "reports" / trimmed["evals_rows"]["path"]).read_text().splitlines()
    assert len(rows) == trimmed["evals_rows"]["rows"] == 3


def test_above_the_limit_passed_reports_are_let_go_of_and_still_counted(project, monkeypatch):
    monkeypatch.setenv("FIELDEVAL_REPORT_TESTS_LIMIT", "2")
    result, report = run(project, "--cache", "off")
    result.stdout.fnmatch_lines(["*1 failed, 3 passed*"])  # pytest's own counts: the stand-ins count
    assert report["summary"]["passed"] == 3 and report["summary"]["total"] == 4
    kept = run(project, "--cache", "off", "-rA")[0]  # -rA reads every passed report: they are all kept
    kept.stdout.fnmatch_lines(["PASSED evals/test_ebs.py::test_ebs[*", "*1 failed, 3 passed*"])
    assert len([line for line in kept.outlines if line.startswith("PASSED evals/")]) == 3


def test_a_shard_counts_the_items_it_deselected_without_holding_them(project, tmp_path):
    """A shard of 1,100 eval items keeps the count of the suite's 3,300 other items, not the items: neither the
    terminal reporter nor syrupy (whose session an eval-only session of that size empties) holds them; with
    xdist, syrupy still gets every worker's report."""
    suite = _suite_file(tmp_path, 4400)
    project.makepyfile(deselect_probe="""
        import weakref

        refs = []

        def pytest_deselected(items):
            refs.extend(weakref.ref(item) for item in items[:50])

        def pytest_sessionfinish(session):
            print(f"deselected items alive: {sum(ref() is not None for ref in refs)} of {len(refs)}")
    """)
    result, _ = run(project, "--cache", "off", "--ebs-suite", str(suite), "-p", "deselect_probe", "-s",
                    "--splits", "4", "--group", "1")
    result.stdout.fnmatch_lines(["*deselected items alive: 0 of 50*"])
    summary = next(line for line in reversed(result.outlines) if "deselected" in line and " in " in line)
    assert "1100 passed, 3300 deselected" in summary
    result, _ = run(project, "--cache", "off", "--ebs-suite", str(suite), "-n", "2", "--workers-as-given")
    result.stdout.fnmatch_lines(["*4400 passed*"])
    output = result.stdout.str() + result.stderr.str()
    assert "syrupy:" not in output and "snapshot detection" not in output  # no worker's report went missing


ITEM_PROBE = """
    import weakref

    refs = []

    def pytest_collection_finish(session):
        refs.extend(weakref.ref(item) for item in session.items)

    def pytest_sessionfinish(session):
        worker = getattr(session.config, "workerinput", {}).get("workerid", "controller")  # not the environment:
        # this test may itself run in an xdist worker, whose PYTEST_XDIST_WORKER the inner pytest inherits
        if refs:
            with open(f"alive-{worker}.txt", "w") as out:
                out.write(f"{sum(ref() is not None for ref in refs)} {len(refs)} "
                          f"{sorted({type(item).__name__ for item in session.items})}")
"""


def _alive(project) -> dict[str, tuple[int, int, str]]:
    found = {}
    for path in project.path.glob("alive-*.txt"):
        alive, collected, kinds = path.read_text().split(" ", 2)
        found[path.stem.removeprefix("alive-")] = (int(alive), int(collected), kinds)
        path.unlink()
    return found


@pytest.mark.slow  # 1,200 items, three times
def test_a_large_eval_session_lets_go_of_each_item_once_it_ran(project, tmp_path):
    """In a session of 1,200 eval items, no item outlives its run, in one process or in the xdist worker that ran it,
    and the run still scores and records every row; a session with another test in it keeps its items."""
    suite = _suite_file(tmp_path, 1200)
    project.makepyfile(item_probe=ITEM_PROBE)
    result, report = run(project, "--cache", "off", "--ebs-suite", str(suite), "-p", "item_probe")
    result.stdout.fnmatch_lines(["*1200 passed*"])
    assert _alive(project) == {"controller": (0, 1200, "['FinishedItem']")}
    assert report["evals_rows"]["rows"] == 1200
    score = report["evals"]["benchmarks"]["ebs"]["fake-ebs"]["ontology_score"]
    assert score["n"] == 1200 and score["value"] == pytest.approx((1.0 + 0.95 + 0.0) / 3)  # Iowa, Oregon, Maine
    result, report = run(project, "--cache", "off", "--ebs-suite", str(suite), "-p", "item_probe", "-n", "2", "--workers-as-given")
    result.stdout.fnmatch_lines(["*1200 passed*"])
    alive = _alive(project)
    assert set(alive) == {"gw0", "gw1"} and all(found[1] == 1200 for found in alive.values())
    # each worker collected every item and lets go of the ones it ran: the other worker's stay
    assert sum(found[0] for found in alive.values()) == 1200 and all(found[0] < 1200 for found in alive.values())
    assert report["evals_rows"]["rows"] == 1200
    project.makepyfile(test_other="def test_other():\n    pass\n")
    result, _ = run(project, "--cache", "off", "--ebs-suite", str(suite), "-p", "item_probe", "evals",
                    "test_other.py")
    result.stdout.fnmatch_lines(["*1201 passed*"])
    assert _alive(project) == {"controller": (1201, 1201, "['Function']")}


def test_the_heaps_free_pages_go_back_to_the_system_before_the_rows_come_in():
    # what a finished item leaves: blocks of the C heap freed between some that live on, so they stay resident
    import subprocess
    import sys

    script = (
        "from fieldeval.run.memory import trim_heap\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1]) // 1024\n"
        "blocks = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]\n"
        "alive = blocks[::100]\n"
        "del blocks\n"
        "before = rss()\n"
        "print(trim_heap(), before, rss())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    trimmed, before, after = out[0] == "True", int(out[1]), int(out[2])
    if not trimmed:
        pytest.skip("this C library has no malloc_trim")
    assert before - after > 100  # of the ~200 MB freed, most is given back (about 1% lives on)


def test_the_row_spool_gives_every_row_back_in_node_id_order_even_when_the_disk_fills(tmp_path, monkeypatch):
    import errno
    import os

    from fieldeval.run import spool as spool_module

    rows = [("ebs", f"t.py::t[c{n:03d}]", {"benchmark": "ebs", "n": n, "text": "tab\there \u2603"})
            for n in (5, 1, 9, 3, 7, 0, 8, 2, 6, 4)]
    real_write, writes = os.pwrite, []

    def write(fd, data, offset):  # the fourth line finds the disk full after half of it went out
        writes.append(data)
        if len(writes) == 4:
            real_write(fd, data[: len(data) // 2], offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data, offset)

    monkeypatch.setattr(spool_module.os, "pwrite", write)
    monkeypatch.setattr(spool_module, "PARSE_CHUNK", 3)  # rows parsed over several chunks, the last one short
    spool = spool_module.RowSpool(tmp_path)
    for bench, nodeid, row in rows:
        spool.add(bench, nodeid, json.dumps(row, separators=(",", ":")))  # as the record fixture writes it
    on_disk = (tmp_path / spool_module.SPOOL_FILE).read_text().splitlines()
    assert len(on_disk) == 3 and all(line.endswith("}") for line in on_disk)  # no half line left behind
    drained = spool.drain(dict)
    assert [r["n"] for r in drained["ebs"]] == list(range(10))
    assert [r["nodeid"] for r in drained["ebs"]] == sorted(nodeid for _, nodeid, _ in rows)
    assert all(row["nodeid"] == f"t.py::t[c{row['n']:03d}]" for row in drained["ebs"])  # each row its own id
    assert drained["ebs"][0]["text"] == "tab\there \u2603" and not spool and spool.drain(dict) == {}
    # the rows file's lines: the three rows on disk as their spool lines, the others encoded from the rows
    lines = list(spool.lines("ebs", drained["ebs"]))
    assert [type(line) for line in lines] == [bytes if row["n"] in (5, 1, 9) else dict for row in drained["ebs"]]
    assert [line if type(line) is bytes else line["n"] for line in lines] == [
        (json.dumps(row, separators=(",", ":")) + "\n").encode() if row["n"] in (5, 1, 9) else row["n"]
        for row in drained["ebs"]]  # the bytes json.dumps writes for the row, node id last
    assert list(spool.lines("ebs", drained["ebs"][1:])) == drained["ebs"][1:]  # rows it did not drain: as they are
    # the disk has room again: later rows go to the file after its whole lines, and are read from there
    for n in (12, 10, 11):
        spool.add("ebs", f"t.py::t[c{n:03d}]", json.dumps({"benchmark": "ebs", "n": n}, separators=(",", ":")))
    later = spool.drain(dict)["ebs"]
    assert [r["n"] for r in later] == [10, 11, 12]
    every = sorted(drained["ebs"] + later, key=lambda r: r["nodeid"])
    given = list(spool.lines("ebs", every))
    assert [line["n"] for line in given if type(line) is dict] == [0, 2, 3, 4, 6, 7, 8]  # the rows not on disk
    # the others as the file's bytes: rows 10 and 11, one after the other in the file and in node id order, as one
    # span; together, the bytes json.dumps writes for every row
    assert [line.count(b"\n") for line in given if type(line) is bytes] == [1, 1, 1, 2, 1]
    assert b"".join(line if type(line) is bytes else encoded(line) for line in given) == b"".join(map(encoded, every))
    spool.discard()  # the rows file is written: the spool's disk is free again, its rows are given as they are
    assert not (tmp_path / spool_module.SPOOL_FILE).exists() and list(spool.lines("ebs", every)) == every
    spool.add("ebs", "t.py::t[c013]", json.dumps({"benchmark": "ebs", "n": 13}))  # a late row: kept in memory
    assert [r["n"] for r in spool.drain(dict)["ebs"]] == [13] and not (tmp_path / spool_module.SPOOL_FILE).exists()


def _typed(value):
    """A JSON value with every number's type spelled out: 1, 1.0 and True are equal in Python, not in a row."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, value)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)
# what a fast parser may read otherwise or refuse: each is parsed beside plain rows, in a chunk of its own
_AWKWARD_TEXTS = ['{"a":1,"a":2.0}', "[123456789012345678901234567890, -9223372036854775809, 18446744073709551616]",
                  "[1e400, -1e400]", "[-0.0, 5e-324, 0.30000000000000004, 1E5, -0]", '"\\ud800 alone"',
                  "[NaN, -Infinity]", '{"t": "\\u00e9\\t\\ud83d\\ude00 \u2603"}', '"\udc80 read with surrogatepass"']


@settings(max_examples=300, deadline=None)
@given(st.lists(_JSON_VALUES, min_size=1, max_size=6), st.booleans())
def test_the_spools_parse_gives_what_json_loads_gives(values, ascii_only):
    from fieldeval.run.spool import parse_texts

    texts = [json.dumps(value, ensure_ascii=ascii_only) for value in values]
    assert _typed(parse_texts(texts)) == _typed([json.loads(text) for text in texts])


@pytest.mark.parametrize("awkward", _AWKWARD_TEXTS)
def test_the_spools_parse_reads_awkward_json_as_json_loads_does(awkward):
    from fieldeval.run.spool import parse_texts

    texts = ['{"n": 1, "x": 0.5}', awkward, '{"n": 2, "x": "two"}']
    assert _typed(parse_texts(texts)) == _typed([json.loads(text) for text in texts])


def encoded(row: dict) -> bytes:
    """A row's line of the rows file, written independently: compact JSON in ASCII."""
    return (json.dumps(row, separators=(",", ":")) + "\n").encode("ascii")


def _scored_rows(tiny_index, items: int) -> list[dict]:
    import dataclasses

    from scorers.ebs import score_ebs

    answers = [("soil_data", "cropland biome [ENVO:01000245]", "cropland biome [ENVO:01000245]"),
               ("soil_data", "forest biome [ENVO:01000174]", "coniferous forest biome [ENVO:01000196]"),
               ("air_data", "forest biome [ENVO:01000174]", "Forest, I would say."),
               ("soil_data", "forest biome [ENVO:01000174]", "biome [ENVO:00000428]")]
    scored = [dataclasses.asdict(score_ebs(a, i, index=tiny_index, allowed=None)) for _, i, a in answers]
    rows = []
    for n in range(items):
        template, ideal, answer = answers[(n * 7) % len(answers)]
        stratum = ideal.split(" [")[0]
        rows.append({"benchmark": "ebs", "model": "m", "case_id": f"case{n:05d}", "stratum": stratum,
                     "sampleData": template, "case_ideal": ideal, "response_text": answer,
                     **scored[(n * 7) % len(answers)], "response_time_s": 0.0, "prompt_tokens": 100,
                     "completion_tokens": 7, "est_cost_usd": None, "cached": n % 3 == 0,
                     "nodeid": f"evals/test_ebs.py::test_ebs[{stratum.replace(' ', '_')}-case{n:05d}-m]"})
    return rows


@pytest.mark.slow
def test_four_shards_of_20k_items_merge_to_the_unsharded_run_without_copying_rows(tmp_path, tiny_index):
    import sqlalchemy as sa

    from fieldeval.run.entries import benchmark_entries
    from fieldeval.errors import UsageError
    from fieldeval.store import declared_columns, open_store
    from fieldeval.store.groups import merge_group

    items, settings = 20_000, {"seed": 7, "resamples": 50, "models": {"ebs": ["m"]}}
    rows = _scored_rows(tiny_index, items)
    whole_entries = benchmark_entries({"ebs": rows}, {}, seed=7, resamples=50)
    size = items // 4
    with open_store(f"sqlite:///{tmp_path / 'store.db'}", columns=declared_columns()) as store:
        store.save_run({"run_id": "run_00000000", "started_at": "2026-06-01T10:00:00Z", "benchmarks": whole_entries},
                       {"ebs": rows}, {"settings": settings})
        for k in range(4):  # pytest-split's contiguous chunks, each aggregated on its own
            shard = rows[k * size:(k + 1) * size]
            store.save_run({"run_id": f"run_0000000{k + 1}", "started_at": "2026-06-01T10:00:00Z",
                            "benchmarks": benchmark_entries({"ebs": shard}, {}, seed=7, resamples=50)},
                           {"ebs": shard}, {"run_group": "g", "shard_index": k + 1, "shard_count": 4,
                                            "settings": settings, "settings_hash": "sha256:same"})
        merged = merge_group(store, "g", {})
        assert merged.payload["benchmarks"] == whole_entries  # every metric, interval, count and total
        assert merged.payload["cache"]["hits"] == sum(1 for r in rows if r["cached"])

        def content(run_id):
            return sorted((r["corpus_item_id"], r["raw_response"], json.dumps(r["metrics"], sort_keys=True),
                           json.dumps(r["row_extra"], sort_keys=True)) for r in store.responses(run_id))

        assert content(merged.run_id) == content("run_00000000")
        assert store.get_run(merged.run_id)["responses"] == items
        with store.engine.connect() as conn:  # the merged run stored no copy: the whole run's rows and the shards'
            stored = conn.execute(sa.select(sa.func.count()).select_from(store.tables.evaluation_responses)).scalar()
        assert stored == 2 * items
        with pytest.raises(UsageError, match=f"merged run {merged.run_id}"):
            store.delete_run("run_00000002")
        store.delete_run(merged.run_id)
        assert store.delete_run("run_00000002") == size  # once the merged run is gone, its shards may go


@pytest.mark.parametrize("block_cells", [1, 7 * 50, 10**12])
def test_bootstrap_in_blocks_gives_the_numbers_of_one_resample_matrix(monkeypatch, block_cells):
    """The resamples drawn a block at a time (bounded memory at 100k items) equal one (resamples x n) draw."""
    import numpy as np

    from fieldeval import stats
    from fieldeval.stats import _bootstrap

    data = np.random.default_rng(0).random(50)
    boot = data[stats.resample_indices(50, resamples=333, seed=11)].mean(axis=1)  # the whole matrix at once
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    monkeypatch.setattr(_bootstrap, "RESAMPLE_BLOCK_CELLS", block_cells)  # where the draws read it
    got = stats.mean_metric(list(data), resamples=333, seed=11)
    ci = [round(float(lo), 6), round(float(hi), 6)]  # independent items: both questions have one answer
    assert got == {"value": round(float(data.mean()), 6), "ci95": ci, "ci95_within": ci, "n": 50, "n_clusters": 50}
