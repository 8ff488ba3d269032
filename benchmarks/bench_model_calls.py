"""Real-model runs at speed: latency-bound wall time and harness overhead, printed as ratios.

(a) 100 EBS items against a fake model that sleeps L seconds, ``--concurrency 32``:
    the part of the wall time due to latency (run at L = 1 s minus the same run at
    L = 0) against the ideal ceil(N/C)*L = 4 s, with ``-n 0`` and ``-n 2``; and
    against calling the model one item after another (N*L = 100 s).
(b) The cost per item of the whole harness (pytest items, the client, the
    cache, the report) with an instant model, against a bare Python loop over
    the same scorer: marginal seconds per item between runs of 100 and 1,000 items.

Run: ``.venv/bin/python benchmarks/bench_model_calls.py`` (about two minutes).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.calls_project import FAKES  # noqa: E402
from tests.conftest import TINY_ENUMS, TINY_SELECTOR  # noqa: E402
from tests.ebs_project import _case  # noqa: E402

N, C = 100, 32


def project(cases: int) -> Path:
    """A temporary EBS project with the fake models and ``cases`` cases."""
    folder = Path(tempfile.mkdtemp(prefix="bench-calls-"))
    (folder / "conftest.py").write_text(FAKES)
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "evals").mkdir()
    (folder / "evals" / "test_ebs.py").write_text((ROOT / "evals" / "test_ebs.py").read_text())
    suite = {"name": "bench", "template": "predict_ebs",
             "templates": {"predict_ebs": {"system": "You are an expert.", "prompt": "{input}"}},
             "cases": [_case(f"Iowa-{i:05d}", "soil_data", "cropland biome [ENVO:01000245]") for i in range(cases)]}
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite))
    return folder


def run(folder: Path, *, delay: float, workers: str, concurrency: int = C) -> float:
    """Wall seconds of one ``pytest evals`` run."""
    env = {**os.environ, "FAKE_DELAY": str(delay)}
    args = [sys.executable, "-m", "pytest", "evals", "--model", "fake-slow", "--ebs-suite", "suite.yaml",
            "--ontology", TINY_SELECTOR, "--enum-dir", str(TINY_ENUMS), "--cache", "off", "--store", "none",
            "-p", "no:cacheprovider", "-q", "-n", workers, "--concurrency", str(concurrency)]
    start = time.perf_counter()
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"run failed ({done.returncode}):\n{done.stdout[-2000:]}")
    return seconds


def latency_bound() -> None:
    folder = project(N)
    ideal = math.ceil(N / C) * 1.0
    print(f"(a) {N} EBS items, fake model latency L, --concurrency {C}; ideal ceil(N/C)*L = {ideal:.0f} s")
    for workers in ("0", "2"):
        fast = min(run(folder, delay=0.0, workers=workers) for _ in range(2))
        slow = run(folder, delay=1.0, workers=workers)
        part = slow - fast
        print(f"  -n {workers}: wall {slow:.1f} s at L=1, {fast:.1f} s at L=0; latency part {part:.2f} s = "
              f"{part / ideal:.2f}x ideal (target <= 1.30x); one call after another: {N * 1.0:.0f} s = "
              f"{N * 1.0 / part:.1f}x slower")


def overhead() -> None:
    from fieldeval.benchmarks.ebs.enums import load_enums
    from fieldeval.ontology import load_index
    from scorers.ebs import score_ebs

    small, large = project(100), project(1000)
    t_small = min(run(small, delay=0.0, workers="0") for _ in range(2))
    t_large = min(run(large, delay=0.0, workers="0") for _ in range(2))
    per_item = (t_large - t_small) / 900
    index, enums = load_index(TINY_SELECTOR), load_enums(TINY_ENUMS)
    answer = "cropland biome [ENVO:01000245]"
    start = time.perf_counter()
    for _ in range(1000):
        score_ebs(answer, "cropland biome [ENVO:01000245]", index=index, allowed=enums.get("soil_data"))
    bare = (time.perf_counter() - start) / 1000
    print(f"(b) harness cost per item with an instant model: {per_item * 1e3:.2f} ms "
          f"(runs of 100 and 1,000 items: {t_small:.1f} s, {t_large:.1f} s); bare loop over the scorer "
          f"{bare * 1e6:.1f} us/item; harness/bare = {per_item / bare:.0f}x")


if __name__ == "__main__":
    latency_bound()
    overhead()
