"""Build the ontology index once with oaklib and cache it on disk.

The index (labels, synonyms, is_a parents, the subClassOf ancestor closure) is keyed by
the sha256 of the ontology file (or of the selector when it names no local
file) so a warm start loads one pickle and never imports oaklib. The CURIEs the ontology marks obsolete (for the
gold-data audit) are cached beside it, from the same load of the ontology.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import pickle
import re
from pathlib import Path

from fieldeval.atomic import atomic_path
from fieldeval.data import cache_dir, fetch, sha256_of
from fieldeval.errors import UsageError
from scorers.ebs import OntologyIndex

DEFAULT_ONTOLOGY_FILE = "envo/envo.obo"
INDEX_FORMAT = 2  # 2: with synonyms
OBSOLETE_FORMAT = 1

_loaded: dict[str, OntologyIndex] = {}
LOCAL_ADAPTERS = frozenset({"simpleobo", "pronto", "sqlite", "obograph", "rdflib", "funowl"})  # read a local file


def default_selector() -> str:
    """The oaklib selector of the pinned ENVO release from the data registry."""
    return f"simpleobo:{fetch(DEFAULT_ONTOLOGY_FILE)}"


def _selector_file(selector: str) -> Path | None:
    _, _, rest = selector.partition(":")
    path = Path(rest) if rest else None
    return path if path is not None and path.is_file() else None


def _cache_key(selector: str, version: int = INDEX_FORMAT) -> str:
    """The ontology's name in the cache: its file's sha256 (or the selector), with the cached form's version."""
    local = _selector_file(selector)
    basis = sha256_of(local) if local else selector
    return hashlib.sha256(f"{version}|{selector.partition(':')[0]}|{basis}".encode()).hexdigest()[:24]


def _obo_header_version(path: Path) -> str | None:
    with open(path, encoding="utf-8", errors="replace") as handle:
        ontology, version = None, None
        for line in handle:
            if not line.strip() or line.startswith("["):
                break
            key, _, value = line.partition(":")
            if key == "data-version":
                version = value.strip()
            elif key == "ontology":
                ontology = value.strip()
    if version is None:
        return None
    version = version.removeprefix("releases/")
    return f"{ontology} {version}" if ontology else version


def _metadata_version(adapter) -> str:
    for ontology in adapter.ontologies():
        meta = adapter.ontology_metadata_map(ontology)
        for key in ("owl:versionInfo", "oio:data-version", "owl:versionIRI"):
            values = meta.get(key)
            if values:
                value = values[0] if isinstance(values, list) else values
                match = re.search(r"\d{4}-\d{2}-\d{2}", str(value))
                return f"{ontology} {match.group(0) if match else value}"
    return "unknown"


def build_index(selector: str) -> OntologyIndex:
    """Build an :class:`OntologyIndex` from any oaklib selector (slow: imports oaklib)."""
    return _build(selector)[0]


def _build(selector: str) -> tuple[OntologyIndex, list[str] | None]:
    """The index of the ontology and the CURIEs oaklib reports obsolete in it, from one load of it."""
    try:
        from oaklib import get_adapter
        from oaklib.datamodels.vocabulary import IS_A

        adapter = get_adapter(selector)
        entities = list(adapter.entities(filter_obsoletes=False))
        labels = {curie: label for curie, label in adapter.labels(entities) if label}
        parents: dict[str, list[str]] = {}
        for subject, _, obj in adapter.relationships(predicates=[IS_A]):
            parents.setdefault(subject, []).append(obj)
        synonyms = {}
        for curie in labels:
            found = tuple(sorted({alias for _, alias in adapter.alias_relationships(curie, exclude_labels=True)
                                  if alias}))
            if found:
                synonyms[curie] = found
        obsolete = _obsoletes_of(adapter)
    except UsageError:
        raise
    except Exception as error:
        raise _unloadable(selector, error) from None
    if not labels:
        raise OntologyUnreadable(f"--ontology {selector!r} has no labelled terms (a damaged or empty file?); check "
                                 "the selector")
    local = _selector_file(selector)
    version = (_obo_header_version(local) if local and local.suffix == ".obo" else None) or _metadata_version(adapter)
    frozen_parents = {curie: tuple(sorted(set(ps))) for curie, ps in parents.items()}
    return OntologyIndex(
        version=version,
        labels=labels,
        parents=frozen_parents,
        ancestors=_closure(frozen_parents),
        synonyms=synonyms,
    ), obsolete


class OntologyUnreadable(UsageError):
    """The ontology exists but cannot be read (a damaged file, an unreachable database): its checks are unknown."""


def _unloadable(selector: str, error: Exception) -> OntologyUnreadable:
    reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
    return OntologyUnreadable(f"--ontology {selector!r} could not be loaded by oaklib ({reason}); pass an oaklib "
                              "selector such as sqlite:obo:envo or simpleobo:path/to/envo.obo")


def unreadable_index(selector: str, error: UsageError) -> OntologyIndex:
    """The index of an ontology that could not be read: no terms, and ``unreadable`` saying why, so that scoring
    reports its checks as unknown instead of wrong."""
    return OntologyIndex(version="unreadable", labels={}, parents={}, ancestors={},
                         unreadable=f"{selector}: {error}".removeprefix(f"{selector}: --ontology {selector!r} "))


def _missing_file(selector: str) -> str | None:
    """The local file a selector names that does not exist (a mistyped path: bad input, not an unreadable
    ontology), else None."""
    prefix, _, rest = selector.partition(":")
    if prefix not in LOCAL_ADAPTERS or not rest or rest.startswith("obo:") or "://" in rest:
        return None  # obolibrary:envo.obo and the like fetch their file
    looks_local = "/" in rest or rest.endswith((".obo", ".owl", ".db", ".json", ".ofn"))
    return rest if looks_local and not Path(rest).expanduser().exists() else None


def _obsoletes_of(adapter) -> list[str] | None:
    """The adapter's obsolete CURIEs; None where it cannot say (the audit, which needs them, then reports it)."""
    try:
        return sorted(set(adapter.obsoletes()))
    except Exception:  # noqa: BLE001 - an adapter without obsoletes still gives a usable index
        return None


def _closure(parents: dict[str, tuple[str, ...]]) -> dict[str, frozenset[str]]:
    closure: dict[str, frozenset[str]] = {}

    def visit(node: str, trail: frozenset[str]) -> frozenset[str]:
        if node in closure:
            return closure[node]
        found: set[str] = set()
        for parent in parents.get(node, ()):
            if parent in trail:  # a cycle: stop rather than recurse forever
                continue
            found.add(parent)
            found |= visit(parent, trail | {parent})
        closure[node] = frozenset(found - {node})
        return closure[node]

    for node in parents:
        visit(node, frozenset({node}))
    return closure


def load_index(selector: str | None = None) -> OntologyIndex:
    """Return the ontology index for a selector, from memory, the disk cache, or a fresh build.

    Args:
        selector: any oaklib selector; None means the pinned ENVO release.

    Returns:
        The index, also cached on disk keyed by the ontology file's hash.

    Example:
        >>> load_index().label("ENVO:01000174")  # doctest: +SKIP
        'forest biome'
    """
    selector = selector or default_selector()
    if selector in _loaded:
        return _loaded[selector]
    missing = _missing_file(selector)
    if missing is not None:
        raise UsageError(f"--ontology {selector!r}: no such file {missing}; pass an existing ontology file, e.g. "
                         "simpleobo:path/to/envo.obo")
    folder = cache_dir() / "index"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_cache_key(selector)}.pickle"
    index = _read(path)
    if index is None:
        with open(folder / f"{path.stem}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder; concurrent workers wait and then read
            index = _read(path)
            if index is None:
                index, obsolete = _build(selector)
                with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                    pickle.dump(index, handle, protocol=pickle.HIGHEST_PROTOCOL)
                if obsolete is not None:  # the audit's, from the same load of the ontology
                    _save_obsolete(selector, obsolete)
    _loaded[selector] = index
    return index


def obsolete_terms(selector: str | None = None) -> frozenset[str]:
    """The CURIEs oaklib reports obsolete in the ontology ``selector`` (None: the pinned ENVO), cached on disk
    (written with the index when it is built, so one load of the ontology makes both)."""
    selector = selector or default_selector()
    path = _obsolete_path(selector)
    try:
        return frozenset(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        pass
    try:
        from oaklib import get_adapter

        found = sorted(set(get_adapter(selector).obsoletes()))
    except Exception as error:
        raise _unloadable(selector, error) from None
    _save_obsolete(selector, found)
    return frozenset(found)


def _obsolete_path(selector: str) -> Path:
    return cache_dir() / "index" / f"obsolete-{_cache_key(selector, OBSOLETE_FORMAT)}.json"


def _save_obsolete(selector: str, found: list[str]) -> None:
    path = _obsolete_path(selector)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(found), encoding="utf-8")


def _read(path: Path) -> OntologyIndex | None:
    """The cached index, or None when there is none or it cannot be read as one (it is then built again)."""
    try:
        with open(path, "rb") as handle:
            index = pickle.load(handle)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ValueError, TypeError, KeyError, IndexError,
            ImportError, UnicodeDecodeError, MemoryError, RecursionError):  # damaged: every way a pickle breaks
        return None
    return index if isinstance(index, OntologyIndex) else None
