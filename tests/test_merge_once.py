"""A run group is merged once: of two concurrent merges one is stored, the other is refused in one line."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from fieldeval.errors import UsageError
from fieldeval.store import open_store
from fieldeval.store import groups
from fieldeval.store.schema import MERGED_RUN_INDEX
from tests.test_shards import NODE, _save_shard


def _merged_runs(url: str) -> list[str]:
    with open_store(url) as store:
        return [run.run_id for run in store.list_runs() if store.get_run(run.run_id)["shard_index"] is None]


def _two_shards(url: str) -> None:
    with open_store(url) as store:
        _save_shard(store, "run_a", 1, 2, [NODE.format(i) for i in range(3)])
        _save_shard(store, "run_b", 2, 2, [NODE.format(i) for i in range(3, 6)])


def test_two_concurrent_merges_store_one_merged_run(store_url, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a project without thresholds
    _two_shards(store_url)
    barrier = threading.Barrier(2, timeout=60)
    rows = groups.shard_rows

    def both_checked(*args, **kwargs):  # each merge has found the group unmerged before either saves
        barrier.wait()
        return rows(*args, **kwargs)

    monkeypatch.setattr(groups, "shard_rows", both_checked)
    outcomes: list[object] = [None, None]

    def merge(slot: int) -> None:
        with open_store(store_url) as store:
            try:
                outcomes[slot] = groups.merge_group(store, "g", {})
            except UsageError as error:
                outcomes[slot] = error

    threads = [threading.Thread(target=merge, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    merged = [o for o in outcomes if isinstance(o, groups.MergedRun)]
    refused = [o for o in outcomes if isinstance(o, UsageError)]
    assert len(merged) == 1 and len(refused) == 1, outcomes
    assert _merged_runs(store_url) == [merged[0].run_id]
    message = str(refused[0])
    assert "\n" not in message and "run group 'g'" in message and f"already merged as {merged[0].run_id}" in message


def _copy_run(conn: sqlite3.Connection, run_id: str, new_id: str) -> None:
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS copied AS SELECT * FROM evaluations WHERE 0")
    conn.execute("DELETE FROM copied")
    conn.execute("INSERT INTO copied SELECT * FROM evaluations WHERE run_id = ?", (run_id,))
    conn.execute("UPDATE copied SET run_id = ?", (new_id,))
    conn.execute("INSERT INTO evaluations SELECT * FROM copied")


def test_a_store_merged_twice_before_the_constraint_migrates_and_keeps_the_first(tmp_path, monkeypatch):
    # stores written before the unique index can hold two merged runs of one group: they must still open
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    _two_shards(url)
    with open_store(url) as store:
        first = groups.merge_group(store, "g", {}).run_id
    with sqlite3.connect(path) as conn:  # back to schema version 3, and a second merged run as the race left it
        conn.execute(f"DROP INDEX {MERGED_RUN_INDEX}")
        conn.execute("DELETE FROM schema_version WHERE version = 4")
        _copy_run(conn, first, "run_zzzz0001")
    with open_store(url) as store:
        assert 4 in store.schema_versions()
        with pytest.raises(UsageError, match=f"already merged as {first}"):
            groups.merge_group(store, "g", {})
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.IntegrityError):
        _copy_run(conn, first, "run_zzzz0002")  # a third is refused by the index itself
