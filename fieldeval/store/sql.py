"""SQL the store's writers share: the batched insert of a run's responses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fieldeval.store.payload import JSON_TEXT


def _responses_insert(table: sa.Table, dialect: str) -> sa.Insert:
    """The insert of ``evaluation_responses`` rows whose JSON columns come already encoded (``JSON_TEXT``):
    PostgreSQL casts the text to JSONB, SQLite keeps it as the text its JSON type reads."""
    values = {}
    for column, param in JSON_TEXT.items():
        text = sa.bindparam(param, type_=sa.Text)
        values[column] = sa.cast(text, table.c[column].type) if dialect == "postgresql" else text
    return table.insert().values(values)


def insert_responses(conn: Connection, table: sa.Table, batches: Iterable[list[dict[str, Any]]]) -> None:
    """Insert ``evaluation_responses`` rows (:class:`~fieldeval.store.payload.ResponseRows` batches).

    On SQLite each batch goes to the driver's ``executemany`` as tuples, every value through its column's own
    bind processor (a run of the same value converted once): SQLAlchemy's per-row parameter handling cost as
    much as the insert itself. Other databases take the batches through SQLAlchemy (insertmanyvalues).
    """
    insert = _responses_insert(table, conn.dialect.name)
    if conn.dialect.name != "sqlite":
        for batch in batches:
            conn.execute(insert, batch)
        return
    compiled = None
    for batch in batches:
        if compiled is None:
            compiled = insert.compile(dialect=conn.dialect,
                                      column_keys=[k for k in batch[0] if k not in JSON_TEXT.values()])
            names = list(compiled.positiontup)
            convert = [(position, processor) for position, name in enumerate(names)
                       if (processor := bind_processor(compiled.binds[name].type, conn.dialect)) is not None]
        rows = [[row[name] for name in names] for row in batch]
        for position, processor in convert:
            last = out = object()
            for values in rows:
                value = values[position]
                if value is not last:
                    last, out = value, processor(value)
                values[position] = out
        conn.exec_driver_sql(compiled.string, [tuple(values) for values in rows])


def bind_processor(type_: sa.types.TypeEngine, dialect: sa.engine.Dialect) -> Any:
    """What SQLAlchemy does to a value of ``type_`` before the driver gets it on ``dialect`` (None: nothing)."""
    return type_.dialect_impl(dialect).bind_processor(dialect)


__all__ = ["bind_processor", "insert_responses"]
