"""env_broad_scale value sets: the four template enums of nmdc-submission-schema, as TSVs in enum_data/."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from fieldeval.errors import UsageError
from fieldeval.inputs import read_tsv, write_tsv
from fieldeval.resources import bundled

SCHEMA_PACKAGE = "nmdc-submission-schema"

# template -> (enum file prefix, LinkML enum in nmdc-submission-schema)
TEMPLATE_ENUMS: dict[str, tuple[str, str]] = {
    "soil_data": ("soil", "EnvBroadScaleSoilEnum"),
    "water_data": ("water", "EnvBroadScaleWaterEnum"),
    "sediment_data": ("sediment", "EnvBroadScaleSedimentEnum"),
    "plant_associated_data": ("plant_associated", "EnvBroadScalePlantAssociatedEnum"),
}


def default_enum_dir() -> Path:
    """The value sets fieldeval ships (the repository's enum_data/)."""
    return bundled("enum_data")



def schema_enums() -> dict[str, list[tuple[str, str]]]:
    """The four env_broad_scale value sets from the installed nmdc-submission-schema, as (id, label)."""
    from importlib.resources import files

    path = files("nmdc_submission_schema") / "schema" / "nmdc_submission_schema.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    enums = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)["enums"]
    out: dict[str, list[tuple[str, str]]] = {}
    for prefix, enum_name in TEMPLATE_ENUMS.values():
        terms = []
        for text, value in enums[enum_name]["permissible_values"].items():
            parsed = re.fullmatch(r"(.+?)\s*\[([A-Za-z][A-Za-z0-9_]*:\d+)\]", (value or {}).get("text", text))
            if parsed is None:
                raise ValueError(f"{enum_name}: permissible value {text!r} is not 'label [CURIE]'")
            terms.append((parsed.group(2), parsed.group(1)))
        out[prefix] = sorted(terms)
    return out


def enum_file(enum_dir: Path, prefix: str) -> Path:
    """The value-set file for a template prefix, e.g. ``soil_env_broad_scale.tsv``."""
    return enum_dir / f"{prefix}_env_broad_scale.tsv"


def write_enums(enum_dir: Path) -> list[Path]:
    """Write the four value-set TSVs (columns ``id``, ``label``) and return their paths."""
    enum_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for prefix, terms in schema_enums().items():
        path = enum_file(enum_dir, prefix)
        written.append(write_tsv(path, ["id", "label"], terms))
    return written


def load_enum_terms(enum_dir: Path | None = None) -> dict[str, list[tuple[str, str]]]:
    """Template name -> its allowed (id, label) pairs, for templates that have a value set."""
    default = default_enum_dir()
    enum_dir = Path(enum_dir) if enum_dir else default
    out: dict[str, list[tuple[str, str]]] = {}
    for template, (prefix, _) in TEMPLATE_ENUMS.items():
        path = enum_file(enum_dir, prefix)
        if not path.is_file():
            if enum_dir != default:
                raise UsageError(f"--enum-dir {enum_dir}: {path.name} is missing; run `fieldeval enums` to write it")
            continue
        _, rows = read_tsv(path, what="--enum-dir", required=("id", "label"), hint="run `fieldeval enums` to rewrite it")
        out[template] = [(row["id"], row["label"]) for row in rows]
    return out


def load_enums(enum_dir: Path | None = None) -> dict[str, frozenset[str]]:
    """Template name -> the CURIEs of its value set."""
    return {template: frozenset(i for i, _ in terms) for template, terms in load_enum_terms(enum_dir).items()}
