"""What a ``--resume RUN_ID`` session holds of its stored run: the run's lease and the rows it scored already."""

from __future__ import annotations

from collections.abc import Sequence

from fieldeval.errors import UsageError
from fieldeval.rows import case_key


def check_stored_runs(url: str, runs: Sequence[tuple[str, str | None]]) -> None:
    """Each ``(flag, run_id)`` with a run id names a run of the store at ``url`` (a usage error naming it when not)."""
    from fieldeval.store import declared_columns, open_store

    for flag, run_id in runs:
        if not run_id:
            continue
        with open_store(url, columns=declared_columns()) as store:
            try:
                store.run_settings(run_id)
            except UsageError as error:
                raise UsageError(f"{flag} {run_id}: {error}") from None


class ResumedRun:
    """The stored run a session resumes: its lease while held, and its scored rows of the selected benchmarks."""

    def __init__(self, url: str, run_id: str, selected: Sequence[str]) -> None:
        self.url = url
        self.run_id = run_id
        self.selected = selected
        self.holder: str | None = None  # who holds the lease, while this session does
        self._rows: dict[str, list[dict]] | None = None

    def take_lease(self) -> None:
        """Hold the run's lease in the store, so no second session resumes it meanwhile."""
        from fieldeval.run.resume import holder
        from fieldeval.store import declared_columns, open_store

        me = holder()
        with open_store(self.url, columns=declared_columns()) as store:
            store.take_lease(self.run_id, me)
        self.holder = me

    def handed_over(self) -> None:
        """The lease went with the run's replacement (the store released it in the same transaction)."""
        self.holder = None

    def release(self) -> None:
        """Let go of the lease if this session still holds it; a store that is gone leaves it to the next resume."""
        if self.holder is None:
            return
        from fieldeval.store import declared_columns, open_store

        me, self.holder = self.holder, None
        try:
            with open_store(self.url, columns=declared_columns()) as store:
                store.release_lease(self.run_id, me)
        except Exception:  # noqa: BLE001  (a lease left behind by a dead process is taken over by the next resume)
            pass

    def created_at(self) -> str | None:
        """When the run was first started (its ``created_at``): a resumed run keeps it."""
        import sqlalchemy as sa

        from fieldeval.store import declared_columns, open_store
        from fieldeval.store.schema import iso

        with open_store(self.url, columns=declared_columns()) as store:
            table = store.tables.evaluations
            with store.engine.connect() as conn:
                value = conn.execute(sa.select(table.c.created_at).where(table.c.run_id == self.run_id)).scalar()
        return None if value is None else iso(value)

    def rows(self) -> dict[str, list[dict]]:
        """The run's scored rows by benchmark, of the selected benchmarks (read once)."""
        if self._rows is None:
            from fieldeval.store import declared_columns, open_store

            with open_store(self.url, columns=declared_columns()) as store:
                self._rows = {bench: rows for bench, rows in store.run_rows(self.run_id).items()
                              if bench in self.selected}
        return self._rows

    def scored_items(self) -> set[tuple]:
        """(benchmark, model, case key) of every item the run scored, and the epoch of a repeated one: these are
        not run again."""
        return {(bench, str(row["model"]), case_key(row), *((row["epoch"],) if row.get("epoch") is not None else ()))
                for bench, rows in self.rows().items() for row in rows}


__all__ = ["ResumedRun", "check_stored_runs"]
