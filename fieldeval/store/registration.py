"""The model registry: the seed's ``POST /api/models``, idempotent on (name, endpoint)."""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from fieldeval.errors import UsageError
from fieldeval.store.schema import Tables, iso, utcnow


KEY_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a model name is one line of printable text that cannot be read as an option: no control characters
# (NUL, newline, ...), no leading dash or space, at most 200 characters
MODEL_NAME = re.compile(r"[^\x00-\x20\x7f-\x9f\-][^\x00-\x1f\x7f-\x9f]{0,199}")
INT32_MAX = 2**31 - 1


def check_model_name(name: str) -> str:
    """The name, after the registry's rules; a usage error naming the rule it breaks.

    Example:
        >>> check_model_name("phi-3-mini-4k")
        'phi-3-mini-4k'
    """
    if MODEL_NAME.fullmatch(name or "") is None:
        raise UsageError(f"models add {name!r}: not a model name; use one line of printable text, at most 200 "
                         "characters, not starting with '-' or a space (e.g. phi-3-mini-4k)")
    return name


class ModelConflict(UsageError):
    """The name is already registered at another endpoint (the service answers 409)."""


@dataclass(frozen=True)
class ModelRecord:
    """A registered model endpoint.

    Attributes:
        model_id: ``mdl_`` and 8 hex digits, e.g. ``mdl_7f2a91c4``.
        name: the model name sent to the endpoint and used as ``--model NAME``.
        provider: who serves it, e.g. ``local``, ``ollama``, ``vllm``.
        endpoint: the OpenAI-compatible URL, e.g. ``http://localhost:11434/v1``.
        context_window: tokens of context, when known.
        parameters_billion: model size, when known.
        notes: free text (quantisation, hardware).
        registered_at: ISO 8601 UTC time of the first registration.
        key_env: the environment variable the API key is read from at call time (never the key itself).
    """

    model_id: str
    name: str
    provider: str | None
    endpoint: str
    context_window: int | None
    parameters_billion: float | None
    notes: str | None
    registered_at: str
    key_env: str | None = None
    batch: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_row(cls, row: sa.Row) -> ModelRecord:
        """A ``models`` row as a record."""
        data = row._asdict()
        data["registered_at"] = iso(data["registered_at"])
        data["batch"] = bool(data.get("batch"))
        return cls(**data)


class ModelRegistry:
    """The :class:`~fieldeval.store.Store` methods on the ``models`` table."""

    engine: Engine
    tables: Tables

    def add_model(
        self,
        name: str,
        endpoint: str,
        *,
        provider: str | None = None,
        context_window: int | None = None,
        parameters_billion: float | None = None,
        notes: str | None = None,
    ) -> ModelRecord:
        """Register a model endpoint; idempotent on (name, endpoint).

        Args:
            name: the model name the endpoint serves (also its ``--model`` id), e.g. ``phi-3-mini-4k``.
            endpoint: the OpenAI-compatible base URL, e.g. ``http://localhost:11434/v1``.
            provider: who serves it, e.g. ``local``.
            context_window: tokens of context.
            parameters_billion: model size in billions of parameters.
            notes: free text.

        Returns:
            The new record, or the existing one when (name, endpoint) is already registered.

        Raises:
            UsageError: an empty name or endpoint, or a negative size.

        Example:
            >>> store.add_model("phi-3-mini-4k", "http://localhost:11434/v1", provider="local").model_id  # doctest: +SKIP
            'mdl_7f2a91c4'
        """
        return self.register_model(name, endpoint, provider=provider, context_window=context_window,
                                   parameters_billion=parameters_billion, notes=notes)[0]

    def register_model(self, name: str, endpoint: str, *, replace: bool = False,
                       **fields: Any) -> tuple[ModelRecord, bool]:
        """:meth:`add_model`, also saying whether the record is new.

        A name has one endpoint: registering it at another endpoint (or with another ``key_env``) is
        a :class:`ModelConflict` unless ``replace``, which points the existing record (same model_id)
        at the new endpoint and drops any older endpoints of that name.
        """
        self.require_writable()
        name, endpoint = (name or "").strip(), (endpoint or "").strip()
        if not name:
            raise UsageError("models add NAME: the name is empty; pass the model name the endpoint serves")
        check_model_name(name)
        if "://" not in endpoint:
            raise UsageError(f"--endpoint {endpoint!r}: not a URL; pass the server's base URL, "
                             "e.g. http://localhost:11434/v1")
        for key in ("context_window", "parameters_billion"):
            value = fields.get(key)
            if value is not None and not 0 < value < math.inf:
                raise UsageError(f"--{key.replace('_', '-')} {value}: must be a positive, finite number")
        if fields.get("context_window") is not None and fields["context_window"] > INT32_MAX:
            raise UsageError(f"--context-window {fields['context_window']}: at most {INT32_MAX} tokens")
        for key in ("provider", "notes"):
            if isinstance(fields.get(key), str) and "\x00" in fields[key]:
                raise UsageError(f"--{key} contains a NUL character; pass plain text")
        key_env = fields.get("key_env")
        if key_env is not None and not KEY_ENV_NAME.fullmatch(key_env):
            raise UsageError("--key-env: not an environment variable name; pass the variable's name "
                             "(e.g. OPENAI_API_KEY), never the key itself")
        same_name = self.models_named(name)
        if same_name:
            latest = same_name[-1]
            if (latest.endpoint, latest.key_env, latest.batch) == (endpoint, key_env, bool(fields.get("batch"))) \
                    and len(same_name) == 1:
                return latest, False
            if not replace:
                if latest.endpoint != endpoint:
                    raise ModelConflict(f"model {name!r}: already registered at {latest.endpoint}; pass --replace "
                                        f"(replace=true over HTTP) to point it at {endpoint}")
                raise ModelConflict(f"model {name!r}: already registered at {endpoint} with key_env={latest.key_env}"
                                    f", batch={latest.batch}; pass --replace (replace=true over HTTP) to change them")
            return self._replace(same_name, endpoint, fields), True
        models = self.tables.models
        for _ in range(3):
            existing = self._model(name, endpoint)
            if existing is not None:
                return existing, False
            try:
                with self.engine.begin() as conn:
                    conn.execute(models.insert().values(model_id="mdl_" + secrets.token_hex(4), name=name,
                                                        endpoint=endpoint, registered_at=utcnow(), **fields))
            except sa.exc.IntegrityError:  # a concurrent registration won the race (or an id clash): read again
                continue
            record = self._model(name, endpoint)
            assert record is not None, "a committed model registration must be readable"
            return record, True
        raise UsageError(f"models add {name} --endpoint {endpoint}: registration kept conflicting; try again")

    def models_named(self, name: str) -> list[ModelRecord]:
        """The records registered under ``name``, oldest first."""
        models = self.tables.models
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(models).where(models.c.name == name)
                                .order_by(models.c.registered_at, models.c.model_id)).all()
        return [ModelRecord.from_row(row) for row in rows]

    def _replace(self, same_name: list[ModelRecord], endpoint: str, fields: dict[str, Any]) -> ModelRecord:
        """Point the newest record of a name at ``endpoint``; older records of the name are dropped."""
        models, keep = self.tables.models, same_name[-1]
        with self.engine.begin() as conn:
            conn.execute(models.delete().where(models.c.model_id.in_([r.model_id for r in same_name[:-1]])))
            cleared = dict.fromkeys(("key_env", "provider", "context_window", "parameters_billion", "notes", "batch"))
            conn.execute(models.update().where(models.c.model_id == keep.model_id).values(
                {**cleared, **fields, "endpoint": endpoint}))
        record = self._model(keep.name, endpoint)
        assert record is not None, "a committed replacement must be readable"
        return record

    def _model(self, name: str, endpoint: str) -> ModelRecord | None:
        """The record for (name, endpoint), if any."""
        models = self.tables.models
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(models).where(models.c.name == name, models.c.endpoint == endpoint)).first()
        return None if row is None else ModelRecord.from_row(row)

    def list_models(self) -> list[ModelRecord]:
        """Every registered model, oldest first.

        Returns:
            The records in registration order.

        Example:
            >>> [m.name for m in store.list_models()]  # doctest: +SKIP
            ['phi-3-mini-4k']
        """
        models = self.tables.models
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(models).order_by(models.c.registered_at, models.c.name)).all()
        return [ModelRecord.from_row(row) for row in rows]
