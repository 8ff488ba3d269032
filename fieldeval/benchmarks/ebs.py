"""env_broad_scale (NMDC): cases, value sets, scoring of results tables, aggregation."""

from __future__ import annotations

import csv
import dataclasses
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import yaml

from fieldeval.data import fetch, sha256_of
from fieldeval.errors import UsageError
from fieldeval.stats import mean_metric
from scorers.ebs import EbsScore, OntologyIndex, score_ebs

NAME = "ebs"
HEADLINE = ["ontology_score", "exact_match", "hierarchy_score", "in_template_enum", "parse_success"]
METRICS = ["ontology_score", "exact_match", "parse_success", "curie_label_valid", "hierarchy_score", "in_template_enum"]
SUITE_FILE = "nmdc-ai-eval/ebs-suite.yaml"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ENUM_DIR = PROJECT_ROOT / "enum_data"
SCHEMA_PACKAGE = "nmdc-submission-schema"

# template -> (enum file prefix, LinkML enum in nmdc-submission-schema)
TEMPLATE_ENUMS: dict[str, tuple[str, str]] = {
    "soil_data": ("soil", "EnvBroadScaleSoilEnum"),
    "water_data": ("water", "EnvBroadScaleWaterEnum"),
    "sediment_data": ("sediment", "EnvBroadScaleSedimentEnum"),
    "plant_associated_data": ("plant_associated", "EnvBroadScalePlantAssociatedEnum"),
}

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

SCORE_COLUMNS = [field.name for field in dataclasses.fields(EbsScore)]
COST_COLUMNS = ["response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd"]


# --- value sets -------------------------------------------------------------------------------


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
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["id", "label"])
            writer.writerows(terms)
        written.append(path)
    return written


def load_enum_terms(enum_dir: Path | None = None) -> dict[str, list[tuple[str, str]]]:
    """Template name -> its allowed (id, label) pairs, for templates that have a value set."""
    enum_dir = Path(enum_dir) if enum_dir else DEFAULT_ENUM_DIR
    out: dict[str, list[tuple[str, str]]] = {}
    for template, (prefix, _) in TEMPLATE_ENUMS.items():
        path = enum_file(enum_dir, prefix)
        if not path.is_file():
            if enum_dir != DEFAULT_ENUM_DIR:
                raise UsageError(f"--enum-dir {enum_dir}: {path.name} is missing; run `fieldeval enums` to write it")
            continue
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        if rows and not {"id", "label"} <= set(rows[0]):
            raise UsageError(f"{path}: columns must be 'id' and 'label'; run `fieldeval enums` to rewrite it")
        out[template] = [(row["id"], row["label"]) for row in rows]
    return out


def load_enums(enum_dir: Path | None = None) -> dict[str, frozenset[str]]:
    """Template name -> the CURIEs of its value set."""
    return {template: frozenset(i for i, _ in terms) for template, terms in load_enum_terms(enum_dir).items()}


# --- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EbsCase:
    """One env_broad_scale case from a suite.

    Attributes:
        case_id: position in the suite, e.g. ``case017``.
        stratum: the truth's label (the suite is stratified on it).
        template: the MIxS environmental package (``sampleData``).
        prompt: the rendered prompt, verbatim from the suite.
        ideal: the truth as ``label [CURIE]``.
    """

    case_id: str
    stratum: str
    template: str
    prompt: str
    ideal: str

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


def load_suite(path: str | Path | None = None) -> EbsSuite:
    """Load an llm-matrix suite YAML; None means the pinned upstream suite."""
    path = Path(path) if path else fetch(SUITE_FILE)
    if not path.is_file():
        raise UsageError(f"--ebs-suite {path}: no such file; pass a suite written by `fieldeval generate ebs`")
    try:
        suite = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        template = suite["templates"][suite.get("template") or next(iter(suite["templates"]))]
        system = template["system"]
        raw_cases = suite["cases"]
    except (yaml.YAMLError, KeyError, TypeError, StopIteration) as error:
        raise UsageError(f"--ebs-suite {path}: not an llm-matrix suite ({type(error).__name__}: {error})") from None
    cases = []
    for number, raw in enumerate(raw_cases):
        original = raw.get("original_input") or {}
        tags = raw.get("tags") or []
        template_name = original.get("sampleData") or (tags[0] if tags else "") or _template_from_prompt(raw["input"])
        stratum = re.sub(r"\s*\[.*\]\s*$", "", raw["ideal"]).lstrip("_")
        cases.append(EbsCase(f"case{number:03d}", stratum, template_name, raw["input"], raw["ideal"]))
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
    with open(source_tsv, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        missing = [c for c in [*INPUT_COLUMNS, TARGET_COLUMN] if c not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(f"{source_tsv}: missing column(s) {', '.join(missing)}; the source TSV needs "
                             f"{', '.join([*INPUT_COLUMNS, TARGET_COLUMN])}")
        rows = [row for row in reader if (row[TARGET_COLUMN] or "").strip()]
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


# --- scoring tables ---------------------------------------------------------------------------


def score_row(response: str, ideal: str, template: str, *, index: OntologyIndex, enums: dict[str, frozenset[str]]) -> dict:
    """Every scored column for one response, as a plain dict."""
    return dataclasses.asdict(score_ebs(response, ideal, index=index, allowed=enums.get(template)))


def template_of(row: dict) -> str:
    """The template of a results row: ``sampleData`` or, failing that, from ``case_original_input``."""
    value = row.get("sampleData")
    if isinstance(value, str) and value.strip():
        return value.strip()
    match = re.search(r"sampleData['\"]?\s*[:=]\s*['\"]?(\w+)", str(row.get("case_original_input") or ""))
    return match.group(1) if match else ""


def check_results_columns(columns) -> None:
    """Raise a one-line usage error when an llm-matrix results table lacks a column scoring needs."""
    missing = [c for c in ["model", "case_ideal", "response_text"] if c not in columns]
    if "sampleData" not in columns and "case_original_input" not in columns:
        missing.append("sampleData or case_original_input")
    if missing:
        raise UsageError(f"results table is missing column(s): {', '.join(missing)}; "
                         "expected an llm-matrix results.tsv")


def score_results(df, *, index: OntologyIndex, enums: dict[str, frozenset[str]]):
    """Add the scored columns (and empty cost columns where absent) to an llm-matrix results table."""
    import pandas as pd

    check_results_columns(df.columns)
    records = df.to_dict("records")
    scored = pd.DataFrame(
        [score_row(_text(r["response_text"]), _text(r["case_ideal"]), template_of(r), index=index, enums=enums)
         for r in records],
        columns=SCORE_COLUMNS,
        index=df.index,
    )
    out = pd.concat([df.drop(columns=[c for c in SCORE_COLUMNS if c in df.columns]), scored], axis=1)
    for column in COST_COLUMNS:
        if column not in out.columns:
            out[column] = None
    out["hop_distance"] = out["hop_distance"].astype("Int64")
    return out


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def summary_lines(df) -> list[str]:
    """The per-model summary printed after scoring a results table."""
    lines = ["", "env_broad_scale scoring summary", "", "Model ranking (mean ontology_score):"]
    models = df.groupby("model")["ontology_score"].agg(["mean", "count"]).sort_values("mean", ascending=False)
    for model, row in models.iterrows():
        lines.append(f"  {row['mean']:.3f}  {model}  (n={int(row['count'])})")
    for title, column in [("Exact match rate", "exact_match"), ("Parse rate", "parse_success"),
                          ("CURIE-label validity", "curie_label_valid")]:
        lines += ["", f"{title}:"]
        for model, rate in df.groupby("model")[column].mean().items():
            lines.append(f"  {rate:6.1%}  {model}")
    lines += ["", "Enum compliance (rows whose template has a value set):"]
    for model, group in df.groupby("model"):
        with_enum = group["in_template_enum"].dropna()
        rate = f"{with_enum.astype(bool).mean():6.1%}" if len(with_enum) else "   n/a"
        lines.append(f"  {rate}  {model}  (n={len(with_enum)})")
    lines += ["", "Relationship breakdown (descendant = more specific, ancestor = vaguer):"]
    for model, group in df.groupby("model"):
        counts = Counter(group["relationship"].fillna("parse_failure"))
        lines.append(f"  {model}: " + ", ".join(f"{k}={counts[k]}" for k in sorted(counts)))
    return lines


# --- plugin face ------------------------------------------------------------------------------


def add_options(group) -> None:
    """env_broad_scale options."""
    group.addoption("--ontology", dest="fieldeval_ontology", default=None, metavar="SELECTOR",
                    help="oaklib selector of the ontology to score against (default: the pinned ENVO OBO)")
    group.addoption("--enum-dir", dest="fieldeval_enum_dir", default=None, metavar="DIR",
                    help="folder of <template>_env_broad_scale.tsv value sets (default: enum_data/)")
    group.addoption("--ebs-suite", dest="fieldeval_ebs_suite", default=None, metavar="PATH",
                    help="llm-matrix suite YAML to run (default: the pinned upstream suite)")


def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Per-metric values with bootstrap intervals, relationship counts and per-stratum scores."""
    out: dict = {}
    for metric in METRICS[:-1]:
        out[metric] = mean_metric([float(r[metric]) for r in rows], seed=seed, resamples=resamples)
    out["in_template_enum"] = mean_metric(
        [float(r["in_template_enum"]) for r in rows if r["in_template_enum"] is not None],
        seed=seed, resamples=resamples,
    )
    counts = Counter(r["relationship"] or "parse_failure" for r in rows)
    out["relationship_counts"] = {k: counts.get(k, 0) for k in
                                  ["exact", "descendant", "ancestor", "unrelated", "parse_failure"]}
    strata: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        strata[row["stratum"]].append(row)
    out["per_stratum"] = {
        stratum: {m: mean_metric([float(r[m]) for r in group], seed=seed, resamples=resamples)
                  for m in ["ontology_score", "exact_match"]}
        for stratum, group in sorted(strata.items())
    }
    return out


def write_outputs(rows: list[dict], reports_dir: Path) -> list[Path]:
    """Write the run's scored table as ``reports/ebs/results_envo_scored.tsv``."""
    import pandas as pd

    folder = reports_dir / NAME
    folder.mkdir(parents=True, exist_ok=True)
    columns = ["model", "case_id", "stratum", "sampleData", "case_ideal", "response_text",
               *SCORE_COLUMNS, *COST_COLUMNS, "cached"]
    df = pd.DataFrame(rows).reindex(columns=columns)
    df["hop_distance"] = df["hop_distance"].astype("Int64")
    path = folder / "results_envo_scored.tsv"
    df.to_csv(path, sep="\t", index=False)
    return [path]


@dataclass(frozen=True)
class EbsContext:
    """What an EBS eval item needs: the suite, the ontology index and the value sets."""

    suite: EbsSuite
    index: OntologyIndex
    enums: dict[str, frozenset[str]]


_contexts: dict[tuple, EbsContext] = {}


def ebs_context(config) -> EbsContext:
    """The EBS context for a pytest config's options, built once per process.

    A user mistake found here (during collection) ends the session with its
    one line and exit status 2, as :func:`prepare` does before collection.
    """
    import pytest

    from fieldeval.ontology import load_index

    key = (config.getoption("fieldeval_ebs_suite"), config.getoption("fieldeval_ontology"),
           config.getoption("fieldeval_enum_dir"))
    if key not in _contexts:
        try:
            _contexts[key] = EbsContext(load_suite(key[0]), load_index(key[1]), load_enums(key[2]))
        except UsageError as error:
            pytest.exit(str(error), returncode=2)
    return _contexts[key]


def prepare(config) -> None:
    """Load the suite, ontology index and value sets once before collection (warming the cache for workers)."""
    from fieldeval.ontology import load_index

    load_suite(config.getoption("fieldeval_ebs_suite"))
    load_index(config.getoption("fieldeval_ontology"))
    load_enums(config.getoption("fieldeval_enum_dir"))


def run_meta(config) -> dict:
    """The suite name and content hash this run used, for the run store."""
    suite = ebs_context(config).suite
    return {"corpus_version": suite.name, "content_hash": f"sha256:{suite.sha256}"}
