"""Eval modules are found by their marker, whatever their file is called, with and without xdist; a pytest
session that names no eval module imports none of the engine (issue 36)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fieldeval.run.discover import benchmarks_marked, marked_modules
from tests.ebs_project import ARGS, make_project

HEAVY = ("numpy", "sqlalchemy", "pandas", "llm", "pydantic", "oaklib", "sklearn", "fieldeval.run.session",
         "fieldeval.calls.client", "fieldeval.store.core")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester)


@pytest.mark.parametrize("workers", [(), ("-n", "2", "--workers-as-given")], ids=["one-process", "xdist"])
def test_an_eval_module_of_any_name_gets_its_report_rows_and_gates(project, workers):
    evals = project.path / "evals"
    shutil.move(evals / "test_ebs.py", evals / "test_biome_v2.py")
    result = project.runpytest_subprocess("evals/test_biome_v2.py", *ARGS[1:], "--store", "none",
                                          "--fail-under", "ebs.exact_match=0.99", *workers)
    out = result.stdout.str()
    assert result.ret == 1, out  # the provider's error fails one item and the gate fails; the run is reported
    report = json.loads((project.path / "reports" / "report.json").read_text())
    assert report["evals"]["benchmarks"]["ebs"]["fake-ebs"]["exact_match"]["n"] == 3  # Atlantis errored
    rows_file = project.path / "reports" / report["evals_rows"]["path"]
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert len(rows) == 3
    assert {r["benchmark"] for r in rows} == {"ebs"}
    gates = [g for g in report["evals"]["gates"] if g["metric"] == "ebs.exact_match"]
    assert [(g["model"], g["passed"]) for g in gates] == [("fake-ebs", False)]
    assert "gate ebs.exact_match for fake-ebs" in out


def test_a_folder_is_searched_for_marked_modules(project):
    evals = project.path / "evals"
    shutil.move(evals / "test_ebs.py", evals / "test_biomes.py")
    result = project.runpytest_subprocess("evals", *ARGS[1:], "--store", "none")
    assert (project.path / "reports" / "report.json").is_file(), result.stdout.str()


def test_a_benchmark_named_by_an_expression_is_one_line_and_exit_2(project):
    module = project.path / "evals" / "test_ebs.py"
    text = module.read_text()
    assert 'benchmark="ebs"' in text
    module.write_text(text.replace('benchmark="ebs"', 'benchmark="e" + "bs"'))
    result = project.runpytest_subprocess(*ARGS, "--store", "none")
    said = [line for line in result.stdout.lines + result.stderr.lines if line.strip()]
    assert result.ret == 2, "\n".join(said)
    assert len(said) == 1 and "evals/test_ebs.py" in said[0] and 'benchmark="ibf"' in said[0]


def test_a_session_without_evals_imports_none_of_the_engine(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    probe = ("import sys, pytest\n"
             "code = pytest.main(['-q', '-p', 'no:cacheprovider'])\n"
             f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
             "raise SystemExit(code)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HEAVY []" in done.stdout, done.stdout
    assert "fieldeval" in subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=tmp_path,
                                         capture_output=True, text=True, check=True).stdout  # the plugin was loaded


# --- reading the marker from the source ------------------------------------------------------------------

@pytest.mark.parametrize(("source", "expected"), [
    ('import pytest\npytestmark = pytest.mark.fieldeval(benchmark="ibf", solver=None)\n', ("ibf",)),
    ('import pytest\npytestmark = [pytest.mark.fieldeval(benchmark="ebs"), pytest.mark.slow]\n', ("ebs",)),
    ('import pytest\n@pytest.mark.fieldeval(benchmark="microbiorel")\ndef test_x(case): ...\n', ("microbiorel",)),
    ('from pytest import mark\n@mark.fieldeval(benchmark="ibf")\ndef test_x(): ...\n', ("ibf",)),
    ('import pytest\nNAME = "ebs"\npytestmark = pytest.mark.fieldeval(benchmark=NAME)\n', ("ebs",)),
    ('import pytest\n@pytest.mark.fieldeval(benchmark="ibf")\ndef test_a(): ...\n'
     '@pytest.mark.fieldeval(benchmark="ebs")\ndef test_b(): ...\n', ("ibf", "ebs")),
    ('import pytest\npytestmark = pytest.mark.fieldeval(benchmark=pick())\n', ("",)),
    # the marker's text in a string or a comment is not a marker
    ('SOURCE = \'pytestmark = pytest.mark.fieldeval(benchmark="ibf")\'\n# pytest.mark.fieldeval(benchmark="x")\n', ()),
    ('def test_x():\n    assert fieldeval(1) == 2\n', ()),
    ("pytest.mark.fieldeval(benchmark='ibf'\n", ()),  # a syntax error: pytest reports it when it collects
], ids=["pytestmark", "list", "decorator", "from-import", "constant", "two", "expression", "string", "other-call",
        "broken"])
def test_the_benchmarks_a_module_marks(tmp_path, source, expected):
    module = tmp_path / "test_m.py"
    module.write_text(source)
    assert benchmarks_marked(module) == expected


def test_modules_are_found_as_pytest_finds_them(tmp_path):
    marked = 'import pytest\npytestmark = pytest.mark.fieldeval(benchmark="ibf")\n'
    for path in ["evals/test_a.py", "evals/b_test.py", "evals/helper.py", "node_modules/test_c.py",
                 ".venv/lib/test_d.py", "env/test_e.py", "deep/er/test_f.py", "build/test_g.py"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(marked)
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    found = marked_modules([tmp_path], python_files=["test_*.py", "*_test.py"],
                           norecursedirs=["*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv",
                                          "{arch}"])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in found) == [
        "deep/er/test_f.py", "evals/b_test.py", "evals/test_a.py"]
    named = marked_modules([tmp_path / "evals" / "helper.py"], python_files=["test_*.py"], norecursedirs=[])
    assert list(named.values()) == [("ibf",)]  # a file named on the command line is read whatever its name


def test_the_engine_s_files_are_not_found_by_name_any_more(tmp_path):
    # a module called test_ibf.py without the marker is not an eval module
    (tmp_path / "test_ibf.py").write_text("def test_plain():\n    assert True\n")
    assert marked_modules([tmp_path], python_files=["test_*.py"], norecursedirs=[]) == {}
    assert Path(__file__).name not in {p.name for p in marked_modules([Path(__file__).parent],
                                                                       python_files=["test_*.py"], norecursedirs=[])}


PROBE = '''
import json, os, sys

def pytest_unconfigure(config):
    who = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"
    with open(f"imported-{who}.json", "w") as out:
        json.dump("hypothesis" in sys.modules, out)
'''


@pytest.mark.parametrize("workers", [(), ("-n", "2", "--workers-as-given")], ids=["one-process", "xdist"])
def test_a_session_of_eval_items_only_never_imports_hypothesis(project, workers):
    # Hypothesis's pytest plugin imports the whole library in its terminal summary (about 1.5 s of CPU per
    # process, every xdist worker included) to report on no property test
    (project.path / "probe.py").write_text(PROBE)
    result = project.runpytest_subprocess(*ARGS, "--store", "none", "-p", "probe", *workers)
    assert result.ret == 1, result.stdout.str()  # the provider's error fails one item
    seen = {path.stem.removeprefix("imported-"): json.loads(path.read_text())
            for path in project.path.glob("imported-*.json")}
    expected = {"controller", "gw0", "gw1"} if workers else {"controller"}
    assert seen == dict.fromkeys(expected, False)


def test_a_fifo_binary_or_empty_module_is_no_eval_module_and_never_blocks(tmp_path):
    import os

    os.mkfifo(tmp_path / "test_fifo.py")  # reading it would wait for a writer forever
    (tmp_path / "test_binary.py").write_bytes(b"\x00\xff\xfe fieldeval( benchmark=\x00")
    (tmp_path / "test_empty.py").write_bytes(b"")
    (tmp_path / "test_bom.py").write_bytes(b'\xef\xbb\xbfimport pytest\npytestmark = pytest.mark.fieldeval(benchmark="ibf")\n')
    found = marked_modules([tmp_path], python_files=["test_*.py"], norecursedirs=[])
    assert {p.name: names for p, names in found.items()} == {"test_bom.py": ("ibf",)}


@pytest.mark.slow  # collects every installed benchmark in two workers
def test_the_installed_evals_by_pyargs_under_xdist_plan_their_progress(tmp_path):
    # the README's CI recipe (pytest --pyargs fieldeval.bundled.evals --rootdir . -n N): node ids then name the
    # module by its file alone, and the controller must still know which benchmark each collected item is
    progress = tmp_path / "progress.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "fieldeval.bundled.evals", "--rootdir", ".",
                           "-n", "2", "--workers-as-given", "--store", "none", "-q", "-p", "no:cacheprovider", "-k", "ibf_0001 or ibf_0002",
                           "--progress-file", str(progress)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    written = json.loads(progress.read_text())
    assert (written["total"], written["done"]) == (2, 2)
    assert [(m["benchmark"], m["model"], m["total"]) for m in written["per_model"]] == [("ibf", "ibf-floor", 2)]
