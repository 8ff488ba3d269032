"""A run's ``evaluation_responses`` rows built while its session runs, for a SQLite store.

Storing 100,000 rows after the last item meant building, encoding and
inserting each of them then: about 4 of the exit's 11 CPU-seconds. A
:class:`ResponseStage` takes each scored row as its item reports (the JSON text
the spool takes too), and every :data:`STAGE_CHUNK` rows builds them exactly as
the store would (:func:`~fieldeval.store.payload.response_row`) into a scratch
SQLite file of the session folder. When the run is saved, its rows go into the
store's ``evaluation_responses`` by one ``INSERT ... SELECT`` inside the run's
transaction, in the order the store gives them (benchmark, then node id).

The stage is only a shortcut: the spool stays the record of the rows. A stage
that cannot write (a full disk, a text SQLite refuses) gives up, and a stage
that does not hold exactly the rows being saved (a ``--resume``'s stored rows)
is not used; the run is then stored row by row, as before.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from fieldeval.store.payload import declared_response_columns

STAGE_FILE = "responses.stage"
STAGE_CHUNK = 2_000  # rows parsed, built and written at once (about 2 MB of texts waiting)
SCHEMA = "fieldeval_stage"  # the stage's name while attached to the store's connection
_ORDER = "stage_nodeid"  # the stage's own column: each row's node id, for the store's order


class ResponseStage:
    """The rows of one run as ``evaluation_responses`` rows, in a SQLite file, built a chunk at a time.

    Args:
        path: the scratch file (in the session folder; removed by :meth:`discard`).
        run_id: the run the rows belong to.
        columns: the benchmarks' declared store columns, as the store is opened with
            (:func:`~fieldeval.store.declared_columns`).
    """

    def __init__(self, path: Path, run_id: str, columns: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.columns = columns
        self._response_columns = declared_response_columns(columns)  # as flatten_run gives them to response_row
        self.counts: Counter[str] = Counter()  # rows staged by benchmark
        self.usable = True
        self._texts: list[tuple[str, str, str]] = []  # rows added since the last flush
        self._engine: Any = None
        self._table: Any = None

    def add(self, benchmark: str, nodeid: str, text: str) -> bool:
        """One scored row as its item reported it: its benchmark, node id and recorded JSON text. True when
        the row completed a chunk of :data:`STAGE_CHUNK`, and the chunk was built and written."""
        if not self.usable:
            return False
        self._texts.append((benchmark, nodeid, text))
        if len(self._texts) < STAGE_CHUNK:
            return False
        self.flush()
        return True

    def flush(self) -> None:
        """Parse, build and write the rows added since the last flush."""
        from fieldeval.run.spool import parse_texts

        texts, self._texts = self._texts, []
        if not self.usable or not texts:
            return
        chunk: dict[str, list[dict]] = {}
        try:
            for (benchmark, nodeid, _), row in zip(texts, parse_texts([text for _, _, text in texts]), strict=True):
                row["nodeid"] = nodeid  # as the spool's drain gives it
                chunk.setdefault(benchmark, []).append(row)
        except (TypeError, ValueError):  # not JSON objects: the session's own parse says so, not the stage's
            self.discard()
            return
        self.take(chunk)

    def take(self, rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Build and write these rows (each with its ``nodeid``, as the session parsed them); any failure ends
        the stage, and the run is then stored row by row."""
        if not self.usable or not any(rows_by_benchmark.values()):
            return
        try:
            self._write(rows_by_benchmark)
        except Exception:  # noqa: BLE001  (a shortcut that fails is dropped; the session still holds every row)
            self.discard()

    def _write(self, rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        from fieldeval.store.payload import UNDECLARED, response_row
        from fieldeval.store.sql import insert_responses

        if self._engine is None:
            self._open()
        batch = []
        for benchmark, rows in rows_by_benchmark.items():
            declared = self.columns.get(benchmark, UNDECLARED)
            for row in rows:  # no scored_at of its own: the run's, when it is saved
                out = response_row(self.run_id, benchmark, row, declared, self._response_columns, None)
                out[_ORDER] = row["nodeid"]
                batch.append(out)
        with self._engine.begin() as conn:
            insert_responses(conn, self._table, [batch])  # a chunk: STAGE_CHUNK rows at most, from flush
        self.counts.update({benchmark: len(rows) for benchmark, rows in rows_by_benchmark.items()})

    def _open(self) -> None:
        import sqlalchemy as sa

        from fieldeval.store.schema import tables_with

        responses = tables_with((), tuple(self._response_columns)).evaluation_responses
        self.path.unlink(missing_ok=True)
        engine = sa.create_engine(f"sqlite:///{self.path}")

        @sa.event.listens_for(engine, "connect")
        def _scratch(dbapi_connection, _record) -> None:  # a scratch file: no journal, no waiting on the disk
            dbapi_connection.execute("PRAGMA journal_mode = OFF")
            dbapi_connection.execute("PRAGMA synchronous = OFF")

        self._table = sa.Table("staged_responses", sa.MetaData(),
                               *(sa.Column(c.name, c.type) for c in responses.columns if c.name != "response_id"),
                               sa.Column(_ORDER, sa.Text))
        # copy_into's order, kept as the rows come: the copy reads the rows through it instead of sorting them all
        # as the session ends (0.8 s instead of 1.2-1.3 s of the store's thread at 100,000 rows)
        sa.Index("staged_responses_order", self._table.c.benchmark, self._table.c[_ORDER])
        self._table.create(engine)
        self._engine = engine

    def holds(self, run_id: str, counts: Mapping[str, int]) -> bool:
        """Whether the stage holds exactly this run's rows, ``counts`` of them by benchmark (once the rows added
        last are flushed)."""
        self.flush()
        counts = {name: n for name, n in counts.items() if n}
        return self.usable and self._engine is not None and run_id == self.run_id and counts == dict(self.counts)

    @contextlib.contextmanager
    def attached(self, conn: Any) -> Iterator[bool]:
        """The stage attached to ``conn`` (a SQLite store's connection, before its transaction begins); gives
        whether it is, and holds every row it counted (a file gone or damaged since is not used: False)."""
        import sqlite3

        self.close()
        raw = conn.connection.driver_connection
        try:
            raw.execute(f"ATTACH DATABASE ? AS {SCHEMA}", (str(self.path),))
        except sqlite3.Error:
            self.usable = False
            yield False
            return
        try:
            found = raw.execute(f"SELECT count(*) FROM {SCHEMA}.{self._table.name}").fetchone()[0]
        except sqlite3.Error:
            found = None
        self.usable = found == sum(self.counts.values())
        try:
            yield self.usable
        finally:
            try:
                raw.execute(f"DETACH DATABASE {SCHEMA}")
            except Exception:  # noqa: BLE001  (a connection that kept it is not pooled again)
                conn.invalidate()

    def copy_into(self, conn: Any, table: Any, scored_at: Any) -> None:
        """Insert the staged rows into the store's ``evaluation_responses`` (``table``) within ``conn``'s
        transaction, in the store's order; a row without a time of its own gets ``scored_at``."""
        from fieldeval.store.sql import bind_processor

        names = [c.name for c in self._table.columns if c.name != _ORDER]
        convert = bind_processor(table.c.scored_at.type, conn.dialect)
        quoted = [conn.dialect.identifier_preparer.quote(name) for name in names]
        picked = ["coalesce(scored_at, ?)" if name == "scored_at" else q for name, q in zip(names, quoted)]
        conn.exec_driver_sql(
            f"INSERT INTO {table.name} ({', '.join(quoted)}) SELECT {', '.join(picked)} "
            f"FROM {SCHEMA}.{self._table.name} ORDER BY benchmark, {_ORDER}, rowid",
            (convert(scored_at) if convert is not None else scored_at,))

    def close(self) -> None:
        """Close the stage's own connections (its file stays)."""
        if self._engine is not None:
            self._engine.dispose()

    def discard(self) -> None:
        """Give the stage up and remove its file."""
        self.usable = False
        self._texts = []
        self.close()
        self._engine = None
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


__all__ = ["STAGE_CHUNK", "STAGE_FILE", "ResponseStage"]
