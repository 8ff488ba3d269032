"""MicrobioRel cases: the entity pairs of the pinned upstream splits."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from fieldeval.data import fetch
from fieldeval.errors import UsageError
from scorers.microbiorel import unknown_labels

SPLIT_FILES = {
    "train": "microbiorel/unmasked/train_df.csv",
    "dev": "microbiorel/unmasked/dev_df.csv",
    "test": "microbiorel/unmasked/test_df.csv",
}

@dataclass(frozen=True)
class Entity:
    """One entity mention: its text, type and character offsets in the paragraph."""

    name: str
    type: str
    start: int
    end: int


@dataclass(frozen=True)
class RelationCase:
    """One MicrobioRel entity pair.

    Attributes:
        case_id: ``pair000`` ..., the row number in its split.
        test_id: a readable pytest id: case id and both entity names.
        annotation_id: the upstream paragraph id.
        text: the paragraph.
        source: the first entity (``from_entity``).
        target: the second entity (``to_entity``).
        gold: the relation class (``"None"`` is a class).
        filtered_labels: the classes allowed for the pair's entity types (test split only).
    """

    case_id: str
    test_id: str
    annotation_id: str
    text: str
    source: Entity
    target: Entity
    gold: str
    filtered_labels: tuple[str, ...] = ()


def _slug(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_")[:24] or "x"


def load_split(split: str = "test") -> tuple[RelationCase, ...]:
    """The entity pairs of a split (``train``, ``dev`` or ``test``) from the pinned upstream CSVs."""
    import pandas as pd

    if split not in SPLIT_FILES:
        raise UsageError(f"MicrobioRel split {split!r} is unknown; use one of {', '.join(SPLIT_FILES)}")
    df = pd.read_csv(fetch(SPLIT_FILES[split]), dtype=str, keep_default_na=False)
    unknown = unknown_labels(df["relation_type"])
    if unknown:
        raise UsageError(f"{SPLIT_FILES[split]}: relation_type value(s) {unknown} are not MicrobioRel classes; "
                         "check the data file against the registry")
    cases = []
    for number, row in enumerate(df.to_dict("records")):
        source = Entity(row["from_entity_name"], row["from_entity_label"],
                        int(float(row["from_entity_start"])), int(float(row["from_entity_end"])))
        target = Entity(row["to_entity_name"], row["to_entity_label"],
                        int(float(row["to_entity_start"])), int(float(row["to_entity_end"])))
        filtered = tuple(ast.literal_eval(row["filtered_labels"])) if row.get("filtered_labels") else ()
        case_id = f"pair{number:03d}"
        cases.append(RelationCase(
            case_id=case_id,
            test_id=f"{case_id}-{_slug(source.name)}-{_slug(target.name)}",
            annotation_id=row["annotation_id"].removesuffix(".0"),
            text=row["original_text"],
            source=source,
            target=target,
            gold=row["relation_type"],
            filtered_labels=filtered,
        ))
    return tuple(cases)
