"""fieldeval outside its checkout: a third-party benchmark plugs in, and a wheel runs on its shipped data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY_ENUMS, TINY_OBO

EXAMPLE = ROOT / "docs" / "examples" / "tinybench"


def _pip(*args: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "-q", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def _run(args: list[str], *, cwd: Path, env: dict[str, str], python: str = sys.executable):
    return subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_a_third_party_benchmark_installs_and_runs_with_pytest_and_fieldeval(tmp_path):
    project = tmp_path / "tinybench"
    shutil.copytree(EXAMPLE, project)
    _pip("install", "--no-deps", "--target", str(tmp_path / "site"), str(project), cwd=tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    result = _run(["-m", "pytest", "evals", "--store", "none", "--cache", "off", "-p", "no:cacheprovider",
                   "--arith-cases", "10"], cwd=project, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((project / "reports" / "report.json").read_text())
    accuracy = report["evals"]["benchmarks"]["arith"]["arith-baseline"]["accuracy"]
    assert (accuracy["value"], accuracy["n"]) == (0.9, 10)  # the baseline gets 7 + 15 wrong
    assert "test_arith[[]7+15-arith-baseline[]]" in result.stdout or "arith" in result.stdout
    scored = _run(["-m", "fieldeval.cli", "score", "arith", "reports/arith/answers.tsv"], cwd=project, env=env)
    assert scored.returncode == 0 and "arith accuracy 0.900 (9/10)" in scored.stdout
    helped = _run(["-m", "pytest", "--help"], cwd=project, env=env)
    assert "fieldeval arith: add two numbers, exact match" in helped.stdout and "--arith-cases" in helped.stdout


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_a_wheel_in_a_fresh_venv_scores_and_runs_its_bundled_evals(tmp_path):
    _pip("wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(ROOT), cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("fieldeval-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(_run(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path,
                     env=dict(os.environ), python=python).stdout.strip())
    # the dependencies come from this environment; fieldeval itself only from the wheel
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _pip("install", "--no-deps", "--target", str(site), str(wheel), cwd=tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run(["-c", "import fieldeval; print(fieldeval.__file__)"], cwd=work, env=env, python=python)
    assert str(site) in where.stdout, where.stdout + where.stderr

    (work / "results.tsv").write_text("model\tcase_ideal\tresponse_text\tsampleData\n"
                                      "m\tforest biome [ENVO:01000174]\tforest biome [ENVO:01000174]\tsoil_data\n")
    ebs = _run(["-m", "fieldeval.cli", "score", "ebs", "results.tsv", "--ontology", f"simpleobo:{TINY_OBO}",
                "--enum-dir", str(TINY_ENUMS)], cwd=work, env=env, python=python)
    assert ebs.returncode == 0 and "1.000  m" in ebs.stdout, ebs.stderr
    (work / "re.tsv").write_text("gold\tresponse_text\nNone\tNone\n")
    assert _run(["-m", "fieldeval.cli", "score", "re", "re.tsv", "--json"], cwd=work, env=env,
                python=python).returncode == 0
    (work / "ibf.tsv").write_text("item_id\thazard_recognition\timpact_reasoning\tuncertainty_handling\t"
                                  "action_relevance\tgeographic_specificity\nx\t2\t2\t2\t2\t2\n")
    ibf = _run(["-m", "fieldeval.cli", "score", "ibf", "ibf.tsv", "--json"], cwd=work, env=env, python=python)
    assert ibf.returncode == 0 and json.loads(ibf.stdout)["threshold_pass_rate"] == 1.0
    evals = _run(["-m", "pytest", "--pyargs", "fieldeval.bundled.evals.test_ibf", "--rootdir", ".",
                  "--store", "reports/fieldeval.db", "-q", "-p", "no:cacheprovider"], cwd=work, env=env, python=python)
    assert evals.returncode == 0, evals.stdout[-3000:] + evals.stderr[-2000:]
    assert "65 passed" in evals.stdout
    assert (work / "reports" / "report.json").is_file()
    runs = _run(["-m", "fieldeval.cli", "runs", "list", "--json"], cwd=work,
                env={**env, "FIELDEVAL_STORE": str(work / "reports" / "fieldeval.db")}, python=python)
    assert runs.returncode == 0 and json.loads(runs.stdout)[0]["benchmarks"] == ["ibf"]
