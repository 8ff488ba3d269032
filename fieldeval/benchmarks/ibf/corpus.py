"""The IBF corpus: its schema (pydantic, one line naming the item and field on error) and loading."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fieldeval.benchmarks.ibf.versions import DEFAULT_VERSION
from fieldeval.errors import UsageError
from fieldeval.inputs import read_jsonl
from fieldeval.resources import bundled


def corpus_dir() -> Path:
    """The corpora fieldeval ships (the repository's fixtures/ibf/)."""
    return bundled("fixtures", "ibf")


Phrase = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Phrases = Annotated[list[Phrase], Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HazardNotes(_Strict):
    """The hazard: its type, synonyms a response may use, and its magnitude indicators."""

    type: str = Field(min_length=1)
    synonyms: list[Phrase] = Field(default_factory=list)
    indicators: Phrases


class ImpactNotes(_Strict):
    """Expected impacts by kind."""

    societal: Phrases
    agricultural: Phrases
    infrastructure: Phrases


class GeographyNotes(_Strict):
    """Where: the country, admin-1 and admin-2 units, and physical features (basins, coasts)."""

    country: str = Field(min_length=1)
    admin1: Phrases
    admin2: Phrases
    features: list[Phrase] = Field(default_factory=list)


class References(_Strict):
    """Reference notes per rubric dimension."""

    hazard: HazardNotes
    impacts: ImpactNotes
    uncertainties: Phrases
    actions: Phrases
    geography: GeographyNotes


class ForecastContext(_Strict):
    """The forecast as issued: alert, location, lead time and magnitude."""

    alert: str = Field(min_length=1)
    location: str = Field(min_length=1)
    lead_time: str = Field(pattern=r"^\d+ (hours?|days?|weeks?|months?)$")
    magnitude: str = Field(min_length=1)


class IbfItem(_Strict):
    """One corpus item, shaped like the seed's ci_0814."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    corpus_version: str = Field(min_length=1)
    hazard: str = Field(min_length=1)
    region: str = Field(min_length=1)
    context: ForecastContext
    question: str = Field(min_length=1)
    references: References
    cluster: str | None = Field(default=None, min_length=1)

    @property
    def test_id(self) -> str:
        """A readable pytest id: hazard, country and item id."""
        country = self.references.geography.country
        return "-".join("_".join(p.lower().replace("'", "").split()) for p in (self.hazard, country, self.id))


@dataclass(frozen=True)
class IbfCorpus:
    """A loaded corpus: its version tag, items and content hash."""

    version: str
    items: tuple[IbfItem, ...]
    sha256: str
    path: Path


def available_versions() -> list[str]:
    """The corpus versions shipped under fixtures/ibf/."""
    return sorted(p.stem for p in corpus_dir().glob("*.jsonl"))


def load_corpus(path: str | Path | None = None, version: str | None = None) -> IbfCorpus:
    """Load and validate an IBF corpus (JSON lines).

    Args:
        path: a corpus file; None means ``fixtures/ibf/<version>.jsonl``.
        version: the corpus tag; with ``path`` it keeps only the items of that version.

    Returns:
        The corpus.

    Raises:
        UsageError: a missing file, a line that is not JSON, or an item that breaks the schema
            (one line naming the item id and field).

    Example:
        >>> len(load_corpus().items) >= 60
        True
    """
    if path is None:
        version = version or DEFAULT_VERSION
        path = corpus_dir() / f"{version}.jsonl"
        if not path.is_file():
            raise UsageError(f"--corpus-version {version}: no such corpus; choose one of "
                             f"{', '.join(available_versions())} or pass --ibf-corpus PATH")
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--ibf-corpus {path}: no such file; pass a JSON-lines IBF corpus")
    lines = read_jsonl(path, what="--ibf-corpus", hint="write one JSON object per line")
    raw = path.read_bytes()
    items: list[IbfItem] = []
    seen: set[str] = set()
    for number, data in lines:
        item_id = data.get("id") if isinstance(data, dict) else None
        try:
            item = IbfItem.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "item"
            raise UsageError(f"{path} item {item_id or f'on line {number}'}: field {field}: {first['msg']}; "
                             "fix the item to match the IBF corpus schema") from None
        if item.id in seen:
            raise UsageError(f"{path} item {item.id}: field id: duplicated; give every item its own id")
        seen.add(item.id)
        items.append(item)
    if version is not None:
        items = [i for i in items if i.corpus_version == version]
    if not items:
        raise UsageError(f"{path}: no items{f' of corpus version {version}' if version else ''}; "
                         "check --corpus-version against the items' corpus_version")
    versions = sorted({i.corpus_version for i in items})
    return IbfCorpus(versions[0] if len(versions) == 1 else "+".join(versions), tuple(items),
                     hashlib.sha256(raw).hexdigest(), path)
