"""Scale of an EBS eval run on the offline baseline: CPU, memory per process, collection, exit, file sizes.

Builds a suite of N cases (the pinned upstream suite's cases replicated, case ids
numbered on), then runs ``pytest evals/test_ebs.py --ebs-suite SUITE`` once per
point with the SQLite store and the response cache in a fresh folder (``-n 0``
unless ``--workers``), and with ``--shards K`` also K pytest-split shards of the
same suite into one store followed by ``fieldeval runs merge``. Prints, per run:
CPU seconds (user + system of the whole process tree) and per item, peak RSS of
every pytest process, collection time, exit time (last item's teardown to the
process's end), wall time, and the sizes of report.json, the per-item rows file,
the store and the cache.

Run: ``FIELDEVAL_DATA_DIR=../shared/data nice -n 10 .venv/bin/python benchmarks/bench_scale.py 10000
[50000 100000] [--workers 2] [--shards 4]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from fieldeval.data import fetch
from fieldeval.benchmarks.ebs.suite import SUITE_FILE

ROOT = Path(__file__).resolve().parents[1]


def write_suite(path: Path, items: int) -> None:
    """The upstream suite with its cases replicated to ``items`` cases."""
    with open(fetch(SUITE_FILE), encoding="utf-8") as handle:
        suite = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    cases = suite["cases"]
    suite["cases"] = [cases[i % len(cases)] for i in range(items)]
    with open(path, "w", encoding="utf-8") as handle:
        yaml.dump(suite, handle, Dumper=_PlainDumper, sort_keys=False, width=120, allow_unicode=True)


class _PlainDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    """Every case written out in full (no YAML anchors), as a generated suite of that size would be."""

    def ignore_aliases(self, data) -> bool:
        return True


def parse_once(folder: Path, suite: Path) -> float:
    """Seconds to parse the suite into its compact cached form and build the ontology index (with the audit's
    obsolete terms, from the same load), what the first process on a machine pays; the measured runs then start
    as on a machine that has run before."""
    env = {**os.environ, "FIELDEVAL_CACHE_DIR": str(folder / "cache-dir")}
    start = time.time()
    subprocess.run([sys.executable, "-c", "import sys; from fieldeval.benchmarks.ebs.suite import load_suite; "
                    "from fieldeval.ontology import load_index; load_suite(sys.argv[1]); load_index()", str(suite)],
                   env=env, check=True)
    return time.time() - start


def run_pytest(folder: Path, suite: Path, extra: list[str], label: str) -> dict:
    """One pytest session; its CPU, wall, probe lines and files."""
    probe = folder / f"probe-{label}.jsonl"
    probe.unlink(missing_ok=True)  # a kept folder's earlier run must not be read as this one
    env = {**os.environ, "FIELDEVAL_SCALE_PROBE": str(probe), "FIELDEVAL_CACHE_DIR": str(folder / "cache-dir"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])}
    reports = folder / f"reports-{label}"
    command = [sys.executable, "-m", "pytest", str(ROOT / "evals" / "test_ebs.py"), "-p", "scale_probe", "-q",
               "-p", "no:cacheprovider", "--ebs-suite", str(suite), "--store", str(folder / "store.db"),
               "--cache-path", str(folder / "responses.sqlite"), "--reports-dir", str(reports),
               "--eval-report", str(reports / "report.json"), *extra]
    before = os.times()
    start = time.time()
    result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    end = time.time()
    after = os.times()
    if result.returncode not in (0, 1):
        print(result.stdout[-3000:])
        raise SystemExit(f"pytest {label} exited {result.returncode}")
    lines = [json.loads(line) for line in probe.read_text().splitlines()] if probe.is_file() else []
    controller = next((line for line in lines if line["role"] == "controller"), {})
    runs = sorted((reports / "runs").glob("*/")) if (reports / "runs").is_dir() else []
    run_dir = runs[-1] if runs else reports
    return {
        "label": label,
        "items_run": controller.get("items", 0),
        "cpu_s": after.children_user - before.children_user + after.children_system - before.children_system,
        "wall_s": end - start,
        "collect_s": max((line["collected"] - line["configured"] for line in lines if "collected" in line),
                         default=float("nan")),
        "exit_s": end - controller["last_item"] if "last_item" in controller else float("nan"),
        "exit_phases": {name: controller[b] - controller[a] for name, a, b in [
            ("sessionfinish", "sessionfinish", "sessionfinished"), ("summary", "terminal_summary", "unconfigured"),
            ("last item to sessionfinish", "last_item", "sessionfinish")] if a in controller and b in controller}
        | ({"unconfigure to exit": end - controller["unconfigured"]} if "unconfigured" in controller else {})
        | ({"CPU last item to unconfigure": controller["cpu_unconfigured"] - controller["cpu_last_item"]}
           if "cpu_last_item" in controller else {}),
        "rss_mb": {line["role"]: line["peak_rss_mb"] for line in lines},
        "rss_phases": {line["role"]: (line.get("rss_collected_mb", 0.0), line.get("rss_last_item_mb", 0.0))
                       for line in lines},
        "report_mb": _mb(run_dir / "report.json"),
        "rows_mb": sum(_mb(path) for path in run_dir.glob("rows*")),
        "output": result.stdout,
    }


def _mb(path: Path) -> float:
    return path.stat().st_size / 2**20 if path.is_file() else 0.0


def merge(folder: Path, group: str) -> float:
    """Seconds of ``fieldeval runs merge GROUP``."""
    start = time.time()
    subprocess.run([sys.executable, "-m", "fieldeval.cli", "runs", "merge", group, "--store", str(folder / "store.db")],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.time() - start


def show(items: int, run: dict) -> None:
    rss = ", ".join(f"{role} {mb:.0f} (collected {run['rss_phases'][role][0]:.0f}, last item "
                    f"{run['rss_phases'][role][1]:.0f})" for role, mb in sorted(run["rss_mb"].items()))
    ran = run["items_run"] or items
    print(f"{items:>7} {run['label']:<12} {ran:>7} items  cpu {run['cpu_s']:7.1f} s ({run['cpu_s'] / ran * 1000:5.2f} ms/item)  "
          f"wall {run['wall_s']:6.1f} s  collect {run['collect_s']:5.1f} s  exit {run['exit_s']:4.1f} s  "
          f"report {run['report_mb']:5.2f} MB  rows {run['rows_mb']:5.2f} MB  peak RSS MB: {rss}")
    print(f"{'':>7} exit phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in run["exit_phases"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("items", type=int, nargs="*", default=[10_000], help="suite sizes (default: 10000)")
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (default: 0)")
    parser.add_argument("--shards", type=int, default=0, help="also run K pytest-split shards and merge them")
    parser.add_argument("--keep", metavar="DIR", help="keep the run folders here instead of a temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.keep or tmp)
        for items in args.items:
            folder = base / f"scale-{items}"
            folder.mkdir(parents=True, exist_ok=True)
            for name in ("store.db", "responses.sqlite"):  # a kept folder starts each point with a fresh store
                (folder / name).unlink(missing_ok=True)
            for reports in folder.glob("reports-*"):
                shutil.rmtree(reports)
            suite = folder / "suite.yaml"
            write_suite(suite, items)
            print(f"{items:>7} suite parsed into its compact form and ontology index built (once per machine) in "
                  f"{parse_once(folder, suite):.1f} s")
            run = run_pytest(folder, suite, ["-n", str(args.workers)], f"n{args.workers}")
            show(items, run)
            print(f"{'':>7} store {_mb(folder / 'store.db'):.1f} MB, cache {_mb(folder / 'responses.sqlite'):.1f} MB, "
                  f"suite {_mb(suite):.1f} MB")
            if args.shards:
                group = f"scale{items}"
                for k in range(1, args.shards + 1):
                    shard = run_pytest(folder, suite, ["-n", "0", "--splits", str(args.shards), "--group", str(k),
                                                       "--run-group", group], f"shard{k}")
                    show(items, shard)
                print(f"{items:>7} merge of {args.shards} shards: {merge(folder, group):.1f} s")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
