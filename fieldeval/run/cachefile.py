"""The response cache's end of session: its held responses committed, and a cache damaged meanwhile said in a line."""

from __future__ import annotations

from typing import Any


def commit(cache: Any, *, close: bool = False) -> str | None:
    """Commit (``close``: and close) the responses ``cache`` holds in memory; the full-disk line when the disk is
    full, else None. Any other failure is raised."""
    import sqlite3

    from fieldeval.run.writable import full_disk_line, out_of_space

    try:
        cache.close() if close else cache.flush()
    except (sqlite3.Error, OSError) as error:
        if not out_of_space(error):
            raise
        return full_disk_line(str(cache.path), error)
    return None


def damage_line(cache: Any) -> str | None:
    """The one line saying ``cache`` was damaged while the session ran (its answers are in the run, not in the
    cache), else None."""
    problem = cache.damage()
    if problem is None:
        return None
    return (f"fieldeval: response cache {cache.path} is damaged ({problem}): this session's answers are in its run "
            "but may not be cached; the next session moves a damaged cache aside")


__all__ = ["commit", "damage_line"]
