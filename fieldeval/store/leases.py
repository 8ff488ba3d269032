"""Resume leases: the one session that may complete a stored run under its own id."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from fieldeval.errors import UsageError
from fieldeval.store.schema import Tables, iso, utcnow


class RunLeases:
    """The :class:`~fieldeval.store.Store` methods on resume leases."""

    engine: Engine
    tables: Tables

    def take_lease(self, run_id: str, holder: str) -> None:
        """Hold ``run_id`` for one resuming session (``holder``: host and process); a usage error while another
        live session holds it. A lease whose process on this host is gone is taken over."""
        self.require_writable()
        t = self.tables.run_leases
        for _ in range(2):
            try:
                with self.engine.begin() as conn:
                    conn.execute(t.insert().values(run_id=run_id, holder=holder, taken_at=utcnow()))
                return
            except sa.exc.IntegrityError:
                with self.engine.begin() as conn:
                    found = conn.execute(sa.select(t.c.holder, t.c.taken_at).where(t.c.run_id == run_id)).first()
                    if found is None:
                        continue
                    if not _alive(found.holder):
                        conn.execute(t.delete().where(t.c.run_id == run_id, t.c.holder == found.holder))
                        continue
                raise UsageError(f"--resume {run_id}: another session is resuming it ({found.holder}, since "
                                 f"{iso(found.taken_at)}); wait for it to end") from None
        raise UsageError(f"--resume {run_id}: could not take its lease; try again")

    def release_lease(self, run_id: str, holder: str) -> None:
        """Let go of ``run_id``'s lease, if ``holder`` still holds it."""
        t = self.tables.run_leases
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.run_id == run_id, t.c.holder == holder))


def _alive(holder: str) -> bool:
    """Whether a lease's holder (``host:pid``) may still be running: any other host's, or a live process here."""
    import os
    import socket

    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
