"""The bodies the API takes: ``POST /api/models`` and ``POST /api/evaluations``, checked field by field (422 names
the field)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from fieldeval.calls.endpoints import check_endpoint
from fieldeval.errors import UsageError
from fieldeval.store.registration import INT32_MAX, check_model_name


class ModelIn(BaseModel):
    """``POST /api/models``: the seed's registration body, within the ``models`` table's column ranges."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    name: str = Field(min_length=1, max_length=200)
    endpoint: str = Field(min_length=1, max_length=2000)
    provider: str | None = Field(default=None, max_length=200)
    context_window: int | None = Field(default=None, gt=0, le=INT32_MAX)
    parameters_billion: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    notes: str | None = Field(default=None, max_length=5000)
    key_env: str | None = Field(default=None, max_length=200,
                                description="a key the server's operator allows for this endpoint "
                                            "(fieldeval serve --allow-key-env VAR)")
    batch: StrictBool = Field(default=False,
                              description="the endpoint offers OpenAI's Batch API (/v1/files, /v1/batches), as "
                                          "fieldeval models add --batch: pytest evals --batch sends its calls "
                                          "as batches")

    @field_validator("name")
    @classmethod
    def _name_rules(cls, value: str) -> str:
        return _as_field_error(check_model_name, value)

    @field_validator("provider", "notes", "key_env")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("contains a NUL character; send plain text")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint_rules(cls, value: str) -> str:
        return _as_field_error(check_endpoint, value)


def _as_field_error(check, value: str) -> str:
    """``check(value)``; its usage error as the field's validation error (422 naming the field)."""
    try:
        return check(value)
    except UsageError as error:
        text = str(error)
        for prefix in ("--endpoint", "models add"):
            text = text.removeprefix(prefix)
        raise ValueError(text.lstrip(": ")) from None


class EvaluationIn(BaseModel):
    """``POST /api/evaluations``: the seed's body plus ``benchmark`` (any installed one; default ``ibf``)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model_id: str = Field(min_length=1, max_length=200)
    benchmark: str = Field(default="ibf", min_length=1, max_length=200)
    corpus_version: str | None = Field(default=None, validate_default=True, max_length=200)
    batch_size: int = Field(default=8, ge=1, le=256)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, ge=1, le=32768)
    label: str | None = Field(default=None, max_length=500)

    @field_validator("model_id", "label")
    @classmethod
    def _no_control(cls, value: str | None) -> str | None:
        if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("contains a control character (NUL, newline, ...); send one line of plain text")
        return value

    @field_validator("benchmark")
    @classmethod
    def _installed(cls, value: str) -> str:
        from fieldeval.benchmark import benchmarks

        if value not in benchmarks():
            raise ValueError(f"{value!r} is not an installed benchmark; choose from {', '.join(sorted(benchmarks()))}")
        return value

    @field_validator("corpus_version")
    @classmethod
    def _corpus_version(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A benchmark that offers corpus versions (its ``corpus_versions`` member) needs one of them."""
        from fieldeval.benchmark import benchmarks

        name = info.data.get("benchmark")
        bench = benchmarks().get(name) if name else None
        if bench is None:
            return value
        if bench.corpus_versions is not None:
            versions = list(bench.corpus_versions())
            if not value:
                raise ValueError(f"required for an {name} evaluation, e.g. " + ", ".join(versions))
            if value not in versions:
                raise ValueError(f"{value!r} is not a corpus version; choose from {', '.join(versions)}")
        elif value:
            raise ValueError(f"only a benchmark with corpus versions takes one; {name} runs its pinned data, "
                             "leave it out")
        return value
