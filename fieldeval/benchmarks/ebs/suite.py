"""env_broad_scale suites: the llm-matrix suite format, its cases, and ``fieldeval generate ebs``."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from fieldeval.benchmarks.ebs.enums import load_enum_terms
from fieldeval.data import fetch, sha256_of
from fieldeval.errors import UsageError
from fieldeval.inputs import read_tsv, read_yaml

SUITE_FILE = "nmdc-ai-eval/ebs-suite.yaml"

INPUT_COLUMNS = [
    "study_name",
    "description",
    "notes",
    "sampleData",
    "env_local_scale",
    "env_medium",
    "geo_loc_name",
    "depth",
    "analysis_type",
]
TARGET_COLUMN = "env_broad_scale"
DESCRIPTION_LIMIT = 500

SYSTEM_PROMPT = (
    "You are an expert in environmental ontologies (ENVO) and the MIxS metadata standard.\n"
    "Given metadata about an NMDC biosample, predict the env_broad_scale value.\n\n"
    "Your answer MUST be in the exact format: label [CURIE]\n"
    "For example: terrestrial biome [ENVO:00000446]\n\n"
    "Use only ENVO terms. Reply with ONLY the env_broad_scale value, nothing else."
)

PROMPT_TEMPLATE = (
    "Predict the env_broad_scale (broad-scale environmental context) for this biosample.\n\n"
    "Study: {study_name}\n"
    "Description: {description}\n"
    "Notes: {notes}\n"
    "Environmental package: {sampleData}\n"
    "env_local_scale: {env_local_scale}\n"
    "env_medium: {env_medium}\n"
    "Geographic location: {geo_loc_name}\n"
    "Depth: {depth}\n"
    "Analysis type: {analysis_type}\n"
    "{allowed_values_section}"
)

@dataclass(frozen=True)
class EbsCase:
    """One env_broad_scale case from a suite.

    Attributes:
        case_id: position in the suite, e.g. ``case017``.
        stratum: the truth's label (the suite is stratified on it).
        template: the MIxS environmental package (``sampleData``).
        prompt: the rendered prompt, verbatim from the suite.
        ideal: the truth as ``label [CURIE]``.
        study: the study the biosample comes from (the case's cluster), from the suite's ``cluster`` or
            ``study`` field, else the prompt's ``Study:`` line; empty when none.
    """

    case_id: str
    stratum: str
    template: str
    prompt: str
    ideal: str
    study: str = ""

    @property
    def test_id(self) -> str:
        """A readable pytest id: stratum and case."""
        return f"{re.sub(r'[^A-Za-z0-9]+', '_', self.stratum).strip('_')}-{self.case_id}"


@dataclass(frozen=True)
class EbsSuite:
    """A suite: its system prompt, cases and content hash."""

    name: str
    system: str
    cases: tuple[EbsCase, ...]
    sha256: str


def study_of(raw: dict) -> str:
    """A suite case's study: its ``cluster`` or ``study`` field, else the ``Study:`` line of its input (without
    a trailing sample-set code in parentheses).

    Example:
        >>> study_of({"input": "Predict.\\nStudy: Soil warming (AY23_plt05)\\nDescription: ..."})
        'Soil warming'
    """
    original = raw.get("original_input") if isinstance(raw.get("original_input"), dict) else {}
    for value in (raw.get("cluster"), raw.get("study"), original.get("cluster"), original.get("study")):
        if value not in (None, ""):
            return str(value)
    found = re.search(r"^Study:[ \t]*(.+)$", str(raw.get("input") or ""), flags=re.MULTILINE)
    # the line may end in a sample-set code, "... climate change (AY23_plt05)": one study, not one per code
    return re.sub(r"\s*\([A-Za-z0-9_.-]+\)$", "", found.group(1).strip()) if found else ""


def load_suite(path: str | Path | None = None) -> EbsSuite:
    """Load an llm-matrix suite YAML; None means the pinned upstream suite."""
    path = Path(path) if path else fetch(SUITE_FILE)
    if not path.is_file():
        raise UsageError(f"--ebs-suite {path}: no such file; pass a suite written by `fieldeval generate ebs`")
    suite = read_yaml(path, what="--ebs-suite", hint="pass a suite written by `fieldeval generate ebs`")
    cases = []
    try:
        template = suite["templates"][suite.get("template") or next(iter(suite["templates"]))]
        system = template["system"]
        for number, raw in enumerate(suite["cases"] or []):
            original = raw.get("original_input") or {}
            tags = raw.get("tags") or []
            template_name = (original.get("sampleData") or (tags[0] if tags else "")
                             or _template_from_prompt(raw["input"]))
            stratum = re.sub(r"\s*\[.*\]\s*$", "", raw["ideal"]).lstrip("_")
            cases.append(EbsCase(f"case{number:03d}", stratum, template_name, raw["input"], raw["ideal"],
                                 study_of(raw)))
    except (KeyError, TypeError, AttributeError, StopIteration) as error:
        raise UsageError(f"--ebs-suite {path}: not an llm-matrix suite ({type(error).__name__}: {error})") from None
    if not cases:
        raise UsageError(f"--ebs-suite {path}: the suite has no cases; generate one with `fieldeval generate ebs`")
    return EbsSuite(suite.get("name", path.stem), system, tuple(cases), sha256_of(path))


def _template_from_prompt(prompt: str) -> str:
    match = re.search(r"^Environmental package:\s*(\S+)", prompt, flags=re.M)
    return match.group(1) if match else ""


def allowed_values_section(template: str, terms: dict[str, list[tuple[str, str]]]) -> str:
    """The prompt's allowed-values block for a template (empty when it has no value set)."""
    if template not in terms:
        return ""
    values = sorted(f"{label} [{curie}]" for curie, label in terms[template])
    lines = "\n".join(f"  - {value}" for value in values)
    return f"Allowed env_broad_scale values for {template}:\n{lines}\n\nChoose from the above list."


def generate_suite(
    source_tsv: Path,
    *,
    per_category: int = 10,
    min_pool: int = 10,
    seed: int = 42,
    enum_dir: Path | None = None,
    models: list[str] | None = None,
) -> tuple[dict, dict[str, int]]:
    """Build an llm-matrix suite from a source TSV by the upstream sampling rules.

    Rows with an empty target are dropped, rows are deduplicated on the nine
    input slots plus the target, strata with fewer than ``min_pool`` unique
    rows are left out, and ``per_category`` rows are sampled from each stratum
    with ``seed``. GOLD ecosystem columns never reach the prompt.

    Returns:
        The suite as a dict and the unique-row count of every stratum.
    """
    _, rows = read_tsv(source_tsv, what="SOURCE_TSV", required=[*INPUT_COLUMNS, TARGET_COLUMN])
    rows = [row for row in rows if (row[TARGET_COLUMN] or "").strip()]
    seen: set[tuple[str, ...]] = set()
    pools: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        key = tuple(row[c] or "" for c in [*INPUT_COLUMNS, TARGET_COLUMN])
        if key not in seen:
            seen.add(key)
            pools[row[TARGET_COLUMN]].append(row)
    rng = random.Random(seed)
    terms = load_enum_terms(enum_dir)
    cases = []
    for category in sorted(c for c, pool in pools.items() if len(pool) >= min_pool):
        pool = pools[category]
        for row in rng.sample(pool, min(per_category, len(pool))):
            values = {c: (row[c] or "").lstrip("_") for c in INPUT_COLUMNS}
            if len(values["description"]) > DESCRIPTION_LIMIT:
                values["description"] = values["description"][: DESCRIPTION_LIMIT - 3] + "..."
            values["allowed_values_section"] = allowed_values_section(row["sampleData"], terms)
            ideal = row[TARGET_COLUMN].lstrip("_")
            cases.append({
                "input": PROMPT_TEMPLATE.format(**values),
                "ideal": ideal,
                "tags": [row["sampleData"], ideal],
                "original_input": {
                    "study_name": row["study_name"],
                    "sampleData": row["sampleData"],
                    "env_broad_scale": row[TARGET_COLUMN],
                },
            })
    suite = {
        "name": "nmdc-ebs-prediction",
        "description": f"Predict env_broad_scale from non-GOLD biosample metadata. Generated from {Path(source_tsv).name}.",
        "template": "predict_ebs",
        "templates": {"predict_ebs": {"system": SYSTEM_PROMPT, "prompt": "{input}", "metrics": ["simple_question"]}},
        "matrix": {"hyperparameters": {"model": models or [], "temperature": [0.0]}},
        "cases": cases,
    }
    return suite, {category: len(pool) for category, pool in sorted(pools.items())}
