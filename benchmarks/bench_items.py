"""Reading a big run's items: a page, a deep page, a filtered sorted page, one item, ``runs items --limit 50``.

Builds (once, cached under the temporary folder) a SQLite store holding an EBS run of N distinct items
(default 100,000: distinct case ids and responses of 50-200 characters, scores drawn per item, ~1,000
studies as clusters, the prompt each item was sent) plus a few errored items, after an earlier run of
N / 10 items, each saved with ``Store.save_run`` as a session saves a run. Then times, median of ``--repeats``:

- (a) ``items_page(limit=50)``, the first page; (b) the page at offset N - 50;
- (c) ``items_page(where="ontology_score < 0.5", sort="-ontology_score", limit=50)``;
- (d) ``item_whole`` of the middle case id;
- (e) ``fieldeval runs items RUN --limit 50`` as a subprocess (wall time, start-up included) and in
  process (``fieldeval.cli.main``, the table written to a string);
- (f) the obvious way: the run's responses read whole with ``pandas.read_sql``, then 50 rows or one row taken;

and prints each in milliseconds and as a ratio against (f). Each read's statements on
``evaluation_responses`` are put through ``EXPLAIN QUERY PLAN`` (PostgreSQL: ``EXPLAIN``); the script exits 1
when (a), (c) or (d) scans the table instead of searching it through an index. Note that a search on
``run_id`` alone still visits every row of the run: the plan lines say which index, and on what.

Run: ``FIELDEVAL_DATA_DIR=../shared/data nice -n 10 .venv/bin/python benchmarks/bench_items.py
[--items 100000] [--repeats 7] [--postgres postgresql://fieldeval:fieldeval@127.0.0.1:5432/fieldeval]``
(with ``--postgres``, the run is written to a fresh schema there, dropped afterwards; skipped when the
server cannot be reached).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pandas as pd
import sqlalchemy as sa

from fieldeval.benchmarks.ebs.suite import SYSTEM_PROMPT
from fieldeval.cli import main as cli_main
from fieldeval.run.entries import benchmark_entries
from fieldeval.store import declared_columns, open_store
from fieldeval.store.items import item_whole, items_page

ROOT = Path(__file__).resolve().parents[1]
MODEL = "gpt-4o-mini"
ERRORED = 7
CACHE = Path(tempfile.gettempdir()) / "fieldeval-bench-items"
FORMAT = 2  # bump when the rows change: a cached store of another format is rebuilt
BIOMES = [("terrestrial biome", "ENVO:00000446"), ("forest biome", "ENVO:01000174"),
          ("coniferous forest biome", "ENVO:01000196"), ("temperate coniferous forest biome", "ENVO:01000211"),
          ("cropland biome", "ENVO:01000245"), ("marine biome", "ENVO:00000447"), ("aquatic biome", "ENVO:00002030"),
          ("grassland biome", "ENVO:01000177"), ("desert biome", "ENVO:01000179"), ("tundra biome", "ENVO:01000180"),
          ("freshwater lake biome", "ENVO:01000252"), ("mangrove biome", "ENVO:01000181")]
TEMPLATES = ["soil_data", "water_data", "sediment_data", "plant_associated_data", "air_data"]
PLACES = ["Harvard Forest, Massachusetts", "Konza Prairie, Kansas", "Lake Mendota, Wisconsin", "Barrow, Alaska",
          "East River, Colorado", "Jornada Basin, New Mexico", "Everglades, Florida", "Hubbard Brook, New Hampshire"]
REASONS = ["The site description and soil horizon point to", "Given the sampled depth and vegetation, the best fit is",
           "The collection site is", "Based on the coordinates and habitat notes:", ""]
RELATIONSHIPS = ["exact", "descendant", "ancestor", "unrelated"]


def ebs_rows(items: int, seed: int = 20261130) -> tuple[list[dict], list[dict]]:
    """``items`` scored EBS rows, every one distinct, and ``ERRORED`` errors, as a session records them."""
    rng = random.Random(seed)
    rows, errors = [], []
    for i in range(items + ERRORED):
        case_id, study = f"nmdc:bsm-11-{i:07d}", f"nmdc:sty-11-{rng.randrange(1000):05d}"
        ideal_label, ideal_curie = rng.choice(BIOMES)
        template, place = rng.choice(TEMPLATES), rng.choice(PLACES)
        nodeid = f"evals/test_ebs.py::test_ebs[{case_id}-{MODEL}]"
        if i >= items:
            errors.append({"benchmark": "ebs", "model": MODEL, "item": nodeid, "case_id": case_id,
                           "error_class": "APITimeoutError", "message": f"Request timed out after 60 s (item {i})"})
            continue
        relationship = rng.choices(RELATIONSHIPS, weights=[5, 2, 2, 1])[0]
        hops = 0 if relationship == "exact" else None if relationship == "unrelated" else rng.randint(1, 4)
        pred_label, pred_curie = (ideal_label, ideal_curie) if relationship == "exact" else rng.choice(BIOMES)
        parsed = rng.random() > 0.03
        hierarchy = {"exact": 1.0, "descendant": max(0.0, 1 - 0.10 * (hops or 0)),
                     "ancestor": max(0.0, 1 - 0.15 * (hops or 0)), "unrelated": 0.0}[relationship] if parsed else 0.0
        in_enum = rng.random() < 0.8 if parsed else None
        enum_score = 1.0 if in_enum else 0.0
        label_valid = rng.random() < 0.9 if parsed else None
        score = 0.1 * parsed + 0.1 * bool(label_valid) + 0.5 * hierarchy + 0.3 * enum_score if parsed else 0.0
        answer = f"{pred_label} [{pred_curie}]"
        response = f"{rng.choice(REASONS)} {answer} (sample {case_id}, {place}, {rng.randint(0, 300)} cm)".strip()
        prompt = (f"Sample name: {case_id}\nStudy: {study}\nTemplate: {template}\nGeographic location: {place}\n"
                  f"Depth: {rng.randint(0, 300)} cm\nenv_local_scale: {rng.choice(BIOMES)[0]}\n")
        rows.append({
            "benchmark": "ebs", "model": MODEL, "case_id": case_id, "cluster": study, "stratum": ideal_label,
            "sampleData": template, "case_ideal": f"{ideal_label} [{ideal_curie}]", "response_text": response,
            "ontology_version": "envo@2025-05-14", "parse_success": parsed,
            "pred_curie": pred_curie if parsed else None, "pred_label": pred_label if parsed else None,
            "truth_curie": ideal_curie, "truth_label": ideal_label, "curie_label_valid": label_valid,
            "exact_match": relationship == "exact" and parsed, "relationship": relationship if parsed else None,
            "hop_distance": hops if parsed else None, "in_template_enum": in_enum, "hierarchy_score": hierarchy,
            "enum_score": enum_score, "ontology_score": round(score + rng.uniform(-0.02, 0.02) * parsed, 6),
            "lenient_curie": pred_curie if parsed else None, "response_time_s": round(rng.uniform(0.3, 4.0), 3),
            "prompt_tokens": 180 + rng.randrange(60), "completion_tokens": 8 + rng.randrange(40),
            "est_cost_usd": round(rng.uniform(2e-5, 9e-5), 8), "cached": False, "nodeid": nodeid,
            "system": SYSTEM_PROMPT, "prompt": prompt,
        })
    return rows, errors


def save_run(url: str, items: int, seed: int = 20261130) -> str:
    """Store a run of ``items`` items in the store at ``url`` through ``Store.save_run``; its run id."""
    rows, errors = ebs_rows(items, seed)
    run_id = f"run_{secrets.token_hex(4)}"
    entries = benchmark_entries({"ebs": rows}, {("ebs", MODEL): len(errors)}, seed=1, resamples=10)
    payload = {"run_id": run_id, "started_at": "2026-06-01T10:00:00Z", "ontology_version": "envo@2025-05-14",
               "benchmarks": entries}
    with open_store(url, columns=declared_columns()) as store:
        store.save_run(payload, {"ebs": rows}, {"errors": errors, "label": f"bench_items {items}",
                                                "items_planned": items + len(errors), "items_done": items + len(errors),
                                                "items_errored": len(errors)})
    return run_id


def save_runs(url: str, items: int) -> str:
    """An earlier run of a tenth of the items, then the measured run of ``items`` items: the measured run is not
    the whole table, as in a store that has been used. The measured run's id."""
    save_run(url, max(1, items // 10), seed=1)
    return save_run(url, items)


def cached_sqlite(items: int) -> tuple[str, str, float | None]:
    """The cached SQLite store of ``save_runs`` (built when missing): its URL, the measured run's id and the
    seconds it took to build (None: cached)."""
    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"items-{items}-f{FORMAT}.db"
    if path.is_file():
        with open_store(f"sqlite:///{path}", columns=declared_columns(), create=False) as store:
            runs = [run.run_id for run in store.list_runs() if run.total_items == items + ERRORED]
        if len(runs) == 1:
            return f"sqlite:///{path}", runs[0], None
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    started = time.perf_counter()
    run_id = save_runs(f"sqlite:///{partial}", items)
    partial.rename(path)
    return f"sqlite:///{path}", run_id, time.perf_counter() - started


def median_ms(read: Callable[[], object], repeats: int) -> float:
    """The median milliseconds of ``read()`` over ``repeats`` calls, after one call that is not counted."""
    read()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def whole_run(store, run_id: str) -> pd.DataFrame:
    """The obvious way: every response row of the run, read into a frame."""
    r = store.tables.evaluation_responses
    with store.engine.connect() as conn:
        return pd.read_sql(sa.select(r).where(r.c.run_id == run_id), conn)


def cli_in_process(argv: list[str]) -> None:
    """``fieldeval ARGV`` in this process, its table written to a string."""
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(argv) == 0


def cli_subprocess(argv: list[str]) -> None:
    """``fieldeval ARGV`` as a new process, as a user runs it."""
    subprocess.run([sys.executable, "-m", "fieldeval.cli", *argv], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def statements(engine: sa.Engine) -> Iterator[list[tuple[str, object]]]:
    """Every statement (and its parameters) ``engine`` runs inside the block."""
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def plans(store, read: Callable[[], object]) -> list[tuple[str, list[str]]]:
    """The query plan of each statement of ``read()`` that reads ``evaluation_responses``: (SQL, plan lines)."""
    with statements(store.engine) as seen:
        read()
    out = []
    with store.engine.connect() as conn:
        for statement, parameters in seen:
            if "evaluation_responses" not in statement:
                continue
            if conn.dialect.name == "sqlite":
                found = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
                lines = [row[-1] for row in found]
            else:
                found = conn.exec_driver_sql("EXPLAIN (COSTS OFF) " + statement, parameters).all()
                lines = [row[0].strip().removeprefix("-> ").strip() for row in found
                         if " Scan " in row[0] or row[0].lstrip().startswith(("Index Cond", "Filter", "Sort"))]
            out.append((" ".join(statement.split()), lines))
    return out


def reach(lines: list[str]) -> str:
    """What one statement's plan reads of ``evaluation_responses``, in words (SQLite's or PostgreSQL's plan)."""
    table = [line for line in lines if "evaluation_responses" in line]
    if any(line.startswith("SCAN evaluation_responses") or "Seq Scan on evaluation_responses" in line
           for line in table):
        return "FULL SCAN of the table"
    run_only = [line for line in table if "(run_id=?)" in line]  # SQLite: the index narrows to the run, no further
    if any(line.startswith("Filter: (run_id = ") for line in lines):  # PostgreSQL: an index walked in its order
        return "an index walked in order, each row's run checked, until the page is full"
    if any("Index Cond: (run_id = " in line and "AND" not in line for line in lines):  # PostgreSQL
        run_only = [line for line in table if " Scan " in line]
    if run_only:
        covering = all("COVERING INDEX" in line or "Index Only Scan" in line for line in run_only)
        return "every entry of the run, index only" if covering else "every row of the run, found through its index"
    return "only the rows it returns, through an index"


def measure(url: str, run_id: str, items: int, repeats: int) -> bool:
    """Print the figures and plans for the run in the store at ``url``; False when a checked read scans the table."""
    with open_store(url, columns=declared_columns(), create=False) as store:
        middle = items_page(store, run_id, limit=1, offset=items // 2)["items"][0]["case_id"]
        reads: dict[str, tuple[Callable[[], object], bool]] = {
            "(a) first page of 50": (lambda: items_page(store, run_id, limit=50), True),
            f"(b) page at offset {items - 50:,}": (lambda: items_page(store, run_id, limit=50, offset=items - 50),
                                                    False),
            "(c) where ontology_score < 0.5, sort -ontology_score, 50": (
                lambda: items_page(store, run_id, where="ontology_score < 0.5", sort="-ontology_score", limit=50), True),
            f"(d) item_whole {middle}": (lambda: item_whole(store, run_id, middle), True),
        }
        page = items_page(store, run_id, limit=50)
        assert page["total"] == items + ERRORED and len(page["items"]) == 50
        frame = whole_run(store, run_id)
        assert len(frame) == items and frame.corpus_item_id.is_unique
        assert item_whole(store, run_id, middle)["response_text"] == \
            frame.loc[frame.corpus_item_id == middle, "raw_response"].iloc[0]
        obvious_page = median_ms(lambda: whole_run(store, run_id).head(50), repeats)
        obvious_one = median_ms(lambda: whole_run(store, run_id).loc[lambda f: f.corpus_item_id == middle].iloc[0],
                                repeats)
        figures = {label: median_ms(read, repeats) for label, (read, _) in reads.items()}
        argv = ["runs", "items", run_id, "--limit", "50", "--store", url]
        figures["(e) runs items --limit 50, in process"] = median_ms(lambda: cli_in_process(argv), repeats)
        figures["(e) runs items --limit 50, subprocess"] = median_ms(lambda: cli_subprocess(argv), repeats)
        figures["(e) of which start-up: fieldeval --help, subprocess"] = median_ms(
            lambda: cli_subprocess(["--help"]), repeats)
        print(f"{url.split(':')[0]}: a run of {items:,} scored and {ERRORED} errored items (and an earlier run of {max(1, items // 10):,}); median of {repeats}")
        print(f"  (f) obvious way, read_sql of the run then 50 rows: {obvious_page:9.1f} ms")
        print(f"  (f) obvious way, read_sql of the run then one row: {obvious_one:9.1f} ms")
        print(f"  {'read':<58} {'ms':>9} {'(f) / read':>11}")
        for label, ms in figures.items():
            against = obvious_one if label.startswith("(d)") else obvious_page
            print(f"  {label:<58} {ms:9.1f} {against / ms:10.1f}x")
        ok = True
        for label, (read, checked) in reads.items():
            found = plans(store, read)
            scans = any(reach(lines).startswith("FULL SCAN") for _, lines in found)
            ok &= not (checked and scans)
            print(f"  plan {label}: {'FULL SCAN' if scans else 'through an index'}{'' if checked else ' (not checked)'}")
            for statement, lines in found:
                print(f"    {statement[:110]}{'...' if len(statement) > 110 else ''}")
                shown = "; ".join(line if len(line) < 120 else line[:119] + "..." for line in lines)
                print(f"      reads {reach(lines)}: {shown}")
        return ok


@contextlib.contextmanager
def fresh_pg_schema(base: str) -> Iterator[str | None]:
    """A URL of an empty store in a new schema of the PostgreSQL database ``base``, dropped afterwards;
    None when the server cannot be reached."""
    import psycopg

    schema = "bench_items_" + secrets.token_hex(3)
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as error:
        print(f"postgresql: skipped, {base.split('@')[-1]} cannot be reached ({str(error).splitlines()[0]})")
        yield None
        return
    try:
        yield f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000, help="scored items in the run (default: 100000)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per read; the median is printed")
    parser.add_argument("--postgres", metavar="URL", help="also measure a run in a fresh schema of this database")
    args = parser.parse_args()
    url, run_id, built = cached_sqlite(args.items)
    print(f"store {url} (run {run_id}): " + (f"built in {built:.1f} s" if built else "cached"))
    ok = measure(url, run_id, args.items, args.repeats)
    if args.postgres:
        with fresh_pg_schema(args.postgres) as pg_url:
            if pg_url:
                started = time.perf_counter()
                pg_run = save_runs(pg_url, args.items)
                print(f"postgresql: run {pg_run} stored in {time.perf_counter() - started:.1f} s")
                ok &= measure(pg_url, pg_run, args.items, args.repeats)
    if not ok:
        raise SystemExit("a checked read scans evaluation_responses instead of searching an index: see its plan above")


if __name__ == "__main__":
    main()
